"""A server process's lines to the daemon, and its connection's end, on the loop's thread.

A process registers the revision it loaded (``register``), then says when its work in
flight changes (``inflight``); closing its connection unregisters it. The claim is
checked against what the checkout ever had, recorded in the :class:`~.registry.Registry`,
told to the clients (``processes`` lines) and to the checkout's restart sequence.
:class:`~.connections.ClientSet` has parsed and checked the lines; this is what the
daemon does with them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from ..protocol.codec import encode
from ..protocol.messages import refused_message
from .checkout import Checkout
from .connections import Client, ClientSet
from .observer import DaemonObserver
from .publisher import Publisher
from .registry import Registry

logger = logging.getLogger(__name__)


@dataclass(eq=False)
class Registrations:
    """What the daemon does with server processes' registrations (the loop's thread only).

    Its methods are :class:`~.connections.ClientSet`'s ``on_register``,
    ``on_inflight`` and ``on_close``.

    Args:
        checkout: the checkout watched under a key now (``None``: not watched here).
        registry: the registered processes.
        clients: where a refused registration's answer goes.
        publisher: tells clients who runs which revision.
        observer: told of clients that close and of processes that change (metrics).
    """

    _checkout: Callable[[str], Checkout | None]
    _registry: Registry
    _clients: ClientSet
    _publisher: Publisher
    _observer: DaemonObserver

    def register(self, client: Client, checkout: str, revision: str, inflight: int) -> None:
        """``client``'s process loaded ``revision`` of ``checkout`` and has ``inflight`` work."""
        entry = self._checkout(checkout)
        if entry is None:  # harmless: the client learns from hello that it is not watched
            logger.debug("stalewatch: client %d registered for %s, not watched here", client.number, checkout)
            return
        if not entry.knows(revision):
            # A revision the checkout never had (not HEAD, not in its reflog, never seen):
            # a lie or a bug. It must never make the restart machine want a restart (R10).
            reason = f"{revision} was never HEAD of {entry.key} (not in its reflog, never seen)"
            logger.warning(
                "stalewatch: client %d (pid %d): registration refused: %s", client.number, client.pid, reason
            )
            self._clients.send(client, encode(refused_message("register", checkout, reason)))
            return
        process = self._registry.register(client.number, entry.key, client.pid, revision, inflight)
        logger.info("stalewatch: pid %d registered for %s on %s", process.pid, entry.key, revision[:7])
        self._processes_changed(entry)

    def inflight(self, client: Client, checkout: str, inflight: int) -> None:
        """``client``'s registered process has ``inflight`` work now."""
        # Not broadcast as a `processes` line: one chatty server must not make every
        # client's queue grow. The restart sequence is woken and tells a drain's count;
        # the kept snapshot line shows the count, so it is encoded afresh when next asked.
        process = self._registry.set_inflight(client.number, inflight)
        entry = self._checkout(checkout) if process is not None else None
        if entry is not None:
            self._publisher.changed(entry)
            entry.processes_changed()

    def closed(self, client: Client) -> None:
        """``client``'s connection was closed: its process, if it registered, went away."""
        self._observer.client_closed()
        process = self._registry.unregister(client.number)
        entry = self._checkout(process.checkout) if process is not None else None
        if process is not None and entry is not None:
            what = (process.pid, process.revision[:7], entry.key)
            logger.info("stalewatch: pid %d (on %s) went away from %s", *what)
            self._processes_changed(entry)

    def _processes_changed(self, entry: Checkout) -> None:
        self._publisher.processes(entry)
        entry.processes_changed()
        self._observer.changed()
