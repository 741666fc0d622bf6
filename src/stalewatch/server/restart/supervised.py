"""Which supervisor runs a process, told by ``/proc``: supervisord, systemd, or none known.

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

from dataclasses import dataclass

from ...core.procs import PROC, read, read_proc

__all__ = ["Supervised", "parse_environ", "supervised"]

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


def _comm(pid: int) -> str:
    data = read(PROC / str(pid) / "comm", 64)
    return "" if data is None else data.strip().decode(errors="replace")


def supervised(pid: int) -> Supervised | None:
    """The supervisor that runs ``pid`` directly, when ``/proc`` tells one; else ``None``."""
    proc = read_proc(pid)
    if proc is None:
        return None
    data = read(PROC / str(pid) / "environ", _MAX_ENVIRON)
    env = parse_environ(data) if data is not None else {}
    parent = _comm(proc.ppid) if proc.ppid > 0 else ""
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
