#!/usr/bin/env python3
"""The docs' settings tables, written from the declarations, or checked against them.

Usage:
    .venv/bin/python scripts/settings_tables.py            # check: exit 1 naming each table that differs
    .venv/bin/python scripts/settings_tables.py --write    # rewrite the tables in docs/

A table sits in a page between ``<!-- settings: NAME -->`` and ``<!-- /settings -->``;
NAME is one of :data:`TABLES`. Its rows come from the keys' declarations
(``stalewatch.core.declared``: kind, default, doc, version) and the environment's
(``stalewatch.core.settings.VARIABLES``), so a key added, renamed or given a new default
changes the docs with it. tests/docs/test_settings_tables.py runs the check.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from pathlib import Path

from stalewatch.core.declared import declared
from stalewatch.core.settings import VARIABLES
from stalewatch.server.config import CheckoutConfig, DaemonConfig, HookConfig
from stalewatch.server.restart.policy import RestartPolicy

ROOT = Path(__file__).resolve().parents[1]
FIRST = "0.1.0"  # the first release: a key since then needs no "since"
BLOCK = re.compile(r"(<!-- settings: (?P<name>[a-z]+) -->\n)(?P<table>.*?)(<!-- /settings -->)", re.S)


def _shown(value: object) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, str):  # an enum's too (a StrEnum)
        return f'`"{value}"`'
    if isinstance(value, float):
        return f"`{value:g}`"
    return "`[]`" if value == () else f"`{value}`"


def _row(*cells: str) -> str:
    if any("\n" in cell or "|" in cell for cell in cells):  # it would break the table
        raise SystemExit(f"a newline or a | in a declaration: {cells}")
    return f"| {' | '.join(cells)} |"


def _since(version: str) -> str:
    return "" if version == FIRST else f" (since {version})"


def _keys(*classes: type, keep: Callable[[str], bool] = lambda key: True) -> list[str]:
    rows = ["| key | value | default | meaning |", "|---|---|---|---|"]
    for cls in classes:
        for key, (field, setting) in declared(cls).items():
            if keep(key):
                default = setting.shown or _shown(field.default)
                rows.append(
                    f"| `{key}` | {setting.kind.shows} | {default} | {setting.doc}{_since(setting.since)} |"
                )
    return rows


def _environment() -> list[str]:
    rows = ["| variable | value | default | meaning |", "|---|---|---|---|"]
    for v in VARIABLES:
        default = f"`{v.default}`" if v.default[:1].isalnum() and " " not in v.default else v.default
        rows.append(_row(f"`{v.name}`", v.shows, default, v.doc + _since(v.since)))
    return rows


TABLES: dict[str, Callable[[], list[str]]] = {
    "daemon": lambda: _keys(DaemonConfig, keep=lambda key: not key.startswith("metrics_")),
    "metrics": lambda: _keys(DaemonConfig, keep=lambda key: key.startswith("metrics_")),
    "checkout": lambda: _keys(CheckoutConfig, HookConfig),
    "restart": lambda: _keys(RestartPolicy),
    "environment": _environment,
}


def render(text: str, page: str, problems: list[str]) -> str:
    """``text`` with each table made anew; an unknown name is a problem."""

    def table(found: re.Match[str]) -> str:
        name = found.group("name")
        if name not in TABLES:
            problems.append(f"{page}: unknown settings table {name!r} (known: {', '.join(TABLES)})")
            return found.group(0)
        return found.group(1) + "\n".join(TABLES[name]()) + "\n" + found.group(4)

    return BLOCK.sub(table, text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="rewrite the tables instead of checking them")
    parser.add_argument("--docs", type=Path, default=ROOT / "docs", help="the docs directory")
    args = parser.parse_args(argv)
    problems: list[str] = []
    seen: set[str] = set()
    for page in sorted(args.docs.glob("*.md")):
        text = page.read_text(encoding="utf-8")
        seen.update(found.group("name") for found in BLOCK.finditer(text))
        made = render(text, page.name, problems)
        if made != text and args.write:
            page.write_text(made, encoding="utf-8")
            print(f"wrote {page}")
        elif made != text:
            problems.append(
                f"{page}: a settings table differs from the declarations (run {sys.argv[0]} --write)"
            )
    problems += [f"no page holds the settings table {name!r}" for name in TABLES if name not in seen]
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
