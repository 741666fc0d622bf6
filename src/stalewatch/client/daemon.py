"""A guard fed by a running daemon instead of a watcher thread of its own.

Example::

    from stalewatch import Daemon, Guard

    guard = Guard.for_module("run_agent", source=Daemon("/run/stalewatch/stalewatch.sock"))
    with guard:
        guard.check()

The daemon's events only say "re-resolve now": the guard re-reads HEAD in-process and
compares with its own loaded revision, so each worker process decides for itself.
The flag is trusted only while subscribed to a daemon whose own watcher for this
checkout is trusted; disconnected, the barrier re-reads synchronously on every
check, so a dead daemon never lets a stale process through.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypedDict, Unpack

from ..core import settings
from ..core.errors import DaemonUnavailableError
from ..core.escaping import printable
from ..core.phases import RestartState
from ..core.status import WatchMode
from ..git.refs import GitDirs
from ..protocol.codec import encode
from ..protocol.messages import register_message
from ..protocol.socket_path import default_socket_path
from ..watching.source import OnChange, OnHealth, OnRestart, Workload
from .connection import MAX_BACKOFF, backoff, check_hello, connect, messages, shut_down
from .inflight import InflightReport

logger = logging.getLogger(__name__)


class Daemon:
    """A :class:`~stalewatch.watching.source.Source` fed by a stalewatch daemon's socket.

    Args:
        socket_path: the daemon's socket; default ``$RUNTIME_DIRECTORY/stalewatch.sock``
            (else ``$XDG_RUNTIME_DIR``).
        verify_interval: seconds between periodic in-process re-verifications while
            connected (``STALEWATCH_VERIFY_INTERVAL``, default 2).
        max_backoff: longest wait between reconnection attempts, in seconds.

    Example: ``Guard.for_module("run_agent", source=Daemon("/run/stalewatch/stalewatch.sock"))``.
    """

    def __init__(
        self,
        socket_path: str | os.PathLike[str] | None = None,
        *,
        verify_interval: float | None = None,
        max_backoff: float = MAX_BACKOFF,
    ) -> None:
        self.socket_path = Path(socket_path) if socket_path is not None else default_socket_path()
        self.verify_interval = settings.verify_interval(verify_interval)
        self.max_backoff = max_backoff

    def watch(
        self, dirs: GitDirs, on_change: OnChange, on_health: OnHealth, **options: Unpack[WatchOptions]
    ) -> DaemonWatch:
        """Follow the daemon for ``dirs``; register ``loaded_revision`` with it, tell
        ``on_restart`` its restart phases and report ``work``'s work in flight."""
        return DaemonWatch(self, dirs, on_change, on_health, **options)

    def __repr__(self) -> str:
        return f"Daemon({str(self.socket_path)!r})"


class WatchOptions(TypedDict, total=False):
    """What a guard tells its source besides the checkout (see :meth:`Daemon.watch`)."""

    loaded_revision: str | None
    on_restart: OnRestart | None
    work: Workload | None


