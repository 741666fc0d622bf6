"""What the restart machine asks for: the effects of one step (see :mod:`.machine`).

An executor carries them out in the order given. Requests carry a ``ticket``: the
answer (an input of :mod:`.inputs`) must carry it back. At most one request is awaited
at a time; ``ReadHead`` during confirmation is the only one asked without waiting.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from ...core.phases import RestartState
from .actions.base import REPLACES, Traits


class Stage(enum.IntEnum):
    """Where one run of the sequence for a target stands, in the order it moves.

    Within a run the stage only grows; a run starts at ``SCHEDULED`` (a new target, a
    retry, or a start over after a re-check under the lock); ``DONE`` ends it.
    """

    IDLE = 0
    SCHEDULED = 1
    SETTLE = 2
    INTERVAL = 3
    MARKERS = 4
    VERIFY = 5
    DRAIN = 6
    LOCK = 7
    LOCKED_HEAD = 8
    LOCKED_MARKERS = 9
    LOCKED_DRAIN = 10
    LOCKED_VERIFY = 11
    FINAL_HEAD = 12
    ACT = 13
    CONFIRM = 14
    CONFIRM_VERIFY = 15
    DONE = 16


@dataclass(frozen=True)
class Publish:
    """Tell this phase: the executor stamps ``at`` (``time.time()``) and publishes it.

    ``stage``: where the sequence stood when it was decided (for ordering checks).
    ``earliest``: when the next action may run at the earliest, on the machine's clock
    (``None``: nothing holds it back); the executor turns it into ``state.earliest``,
    a ``time.time()``.
    """

    state: RestartState
    stage: Stage
    earliest: float | None = None


@dataclass(frozen=True)
class Wake:
    """Feed a ``Tick`` at or after ``at`` (monotonic); replaces the previous one. ``None``: no timer."""

    at: float | None


@dataclass(frozen=True)
class Request:
    """A request of the machine: its answer carries ``ticket`` back."""

    ticket: int


@dataclass(frozen=True)
class ReadHead(Request):
    """Read HEAD now (``Guard.refresh()``) and answer with ``Head(now, revision, ticket)``."""


@dataclass(frozen=True)
class CheckMarkers(Request):
    """Judge the markers (``markers.assess``) and answer with ``Markers``."""


@dataclass(frozen=True)
class Verify(Request):
    """Run the verify probe against ``revision`` in the worktree; answer with ``Verified``."""

    revision: str


@dataclass(frozen=True)
class ProbeDrain(Request):
    """A look at the drain of the run for ``revision``: run the drain probe (if the policy
    has one) and tell which of ``pids`` (servers that went away with work in flight) no
    longer run; answer with ``Drain`` (the probe's whole number, or ``None`` and why; ``gone``)."""

    pids: frozenset[int] = frozenset()
    revision: str = ""


@dataclass(frozen=True)
class TakeLock(Request):
    """Try the handoff lock without blocking; answer with ``Lock``. Held until ``ReleaseLock``."""


@dataclass(frozen=True)
class ReleaseLock:
    """Release the handoff lock (harmless when not held)."""


@dataclass(frozen=True)
class Act(Request):
    """Restart through the supervisor onto ``revision``; answer with ``Acted``.

    ``action``: what the machine took the action to be able to do when it decided.
    """

    revision: str
    action: Traits = REPLACES


@dataclass(frozen=True)
class ProbeConfirm(Request):
    """Run the confirm probe once; answer with ``Verified``."""

    revision: str


@dataclass(frozen=True)
class Retire:
    """Confirmed, the action started the new beside the old: stop the old servers
    (``Traits.retires``; gunicorn: ``TERM`` the old master).

    ``pids``: the servers registered before the action (the ones to go); ``ticket``: the
    ``Act`` whose servers these are (only that handoff's old master is stopped).
    """

    pids: frozenset[int]
    ticket: int


@dataclass(frozen=True)
class Abort:
    """Not confirmed: stop the new servers (``Traits.aborts``; gunicorn: ``TERM`` the new
    master); the old serve on.

    ``pids``: the servers registered since the action, not among the old ones (maybe none);
    ``ticket``: the ``Act`` that started them. Only a new master that very action
    started is stopped: never one of an earlier handoff (whose old master is retired and
    may be exiting: it is all that serves), never anything when the action signalled
    nothing.
    """

    pids: frozenset[int]
    ticket: int


@dataclass(frozen=True)
class Rebind:
    """The servers run ``revision`` now: the daemon's guard adopts it as loaded."""

    revision: str


Effect = Publish | Wake | Request | ReleaseLock | Retire | Abort | Rebind  # a Request: each of its kinds
"""One effect of :func:`~.machine.step`."""
