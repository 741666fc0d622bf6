"""The gunicorn handoff (R9): a new master beside the old, the old retired only once it runs.

What gunicorn does on ``USR2`` to its master (read in its arbiter; tested with 27.0.1): it forks, and the
child re-executes gunicorn with the listening sockets inherited (``GUNICORN_FD``) and
``GUNICORN_PID`` set to the old master's pid. The new master writes its pid to
``<pidfile>.2`` (the old master keeps ``<pidfile>``: gunicorn does not use nginx's
``.oldbin``), then boots its workers, which accept on the same sockets as the old
ones. Both generations serve until the old master is stopped: ``TERM`` is its graceful
shutdown (its workers finish their requests within ``graceful_timeout``). Once the old
master is gone the new one notices within a second (its parent changed), and renames
``<pidfile>.2`` to ``<pidfile>``. If the new workers cannot boot (the code does not
import), they exit with gunicorn's boot or load error and the new master halts by
itself, removing ``<pidfile>.2``; the old master reaps it and serves on.

:class:`Handoff` remembers the old master it signalled, so that:

- :meth:`retire` sends ``TERM`` to that very process (same pid and start time), once
  the machine confirmed new workers on the target;
- :meth:`abort` sends ``TERM`` to the new master only while it is provably the one
  this handoff started: named by ``<pidfile>.2`` (checked as any pidfile), a child of
  the old master, started after the signal, and the old master still serving.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from . import pidfile
from .pidfile import TOLERANCE
from .procs import Proc, read_proc

__all__ = ["NEW_SUFFIX", "PROMOTION_WAIT", "Handoff", "promoted"]

logger = logging.getLogger(__name__)

NEW_SUFFIX = ".2"
"""What gunicorn appends to the pidfile's name for the new master of a ``USR2``."""
PROMOTION_WAIT = 5.0
"""Seconds to wait for a new master to take over the pidfile before signalling (it does
within a second of the old master's exit)."""


def promoted(path: Path, stop: threading.Event, wait: float = PROMOTION_WAIT) -> str | None:
    """Wait until no new master is pending (``<pidfile>.2`` gone); ``None``, or why not.

    Right after a handoff the old master is gone and the new one has yet to rename its
    pidfile: a signal then would find no pidfile (and a ``USR2`` to an unpromoted master
    is ignored by gunicorn). Waited for on the worker thread, looking every 50 ms.
    """
    pending = Path(f"{path}{NEW_SUFFIX}")
    deadline = time.monotonic() + wait
    while os.path.lexists(pending):
        if time.monotonic() >= deadline:
            return f"{pending} still names a new master after {wait:g} s (a handoff under way)"
        if stop.wait(0.05):
            return "stopped"
    return None


@dataclass
class Handoff:
    """One ``USR2`` handoff: the old master signalled, and when (``time.time()``)."""

    path: Path
    old: Proc
    signalled_at: float

    @classmethod
    def begin(cls, path: Path, signame: str, now: float) -> tuple[Handoff | None, str]:
        """Signal the pidfile's master (checked, :mod:`.pidfile`); the handoff, or why not."""
        proc, detail = pidfile.signal_server(path, signame)
        return (None if proc is None else cls(path, proc, now)), detail

    def _old_alive(self) -> bool:
        now = read_proc(self.old.pid)
        return now is not None and abs(now.start - self.old.start) <= TOLERANCE

    def retire(self) -> str:
        """The new workers run the target: stop the old master gracefully (``TERM``)."""
        if not self._old_alive():
            return f"the old master (pid {self.old.pid}) is gone already"
        try:
            os.kill(self.old.pid, signal.SIGTERM)
        except OSError as exc:
            return f"cannot stop the old master (pid {self.old.pid}): {exc.strerror or exc}"
        return f"sent SIGTERM to the old master (pid {self.old.pid}); its workers finish their requests"

    def abort(self) -> str:
        """The new servers did not come up: stop the new master, if it is still ours."""
        new = Path(f"{self.path}{NEW_SUFFIX}")
        claim = pidfile.read_pidfile(new)
        if isinstance(claim, str):
            return f"no new master to stop ({claim}: it halted by itself)"
        proc = read_proc(claim.pid)
        if proc is None:
            return f"the new master (pid {claim.pid}) is gone already"
        if proc.ppid != self.old.pid or proc.start + TOLERANCE < self.signalled_at:
            return f"{new} names pid {claim.pid}, not a master this handoff started: left alone"
        if not self._old_alive():
            # The old master is gone: the new one is all that serves; stopping it would
            # leave nothing (R9). An operator decides.
            return f"the old master is gone; the new master (pid {claim.pid}) is left serving"
        _, detail = pidfile.signal_proc(claim, "TERM")
        return f"stopping the new master: {detail}; the old master (pid {self.old.pid}) serves on"
