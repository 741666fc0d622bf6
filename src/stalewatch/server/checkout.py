"""One checkout the daemon watches: its guard, its watcher's heartbeat, hooks, restarts.

The server owns a :class:`Checkout` per configured checkout. The guard's events and
the watcher's health reports arrive on the watcher's thread; they are handed to the
server's loop as typed messages through ``post`` (:class:`EventSeen`,
:class:`HealthReported`, :class:`RestartTold`; never handled on the watcher's
thread), to the hook runner and to the restart sequence, each of which starts a
thread of its own only while it has work. What the loop learns of a checkout it
records through its methods (:meth:`Checkout.note_health`,
:meth:`Checkout.continue_from`), never by setting its fields.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import NamedTuple

from ..core.phases import RestartPhase, RestartState
from ..core.status import Event, WatchMode
from ..git.reflog import head_log
from ..guard.guard import Guard
from .config import CheckoutConfig
from .drain import OutputDrain
from .hooks import HookRunner
from .registry import Registry
from .restart.executor import Restarter
from .restart.policy import RestartPolicy
from .restart.state import Belief
from .supervision import ObservedSource

logger = logging.getLogger(__name__)


class EventSeen(NamedTuple):
    """The checkout's guard saw a change of status or revision."""

    entry: Checkout
    event: Event


class HealthReported(NamedTuple):
    """The daemon's own watcher of the checkout became trusted or not, or changed mode."""

    entry: Checkout
    trusted: bool
    mode: WatchMode


class RestartTold(NamedTuple):
    """The checkout's restart sequence entered a new phase."""

    entry: Checkout
    state: RestartState


Posted = EventSeen | HealthReported | RestartTold
"""What a checkout hands the server's loop (from a watcher's or a restart's thread)."""
Post = Callable[[Posted], None]


MAX_SEEN = 4096
"""Revisions a checkout remembers from what the daemon saw (the oldest forgotten first)."""


