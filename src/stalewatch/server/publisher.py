"""What the daemon tells its socket subscribers, and when (see :mod:`stalewatch.protocol`).

Used on the loop's thread only. Each line is encoded once and queued for every client
(:class:`~.connections.ClientSet` never blocks on one; the loop writes a turn's lines
together, :meth:`~.connections.ClientSet.flush_pending`); one client's failure is its own.
Generations make every event reach each client exactly once, after its snapshot.

A new client's greeting is ``hello`` and a ``snapshot`` line per checkout. The snapshot
lines are encoded once and kept, joined, until something a snapshot shows changes:
every such change reaches the loop as a message (an event, a health report, a restart
phase, a process registered or gone, a reload), which drops what it touches. So a new
client costs the loop its ``hello`` and one shared block of bytes, with a thousand
checkouts as with one. A kept snapshot may be older than its guard's own state only
until the loop handles that change's message, which then reaches the new client as
its own line (its generation is above the snapshot's).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

from ..core.phases import RestartState
from ..core.status import Event, WatchMode
from ..core.version import __version__
from ..protocol.codec import encode
from ..protocol.messages import (
    event_line,
    health_message,
    hello_message,
    processes_message,
    removed_message,
    restart_message,
    snapshot_message,
)
from .checkout import Checkout
from .connections import Client, ClientSet
from .registry import Registry

logger = logging.getLogger(__name__)

_LOGGED = "stalewatch: %s is %s (loaded %s, current %s, generation %d)"  # an event, after its line
_AT = "\x00at\x00"  # stands for hello's `at` in its kept encoding (no real value is a string)


def _hello_around_at(keys: list[str], keepalive: float) -> tuple[bytes, bytes]:
    """The encoded ``hello`` (a thousand checkouts make it long) split around its ``at``.

    ``encode`` writes a float as ``repr`` does, so ``before + repr(t) + after`` is the
    line ``encode`` would write for ``at = t``.
    """
    message = hello_message(keys, keepalive, __version__) | {"at": _AT}
    # `at` comes last in a hello: split at the last quoted _AT (a checkout may hold it too).
    before, after = encode(message).rsplit(encode({"": _AT})[4:-2], 1)
    return before, after


class Publisher:
    """Builds and queues the protocol's lines for the daemon's clients."""

    def __init__(self, clients: ClientSet, registry: Registry) -> None:
        self._clients = clients
        self._registry = registry
        # By checkout, while it holds: the snapshot line, its generation, what it was made from.
        self._lines: dict[str, tuple[tuple[object, ...], int, bytes]] = {}
        # The greeting for one tuple of checkouts: (entries, hello split around its `at`,
        # the snapshot lines joined, their generations).
        self._greeting: tuple[Sequence[Checkout], tuple[bytes, bytes], bytes, dict[str, int]] | None = None
        self._unlogged: list[tuple[str, Event, int]] = []  # sent, for log_events

    def changed(self, entry: Checkout) -> None:
        """Something a snapshot of ``entry`` shows may have changed: encode it afresh."""
        self._lines.pop(entry.key, None)
        self._greeting = None

    def _line(self, entry: Checkout) -> tuple[tuple[object, ...], int, bytes]:
        restart = entry.restart_state
        made = (entry, entry.guard.version(), restart)
        cached = self._lines.get(entry.key)
        if cached is None or cached[0] != made:
            snap = entry.guard.snapshot()
            generation = entry.base + snap.generation
            processes = [p.to_dict() for p in self._registry.processes(entry.key)]
            line = encode(snapshot_message(snap, generation, restart=restart, processes=processes))
            # The version read before the snapshot: a change in between only makes the
            # next greeting encode again.
            cached = self._lines[entry.key] = (made, generation, line)
        return cached

    def greet(self, client: Client, entries: Sequence[Checkout], keepalive: float) -> None:
        """A new client: ``hello``, then one ``snapshot`` per checkout (not yet written).

        ``entries`` is the daemon's tuple of checkouts, replaced whole when it changes:
        the joined snapshot lines are kept for it.
        """
        greeting = self._greeting
        if greeting is None or greeting[0] is not entries:
            lines = [self._line(entry) for entry in entries]
            gens = {entry.key: line[1] for entry, line in zip(entries, lines, strict=True)}
            hello = _hello_around_at([entry.key for entry in entries], keepalive)
            greeting = self._greeting = (entries, hello, b"".join(line[2] for line in lines), gens)
        _, (before, after), block, gens = greeting
        # Each client's hello says when it was sent: only `at` is written per client.
        self._clients.send(client, before + repr(time.time()).encode() + after, flush=False)
        client.gens.update(gens)
        if block:
            self._clients.send(client, block, flush=False)

    def snapshots(self, entries: list[Checkout]) -> None:
        """Every client learns where (new or re-bound) checkouts stand now."""
        if not entries:
            return
        for client in self._clients:
            with self._clients.isolated(client):
                for entry in entries:
                    _, client.gens[entry.key], line = self._line(entry)
                    self._clients.send(client, line, flush=False)  # written by the loop's flush_pending

    def event(self, entry: Checkout, event: Event) -> None:
        """A change of status: sent to every client that has not seen it (queued, for
        the loop's flush), and kept for :meth:`log_events`."""
        generation = entry.base + event.generation
        line = event_line(event, generation)
        for client in self._clients:
            # A client that connected after the change already has it in its snapshot.
            if client.gens.get(entry.key, -1) >= generation:
                continue
            client.gens[entry.key] = generation
            try:  # isolated (see ClientSet.failed)
                self._clients.send(client, line, flush=False)
            except Exception:
                self._clients.failed(client)
        self._unlogged.append((entry.key, event, generation))

    def log_events(self) -> None:
        """Log the events sent since the last call: after the loop flushed them, since a
        journal line (a record built and written to stderr or journald) costs the
        update's path a tenth of a millisecond and its subscribers wait for nothing it
        says (issue 17)."""
        unlogged, self._unlogged = self._unlogged, []
        for key, e, generation in unlogged:
            level = logging.WARNING if e.status.blocks else logging.INFO
            logger.log(level, _LOGGED, key, e.status.value, e.loaded_revision, e.current_revision, generation)

    def health(self, entry: Checkout, trusted: bool, mode: WatchMode) -> None:
        """The daemon's own watcher for a checkout became trusted or not."""
        self._clients.broadcast(encode(health_message(entry.key, trusted, mode)), flush=False)

    def restart(self, entry: Checkout, state: RestartState) -> None:
        """A new phase of a checkout's restart sequence."""
        self._clients.broadcast(encode(restart_message(entry.key, state)), flush=False)

    def processes(self, entry: Checkout) -> None:
        """Who runs which revision of a checkout, after a process came or went."""
        self.changed(entry)
        processes = [p.to_dict() for p in self._registry.processes(entry.key)]
        self._clients.broadcast(encode(processes_message(entry.key, processes)), flush=False)

    def removed(self, key: str) -> None:
        """A reload stopped watching ``key``."""
        self._lines.pop(key, None)
        self._greeting = None
        self._clients.broadcast(encode(removed_message(key)), flush=False)
        for client in self._clients:
            client.gens.pop(key, None)