class DaemonWatch:
    """One subscription to the daemon for one checkout, on its own thread.

    When the daemon offers it (``register`` in its hello's ``features``), the process
    registers the revision it loaded, so a restart is confirmed only once the new
    servers run the new code; restart phases for the checkout go to ``on_restart``.
    With ``inflight`` offered too, the registration carries ``work``'s work in flight
    and ``inflight`` lines follow its changes while a restart is coming or the code is
    stale (:mod:`.inflight`), so the restart drains it first.
    """

    def __init__(
        self,
        daemon: Daemon,
        dirs: GitDirs,
        on_change: OnChange,
        on_health: OnHealth,
        *,
        loaded_revision: str | None = None,
        on_restart: OnRestart | None = None,
        work: Workload | None = None,
    ) -> None:
        self._path = daemon.socket_path
        self._daemon = daemon
        self._key = str(dirs.checkout)
        self._on_change = on_change
        self._on_health = on_health
        self._loaded = loaded_revision
        self._on_restart = on_restart
        self._inflight = InflightReport(self._key, work)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._reported: bool | None = None
        self._warned: set[str] = set()  # topics already warned about (once each)
        self._offer: bool | None = None  # the hello offered registration (with counts: True)
        self._delays = backoff(daemon.max_backoff)
        self._thread = threading.Thread(
            target=self._run, name=f"stalewatch-daemon-client:{dirs.worktree}", daemon=True
        )

    def start(self) -> None:
        """Start the client thread (idempotent)."""
        with self._lock:
            if self._thread.ident is None:
                self._thread.start()

    def stop(self) -> None:
        """Disconnect and join the thread within a second. Harmless to call twice."""
        self._stop.set()
        shut_down(self._sock)  # wakes the thread's recv at once (the thread checks the flag after setting it)
        if self._thread.ident is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=1.0)

    # -- the thread -------------------------------------------------------------------

    def _report(self, trusted: bool, mode: WatchMode = WatchMode.DAEMON) -> None:
        if trusted != self._reported:
            self._reported = trusted
            _call(self._on_health, "the health callback", trusted, mode)

    def _restart(self, data: object) -> None:
        state = RestartState.from_dict(data)
        self._inflight.coming = state is not None and state.scheduled
        if self._on_restart is not None:
            _call(self._on_restart, "the restart callback", state)

    def _warn_once(self, topic: str, message: str, *args: object) -> None:
        if topic not in self._warned:
            self._warned.add(topic)
            logger.warning(message, *args)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                with connect(self._path, timeout=1.0) as self._sock:  # stop() shuts it down
                    self._session(self._sock)
            except DaemonUnavailableError as exc:
                if not self._stop.is_set():
                    text = "stalewatch: no daemon at %s for %s (%s); checks re-read HEAD until it is back"
                    self._warn_once("lost", text, self._path, self._key, exc.reason)
            except Exception:  # never a dead client: distrust (below), log, reconnect after the backoff
                logger.exception("stalewatch: daemon client for %s failed; reconnecting", self._key)
            self._report(False)  # from now on every check re-reads
            if self._stop.wait(next(self._delays)):
                break
        self._report(False, WatchMode.NONE)

    def _session(self, sock: socket.socket) -> None:
        """Follow one connection until it ends (it raises, also once stopped: the socket
        shut down); then what the daemon said of restarts and counts no longer holds."""
        next_verify = time.monotonic() + self._daemon.verify_interval

        def tick(now: float) -> float:
            nonlocal next_verify
            if now >= next_verify:
                next_verify = now + self._daemon.verify_interval
                _call(self._on_change, f"re-resolving {self._key}")
            if (line := self._inflight.look(now)) is not None:
                self._send(sock, line, "report the work in flight")
            due = self._inflight.due()
            return next_verify if due is None else min(next_verify, due)

        try:
            for message in () if self._stop.is_set() else messages(sock, self._path, tick=tick):
                self._handle(sock, message)
        finally:
            self._inflight.lost()
            self._restart(None)

    def _handle(self, sock: socket.socket, message: dict[str, Any]) -> None:
        kind = message["type"]
        if kind in ("hello", "error"):
            check_hello(message, self._path)  # raises for an error line
            self._hello(message)
        elif message.get("checkout") != self._key:
            return  # pings, pongs and other checkouts' lines
        elif kind == "restart":
            self._restart(message)
        elif kind == "snapshot":
            self._restart(message.get("restart"))
            self._subscribed(message)
            self._register(sock)
        elif kind == "health":
            self._subscribed(message)
        elif kind == "event":
            _call(self._on_change, f"re-resolving {self._key}")
        elif kind == "refused" and message.get("request") == "register":
            self._inflight.refused()
            text = "stalewatch: the daemon refused this process's registration for %s: %s"
            self._warn_once("refused", text, self._key, printable(str(message.get("reason"))))
        elif kind == "removed":
            self._inflight.lost()
            self._report(False)
            logger.warning("stalewatch: the daemon stopped watching %s", self._key)

    def _hello(self, message: dict[str, Any]) -> None:
        """Note a (checked) hello: connected (the backoff starts again), register if offered."""
        self._delays = backoff(self._daemon.max_backoff)
        if "lost" in self._warned:
            self._warned.discard("lost")
            logger.info("stalewatch: reconnected to the daemon at %s", self._path)
        checkouts, features = message.get("checkouts"), message.get("features")
        watched = isinstance(checkouts, list) and self._key in checkouts
        if not watched:
            text = "stalewatch: the daemon at %s does not watch %s; checks re-read HEAD instead"
            self._warn_once("unwatched", text, self._path, self._key)
            self._report(False)
        # An old daemon offers no registration (nor counts) and would close us for the line.
        # Sent once this checkout's snapshot is applied (it follows the hello): whoever
        # hears the daemon announce this process knows what the daemon told it.
        self._offer = None
        if watched and isinstance(features, list) and "register" in features:
            self._offer = "inflight" in features

    def _register(self, sock: socket.socket) -> None:
        """Register the loaded revision, if the hello offered it and not yet done."""
        offer, self._offer = self._offer, None
        if offer is None or self._loaded is None:
            return
        line = register_message(self._key, self._loaded, self._inflight.registering(offer))
        if not self._inflight.enabled:
            del line["inflight"]
        self._send(sock, line, "register")

    def _send(self, sock: socket.socket, line: dict[str, Any], what: str) -> None:
        try:
            sock.sendall(encode(line))
        except OSError as exc:
            raise DaemonUnavailableError(self._path, f"cannot {what}: {exc}") from None

    def _subscribed(self, message: dict[str, Any]) -> None:
        if message.get("trusted") is not True:
            self._report(False)
            text = "stalewatch: the daemon's watcher for %s is not trusted (mode %s)"
            logger.info(text, self._key, message.get("mode"))
            return
        # Subscribed and the daemon's watcher is sound: any later move produces an
        # event; re-resolve once now for anything before it, then trust the flag.
        _call(self._on_change, f"re-resolving {self._key}")
        self._report(True)


def _call(callback: Callable[..., object], what: str, *args: object) -> None:
    try:
        callback(*args)
    except Exception:  # the guard's or the application's: never the client thread's end
        logger.exception("stalewatch: %s failed", what)
