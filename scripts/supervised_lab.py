#!/usr/bin/env python3
"""gunicorn under supervisord, restarted by the daemon under load: what is left afterwards.

Issue 28's scenario: supervisord runs gunicorn (``autorestart=true``, ``--pid`` for the
daemon), four threads keep sending requests to 127.0.0.1 (a guarded ``/api/work`` and
an unguarded 50 ms ``/slow``), and ``--commits`` commits land, each once the previous
restart reached an outcome. After each outcome, supervisord is watched for ``--watch``
seconds (``supervisorctl status web``, every half second) for what it does with it.

Kinds (``--kind``): ``supervisord-handoff`` (``signal = "USR2"``, ``handoff = true``)
and ``supervisord-hup`` (``signal = "HUP"``), see ``scripts/restart_lab.py``.

Printed: each restart's outcome; requests answered (200, 409), refused (connection
refused), reset (reset or closed before any response), lost (a 5xx, a response cut off,
any other error); the gunicorn masters left running, ``supervisorctl pid web`` and the
program's states; the masters left once ``supervisorctl stop web`` returned. The code
measured is whatever ``stalewatch`` imports: to measure another revision, put its
``src`` first on ``PYTHONPATH`` (``git archive REV src | tar -x -C /tmp/old``, then
``PYTHONPATH=/tmp/old/src``).

Usage: python scripts/supervised_lab.py [--kind supervisord-handoff] [--commits 2] [--watch 10]
"""

from __future__ import annotations

import argparse
import json
import time

from restart_lab import Lab, Load

RESET = {"ConnectionResetError", "RemoteDisconnected", "BrokenPipeError"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--kind", default="supervisord-handoff", choices=["supervisord-handoff", "supervisord-hup"]
    )
    parser.add_argument("--commits", type=int, default=2)
    parser.add_argument(
        "--watch", type=float, default=10.0, help="seconds supervisord is watched after each outcome"
    )
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    with Lab(args.kind, workers=args.workers) as lab:
        before = lab.supervisorctl("pid", "web")
        outcomes, states = [], []
        with Load(lab.port, ["/api/work", "/slow?0.05"]) as load:
            for number in range(args.commits):
                lab.commit(f"update {number}")
                line = lab.wait_for_phase("confirmed", "failed", "refused", timeout=120)
                outcomes.append(f"{line.message['phase']}: {line.message.get('reason') or ''}"[:160])
                deadline = time.monotonic() + args.watch
                while time.monotonic() < deadline:  # what supervisord makes of it
                    status = " ".join(lab.supervisorctl("status", "web").split()[1:2])
                    if not states or states[-1] != status:
                        states.append(status)
                    time.sleep(0.5)
            requests = load.snapshot()
        report = {
            "kind": args.kind,
            "restarts": outcomes,
            "requests": len(requests),
            "answered_200": sum(o.status == 200 and not o.error for o in requests),
            "answered_409": sum(o.status == 409 and not o.error for o in requests),
            "refused": sum(o.error == "ConnectionRefusedError" for o in requests),
            "reset": sum(o.error in RESET and o.status is None for o in requests),
            "lost": sum(
                (o.status or 0) >= 500
                or o.cut
                or (o.error is not None and o.error != "ConnectionRefusedError" and o.error not in RESET)
                for o in requests
            ),
            "masters_left": lab.masters(),
            "supervisorctl_pid_before": before,
            "supervisorctl_pid_after": lab.supervisorctl("pid", "web"),
            "supervisor_states": states,
        }
        lab.supervisorctl("stop", "web")  # does supervisord still stop what serves?
        report["masters_left_after_supervisorctl_stop"] = lab.masters()
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
