#!/usr/bin/env python3
"""Measure automatic restarts: commit -> every server confirmed on the new revision, under load.

A real ``gunicorn -w 4`` (graceful reload on HUP through its pid file; or
``--supervisor supervisord``: stop and start) serves a WSGI app from a git checkout,
guarded by stalewatch through a daemon with a restart policy (see
``scripts/restart_lab.py``). Four threads keep sending requests while ``--commits``
commits land one after another; each waits until the daemon confirms the restart and
every worker runs the new revision. Prints the latencies and what the clients saw.
Figures are printed, never asserted. ``--quick``: 3 commits, a short settle.

Usage: python scripts/bench_restart.py [--commits 20] [--settle 2.0] [--supervisor gunicorn]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from restart_lab import Lab, Load


def _ms(values: list[float]) -> str:
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return (
        f"median {statistics.median(ordered) * 1000:8.0f} ms   p99 {p99 * 1000:8.0f} ms"
        f"   max {ordered[-1] * 1000:8.0f} ms"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commits", type=int, default=20)
    parser.add_argument("--settle", type=float, default=2.0, help="the policy's settle, seconds")
    parser.add_argument("--supervisor", choices=["gunicorn", "supervisord"], default="gunicorn")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--quick", action="store_true", help="3 commits, settle 0.2 s (a smoke test)")
    args = parser.parse_args()
    if args.quick:
        args.commits, args.settle = 3, 0.2
    scheduled_after, confirmed_after, all_on_new_after = [], [], []
    with Lab(args.supervisor, workers=args.workers, policy=f"settle = {args.settle}\n") as lab:
        with Load(lab.port, ["/api/work", "/slow?0.05"]) as load:
            for number in range(args.commits):
                committed = time.time()
                new = lab.commit(f"bench {number}")
                scheduled = lab.wait_for_phase("scheduled")
                confirmed = lab.wait_for_phase("confirmed", "failed", "refused")
                if confirmed.message["phase"] != "confirmed" or confirmed.message["revision"] != new:
                    print(f"commit {number}: {confirmed.message}", file=sys.stderr)
                    return 1
                lab.wait_for_processes(new, args.workers)
                all_on_new = time.time()
                load.wait_for(lambda o, new=new, at=confirmed.at: o.start > at and o.revision == new)
                scheduled_after.append(scheduled.at - committed)
                confirmed_after.append(confirmed.at - committed)
                all_on_new_after.append(all_on_new - committed)
        outcomes = load.snapshot()
    by_status = Counter(o.status for o in outcomes if o.status)
    refusals = [o for o in outcomes if o.status == 409]
    announcing = sum(1 for o in refusals if o.payload.get("restart_scheduled") and o.retry_after)
    lost = [o for o in outcomes if o.cut or (o.status or 0) >= 500]
    unserved = [o for o in outcomes if o.unserved]
    print(f"automatic restart: {args.supervisor} ({args.workers} workers), settle {args.settle:g} s,")
    print(f"  {args.commits} commits under load (4 client threads, /api/work guarded, /slow 50 ms)")
    print()
    print(f"  commit -> restart scheduled          {_ms(scheduled_after)}")
    print(f"  commit -> restart confirmed          {_ms(confirmed_after)}")
    print(f"  commit -> every worker on the new    {_ms(all_on_new_after)}")
    print()
    print(f"  requests                 {len(outcomes):7d}")
    print(f"    200 (served)           {by_status[200]:7d}")
    print(f"    409 (stale, refused)   {len(refusals):7d}   ({announcing} say restart_scheduled)")
    print(f"    not served (refused or reset before a response: no server listening) {len(unserved)}")
    print(f"  requests lost (5xx, or a response cut off)   {len(lost)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
