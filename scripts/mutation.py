#!/usr/bin/env python3
"""Mutation testing of the pure decision modules: would the tests notice a wrong line?

For each module in :data:`TARGETS`, mutmut (3.8) changes its function bodies one small
edit at a time (an operator, a constant, a call, a returned value) and runs, against
each mutant, only those of the module's test files that reach the mutated function.
A mutant the tests fail on is killed; one they pass is a survivor: a change of
behaviour nothing checks, or an equivalent mutant (one that cannot change behaviour).

Usage:
    .venv/bin/pip install -e '.[mutation]'
    .venv/bin/python scripts/mutation.py                  # every module in TARGETS
    .venv/bin/python scripts/mutation.py git/moves.py     # some of them
    .venv/bin/python scripts/mutation.py --list           # the modules and their test files

Options: ``--max-children N`` mutants tested at once (default 2); ``--nice N`` the
niceness of the run (default 19: the machine stays usable); ``--recheck`` keeps
mutmut's earlier results, tests new and changed functions' mutants and tests again
the ones that survived or timed out (after adding tests); ``--json FILE`` writes the
figures and survivors as JSON.

Each module runs in its own work directory, ``mutants/<module>/`` (git-ignored): links
to ``src/`` and ``tests/`` and a copy of ``pyproject.toml`` with a ``[tool.mutmut]``
table naming the module and its test files, written by this script (the project's
``pyproject.toml`` holds no mutmut configuration). mutmut copies the sources into that
directory's own ``mutants/`` and runs there; its log is ``mutants/<module>/mutmut.log``.

Printed per module: mutants in total, killed, survived, timed out, with no test
reaching them (``no tests``: code the selected tests never run in their process,
e.g. what only a daemon subprocess runs) and any other verdict (skipped, suspicious,
a crash); the score, ``(killed + timeout) / (killed + timeout + survived)`` — a mutant
that makes the tests hang past mutmut's CPU limit is caught, as mutmut counts it —
over the mutants of code that runs in the test process only; the wall time. Then
every survivor: its module, line and what was changed. Not part of the test suite
(minutes per module); ``tests/scripts/test_mutation_script.py`` checks the list.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "stalewatch"
WORK = ROOT / "mutants"
MUTMUT_SERIES = "3.8."


@dataclass(frozen=True)
class Target:
    """A module to mutate (path under ``src/stalewatch``) and the test files that cover it.

    ``deselect``: tests of those files left out (pytest node ids): slow ones that check
    another module's behaviour and would run, whole, against every surviving mutant.
    """

    module: str
    tests: tuple[str, ...]
    deselect: tuple[str, ...] = ()

    @property
    def source(self) -> str:
        return f"src/stalewatch/{self.module}"

    @property
    def name(self) -> str:
        return self.module.removesuffix(".py").replace("/", ".")


_PROTOCOL_TESTS = (
    "tests/protocol/test_codec.py",
    "tests/protocol/test_messages.py",
    "tests/protocol/test_properties.py",
)
_MACHINE_TESTS = (
    "tests/server/test_restart_machine.py",
    "tests/server/test_restart_machine_properties.py",
    "tests/server/test_restart_decisions.py",
)
_MACHINE_MODULES = ("machine", "stages", "run", "state")

# The pure decision modules and the tests that cover each: extend here and nowhere else.
TARGETS: tuple[Target, ...] = (
    Target("core/status.py", ("tests/core/test_status.py", "tests/guard/test_guard.py")),
    Target(
        "git/refs.py",
        (
            "tests/git/test_refs.py",
            "tests/git/test_refs_properties.py",
            "tests/git/test_refs_git_oracle.py",
            "tests/git/test_packed.py",
        ),
    ),
    Target(
        "git/files.py",
        (
            "tests/git/test_refs.py",
            "tests/git/test_refs_properties.py",
            "tests/git/test_refs_git_oracle.py",
            "tests/git/test_packed.py",
        ),
    ),
    Target(
        "git/packed.py",
        (
            "tests/git/test_packed.py",
            "tests/git/test_packed_edges.py",
            "tests/git/test_refs_properties.py",
            "tests/git/test_refs.py",
        ),
    ),
    Target("git/reflog.py", ("tests/git/test_reflog.py", "tests/core/test_cause.py")),
    Target(
        "git/moves.py",
        ("tests/git/test_moves.py", "tests/git/test_reflog.py"),
        # The reflog parser's fuzzing (30 s a run): reflog.py's target runs it.
        deselect=(
            "tests/git/test_reflog.py::test_any_bytes_give_a_cause_or_none",
            "tests/git/test_reflog.py::test_parsing_only_the_relevant_lines_gives_the_same_cause",
        ),
    ),
    Target(
        "core/cause.py",
        ("tests/git/test_reflog.py",),
        deselect=(
            "tests/git/test_reflog.py::test_any_bytes_give_a_cause_or_none",
            "tests/git/test_reflog.py::test_parsing_only_the_relevant_lines_gives_the_same_cause",
        ),
    ),
    Target("watching/plan.py", ("tests/watching/test_plan.py",)),
    Target("protocol/codec.py", _PROTOCOL_TESTS),
    Target("protocol/messages.py", _PROTOCOL_TESTS),
    Target("server/restart/markers.py", ("tests/server/test_restart_markers.py",)),
    Target(
        "server/restart/policy.py",  # and Rules, what the machine reads of it
        ("tests/server/test_restart_config.py", "tests/server/test_restart_parsers.py", *_MACHINE_TESTS),
    ),
    # The restart state machine: machine.py and the pure modules it steps through.
    *(Target(f"server/restart/{name}.py", _MACHINE_TESTS) for name in _MACHINE_MODULES),
)

_COLUMNS = ("total", "killed", "survived", "timeout", "no tests", "other")


@dataclass
class Survivor:
    module: str
    line: int
    function: str
    mutant: str
    removed: list[str]
    added: list[str]


@dataclass
class Result:
    module: str
    counts: dict[str, int]
    seconds: float
    survivors: list[Survivor] = dataclasses.field(default_factory=list)

    @property
    def score(self) -> float | None:
        caught = self.counts["killed"] + self.counts["timeout"]
        judged = caught + self.counts["survived"]
        return None if judged == 0 else caught / judged


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "modules", nargs="*", metavar="MODULE", help="paths under src/stalewatch (default: every target)"
    )
    parser.add_argument("--max-children", type=int, default=2, help="mutants tested at once (default 2)")
    parser.add_argument("--nice", type=int, default=19, help="niceness of the run (default 19)")
    parser.add_argument("--recheck", action="store_true", help="keep earlier results; test survivors again")
    parser.add_argument("--json", type=Path, help="write the figures and survivors to this file")
    parser.add_argument("--list", action="store_true", help="print the targets and their tests, run nothing")
    args = parser.parse_args(argv)
    known = {t.module: t for t in TARGETS}
    unknown = [m for m in args.modules if m not in known]
    if unknown:
        parser.error(f"not a target: {', '.join(unknown)} (targets: {', '.join(known)})")
    if args.max_children < 1:
        parser.error("--max-children must be at least 1")
    args.targets = [known[m] for m in args.modules] if args.modules else list(TARGETS)
    return args


def mutmut_config(target: Target) -> str:
    """The ``[tool.mutmut]`` table for one target's work directory."""
    deselect = [f"--deselect={node}" for node in target.deselect]
    lines = [
        "",
        "# Written by scripts/mutation.py for this work directory only.",
        "[tool.mutmut]",
        'source_paths = ["src"]',
        f"only_mutate = [{json.dumps(target.source)}]",
        f"pytest_add_cli_args_test_selection = {json.dumps(list(target.tests))}",
        f"pytest_add_cli_args = {json.dumps(['-p', 'no:cacheprovider', *deselect])}",
        "use_git_change_detection = false",
        "",
    ]
    return "\n".join(lines)


