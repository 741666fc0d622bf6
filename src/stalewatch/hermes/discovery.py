"""Where Hermes lives on this machine, found the way Hermes WebUI finds it.

The WebUI's server finds the Agent in its ``api/config.py`` (``_discover_agent_dir``);
:func:`discover_agent_dir` takes the same candidates in the same order, including the
one that needs the WebUI's own checkout: ``hermes-agent`` beside it (so an install
in ``/srv/hermes-webui`` + ``/srv/hermes-agent`` is found with an empty HOME).

The running WebUI, as the kernel shows it (Linux ``/proc``), comes first: setup asks
the running server rather than guessing. Its environment is what the WebUI resolved
(``bootstrap.py`` exports ``HERMES_WEBUI_PORT``, ``HERMES_WEBUI_HOST`` and
``HERMES_WEBUI_AGENT_DIR`` before it executes ``server.py``), and its ancestors and
control group say which supervisor runs it. Elsewhere than Linux nothing is found (the
caller then reads the supervisors' definitions, or asks).

Everything read here is outside input: bounded reads, and any error means "unknown",
never an exception.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from ..core import procs
from ..core.errors import SetupError

AGENT_MODULE = "run_agent"
"""The Agent module the WebUI imports ``AIAgent`` from."""
_SYSTEM_CANDIDATES = ("/opt/hermes-agent", "/usr/local/hermes-agent", "/usr/local/share/hermes-agent")
MOST_BYTES = 1 << 20
"""Bytes of a definition (a ``.env``, a LaunchAgent, a supervisord file) read whole at most."""


def open_regular(path: Path) -> BinaryIO:
    """``path`` open for reading if it is a regular file, never blocking on the open (a FIFO).

    Raises:
        OSError: it cannot be opened, or is not a regular file (a FIFO, a device, a directory).
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    if stat.S_ISREG(os.fstat(fd).st_mode):
        return os.fdopen(fd, "rb")
    os.close(fd)
    raise OSError("not a regular file")


def read_bytes(path: Path, limit: int = 64 * 1024, *, whole: bool = False) -> bytes:
    """The first ``limit`` bytes of ``path``; none if unreadable, not a regular file (a FIFO
    never blocks the read) or, ``whole``, longer than ``limit``.

    Everything setup reads of the machine is outside input: a bounded read that never raises.
    """
    try:
        with open_regular(path) as file:
            data = file.read(limit + 1 if whole else limit)
    except OSError:
        return b""
    return b"" if len(data) > limit else data


def read_text(path: Path, limit: int = 64 * 1024, *, whole: bool = False) -> str:
    """:func:`read_bytes` as text (odd bytes replaced)."""
    return read_bytes(path, limit, whole=whole).decode("utf-8", "replace")


def probe(path: Path, test: Callable[[Path], bool] = Path.is_file) -> bool:
    """``test(path)``, false where the path cannot be looked at (an unreadable parent, a loop)."""
    with contextlib.suppress(OSError):  # Python 3.11 raises for a path it may not look at (EACCES)
        return test(path)
    return False


def resolved(path: Path, flag: str) -> Path:
    """``path`` (given as ``flag``) resolved; SetupError naming both where it cannot be (a link loop)."""
    try:
        return path.resolve()
    except (OSError, RuntimeError) as exc:  # Python 3.11 raises RuntimeError for a loop
        raise SetupError(f"{flag} {path} cannot be resolved: {exc}") from None


def user_home(env: Mapping[str, str] = os.environ) -> Path | None:
    """``$HOME`` (this process's: else its passwd entry), ``None`` when neither says."""
    home = env.get("HOME", "").strip()
    if home or env is not os.environ:
        return Path(home) if home else None
    with contextlib.suppress(RuntimeError):  # else no HOME and no passwd entry
        return Path("~").expanduser()
    return None


def _named(env: Mapping[str, str], variable: str) -> Path | None:
    value = env.get(variable, "").strip()
    with contextlib.suppress(RuntimeError):  # else ~user of no user known here: unknown, as unset
        return Path(value).expanduser() if value else None
    return None


