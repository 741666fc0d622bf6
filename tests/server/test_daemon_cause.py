"""The cause of a move through the daemon: event and snapshot lines, `events` lines, hooks."""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path

from stalewatch.cli.human_lines import human_line as format_message
from stalewatch.core.cause import Cause
from stalewatch.core.status import Event, Status
from stalewatch.protocol.codec import decode
from stalewatch.protocol.messages import event_line
from stalewatch.server.hooks import hook_environment
from tests.support.daemons import WAIT, Subscriber, greet, short_dir, start_daemon
from tests.support.repos import Repo

# Reports its STALEWATCH_* environment to the test over a Unix socket, then exits.
HOOK = r"""
import json, os, socket, sys
sock = socket.socket(socket.AF_UNIX)
sock.connect(sys.argv[1])
env = {k: v for k, v in os.environ.items() if k.startswith("STALEWATCH_")}
sock.sendall(json.dumps(env).encode() + b"\n")
"""


def _receive(server: socket.socket) -> dict[str, str]:
    server.settimeout(WAIT)
    conn, _ = server.accept()
    with conn:
        conn.settimeout(WAIT)
        data = b""
        while not data.endswith(b"\n"):
            chunk = conn.recv(65536)
            assert chunk, "the hook closed without reporting"
            data += chunk
    report: dict[str, str] = json.loads(data)
    return report


def test_daemon_lines_and_hooks_carry_the_cause(git_repo: Repo) -> None:
    loaded = git_repo.head()
    with short_dir() as workdir:
        server = socket.socket(socket.AF_UNIX)
        server.bind(str(workdir / "hook.sock"))
        server.listen()
        argv = ", ".join(
            json.dumps(part) for part in (sys.executable, "-c", HOOK, str(workdir / "hook.sock"))
        )
        config = workdir / "c.toml"
        config.write_text(f'[[checkout]]\npath = "{git_repo.path}"\non_stale = [{argv}]\n')
        try:
            with start_daemon(workdir, "--config", str(config)) as daemon, Subscriber(daemon.socket) as sub:
                _, (snapshot,) = greet(sub)
                assert snapshot["cause"] is None  # not moved since the daemon bound
                new = git_repo.commit("via the daemon")
                event = sub.next("event")
                assert (event["status"], event["current_revision"]) == ("stale", new)
                cause = event["cause"]
                assert (cause["action"], cause["message"], cause["relation"], cause["ahead"]) == (
                    "commit",
                    "commit: via the daemon",
                    "ahead",
                    1,
                )
                line = format_message(event)
                assert line is not None
                assert line.endswith(cause["summary"])
                assert (
                    f"loaded {loaded[:7]} current {new[:7]} (generation 1): commit (1 commit ahead)" in line
                )

                env = _receive(server)
                assert env["STALEWATCH_CAUSE_ACTION"] == "commit"
                assert env["STALEWATCH_CAUSE_RELATION"] == "ahead"
                assert env["STALEWATCH_CAUSE_AHEAD"] == "1"
                assert env["STALEWATCH_CAUSE_BEHIND"] == ""
                assert env["STALEWATCH_CAUSE_MESSAGE"] == "commit: via the daemon"
                assert env["STALEWATCH_CAUSE_NAME"] == "stalewatch tests"
                assert env["STALEWATCH_CAUSE_EMAIL"] == "tests@stalewatch.invalid"
                assert env["STALEWATCH_CAUSE_SUMMARY"] == cause["summary"]
                assert env["STALEWATCH_CAUSE_AT"] == f"{cause['at']:.0f}"

                with Subscriber(daemon.socket) as late:  # a new subscriber's snapshot has it too
                    _, (fresh,) = greet(late)
                    assert fresh["cause"] == cause
                assert daemon.stop() == 0
        finally:
            server.close()


def test_without_a_cause_fields_are_null_and_empty() -> None:
    event = Event(Path("/srv/app"), Status.STALE, Status.CURRENT, "a" * 40, "b" * 40, 3, 1.0)
    message = decode(event_line(event, 3))
    assert message["cause"] is None
    assert format_message(message) == "stale      /srv/app loaded aaaaaaa current bbbbbbb (generation 3)"
    env = hook_environment(event, 3, "on_stale")
    assert {k: v for k, v in env.items() if k.startswith("STALEWATCH_CAUSE_")} == {
        f"STALEWATCH_CAUSE_{name}": ""
        for name in (
            "ACTION",
            "DETAIL",
            "MESSAGE",
            "NAME",
            "EMAIL",
            "RELATION",
            "AHEAD",
            "BEHIND",
            "SUMMARY",
            "AT",
        )
    }


def test_an_old_style_line_and_odd_causes_never_break_the_human_line() -> None:
    base = {"type": "event", "checkout": "/c", "status": "stale", "loaded_revision": None}
    base |= {"current_revision": None, "generation": 1}
    for cause in (None, 7, "x", {"summary": 5}, {"summary": ""}, {}):
        assert (
            format_message(base | {"cause": cause})
            == "stale      /c loaded (none) current (none) (generation 1)"
        )
    assert format_message(base).endswith("(generation 1)")  # a version 1 daemon without causes


def test_hook_values_never_hold_a_nul() -> None:
    cause = Cause("commit", None, "m", "n", "e", 1.0, "+0000", "ahead", 1, None)
    event = Event(Path("/srv/app"), Status.STALE, Status.CURRENT, "a" * 40, "b" * 40, 3, 1.0, None, cause)
    env = hook_environment(event, 3, "on_stale")
    assert env["STALEWATCH_CAUSE_AHEAD"] == "1"
    assert all("\x00" not in value for value in env.values())
