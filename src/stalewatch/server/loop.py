"""The daemon: one process watching checkouts and pushing every change to subscribers.

One :class:`DaemonServer` holds a :class:`~.checkout.Checkout` (a guard with a local
watcher) per checkout, a hook runner per checkout with hooks, and a single-threaded
``selectors`` loop serving the Unix socket. Guards deliver events on their watcher
threads into an inbox (typed messages: :data:`~.checkout.Posted`); the loop encodes
each event once and appends it to every client's bounded queue, writing without ever
blocking, so a slow client only ever delays itself (past its bound it is told and
dropped). Signals only set a flag and wake the loop (:mod:`stalewatch.core.signals`);
the loop stops or reloads on its next turn. See :mod:`stalewatch.protocol`; systemd
notifications and the watchdog's proof of life are :mod:`.supervision`.

No turn of the loop does unbounded work, so nothing any client or operator does delays
another client's pings and events, the watchdog's proof of life or a SIGTERM by more
than one turn: at most :data:`ACCEPTS_PER_TURN` new connections per turn (fewer with
many checkouts: :data:`GREETING_LINES_PER_TURN`; greetings are cached lines, see
:mod:`.publisher`), one read of 4 KiB per client, and a reload is read and bound on a
thread of its own, then applied :data:`RELOAD_STEPS_PER_TURN` checkouts per turn
(:mod:`.reload`).
"""

from __future__ import annotations

import logging
import queue
import selectors
import signal
import socket
import sys
import time
from collections.abc import Callable, Sequence

from ..core import signals
from ..core.status import WatchMode
from ..core.version import __version__
from ..protocol.codec import encode
from ..protocol.messages import ping_message, refused_message
from ..watching.watcher import halt
from . import memory
from .checkout import Checkout, EventSeen, HealthReported, Posted, RestartTold
from .config import CheckoutConfig, DaemonConfig
from .connections import ACCEPT_PAUSE, Client, ClientSet
from .drain import OutputDrain
from .observer import DaemonObserver
from .publisher import Publisher
from .registry import Registry
from .reload import Applier, Binder, Bound, plan_reload
from .supervision import ObservedSource, Supervisor, status_text

__all__ = [
    "ACCEPTS_PER_TURN",
    "GREETING_LINES_PER_TURN",
    "RELOAD_STEPS_PER_TURN",
    "DaemonServer",
    "ObserverFactory",
]

logger = logging.getLogger(__name__)

_READY_WAIT = 5.0  # longest wait for the watchers to run before READY=1 (serving meanwhile)
_LOOP_TICK = 1.0  # the loop wakes at least this often (its heartbeat)
# STATUS= costs a snapshot per checkout (milliseconds for a thousand): it is made only
# after a change, on a quiet turn (never between an event and the next), or after this.
_STATUS_QUIET, _STATUS_LATEST = 0.05, 1.0
ACCEPTS_PER_TURN = 16
"""New connections accepted in one turn at most; the others wait in the backlog."""
GREETING_LINES_PER_TURN = 4096
"""Greeting lines (1 + a snapshot per checkout) queued in one turn at most: with a
thousand checkouts, four new clients a turn; with ten thousand, one."""
RELOAD_STEPS_PER_TURN = 64
"""Checkouts a reload starts, stops, re-binds or updates in one turn at most..."""
RELOAD_TURN_BUDGET = 0.005
"""...and about as many as fit in this many seconds (a start costs about 1 ms)."""
_SWITCH_INTERVAL = 0.0002  # seconds a thread may hold the GIL while another waits (Python: 5 ms)
_BINDER_JOIN = 0.5  # seconds a stop waits for the reload thread (it stops between checkouts)

ObserverFactory = Callable[[DaemonConfig, Callable[[], Sequence[Checkout]], Registry], DaemonObserver]
"""Makes the daemon's observer from its configuration, its checkouts now and its registry
(:func:`stalewatch.metrics.for_daemon` is one)."""


