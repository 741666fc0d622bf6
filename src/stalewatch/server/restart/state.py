"""The restart machine's state (see :mod:`.machine`): plain, immutable values.

:class:`State` is everything the machine knows between two steps; :class:`Attempt` is
one run of the sequence for a target, with its stage's bookkeeping; :class:`GiveUp` a
verdict that stands for its revision (R6).
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field

from ...core.phases import RestartPhase, RestartState
from .actions.base import REPLACES, Traits
from .drain import Departed
from .effects import Stage
from .inputs import Server
from .rules import Rules
from .running import Belief
from .waits import DEFAULT_RESTART, DEFAULT_VERIFY

__all__ = [
    "CONFIRM_POLL",
    "LOCK_POLL",
    "MARKER_POLL",
    "REFUSED_POLL",
    "Attempt",
    "Confirm",
    "GiveUp",
    "State",
    "interval_left",
]

MARKER_POLL = 0.5  # seconds between looks at markers while an update runs
REFUSED_POLL = 2.0  # seconds between looks at a refusing marker
LOCK_POLL = (0.05, 1.0)  # first and longest wait between tries of a held lock
CONFIRM_POLL = (0.2, 2.0)  # first and longest wait between runs of the confirm probe


class Confirm(enum.Enum):
    """How a restart is confirmed (R5), decided once the action succeeded."""

    REGISTRATIONS = "registrations"  # servers register (always when started beside the old)
    PROBE = "probe"  # the confirm probe, and no registered server on old code
    STATUS = "status"  # neither: the action's exit status is all there is


@dataclass(frozen=True)
class GiveUp:
    """A verdict that stands for ``revision`` until another is wanted or a reload (R6).

    ``loaded``: the servers already run it (they loaded a commit that failed the probe
    during a restart): it stands even though no restart is wanted.
    """

    phase: RestartPhase
    reason: str
    revision: str
    loaded: bool = False


@dataclass(frozen=True)
class Attempt:
    """One run of the sequence for ``target``: its stage and the stage's bookkeeping."""

    target: str
    stage: Stage
    began: float | None  # when HEAD was seen still (settle from here); None: settled already
    deadline: float | None = None  # the stage's timer: settle's end, the next look
    ask: int | None = None  # the ticket of the answer awaited
    asked_at: float = 0.0
    lock_held: bool = False
    lock_delay: float = LOCK_POLL[0]
    note: str | None = None  # "drain-timeout: N still in flight" once the bound let it go on
    announced: float | None = None  # when this run told clients a restart is coming (R8)
    final_look: bool = False  # the drain was looked at once more right before the action (R8)
    acted_at: float = 0.0
    act_ticket: int = 0  # the ticket of the action: Retire and Abort name what it started (R9)
    action: Traits = REPLACES  # what the action can do, as the machine took it when it acted
    confirm_by: Confirm = Confirm.STATUS
    old_pids: frozenset[int] = frozenset()
    confirm_until: float = 0.0
    probe_delay: float = CONFIRM_POLL[0]
    probe_ok: bool = False
    last: str = "the probe never ran"
    running: str | None = None  # what the restarted servers loaded (verified before confirmed)
    reloaded: bool = False  # a reload came after the action: its failure is not a verdict


@dataclass(frozen=True)
class State:
    """Everything the machine knows; a plain value. Start with ``State(rules)``.

    Attributes:
        rules: the policy in force.
        clock: the latest ``now`` seen (time never runs back for the machine).
        head: HEAD's revision as last read (``None``: unborn, unreadable, not read yet).
        servers: the accepted registrations, in flight included.
        registered: a server ever registered (confirm by registrations, R5).
        belief: what servers that do not register run (R10); ``why``: how that was
            last told (said while idle and no server registers).
        target: the revision the bound counts actions for; ``actions``: how many.
        last_action: ``now`` of the last action (for ``min_interval``).
        gave_up: the verdict standing for its revision, if any.
        drain_since: when the drain of the target began (``None``: none yet).
        probed, probe_detail: the drain probe's last answer.
        departed: registrations that went away with work in flight outside an action of
            the machine's: their work may still run (R8, :mod:`.drain`).
        attempt: the run under way, if any.
        published: the last phase told; ``published_at``: when (for ``drain_poll``).
        tickets: the last ticket given to a request.
        timer: the wake-up last asked for.
        retiring: the old servers a handoff retired (``TERM`` sent to their master): they
            leave as they finish their work (within gunicorn's ``graceful_timeout``) and
            never count for what runs meanwhile: a restart for them would signal the new
            master, all that serves besides them (R9).
        verify_seconds, restart_seconds: the last measured probe and restart times.
        started: when the daemon started (``None``: not known): its servers register
            again within the policy's ``reconnect_grace`` of it, and until then a drain does not
            take their silence for nothing in flight (R8).
    """

    rules: Rules
    clock: float = -math.inf
    head: str | None = None
    servers: tuple[Server, ...] = ()
    registered: bool = False
    belief: Belief = field(default_factory=Belief)
    why: str = ""
    target: str | None = None
    actions: int = 0
    last_action: float | None = None
    gave_up: GiveUp | None = None
    drain_since: float | None = None
    probed: int | None = None
    probe_detail: str = ""
    departed: tuple[Departed, ...] = ()
    attempt: Attempt | None = None
    published: RestartState = field(default_factory=lambda: RestartState(RestartPhase.IDLE))
    published_at: float = -math.inf
    tickets: int = 0
    timer: float | None = None
    retiring: frozenset[int] = frozenset()
    verify_seconds: float = DEFAULT_VERIFY
    restart_seconds: float = DEFAULT_RESTART
    started: float | None = None


def interval_left(state: State, now: float) -> float:
    """Seconds until ``min_interval`` has passed since the last action (0 when it has)."""
    if state.last_action is None:
        return 0.0
    return max(0.0, state.last_action + state.rules.min_interval - now)
