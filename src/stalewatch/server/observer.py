"""What the daemon tells an observer (its metrics), as one object: :class:`DaemonObserver`.

The daemon calls the same few methods whether or not anyone counts: this base class
does nothing, and is what the daemon holds when no observer factory is given (the
command line gives :func:`stalewatch.metrics.for_daemon` only when the configuration
asks for metrics). :class:`stalewatch.metrics.DaemonMetrics` is the one that counts.
The server defines this protocol and never imports the metrics package.
"""

from __future__ import annotations

from ..core.phases import RestartState
from ..core.status import Event
from .checkout import Checkout


class DaemonObserver:
    """The daemon's calls into an observer; every method here is a no-op (metrics off).

    The daemon's loop calls :meth:`event`, :meth:`restart`, :meth:`changed`,
    :meth:`track`, :meth:`forget` and the client methods; hook runners call
    :meth:`hook` on their own threads. None of them may raise into the daemon.
    """

    def start(self) -> None:
        """Begin exposing (listen, write the textfile)."""

    def stop(self) -> None:
        """Stop exposing. Harmless twice."""

    def track(self, entry: Checkout) -> None:
        """A checkout begins to be watched (at start, or a reload's new guard)."""

    def forget(self, key: str) -> None:
        """A reload stopped watching ``key``."""

    def event(self, entry: Checkout, event: Event) -> None:
        """An event was fanned out to the clients."""

    def hook(self, key: str, hook: str, outcome: str) -> None:
        """A hook run ended with ``outcome``: ``success``, ``failure``, ``killed``, ``timeout``
        or ``not_started``."""

    def restart(self, entry: Checkout, state: RestartState) -> None:
        """A restart phase was published."""

    def changed(self) -> None:
        """Something a scrape reads changed (a watcher's health, a registration)."""

    def client_connected(self) -> None:
        """A client was admitted."""

    def client_closed(self) -> None:
        """An admitted client's connection was closed."""

    def client_dropped(self, reason: str) -> None:
        """A client was dropped or refused for ``reason`` (``bad-request``, ``slow-client``,
        ``too-many-clients``, ``error``)."""
