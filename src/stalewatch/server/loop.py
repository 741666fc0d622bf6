"""The daemon: one process watching checkouts and pushing every change to subscribers.

One :class:`DaemonServer` holds a :class:`~.checkout.Checkout` (a guard with a local
watcher) per checkout, a hook runner per checkout with hooks, and a single-threaded
``selectors`` loop serving the Unix socket. Guards deliver events on their watcher
threads into an inbox (typed messages: :data:`~.checkout.Posted`), which handles them
on the posting thread while the loop waits (holding the loop's turn: see
:mod:`.inbox`); each event is encoded once and appended to every client's bounded
queue, written without ever blocking, so a slow client only ever delays itself (past
its bound it is told and dropped). Signals only set a flag and wake the loop (:mod:`stalewatch.core.signals`);
the loop stops or reloads on its next turn. See :mod:`stalewatch.protocol`. The loop
owns the selector and the turn; what it calls each turn has a module of its own: the
inbox (:mod:`.inbox`), the clients and what they ask (:mod:`.connections`), a
reload's course (:mod:`.reloader`), systemd's notifications, when each is due, and the
watchdog's proof of life (:mod:`.supervision`).

No turn of the loop does unbounded work, so nothing any client or operator does delays
another client's pings and events, the watchdog's proof of life or a SIGTERM by more
than one turn: at most :data:`ACCEPTS_PER_TURN` new connections per turn (fewer with
many checkouts: :data:`GREETING_LINES_PER_TURN`; greetings are cached lines, see
:mod:`.publisher`), one read of 4 KiB per client, and a reload is read and bound on a
thread of its own, then applied :data:`~.reloader.RELOAD_STEPS_PER_TURN` checkouts per
turn.
"""

from __future__ import annotations

import gc
import logging
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
from . import startup
from .checkout import Checkout, EventSeen, HealthReported, RestartTold
from .config import CheckoutConfig, DaemonConfig
from .connections import Client, ClientSet
from .drain import OutputDrain
from .inbox import Inbox
from .observer import DaemonObserver
from .publisher import Publisher
from .registry import Registry
from .reloader import Bound, Reloader
from .supervision import SystemdNotifier, counted

logger = logging.getLogger(__name__)