class DaemonServer:
    """Serves a configuration on a listening socket (see :meth:`serve`) until :meth:`stop`.

    Args:
        settings: the configuration (checkouts, limits, keepalive, metrics).
        reload: returns a fresh configuration on SIGHUP (``None``: nothing to reload).
        observe: makes the observer told of events, hooks, restarts and clients
            (metrics); ``None``: a :class:`~.observer.DaemonObserver` doing nothing.

    Raises:
        MetricsUnavailableError: ``observe`` wants the ``metrics`` extra, which is not installed.
    """

    def __init__(
        self,
        settings: DaemonConfig,
        reload: Callable[[], DaemonConfig] | None = None,
        *,
        observe: ObserverFactory | None = None,
    ) -> None:
        self.settings = settings
        self._reload = reload
        self._entries: dict[str, Checkout] = {}
        self._view: tuple[Checkout, ...] = ()  # what a scrape reads: replaced whole, never mutated
        self._drain = OutputDrain()  # hook output still held by a hook's background process
        self._registry = Registry()  # server processes and the revision each loaded (R5)
        # Metrics (the metrics extra), or a no-op when the configuration asks for none.
        self._observer = (
            observe(settings, lambda: self._view, self._registry) if observe is not None else DaemonObserver()
        )
        # Bind every checkout first: a bad one fails before anything is opened.
        self._entries = plan_reload({}, settings, settings, self._make_entry).fresh
        self._view = tuple(self._entries.values())
        for entry in self._view:
            self._observer.track(entry)
        self._inbox: queue.SimpleQueue[Posted | Bound] = queue.SimpleQueue()
        self._poked = False  # a wake-up for the inbox is pending
        self._selector = selectors.DefaultSelector()
        self._clients = ClientSet(
            self._selector,
            settings.max_clients,
            settings.client_queue,
            settings.client_buffer,
            on_register=self._register,
            on_inflight=self._inflight,
            on_close=self._unregister,
            on_drop=self._observer.client_dropped,
        )
        self._publisher = Publisher(self._clients, self._registry)
        self._wakeup = signals.Wakeup()  # set: stop; poked: an inbox message, a reload
        self._reload_requested = False
        self._binder: Binder | None = None  # reading and binding a reload, off the loop
        self._applying: Applier | None = None  # a bound reload, applied a few steps a turn
        self._changes = 0  # events and health reports handled, and reloads: STATUS= may differ
        self._unready: set[str] = set()  # checkouts whose watcher is not running yet
        self._ready_by = 0.0
        self._ready_sent = False
        self._supervisor = Supervisor(_LOOP_TICK)
        self._supervisor.watching(self._watchers())
        self._metrics_started = False

    # -- control (any thread, or a signal handler) ---------------------------------------

    def stop(self) -> None:
        """Ask the loop to stop; :meth:`serve` returns within a second (signal-safe)."""
        self._wakeup.set()

    def request_reload(self) -> None:
        """Ask the loop to reload the configuration (what SIGHUP does; signal-safe)."""
        self._reload_requested = True
        self._wakeup.poke()

    # -- entries ---------------------------------------------------------------------------

    def _make_entry(self, checkout: CheckoutConfig, base: int) -> Checkout:
        return Checkout(checkout, self._post, base, self._drain, self._registry, on_hook=self._observer.hook)

    def _post(self, message: Posted | Bound) -> None:
        # Any thread (a watcher's, a restart's): the loop handles it on its next turn.
        # One wake-up per batch: a reload's ten thousand health reports (or a stop's)
        # cost one system call, not one each. The loop clears the flag before it takes
        # the messages, so one put after that pokes again.
        self._inbox.put(message)
        if not self._poked:
            self._poked = True
            self._wakeup.poke()

    # -- serving ---------------------------------------------------------------------------

    def start_metrics(self) -> None:
        """Listen on ``metrics_address``, write ``metrics_textfile`` (if configured; once).

        :meth:`serve` calls it; call it first to fail before serving.

        Raises:
            MetricsError: the address cannot be listened on, or the file written.
        """
        if not self._metrics_started:
            self._observer.start()
            self._metrics_started = True

    def serve(self, listener: socket.socket) -> None:
        """Start the watchers, serve at once, notify systemd, and serve until :meth:`stop`.

        Clients are served from the first moment (a snapshot says whether a watcher
        is trusted yet; a ``health`` line follows when it becomes so). ``READY=1``
        waits, inside the loop so signals stay prompt, until every watcher runs
        (trusted, or polling: a mode that is never trusted) or :data:`_READY_WAIT`
        seconds passed.

        Args:
            listener: a bound, listening, non-blocking Unix stream socket (the caller
                owns it and closes it afterwards).
        """
        wakeups = {signal.SIGTERM: self.stop, signal.SIGINT: self.stop, signal.SIGHUP: self.request_reload}
        # The loop's every system call gives the GIL up; taking it back waits out the
        # switch interval while workers start a thousand watchers: a shorter one keeps
        # a turn within milliseconds (restored after: an embedded daemon's process).
        interval = sys.getswitchinterval()
        sys.setswitchinterval(min(interval, _SWITCH_INTERVAL))
        with signals.handling(wakeups):  # only on the main thread: an embedded daemon is its owner's
            try:
                self._serve(listener)
            finally:
                self._supervisor.stopping()
                self._shutdown()
                sys.setswitchinterval(interval)

    def _serve(self, listener: socket.socket) -> None:
        self.start_metrics()
        self._clients.burst = 1 + len(self._entries)
        for entry in self._entries.values():
            entry.start()
        memory.settle()  # what a checkout keeps: out of every later collection's walk
        self._unready = set(self._entries)
        self._ready_by = time.monotonic() + _READY_WAIT
        self._selector.register(listener, selectors.EVENT_READ, "listen")
        self._selector.register(self._wakeup.fileno(), selectors.EVENT_READ, "wake")
        logger.info(
            "stalewatch: daemon %s serving %s for %d checkouts: %s",
            __version__,
            listener.getsockname(),
            len(self._entries),
            ", ".join(self._entries),
        )
        self._loop(listener)

    def _maybe_ready(self, now: float) -> None:
        """Send ``READY=1`` once every watcher runs, or once the wait is over."""
        if self._ready_sent or (self._unready and now < self._ready_by):
            return
        for key in sorted(self._unready):
            logger.warning("stalewatch: watcher for %s not running yet; ready anyway", key)
        self._unready.clear()
        self._ready_sent = True
        self._supervisor.ready(self._status())

    def _loop(self, listener: socket.socket) -> None:
        next_ping = time.monotonic() + self.settings.keepalive
        shown: tuple[int, int] | None = None  # (changes, clients) STATUS= was made for
        status_by = 0.0
        while not self._wakeup.is_set:
            now = time.monotonic()
            timeout = min(_LOOP_TICK, next_ping - now)
            for deadline in (self._clients.next_deadline(), self._clients.accept_paused_until):
                if deadline is not None:
                    timeout = min(timeout, deadline - now)
            if not self._ready_sent:
                timeout = min(timeout, self._ready_by - now)
            pending = shown != (self._changes, len(self._clients))
            if pending:
                timeout = min(timeout, _STATUS_QUIET)
            if self._applying is not None:
                timeout = 0.0  # a reload being applied: one more slice at once
            ready = self._selector.select(max(0.0, timeout))
            accepting = False
            for key, mask in ready:
                if key.data == "listen":
                    accepting = True
                elif key.data == "wake":
                    self._wakeup.drain()
                elif isinstance(key.data, Client):
                    self._clients.serve(key.data, mask)  # isolated: one client's failure is its own
            changes = self._changes
            # Events first, then newcomers: a burst of connections never delays an event.
            self._guarded("processing events", self._process_inbox)
            self._clients.flush_pending()
            if accepting:
                self._accept(listener)
            self._guarded("reloading", self._reload_turn)
            self._clients.flush_pending()
            now = time.monotonic()
            self._maybe_ready(now)
            self._resume_accepting(listener, now)
            if now >= next_ping:
                next_ping = now + self.settings.keepalive
                self._clients.broadcast(encode(ping_message()))
            self._clients.expire(now)
            wanted = (self._changes, len(self._clients))
            if not pending and wanted != shown:
                status_by = now + _STATUS_LATEST
            quiet = not ready and changes == self._changes
            if wanted != shown and (quiet or now >= status_by):
                shown = wanted
                self._supervisor.status(self._status())
            self._supervisor.beat()

    def _guarded(self, what: str, step: Callable[[], object]) -> None:
        # A bug in one step of a turn is logged and the loop goes on: the daemon's
        # clients, hooks and restarts must not die with it.
        try:
            step()
        except Exception:
            logger.exception("stalewatch: unexpected error while %s; serving on", what)

    def _greet(self, client: Client) -> None:
        self._observer.client_connected()
        self._publisher.greet(client, self._view, self.settings.keepalive)

    def _accept(self, listener: socket.socket) -> None:
        limit = max(1, min(ACCEPTS_PER_TURN, GREETING_LINES_PER_TURN // (1 + len(self._entries))))
        if not self._clients.accept(listener, self._greet, limit):
            # Out of descriptors: the pending connection keeps the listener readable;
            # rest it instead of spinning (the backlog holds new clients meanwhile).
            self._selector.unregister(listener)
            self._clients.accept_paused_until = time.monotonic() + ACCEPT_PAUSE

    def _resume_accepting(self, listener: socket.socket, now: float) -> None:
        paused = self._clients.accept_paused_until
        if paused is not None and now >= paused:
            self._clients.accept_paused_until = None
            self._selector.register(listener, selectors.EVENT_READ, "listen")

    def _process_inbox(self) -> None:
        self._poked = False
        while True:
            try:
                message = self._inbox.get_nowait()
            except queue.Empty:
                return
            if isinstance(message, Bound):
                self._bound(message)
                continue
            if self._entries.get(message.entry.key) is not message.entry:
                continue  # from a guard a reload replaced
            self._changes += 1
            self._publisher.changed(message.entry)
            # Counted before clients hear of it: a scrape made after a line was read counts it.
            match message:
                case EventSeen(entry, event):
                    self._observer.event(entry, event)
                    self._publisher.event(entry, event)
                case RestartTold(entry, state):
                    self._observer.restart(entry, state)
                    self._publisher.restart(entry, state)
                case HealthReported(entry, trusted, mode):
                    self._health(entry, trusted, mode)

    def _health(self, entry: Checkout, trusted: bool, mode: WatchMode) -> None:
        new, lost = entry.note_health(trusted, mode)
        if not new:
            return
        if trusted or mode is WatchMode.POLLING:  # running (polling is never trusted)
            self._unready.discard(entry.key)
        level = logging.WARNING if lost else logging.INFO
        logger.log(level, "stalewatch: watcher for %s: trusted=%s mode=%s", entry.key, trusted, mode.value)
        self._publisher.health(entry, trusted, mode)
        self._observer.changed()

    # -- registered server processes (R5) ---------------------------------------------------

    def _register(self, client: Client, checkout: str, revision: str, inflight: int) -> None:
        entry = self._entries.get(checkout)
        if entry is None:  # harmless: the client learns from hello that it is not watched
            logger.debug("stalewatch: client %d registered for %s, not watched here", client.number, checkout)
            return
        if not entry.knows(revision):
            # A revision the checkout never had (not HEAD, not in its reflog, never seen):
            # a lie or a bug. It must never make the restart machine want a restart (R10).
            reason = f"{revision} was never HEAD of {entry.key} (not in its reflog, never seen)"
            logger.warning(
                "stalewatch: client %d (pid %d): registration refused: %s", client.number, client.pid, reason
            )
            self._clients.send(client, encode(refused_message("register", checkout, reason)))
            return
        process = self._registry.register(client.number, entry.key, client.pid, revision, inflight)
        logger.info("stalewatch: pid %d registered for %s on %s", process.pid, entry.key, revision[:7])
        self._processes_changed(entry)

    def _inflight(self, client: Client, checkout: str, inflight: int) -> None:
        # Not broadcast as a `processes` line: one chatty server must not make every
        # client's queue grow. The restart sequence is woken and tells a drain's count;
        # the kept snapshot line shows the count, so it is encoded afresh when next asked.
        process = self._registry.set_inflight(client.number, inflight)
        entry = self._entries.get(checkout) if process is not None else None
        if entry is not None:
            self._publisher.changed(entry)
            entry.processes_changed()

    def _unregister(self, client: Client) -> None:
        self._observer.client_closed()
        process = self._registry.unregister(client.number)
        entry = self._entries.get(process.checkout) if process is not None else None
        if process is not None and entry is not None:
            what = (process.pid, process.revision[:7], entry.key)
            logger.info("stalewatch: pid %d (on %s) went away from %s", *what)
            self._processes_changed(entry)

    def _processes_changed(self, entry: Checkout) -> None:
        self._publisher.processes(entry)
        entry.processes_changed()
        self._observer.changed()

    # -- reload ----------------------------------------------------------------------------

    def _reload_turn(self) -> None:
        """Start reading a reload, or apply a few more of its steps (bounded: see :mod:`.reload`)."""
        if self._applying is not None:
            self._apply_some()
            return
        if not self._reload_requested:
            return
        if self._binder is not None:
            self._binder.cancel()  # a newer SIGHUP: bind that configuration instead
            return
        self._reload_requested = False
        if self._reload is None:
            logger.info("stalewatch: SIGHUP: no configuration file to reload")
            return
        self._supervisor.reloading()
        self._changes += 1
        self._binder = Binder(
            self._reload, self._entries, self.settings, self._make_entry, self._post
        ).start()

    def _bound(self, bound: Bound) -> None:
        """The reload thread ended: apply its plan, unless a newer SIGHUP came meanwhile."""
        if self._binder is not None:
            self._binder.join(_BINDER_JOIN)  # it has posted: it is ending
        self._binder = None
        if bound.error is not None:
            logger.error("stalewatch: reload failed, keeping the running configuration: %s", bound.error)
        if bound.plan is None or self._reload_requested:
            if not self._reload_requested:
                self._supervisor.reloaded(self._status())
            memory.reclaim()  # what it bound (settled as it went) was never started: garbage
            return
        plan = bound.plan
        logging.getLogger().setLevel(plan.settings.log_level.upper())
        self.settings = plan.settings
        self._clients.burst = 1 + len(plan.reused) + len(plan.fresh)  # before fresh snapshots are queued
        self._applying = Applier(plan, self._entries, self._observer, self._publisher, self._refresh_view)
        self._apply_some()

    def _refresh_view(self) -> None:
        self._view = tuple(self._entries.values())  # before clients hear: scrapes agree

    def _apply_some(self) -> None:
        """Apply the next :data:`RELOAD_STEPS_PER_TURN` steps of the reload; finish it."""
        applying = self._applying
        if applying is None:
            return
        try:
            applying.run(RELOAD_STEPS_PER_TURN, RELOAD_TURN_BUDGET)
        except Exception:
            self._applying = None  # a bug: never retried every turn (logged by _guarded)
            raise
        memory.settle()  # the checkouts it started
        self._supervisor.watching(self._watchers())
        if applying.done:
            self._applying = None
            settings = self.settings
            self._clients.configure(settings.max_clients, settings.client_queue, settings.client_buffer)
            logger.info("stalewatch: configuration reloaded: %d checkouts", len(self._entries))
            self._changes += 1
            if applying.shrinks:
                memory.reclaim()  # the checkouts it stopped
            self._supervisor.reloaded(self._status())

    # -- systemd ---------------------------------------------------------------------------

    def _watchers(self) -> list[tuple[str, ObservedSource]]:
        return [(key, entry.source) for key, entry in self._entries.items()]

    def _status(self) -> str:
        # From what the loop already holds (no snapshot copies): cheap at 10,000 checkouts.
        states = ((entry.guard.status, entry.trusted) for entry in self._entries.values())
        return status_text(states, len(self._clients))

    def alive(self) -> str | None:
        """``None`` when the loop and every watcher thread beat recently, else why not."""
        return self._supervisor.alive()

    # -- shutdown --------------------------------------------------------------------------

    def close(self) -> None:
        """Release what :meth:`serve` would have (when it is never called)."""
        self._shutdown()

    def _shutdown(self) -> None:
        if self._selector.get_map() is None:
            return  # already shut down
        began = time.monotonic()
        self._wakeup.set()
        if self._binder is not None:  # a reload being bound: it stops between two checkouts
            self._binder.cancel()
            self._binder.join(_BINDER_JOIN)
            self._binder = None
        self._applying = None  # fresh checkouts not started yet: nothing to stop
        self._observer.stop()
        self._clients.close_all()
        # Every watcher halts first (the shared workers stop turning the ones not yet
        # stopped: at 10,001 checkouts the stops one by one raced their first turns for
        # 9-15 s), and every running hook gets SIGTERM first, then each runner is joined:
        # the grace periods of hooks that ignore SIGTERM overlap instead of adding up.
        halt(w for entry in self._entries.values() if (w := entry.source.watcher) is not None)
        for entry in self._entries.values():
            entry.source.on_report = None  # a stopping watcher's report: no loop reads it now
            entry.request_stop()
        for entry in self._entries.values():
            entry.stop()
        self._drain.stop()
        self._selector.close()
        self._wakeup.close()
        logger.info(
            "stalewatch: daemon stopped (%d checkouts, in %.2f s)",
            len(self._entries),
            time.monotonic() - began,
        )
