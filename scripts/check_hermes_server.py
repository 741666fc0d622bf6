#!/usr/bin/env python3
"""Prove stalewatch's Hermes integration against the real Hermes WebUI server.

The WebUI checkout given is copied (never changed); the copy's ``api/agent_runtime.py``
gets the docs' two accelerator lines (with ``daemon=``, docs/hermes.md). Then, for each scenario, a
fresh world (``scripts/hermes_lab.py``): the WebUI started by its own ``start.sh
--foreground`` under a real supervisord (its docs/supervisor.md program block), beside
a fake Agent checkout (``srv/hermes-agent``, a clone of a local upstream; its
``run_agent.AIAgent`` runs a turn without any LLM and holds it open until this script
releases it), HOME empty, and a real ``stalewatch daemon`` with the Hermes restart
policy (``supervisorctl restart``, the updater's markers, a verify probe importing
``run_agent``, confirmation by registration). ``hermes update`` is emulated in the
order the Agent's updater takes. Scenarios:

0. the docs' lines work in the WebUI's file (the import succeeds, accelerates, links the daemon);
1. a chat turn in flight across the update: it finishes, the restart follows it, guarded
   requests get 409 meanwhile, the new revision is served, and the restart is confirmed
   by the WebUI's registration;
2. an incomplete update, and an Agent that does not import: refused, no restart, the
   WebUI keeps answering 409;
3. a daemon started after the move restarts the WebUI that still runs old code;
4. timings under a steady light request loop: update end → confirmed, 409s, refused
   connections, lost requests.

The guard route is ``POST /api/btw {"session_id": "nope", "question": "hi"}``: the
WebUI's guard runs before the session lookup, so it answers 404 while current and 409
once stale. ``--python`` runs the WebUI and the verify probe: it needs the WebUI's
``requirements.txt`` and stalewatch; this script's own Python needs stalewatch and
supervisor (the ``test`` extra).

Usage:
    python scripts/check_hermes_server.py WEBUI_CHECKOUT [--python PY] [--only 1 3]
        [--hold S] [--patience S] [--rounds N] [--keep]

Exit status: 0 when every scenario passes, 1 when one fails, 2 for bad input.
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
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from check_hermes import make_copy
from hermes_checks import (
    any_of,
    counts,
    guarded,
    outage,
    phase,
    phases_seen,
    restart_began,
    restart_fields,
    since,
    turn_end,
    turn_event,
    verdict_on,
)
from hermes_client import Board, Load, Turn, btw, health
from hermes_lab import HOLD_WORD, WAIT, Lab, Policy

ROOT = Path(__file__).resolve().parents[1]
RUNTIME = Path("api") / "agent_runtime.py"

_PROBE = """
import api.agent_runtime as runtime
read = getattr(runtime, "_read_agent_revision", None)
view = getattr(read, "__stalewatch_view__", None)
payload = getattr(runtime, "agent_runtime_stale_payload", None)
own = getattr(runtime, "_schedule_automatic_restart", None)
print("read accelerated" if hasattr(read, "__stalewatch_original__") else "read NOT accelerated")
print(f"registers with the daemon at {view.socket}" if view is not None else "no daemon")
if payload is None:
    print("no agent_runtime_stale_payload: its routes build the 409 inline (upstream's message)")
else:
    aware = getattr(payload, "__stalewatch_view__", None) is not None
    print("payload restart-aware" if aware else "payload upstream's")
if own is not None:
    mine = getattr(own, "__stalewatch_view__", None) is not None
    print("its own restart left to the daemon" if mine else "it still restarts itself")