def prepare(target: Target, *, fresh: bool) -> Path:
    """Make the target's work directory: links to src/ and tests/, pyproject.toml with its table."""
    work = WORK / target.name
    if fresh and work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True, exist_ok=True)
    for name in ("src", "tests"):
        link = work / name
        if not link.is_symlink():
            link.symlink_to(ROOT / name, target_is_directory=True)
    project = (ROOT / "pyproject.toml").read_text("utf-8")
    if "mutmut" in tomllib.loads(project).get("tool", {}):
        raise SystemExit("pyproject.toml has a [tool.mutmut] table: scripts/mutation.py writes its own")
    text = project + mutmut_config(target)
    tomllib.loads(text)
    config = work / "pyproject.toml"
    if not config.exists() or config.read_text("utf-8") != text:
        config.write_text(text, "utf-8")
    return work


def run_mutmut(work: Path, args: Sequence[str], log: Path) -> None:
    """``mutmut <args>`` in ``work``, its output appended to ``log``; its process group
    is ended if this script is interrupted."""
    mutmut = Path(sys.executable).parent / "mutmut"
    with log.open("a") as out:
        out.write(f"$ mutmut {' '.join(args)}\n")
        out.flush()
        child = subprocess.Popen(
            [str(mutmut), *args],
            cwd=work,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            code = child.wait()
        except BaseException:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGTERM)
            try:
                child.wait(timeout=10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(child.pid, signal.SIGKILL)
                child.wait()
            raise
    if code != 0:
        tail = log.read_text("utf-8", "replace").splitlines()[-40:]
        raise SystemExit(f"mutmut {' '.join(args)} failed ({code}) in {work}:\n" + "\n".join(tail))


@contextlib.contextmanager
def inside(directory: Path) -> Iterator[None]:
    before = Path.cwd()
    os.chdir(directory)
    try:
        yield
    finally:
        os.chdir(before)


def verdicts(work: Path, target: Target) -> dict[str, str]:
    """Each mutant's verdict, as mutmut recorded it (``killed``, ``survived``, ...)."""
    from mutmut.mutation.data import SourceFileMutationData
    from mutmut.stats import status_by_exit_code

    with inside(work):
        data = SourceFileMutationData(path=Path(target.source))
        data.load()
        codes = data.exit_code_by_key
    # mutmut files a worker that raised (exit 255) under "timeout": it is no verdict here.
    return {key: "error" if code == 255 else status_by_exit_code[code] for key, code in codes.items()}


def count(found: dict[str, str]) -> dict[str, int]:
    counts = dict.fromkeys(_COLUMNS, 0)
    counts["total"] = len(found)
    for status in found.values():
        column = status if status in ("killed", "survived", "timeout", "no tests") else "other"
        counts[column] += 1
    return counts


def _function_spans(source: str) -> dict[str, tuple[int, int]]:
    """mutmut's name of each function (``x_f``, ``xǁClassǁm``) and its lines, decorators included."""
    spans: dict[str, tuple[int, int]] = {}

    def visit(body: list[ast.stmt], owner: str) -> None:
        for node in body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                key = f"xǁ{owner}ǁ{node.name}" if owner else f"x_{node.name}"
                spans[key] = (start, node.end_lineno or node.lineno)
            elif isinstance(node, ast.ClassDef):
                visit(node.body, f"{owner}.{node.name}" if owner else node.name)

    visit(ast.parse(source).body, "")
    return spans


def survivor(work: Path, target: Target, mutant: str, source_lines: list[str], spans: dict) -> Survivor:
    """Where a surviving mutant sits in the source and what it changed."""
    from mutmut.mutation.diff_apply import get_diff_for_mutant

    with inside(work):
        diff = get_diff_for_mutant(mutant, path=target.source).splitlines()
    function = mutant.rpartition(".")[2].partition("__mutmut_")[0]
    start, end = spans.get(function, (1, len(source_lines)))
    removed = [d[1:] for d in diff if d.startswith("-") and not d.startswith("---")]
    added = [d[1:] for d in diff if d.startswith("+") and not d.startswith("+++")]
    line = start
    if removed:
        # The diff numbers lines from the function's first one; find the changed line
        # itself in the source (the nearest match), so comments above do not shift it.
        offset = next((i for i, d in enumerate(_body(diff)) if d.startswith("-")), 0)
        wanted = removed[0].strip()
        matches = [n for n in range(start, end + 1) if source_lines[n - 1].strip() == wanted]
        if matches:
            line = min(matches, key=lambda n: abs(n - (start + offset)))
    shown = ".".join(function.split("ǁ")[1:]) if function.startswith("xǁ") else function.removeprefix("x_")
    return Survivor(target.module, line, shown, mutant, removed, added)


def _body(diff: list[str]) -> list[str]:
    """The hunk lines of a one-hunk unified diff (context and changes)."""
    at = next((i for i, d in enumerate(diff) if d.startswith("@@")), len(diff))
    return [d for d in diff[at + 1 :] if d[:1] in (" ", "-")]


def run_target(target: Target, args: argparse.Namespace) -> Result:
    work = prepare(target, fresh=not args.recheck)
    log = work / "mutmut.log"
    started = time.monotonic()
    run = ["run", "--max-children", str(args.max_children)]
    run_mutmut(work, run, log)
    if args.recheck:
        again = [m for m, s in verdicts(work, target).items() if s in ("survived", "timeout")]
        if again:
            run_mutmut(work, [*run, *again], log)
    seconds = time.monotonic() - started
    found = verdicts(work, target)
    source = (ROOT / target.source).read_text("utf-8")
    spans = _function_spans(source)
    lines = source.splitlines()
    survivors = [survivor(work, target, m, lines, spans) for m, s in sorted(found.items()) if s == "survived"]
    survivors.sort(key=lambda s: s.line)
    return Result(target.module, count(found), seconds, survivors)


def table(results: Sequence[Result]) -> str:
    width = max(len("module"), *(len(r.module) for r in results))
    head = f"{'module':<{width}}  " + "  ".join(f"{c:>8}" for c in _COLUMNS) + f"  {'score':>7}  {'wall':>7}"
    rows = [head]
    for r in results:
        score = "-" if r.score is None else f"{100 * r.score:.1f} %"
        cells = "  ".join(f"{r.counts[c]:>8}" for c in _COLUMNS)
        rows.append(f"{r.module:<{width}}  {cells}  {score:>7}  {r.seconds:>6.0f}s")
    return "\n".join(rows)


def survivors_text(results: Sequence[Result]) -> str:
    out = []
    for r in results:
        for s in r.survivors:
            out.append(f"{s.module}:{s.line}  {s.function}  ({s.mutant.rpartition('.')[2]})")
            out += [f"    - {line.strip()}" for line in s.removed]
            out += [f"    + {line.strip()}" for line in s.added]
    return "\n".join(out)


def check_mutmut() -> str:
    try:
        from importlib.metadata import version

        found = version("mutmut")
    except Exception:
        raise SystemExit("mutmut is not installed: .venv/bin/pip install -e '.[mutation]'") from None
    if not found.startswith(MUTMUT_SERIES):
        print(f"note: mutmut {found}; this script was written for {MUTMUT_SERIES}x", file=sys.stderr)
    return found


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.list:
        for t in args.targets:
            print(f"{t.module}: {' '.join(t.tests)}")
        return 0
    found = check_mutmut()
    os.nice(max(args.nice, 0))
    print(
        f"mutmut {found}, {args.max_children} at once, nice {args.nice}, "
        f"{'recheck' if args.recheck else 'fresh'}: {', '.join(t.module for t in args.targets)}",
        flush=True,
    )
    started = time.monotonic()
    results = []
    for target in args.targets:
        result = run_target(target, args)
        results.append(result)
        print(table([result]).splitlines()[1], flush=True)
    print()
    print(table(results))
    print(f"total wall time {time.monotonic() - started:.0f} s")
    text = survivors_text(results)
    if text:
        print("\nsurvivors:")
        print(text)
    if args.json is not None:
        payload = [
            {
                **dataclasses.asdict(r),
                "score": r.score,
                "survivors": [dataclasses.asdict(s) for s in r.survivors],
            }
            for r in results
        ]
        args.json.write_text(json.dumps(payload, indent=2) + "\n", "utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
