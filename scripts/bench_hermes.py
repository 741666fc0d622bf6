#!/usr/bin/env python3
"""Measure the Hermes WebUI drop-in: ``ensure_agent_runtime_current()`` per call.

Builds a fake Hermes Agent checkout (``run_agent.py`` with ``AIAgent``) in a temporary
repository, binds ``stalewatch.hermes`` to it, and prints the median and p99 of the
check decided by the guard (strict in-process read), then by the synchronous read
(guard stopped), beside the WebUI's own three-``git`` check. Figures are printed,
never asserted.

Usage: python scripts/bench_hermes.py [--quick]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

from bench import make_repo, per_call, reference_check, row
from stalewatch import hermes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny counts: checks the script runs")
    args = parser.parse_args()
    guarded, fallback = (20, 5) if args.quick else (2000, 300)
    with tempfile.TemporaryDirectory() as tmp:
        repo, _, _ = make_repo(Path(tmp))  # holds run_agent.py with class AIAgent
        sys.path.insert(0, str(repo))
        try:
            if hermes.get_ai_agent_class() is None:
                print("could not import run_agent from the fake checkout", file=sys.stderr)
                return 1
            if not hermes.wait_until_watching(10):
                print("the guard never became ready", file=sys.stderr)
                return 1
            print("hermes.ensure_agent_runtime_current() (per call)")
            reference = per_call(lambda: reference_check(repo), fallback, 1)
            ref_median = statistics.median(reference)
            row(
                "decided by the guard (strict)",
                per_call(hermes.ensure_agent_runtime_current, guarded, 10),
                ref_median,
            )
            hermes.stop()
            row(
                "decided by the read (stopped)",
                per_call(hermes.ensure_agent_runtime_current, fallback, 1),
                ref_median,
            )
            row("WebUI today: 3 git subprocesses", reference)
        finally:
            hermes._reset_for_tests()
            sys.path.remove(str(repo))
            sys.modules.pop("run_agent", None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