"""


@dataclass
class Scenario:
    """A scenario's checks (PASS/FAIL lines) and figures, printed as it ends."""

    title: str
    checks: list[tuple[bool, str]] = field(default_factory=list)
    figures: list[str] = field(default_factory=list)

    def check(self, ok: bool, text: str) -> bool:
        self.checks.append((ok, text))
        return ok

    def note(self, text: str) -> None:
        self.figures.append(text)

    @property
    def passed(self) -> bool:
        return bool(self.checks) and all(ok for ok, _ in self.checks)

    def report(self) -> None:
        print(f"\nscenario {self.title}", flush=True)
        for ok, text in self.checks:
            print(f"  {'PASS' if ok else 'FAIL'}  {text}")
        for text in self.figures:
            print(f"        {text}")
        print(f"  => {'PASS' if self.passed else 'FAIL'}", flush=True)


@dataclass
class Run:
    args: argparse.Namespace
    dir: Path
    python: str

    @property
    def policy(self) -> Policy:
        return Policy(settle=self.args.settle, confirm_timeout=self.args.confirm_timeout)

    @contextmanager
    def lab(self, name: str, *, daemon: bool = True) -> Iterator[Lab]:
        """A scenario's world with the Agent at ``one``, the WebUI serving it (and the daemon)."""
        with Lab(self.dir, name, self.python, Board(), keep=self.args.keep) as lab:
            lab.make_agent("one")
            if daemon:
                lab.start_daemon(self.policy)
            lab.start_webui()
            yield lab

    def verdict_timeout(self) -> float:
        # settle, the verify probe, the action, the confirmation, and a margin.
        return float(self.args.settle + self.args.confirm_timeout + 2 * WAIT)


def restarts(lab: Lab, board: Board, mark: int, starts: int, target: str) -> str:
    """How many times the WebUI's server started since ``mark``, and how many the daemon caused."""
    actions = len(board.select(phase("restarting", revision=target), mark))
    pids = ", ".join(str(p.pid) for p in lab.webui_pids)
    return f"{lab.starts() - starts} server starts, {actions} by the daemon's action (processes: {pids})"


def registration(lab: Lab, revision: str) -> tuple[bool, str]:
    """Whether the daemon has the WebUI's process registered on ``revision``."""
    snapshot = lab.snapshot()
    current = lab.webui_pid()
    processes = snapshot.get("processes") or []
    mine = [p for p in processes if current is not None and p.get("pid") == current.pid]
    ok = bool(mine) and all(p.get("revision") == revision for p in mine)
    listed = ", ".join(f"pid {p.get('pid')} on {str(p.get('revision'))[:7]}" for p in processes) or "none"
    restart = snapshot.get("restart") or {}
    return ok, (
        f"registered: {listed}; WebUI pid {current.pid if current else '?'}; "
        f"daemon: {snapshot.get('status')}, restart {restart.get('phase')} {restart.get('reason') or ''}"
    )


def served_after(lab: Lab, label: str) -> tuple[bool, str]:
    """The WebUI serves the new Agent: ``/api/btw`` 404 again, and a turn answers from ``label``."""
    guard = btw(lab.port)
    turn = Turn(lab.port, lab.board, "which Agent answers?", f"after-{label}").start()
    lab.on_close(turn.close)
    lab.board.wait_for(turn_end(turn.name), WAIT, since=0)
    ok = guard.status == 404 and turn.answer.endswith(f"answer from {label}")
    return ok, f"/api/btw {guard.status or guard.error}, a new turn answered {turn.answer.strip()!r}"


# -- scenarios -------------------------------------------------------------------------


def scenario_lines(run: Run, checkout: Path) -> Scenario:
    s = Scenario("0: the docs' accelerator lines (with daemon=) in the WebUI's own file")
    block = readme_block()
    copy = run.dir / "srv" / "hermes-webui"
    make_copy(checkout, copy)
    if (copy / ".env").exists():  # the user's .env would pick the port and HOME, not us
        (copy / ".env").unlink()
        s.note("the checkout's .env was left out of the copy")
    original = (copy / RUNTIME).read_text(encoding="utf-8")
    append(copy, original, block)
    state = probe(run, copy)
    ok = state.startswith("read accelerated; registers with the daemon")
    s.check(ok and "restarts itself" not in state, f"{len(block.splitlines())} lines appended: {state}")
    if not state.startswith("read accelerated"):
        append(copy, original, "import os\n" + block)
        s.note(f"the rest runs with `import os` added before them (a workaround): {probe(run, copy)}")
    return s