class Checkout:
    """A watched checkout: guard, source, hooks, restarts, and the generation offset.

    Args:
        config: the checkout's configuration.
        post: where events, health reports and restart phases go (the server's inbox).
        base: added to the guard's generations, so they keep increasing for clients
            across a reload (or a restart) that re-binds the checkout (a new guard
            starts at 0).
        drain: the daemon's drain for hook output held by background processes.
        registry: the server processes registered with the daemon (restarts read it).
        on_hook: called with ``(checkout, hook, outcome)`` after each hook run (metrics).

    Raises:
        BindError: the path does not exist, is not in a git checkout, or is a file no
            repository tracks.
    """

    def __init__(
        self,
        config: CheckoutConfig,
        post: Post,
        base: int = 0,
        drain: OutputDrain | None = None,
        registry: Registry | None = None,
        *,
        on_hook: Callable[[str, str, str], None] | None = None,
    ) -> None:
        self.config = config
        self.source = ObservedSource()
        self.guard = Guard.for_path(config.path, loaded_revision=config.revision, source=self.source)
        self.base = base
        self.key = str(self.guard.checkout)
        self._drain = drain or OutputDrain()
        self._registry = registry or Registry()
        self._on_hook = on_hook
        self.hooks = self._hook_runner(config) if config.hooks.any else None
        # The revisions a server may register (see knows()): seen, and in logs/HEAD.
        self._revisions_lock = threading.Lock()
        self._seen: dict[str, None] = {}
        self._logged: frozenset[str] = frozenset()
        self._log_stamp: tuple[int, int, int, int] | None = None
        snap = self.guard.snapshot()
        self._saw(snap.loaded_revision, snap.current_revision)
        self._known: Belief | None = None  # what a restarter a reload removed knew
        self.restarter = self._restarter(config.restart) if config.restart is not None else None
        self._was_trusted = False
        self._health: tuple[bool, WatchMode] | None = None  # the last report the loop handled
        self._post = post
        self._unsubscribe: Callable[[], None] = lambda: None  # unsubscribing is harmless twice
        self.source.on_report = lambda trusted, mode: post(HealthReported(self, trusted, mode))

    def _hook_runner(self, config: CheckoutConfig) -> HookRunner:
        on_hook = self._on_hook
        outcome = None if on_hook is None else lambda hook, result: on_hook(self.key, hook, result)
        return HookRunner(self.guard.checkout, config.hooks, self._drain, on_outcome=outcome)

    def _restarter(self, policy: RestartPolicy) -> Restarter:
        return Restarter(
            self.key,
            self.guard.checkout,
            policy,
            guard=self.guard,
            publish=lambda state: self._post(RestartTold(self, state)),
            drain=self._drain,
            known=self._known,
        )

    @property
    def restart_state(self) -> RestartState | None:
        """The restart sequence's latest phase (``None`` without a restart policy)."""
        return self.restarter.state if self.restarter is not None else None

    def continue_from(self, previous: Checkout) -> None:
        """This checkout re-binds ``previous`` (a reload): its generations go on from
        there (the daemon's generation is ``base`` plus the guard's)."""
        self.base = previous.base + previous.guard.snapshot().generation + 1

    @property
    def trusted(self) -> bool:
        """Whether the watcher's last health report the loop handled was trusted."""
        return self._health is not None and self._health[0]

    def note_health(self, trusted: bool, mode: WatchMode) -> tuple[bool, bool]:
        """Record a health report on the loop's thread: ``(new, lost)``.

        ``new``: it differs from the last one handled; ``lost``: a watcher that was
        trusted no longer is (worth a warning, where becoming trusted is not).
        """
        if (trusted, mode) == self._health:
            return False, False
        lost = self._was_trusted and not trusted
        self._health = (trusted, mode)
        self._was_trusted |= trusted
        return True, lost

    def start(self) -> None:
        """Subscribe (events reach the hooks from now on), start the guard's watcher and the restarts."""
        self._unsubscribe = self.guard.subscribe(self._on_event)
        self.guard.start()
        if self.restarter is not None:
            self._start_restarts(self.restarter)

    def _start_restarts(self, restarter: Restarter) -> None:
        restarter.start()
        restarter.servers(self._registry.processes(self.key))

    def _saw(self, *revisions: str | None) -> None:
        with self._revisions_lock:
            for revision in filter(None, revisions):
                self._seen.pop(revision, None)
                self._seen[revision] = None  # the newest last
                if len(self._seen) > MAX_SEEN:
                    del self._seen[next(iter(self._seen))]

    def knows(self, revision: str) -> bool:
        """Whether the checkout ever had ``revision`` (a registration of another is refused).

        A revision the checkout never had is a lie (or a bug), and must never make the
        restart machine want a restart (issue 15: a bogus revision made the daemon
        restart in a loop). Known: HEAD's now, one the daemon saw HEAD at (its loaded
        revision, its events), or one ``logs/HEAD`` names (its newest 256 KiB: where
        HEAD was before the daemon started), read again only when the file changed, so
        a client registering over and over costs a ``stat``.
        """
        snap = self.guard.snapshot()
        if revision in (snap.loaded_revision, snap.current_revision):
            return True
        with self._revisions_lock:
            if revision in self._seen or revision in self._logged:
                return True
            if (dirs := self.guard.binding.dirs) is None:  # untracked: only what was seen
                return False
            try:
                info = dirs.store.reflogs(dirs)[0].stat()
            except (IndexError, OSError):  # no reflog (reftable), or none yet
                return False
            stamp = (info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
            if stamp != self._log_stamp:
                entries, _ = head_log(dirs)
                self._logged = frozenset(e.old for e in entries) | frozenset(e.new for e in entries)
                self._log_stamp = stamp
            return revision in self._logged

    def _on_event(self, event: Event) -> None:
        # On the watcher's thread: hand over, never block here. A restart phase first:
        # a client that learns the code is stale learns in the same breath that a
        # restart is coming (its 409s say so from the first one).
        # Known before the line goes out: a server that reads it may register it at once,
        # and another thread's read may already have moved the snapshot on (R10).
        self._saw(event.loaded_revision, event.current_revision)
        restarter = self.restarter
        if restarter is not None:
            try:
                restarter.notice(event)
            except Exception:  # a bug there: the event must still go out
                logger.exception("stalewatch: the restart machine of %s missed an event", self.key)
        self._post(EventSeen(self, event))
        hooks = self.hooks  # read each time: a reload may add the runner
        if hooks is not None:
            hooks.submit(event, self.base + event.generation)

    def update(self, config: CheckoutConfig) -> None:
        """Take a reloaded configuration with the same path and revision (hooks, restarts)."""
        self.config = config
        if self.hooks is not None:
            self.hooks.config = config.hooks  # dropping every hook leaves an idle runner
        elif config.hooks.any:  # the first hooks of a checkout watched without any
            self.hooks = self._hook_runner(config)
        if config.restart is not None and self.restarter is not None:
            self.restarter.update(config.restart)
        elif config.restart is not None:
            self.restarter = self._restarter(config.restart)
            self._start_restarts(self.restarter)
        elif self.restarter is not None:
            restarter, self.restarter = self.restarter, None
            restarter.stop()
            self._known = restarter.belief  # for a table added back: its servers run the same
            self._post(
                RestartTold(self, RestartState(RestartPhase.IDLE, "no restart policy", at=time.time()))
            )

    def processes_changed(self) -> None:
        """A server process of this checkout registered, went away, or its work in flight
        changed (the loop tells): the restart machine learns it."""
        if self.restarter is not None:
            self.restarter.servers(self._registry.processes(self.key))

    def request_stop(self) -> None:
        """Begin ending a running hook or restart command without waiting for it."""
        if self.hooks is not None:
            self.hooks.request_stop()
        if self.restarter is not None:
            self.restarter.request_stop()

    def stop(self) -> None:
        """Unsubscribe and stop the hooks, the restarts and the watcher (harmless twice)."""
        self._unsubscribe()
        if self.hooks is not None:
            self.hooks.stop()
        if self.restarter is not None:
            self.restarter.stop()
        self.guard.stop()
