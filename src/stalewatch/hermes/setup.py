"""``stalewatch hermes setup``: automatic restarts of Hermes WebUI after ``hermes update``.

Finds the Hermes install the way the WebUI does (:mod:`.discovery`), then prints (or,
with ``--write``, installs) three files:

- a daemon configuration watching the Agent checkout, with a restart policy made of
  what ``hermes update`` leaves behind: its PID marker, its recovery markers in the
  checkout and the venv's root, a probe that imports ``run_agent`` with the Agent's
  Python, and ``systemctl --user --no-block restart`` of the WebUI's unit;
- a systemd user unit running that daemon beside the WebUI (never ``PartOf=`` it);
- a drop-in for the WebUI's unit telling it the daemon's socket
  (``STALEWATCH_SOCKET``), for the two-line accelerator's ``daemon=`` argument.

Then ``systemctl --user daemon-reload && systemctl --user enable --now
stalewatch-hermes.service`` is all that is left. Files are never overwritten
without ``--force``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import SetupError
from ..core.files import write_atomically
from ..core.version import __version__
from .discovery import agent_python, discover_agent_dir, hermes_home, webui_unit

__all__ = ["UNIT", "Install", "discover", "render", "write"]

UNIT = "stalewatch-hermes.service"
RUNTIME = "stalewatch-hermes"  # RuntimeDirectory=: the socket is %t/stalewatch-hermes/stalewatch.sock
UPDATE_MARKER = ".hermes-update-in-progress"
RECOVERY_MARKERS = (".update-incomplete", ".lazy-refresh-incomplete")
UPDATE_MAX_AGE = 1200  # Hermes' own: a marker older than 20 minutes is not a live update
ACCELERATOR_LINES = (
    "from stalewatch.hermes import accelerate",
    "accelerate(sys.modules[__name__], daemon=True)",
)
"""What ends the WebUI's ``api/agent_runtime.py`` with a daemon (``sys``: imported by every version)."""
_PROBE = "import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=5).close()"


@dataclass(frozen=True)
class Install:
    """A Hermes install, as found."""

    agent_dir: Path
    hermes_home: Path
    python: Path | None
    unit: str
    host: str
    port: int
    config: Path
    unit_dir: Path


def _config_home() -> Path:
    xdg = os.environ.get("XDG_CONFIG_HOME", "").strip()
    return Path(xdg).expanduser() if xdg else Path("~/.config").expanduser()


def _port() -> int:
    raw = os.environ.get("HERMES_WEBUI_PORT", "").strip()
    return int(raw) if raw.isdigit() and 0 < int(raw) < 65536 else 8787  # the WebUI's default


def discover(args: argparse.Namespace) -> Install:
    """The install the arguments and the environment point at.

    Raises:
        SetupError: no Agent checkout holding ``run_agent.py`` was found.
    """
    agent_dir = Path(args.agent_dir).expanduser().resolve() if args.agent_dir else discover_agent_dir()
    if agent_dir is None or not (agent_dir / "run_agent.py").is_file():
        raise SetupError(
            "no Hermes Agent checkout found (looked where Hermes WebUI looks: $HERMES_WEBUI_AGENT_DIR, "
            "$HERMES_HOME/hermes-agent, ~/.hermes/hermes-agent, ...); pass --agent-dir"
        )
    home = Path(args.hermes_home).expanduser() if args.hermes_home else hermes_home()
    if home is None:
        raise SetupError(
            "cannot tell Hermes' home (no $HERMES_HOME and no home directory); pass --hermes-home"
        )
    python = Path(args.python).expanduser() if args.python else agent_python(agent_dir)
    config_home = _config_home()
    return Install(
        agent_dir=agent_dir,
        hermes_home=home,
        python=python,
        unit=args.unit or webui_unit(),
        host=os.environ.get("HERMES_WEBUI_HOST", "").strip() or "127.0.0.1",
        port=_port(),
        config=Path(args.config).expanduser() if args.config else config_home / "stalewatch" / "hermes.toml",
        unit_dir=Path(args.unit_dir).expanduser() if args.unit_dir else config_home / "systemd" / "user",
    )


def _recovery_markers(install: Install) -> list[str]:
    # Hermes' updater leaves them in the checkout and in the root of the Agent's venv
    # (the directory holding venv/ or .venv/), which is usually the checkout itself.
    roots = [install.agent_dir]
    if install.python is not None and install.python.parent.name in ("bin", "Scripts"):
        venv = install.python.parent.parent
        if venv.name in ("venv", ".venv") and venv.parent not in roots:
            roots.append(venv.parent)
    return [str(root / name) for root in roots for name in RECOVERY_MARKERS]