def scenario_turn(run: Run) -> Scenario:
    s = Scenario("1: a chat turn in flight across `hermes update`")
    with run.lab("s1-turn") as lab:
        board = lab.board
        started = (health(lab.port) or {}).get("server_started_at")
        held = Turn(lab.port, board, f"please {HOLD_WORD}", "held").start()
        lab.on_close(held.close)
        hello = board.wait_for(lambda x: x.kind == "hold" and x.data["event"] == "started", WAIT)
        if hello is None:
            s.check(False, f"the held turn never reached the fake Agent: {held.events}")
            return s
        load = Load(lab.port, board, interval=run.args.interval).start()
        lab.on_close(load.stop)
        before = (health(lab.port) or {}).get("active_streams")
        target = lab.publish("two")
        mark, starts = board.mark(), lab.starts()
        steps = lab.hermes_update()
        # The turn stays held --hold seconds after the update: a restarter that drains
        # waits for it; one that does not cuts it, and its process goes away while held.
        held_id = hello.data["id"]
        gone = board.wait_for(
            lambda x: x.kind == "hold" and x.data["event"] == "ended" and x.data["id"] == held_id,
            run.args.hold,
            since=mark,
        )
        lab.hold.release(held_id)
        released = time.time()
        end = board.wait_for(turn_end("held"), WAIT, since=0)
        done = next((x.at for x in board.select(turn_event("held", "done"))), None)
        verdict = board.wait_for(verdict_on(target), run.verdict_timeout(), since=mark)
        lab.wait_until_serving(WAIT)
        began = board.wait_for(restart_began(started), 0, since=mark)
        how = end.data["how"] if end else "no end"
        if gone is not None:
            s.check(
                False,
                f"the turn was cut off: its process went away {gone.at - steps['end']:+.1f} s from the "
                f"update end while it was held; its stream ended ({how}), "
                f"`done` {'arrived' if done else 'never came'}",
            )
        else:
            s.check(
                done is not None and how == "stream_end",
                f"the turn finished: `done` {'arrived' if done else 'never came'}, its stream ended "
                f"({how}) {since(released, end)} after its release, "
                f"{released - steps['end']:.1f} s after the update end",
            )
        if began is None:
            s.check(False, "the restart followed the turn: no restart at all")
        else:
            after = done is not None and began.at > done
            s.check(
                after,
                f"the restart followed the turn: it began {began.at - steps['end']:+.1f} s from the "
                f"update end, {'after' if after else 'BEFORE'} the turn's end (released at "
                f"{released - steps['end']:+.1f} s)",
            )
        window_end = began.at if began is not None else released
        stale = [
            r
            for r in load.replies
            if r.path == "/api/btw" and r.start > steps["pulled"] and r.end < window_end
        ]
        n409 = sum(r.status == 409 for r in stale)
        s.check(
            bool(stale) and n409 == len(stale),
            f"409 meanwhile: {n409} of {len(stale)} guarded requests "
            f"between the pull and the restart; {restart_fields(stale)}",
        )
        ok, text = served_after(lab, "two")
        s.check(ok, f"the new revision is served: {text}")
        ok, text = registration(lab, target)
        confirmed = verdict is not None and verdict.data["phase"] == "confirmed"
        s.check(ok and confirmed, f"confirmed by the WebUI's registration: {text}")
        load.stop()
        s.note(f"WebUI start under supervisord: {lab.startup:.1f} s to /health 200")
        s.note(f"/health while the turn was held: active_streams {before}")
        s.note(f"daemon phases (from the update end): {phases_seen(board, mark, steps['end'])}")
        s.note(f"requests: {counts(load.replies)}; outage: {outage(load.replies, steps['end'])}")
        s.note(f"WebUI: {restarts(lab, board, mark, starts, target)}")
    return s


