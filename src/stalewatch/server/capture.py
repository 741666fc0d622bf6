"""A command's output, kept within a fixed number of bytes: its head, its tail, a count between.

A hook may print without end (``yes``) or one line of 300 MB; its output goes to the
daemon's log. :class:`BoundedOutput` keeps the first and the last few KiB and counts
the bytes in between, so memory stays flat whatever the hook writes, and the log gets
a bounded head and tail. What a background process keeps writing after its hook
exited is read by :mod:`.drain`.
"""

from __future__ import annotations

import os

from ..core.escaping import printable

__all__ = ["CHUNK", "HEAD_BYTES", "MAX_LINES", "TAIL_BYTES", "BoundedOutput", "read_available"]

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


def read_available(fd: int, output: BoundedOutput, limit: int) -> bool:
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
