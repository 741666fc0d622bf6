#!/usr/bin/env python3
"""Measure automatic restarts: commit -> every server confirmed on the new revision, under load.

For each supervisor and each group of settings, a real ``gunicorn -w N`` serves a WSGI
app from a git checkout, guarded by stalewatch through a daemon with a restart policy
(``scripts/restart_lab.py``); four threads keep sending requests (a guarded
``/api/work`` and an unguarded 50 ms ``/slow``) while ``--commits`` commits land one
after another, each once the previous restart is confirmed and every worker runs it.

Supervisors (``--supervisors``):

- ``gunicorn``: HUP to the master (its pid file): a graceful reload;
- ``gunicorn-handoff``: USR2, a new master beside the old, the old retired once the
  new workers registered (``handoff = true``);
- ``supervisord``: ``supervisorctl restart web``: stop, then start.

Settings (``--settings``):

- ``defaults``: the recipe as docs/restart.md writes it, every other key at its
  default (``settle`` 2 s, ``min_interval`` 30 s, ``confirm_timeout`` 60 s...);
- ``tuned``: the same recipe with ``settle = --settle`` (1 s) and ``min_interval = 0``.

The gunicorn recipes carry a ``verify`` probe; the lab's app starts a guard on import,
so the probe parses ``app.py`` instead of importing it. Every ``--long-every``-th commit
(the first included) lands while a guarded request is in flight (``/api/hold``, held
for ``--long`` seconds from the commit): the restart must wait for it and it must end
with a 200 on the old code.

Printed per run: commit -> restart scheduled (in the daemon's lines), -> confirmed
(with and without the long request), -> every worker on the new revision; requests
served (200), refused stale (409), not served (refused or reset while no server
listened, and how long that window lasted per commit), lost (a 5xx or a response cut
off); the longest request in flight across a commit that was answered, and whether
each long request finished; 409s whose ``retry_after`` was too early (a client retrying
then would have met the old code again); the load average before and after. Figures
are printed, never asserted. ``--quick``: gunicorn, tuned, 2 commits, a short request.

Usage: python scripts/bench_restart.py [--supervisors gunicorn,gunicorn-handoff,supervisord]
           [--settings defaults,tuned] [--commits 10] [--default-commits 3] [--settle 1.0]
           [--long 5] [--long-every 2] [--workers 4] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from lab_load import Outcome, request
from restart_lab import Lab, Load

# The lab's app starts a guard on import: the probe parses it instead (see the module doc).
VERIFY = json.dumps([sys.executable, "-c", "import ast; ast.parse(open('app.py').read())"])


@dataclass
class Commit:
    """One commit of a run and what followed it."""

    at: float
    revision: str
    long: bool
    scheduled: float = 0.0
    confirmed: float = 0.0
    all_on_new: float = 0.0
    held: Outcome | None = None


@dataclass
class Run:
    supervisor: str
    settings: str
    policy: str
    commits: list[Commit] = field(default_factory=list)
    outcomes: list[Outcome] = field(default_factory=list)
    failure: str | None = None
    load: tuple[float, float] = (0.0, 0.0)


def policy_for(supervisor: str, settings: str, settle: float) -> str:
    """The ``[checkout.restart]`` keys beyond the lab's recipe (pidfile/signal or action)."""
    keys = f"verify = {VERIFY}\n" if supervisor.startswith("gunicorn") else ""
    if settings == "tuned":
        keys += f"settle = {settle}\nmin_interval = 0\n"
    return keys


def held_request(lab: Lab, seconds: float, commit: Commit) -> threading.Thread:
    """A guarded request in flight before the commit, released ``seconds`` after it."""

    def run() -> None:
        commit.held = request(lab.port, "/api/hold")

    thread = threading.Thread(target=run, name="bench-held", daemon=True)
    thread.start()
    lab.gate.entered()  # inside the app: in flight
    return thread


