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
"""

from __future__ import annotations

import logging
import queue
import selectors
import signal
import socket
import time
from collections.abc import Callable, Sequence

from ..core import signals
from ..core.errors import BindError, DaemonConfigError
from ..core.status import WatchMode
from ..core.version import __version__
from ..protocol.codec import encode
from ..protocol.messages import ping_message, refused_message
from .checkout import Checkout, EventSeen, HealthReported, Posted, RestartTold
from .config import CheckoutConfig, DaemonConfig
from .connections import ACCEPT_PAUSE, Client, ClientSet
from .drain import OutputDrain
from .observer import DaemonObserver
from .publisher import Publisher
from .registry import Registry
from .reload import plan_reload
from .supervision import ObservedSource, Supervisor, status_text

__all__ = ["DaemonServer", "ObserverFactory"]

logger = logging.getLogger(__name__)

_READY_WAIT = 5.0  # longest wait for the watchers to run before READY=1 (serving meanwhile)
_LOOP_TICK = 1.0  # the loop wakes at least this often (its heartbeat)
# STATUS= costs a snapshot per checkout (milliseconds for a thousand): it is made only
# after a change, on a quiet turn (never between an event and the next), or after this.
_STATUS_QUIET, _STATUS_LATEST = 0.05, 1.0

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
        self._inbox: queue.SimpleQueue[Posted] = queue.SimpleQueue()
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

    def _post(self, message: Posted) -> None:
        # Any thread (a watcher's, a restart's): the loop handles it on its next turn.
        self._inbox.put(message)
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
        with signals.handling(wakeups):  # only on the main thread: an embedded daemon is its owner's
            try:
                self._serve(listener)
            finally:
                self._supervisor.stopping()
                self._shutdown()

    def _serve(self, listener: socket.socket) -> None:
        self.start_metrics()
        self._clients.burst = 1 + len(self._entries)
        for entry in self._entries.values():
            entry.start()
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
            ready = self._selector.select(max(0.0, timeout))
            for key, mask in ready:
                if key.data == "listen":
                    self._accept(listener)
                elif key.data == "wake":
                    self._wakeup.drain()
                elif isinstance(key.data, Client):
                    self._clients.serve(key.data, mask)  # isolated: one client's failure is its own
            changes = self._changes
            self._guarded("processing events", self._process_inbox)
            if self._reload_requested:
                self._reload_requested = False
                self._guarded("reloading", self._do_reload)
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
        self._publisher.greet(client, list(self._entries.values()), self.settings.keepalive)

    def _accept(self, listener: socket.socket) -> None:
        if not self._clients.accept(listener, self._greet):
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
        while True:
            try:
                message = self._inbox.get_nowait()
            except queue.Empty:
                return
            if self._entries.get(message.entry.key) is not message.entry:
                continue  # from a guard a reload replaced
            self._changes += 1
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
        # client's queue grow. The restart sequence is woken and tells a drain's count.
        process = self._registry.set_inflight(client.number, inflight)
        entry = self._entries.get(checkout) if process is not None else None
        if entry is not None:
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

    def _do_reload(self) -> None:
        if self._reload is None:
            logger.info("stalewatch: SIGHUP: no configuration file to reload")
            return
        self._supervisor.reloading()
        self._changes += 1
        failure: Exception | None = None
        try:
            self._apply(self._reload())
        except (DaemonConfigError, BindError) as exc:
            failure = exc
        if failure is not None:
            logger.error("stalewatch: reload failed, keeping the running configuration: %s", failure)
        self._supervisor.reloaded(self._status())

    def _apply(self, settings: DaemonConfig) -> None:
        planned = plan_reload(self._entries, self.settings, settings, self._make_entry)
        reused, fresh, settings = planned.reused, planned.fresh, planned.settings
        logging.getLogger().setLevel(settings.log_level.upper())
        self.settings = settings
        self._clients.burst = 1 + len(reused) + len(fresh)  # before fresh snapshots are queued
        for key, entry in self._entries.items():
            if key not in reused:
                entry.request_stop()  # grace periods side by side, as at shutdown
        for key, entry in list(self._entries.items()):
            if key in reused:
                continue
            del self._entries[key]
            self._view = tuple(self._entries.values())  # before clients hear: scrapes agree
            entry.stop()
            if key in fresh:
                fresh[key].continue_from(entry)
            else:
                logger.info("stalewatch: no longer watching %s", key)
                self._observer.forget(key)
                self._publisher.removed(key)
        for key, entry in reused.items():
            entry.update(planned.updates[key])
        for key, entry in fresh.items():
            self._entries[key] = entry
            self._view = tuple(self._entries.values())
            self._observer.track(entry)
            entry.start()
            logger.info("stalewatch: watching %s (loaded %s)", key, entry.guard.loaded_revision)
            self._publisher.snapshots(entry)
        self._supervisor.watching(self._watchers())
        self._clients.configure(settings.max_clients, settings.client_queue, settings.client_buffer)
        logger.info("stalewatch: configuration reloaded: %d checkouts", len(self._entries))

    # -- systemd ---------------------------------------------------------------------------

    def _watchers(self) -> list[tuple[str, ObservedSource]]:
        return [(key, entry.source) for key, entry in self._entries.items()]

    def _status(self) -> str:
        return status_text((entry.guard.snapshot() for entry in self._entries.values()), len(self._clients))

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
        self._wakeup.set()
        self._observer.stop()
        self._clients.close_all()
        # Every running hook gets SIGTERM first, then each runner is joined: the grace
        # periods of hooks that ignore SIGTERM overlap instead of adding up.
        for entry in self._entries.values():
            entry.request_stop()
        for entry in self._entries.values():
            entry.stop()
        self._drain.stop()
        self._selector.close()
        self._wakeup.close()
        logger.debug("stalewatch: daemon stopped")
