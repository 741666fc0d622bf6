"""``stalewatch hermes setup``: automatic restarts of Hermes WebUI after ``hermes update``.

It asks before it guesses. The running WebUI is found first (Linux: its server
process), and its environment is what the WebUI resolved: its port, host, Hermes
home and Agent checkout. Which supervisor runs it comes from the process (its nearest
supervising ancestor, its systemd service, ``ctl.sh``'s PID file) or, when it cannot
be read, from the definitions on disk (:mod:`.supervisors`). When two answers are
possible, or the port is known from nowhere, setup stops (exit 2) and names the flag
that decides (``--supervisor``, ``--port``, ``--webui-dir``). Before writing, it
checks that the supervisor answers and that the WebUI answers ``/health`` on the port
the daemon will probe (``--no-check`` skips both, for a WebUI that is not running).

It prints (or, with ``--write``, installs) a daemon configuration watching the Agent
checkout, with a restart policy made of what ``hermes update`` leaves behind (its PID
marker, its recovery markers in the checkout and the venv's root, a probe that imports
``run_agent`` with the Agent's Python, the supervisor's restart of the WebUI, and the
WebUI's ``/health`` as the confirmation), a service running the daemon under the same
supervisor, and the socket path for the WebUI (each supervisor's file in :mod:`.supervisors`). Files are never
overwritten without ``--force``; directories it creates are 0700, whatever the umask.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import sys
import time
import urllib.request
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from .. import __version__
from ..core.errors import SetupError
from ..core.files import write_atomically
from . import discovery, supervisors
from .supervisors.base import Install

ACCELERATOR_LINES = (
    "from stalewatch.hermes import accelerate",
    "accelerate(sys.modules[__name__], daemon=True)",
)
"""What ends the WebUI's ``api/agent_runtime.py`` with a daemon (``sys``: imported by every version)."""
ACCELERATOR_FIGURE = "14.05 ms -> 43.40 µs per call"
"""The WebUI's own check in its own process, before and after the lines: the one figure
docs/hermes.md and docs/benchmarks.md give, with its settings and command (a test keeps
the three equal)."""
SOCKET_LIMIT = 100  # sun_path holds 104 (macOS) to 108 (Linux) bytes
_PROBE = (  # one line on failure, never a traceback: the daemon's reason quotes its last line
    "import sys, urllib.request\n"
    "try:\n    urllib.request.urlopen(sys.argv[1], timeout=5).close()\n"
    "except Exception as exc:\n    sys.exit(f'{sys.argv[1]}: {exc}')\n"
)


def _config_home(home: Path | None) -> Path:
    xdg = os.environ.get("XDG_CONFIG_HOME", "").strip()
    with contextlib.suppress(RuntimeError):  # ~user of no user known here: asked, below
        if xdg or home is not None:
            return Path(xdg).expanduser() if xdg else (home or Path()) / ".config"
    why = f"$XDG_CONFIG_HOME is {xdg!r}" if xdg else "no home directory"
    raise SetupError(f"cannot tell where to write ({why}): pass --config")


