"""The running Hermes WebUI, as the kernel shows it (Linux ``/proc``): who runs it, with what.

``stalewatch hermes setup`` asks the running server rather than guessing: its
environment is what the WebUI resolved (``bootstrap.py`` exports
``HERMES_WEBUI_PORT``, ``HERMES_WEBUI_HOST`` and ``HERMES_WEBUI_AGENT_DIR`` before it
executes ``server.py``), and its ancestors and control group say which supervisor
runs it. Everything read here is outside input: bounded reads, and any error means
"unknown", never an exception. Elsewhere than Linux nothing is found (the caller
then reads the supervisors' definitions, or asks).
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field
from pathlib import Path

from ..core.errors import SetupError
from .discovery import looks_like_webui, read_text

PROC = Path("/proc")
_LIMIT = 256 * 1024


def _read(path: Path) -> str:
    return read_text(path, _LIMIT) or ""


@dataclass(frozen=True)
class Process:
    """One process: pid, parent, command name, argv, environment (empty when unreadable)."""

    pid: int
    ppid: int
    name: str
    argv: tuple[str, ...]
    environ: dict[str, str] = field(default_factory=dict)
    cwd: Path | None = None

    @classmethod
    def read(cls, pid: int, proc: Path = PROC) -> Process | None:
        """The process ``pid`` now; ``None`` once it is gone or unreadable."""
        base = proc / str(pid)
        stat = _read(base / "stat")
        try:  # "" (gone, unreadable) included
            name = stat[stat.index("(") + 1 : stat.rindex(")")]
            ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
        except (ValueError, IndexError):
            return None
        argv = tuple(a for a in _read(base / "cmdline").split("\0") if a)
        pairs = (entry.partition("=") for entry in _read(base / "environ").split("\0"))
        environ = {key: value for key, sep, value in pairs if sep and key}
        cwd = None
        with contextlib.suppress(OSError):
            cwd = (base / "cwd").readlink()
        return cls(pid, ppid, name, argv, environ, cwd)


def webui_servers(proc: Path = PROC, uid: int | None = None) -> list[tuple[Process, Path]]:
    """Every running Hermes WebUI server (a Python running ``server.py`` of a WebUI checkout).

    Returns ``(process, checkout)`` pairs: the caller's own processes (``uid``, default
    the caller's); as root, every user's (a system unit's WebUI runs as another user).
    """
    uid = os.getuid() if uid is None else uid
    found: list[tuple[Process, Path]] = []
    try:
        entries = [int(e.name) for e in proc.iterdir() if e.name.isdigit()]
    except OSError:
        return found
    for pid in entries:
        try:
            if uid != 0 and (proc / str(pid)).stat().st_uid != uid:
                continue
        except OSError:
            continue
        process = Process.read(pid, proc)
        if process is None:
            continue
        scripts = [a for a in process.argv[1:3] if a.endswith("server.py")]
        checkout = ((process.cwd or Path()) / scripts[0]).parent if scripts else None  # cwd: a relative one
        if checkout is not None and looks_like_webui(checkout):
            found.append((process, checkout))
    return found


def running_webui(webui_dir: Path | None, port: int | None) -> tuple[Process, Path] | None:
    """The running WebUI server ``--webui-dir`` (resolved) and ``--port`` point at (``None``: none runs).

    Without ``webui_dir``, this user's (the same ``$HOME``: root sees every user's servers).

    Raises:
        SetupError: several run (the user must say which), or none on ``port`` but another.
    """
    servers = webui_servers()
    if webui_dir is not None:
        servers = [(p, d) for p, d in servers if d.resolve() == webui_dir]
    else:
        home = os.environ.get("HOME", "")
        servers = [(p, d) for p, d in servers if home and p.environ.get("HOME") == home]
    if port:
        elsewhere = servers
        servers = [(p, d) for p, d in servers if port_of(p) == str(port)]
        if elsewhere and not servers:
            listed = ", ".join(f"pid {p.pid} ({d}) on port {port_of(p)}" for p, d in elsewhere)
            raise SetupError(
                f"no Hermes WebUI server runs on port {port}, but one runs here: {listed}; pass its "
                "port (or no --port), or restart it on the port you mean first"
            )
    if len(servers) > 1:
        listed = ", ".join(f"pid {p.pid} ({d}, port {port_of(p)})" for p, d in servers)
        raise SetupError(f"several Hermes WebUI servers run: {listed}; pass --webui-dir or --port")
    return servers[0] if servers else None


def port_of(server: Process) -> str:
    """The port ``server`` listens on (its environment's, as its ``bootstrap.py`` set it)."""
    return server.environ.get("HERMES_WEBUI_PORT", "8787")  # the WebUI's default


def ancestors(pid: int, proc: Path = PROC, limit: int = 64) -> list[Process]:
    """The parents of ``pid``, nearest first, up to (not including) pid 1's parent."""
    chain: list[Process] = []
    current = Process.read(pid, proc)
    while current is not None and current.ppid > 0 and len(chain) < limit:
        parent = Process.read(current.ppid, proc)
        if parent is None:
            break
        chain.append(parent)
        current = parent
    return chain


def cgroup_unit(pid: int, proc: Path = PROC) -> tuple[str, bool] | None:
    """The systemd service ``pid`` runs in: ``(unit, user)``; ``None`` outside one.

    From the unified hierarchy's line of ``/proc/PID/cgroup``: the last ``*.service``
    component; ``user`` when it is under a user manager (``user@UID.service``).
    A session or terminal scope (``*.scope``) is not a service: ``None``.
    """
    for line in _read(proc / str(pid) / "cgroup").splitlines():
        hierarchy, _, path = line.partition("::")
        if hierarchy != "0" or not path:
            continue
        parts = [p for p in path.split("/") if p]
        if not parts or not parts[-1].endswith(".service") or parts[-1].startswith("user@"):
            return None  # a scope, or the user manager itself (not a unit of it)
        return parts[-1], any(p.startswith("user@") and p.endswith(".service") for p in parts[:-1])
    return None
