"""The gunicorn handoff: a new master beside the old, the old retired only once it runs.

``pidfile``, ``signal = "USR2"``, ``handoff = true``. Only for a gunicorn that no
supervisor waits on: under supervisord or systemd the master that retires is the one
they know (:mod:`..supervised`), so :meth:`Handoff.check` refuses it at start and on
reload, and :meth:`Handoff.act` before each handoff (a master started after the daemon).

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

:class:`Begun` remembers the old master it signalled, so that:

- :meth:`retire` sends ``TERM`` to that very process (same pid and start time), once
  the machine confirmed new workers on the target;
- :meth:`abort` sends ``TERM`` to the new master only while it is provably the one
  this handoff started: named by ``<pidfile>.2`` (checked as any pidfile), a child of
  the old master, started after the signal, and the old master still serving (never
  once this handoff retired it: the new master is then all that will serve).

Between a confirmed handoff and the old master's exit, ``<pidfile>.2`` stays: the old
master finishes its requests first (up to ``graceful_timeout``). :func:`pending` tells
such a handoff under way (waited for before the next action, never a failure); a
``<pidfile>.2`` naming no live process is what a killed new master left behind, and is
ignored.

**Which supervisor runs a process** (:func:`supervised`), told by ``/proc``: supervisord,
systemd, or none known.

A restart action that replaces the server's main process (gunicorn's ``USR2`` handoff:
the old master exits, a new one serves) is only safe when nothing waits on the old one
to exit. Two supervisors do:

- supervisord is the parent of every program it runs and restarts it when it exits
  (``autorestart``); it sets ``SUPERVISOR_ENABLED`` and ``SUPERVISOR_PROCESS_NAME`` in
  each program's environment (supervisord.org, "Subprocess Environment" and its FAQ).
- systemd tracks a service's main process: when it exits the service ends and, with the
  default ``KillMode=control-group``, what is left in its cgroup is killed. Its main
  process is a child of the manager (pid 1, or the user's ``systemd --user``) started
  with ``INVOCATION_ID`` (every service) and, for ``Type=notify``, ``NOTIFY_SOCKET``
  (systemd.exec(5), sd_notify(3)); ``MAINPID`` is what its own ``ExecReload=`` sees.

The environment is ``/proc/PID/environ`` (the one the process was started with),
readable for a process of the same user; every file is outside input, so each reader
returns ``None`` rather than raising.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from ....core.errors import SupervisedHandoffError
from ....core.procs import PROC, Proc, read, read_proc
from .. import pidfile
from ..pidfile import TOLERANCE
from .base import Action, Done, Run, Traits

logger = logging.getLogger(__name__)

NEW_SUFFIX = ".2"
"""What gunicorn appends to the pidfile's name for the new master of a ``USR2``."""
PROMOTION_WAIT = 5.0
"""Seconds to wait for a new master to take over the pidfile before signalling (it does
within a second of the old master's exit)."""


def pending(path: Path) -> str | None:
    """A handoff under way: ``<pidfile>.2`` names a live new master (what, said); else ``None``.

    A ``.2`` file that names no live process, or a process that started after the file
    was written (the pid reused), is a leftover of a new master that was killed: ignored
    (gunicorn writes over it on the next ``USR2``).
    """
    new = Path(f"{path}{NEW_SUFFIX}")
    claim = pidfile.read_pidfile(new)
    if isinstance(claim, str):
        return None  # missing, or not a pidfile gunicorn wrote: nothing under way
    proc = read_proc(claim.pid)
    if proc is None or pidfile.judge(claim, proc, me=os.getpid()) is not None:
        return None
    old = read_proc(proc.ppid)
    if old is not None and proc.ppid > 1:
        return (
            f"{new} names the new master (pid {claim.pid}), promoted once the old master"
            f" (pid {proc.ppid}) has finished its requests and exited"
        )
    return f"{new} names the new master (pid {claim.pid}), not yet promoted"


def promoted(path: Path, stop: threading.Event, wait: float = PROMOTION_WAIT) -> str | None:
    """Wait until no new master is pending (:func:`pending`); ``None``, or why not.

    Right after a handoff the old master is gone and the new one has yet to rename its
    pidfile: a signal then would find no pidfile (and a ``USR2`` to an unpromoted master
    is ignored by gunicorn). Waited for on the worker thread, looking every 50 ms. The
    machine waits for a longer handoff under way before it gets here (the markers).
    """
    deadline = time.monotonic() + wait
    while (under_way := pending(path)) is not None:
        if time.monotonic() >= deadline:
            return f"{under_way}, still after {wait:g} s"
        if stop.wait(0.05):
            return "stopped"
    return None


# -- which supervisor runs a process (see the module doc) -----------------------------

_MAX_ENVIRON = 1 << 20  # a process's environment and arguments share 2 MiB at most (ARG_MAX / 2)


@dataclass(frozen=True)
class Supervised:
    """A process's supervisor: ``by`` (``supervisord`` or ``systemd``), ``how`` it was told,
    and ``name``, the program or unit when its environment says (else empty)."""

    by: str
    how: str
    name: str = ""


