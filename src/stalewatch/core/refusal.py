"""A refusal: what a refused request is told, built once and rendered by each consumer.

A barrier that refuses (a guard's :class:`~stalewatch.StaleError`, or any error
carrying the same attributes) becomes one :class:`Refusal` (:meth:`Refusal.of`): the
409's JSON body and ``Retry-After`` header (:mod:`stalewatch.web`), the Hermes
payloads (the drop-in's and the accelerator's) are each a rendering of it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from .cause import Cause
from .phases import RestartPhase, RestartState

NO_RESTART = "no automatic restart is configured"
"""``restart_reason`` when no daemon with a restart policy feeds the guard."""


def retry_seconds(retry_after: float) -> int:
    """Whole seconds to wait, at least 1: what ``Retry-After`` and the CLI's lines say."""
    return max(1, math.ceil(retry_after))


@dataclass(frozen=True)
class Refusal:
    """Why a request was refused, and what the client should do.

    Attributes:
        message: the error's text (``error`` in a payload).
        status: ``Status.STALE`` or ``Status.UNREADABLE`` (``None`` when unknown).
        loaded_revision: the commit the process loaded.
        current_revision: the commit HEAD resolves to now (``None``: unknown).
        cause: what moved HEAD, if known.
        restart: the restart phase a daemon with a restart policy last published.

    Example: ``Refusal.of(exc).payload()``.
    """

    message: str
    status: object = None
    loaded_revision: str | None = None
    current_revision: str | None = None
    cause: Cause | None = None
    restart: RestartState | None = None

    @classmethod
    def of(cls, exc: BaseException, restart: RestartState | None = None) -> Refusal:
        """The refusal an error says; ``restart`` stands for the error's own phase when given."""
        names = ("status", "loaded_revision", "current_revision", "cause", "restart")
        status, loaded, current, cause, known = (getattr(exc, name, None) for name in names)
        restart = restart or (known if isinstance(known, RestartState) else None)
        return cls(str(exc), status, loaded, current, cause if isinstance(cause, Cause) else None, restart)

    @property
    def retryable(self) -> bool:
        """Whether the same request, sent again after ``retry_after``, is expected to
        succeed: only while a restart is coming (else nothing changes until someone
        restarts the server). Decided here alone; only the drop-in, a copy of an older
        WebUI's file, keeps that version's ``True``."""
        return self.restart is not None and self.restart.scheduled

    @property
    def restart_phase(self) -> RestartPhase | None:
        """The daemon's restart phase, ``None`` without one."""
        return None if self.restart is None else self.restart.phase

    @property
    def retry_after(self) -> int | None:
        """Whole seconds (at least 1) for a ``Retry-After`` header while a restart is coming."""
        restart = self.restart
        if restart is None or restart.retry_after is None or not restart.scheduled:
            return None
        return retry_seconds(restart.retry_after)

    def restart_fields(self) -> dict[str, Any]:
        """What a payload says of the restart: while one is coming,
        ``restart_scheduled``, ``retry_after``, ``restart_phase``, with what it waits for
        (``restart_reason``: ``drain: 2 in flight``) and, while it drains, the work left
        (``restart_inflight``); after a refusal or failure ``restart_scheduled``
        false, ``restart_phase`` and ``restart_reason``; else (idle, or no daemon) nothing."""
        restart = self.restart
        if restart is None or restart.phase is RestartPhase.IDLE:
            return {}
        phase, reason = restart.phase.value, restart.reason
        if not restart.scheduled:
            return {"restart_scheduled": False, "restart_phase": phase, "restart_reason": reason or phase}
        more = {"restart_reason": reason or None, "restart_inflight": restart.inflight}
        fields = {"restart_scheduled": True, "retry_after": self.retry_after, "restart_phase": phase}
        return fields | {key: value for key, value in more.items() if value is not None}

    def body(self, kind: str) -> dict[str, Any]:
        """``{"error": message, "type": kind, "retryable": ...}``: what every payload starts with."""
        return {"error": self.message, "type": kind, "retryable": self.retryable}

    def payload(self, kind: str = "code_stale") -> dict[str, Any]:
        """A barrier's 409 body: :meth:`body` and the restart's fields, or
        ``restart_scheduled`` false with ``restart_reason`` :data:`NO_RESTART`."""
        fields = self.restart_fields() or {"restart_scheduled": False, "restart_reason": NO_RESTART}
        return {**self.body(kind), **fields}