def hermes_home(env: Mapping[str, str] = os.environ) -> Path | None:
    """``$HERMES_HOME``, else ``~/.hermes``: where Hermes keeps its state and update marker."""
    if explicit := _named(env, "HERMES_HOME"):
        return explicit
    home = user_home(env)
    return home / ".hermes" if home is not None else None


def agent_python(agent_dir: Path, env: Mapping[str, str] = os.environ) -> Path | None:
    """The Python with the Agent's dependencies, found as the WebUI finds it.

    ``$HERMES_WEBUI_PYTHON``, else the Agent's ``venv`` or ``.venv``; ``None`` when
    neither exists (the WebUI then falls back to the system's python3).
    """
    if explicit := _named(env, "HERMES_WEBUI_PYTHON"):
        return explicit
    found = (agent_dir / v / b for v in ("venv", ".venv") for b in ("bin/python", "Scripts/python.exe"))
    return next((candidate for candidate in found if candidate.exists()), None)


def webui_unit(env: Mapping[str, str] = os.environ) -> str:
    """The WebUI's systemd unit: ``$HERMES_WEBUI_SYSTEMD_UNIT``, else ``hermes-webui.service``."""
    unit = env.get("HERMES_WEBUI_SYSTEMD_UNIT", "").strip() or "hermes-webui.service"
    return unit if "." in unit else f"{unit}.service"


def looks_like_webui(path: Path) -> bool:
    """Whether ``path`` is a Hermes WebUI checkout (its start script and its guard's module)."""
    return probe(path / "start.sh") and probe(path / "api" / "agent_runtime.py")


def _pip_style(path: Path) -> bool:
    return probe(path / "cron" / "jobs.py") and any(
        probe(path / name, Path.is_dir) for name in ("hermes", "hermes_cli")
    )


def agent_candidates(webui_dir: Path | None = None, env: Mapping[str, str] = os.environ) -> list[Path]:
    """Where the WebUI looks for the Agent, in its order (``api/config.py``)."""
    candidates: list[Path] = []
    if explicit := _named(env, "HERMES_WEBUI_AGENT_DIR"):
        candidates.append(explicit)
    if (hermes := hermes_home(env)) is not None:
        candidates.append(hermes / "hermes-agent")
    if webui_dir is not None:
        candidates += [webui_dir.parent / "hermes-agent", webui_dir.parent]
    home = user_home(env)
    if home is not None:
        candidates += [home / ".hermes" / "hermes-agent", home / "hermes-agent"]
        data = _named(env, "XDG_DATA_HOME") or home / ".local" / "share"
        candidates.append(data / "hermes-agent")
    candidates += [Path(p) for p in _SYSTEM_CANDIDATES]
    return list(dict.fromkeys(candidates))  # each once, in order


def discover_agent_dir(webui_dir: Path | None = None, env: Mapping[str, str] = os.environ) -> Path | None:
    """Find the Hermes Agent checkout the way Hermes WebUI does.

    Candidates in the WebUI's order (:func:`agent_candidates`): ``$HERMES_WEBUI_AGENT_DIR``,
    ``$HERMES_HOME/hermes-agent``, ``hermes-agent`` beside the WebUI's checkout, the
    directory holding the WebUI's checkout, ``~/.hermes/hermes-agent``,
    ``~/hermes-agent``, ``$XDG_DATA_HOME/hermes-agent``, ``/opt/hermes-agent``,
    ``/usr/local/hermes-agent``, ``/usr/local/share/hermes-agent``. The first holding
    ``run_agent.py`` wins, else the first laid out as a pip install; resolved; ``None``
    when none is. For the guard this is a diagnostic value: its identity always comes
    from the loaded module.
    """
    candidates = agent_candidates(webui_dir, env)
    for test in (lambda path: probe(path / f"{AGENT_MODULE}.py"), _pip_style):
        for candidate in candidates:
            if test(candidate):
                with contextlib.suppress(OSError, RuntimeError):  # a loop, or gone: the next one
                    return candidate.resolve()
    return None


