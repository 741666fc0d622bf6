"""A command's output: kept within a fixed number of bytes, and read on after the command exited.

A command may print without end (``yes``) or one line of 300 MB; its output goes to the
daemon's log. :class:`BoundedOutput` keeps the first and the last few KiB and counts
the bytes in between, so memory stays flat whatever it writes.

A command that exits but leaves a background process holding its stdout (``cmd &``)
is done when it exits; the pipe then goes to :class:`OutputDrain`, which keeps reading
it (so that process never blocks on a full pipe, nor dies of SIGPIPE) until the last
writer closes it, within a rate (a background process flooding the pipe is cut off)
and a number of pipes.
"""

from __future__ import annotations

import logging
import os
import select
import threading
import time

from ..core.escaping import printable
from ..core.signals import Wakeup

logger = logging.getLogger(__name__)

HEAD_BYTES = 4096
"""Bytes of a hook's output kept from its start (logged)."""
TAIL_BYTES = 4096
"""Bytes of a hook's output kept from its end (logged)."""
MAX_LINES = 50
"""Lines of a hook's output logged from each end."""
CHUNK = 65536


class BoundedOutput:
    """The head and tail of a byte stream, and how many bytes fell between them.

    Args:
        head: bytes kept from the start.
        tail: bytes kept from the end.
    """

    def __init__(self, head: int = HEAD_BYTES, tail: int = TAIL_BYTES) -> None:
        self._head_limit = head
        self._tail_limit = tail
        self.head = bytearray()
        self.tail = bytearray()  # the last bytes after the head (at most ``tail``)
        self.total = 0

    def feed(self, data: bytes) -> None:
        """Add bytes; memory stays within ``head + tail + len(data)``."""
        self.total += len(data)
        room = self._head_limit - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        self.tail += data[-self._tail_limit :]
        del self.tail[: -self._tail_limit]

    @property
    def dropped(self) -> int:
        """Bytes neither in the head nor in the tail."""
        return self.total - len(self.head) - len(self.tail)

    def lines(self) -> list[str]:
        """Printable lines for the log: the head, a note of what was left out, the tail.

        At most :data:`MAX_LINES` lines from each end (``yes`` makes thousands of
        lines of a few KiB); the note counts every byte not shown.
        """
        head, tail = bytes(self.head), bytes(self.tail)
        if not self.dropped:  # head and tail are contiguous
            head, tail = head + tail, b""
        first = head.split(b"\n")[:MAX_LINES]
        last = tail.split(b"\n")[-MAX_LINES:] if tail else []
        left_out = self.total - len(b"\n".join(first)) - len(b"\n".join(last))
        note = [f"[... {left_out} bytes not logged ...]"] if left_out > 0 else []
        return [*_lines(first), *note, *_lines(last)]


def _lines(parts: list[bytes]) -> list[str]:
    return [printable(part.decode("utf-8", "replace")) for part in parts if part]


def read_available(fd: int, output: BoundedOutput, limit: int = 16 * CHUNK) -> bool:
    """Read from non-blocking ``fd`` into ``output`` until it would block; True at EOF.

    Reads at most ``limit`` bytes, so a writer faster than us cannot hold us here.
    """
    taken = 0
    while taken < limit:
        try:
            data = os.read(fd, CHUNK)
        except BlockingIOError:
            return False
        except OSError:
            return True  # the pipe is broken: as good as closed
        if not data:
            return True
        output.feed(data)
        taken += len(data)
    return False


MAX_DRAINED = 64
"""Most pipes :class:`OutputDrain` holds at once; past it the oldest is closed."""
DRAIN_RATE = 64 << 10
"""Bytes a second a hook's background process may keep writing to the hook's output."""
DRAIN_BURST = 1 << 20
"""Bytes it may write at once above that rate."""


