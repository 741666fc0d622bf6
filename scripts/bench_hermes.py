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

Figures are printed, never asserted. ``--quick`` runs tiny counts (a smoke test).

Usage: python scripts/bench_hermes.py [--quick]
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import tempfile
from pathlib import Path
from types import ModuleType

from bench import git, make_repo, per_call, row
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


def cause_rows(repo: Path, batches: int) -> None:
    """What moved HEAD, read from the reflog once per change: its cost, near and far."""
    loaded = git(repo, "rev-parse", "HEAD")
    for n in range(3):
        git(repo, "commit", "-q", "--allow-empty", "-m", f"update {n}")
    dirs = refs.find_git_dirs(repo.resolve())
    assert dirs is not None
    chain: list[Path] = []
    current = refs.resolve_head(dirs, chain)
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
    args = parser.parse_args()
    fast, slow = (20, 5) if args.quick else (3000, 300)
    with tempfile.TemporaryDirectory() as tmp:
        repo, _, _ = make_repo(Path(tmp))  # holds run_agent.py with class AIAgent
        sys.path.insert(0, str(repo))
        try:
            upstream = webui_runtime(accelerated=False)
            accelerated = webui_runtime(accelerated=True)
            for module in (upstream, accelerated):
                if module.get_ai_agent_class() is None or module._AGENT_REVISION is None:
                    print("could not bind the WebUI-shaped module to the fake checkout", file=sys.stderr)
                    return 1
            print("WebUI's own agent_runtime.py: ensure_agent_runtime_current() (per call)")
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
