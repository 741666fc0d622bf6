"""The daemon under systemd: READY/RELOADING/STATUS/STOPPING, and the watchdog's proof.

``READY=1`` waits, inside the loop so signals stay prompt, until every watcher runs
(trusted, or polling: a mode that is never trusted) or :data:`READY_WAIT` seconds
passed; the daemon serves meanwhile. ``STATUS=`` costs a pass over every checkout: it
is made only after a change, on a quiet turn, or at the latest a second after.

``WATCHDOG=1`` is a promise that the daemon still works, so it is sent only on proof:
the socket loop turned recently (:meth:`SystemdNotifier.beat`) and every checkout's watcher
re-verified it recently (:class:`ObservedSource` records each periodic verification,
which the process's shared workers run). A wedged loop, or workers wedged in some
checkout's callbacks, stop the pings and systemd restarts the unit. Outside systemd
every notification is a no-op.

A notification (sd_notify(3), without libsystemd) is one datagram of ``KEY=value``
lines sent to the ``AF_UNIX`` socket named by ``$NOTIFY_SOCKET`` (a leading ``@``
means the abstract namespace). Outside systemd the variable is unset and every call is
a cheap no-op.
"""

from __future__ import annotations

import logging
import math
import os
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ..core.status import Status, WatchMode
from ..git.refs import GitDirs
from ..watching.local import LocalSource
from ..watching.source import OnChange, OnHealth
from ..watching.watcher import Watcher

if TYPE_CHECKING:
    from .loop import DaemonServer

logger = logging.getLogger(__name__)

SD_ENV = ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "LISTEN_FDS", "LISTEN_PID", "LISTEN_FDNAMES")
"""Variables meant for this process only: never passed on to the commands it runs."""
READY_WAIT = 5.0
"""The longest ``READY=1`` waits for the watchers to run, in seconds (serving meanwhile)."""
# STATUS= costs a snapshot per checkout (milliseconds for a thousand): it is made only
# after a change, on a quiet turn (never between an event and the next), or after this.
_STATUS_QUIET, _STATUS_LATEST = 0.05, 1.0


def notify(state: str, environ: Mapping[str, str] = os.environ) -> bool:
    """Send ``state`` (e.g. ``"READY=1\\nSTATUS=watching 2 checkouts"``) to systemd.

    Returns True when a datagram was sent, False when not under systemd or the send
    failed (logged: the service must keep running even if systemd went away).
    """
    address = environ.get("NOTIFY_SOCKET", "")
    if not address:
        return False
    if address.startswith("@"):
        address = "\0" + address[1:]
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            # Never block: a receiver that stopped reading fills its queue after ~10
            # datagrams, and the daemon's loop must not wait for it.
            sock.setblocking(False)
            sock.sendto(state.encode(), address)
    except BlockingIOError:
        logger.debug("stalewatch: systemd's notification queue is full; dropped %r", state)
        return False
    except OSError as exc:
        logger.warning("stalewatch: cannot notify systemd at %s: %s", environ.get("NOTIFY_SOCKET"), exc)
        return False
    return True


def watchdog_interval(environ: Mapping[str, str] = os.environ) -> float | None:
    """Seconds between ``WATCHDOG=1`` pings (half of ``WatchdogSec=``), or ``None``.

    ``None`` when no watchdog is configured or it is meant for another process
    (``WATCHDOG_PID`` names a different pid).
    """
    usec, pid = environ.get("WATCHDOG_USEC", ""), environ.get("WATCHDOG_PID", "")
    if (pid and pid != str(os.getpid())) or not (usec.isascii() and usec.isdigit()) or not int(usec):
        return None
    return int(usec) / 2e6


class ObservedSource(LocalSource):
    """A :class:`LocalSource` that records the watcher's heartbeat and health reports.

    The watcher beats on every periodic verification (and restart), run by the
    process's shared workers; a recent beat proves they still turn for this checkout:
    the systemd watchdog pings only on that proof. Verifications are spread and
    stretched with the number of checkouts (the watcher's ``verify_period`` is the
    period now).
    """

    def __init__(self) -> None:
        super().__init__()
        self.watcher: Watcher | None = None  # the watcher it made (None: not watching yet)
        # The last beat; at first, when its watcher was made: a watcher a reload just added
        # has as long for its first turn as any other for its next (a thousand new ones
        # queue behind wake-ups).
        self.beat: float | None = None
        self.on_report: Callable[[bool, WatchMode], None] | None = None  # set by the checkout

    def _beat(self) -> None:
        self.beat = time.monotonic()

    def watch(self, dirs: GitDirs, on_change: OnChange, on_health: OnHealth, **_: object) -> Watcher:
        """Watch ``dirs`` in this process, as :class:`LocalSource` does, beating on each turn."""

        def changed() -> Sequence[Path] | None:
            self._beat()
            return on_change()

        def health(trusted: bool, mode: WatchMode) -> None:
            on_health(trusted, mode)
            if self.on_report is not None:
                self.on_report(trusted, mode)

        self.watcher = super().watch(dirs, changed, health)
        self.watcher.on_verified = self._beat
        self._beat()
        return self.watcher


