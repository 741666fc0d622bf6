#!/usr/bin/env python3
"""Check a Hermes WebUI checkout with the two-line accelerator before adopting it.

Copies the checkout twice to a temporary directory, appends the two-line suffix to one
copy's ``api/agent_runtime.py``::

    from stalewatch.hermes import accelerate
    accelerate(sys.modules[__name__])

runs the WebUI's own guard tests (by default every test file under ``tests/`` that
mentions ``agent_runtime``) in both copies, prints both summaries, and compares the
outcome of every test. The checkout itself is never changed: each copy is a clone
sharing its objects (``git clone --shared``, own refs, index and stash) with the working
tree copied over it, uncommitted changes included; virtualenvs, ``node_modules`` and
caches are left out. A checkout that is not a git repository is copied as it is.

The Python used must have the WebUI's test dependencies and stalewatch installed
(``pip install -r requirements-dev.txt stalewatch``).

Usage:
    python scripts/check_hermes.py WEBUI_CHECKOUT [--python PY] [--tests FILE ...]
        [--timeout SECONDS] [--keep]

Exit status: 0 when every test has the same outcome with and without the suffix (and
both suffixes accelerated the module, the daemon's also linking it), 1 otherwise, 2 for
bad input.
"""

from __future__ import annotations

import argparse
import ast
import os
import re
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

SUFFIX = "\nfrom stalewatch.hermes import accelerate\naccelerate(sys.modules[__name__])\n"
# The lines docs/hermes.md and `stalewatch hermes setup` give for use with the daemon:
# a third copy ends with them and must import, accelerate and link the daemon.
DAEMON_SUFFIX = "\nfrom stalewatch.hermes import accelerate\naccelerate(sys.modules[__name__], daemon=True)\n"
RUNTIME = Path("api") / "agent_runtime.py"
_SHOWN = 25
IGNORED = shutil.ignore_patterns(".git", ".venv", "venv", "node_modules", "__pycache__", ".pytest_cache")
_SUMMARY = re.compile(
    r"^=*\s*(\d+ (passed|failed|error|errors|skipped|deselected|xfailed|xpassed)\b.*?)\s*=*$"
)

# Imports the accelerated module in isolation (state under a temporary home) and says
# whether its read was replaced.
_PROBE = """
import sys
import api.agent_runtime as runtime
accelerated = hasattr(runtime._read_agent_revision, "__stalewatch_original__")
view = getattr(runtime._read_agent_revision, "__stalewatch_view__", None)
print(("accelerated" if accelerated else "not accelerated") + (", daemon linked" if view else ""))
"""


def guard_tests(checkout: Path) -> list[str]:
    """The WebUI's test files that exercise ``api.agent_runtime``."""
    found = []
    for path in sorted((checkout / "tests").glob("test_*.py")):
        try:
            if "agent_runtime" in path.read_text(encoding="utf-8", errors="replace"):
                found.append(path.relative_to(checkout).as_posix())
        except OSError:
            continue
    return found