def scenario_refusals(run: Run) -> Scenario:
    s = Scenario("2: an incomplete update, and an Agent that does not import: refused, no restart, 409s")
    for slug, name, complete, broken, reason in (
        ("incomplete", "incomplete update", False, False, "incomplete"),
        ("broken", "Agent that does not import", True, True, "verify"),
    ):
        with run.lab(f"s2-{slug}") as lab:
            board = lab.board
            started = (health(lab.port) or {}).get("server_started_at")
            first = lab.webui_pid()
            load = Load(lab.port, board, interval=run.args.interval).start()
            lab.on_close(load.stop)
            target = lab.publish("two", broken=broken)
            mark = board.mark()
            steps = lab.hermes_update(complete=complete)
            verdict = board.wait_for(
                any_of(verdict_on(target), phase("restarting", revision=target)),
                run.verdict_timeout(),
                since=mark,
            )
            refused = verdict is not None and verdict.data["phase"] == "refused"
            why = verdict.data.get("reason") if verdict else "no verdict"
            s.check(
                refused and reason in str(why),
                f"{name}: {verdict.data['phase'] if verdict else 'nothing'}"
                f" ({why}) {(verdict.at - steps['end']) if verdict else 0:+.1f} s from the update end",
            )
            board.wait_for(restart_began(started), run.args.patience, since=mark)
            began = board.wait_for(restart_began(started), 0, since=mark)
            now = lab.webui_pid()
            s.check(
                began is None and now == first,
                f"{name}: no restart for {run.args.patience:.0f} s after the "
                f"refusal"
                + (
                    ""
                    if began is None
                    else f"; one began {began.at - steps['end']:+.1f} s from the "
                    f"update end (pid {first.pid if first else '?'} -> {now.pid if now else '?'})"
                ),
            )
            load.stop()
            after = [r for r in load.replies if r.path == "/api/btw" and r.start > steps["end"]]
            n409 = sum(r.status == 409 for r in after)
            s.check(
                bool(after) and n409 == len(after),
                f"{name}: the WebUI kept answering 409: {n409} of "
                f"{len(after)} guarded requests after the update; {restart_fields(after)}",
            )
            s.note(f"{name}: daemon phases: {phases_seen(board, mark, steps['end'])}")
    return s


def scenario_late_daemon(run: Run) -> Scenario:
    s = Scenario("3: a daemon started after the move restarts the WebUI still on old code")
    with run.lab("s3-late", daemon=False) as lab:
        board = lab.board
        first = lab.webui_pid()
        started = (health(lab.port) or {}).get("server_started_at")
        target = lab.publish("two")
        steps = lab.hermes_update()
        # No guarded request before the daemon starts: nothing else may restart the WebUI.
        still = (health(lab.port) or {}).get("server_started_at") == started and lab.webui_pid() == first
        s.note(
            f"after the update, before the daemon: the WebUI {'still' if still else 'no longer'} "
            f"runs the process started before it (pid {first.pid if first else '?'})"
        )
        mark = board.mark()
        lab.start_daemon(run.policy)
        acted = board.wait_for(
            phase("restarting", revision=target), run.args.settle + run.args.patience + WAIT / 2, since=mark
        )
        s.check(
            acted is not None,
            "the daemon restarted the WebUI: "
            + (
                f"its action began {acted.at - steps['end']:.1f} s after the update ended"
                if acted
                else f"it never acted; it says: {lab.status(as_json=False).splitlines()[0:1]}"
            ),
        )
        verdict = board.wait_for(verdict_on(target), run.verdict_timeout(), since=mark)
        lab.wait_until_serving(WAIT)
        ok, text = served_after(lab, "two")
        s.check(ok, f"the new revision is served: {text}")
        ok, text = registration(lab, target)
        s.check(
            ok and verdict is not None and verdict.data["phase"] == "confirmed",
            f"confirmed by the WebUI's registration: {text}",
        )
        s.note(f"daemon phases (from the update end): {phases_seen(board, mark, steps['end'])}")
    return s