def counted(count: int, noun: str) -> str:
    """``1 checkout``, ``2 checkouts``: a count on a line the daemon writes."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


class SystemdNotifier:
    """Tells systemd how the daemon is doing; pings its watchdog only on proof of life.

    The daemon's loop thread calls every method but :meth:`alive`; the watchdog thread
    reads only the loop's last beat and the tuple :meth:`watching` publishes, never
    the daemon's own tables.

    Args:
        server: the daemon, whose checkouts and clients ``STATUS=`` counts (on the loop's
            thread), and whose watchers' heartbeats :meth:`alive` requires.
        loop_tick: the longest the daemon's loop sleeps between turns, in seconds.
    """

    def __init__(self, server: DaemonServer, loop_tick: float) -> None:
        self._server = server
        self._loop_tick = loop_tick
        self._loop_beat = time.monotonic()
        self._watchers: tuple[tuple[str, ObservedSource], ...] = ()
        self._status = ""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._unready: set[str] = set()  # checkouts whose watcher is not running yet
        self._ready_by = 0.0
        self._ready_sent = False
        self._changes = 0  # events and health reports handled, and reloads: STATUS= may differ
        self._shown: tuple[int, int] | None = None  # (changes, clients) STATUS= was made for
        self._status_by = 0.0
        self._pending = False  # at the turn's start: STATUS= not made for what it shows
        self._turn_changes = 0  # changes at the turn's start

    def _text(self) -> str:
        """systemd's one-line ``STATUS=``: checkouts by status, clients, untrusted watchers;
        from what the loop already holds (no snapshot copies): cheap at 10,000 checkouts."""
        entries = self._server.entries.values()
        counts = Counter(entry.guard.status for entry in entries)
        untrusted = sum(not entry.trusted for entry in entries)
        parts = ", ".join(f"{counts[s]} {s.value}" for s in Status if counts[s]) or "none"
        text = (
            f"{counted(len(entries), 'checkout')} ({parts}); {counted(len(self._server.clients), 'client')}"
        )
        return text + (f"; {counted(untrusted, 'watcher')} untrusted" if untrusted else "")

    # -- the loop thread --------------------------------------------------------------------

    def watching(self) -> None:
        """Require the heartbeats of the watchers there are now (see :meth:`alive`)."""
        self._watchers = tuple((key, entry.source) for key, entry in self._server.entries.items())

    def beat(self) -> None:
        """The loop completed a turn."""
        self._loop_beat = time.monotonic()

    def serving(self, keys: Iterable[str]) -> None:
        """Serving from now: ``READY=1`` waits for these checkouts' watchers to run."""
        self._unready = set(keys)
        self._ready_by = time.monotonic() + READY_WAIT

    def running(self, key: str) -> None:
        """The watcher of ``key`` runs (trusted, or polling: a mode never trusted)."""
        self._unready.discard(key)

    def changed(self) -> None:
        """What ``STATUS=`` shows may have changed (an event, a health report, a reload)."""
        self._changes += 1

    def wait(self, now: float, clients: int) -> float:
        """How long the loop may wait for I/O before a notification is due (``inf``: none).

        Called once at the start of each turn, before the wait: :meth:`status_when_due`
        at its end compares with what it saw here.
        """
        self._turn_changes = self._changes
        self._pending = self._shown != (self._changes, clients)
        wait = math.inf if self._ready_sent else self._ready_by - now
        return min(wait, _STATUS_QUIET) if self._pending else wait

    def ready_when_due(self, now: float) -> None:
        """Send ``READY=1`` once every watcher runs, or once the wait is over."""
        if self._ready_sent or (self._unready and now < self._ready_by):
            return
        for key in sorted(self._unready):
            logger.warning("stalewatch: watcher for %s not running yet; ready anyway", key)
        self._unready.clear()
        self._ready_sent = True
        notify(f"READY=1\nSTATUS={self._text()}\nMAINPID={os.getpid()}")
        interval = watchdog_interval()
        if interval is not None:
            self._thread = threading.Thread(
                target=self._watchdog, args=(interval,), name="stalewatch-sd-watchdog", daemon=True
            )
            self._thread.start()

    def status_when_due(self, now: float, clients: int, *, woken: bool) -> None:
        """At the turn's end: ``STATUS=``, if due (``woken``: the wait ended on I/O)."""
        wanted = (self._changes, clients)
        if not self._pending and wanted != self._shown:
            self._status_by = now + _STATUS_LATEST
        quiet = not woken and self._turn_changes == self._changes
        if wanted != self._shown and (quiet or now >= self._status_by):
            self._shown = wanted
            text = self._text()
            if text != self._status:
                self._status = text
                notify(f"STATUS={text}")

    def reloading(self) -> None:
        usec = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        notify(f"RELOADING=1\nMONOTONIC_USEC={usec}")

    def reloaded(self) -> None:
        notify(f"READY=1\nSTATUS={self._text()}")

    def stopping(self) -> None:
        """``STOPPING=1``, and the watchdog thread ends (joined)."""
        self._stop.set()
        notify("STOPPING=1")
        if self._thread is not None:
            self._thread.join(timeout=1.0)

    # -- the watchdog thread ----------------------------------------------------------------

    def alive(self) -> str | None:
        """``None`` when the loop and every checkout's watcher beat recently, else why not."""
        now = time.monotonic()
        if now - self._loop_beat > 3 * self._loop_tick:
            return f"the socket loop has not run for {now - self._loop_beat:.1f} s"
        for key, source in self._watchers:
            beat = source.beat
            interval = source.watcher.verify_period if source.watcher is not None else source.verify_interval
            if beat is None or now - beat > 3 * interval + 1:
                return f"the watcher for {key} has not re-verified for {3 * interval + 1:.0f} s"
        return None

    def _watchdog(self, interval: float) -> None:
        problem: str | None = None
        while not self._stop.wait(interval):
            now_problem = self.alive()
            if now_problem is None:
                notify("WATCHDOG=1")
            elif now_problem != problem:
                logger.error("stalewatch: not pinging the systemd watchdog: %s", now_problem)
            problem = now_problem