def make_copy(checkout: Path, copy: Path) -> None:
    """A clone sharing the checkout's objects, with the working tree copied over it.

    The WebUI's tests run git in their own checkout (``check-ignore``, ``stash``): the
    copy is a repository of its own, so nothing they do reaches the user's.
    """
    if (checkout / ".git").exists():
        done = subprocess.run(
            ["git", "clone", "-q", "--shared", "--no-checkout", str(checkout), str(copy)],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        if done.returncode == 0:
            subprocess.run(
                ["git", "-C", str(copy), "read-tree", "HEAD"], capture_output=True, timeout=300, check=False
            )
    shutil.copytree(checkout, copy, symlinks=True, ignore=IGNORED, dirs_exist_ok=True)
    # The new index has no stat data yet: without a refresh, `git diff-index` (behind
    # the WebUI's "-dirty" version) would call every file modified until something
    # refreshed it.
    subprocess.run(
        ["git", "-C", str(copy), "update-index", "-q", "--refresh"],
        capture_output=True,
        timeout=300,
        check=False,
    )


def apply_suffix(copy: Path, suffix: str = SUFFIX) -> None:
    """Append the two lines; add ``import sys`` first if the file does not import it."""
    runtime = copy / RUNTIME
    source = runtime.read_text(encoding="utf-8")
    tree = ast.parse(source)
    imports_sys = any(
        isinstance(node, ast.Import)
        and any(alias.name == "sys" and alias.asname is None for alias in node.names)
        for node in tree.body
    )
    runtime.write_text(source + ("" if imports_sys else "\nimport sys\n") + suffix, encoding="utf-8")


def probe(python: str, copy: Path, scratch: Path) -> str:
    home = scratch / "probe-home"
    home.mkdir(exist_ok=True)
    env = {
        **os.environ,
        "HERMES_WEBUI_PYTHON": python,
        "HOME": str(home),
        "HERMES_HOME": str(home / ".hermes"),
        "HERMES_WEBUI_STATE_DIR": str(home / "state"),
        "PYTHONDONTWRITEBYTECODE": "1",
        "STALEWATCH_SOCKET": str(home / "stalewatch.sock"),  # nobody listens: the lines must not care
    }
    done = subprocess.run(
        [python, "-c", _PROBE], cwd=copy, env=env, capture_output=True, text=True, timeout=120, check=False
    )
    if done.returncode != 0:
        return f"import failed: {(done.stderr.strip().splitlines() or ['?'])[-1]}"
    return done.stdout.strip()


def run_tests(
    python: str, copy: Path, tests: list[str], report: Path, timeout: float
) -> tuple[str, dict[str, str]]:
    """Run pytest in ``copy``; return its summary line and each test's outcome."""
    # The WebUI's conftest starts its test server with HERMES_WEBUI_PYTHON (else the
    # first python3 it finds): the same Python in both runs, the one with stalewatch.
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "HERMES_WEBUI_PYTHON": python}
    command = [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={report}", *tests]
    try:
        done = subprocess.run(
            command, cwd=copy, env=env, capture_output=True, text=True, timeout=timeout, check=False
        )
        output = done.stdout + done.stderr
    except subprocess.TimeoutExpired as exc:
        output = f"{exc.stdout or ''}timed out after {timeout:.0f} s"
    summary = next(
        (m.group(1) for line in reversed(output.splitlines()) if (m := _SUMMARY.match(line.strip()))),
        (output.strip().splitlines() or ["no output"])[-1],
    )
    return summary, outcomes(report)


def outcomes(report: Path) -> dict[str, str]:
    """``{test id: passed|failed|error|skipped}`` from a JUnit XML report."""
    try:
        root = ET.parse(report).getroot()  # noqa: S314 - pytest's own report, written just now
    except (OSError, ET.ParseError):
        return {}
    result = {}
    for case in root.iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        kinds = {child.tag for child in case}
        outcome = next((k for k in ("failure", "error", "skipped") if k in kinds), "passed")
        result[name] = {"failure": "failed"}.get(outcome, outcome)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkout", type=Path, help="a Hermes WebUI checkout (never modified)")
    parser.add_argument("--python", default=sys.executable, help="the Python to run the tests with")
    parser.add_argument(
        "--tests", nargs="+", help="test files, relative to the checkout (default: guard tests)"
    )
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per test run")
    parser.add_argument("--keep", action="store_true", help="keep the temporary copies and print where")
    args = parser.parse_args()
    checkout = args.checkout.resolve()
    if not (checkout / RUNTIME).is_file():
        print(f"check_hermes: {checkout} has no {RUNTIME}: not a Hermes WebUI checkout", file=sys.stderr)
        return 2
    tests = args.tests or guard_tests(checkout)
    if not tests:
        print(
            f"check_hermes: no test file under {checkout / 'tests'} mentions agent_runtime", file=sys.stderr
        )
        return 2
    scratch = Path(tempfile.mkdtemp(prefix="check-hermes-"))
    try:
        plain, fast, linked = scratch / "without", scratch / "with", scratch / "daemon"
        for copy in (plain, fast, linked):
            make_copy(checkout, copy)
        apply_suffix(fast)
        apply_suffix(linked, DAEMON_SUFFIX)
        print(f"WebUI checkout: {checkout}")
        print(f"python: {args.python}")
        print(f"tests: {len(tests)} files: {' '.join(tests)}")
        state = probe(args.python, fast, scratch)
        print(f"with the suffix, api.agent_runtime is {state}")
        daemon_state = probe(args.python, linked, scratch)
        print(f"with the daemon lines (daemon=True), api.agent_runtime is {daemon_state}")
        without, before = run_tests(args.python, plain, tests, scratch / "without.xml", args.timeout)
        print(f"without the suffix: {without}")
        with_suffix, after = run_tests(args.python, fast, tests, scratch / "with.xml", args.timeout)
        print(f"with the suffix:    {with_suffix}")
        differ = sorted(name for name in before.keys() | after.keys() if before.get(name) != after.get(name))
        for name in differ[:_SHOWN]:
            print(f"  differs: {name}: {before.get(name, 'absent')} / {after.get(name, 'absent')}")
        failing = sorted(name for name, outcome in before.items() if outcome in ("failed", "error"))
        for name in failing[:_SHOWN]:
            print(f"  fails without the suffix too: {name} ({before[name]})")
        if max(len(differ), len(failing)) > _SHOWN:
            print(f"  (at most {_SHOWN} of each listed; --keep keeps the JUnit reports)")
        same = len(before) - len([n for n in differ if n in before])
        print(f"per test: {same} identical outcomes, {len(differ)} differ")
        if args.keep:
            print(f"copies kept in {scratch}")
        lines_work = state == "accelerated" and daemon_state == "accelerated, daemon linked"
        return 0 if not differ and before and lines_work else 1
    finally:
        if not args.keep:
            shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