def _toml(value: object) -> str:
    return json.dumps(value)  # strings and lists of strings: TOML reads JSON's form


def render(install: Install) -> dict[Path, str]:
    """The files to install, by path."""
    python = str(install.python) if install.python is not None else "python3"
    # systemctl waits for the restart (the daemon is not PartOf= the WebUI, so it is
    # not stopped with it); then the WebUI must answer, or, once it registers through
    # the accelerator, every process of it must run the new revision.
    url = f"http://{install.host}:{install.port}/"
    policy = {
        "action": ["systemctl", "--user", "restart", install.unit],
        "settle": 2.0,
        "update_marker": str(install.hermes_home / UPDATE_MARKER),
        "update_marker_max_age": UPDATE_MAX_AGE,
        "incomplete_markers": _recovery_markers(install),
        "verify": [python, "-c", "import run_agent"],
        "verify_timeout": 120,
        "confirm": [sys.executable, "-c", _PROBE, url],
        "confirm_timeout": 120,
        "action_timeout": 120,  # systemctl waits for the WebUI to stop and start
    }
    config = (
        f"# stalewatch for Hermes: restart {install.unit} after `hermes update`, safely.\n"
        f"# Written by `stalewatch hermes setup` ({__version__}) on {time.strftime('%Y-%m-%d')}.\n"
        '# Every key: README, "Automatic restart". Reloaded on `systemctl --user reload '
        f"{UNIT}`.\n"
        'log_level = "info"\n\n'
        "[[checkout]]\n"
        f"path = {_toml(str(install.agent_dir))}\n\n"
        "[checkout.restart]\n"
        + "".join(f"{key} = {_toml(value)}\n" for key, value in policy.items())
        + "# To stop `hermes update` from starting between the last check and the restart,\n"
        "# run it as `flock ~/.hermes/update.lock hermes update` and uncomment:\n"
        f"# lock = {_toml(str(install.hermes_home / 'update.lock'))}\n"
    )
    # This very installation of stalewatch, whichever way it was started.
    script = Path(sys.executable).with_name("stalewatch")
    command = str(script) if script.is_file() else f"{sys.executable} -m stalewatch"
    unit = (
        "# stalewatch for Hermes WebUI: restart it after `hermes update` (stalewatch hermes setup).\n"
        "[Unit]\n"
        f"Description=stalewatch: restart {install.unit} onto new Hermes Agent code\n"
        "# Started with the WebUI, before it; never PartOf= it: the daemon drives the\n"
        "# WebUI's restarts and must outlive them.\n"
        f"Before={install.unit}\n\n"
        "[Service]\n"
        "Type=notify\n"
        "NotifyAccess=main\n"
        f"ExecStart={command} daemon --config {install.config}\n"
        "ExecReload=/bin/kill -HUP $MAINPID\n"
        "Restart=on-failure\n"
        "RestartPreventExitStatus=2\n"
        "WatchdogSec=30\n"
        "TimeoutStopSec=5\n"
        f"RuntimeDirectory={RUNTIME}\n"
        "RuntimeDirectoryMode=0700\n"
        "UMask=0077\n\n"
        "[Install]\n"
        f"WantedBy={install.unit} default.target\n"
    )
    dropin = (
        "# Written by `stalewatch hermes setup`: where the WebUI finds the stalewatch daemon,\n"
        '# for `accelerate(sys.modules[__name__], daemon=os.environ.get("STALEWATCH_SOCKET"))`.\n'
        "[Service]\n"
        f"Environment=STALEWATCH_SOCKET=%t/{RUNTIME}/stalewatch.sock\n"
    )
    return {
        install.config: config,
        install.unit_dir / UNIT: unit,
        install.unit_dir / f"{install.unit}.d" / "stalewatch.conf": dropin,
    }


def write(files: dict[Path, str], *, force: bool) -> None:
    """Install ``files`` (never overwriting one that exists unless ``force``).

    Raises:
        SetupError: a file is in the way.
        OSError: a file cannot be written.
    """
    in_the_way = [path for path in files if os.path.lexists(path)]
    if in_the_way and not force:
        listed = ", ".join(str(p) for p in in_the_way)
        raise SetupError(f"not overwriting {listed} (pass --force to replace)")
    for path, text in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        # The configuration names commands the daemon runs: ours alone (the daemon
        # refuses one writable by others).
        write_atomically(path, text.encode(), 0o600 if path.suffix == ".toml" else 0o644)