def discover(args: argparse.Namespace) -> Install:
    """The install the arguments, the running WebUI and the environment point at.

    Raises:
        SetupError: something is unknown or ambiguous (the message names the flag that
            decides), or a check before writing failed.
    """
    home = discovery.user_home()
    webui_dir = discovery.resolved(args.webui_dir, "--webui-dir") if args.webui_dir else None
    running = discovery.running_webui(webui_dir, args.port)
    env = running[0].environ if running is not None else dict(os.environ)
    webui_dir = webui_dir or (running[1] if running else None)
    hermes_home = args.hermes_home or discovery.hermes_home(env)
    if hermes_home is None:
        raise SetupError(
            "cannot tell Hermes' home (no $HERMES_HOME and no home directory); pass --hermes-home"
        )
    supervisor = supervisors.which(args, running, webui_dir, home, hermes_home)
    webui_dir = webui_dir or supervisors.webui_dir_of(supervisor)
    given = discovery.resolved(args.agent_dir, "--agent-dir") if args.agent_dir else None
    agent_dir = given or discovery.discover_agent_dir(webui_dir, env)
    if agent_dir is None or not (agent_dir / "run_agent.py").is_file():
        looked = ", ".join(str(p) for p in discovery.agent_candidates(webui_dir, env)[:6])
        raise SetupError(
            f"no Hermes Agent checkout found (looked where Hermes WebUI looks: {looked}, ...); "
            "pass --agent-dir"
            + ("" if webui_dir else " (or --webui-dir: the WebUI also looks beside its own checkout)")
        )
    dotenv = discovery.read_dotenv(webui_dir / ".env") if webui_dir else {}
    sources = [("$HERMES_WEBUI_PORT", os.environ), (str(supervisor.definition), supervisor.environ)]
    port, port_from = (
        (args.port, "--port") if args.port else _port(running, [*sources, (f"{webui_dir}/.env", dotenv)])
    )
    host = (env.get("HERMES_WEBUI_HOST") or dotenv.get("HERMES_WEBUI_HOST") or "").strip()
    host = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host  # noqa: S104 - a wildcard is probed on loopback
    python = args.python or discovery.agent_python(agent_dir, env)
    system = supervisor.kind.system  # the daemon runs as root: its configuration is in /etc
    config = args.config or (Path("/etc") if system else _config_home(home)) / "stalewatch" / "hermes.toml"
    socket = args.socket or supervisor.kind.socket(os.getuid(), hermes_home)
    if len(os.fsencode(socket)) > SOCKET_LIMIT:
        raise SetupError(f"the socket path {socket} is too long for a Unix socket: pass --socket")
    unit_dir = args.unit_dir or (None if system else _config_home(home) / "systemd" / "user")
    script = Path(sys.executable).with_name("stalewatch")  # this very installation, however started
    run = [str(script)] if script.is_file() else [sys.executable, "-m", "stalewatch"]
    run += ["daemon", "--config", str(config)]
    named = [agent_dir, hermes_home, python, webui_dir, host, config, socket, unit_dir, *run]
    for value in map(str, [*named, supervisor.name]):
        # A path of the machine, or a value of the environment, may be bytes UTF-8 cannot say, or
        # hold a line break (it would start a line of its own in a .env, a unit, a program).
        if any(c < " " or c == "\x7f" or "\ud800" <= c <= "\udfff" for c in value):
            raise SetupError(
                f"{value!r} is not UTF-8 without control characters: the files setup writes cannot "
                "name it (rename it, or pass the flag naming another)"
            )
    install = Install(
        agent_dir, hermes_home, home, python, webui_dir, host, port, supervisor, config, socket, unit_dir, run
    )
    return install if args.no_check else _check(install, port_from)


def _port(
    running: tuple[discovery.Process, Path] | None, sources: list[tuple[str, Mapping[str, str]]]
) -> tuple[int, str]:
    """The WebUI's port and where it was found: the running server's, else the first of ``sources``."""
    if running is not None:
        sources = [("the running WebUI's port", {"HERMES_WEBUI_PORT": discovery.port_of(running[0])})]
    given = [
        (where, values["HERMES_WEBUI_PORT"]) for where, values in sources if values.get("HERMES_WEBUI_PORT")
    ]
    if not given:
        raise SetupError(
            "the WebUI's port is not known (it is not running here, and neither $HERMES_WEBUI_PORT, its "
            "service definition nor its .env names one): pass --port"
        )
    source, raw = given[0]
    digits = raw.strip()  # ASCII digits only: int() takes "²" (refusing it) and 5000 digits (refusing them)
    port = int(digits) if digits.isascii() and digits.isdigit() and len(digits) < 10 else 0
    if not 0 < port < 65536:
        raise SetupError(f"{source} is not a port ({raw[:20]!r}): pass --port")
    return port, source if running is None else f"the running WebUI (pid {running[0].pid})"