def scenario_timings(run: Run) -> Scenario:
    s = Scenario("4: timings under a steady light request loop")
    with run.lab("s4-timings") as lab:
        board = lab.board
        load = Load(lab.port, board, interval=run.args.interval, seconds=run.args.rounds * 150).start()
        lab.on_close(load.stop)
        landed = single = stale = by_daemon = 0
        for number in range(1, run.args.rounds + 1):
            started = (health(lab.port) or {}).get("server_started_at")
            target = lab.publish(f"r{number}")
            mark, starts = board.mark(), lab.starts()
            steps = lab.hermes_update()
            verdict = board.wait_for(verdict_on(target), run.verdict_timeout() + 30, since=mark)
            began = board.wait_for(restart_began(started), 0, since=mark)
            after = began.at if began is not None else steps["pulled"]
            # The next round starts once the WebUI serves again (its guard route: 404).
            back = board.wait_for(guarded(404, after), WAIT, since=mark)
            pulled, end = steps["pulled"], steps["end"]
            first409 = next((r.end for r in load.replies if r.start > pulled and r.status == 409), None)
            landed += (
                back is not None and verdict is not None and verdict.data["phase"] in ("confirmed", "idle")
            )
            single += lab.starts() - starts == 1
            by_daemon += len(board.select(phase("restarting", revision=target), mark)) == 1
            lab.webui_pid()  # the processes it ran on, for the figures
            stale += sum(
                r.path == "/api/btw"
                and r.status == 404
                and r.start > pulled
                and (began is None or r.end < began.at)
                for r in load.replies
            )
            s.note(
                f"round {number}: pull -> first 409 {since(pulled, first409)}; update end -> "
                f"{verdict.data['phase'] if verdict else 'no verdict'} {since(end, verdict)}, "
                f"-> served again (404) {since(end, back)}; {restarts(lab, board, mark, starts, target)}"
            )
            s.note(f"round {number}: phases {phases_seen(board, mark, end)}")
            s.note(f"round {number}: outage {outage(load.replies, end)}")
        load.stop()
        rounds = run.args.rounds
        s.check(landed == rounds, f"every update ends with the WebUI serving it: {landed} of {rounds}")
        s.check(single == rounds, f"one server start per update: {single} of {rounds} rounds")
        s.check(
            by_daemon == rounds,
            f"each by the daemon's action (the WebUI never restarted itself): {by_daemon} of {rounds} rounds",
        )
        s.check(not any(r.lost for r in load.replies), f"no request lost: {counts(load.replies)}")
        s.check(
            stale == 0, f"no stale answer: {stale} guarded requests answered 404 by old code after the pull"
        )
        s.note(f"load: one client, {run.args.interval * 1000:.0f} ms between requests, every 5th /health")
    return s


# -- the WebUI copy --------------------------------------------------------------------


def readme_block() -> str:
    """The docs' Python block that ends the WebUI's file with ``daemon=`` (docs/hermes.md)."""
    text = (ROOT / "docs" / "hermes.md").read_text(encoding="utf-8")
    for block in re.findall(r"```python\n(.*?)```", text, re.DOTALL):
        if "accelerate(sys.modules[__name__]" in block and "daemon=" in block:
            return str(block)
    raise SystemExit("check_hermes_server: docs/hermes.md has no accelerator block with daemon=")


def append(copy: Path, original: str, block: str) -> None:
    imports_sys = any(
        isinstance(n, ast.Import) and any(a.name == "sys" for a in n.names) for n in ast.parse(original).body
    )
    (copy / RUNTIME).write_text(original + ("" if imports_sys else "\nimport sys\n") + "\n" + block)


