"""Metrics as a file for node_exporter's textfile collector, replaced atomically.

For hosts whose daemon keeps ``PrivateNetwork=yes``: node_exporter reads every
``*.prom`` file of its ``--collector.textfile.directory`` on each scrape, so the file
must never be seen half-written. It is written as a temporary file in the same
directory (a dot-name not ending in ``.prom``, created ``O_EXCL | O_NOFOLLOW``),
fsynced, renamed over the target and the directory fsynced. ``rename`` replaces a
symlink planted at the target instead of writing through it, and no path is ever
opened for writing that existed before.

:class:`TextfileWriter` rewrites the file every ``interval`` seconds and soon after
a change (at most once per ``min_gap``), on one thread, ``stalewatch-metrics-textfile``.
It removes the file when the daemon stops (if it is still the file it wrote), so a
stopped daemon's metrics do not live on in node_exporter's output.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

from ..core.errors import MetricsError
from ..core.escaping import printable
from ..core.files import write_atomically

logger = logging.getLogger(__name__)

_MODE = 0o644  # node_exporter runs as another user: the file must be readable by it
_WARN_EVERY = 60.0  # seconds between repeats of the same write failure in the log


class TextfileWriter:
    """Writes ``render()`` to ``path`` periodically and after changes, on one thread.

    Args:
        path: the ``.prom`` file.
        render: produces the file's content (called on the writer's thread).
        interval: seconds between writes when nothing changes.
        min_gap: the least time between two writes (a burst of changes: one write).
    """

    def __init__(
        self, path: Path, render: Callable[[], bytes], interval: float, min_gap: float = 1.0
    ) -> None:
        self.path = path
        self._render = render
        self._interval = interval
        self._min_gap = min(min_gap, interval)
        self._changed = threading.Event()  # set by a change, and to stop
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._written: tuple[int, int] | None = None
        self._last = 0.0
        self._failure: tuple[str, float] | None = None  # last failure logged, and when
        self.writes = 0

    def write_now(self) -> None:
        """Write once, now, on the caller's thread (at start: a failure stops the daemon).

        Raises:
            MetricsError: the file cannot be written.
        """
        try:
            self._write()
        except OSError as exc:
            reason = f"cannot write {printable(str(self.path))}: {exc.strerror or exc}"
            raise MetricsError("metrics_textfile", reason) from None

    def _write(self) -> None:
        self._last = time.monotonic()
        self._written = write_atomically(self.path, self._render(), _MODE)
        self.writes += 1

    def changed(self) -> None:
        """Something changed: write soon (within ``min_gap``). Any thread; cheap."""
        self._changed.set()

    def start(self) -> TextfileWriter:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="stalewatch-metrics-textfile", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop the thread, then remove the file if it is still ours. Harmless twice."""
        self._stop.set()
        self._changed.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5.0)
        written, self._written = self._written, None
        with contextlib.suppress(OSError):
            info = self.path.lstat()
            if (info.st_dev, info.st_ino) == written:  # never a successor's file
                self.path.unlink()

    def _run(self) -> None:
        # A write every interval, and min_gap after the last one once something changed.
        while True:
            self._changed.wait(self._last + self._interval - time.monotonic())
            if self._stop.wait(max(0.0, self._last + self._min_gap - time.monotonic())):
                return
            self._changed.clear()
            try:
                self._write()
            except Exception as exc:  # a full disk or a bug: logged, and the next write tries again
                self._last = time.monotonic()
                self._warn(exc)
            else:
                if self._failure is not None:
                    logger.info("stalewatch: metrics textfile %s written again", printable(str(self.path)))
                    self._failure = None

    def _warn(self, exc: Exception) -> None:
        # The same failure again is logged once per _WARN_EVERY, not once per try.
        text = str(exc) if isinstance(exc, OSError) else f"{type(exc).__name__}: {exc}"
        if self._failure is None or self._failure[0] != text or self._last - self._failure[1] >= _WARN_EVERY:
            self._failure = (text, self._last)
            if isinstance(exc, OSError):
                logger.warning(
                    "stalewatch: cannot write the metrics textfile %s: %s", printable(str(self.path)), text
                )
            else:
                logger.exception("stalewatch: unexpected error writing the metrics textfile")