def _check(install: Install, port_from: str) -> Install:
    """``install``, once the supervisor and the WebUI answered (SetupError if either is silent)."""
    said = supervisors.answers(install.supervisor)
    try:
        with urllib.request.urlopen(install.health, timeout=5) as answer:  # noqa: S310 - http on loopback
            status = answer.status
    except (OSError, ValueError, http.client.HTTPException) as exc:  # urllib's URLError is an OSError
        # Something else than HTTP on the port (BadStatusLine, LineTooLong...) is as silent.
        reason = f"not HTTP ({exc!r:.200})" if isinstance(exc, http.client.HTTPException) else exc
        raise SetupError(
            f"the WebUI does not answer {install.health} (port from {port_from}): {reason}; "
            "pass --port (or --no-check to write anyway)"
        ) from None
    return replace(install, checked=(said, f"{install.health}: {status}"))


def _recovery_markers(install: Install) -> list[str]:
    # Hermes' updater leaves them in the checkout and in the root of the Agent's venv
    # (the directory holding venv/ or .venv/), which is usually the checkout itself.
    roots = [install.agent_dir]
    python = install.python or Path()
    if python.parent.name in ("bin", "Scripts") and python.parent.parent.name in ("venv", ".venv"):
        roots.append(python.parent.parent.parent)
    names = (".update-incomplete", ".lazy-refresh-incomplete")
    return [str(root / name) for root in dict.fromkeys(roots) for name in names]


def render(install: Install) -> dict[Path, tuple[str, int]]:
    """The files to install, by path: (text, mode)."""
    verify = [str(install.python or "python3"), "-c", "import run_agent"]
    user = install.supervisor.user
    if install.supervisor.kind.system and user and user != "root":
        # A system unit's daemon runs as root: the Agent's code is imported as the WebUI's
        # user, never as root (the checkout is that user's to write).
        verify = ["runuser", "-u", user, "--", *verify]
    toml = json.dumps  # strings and lists of strings: TOML reads JSON's form
    policy = {
        "action": install.service.action,
        "settle": 2.0,
        "update_marker": str(install.hermes_home / ".hermes-update-in-progress"),
        "update_marker_max_age": 1200,  # Hermes' own: a marker older than 20 minutes is not a live update
        "incomplete_markers": _recovery_markers(install),
        "verify": verify,
        "verify_timeout": 120,
        # The WebUI must answer /health on the port checked at setup, and every process
        # of it that registered (the accelerator's daemon=True) must run the new revision.
        "confirm": [sys.executable, "-c", _PROBE, install.health],
        "confirm_timeout": 120,
        "action_timeout": 120,  # the supervisor waits for the WebUI to stop and start
    }
    if install.service.pid_command is not None:
        # What a WebUI that has not registered runs (its start against the reflog), and
        # a stopped one is never started (R10).
        policy["pid_command"] = install.service.pid_command
    config = (
        f"# stalewatch for Hermes: restart Hermes WebUI ({install.supervisor.kind.option}: "
        f"{install.supervisor.name}) after `hermes update`, safely.\n"
        f"# Written by `stalewatch hermes setup` ({__version__}) on {time.strftime('%Y-%m-%d')}.\n"
        "# Every key: docs/restart.md. Reloaded on SIGHUP.\n"
        f"socket = {toml(str(install.socket))}  # the WebUI's STALEWATCH_SOCKET names the same path\n"
        'log_level = "info"\n\n'
        "[[checkout]]\n"
        f"path = {toml(str(install.agent_dir))}\n\n"
        "[checkout.restart]\n"
        + "".join(f"{key} = {toml(value)}\n" for key, value in policy.items())
        + "# To stop `hermes update` from starting between the last check and the restart,\n"
        "# run it as `flock ~/.hermes/update.lock hermes update` and uncomment:\n"
        f"# lock = {toml(str(install.hermes_home / 'update.lock'))}\n"
    )
    files = {install.config: (config, 0o600), **install.service.files}
    if install.webui_dir is not None and not install.supervisor.kind.dropin:
        # The WebUI's .env, read by every way it starts (start.sh, bootstrap.py, ctl.sh).
        env = install.webui_dir / ".env"
        files[env] = (_env_text(env, install.socket), 0o600)
    return files


