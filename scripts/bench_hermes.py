#!/usr/bin/env python3
"""Measure Hermes WebUI's check, ``ensure_agent_runtime_current()``, per call.

Builds a fake Hermes Agent checkout (``run_agent.py`` with ``AIAgent``) in a temporary
repository and binds to it, then prints the median and p99 of:

- a WebUI-shaped ``agent_runtime`` module (``tests/support/webui_runtime.py``:
  the WebUI's surface and its three-``git``-process read, written for our tests) as it
  is, and with the two-line ``stalewatch.hermes.accelerate`` suffix;
- the older drop-in ``stalewatch.hermes``, decided by its guard (strict in-process
  read), then by its synchronous read (guard stopped);
- reading what moved HEAD from the reflog (once per change, in the watcher), with the
  loaded commit 3 entries back, and ~256 KiB back (the most ever read).

With ``--webui CHECKOUT``, first the figure the docs quote: the real WebUI's own
``ensure_agent_runtime_current()``, measured in the WebUI's own process (``--python``,
the WebUI's Python: its ``requirements.txt`` and stalewatch), once as it is and once in a
second process where the docs' two lines (docs/hermes.md, without ``daemon=``) ran in the
module's namespace as they do when appended to the file. The checkout is only read
(no bytecode written); its state goes to a temporary HOME; the Agent is a fake checkout.

Figures are printed, never asserted. ``--quick`` runs tiny counts (a smoke test).

Usage: python scripts/bench_hermes.py [--webui CHECKOUT [--python PY]] [--quick]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from types import ModuleType

from bench import git, make_repo, per_call, row
from check_hermes import RUNTIME, describe, stalewatch_pythonpath
from stalewatch.git import reflog, refs
from stalewatch.hermes import dropin as hermes

_SHAPED = Path(__file__).resolve().parents[1] / "tests" / "support" / "webui_runtime.py"


def webui_runtime(*, accelerated: bool) -> ModuleType:
    spec = importlib.util.spec_from_file_location("webui_shaped_runtime", _SHAPED)
    assert spec is not None and spec.loader is not None
    shaped = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(shaped)
    module: ModuleType = shaped.load(accelerated=accelerated)
    return module


_DOCS = Path(__file__).resolve().parents[1] / "docs" / "hermes.md"

# Runs in the WebUI's Python, in its checkout: the WebUI's own module, bound to the
# fake Agent, its check timed per call; "accelerated": the docs' lines first, run in
# the module's namespace as they run when appended to its file.
_WEBUI_CHILD = """
import json, statistics, sys, time
mode, batches, per_batch, lines = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
import api.agent_runtime as runtime
if mode == "accelerated":
    exec(compile(lines, runtime.__file__ + " (the docs' lines)", "exec"), runtime.__dict__)
read = runtime._read_agent_revision
if runtime.get_ai_agent_class() is None or runtime._AGENT_REVISION is None:
    raise SystemExit("the WebUI could not bind the fake Agent")
runtime.ensure_agent_runtime_current()  # the first call binds (one git ls-files when accelerated)
times = []
for _ in range(batches):
    t0 = time.perf_counter_ns()
    for _ in range(per_batch):
        runtime.ensure_agent_runtime_current()
    times.append((time.perf_counter_ns() - t0) / per_batch / 1e9)
import stalewatch
print(json.dumps({
    "times": times,
    "accelerated": hasattr(read, "__stalewatch_original__"),
    "stalewatch": stalewatch.__file__,
}))
"""


def docs_lines() -> str:
    """The docs' two accelerator lines without ``daemon=`` (docs/hermes.md)."""
    text = _DOCS.read_text(encoding="utf-8")
    for block in re.findall(r"<!-- example: hermes-accelerate -->\s*```python\n(.*?)```", text, re.DOTALL):
        return str(block)
    raise SystemExit("bench_hermes: docs/hermes.md has no hermes-accelerate block")