def one_run(supervisor: str, settings: str, args: argparse.Namespace) -> Run:
    policy = policy_for(supervisor, settings, args.settle)
    run = Run(supervisor, settings, policy, load=(os.getloadavg()[0], 0.0))
    count = args.commits if settings == "tuned" else args.default_commits
    with (
        Lab(supervisor, workers=args.workers, policy=policy, defaults=settings == "defaults") as lab,
        Load(lab.port, ["/api/work", "/slow?0.05"]) as load,
    ):
        for number in range(count):
            long = args.long > 0 and number % args.long_every == 0
            commit = Commit(0.0, "", long)
            thread = held_request(lab, args.long, commit) if long else None
            commit.at = time.time()
            commit.revision = lab.commit(f"bench {number}")
            release = threading.Timer(args.long, lab.gate.release) if long else None
            if release is not None:
                release.start()
            try:
                scheduled = lab.wait_for_phase("scheduled", timeout=120)
                done = lab.wait_for_phase("confirmed", "failed", "refused", timeout=args.long + 180)
            finally:
                if release is not None:
                    release.join()
                if thread is not None:
                    thread.join(timeout=60)
            if done.message["phase"] != "confirmed" or done.message["revision"] != commit.revision:
                run.failure = f"commit {number}: {done.message}"
                break
            lab.wait_for_processes(commit.revision, args.workers, timeout=120)
            commit.all_on_new = time.time() - commit.at
            load.wait_for(lambda o, c=commit, at=done.at: o.start > at and o.revision == c.revision)
            commit.scheduled = scheduled.at - commit.at
            commit.confirmed = done.at - commit.at
            run.commits.append(commit)
        run.outcomes = load.snapshot()
    run.load = (run.load[0], os.getloadavg()[0])
    return run


def _ms(values: list[float]) -> str:
    if not values:
        return "(none)"
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return (
        f"median {statistics.median(ordered) * 1000:7.0f} ms  p99 {p99 * 1000:7.0f} ms"
        f"  max {ordered[-1] * 1000:7.0f} ms  (n={len(ordered)})"
    )


def unserved_windows(run: Run) -> list[float]:
    """Per commit, from the first request not served to the end of the last (0: none)."""
    windows = []
    for i, commit in enumerate(run.commits):
        until = run.commits[i + 1].at if i + 1 < len(run.commits) else float("inf")
        hit = [o for o in run.outcomes if o.unserved and commit.at <= o.start < until]
        windows.append(max(o.end for o in hit) - min(o.start for o in hit) if hit else 0.0)
    return windows


def early_retries(run: Run) -> tuple[int, Counter[str], dict[str, float]]:
    """409s whose ``retry_after`` ran out before the new code answered: (409s with one,
    the early ones by the phase they told, the largest shortfall in seconds)."""
    answered = sorted(
        (o.start, o.revision) for o in run.outcomes if o.status == 200 and o.path == "/api/work"
    )
    early: Counter[str] = Counter()
    told, worst = 0, {"long request": 0.0, "no long request": 0.0}
    for o in run.outcomes:
        wait = o.payload.get("retry_after") if o.status == 409 else None
        if not isinstance(wait, int | float):
            continue
        commit = next((c for c in reversed(run.commits) if c.at <= o.start), None)
        target = commit.revision if commit is not None else None
        first = next((at for at, rev in answered if rev == target and at >= o.end), None)
        if commit is None or first is None:
            continue
        told += 1
        shortfall = first - (o.end + wait)
        if shortfall > 0:
            reason = str(o.payload.get("restart_reason") or "").split(":")[0]
            where = "long request" if commit.long else "no long request"
            early[f"{where}, {o.payload.get('restart_phase')}{': ' + reason if reason else ''}"] += 1
            worst[where] = max(worst[where], shortfall)
    return told, early, worst


def longest_across(run: Run) -> Outcome | None:
    """The longest request in flight across a commit that was answered (a 200 or a 409)."""
    across = [
        o
        for o in run.outcomes + [c.held for c in run.commits if c.held is not None]
        if o.status in (200, 409) and not o.error and any(o.start < c.at < o.end for c in run.commits)
    ]
    return max(across, key=lambda o: o.end - o.start, default=None)