def probe(run: Run, copy: Path) -> str:
    home = run.dir / "probe-home"
    home.mkdir(exist_ok=True)
    env = {
        "HOME": str(home),
        "PATH": "/usr/bin:/bin",
        "STALEWATCH_SOCKET": str(home / "none.sock"),
        "PYTHONDONTWRITEBYTECODE": "1",
        # The WebUI's servers inherit this process's environment (through supervisord):
        # the probe imports the same stalewatch they do.
        **({"PYTHONPATH": os.environ["PYTHONPATH"]} if os.environ.get("PYTHONPATH") else {}),
    }
    done = subprocess.run(
        [run.python, "-c", _PROBE],
        cwd=copy,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if done.returncode != 0:
        return f"the import fails: {(done.stderr.strip().splitlines() or ['?'])[-1]}"
    return "; ".join(done.stdout.split("\n")).strip("; ")


SCENARIOS: dict[int, Callable[[Run], Scenario]] = {
    1: scenario_turn,
    2: scenario_refusals,
    3: scenario_late_daemon,
    4: scenario_timings,
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkout", type=Path, help="a Hermes WebUI checkout (never modified)")
    parser.add_argument(
        "--python", default=sys.executable, help="runs the WebUI (its requirements + stalewatch)"
    )
    parser.add_argument("--only", type=int, nargs="+", choices=sorted(SCENARIOS), help="scenarios to run")
    parser.add_argument("--hold", type=float, default=8.0, help="seconds a turn is held after the update")
    parser.add_argument(
        "--patience", type=float, default=8.0, help="seconds to watch for what must not happen"
    )
    parser.add_argument("--settle", type=float, default=2.0, help="the policy's settle (hermes setup: 2)")
    parser.add_argument("--confirm-timeout", type=float, default=30.0, help="the policy's confirm_timeout")
    parser.add_argument("--rounds", type=int, default=2, help="updates in scenario 4")
    parser.add_argument("--interval", type=float, default=0.05, help="seconds between two load requests")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory and print where")
    args = parser.parse_args()
    checkout = args.checkout.resolve()
    if not (checkout / RUNTIME).is_file() or not (checkout / "start.sh").is_file():
        print(
            f"check_hermes_server: {checkout} has no {RUNTIME} and start.sh: not a Hermes WebUI checkout",
            file=sys.stderr,
        )
        return 2
    if shutil.which("supervisord", path=str(Path(sys.executable).parent)) is None:
        print(
            "check_hermes_server: supervisord not found beside this Python: pip install supervisor",
            file=sys.stderr,
        )
        return 2
    run = Run(args, Path(tempfile.mkdtemp(prefix="chs-", dir="/tmp")), args.python)
    print(
        f"WebUI checkout: {checkout} ({describe(checkout)})\nWebUI python: {args.python}\n"
        f"policy: settle {args.settle} s, confirm_timeout {args.confirm_timeout} s, min_interval and "
        f"max_attempts at their defaults; action supervisorctl restart; confirmation by registration"
    )
    scenarios = []
    try:
        first = scenario_lines(run, checkout)
        first.report()
        scenarios.append(first)
        for number in args.only or sorted(SCENARIOS):
            scenario = SCENARIOS[number](run)
            scenario.report()
            scenarios.append(scenario)
    finally:
        if args.keep:
            print(f"\nkept in {run.dir}")
        else:
            shutil.rmtree(run.dir, ignore_errors=True)
    passed = sum(s.passed for s in scenarios)
    print(f"\n{passed} of {len(scenarios)} scenarios passed")
    return 0 if passed == len(scenarios) else 1


def describe(checkout: Path) -> str:
    done = subprocess.run(
        ["git", "-C", str(checkout), "describe", "--tags", "--always"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    return done.stdout.strip() or "not a git checkout"


if __name__ == "__main__":
    start = time.monotonic()
    code = main()
    print(f"({time.monotonic() - start:.0f} s)")
    sys.exit(code)