def webui_rows(checkout: Path, python: str, agent: Path, scratch: Path, quick: bool) -> float | None:
    """The real WebUI's check in its own process, as it is and with the docs' lines."""
    home = scratch / "home"
    home.mkdir(exist_ok=True)
    # The Agent on the path too: the WebUI's api.config appends it itself; a WebUI-shaped
    # checkout (our tests) may not.
    path = [str(checkout), *filter(None, [stalewatch_pythonpath()]), str(agent)]
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "HERMES_HOME": str(home / ".hermes"),
        "HERMES_WEBUI_STATE_DIR": str(home / "state"),
        "HERMES_WEBUI_AGENT_DIR": str(agent),
        "PYTHONPATH": os.pathsep.join(path),
        "PYTHONDONTWRITEBYTECODE": "1",  # the checkout is only read
    }
    lines = docs_lines()
    counts = {"upstream": (20, 1) if quick else (300, 1), "accelerated": (20, 10) if quick else (3000, 10)}
    found = {}
    for mode, (batches, per_batch) in counts.items():
        done = subprocess.run(
            [python, "-c", _WEBUI_CHILD, mode, str(batches), str(per_batch), lines],
            cwd=checkout,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        if done.returncode != 0:
            print(f"the WebUI's module failed ({mode}): {done.stderr.strip()[-2000:]}", file=sys.stderr)
            return None
        found[mode] = json.loads(done.stdout.strip().splitlines()[-1])
    if found["upstream"]["accelerated"] or not found["accelerated"]["accelerated"]:
        print("the docs' lines did not accelerate the WebUI's module", file=sys.stderr)
        return None
    print(
        f"Hermes WebUI {describe(checkout)}: its own {RUNTIME.as_posix()}, "
        f"ensure_agent_runtime_current() in its own process (per call)"
    )
    print(f"  (WebUI Python {python}; stalewatch {found['accelerated']['stalewatch']})")
    reference = statistics.median(found["upstream"]["times"])
    row("upstream: 3 git subprocesses", found["upstream"]["times"])
    row("with the docs' two lines", found["accelerated"]["times"], reference)
    return reference


def cause_rows(repo: Path, batches: int) -> None:
    """What moved HEAD, read from the reflog once per change: its cost, near and far."""
    loaded = git(repo, "rev-parse", "HEAD")
    for n in range(3):
        git(repo, "commit", "-q", "--allow-empty", "-m", f"update {n}")
    dirs = refs.find_git_dirs(repo.resolve())
    assert dirs is not None
    chain: list[Path] = []
    current = dirs.store.resolve_head(dirs, chain)
    assert current is not None
    near = reflog.explain(dirs, chain, loaded, current)
    print(f"what moved HEAD, read once per change ({near.describe() if near else 'no cause'})")
    row(
        "3 entries since the loaded commit",
        per_call(lambda: reflog.explain(dirs, chain, loaded, current), batches, 1),
    )
    for log in (dirs.git_dir / "logs" / "HEAD", dirs.common_dir / "logs" / "refs" / "heads" / "main"):
        last = log.read_bytes().splitlines(keepends=True)[-1]
        noop = b" ".join([current.encode(), current.encode(), last.split(b" ", 2)[2]])
        with log.open("ab") as f:  # no-op entries until the loaded commit is ~256 KiB back
            f.write(noop * (250 * 1024 // len(noop)))
    row(
        "worst: 256 KiB read from two logs",
        per_call(lambda: reflog.explain(dirs, chain, loaded, current), batches // 4 or 1, 1),
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny counts: checks the script runs")
    parser.add_argument("--webui", type=Path, help="a Hermes WebUI checkout: its own check, measured first")
    parser.add_argument("--python", default=sys.executable, help="the WebUI's Python (with --webui)")
    args = parser.parse_args()
    fast, slow = (20, 5) if args.quick else (3000, 300)
    if args.webui is not None and not (args.webui / RUNTIME).is_file():
        print(f"bench_hermes: {args.webui} has no {RUNTIME}: not a Hermes WebUI checkout", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        repo, _, _ = make_repo(Path(tmp))  # holds run_agent.py with class AIAgent
        if args.webui is not None:
            webui = args.webui.resolve()
            if webui_rows(webui, args.python, repo, Path(tmp), args.quick) is None:
                return 1
        sys.path.insert(0, str(repo))
        try:
            upstream = webui_runtime(accelerated=False)
            accelerated = webui_runtime(accelerated=True)
            for module in (upstream, accelerated):
                if module.get_ai_agent_class() is None or module._AGENT_REVISION is None:
                    print("could not bind the WebUI-shaped module to the fake checkout", file=sys.stderr)
                    return 1
            print(
                "the WebUI-shaped module of our tests (tests/support/webui_runtime.py), "
                "ensure_agent_runtime_current() (per call)"
            )
            reference = per_call(upstream.ensure_agent_runtime_current, slow, 1)
            ref_median = statistics.median(reference)
            row("upstream: 3 git subprocesses", reference)
            row(
                "with accelerate(): in-process",
                per_call(accelerated.ensure_agent_runtime_current, fast, 10),
                ref_median,
            )

            if hermes.get_ai_agent_class() is None:
                print("could not import run_agent from the fake checkout", file=sys.stderr)
                return 1
            if not hermes.wait_until_watching(10):
                print("the guard never became ready", file=sys.stderr)
                return 1
            print("the drop-in, stalewatch.hermes: ensure_agent_runtime_current() (per call)")
            row(
                "decided by the guard (strict)",
                per_call(hermes.ensure_agent_runtime_current, fast, 10),
                ref_median,
            )
            hermes.stop()
            row(
                "decided by the read (stopped)",
                per_call(hermes.ensure_agent_runtime_current, slow, 1),
                ref_median,
            )
            row("WebUI today: 3 git subprocesses", reference)
            cause_rows(repo, 20 if args.quick else 300)
        finally:
            hermes._reset_for_tests()
            sys.path.remove(str(repo))
            sys.modules.pop("run_agent", None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
