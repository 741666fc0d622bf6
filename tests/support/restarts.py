"""Helpers for the restart tests: a daemon's configuration, its restart lines, raw servers.

A *raw server* is a socket client speaking the protocol as a server process would
(``register`` with its work in flight, then ``inflight`` lines), without a guard: the
tests decide what it says and when.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from stalewatch.protocol.codec import encode
from stalewatch.protocol.messages import inflight_message, register_message
from tests.support.daemons import WAIT, Subscriber, greet
from tests.support.repos import Repo

__all__ = ["RECORD", "SKIP", "RawServer", "config", "names", "phases", "runs"]

SKIP = ("ping", "health", "event", "snapshot", "processes", "pong")


def _toml(value: object) -> str:
    return json.dumps(value, default=str)  # strings and lists of strings: TOML reads JSON's form


def config(workdir: Path, repo: Repo, **restart: object) -> Path:
    """A configuration watching ``repo`` with a ``[checkout.restart]`` table (``None``: no such key).

    Quick by default: a short settle and drain poll (the drain waits one poll for the
    servers' counts after announcing), no min-interval, and no reconnect grace (each
    test's servers connect to the daemon it started; a test of the grace sets it).
    """
    runs = workdir / "runs"
    restart.setdefault("action", [sys.executable, "-c", RECORD, str(runs)])
    restart.setdefault("settle", 0.05)
    restart.setdefault("min_interval", 0)
    restart.setdefault("reconnect_grace", 0)
    restart.setdefault("drain_poll", 0.2)
    lines = [f"{key} = {_toml(value)}" for key, value in restart.items() if value is not None]
    file = workdir / "stalewatch.toml"
    file.write_text(
        f'keepalive = 0.5\n\n[[checkout]]\npath = "{repo.path}"\n\n[checkout.restart]\n' + "\n".join(lines)
    )
    file.chmod(0o600)
    return file


RECORD = "import sys; open(sys.argv[1], 'a').write('run\\n')"


def runs(workdir: Path) -> int:
    path = workdir / "runs"
    return len(path.read_text().splitlines()) if path.exists() else 0


def phases(sub: Subscriber, *until: str, timeout: float = WAIT) -> list[dict[str, Any]]:
    """Restart lines up to and including the first whose phase is in ``until``."""
    seen = []
    deadline = time.monotonic() + timeout
    while True:
        message = sub.next(timeout=max(0.1, deadline - time.monotonic()), skip=SKIP)
        if message["type"] != "restart":
            continue
        seen.append(message)
        if message["phase"] in until:
            return seen


def phases_since(
    snapshot: dict[str, Any], sub: Subscriber, *until: str, timeout: float = WAIT
) -> list[dict[str, Any]]:
    """As :func:`phases`, starting from the phase a greeting's ``snapshot`` held: a daemon
    may tell phases before the subscriber connects (what runs is learnt at its start)."""
    first = snapshot.get("restart")
    if first is not None and first["phase"] == "idle" and not (first["reason"] or first["revision"]):
        first = None  # the daemon's start, before it learnt anything: what it learns follows
    if first is not None and first["phase"] in until:
        return [first]
    return ([first] if first is not None else []) + phases(sub, *until, timeout=timeout)


def names(seen: list[dict[str, Any]]) -> list[str]:
    return [m["phase"] + (f": {m['reason'].split(':')[0]}" if m["reason"] else "") for m in seen]


class RawServer(Subscriber):
    """A connection that registers as a server process of ``checkout`` (its pid is ours)."""

    def __init__(self, socket: Path, checkout: Path) -> None:
        super().__init__(socket)
        self.checkout = str(checkout)
        greet(self)

    def register(self, revision: str, inflight: int = 0) -> None:
        self.send(encode(register_message(self.checkout, revision, inflight)))

    def inflight(self, count: int) -> None:
        self.send(encode(inflight_message(self.checkout, count)))
