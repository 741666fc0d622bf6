"""What the daemon tells its socket subscribers, and when (see :mod:`stalewatch.protocol`).

Used on the loop's thread only. Each line is encoded once and queued for every client
(:class:`~.connections.ClientSet` never blocks on one); one client's failure is its own.
Generations make every event reach each client exactly once, after its snapshot (C12).
"""

from __future__ import annotations

import logging

from ..core.phases import RestartState
from ..core.status import Event, WatchMode
from ..core.version import __version__
from ..protocol.codec import encode
from ..protocol.messages import (
    event_message,
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

__all__ = ["Publisher"]

logger = logging.getLogger(__name__)


class Publisher:
    """Builds and queues the protocol's lines for the daemon's clients."""

    def __init__(self, clients: ClientSet, registry: Registry) -> None:
        self._clients = clients
        self._registry = registry

    def greet(self, client: Client, entries: list[Checkout], keepalive: float) -> None:
        """A new client: ``hello``, then one ``snapshot`` per checkout."""
        hello = hello_message([entry.key for entry in entries], keepalive, __version__)
        self._clients.send(client, encode(hello), flush=False)
        for entry in entries:
            self._snapshot(client, entry)

    def _snapshot(self, client: Client, entry: Checkout) -> None:
        snap = entry.guard.snapshot()
        generation = entry.base + snap.generation
        client.gens[entry.key] = generation
        processes = [p.to_dict() for p in self._registry.processes(entry.key)]
        message = snapshot_message(snap, generation, restart=entry.restart_state, processes=processes)
        self._clients.send(client, encode(message), flush=False)

    def snapshots(self, entry: Checkout) -> None:
        """Every client learns where a (new or re-bound) checkout stands now."""
        for client in self._clients:
            with self._clients.isolated(client):
                self._snapshot(client, entry)
                self._clients.flush(client)

    def event(self, entry: Checkout, event: Event) -> None:
        """A change of status: logged, then sent to every client that has not seen it."""
        generation = entry.base + event.generation
        level = logging.WARNING if event.status.blocks else logging.INFO
        logger.log(
            level,
            "stalewatch: %s is %s (loaded %s, current %s, generation %d)",
            entry.key,
            event.status.value,
            event.loaded_revision,
            event.current_revision,
            generation,
        )
        line = encode(event_message(event, generation))
        for client in self._clients:
            # A client that connected after the change already has it in its snapshot.
            if client.gens.get(entry.key, -1) >= generation:
                continue
            client.gens[entry.key] = generation
            with self._clients.isolated(client):
                self._clients.send(client, line)

    def health(self, entry: Checkout, trusted: bool, mode: WatchMode) -> None:
        """The daemon's own watcher for a checkout became trusted or not."""
        self._clients.broadcast(encode(health_message(entry.key, trusted, mode)))

    def restart(self, entry: Checkout, state: RestartState) -> None:
        """A new phase of a checkout's restart sequence (R7)."""
        self._clients.broadcast(encode(restart_message(entry.key, state)))

    def processes(self, entry: Checkout) -> None:
        """Who runs which revision of a checkout, after a process came or went (R5)."""
        processes = [p.to_dict() for p in self._registry.processes(entry.key)]
        self._clients.broadcast(encode(processes_message(entry.key, processes)))

    def removed(self, key: str) -> None:
        """A reload stopped watching ``key``."""
        self._clients.broadcast(encode(removed_message(key)))
        for client in self._clients:
            client.gens.pop(key, None)
