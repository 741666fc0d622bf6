"""The interface between a guard and whatever tells it that its checkout may have moved.

A guard does not care where notifications come from: :class:`~stalewatch.LocalSource`
runs a watchdog thread in this process, :class:`~stalewatch.Daemon` listens to a
stalewatch daemon's socket. Both implement :class:`Source`.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

from ..core.phases import RestartState
from ..core.status import WatchMode
from ..git.refs import GitDirs

OnChange = Callable[[], Sequence[Path] | None]
"""Called on the watcher's thread when HEAD may have moved: re-resolve and compare.

Returns the loose-ref files HEAD's resolution went through (``refs/heads/main``…),
so a watcher can move its watches without resolving HEAD again; ``None`` when the
callee cannot tell (the watcher then reads the chain itself).
"""
OnHealth = Callable[[bool, WatchMode], None]
"""Called with (trusted, mode) whenever either changes (a :class:`~stalewatch.core.status.WatchMode`)."""
OnRestart = Callable[[RestartState | None], None]
"""Called with each phase of an automatic restart a daemon publishes."""


class Workload(Protocol):
    """What a source may tell a daemon of its guard (its work in flight): a :class:`~stalewatch.Guard` is one.

    A daemon's restart drains the servers' work in flight before it stops them; a
    source that talks to a daemon reports :meth:`inflight` when it matters (the guard
    is :attr:`stale`, or the daemon's restart is coming).
    """

    @property
    def stale(self) -> bool:
        """True while the guard refuses (its code is not HEAD's)."""

    def inflight(self) -> int:
        """The guard's work in flight now (may call the application's counters)."""


class Watch(Protocol):
    """A running notification feed for one checkout (what a :class:`Source` returns)."""

    def start(self) -> None: ...

    def stop(self) -> None: ...


class Source(Protocol):
    """Where a guard learns that its checkout may have moved.

    The default is :class:`LocalSource` (a watchdog thread in this process); a daemon
    client is another. ``watch`` must call ``on_health(True, mode)`` only once any
    later change is sure to produce an ``on_change`` call.
    """

    def watch(
        self,
        dirs: GitDirs,
        on_change: OnChange,
        on_health: OnHealth,
        *,
        loaded_revision: str | None = None,
        on_restart: OnRestart | None = None,
    ) -> Watch:
        """Start feeding one checkout.

        ``loaded_revision`` (what the process loaded) and ``on_restart`` matter to a
        source that talks to a daemon with a restart policy; others ignore them. Such a
        source may also take ``work`` (a :class:`Workload`: what to tell the daemon of
        the work in flight); :func:`start_watch` passes it only to one that does.
        """


@functools.lru_cache(maxsize=64)
def _reads(watch: Callable[..., object]) -> tuple[bool, bool]:
    """Which keywords ``watch`` takes: (the restart ones, ``work``), by name or ``**kwargs``.

    Cached by function: inspecting a signature costs more than the rest of a start (a
    reload may start ten thousand watches)."""
    try:
        parameters = inspect.signature(watch).parameters
    except (TypeError, ValueError):
        return False, False
    anything = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
    restart = anything or {"loaded_revision", "on_restart"} <= parameters.keys()
    return restart, restart and (anything or "work" in parameters)


def start_watch(
    source: Source, dirs: GitDirs, on_change: OnChange, on_health: OnHealth, **offered: object
) -> Watch:
    """``source.watch(...)``, passing each keyword ``offered`` (``loaded_revision``,
    ``on_restart``, ``work``) only to a source that takes it.

    ``Source`` is public: one written before the restart keywords takes three
    arguments, and keeps working (without restart notices); one written before
    ``work`` gets the restart keywords without it.
    """
    watch: Callable[..., Watch] = source.watch  # `work` is not in the protocol (see there)
    function = getattr(watch, "__func__", watch)
    try:
        restart, work = _reads(function)
    except TypeError:  # an unhashable callable (a dataclass with __call__): asked each time
        restart, work = _reads.__wrapped__(function)
    taken = {key: value for key, value in offered.items() if work or (restart and key != "work")}
    return watch(dirs, on_change, on_health, **taken)