def read_dotenv(path: Path) -> dict[str, str]:
    """``KEY=VALUE`` lines of a ``.env`` file as the WebUI's bootstrap reads them (``{}`` if none).

    Read whole (a line cut at a bound would be another value), ``{}`` past :data:`MOST_BYTES`;
    never raises for a missing or unreadable file.
    """
    return read_dotenv_text(read_text(path, MOST_BYTES, whole=True))


def read_dotenv_text(text: str) -> dict[str, str]:
    """``KEY=VALUE`` lines: comments and blank lines skipped, ``export`` and quotes removed."""
    pairs = (line.strip().partition("=") for line in text.splitlines() if not line.strip().startswith("#"))
    named = ((key.strip().removeprefix("export ").strip(), value) for key, has, value in pairs if has)
    return {key: value.strip().strip('"').strip("'") for key, value in named if key}


_LIMIT = 256 * 1024  # of a command line, an environment, a control group


def _proc_text(path: Path) -> str:
    return (procs.read(path, _LIMIT) or b"").decode("utf-8", "replace")


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
    def read(cls, pid: int, proc: Path = procs.PROC) -> Process | None:
        """The process ``pid`` now; ``None`` once it is gone or unreadable."""
        base = proc / str(pid)
        stat = procs.read(base / "stat") or b""
        if (parsed := procs.parse_stat(stat)) is None:  # gone, unreadable or odd
            return None
        name = stat.partition(b"(")[2].rpartition(b")")[0].decode("utf-8", "replace")
        argv = tuple(a for a in _proc_text(base / "cmdline").split("\0") if a)
        pairs = (entry.partition("=") for entry in _proc_text(base / "environ").split("\0"))
        cwd = None
        with contextlib.suppress(OSError):
            cwd = (base / "cwd").readlink()
        return cls(pid, parsed[0], name, argv, {key: value for key, sep, value in pairs if sep and key}, cwd)


def webui_servers(proc: Path = procs.PROC, uid: int | None = None) -> list[tuple[Process, Path]]:
    """Every running Hermes WebUI server (a Python running ``server.py`` of a WebUI checkout).

    Returns ``(process, checkout)`` pairs: the caller's own processes (``uid``, default
    the caller's); as root, every user's (a system unit's WebUI runs as another user).
    """
    uid = os.getuid() if uid is None else uid
    found: list[tuple[Process, Path]] = []
    for pid in procs.pids(proc):
        if uid != 0 and not probe(proc / str(pid), lambda path: path.stat().st_uid == uid):
            continue  # another user's, or gone
        # Its command line first: only a server.py is read whole (its environment: up to 256 KiB).
        argv = [a for a in _proc_text(proc / str(pid) / "cmdline").split("\0") if a]
        script = next((a for a in argv[1:3] if a.endswith("server.py")), None)
        if script is None or (process := Process.read(pid, proc)) is None:
            continue
        checkout = ((process.cwd or Path()) / script).parent  # cwd: a relative one
        if looks_like_webui(checkout):
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


def ancestors(pid: int, proc: Path = procs.PROC, limit: int = 64) -> list[Process]:
    """The parents of ``pid``, nearest first, up to (not including) pid 1's parent."""
    chain: list[Process] = []
    current = Process.read(pid, proc)
    while current is not None and current.ppid > 0 and len(chain) < limit:
        if (current := Process.read(current.ppid, proc)) is not None:
            chain.append(current)
    return chain


def cgroup_unit(pid: int, proc: Path = procs.PROC) -> tuple[str, bool] | None:
    """The systemd service ``pid`` runs in: ``(unit, user)``; ``None`` outside one.

    From the unified hierarchy's line of ``/proc/PID/cgroup``: the last ``*.service``
    component; ``user`` when it is under a user manager (``user@UID.service``).
    A session or terminal scope (``*.scope``) is not a service: ``None``.
    """
    for line in _proc_text(proc / str(pid) / "cgroup").splitlines():
        hierarchy, _, path = line.partition("::")
        if hierarchy != "0" or not path:
            continue
        parts = [p for p in path.split("/") if p]
        if not parts or not parts[-1].endswith(".service") or parts[-1].startswith("user@"):
            return None  # a scope, or the user manager itself (not a unit of it)
        return parts[-1], any(p.startswith("user@") and p.endswith(".service") for p in parts[:-1])
    return None