class OutputDrain:
    """Reads the pipes of commands that exited while a process they started still holds them.

    One thread (``stalewatch-hook-output``) runs only while there is a pipe to read, and
    ends when the last one reaches end of file. :meth:`stop` closes every pipe left
    (the daemon is exiting) and joins it. Safe from any thread: every pipe is read,
    closed and forgotten under one lock, so the thread never reads a pipe it no
    longer holds (it polls the pipes anew each pass, and ignores what was closed).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # fd -> (label, output, [bytes allowed, when]: a token bucket, see _within_rate)
        self._pipes: dict[int, tuple[str, BoundedOutput, list[float]]] = {}
        self._thread: threading.Thread | None = None
        self._wakeup: Wakeup | None = None  # while the thread runs
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
                logger.warning(
                    "stalewatch: %s: more than %d hook output pipes held by background processes;"
                    " closing the oldest",
                    self._pipes[oldest][0],
                    MAX_DRAINED,
                )
                self._close(oldest, closed=True)
            self._pipes[fd] = (label, output, [float(DRAIN_BURST), time.monotonic()])
            if self._wakeup is None:
                self._wakeup = Wakeup()
                self._thread = threading.Thread(
                    target=self._run, args=(self._wakeup,), name="stalewatch-hook-output", daemon=True
                )
                self._thread.start()
            self._wakeup.poke()  # poll the pipes as they are now

    def stop(self) -> None:
        """Close every pipe still drained and join the thread. Harmless twice."""
        with self._lock:
            self._stopping = True
            thread = self._thread
            if self._wakeup is not None:
                self._wakeup.poke()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=1.0)

    def _run(self, wakeup: Wakeup) -> None:
        try:
            while True:
                with self._lock:
                    if self._stopping or not self._pipes:
                        self._finish()
                        return
                    poller = select.poll()
                    for fd in (wakeup.fileno(), *self._pipes):
                        poller.register(fd, select.POLLIN)
                for fd, _ in poller.poll():
                    with self._lock:
                        if fd in self._pipes:  # else: closed meanwhile (adopt, stop)
                            self._read(fd)
                wakeup.drain()
        except Exception:
            logger.exception("stalewatch: draining hook output failed")
            with self._lock:
                self._finish()

    def _finish(self) -> None:
        # Under _lock: close what is left, and let the next adopt() start a thread.
        for fd in list(self._pipes):
            self._close(fd, closed=True)
        if self._wakeup is not None:
            self._wakeup.close()
        self._thread = self._wakeup = None

    def _read(self, fd: int) -> None:
        # Under _lock: read what ``fd`` has; done with it at its end, or when it floods.
        label, output, budget = self._pipes[fd]
        before = output.total
        ended = read_available(fd, output)
        flooding = not ended and not _within_rate(budget, output.total - before)
        if flooding:
            logger.warning(
                "stalewatch: %s: a background process writes more than %d bytes/s to the"
                " hook's output; closing it (redirect its output: cmd >/dev/null 2>&1 &)",
                label,
                DRAIN_RATE,
            )
        if ended or flooding:
            self._close(fd, closed=flooding)

    def _close(self, fd: int, *, closed: bool) -> None:
        # Under _lock: forget the pipe, close it, log what it kept.
        label, output, _ = self._pipes.pop(fd)
        os.close(fd)
        end = "closed at exit" if closed else "closed by its last writer"
        logger.info("stalewatch: %s: background output, %d bytes, %s", label, output.total, end)
        for line in output.lines():
            logger.info("stalewatch: %s: %s", label, line)


def _within_rate(budget: list[float], taken: int) -> bool:
    """Charge ``taken`` bytes to a pipe's ``[allowance, when]``; False once it writes too fast.

    A token bucket: :data:`DRAIN_BURST` bytes, refilled at :data:`DRAIN_RATE` bytes a
    second. A background server logging to the hook's stdout goes on for ever; ``yes &``
    is cut off instead of keeping the drain's thread busy for ever.
    """
    now = time.monotonic()
    budget[:] = min(float(DRAIN_BURST), budget[0] + (now - budget[1]) * DRAIN_RATE) - taken, now
    return budget[0] >= 0