_LOOP_TICK = 1.0  # the loop wakes at least this often (its heartbeat)
ACCEPTS_PER_TURN = 16
"""New connections accepted in one turn at most; the others wait in the backlog."""
GREETING_LINES_PER_TURN = 4096
"""Greeting lines (1 + a snapshot per checkout) queued in one turn at most: with a
thousand checkouts, four new clients a turn; with ten thousand, one."""
_SWITCH_INTERVAL = 0.0002  # seconds a thread may hold the GIL while another waits (Python: 5 ms)

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
        self._drain = OutputDrain()  # hook output still held by a hook's background process
        self._registry = Registry()  # server processes and the revision each loaded
        # Metrics (the metrics extra), or a no-op when the configuration asks for none.
        self.observer = (
            observe(settings, lambda: self.view, self._registry) if observe is not None else DaemonObserver()
        )
        # Late-bound: the wake-up is opened below, once every checkout is bound.
        self.inbox = Inbox(lambda: self._wakeup.poke(), self._handle_posted)  # noqa: PLW0108
        # Bind every checkout first: a bad one fails before anything is opened.
        self.entries: dict[str, Checkout] = startup.bind(settings, self.make_entry)
        self.view = tuple(self.entries.values())  # what a scrape reads: replaced whole, never mutated
        for entry in self.view:
            self.observer.track(entry)
        self._selector = selectors.DefaultSelector()
        self.clients = ClientSet(
            self._selector,
            settings.max_clients,
            settings.client_queue,
            settings.client_buffer,
            observer=self.observer,
            on_register=self._register,
            on_inflight=self._inflight,
            on_close=self._closed,
        )
        self.publisher = Publisher(self.clients, self._registry)
        self._wakeup = signals.Wakeup()  # set: stop; poked: an inbox message, a reload
        self.systemd = SystemdNotifier(self, _LOOP_TICK)
        self.systemd.watching()
        self._reloader = Reloader(self, reload, settings)
        self._metrics_started = False
        self._served = False  # serve() was called: what stops was started

    @property
    def settings(self) -> DaemonConfig:
        """The configuration running now (a reload replaces it)."""
        return self._reloader.settings

    # -- control (any thread, or a signal handler) ---------------------------------------

    def stop(self) -> None:
        """Ask the loop to stop; :meth:`serve` returns within a second (signal-safe)."""
        self._wakeup.set()

    def request_reload(self) -> None:
        """Ask the loop to reload the configuration (what SIGHUP does; signal-safe)."""
        self._reloader.request()
        self._wakeup.poke()

    # -- entries ---------------------------------------------------------------------------

    def make_entry(self, checkout: CheckoutConfig, base: int) -> Checkout:
        return Checkout(
            checkout, self.inbox.post, base, self._drain, self._registry, on_hook=self.observer.hook
        )

    def refresh_view(self) -> None:
        self.view = tuple(self.entries.values())  # before clients hear: scrapes agree

    # -- serving ---------------------------------------------------------------------------

    def start_metrics(self) -> None:
        """Listen on ``metrics_address``, write ``metrics_textfile`` (if configured; once).

        :meth:`serve` calls it; call it first to fail before serving.

        Raises:
            MetricsError: the address cannot be listened on, or the file written.
        """
        if not self._metrics_started:
            self.observer.start()
            self._metrics_started = True

    def serve(self, listener: socket.socket) -> None:
        """Start the watchers, serve at once, notify systemd, and serve until :meth:`stop`.

        Clients are served from the first moment (a snapshot says whether a watcher
        is trusted yet; a ``health`` line follows when it becomes so). ``READY=1``
        waits, inside the loop so signals stay prompt, until every watcher runs
        (trusted, or polling: a mode that is never trusted) or
        :data:`~.supervision.READY_WAIT` seconds passed.

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
        self._served = True
        with signals.handling(wakeups):  # only on the main thread: an embedded daemon is its owner's
            try:
                with self.inbox.turn:  # released only while the loop waits (see .inbox)
                    self._start(listener)
                    self._loop(listener)
            finally:
                self.systemd.stopping()
                self.close()
                sys.setswitchinterval(interval)

    def _start(self, listener: socket.socket) -> None:
        self.start_metrics()
        self.clients.burst = 1 + len(self.entries)
        for entry in self.entries.values():
            entry.start()
        gc.freeze()  # what a checkout keeps: out of every later collection's walk
        self.systemd.serving(self.entries)
        self._selector.register(listener, selectors.EVENT_READ, "listen")
        self._selector.register(self._wakeup.fileno(), selectors.EVENT_READ, "wake")
        logger.info(
            "stalewatch: daemon %s serving %s for %s: %s",
            __version__,
            listener.getsockname(),
            counted(len(self.entries), "checkout"),
            ", ".join(self.entries),
        )

    def _loop(self, listener: socket.socket) -> None:
        next_ping = time.monotonic() + self.settings.keepalive
        while not self._wakeup.is_set:
            now = time.monotonic()
            timeout = min(_LOOP_TICK, next_ping - now, self.systemd.wait(now, len(self.clients)))
            deadline = self.clients.next_deadline()
            if deadline is not None:
                timeout = min(timeout, deadline - now)
            if self._reloader.applying:
                timeout = 0.0  # a reload being applied: one more slice at once
            self.inbox.turn.release()
            try:
                ready = self._selector.select(max(0.0, timeout))
            finally:
                self.inbox.turn.acquire()
            accepting = False
            for key, mask in ready:
                if key.data == "listen":
                    accepting = True
                elif key.data == "wake":
                    self._wakeup.drain()
                elif isinstance(key.data, Client):
                    self.clients.serve(key.data, mask)  # isolated: one client's failure is its own
            # Events first, then newcomers: a burst of connections never delays an event.
            self._guarded("processing events", self._process_inbox)
            self.clients.flush_pending()
            self._guarded("logging events", self.publisher.log_events)  # clients first
            if accepting:  # out of descriptors, the client set rests the listener
                limit = max(1, min(ACCEPTS_PER_TURN, GREETING_LINES_PER_TURN // (1 + len(self.entries))))
                self.clients.accept(listener, self._greet, limit)
            self._guarded("reloading", self._reloader.turn)
            self.clients.flush_pending()
            now = time.monotonic()
            self.systemd.ready_when_due(now)
            if now >= next_ping:
                next_ping = now + self.settings.keepalive
                self.clients.broadcast(encode(ping_message()))
            self.clients.expire(now)
            self.systemd.status_when_due(now, len(self.clients), woken=bool(ready))
            self.systemd.beat()

    def _guarded(self, what: str, step: Callable[[], object]) -> None:
        # A bug in one step of a turn is logged and the loop goes on: the daemon's
        # clients, hooks and restarts must not die with it.
        try:
            step()
        except Exception:
            logger.exception("stalewatch: unexpected error while %s; serving on", what)

    def _greet(self, client: Client) -> None:
        self.publisher.greet(client, self.view, self.settings.keepalive)

    def _handle_posted(self) -> None:
        # On the posting thread, holding the turn (see .inbox): the loop's own steps, up
        # to the lines written; the loop's thread logs them, and closes a failed client.
        self.clients.deferring = True
        try:
            self._guarded("processing events", lambda: self._process_inbox(posted_only=True))
            self.clients.flush_pending()
        finally:
            self.clients.deferring = False

    def _process_inbox(self, *, posted_only: bool = False) -> None:
        for message in self.inbox.take(posted_only=posted_only):
            if isinstance(message, Bound):
                self._reloader.bound(message)
                continue
            if self.entries.get(message.entry.key) is not message.entry:
                continue  # from a guard a reload replaced
            self.systemd.changed()
            self.publisher.changed(message.entry)
            # Counted before clients hear of it: a scrape made after a line was read counts it.
            match message:
                case EventSeen(entry, event):
                    self.observer.event(entry, event)
                    self.publisher.event(entry, event)
                case RestartTold(entry, state):
                    self.observer.restart(entry, state)
                    self.publisher.restart(entry, state)
                case HealthReported(entry, trusted, mode):
                    self._health(entry, trusted, mode)

    def _health(self, entry: Checkout, trusted: bool, mode: WatchMode) -> None:
        new, lost = entry.note_health(trusted, mode)
        if not new:
            return
        if trusted or mode is WatchMode.POLLING:  # running (polling is never trusted)
            self.systemd.running(entry.key)
        # A watcher not running yet (trusted=False mode=none, before its first turn) is
        # no news: only a lost trust is a warning.
        level = logging.WARNING if lost else logging.DEBUG if mode is WatchMode.NONE else logging.INFO
        logger.log(level, "stalewatch: watcher for %s: trusted=%s mode=%s", entry.key, trusted, mode.value)
        self.publisher.health(entry, trusted, mode)
        self.observer.changed()

    # -- server processes' registrations (checked by the client set; R10 checked here) --------

    def _register(self, client: Client, checkout: str, revision: str, inflight: int) -> None:
        entry = self.entries.get(checkout)
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
            self.clients.send(client, encode(refused_message("register", checkout, reason)))
            return
        process = self._registry.register(client.number, entry.key, client.pid, revision, inflight)
        logger.info("stalewatch: pid %d registered for %s on %s", process.pid, entry.key, revision[:7])
        self._processes_changed(entry)

    def _inflight(self, client: Client, checkout: str, inflight: int) -> None:
        # Not broadcast as a `processes` line: one chatty server must not make every
        # client's queue grow. The restart sequence is woken and tells a drain's count;
        # the kept snapshot line shows the count, so it is encoded afresh when next asked.
        process = self._registry.set_inflight(client.number, inflight)
        entry = self.entries.get(checkout) if process is not None else None
        if entry is not None:
            self.publisher.changed(entry)
            entry.processes_changed()

    def _closed(self, client: Client) -> None:
        # Its process, if it registered, went away.
        process = self._registry.unregister(client.number)
        entry = self.entries.get(process.checkout) if process is not None else None
        if process is not None and entry is not None:
            what = (process.pid, process.revision[:7], entry.key)
            logger.info("stalewatch: pid %d (on %s) went away from %s", *what)
            self._processes_changed(entry)

    def _processes_changed(self, entry: Checkout) -> None:
        self.publisher.processes(entry)
        entry.processes_changed()
        self.observer.changed()

    # -- shutdown --------------------------------------------------------------------------

    def close(self) -> None:
        """Release what :meth:`serve` holds (it calls this; call it when it is never called)."""
        if self._selector.get_map() is None:
            return  # already shut down
        began = time.monotonic()
        self._wakeup.set()
        self.inbox.close()
        self._reloader.stop()  # a reload being bound stops between two checkouts
        self.observer.stop()
        self.clients.close_all()
        # Every watcher halts first (the shared workers stop turning the ones not yet
        # stopped: at 10,001 checkouts the stops one by one raced their first turns for
        # 9-15 s), and every running hook gets SIGTERM first, then each runner is joined:
        # the grace periods of hooks that ignore SIGTERM overlap instead of adding up.
        halt(w for entry in self.entries.values() if (w := entry.source.watcher) is not None)
        for entry in self.entries.values():
            entry.source.on_report = None  # a stopping watcher's report: no loop reads it now
            entry.request_stop()
        for entry in self.entries.values():
            entry.stop()
        self._drain.stop()
        self._selector.close()
        self._wakeup.close()
        if self._served:  # one that never served (no socket: another daemon runs) did not stop
            logger.info(
                "stalewatch: daemon stopped (%s, in %.2f s)",
                counted(len(self.entries), "checkout"),
                time.monotonic() - began,
            )
