"""Values a guard reports: :class:`Status`, :class:`Snapshot` and :class:`Event`."""

from __future__ import annotations

import enum
import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .cause import Cause
from .phases import RestartState

logger = logging.getLogger(__name__)


class Status(enum.StrEnum):
    """Where a guard's checkout stands relative to the loaded code.

    ``CURRENT``: HEAD resolves to the loaded commit. ``STALE``: it resolves to another
    one. ``UNREADABLE``: a revision was known and HEAD can no longer be resolved;
    blocks like ``STALE``. ``UNTRACKED``: the source is not tracked by any repository;
    never blocks.
    """

    CURRENT = "current"
    STALE = "stale"
    UNREADABLE = "unreadable"
    UNTRACKED = "untracked"

    @property
    def blocks(self) -> bool:
        """True when the barrier refuses in this status."""
        return self in (Status.STALE, Status.UNREADABLE)


class WatchMode(enum.StrEnum):
    """How a guard learns that its checkout may have moved.

    ``NATIVE``: the kernel's notifications in this process (the only mode a flag read
    can be trusted in). ``POLLING``: a scan every poll interval, while notification is
    unavailable (never trusted: every check re-reads HEAD). ``DAEMON``: a stalewatch
    daemon's socket. ``NONE``: nothing feeds the guard now.
    """

    NATIVE = "native"
    POLLING = "polling"
    DAEMON = "daemon"
    NONE = "none"

    @classmethod
    def of(cls, mode: WatchMode | str) -> WatchMode:
        """``mode`` as a member; a third-party source's unknown string is ``NONE`` (logged)."""
        try:
            return cls(mode)
        except ValueError:
            logger.warning("stalewatch: a source reported an unknown mode %r; taken as none", mode)
            return cls.NONE


def decide(loaded: str | None, current: str | None, *, readable: bool) -> Status:
    """The status for a loaded and a current revision of a tracked checkout.

    ``None`` is an unborn branch (no commit). Losing a known revision to an unborn
    or unreadable HEAD is ``UNREADABLE``: losing track fails closed; two different commits are ``STALE``.
    """
    if not readable:
        return Status.UNREADABLE
    if current == loaded:
        return Status.CURRENT
    if current is None:
        return Status.UNREADABLE
    return Status.STALE


@dataclass(frozen=True)
class Snapshot:
    """A guard's state at one moment.

    Attributes:
        status: the status.
        checkout: the working tree watched.
        loaded_revision: the commit the process loaded (``None``: unborn or untracked).
        current_revision: what HEAD resolves to now (``None``: unborn or unreadable).
        generation: increases by one on every change of status or current revision.
        changed_at: ``time.time()`` of the last change.
        trusted: whether the barrier may decide from the flag alone right now.
        mode: how changes are noticed (:class:`WatchMode`, a string enum).
        error: why HEAD is unreadable, when it is; for ``UNTRACKED``, why the guard
            never blocks and what to do (commit the file; run from a git checkout).
        restart: where an automatic restart stands, when a daemon with a restart
            policy feeds this guard; ``None`` otherwise.
        cause: what moved HEAD to the current revision, read from the reflog when it
            changed (``None``: not moved since binding, unreadable, or no reflog).
    """

    status: Status
    checkout: Path
    loaded_revision: str | None
    current_revision: str | None
    generation: int
    changed_at: float
    trusted: bool = False
    mode: WatchMode = WatchMode.NONE
    error: str | None = None
    restart: RestartState | None = None
    cause: Cause | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.mode, WatchMode):  # a plain string: "native" is WatchMode.NATIVE
            object.__setattr__(self, "mode", WatchMode.of(self.mode))

    def to_dict(self) -> dict[str, Any]:
        return {
            "checkout": str(self.checkout),
            "status": self.status.value,
            "loaded_revision": self.loaded_revision,
            "current_revision": self.current_revision,
            "generation": self.generation,
            "at": self.changed_at,
            "trusted": self.trusted,
            "mode": self.mode.value,
            "error": self.error,
            "restart": None if self.restart is None else self.restart.to_dict(),
            "cause": self.cause.to_dict() if self.cause is not None else None,
        }


@dataclass(frozen=True)
class Event:
    """One change of a guard's status or current revision.

    Attributes:
        checkout: the working tree watched.
        status: the new status.
        previous_status: the status before this change.
        loaded_revision: the commit the process loaded.
        current_revision: what HEAD resolves to now.
        generation: strictly increasing per guard, without gaps.
        at: ``time.time()`` when the change was observed.
        error: why HEAD is unreadable, when it is.
        cause: what moved HEAD to ``current_revision`` (action, who, when, ahead or
            behind the loaded commit), from the reflog; ``None`` when it cannot tell.
    """

    checkout: Path
    status: Status
    previous_status: Status
    loaded_revision: str | None
    current_revision: str | None
    generation: int
    at: float
    error: str | None = None
    cause: Cause | None = None

    def to_dict(self) -> dict[str, Any]:
        """The event as plain JSON-able values (paths and statuses as strings)."""
        return dict(  # the fields, in their order
            vars(self),
            checkout=str(self.checkout),
            status=self.status.value,
            previous_status=self.previous_status.value,
            cause=self.cause.to_dict() if self.cause is not None else None,
        )

    def to_json(self) -> str:
        """The event as one line of JSON (no newline)."""
        return json.dumps(self.to_dict(), separators=(",", ":"))


def transition(
    old: Snapshot,
    current: str | None,
    error: str | None,
    *,
    loaded: str | None = None,
    latch: bool = False,
) -> tuple[Snapshot, Event] | None:
    """What a new reading of HEAD makes of ``old``: the next snapshot and its event.

    ``None`` when nothing changed (a write that did not move HEAD's commit is no
    event). ``loaded``: the code now runs that revision (adopted after a restart).
    ``latch``: a blocked guard stays blocked after a rollback.
    """
    adopting = loaded is not None and loaded != old.loaded_revision
    loaded = loaded if adopting else old.loaded_revision
    status = decide(loaded, current, readable=error is None)
    if latch and old.status.blocks and status is Status.CURRENT and not adopting:
        status = Status.STALE
    if status is old.status and current == old.current_revision and not adopting:
        return None
    # Built field by field, not by dataclasses.replace: an update's path (issue 27).
    generation, at = old.generation + 1, time.time()
    new = Snapshot(
        status, old.checkout, loaded, current, generation, at, old.trusted, old.mode, error, old.restart
    )
    return new, Event(old.checkout, status, old.status, loaded, current, generation, at, error)


def with_cause(snapshot: Snapshot, event: Event, cause: Cause | None) -> tuple[Snapshot, Event]:
    """``snapshot`` and ``event`` (from :func:`transition`) told what moved HEAD."""
    # Not dataclasses.replace, which copies field by field in Python (issue 27).
    return Snapshot(**vars(snapshot) | {"cause": cause}), Event(**vars(event) | {"cause": cause})
