"""Reading the output pipes of hooks that exited while a process they started still holds them.

A hook that exits but leaves a background process holding its stdout (``cmd &``) is
done when it exits; the pipe then goes to :class:`OutputDrain`, which keeps reading it
(so that process never blocks on a full pipe, nor dies of SIGPIPE) until the last
writer closes it, within a rate (a background process flooding the pipe is cut off)
and a number of pipes.
"""

from __future__ import annotations

import contextlib
import logging
import os
import selectors
import threading
import time

from .capture import CHUNK, BoundedOutput, read_available

__all__ = ["DRAIN_BURST", "DRAIN_RATE", "MAX_DRAINED", "OutputDrain"]

logger = logging.getLogger(__name__)

MAX_DRAINED = 64
"""Most pipes :class:`OutputDrain` holds at once; past it the oldest is closed."""
DRAIN_RATE = 64 << 10
"""Bytes a second a hook's background process may keep writing to the hook's output."""
DRAIN_BURST = 1 << 20
"""Bytes it may write at once above that rate."""


class OutputDrain:
    """Reads the pipes of hooks that exited while a process they started still holds them.

    One thread (``stalewatch-hook-output``) runs only while there is a pipe to read, and
    ends when the last one reaches end of file. :meth:`stop` closes every pipe left
    (the daemon is exiting) and joins it. Safe from any thread.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pipes: dict[int, tuple[str, BoundedOutput]] = {}
        self._closed_early: list[int] = []  # evicted by adopt(): closed by the thread
        self._budgets: dict[int, tuple[float, float]] = {}  # fd -> (bytes allowed, when); set by adopt
        self._thread: threading.Thread | None = None
        self._wake_r, self._wake_w = -1, -1
        self._stopping = False

    def adopt(self, fd: int, label: str, output: BoundedOutput) -> None:
        """Take over non-blocking ``fd`` (closed when drained); log its rest under ``label``.

        At most :data:`MAX_DRAINED` pipes are held: a hook run often that leaves a
        long-lived writer each time (``sleep 3600 &``) would otherwise cost a
        descriptor per run until the daemon runs out. Past the bound the oldest pipe
        is closed (its writer gets EPIPE, or SIGPIPE, if it writes again).
        """
        with self._lock:
            if self._stopping:
                os.close(fd)
                return
            while len(self._pipes) >= MAX_DRAINED:
                oldest = next(iter(self._pipes))  # dicts keep insertion order
                old_label, old_output = self._pipes.pop(oldest)
                self._closed_early.append(oldest)  # the thread unregisters, then closes it
                logger.warning(
                    "stalewatch: %s: more than %d hook output pipes held by background processes;"
                    " closing the oldest",
                    old_label,
                    MAX_DRAINED,
                )
                _log_rest(old_label, old_output, closed=True)
            self._pipes[fd] = (label, output)
            self._budgets[fd] = (float(DRAIN_BURST), time.monotonic())
            if self._thread is None:
                self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
                self._thread = threading.Thread(target=self._run, name="stalewatch-hook-output", daemon=True)
                self._thread.start()
            else:
                self._poke()

    def _allow(self, fd: int, taken: int) -> bool:
        """Charge ``taken`` bytes to the pipe's budget; False once it writes too fast.

        A token bucket: :data:`DRAIN_BURST` bytes, refilled at :data:`DRAIN_RATE`
        bytes a second. A background server logging to the hook's stdout goes on for
        ever; ``yes &`` is cut off instead of keeping this thread busy for ever.
        """
        now = time.monotonic()
        allowance, since = self._budgets[fd]
        allowance = min(float(DRAIN_BURST), allowance + (now - since) * DRAIN_RATE) - taken
        self._budgets[fd] = (allowance, now)
        return allowance >= 0

    @property
    def pipes(self) -> int:
        """How many pipes are being drained."""
        return len(self._pipes)

    def _poke(self) -> None:
        with contextlib.suppress(OSError):  # full: a wake-up is already pending
            os.write(self._wake_w, b"\0")

    def stop(self) -> None:
        """Close every pipe still drained and join the thread. Harmless twice."""
        with self._lock:
            self._stopping = True
            thread = self._thread
            if thread is not None:
                self._poke()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=1.0)

    def _run(self) -> None:
        selector = selectors.DefaultSelector()
        watched = selector.get_map()  # the pipes registered, and the wake-up
        try:
            selector.register(self._wake_r, selectors.EVENT_READ)
            while True:
                with self._lock:
                    for fd in self._closed_early:
                        if fd in watched:
                            selector.unregister(fd)
                    if self._stopping or not self._pipes:
                        self._finish()
                        return
                    self._close_early()
                    for fd in self._pipes.keys() - watched.keys():
                        selector.register(fd, selectors.EVENT_READ)
                for key, _ in selector.select():
                    if key.fd == self._wake_r:
                        with contextlib.suppress(OSError):
                            os.read(self._wake_r, 4096)
                        continue
                    if key.fd not in self._pipes:
                        continue  # evicted meanwhile: closed on the next turn
                    label, output = self._pipes[key.fd]
                    before = output.total
                    ended = read_available(key.fd, output, CHUNK * 16)
                    flooding = not ended and not self._allow(key.fd, output.total - before)
                    if ended or flooding:
                        selector.unregister(key.fd)
                        with self._lock:
                            del self._pipes[key.fd]
                        os.close(key.fd)
                        if flooding:
                            logger.warning(
                                "stalewatch: %s: a background process writes more than %d bytes/s to the"
                                " hook's output; closing it (redirect its output: cmd >/dev/null 2>&1 &)",
                                label,
                                DRAIN_RATE,
                            )
                        _log_rest(label, output, closed=flooding)
        except Exception:
            logger.exception("stalewatch: draining hook output failed")
            with self._lock:
                self._finish()
        finally:
            selector.close()

    def _close_early(self) -> None:
        # Under _lock, by the thread: evicted pipes, unregistered from its selector.
        for fd in self._closed_early:
            os.close(fd)
        self._closed_early.clear()

    def _finish(self) -> None:
        # Under _lock: close what is left, and let the next adopt() start a thread.
        self._close_early()
        for fd, (label, output) in self._pipes.items():
            os.close(fd)
            _log_rest(label, output, closed=True)
        self._pipes.clear()
        os.close(self._wake_r)
        os.close(self._wake_w)
        self._wake_r = self._wake_w = -1
        self._thread = None


def _log_rest(label: str, output: BoundedOutput, *, closed: bool = False) -> None:
    end = "closed at exit" if closed else "closed by its last writer"
    logger.info("stalewatch: %s: background output, %d bytes, %s", label, output.total, end)
    for line in output.lines():
        logger.info("stalewatch: %s: %s", label, line)
