"""What the restart machine is told: one :data:`Input` per step (see :mod:`.machine`).

Every input carries ``now``: ``time.monotonic()`` when it happened (the machine never
reads a clock). Inputs are of three kinds:

- what the world says, whenever it changes: :class:`Head` (a reading of HEAD),
  :class:`Servers` (the accepted registrations, with their work in flight),
  :class:`Loaded` (what the supervisor or the process tells of servers that do not
  register), :class:`Reload` (new rules), :class:`Tick` (a requested wake-up);
- answers to the machine's requests, each with the ``ticket`` of its request (an answer
  whose ticket is not the one awaited is stale and ignored): :class:`Markers`,
  :class:`Verified`, :class:`Drain`, :class:`Lock`, :class:`Acted`, and
  :class:`Head` with a ticket;
- nothing else: stopping is the executor's business (it just stops feeding).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from .policy import Rules


@dataclass(frozen=True)
class Server:
    """One registered server process of the checkout.

    Attributes:
        pid: its pid, from the connection's peer credentials (0: unknown).
        revision: the revision it loaded; the registry refuses a revision the checkout
            never had before it gets here.
        inflight: the work it has in flight (requests through the barriers, long work
            such as agent turns), as it last said.
        since: ``time.monotonic()`` when it registered (same clock as ``now``).
    """

    pid: int
    revision: str
    inflight: int = 0
    since: float = 0.0


@dataclass(frozen=True)
class Head:
    """A reading of HEAD: an event of the daemon's guard, or the answer to ``ReadHead``.

    ``revision``: what HEAD resolves to (``None``: unborn or unreadable). ``ticket``: the
    ``ReadHead`` request this answers (``None`` for an event).
    """

    now: float
    revision: str | None
    ticket: int | None = None


@dataclass(frozen=True)
class Servers:
    """Every accepted registration of the checkout now (after any change, in flight included).

    Only registrations the registry accepted: a revision the checkout never had is
    refused there, so no client can make the machine want a restart with an invented
    revision.
    """

    now: float
    servers: tuple[Server, ...]


@dataclass(frozen=True)
class Loaded:
    """What the supervisor or the process tells of servers that do not register.

    The executor derives it, e.g. from the server process's start time against the
    times HEAD moved (the reflog):

    - ``revision``: HEAD's revision when the server process started: it runs that;
    - ``not_revision``: the server process started before HEAD moved to this revision
      (and the reflog cannot say from what): it does not run it;
    - ``stopped``: no server process runs (the pidfile names none, the supervisor
      says so): nothing runs old code, and the daemon never starts a stopped server;
    - none of them: it cannot be told (the machine keeps what it knew).

    ``why``: how it was told (or why it cannot be), said in the ``idle`` phase while no
    server registers.
    """

    now: float
    revision: str | None = None
    not_revision: str | None = None
    stopped: bool = False
    why: str = ""


@dataclass(frozen=True)
class Reload:
    """A reload: new rules; give-ups and counts are forgotten (the operator's "try again")."""

    now: float
    rules: Rules


@dataclass(frozen=True)
class Tick:
    """The time the machine asked for with ``Wake`` has come (or any later moment)."""

    now: float


@dataclass(frozen=True)
class Answer:
    """An answer to a request of the machine, with that request's ``ticket``."""

    ticket: int
    now: float


class Verdict(enum.StrEnum):
    """What the markers say: go, wait (an update runs, a hold), refuse (unclean end)."""

    GO = "go"
    WAIT = "wait"
    REFUSE = "refuse"


@dataclass(frozen=True)
class Markers(Answer):
    """The answer to ``CheckMarkers``: the verdict and its reason."""

    verdict: Verdict
    reason: str = ""


@dataclass(frozen=True)
class Verified(Answer):
    """The answer to ``Verify`` (did the probe pass against that revision; ``detail``: why
    not), and to ``ProbeConfirm`` (one run of the confirm probe)."""

    ok: bool
    detail: str = ""


@dataclass(frozen=True)
class Drain(Answer):
    """The answer to ``ProbeDrain``: the work in flight it reports (``None``: it failed, ``detail``;
    ``0`` without a probe), and ``gone``: those of the pids asked about that no longer run."""

    inflight: int | None
    detail: str = ""
    gone: frozenset[int] = frozenset()


@dataclass(frozen=True)
class Lock(Answer):
    """The answer to ``TakeLock``: taken, held by another (``detail``), or an ``error``."""

    acquired: bool
    detail: str = ""
    error: str | None = None


@dataclass(frozen=True)
class Acted(Answer):
    """The answer to ``Act``: did the action (command or signal) succeed (``detail``: how not).

    ``refused``: nothing was done, on purpose: the pidfile's pid is not the process the
    file was written for; the refusal stands for the revision.
    """

    ok: bool
    detail: str = ""
    refused: bool = False


Input = Head | Servers | Loaded | Reload | Tick | Markers | Verified | Drain | Lock | Acted
"""One input of :func:`~.machine.step`."""
