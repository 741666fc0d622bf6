"""The fenced blocks of README.md and docs/*.md, and how each one is exercised.

A block is tied to its handling by a marker comment on the line before its fence
(blank lines between allowed)::

    <!-- example: NAME -->

Python and shell blocks must carry a marker: either a handler in
``test_doc_examples.py`` runs them, or :data:`PARSED_ONLY` lists them with the reason
they are only parsed. Other languages have one handling each, no marker needed:
``toml`` (a real daemon loads it), ``yaml`` and ``promql`` (their parsers, promtool
where installed), ``js`` (``node --check``), ``text`` and ``console`` (output shown,
not run; a console block's ``$`` lines are parsed as shell).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_FENCE = re.compile(r"^```(\S*)\s*$")
_MARKER = re.compile(r"^<!-- example: ([a-z0-9-]+) -->$")

OUTPUT_LANGUAGES = {"text", "console"}
MARKED_LANGUAGES = {"python", "sh"}
PARSED_LANGUAGES = {"toml", "yaml", "promql", "js"}

# Shell blocks that are only parsed (bash -n), and why they are not run here. Reviewed:
# each needs root, systemd as PID 1, the network, or is the test runner itself.
PARSED_ONLY: dict[str, str] = {
    "install-from-pypi": "downloads from PyPI (the package is not published yet); "
    "installing from this tree is what ./scripts/test does on every run",
    "install-metrics": "downloads from PyPI; the metrics extra is installed by ./scripts/test (test extra)",
    "install-from-clone": "creates a virtual environment and installs into it from the package index; "
    "./scripts/test does the same on every run",
    "daemon-system-paths": "needs /run/stalewatch (made by systemd's RuntimeDirectory=) and a "
    "configuration in /etc/stalewatch; the same commands run with a /tmp socket in daemon-quickstart",
    "hook-updater": "pulls from a remote and pip-installs requirements; the hold_while marker it "
    "creates is tested against a real daemon in tests/daemon/test_hooks.py",
    "systemd-install": "needs root and systemd as PID 1; the unit files are checked by "
    "tests/daemon/test_systemd_units.py (systemd-analyze verify)",
    "metrics-dropins": "needs root and systemd as PID 1; the drop-ins are checked by "
    "tests/metrics/test_metrics_units.py (systemd-analyze verify)",
    "inotify-sysctl": "changes kernel settings as root",
    "run-tests": "is the test runner itself (it would run this test again)",
    "readme-dev": "is the test runner itself (it would run this test again)",
    "quick-loop": "is the test runner itself (it would run this test again)",
    "bench-setup": "is the test runner itself, then a benchmark of minutes; the scripts' --quick "
    "runs are in tests/scripts/test_bench_scripts.py",
    "docs-serve": "serves until interrupted; ./scripts/test builds the same site with mkdocs build --strict",
}


@dataclass(frozen=True)
class Block:
    """One fenced block: where it is, its language, its text, its marker (if any)."""

    path: Path
    line: int
    language: str
    code: str
    marker: str | None

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"

    @property
    def id(self) -> str:
        return f"{self.marker or self.language}@{self.where}"


def blocks(paths: list[Path] = SOURCES) -> list[Block]:
    """Every fenced block of ``paths``, in order."""
    found = []
    for path in paths:
        lines = path.read_text().splitlines()
        number = 0
        while number < len(lines):
            opening = _FENCE.match(lines[number])
            if not opening:
                number += 1
                continue
            end = number + 1
            while end < len(lines) and lines[end].rstrip() != "```":
                end += 1
            if end == len(lines):
                raise AssertionError(f"{path}:{number + 1}: unclosed fence")
            before = number - 1
            while before >= 0 and not lines[before].strip():
                before -= 1
            marker = _MARKER.match(lines[before]) if before >= 0 else None
            code = "\n".join(lines[number + 1 : end]) + "\n"
            found.append(Block(path, number + 1, opening.group(1), code, marker.group(1) if marker else None))
            number = end + 1
    return found


def markers_in_docs() -> set[str]:
    """Every marker written in the sources, whether or not a fence follows it."""
    return {
        m.group(1)
        for path in SOURCES
        for m in re.finditer(r"<!-- example: ([a-z0-9-]+) -->", path.read_text())
    }


def shell_commands(block: Block) -> list[str]:
    """The commands of a shell block, one per line (``\\`` continuations joined, comments kept)."""
    commands, pending = [], ""
    for raw in block.code.splitlines():
        if raw.rstrip().endswith("\\"):
            pending += raw.rstrip()[:-1] + " "
            continue
        line, pending = pending + raw, ""
        if line.strip() and not line.lstrip().startswith("#"):
            commands.append(line.strip())
    return commands


def console_commands(block: Block) -> str:
    """The ``$ `` lines of a console transcript, as a script."""
    return "".join(line[2:] + "\n" for line in block.code.splitlines() if line.startswith("$ "))