def _env_text(path: Path, socket: Path) -> str:
    """The WebUI's ``.env`` with ``STALEWATCH_SOCKET`` set (its other lines kept)."""
    # The file is rewritten with its other lines kept, so it is read whole and exactly;
    # what cannot be kept so is the user's to fix, said as such (never a traceback).
    try:  # a regular file only: a FIFO's open would wait for a writer
        with discovery.open_regular(path) as file:
            raw = file.read(discovery.MOST_BYTES + 1)
    except FileNotFoundError:
        raw = b""
    except OSError as error:
        raise SetupError(f"cannot read {path}: {error.strerror or error}") from None
    if len(raw) > discovery.MOST_BYTES:
        raise SetupError(f"{path} is over {discovery.MOST_BYTES // 1024} KiB: not a .env setup rewrites")
    try:
        lines = raw.decode("utf-8").splitlines()
    except UnicodeDecodeError:
        raise SetupError(f"{path} is not UTF-8: setup would change its other lines; fix it") from None
    kept = [
        line
        for line in lines
        if line.strip().removeprefix("export ").split("=", 1)[0].strip() != "STALEWATCH_SOCKET"
    ]
    ours = ["# the stalewatch daemon (stalewatch hermes setup)", f"STALEWATCH_SOCKET={socket}", ""]
    return "\n".join([*kept, *ours])


def write(files: dict[Path, tuple[str, int]], *, force: bool) -> None:
    """Install ``files`` (never overwriting one that exists unless ``force``).

    The WebUI's ``.env`` is the exception: its lines are kept and ``STALEWATCH_SOCKET``
    set (replacing another value needs ``force``). Directories are created 0700 under
    any umask; a file keeps the mode it is given.

    Raises:
        SetupError: a file is in the way.
        OSError: a file cannot be written.
    """
    in_the_way = [path for path, (text, _mode) in files.items() if _in_the_way(path, text)]
    if in_the_way and not force:
        listed = ", ".join(str(p) for p in in_the_way)
        raise SetupError(f"not overwriting {listed} (pass --force to replace)")
    for path, (text, mode) in files.items():
        make_private_dirs(path.parent)
        own = path.name == ".env" and path.exists()  # the user's own file keeps its mode
        write_atomically(path, text.encode(), path.stat().st_mode & 0o777 if own else mode)


def _in_the_way(path: Path, text: str) -> bool:
    if path.name != ".env" or not path.exists():
        return os.path.lexists(path)
    socket = discovery.read_dotenv(path).get("STALEWATCH_SOCKET")  # set to another: asked
    return socket not in (None, discovery.read_dotenv_text(text).get("STALEWATCH_SOCKET"))


def make_private_dirs(directory: Path) -> None:
    """Create ``directory`` and its missing parents with mode 0700, whatever the umask.

    Directories that exist are left as they are. The mode is set on the descriptor of
    the directory just made (never through a path a link could replace), and the
    process's umask is never changed (another thread may be creating files).
    """
    for path in reversed([p for p in (directory, *directory.parents) if not os.path.lexists(p)]):
        try:
            os.mkdir(path, 0o700)  # noqa: PTH102 - the mode is set on its descriptor below
        except FileExistsError:
            continue
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            os.fchmod(fd, 0o700)  # mkdir's mode went through the umask
        finally:
            os.close(fd)