def show(run: Run, args: argparse.Namespace) -> None:
    print(f"== {run.supervisor} ({args.workers} workers), {run.settings}: [checkout.restart] + lab recipe:")
    for line in run.policy.splitlines():
        print(f"     {line}")
    if run.failure:
        print(f"  FAILED: {run.failure}")
    print(f"  load average (1 min) before {run.load[0]:.2f}, after {run.load[1]:.2f}")
    commits = run.commits
    plain = [c.confirmed for c in commits if not c.long]
    held = [c.confirmed for c in commits if c.long]
    print(f"  commits confirmed                      {len(commits)}")
    print(f"  commit -> restart scheduled            {_ms([c.scheduled for c in commits])}")
    print(f"  commit -> restart confirmed            {_ms([c.confirmed for c in commits])}")
    print(f"    without a long request in flight     {_ms(plain)}")
    print(f"    with a {args.long:g} s request in flight      {_ms(held)}")
    print(f"  commit -> every worker on the new      {_ms([c.all_on_new for c in commits])}")
    if commits:
        print(f"  each commit -> confirmed (s)           {' '.join(f'{c.confirmed:.1f}' for c in commits)}")
    outcomes = run.outcomes
    by_status = Counter(o.status for o in outcomes if o.status)
    refusals = [o for o in outcomes if o.status == 409]
    announcing = sum(1 for o in refusals if o.payload.get("restart_scheduled") and o.retry_after)
    lost = [o for o in outcomes if o.cut or (o.status or 0) >= 500]
    unserved = [o for o in outcomes if o.unserved]
    windows = unserved_windows(run)
    told, early, worst = early_retries(run)
    print(f"  requests                 {len(outcomes):7d}")
    print(f"    200 (served)           {by_status[200]:7d}")
    print(f"    409 (stale, refused)   {len(refusals):7d}   ({announcing} say restart_scheduled)")
    silent = Counter(
        f"{o.payload.get('restart_phase')}: {o.payload.get('restart_reason')}"
        for o in refusals
        if not (o.payload.get("restart_scheduled") and o.retry_after)
    )
    if silent:
        print(f"      the others told: {dict(silent)}")
    kinds = Counter(o.error for o in unserved)
    print(f"    not served (no server listening) {len(unserved)}  {dict(kinds) if kinds else ''}")
    print(f"      window per commit    {_ms(windows)}")
    print(f"  requests lost (5xx, or a response cut off)   {len(lost)}")
    longs = [c.held for c in commits if c.held is not None]
    finished = sum(1 for o in longs if o.status == 200 and not o.error)
    print(f"  long requests across a commit: {finished} of {len(longs)} finished with a 200")
    longest = longest_across(run)
    if longest is not None:
        print(
            f"  longest request in flight across a commit, answered: {longest.end - longest.start:.2f} s"
            f" ({longest.path}, {longest.status})"
        )
    count = sum(early.values())
    print(f"  409s with retry_after: {told}; new code not answering yet when it ran out: {count}")
    for where, most in worst.items():
        phases = {k.split(", ", 1)[1]: v for k, v in early.items() if k.startswith(where + ",")}
        if phases:
            total = sum(phases.values())
            print(f"    in commits with {where}: {total}, by at most {most:.2f} s, told while {phases}")
    print()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--supervisors", default="gunicorn,gunicorn-handoff,supervisord")
    parser.add_argument("--settings", default="defaults,tuned")
    parser.add_argument("--commits", type=int, default=10, help="commits of a tuned run")
    parser.add_argument("--default-commits", type=int, default=3, help="commits of a defaults run")
    parser.add_argument("--settle", type=float, default=1.0, help="the tuned settle, seconds")
    parser.add_argument("--long", type=float, default=5.0, help="the long request, seconds (0: none)")
    parser.add_argument("--long-every", type=int, default=2, help="a long request every Nth commit")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--quick", action="store_true", help="gunicorn, tuned, 2 commits (a smoke test)")
    args = parser.parse_args()
    if args.quick:
        args.supervisors, args.settings = "gunicorn", "tuned"
        args.commits, args.settle, args.long = 2, 0.2, 0.5
    supervisors = [s for s in args.supervisors.split(",") if s]
    settings = [s for s in args.settings.split(",") if s]
    print(f"automatic restart under load: 4 client threads; {' '.join(sys.argv[1:]) or '(no options)'}")
    print()
    failed = False
    for supervisor in supervisors:
        for setting in settings:
            run = one_run(supervisor, setting, args)
            show(run, args)
            failed = failed or run.failure is not None
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