def parse_environ(data: bytes) -> dict[str, str]:
    """The variables of a ``/proc/PID/environ`` block (``NAME=value`` ended by NUL bytes).

    Entries without ``=`` or with an empty name are skipped; bytes that are not UTF-8 are
    replaced (only a few ASCII names are ever looked up); the first of two equal names wins.
    """
    found: dict[str, str] = {}
    for entry in data.split(b"\0"):
        name, sep, value = entry.partition(b"=")
        if sep and name:
            found.setdefault(name.decode(errors="replace"), value.decode(errors="replace"))
    return found


def supervised(pid: int) -> Supervised | None:
    """The supervisor that runs ``pid`` directly, when ``/proc`` tells one; else ``None``."""
    proc = read_proc(pid)
    if proc is None:
        return None
    data = read(PROC / str(pid) / "environ", _MAX_ENVIRON)
    env = parse_environ(data) if data is not None else {}
    comm = read(PROC / str(proc.ppid) / "comm", 64) if proc.ppid > 0 else None
    parent = (comm or b"").strip().decode(errors="replace")
    if "SUPERVISOR_ENABLED" in env or "SUPERVISOR_PROCESS_NAME" in env:
        name = env.get("SUPERVISOR_PROCESS_NAME", "")
        return Supervised("supervisord", "SUPERVISOR_PROCESS_NAME in its environment", name)
    if parent == "supervisord":
        return Supervised("supervisord", f"its parent (pid {proc.ppid}) is supervisord")
    for variable in ("NOTIFY_SOCKET", "MAINPID"):
        if variable in env:
            return Supervised("systemd", f"{variable} in its environment")
    if "INVOCATION_ID" in env and (proc.ppid == 1 or parent == "systemd"):
        how = f"a service's INVOCATION_ID, and its parent (pid {proc.ppid}) is systemd"
        return Supervised("systemd", how)
    return None


def alternative(who: Supervised) -> str:
    """What restarts gunicorn under ``who`` and keeps the one master it knows."""
    hup = 'signal = "HUP" without handoff (gunicorn reloads its workers on the new code; the master stays)'
    if who.by == "supervisord":
        name = who.name or "<program>"
        return f'{hup}, or action = ["supervisorctl", "restart", "{name}"] instead of pidfile'
    return (
        f"{hup}: what the unit's ExecReload=/bin/kill -s HUP $MAINPID does; or action ="
        ' ["systemctl", "restart", "<unit>"], with a socket unit holding the listener so'
        " connections wait rather than being refused"
    )


class Handoff(Action):
    """The action: ``SIG<name>`` (``USR2``) to gunicorn's master in ``pidfile``, a new master
    beside the old; the old retired once new workers registered on the target."""

    traits: ClassVar[Traits] = Traits(beside=True, retires=True, aborts=True, lingers=True)

    def __init__(self, path: Path, name: str = "USR2") -> None:
        self.path = path
        self.name = name

    def refusal(self) -> SupervisedHandoffError | None:
        """Why this handoff would leave a master no supervisor knows, if the master runs now."""
        found = pidfile.server(self.path)
        who = None if found.proc is None else supervised(found.proc.pid)
        if found.proc is None or who is None:
            return None  # not running (yet): looked at again before each handoff
        return SupervisedHandoffError(who.by, who.how, found.proc.pid, alternative(who))

    def check(self) -> None:
        refused = self.refusal()
        if refused is not None:
            raise refused

    def under_way(self) -> str | None:
        return pending(self.path)

    def act(self, revision: str, run: Run, stop: threading.Event) -> Done:
        still = promoted(self.path, stop)
        if still is not None:
            return Done(False, still)
        refused = self.refusal()
        if refused is not None:  # a master started (or moved under a supervisor) since
            return Done(False, refused.reason, refused=True)
        at = time.time()
        proc, detail = pidfile.signal_server(self.path, self.name)  # checked, :mod:`..pidfile`
        begun = None if proc is None else Begun(self.path, proc, at)
        refusal = detail.startswith("refused: ")
        return Done(begun is not None, detail.removeprefix("refused: "), refusal, begun)


@dataclass
class Begun:
    """One ``USR2`` handoff: the old master signalled, and when (``time.time()``)."""

    path: Path
    old: Proc
    signalled_at: float
    retired: bool = False

    def _old_alive(self) -> bool:
        now = read_proc(self.old.pid)
        return now is not None and abs(now.start - self.old.start) <= TOLERANCE

    def retire(self) -> str:
        """The new workers run the target: stop the old master gracefully (``TERM``)."""
        self.retired = True  # from now on the new master is what serves: never aborted
        # Signalled as a pidfile's process is: only while it is still the process
        # signalled at the handoff (pid and start time), pinned by a pidfd.
        old = pidfile.Claim(self.path, self.old.pid, self.old.start, self.old.uids[1])
        proc, detail = pidfile.signal_proc(old, "TERM")
        if proc is None and not self._old_alive():
            # Said as such: the refusal would name the pidfile, which no longer names it.
            return f"the old master (pid {self.old.pid}) is gone already"
        if proc is None:
            return f"the old master (pid {self.old.pid}) was not stopped: {detail}"
        return f"sent SIGTERM to the old master (pid {self.old.pid}); its workers finish their requests"

    def abort(self) -> str:
        """The new servers did not come up: stop the new master, if it is still ours."""
        if self.retired:
            return "the old master was retired: the new master is left serving"
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
