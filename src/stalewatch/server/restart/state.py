"""The restart machine's state (see :mod:`.machine`): plain, immutable values.

:class:`State` is everything the machine knows between two steps; :class:`Attempt` is
one run of the sequence for a target: its stage, its timer, the answer it awaits, and a
small record for what each phase owns, ``None`` until that phase makes it
(:class:`Draining` from the announcement, :class:`Locking` from the first try of the
lock, :class:`Taken` once the action is taken, :class:`Confirming` once it succeeded);
a stage's handler reads and replaces only its record. :class:`GiveUp` is a verdict that
stands for its revision.

**What runs.** What the servers run, as the restart machine knows it, and so which restart is wanted.

In order of precedence:

1. registrations: the servers that registered say what they loaded (the registry
   accepted only revisions the checkout had);
2. what the supervisor or the process tells of servers that do not register
   (:class:`~.inputs.Loaded`: HEAD's revision when the server process started, or a
   revision it started before), and a restart the machine confirmed itself;
3. only when nothing tells: the daemon's loaded revision is presumed loaded (HEAD when
   it began watching, or the configured ``revision``; the first HEAD heard of when
   there was none), so an action-only policy whose servers neither register nor can be
   asked still restarts when HEAD moves, and A->B->A ends with nothing to do. The
   executor feeds :class:`~.inputs.Loaded` at start so that this never decides for a
   server that started before HEAD moved (issue 15, item 4).

All of it outlives the policy: a restart table changed, or removed and added back, by
reloads starts from what was known (the daemon saw its servers load A: issue 29).

Stopped servers run nothing: when the servers that registered all went away outside a
restart of the machine's, or the supervisor or the process says none runs, no restart
is wanted (restarting through a supervisor would *start* them, the Hermes WebUI bug).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from ...core.phases import RestartPhase, RestartState
from .actions.base import Traits
from .effects import Stage
from .inputs import Loaded, Server
from .policy import Rules

MARKER_POLL = 0.5  # seconds between looks at markers while an update runs
REFUSED_POLL = 2.0  # seconds between looks at a refusing marker
LOCK_POLL = (0.05, 1.0)  # first and longest wait between tries of a held lock
CONFIRM_POLL = (0.2, 2.0)  # first and longest wait between runs of the confirm probe
DEFAULT_RESTART = 5.0  # seconds from action to confirmed, until one is measured
DEFAULT_VERIFY = 1.0  # seconds a verify probe takes, until one is measured
DEPARTED = 64  # departed servers kept at most (the newest): memory bounded whatever clients do


class Confirm(enum.Enum):
    """How a restart is confirmed, decided once the action succeeded."""

    REGISTRATIONS = "registrations"  # servers register (always when started beside the old)
    PROBE = "probe"  # the confirm probe, and no registered server on old code
    STATUS = "status"  # neither: the action's exit status is all there is


@dataclass(frozen=True)
class GiveUp:
    """A verdict that stands for ``revision`` until another is wanted or a reload.

    ``loaded``: the servers already run it (they loaded a commit that failed the probe
    during a restart): it stands even though no restart is wanted.
    """

    phase: RestartPhase
    reason: str
    revision: str
    loaded: bool = False


@dataclass(frozen=True)
class Locking:
    """The handoff lock, from the first answer of a try: ``held`` once taken;
    ``delay``: the wait before the next try while another holds it."""

    held: bool = False
    delay: float = LOCK_POLL[0]


@dataclass(frozen=True)
class Draining:
    """What the run knows of its drain.

    Attributes:
        announced: when this run told clients a restart is coming (their counts follow).
        note: ``drain-timeout: N still in flight`` once the bound let the run go on.
        final_look: the drain was looked at once more right before the action.
    """

    announced: float | None = None
    note: str | None = None
    final_look: bool = False


@dataclass(frozen=True)
class Taken:
    """The action, once taken.

    Attributes:
        at: when it was taken.
        ticket: its ``Act``'s: ``Retire`` and ``Abort`` name what it started.
        traits: what it can do, as the machine took it when it acted.
        old_pids: the servers registered before it (the ones it replaces).
        reloaded: a reload came after it: its failure is not a verdict.
    """

    at: float
    ticket: int
    traits: Traits
    old_pids: frozenset[int]
    reloaded: bool = False


@dataclass(frozen=True)
class Confirming:
    """The confirmation of a taken action, decided once it succeeded.

    Attributes:
        by: how it is confirmed; ``until``: when it fails unconfirmed.
        probe_delay: the wait before the confirm probe runs again.
        probe_ok, last: the confirm probe's last answer, and what it said.
        running: what the restarted servers loaded, verified before confirmed.
    """

    by: Confirm
    until: float
    probe_delay: float = CONFIRM_POLL[0]
    probe_ok: bool = False
    last: str = "the probe never ran"
    running: str | None = None


@dataclass(frozen=True)
class Attempt:
    """One run of the sequence for ``target``: its stage, its timer and the answer it awaits,
    and a record for what each phase owns, present from the stage that makes it on."""

    target: str
    stage: Stage
    began: float | None  # when HEAD was seen still (settle from here); None: settled already
    deadline: float | None = None  # the stage's timer: settle's end, the next look
    ask: int | None = None  # the ticket of the answer awaited
    asked_at: float = 0.0
    lock: Locking | None = None
    drain: Draining | None = None
    action: Taken | None = None
    confirm: Confirming | None = None

    @property
    def lock_held(self) -> bool:
        return self.lock is not None and self.lock.held

    @property
    def note(self) -> str | None:
        """Why the run goes on with work in flight (the drain's bound), if it does."""
        return None if self.drain is None else self.drain.note

    @property
    def reloaded(self) -> bool:
        return self.action is not None and self.action.reloaded


@dataclass(frozen=True)
class Belief:
    """What the servers that do not register run (see the module doc, "What runs").

    Attributes:
        runs: the revision they run (told, or a restart confirmed onto it).
        not_runs: a revision they do not run (told: they started before HEAD moved to it).
        presumed: the first HEAD heard of (the fallback when nothing tells).
        stopped: no server runs (they went away, or the supervisor says so).
    """

    runs: str | None = None
    not_runs: str | None = None
    presumed: str | None = None
    stopped: bool = False

    def told(self, loaded: Loaded) -> Belief:
        """What a :class:`~.inputs.Loaded` input makes of it (nothing when it cannot tell)."""
        if loaded.revision is not None:
            return Belief(loaded.revision, None, self.presumed)
        if loaded.not_revision is not None:
            return Belief(None, loaded.not_revision, self.presumed)
        return self.gone() if loaded.stopped else self

    def gone(self) -> Belief:
        """No server runs now: none runs old code (until one registers or is told of)."""
        return Belief(None, None, self.presumed, stopped=True)

    def confirmed(self, revision: str) -> Belief:
        """The machine confirmed a restart onto ``revision``: the servers run it."""
        return Belief(revision, None, self.presumed)

    def describe(self) -> str:
        """What is known, in words (the log's while no server registers)."""
        if self.stopped:
            return "no server runs (they went away, or the supervisor said so)"
        if self.runs is not None:
            return f"they run {self.runs[:7]}"
        if self.not_runs is not None:
            return f"they do not run {self.not_runs[:7]}"
        return f"what they run is presumed to be {(self.presumed or '-')[:7]}, the loaded revision"

    def heard(self, head: str | None) -> Belief:
        """A reading of HEAD: the first readable one becomes the presumption."""
        return self if self.presumed is not None or head is None else replace(self, presumed=head)


def wanted(head: str | None, servers: Sequence[Server], belief: Belief) -> str | None:
    """The revision the servers should be restarted onto (HEAD's), or ``None`` when none is."""
    if head is None or (belief.stopped and not servers):
        return None  # unborn or unreadable; or never start a stopped server
    if servers:
        stale = any(server.revision != head for server in servers)
    elif belief.runs is not None:
        stale = belief.runs != head
    else:
        stale = belief.not_runs == head or belief.presumed not in (None, head)
    return head if stale else None


@dataclass(frozen=True)
class Departed:
    """A registration that went away with ``inflight`` work, at ``left`` (monotonic)."""

    pid: int
    inflight: int
    left: float


@dataclass(frozen=True)
class State:
    """Everything the machine knows; a plain value. Start with ``State(rules)``.

    Attributes:
        rules: the policy in force.
        clock: the latest ``now`` seen (time never runs back for the machine).
        head: HEAD's revision as last read (``None``: unborn, unreadable, not read yet).
        servers: the accepted registrations, in flight included.
        registered: a server ever registered (confirm by registrations).
        belief: what servers that do not register run; ``why``: how that was
            last told (said while idle and no server registers).
        target: the revision the bound counts actions for; ``actions``: how many.
        last_action: ``now`` of the last action (for ``min_interval``).
        gave_up: the verdict standing for its revision, if any.
        drain_since: when the drain of the target began (``None``: none yet).
        probed, probe_detail: the drain probe's last answer.
        departed: registrations that went away with work in flight outside an action of
            the machine's: their work may still run (see the module doc).
        attempt: the run under way, if any.
        published: the last phase told; ``published_at``: when (for ``drain_poll``).
        tickets: the last ticket given to a request.
        timer: the wake-up last asked for.
        retiring: the old servers a handoff retired (``TERM`` sent to their master): they
            leave as they finish their work (within gunicorn's ``graceful_timeout``) and
            never count for what runs meanwhile: a restart for them would signal the new
            master, all that serves besides them.
        verify_seconds, restart_seconds: the last measured probe and restart times.
        started: when the daemon started (``None``: not known): its servers register
            again within the policy's ``reconnect_grace`` of it, and until then a drain does not
            take their silence for nothing in flight.
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
