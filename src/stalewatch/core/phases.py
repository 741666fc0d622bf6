"""Where an automatic restart of the servers of a checkout stands: a value type.

A daemon with a restart policy (see :mod:`stalewatch.server.restart`) publishes a
:class:`RestartState` at every phase. A guard fed by that daemon keeps the latest one
in its :class:`~stalewatch.Snapshot` and in the :class:`~stalewatch.StaleError` it
raises, so a barrier can tell a client that a restart is coming and when to retry.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from typing import Any


class RestartPhase(enum.StrEnum):
    """A phase of one restart sequence.

    ``SCHEDULED``: a newer revision was seen; ``WAITING``: for the update to settle or
    finish, a lock, or the minimum interval (``reason`` says which); ``VERIFYING``: the
    probe runs against the new code; ``RESTARTING``: the action ran and the new servers
    are being confirmed; ``CONFIRMED``: every server runs the new revision;
    ``REFUSED``: not restarted, on purpose (``reason``); ``FAILED``: tried and failed.
    ``IDLE``: nothing to do (the servers run HEAD's code).
    """

    IDLE = "idle"
    SCHEDULED = "scheduled"
    WAITING = "waiting"
    VERIFYING = "verifying"
    RESTARTING = "restarting"
    CONFIRMED = "confirmed"
    REFUSED = "refused"
    FAILED = "failed"

    @property
    def coming(self) -> bool:
        """True while a restart is on its way (a client should retry later)."""
        return self.value in ("scheduled", "waiting", "verifying", "restarting")


@dataclass(frozen=True)
class RestartState:
    """One published phase of a checkout's restart sequence.

    Attributes:
        phase: the phase.
        reason: why it waits, was refused or failed (``None`` otherwise).
        revision: the revision the sequence restarts onto (``None`` when idle).
        attempt: how many times the action ran for this revision.
        retry_after: seconds until the new servers are expected to answer (an
            estimate, while a restart is coming); ``None`` otherwise.
        at: ``time.time()`` when the phase began.
        inflight: the work in flight the sequence waits for (while it drains),
            summed over the servers; ``None`` when it is not draining.
        estimate: seconds from a new commit to new servers answering when nothing else
            waits (settle, probes, the restart itself, as last measured); published in
            every phase by a daemon with a restart policy, so a server that sees a commit
            before the daemon announces it can still tell a client when to retry.
        earliest: ``time.time()`` before which no action can run (the minimum interval
            since the last one, so a restart cannot loop), or ``None`` when nothing holds it back.
    """

    phase: RestartPhase
    reason: str | None = None
    revision: str | None = None
    attempt: int = 0
    retry_after: float | None = None
    at: float = 0.0
    inflight: int | None = None
    estimate: float | None = None
    earliest: float | None = None

    @property
    def scheduled(self) -> bool:
        """True while a restart is coming (``restart_scheduled`` in a refusal's payload)."""
        return self.phase.coming

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON values (the protocol's ``restart`` fields)."""
        return dict(vars(self), phase=self.phase.value)  # the fields, in their order

    @classmethod
    def from_dict(cls, data: object) -> RestartState | None:
        """Parse what :meth:`to_dict` made (from a daemon); ``None`` when it is not one."""
        if not isinstance(data, dict) or data.get("phase") not in tuple(RestartPhase):
            return None
        reason, revision, inflight = data.get("reason"), data.get("revision"), data.get("inflight")
        attempt, at = data.get("attempt", 0), data.get("at", 0.0)
        times = [data.get(key) for key in ("retry_after", "estimate", "earliest")]
        if not (
            all(value is None or isinstance(value, str) for value in (reason, revision))
            and _whole(attempt)
            and (inflight is None or _whole(inflight))
            and all(_finite(value) for value in (at, *(t for t in times if t is not None)))
        ):
            return None
        retry_after, estimate, earliest = (None if t is None else float(t) for t in times)
        return cls(
            RestartPhase(data["phase"]),
            reason[:500] if reason else reason,
            revision[:64] if revision else revision,
            max(0, attempt),
            None if retry_after is None else max(0.0, retry_after),
            float(at),
            None if inflight is None else max(0, inflight),
            None if estimate is None else max(0.0, estimate),
            earliest,
        )


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _finite(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
