"""systemd, a user or a system unit: found from the server's control group or a unit file.

Setup writes the action ``systemctl [--user] try-restart UNIT`` (a stopped WebUI stays
stopped), its pid from ``systemctl show -p MainPID``, the daemon's service
``stalewatch-hermes.service``, and a drop-in for UNIT setting the socket (in the
daemon's ``RuntimeDirectory=``).
"""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

from ..discovery import Process, cgroup_unit, read_text, webui_unit
from .base import DAEMON_NAME, Found, Install, Service, Supervisor, assignments

_SYSTEM_UNITS = (Path("/etc/systemd/system"), Path("/usr/lib/systemd/system"), Path("/lib/systemd/system"))


class Systemd(Supervisor):
    """A unit of the user's manager (``user``) or of the system's."""

    dropin = True  # and the daemon's RuntimeDirectory= holds the socket

    def __init__(self, user: bool) -> None:
        self.user = user
        self.system = not user
        self.option = "systemd-user" if user else "systemd-system"
        self.scope = ["--user"] if user else []

    def process(self, server: Process, webui_dir: Path, hermes_home: Path | None) -> Found | None:
        unit = cgroup_unit(server.pid)
        if unit is None or unit[1] != self.user:
            return None
        scope = "user" if self.user else "system"
        return Found(self, unit[0], f"it runs in the {scope} service {unit[0]} (its control group)")

    def definitions(self, webui_dir: Path | None, home: Path | None) -> list[Found]:
        unit = webui_unit()
        user_units = [home / ".config" / "systemd" / "user"] if home is not None else []
        for file in (directory / unit for directory in (user_units if self.user else _SYSTEM_UNITS)):
            if file.is_file():
                variables, user = _unit_environment(file)
                return [Found(self, unit, f"unit file {file}", file, None, user, variables)]
        return []

    def named(self, args: argparse.Namespace, webui_dir: Path | None) -> Found:
        return Found(self, args.unit or webui_unit(), "--supervisor")

    def status(self, found: Found, uid: int) -> list[str]:
        return ["systemctl", *self.scope, "show", "--property=LoadState,ActiveState", found.name]

    def answered(self, found: Found, out: str, code: int) -> bool:
        return code == 0 and "LoadState=loaded" in out

    def socket(self, uid: int, hermes_home: Path) -> Path:
        return (Path(f"/run/user/{uid}") if self.user else Path("/run")) / DAEMON_NAME / "stalewatch.sock"

    def service(self, found: Found, install: Install) -> Service:
        directory = install.unit_dir or Path("/etc/systemd/system")
        unit = found.name
        owner = f"Group={found.user}\n" if not self.user and found.user else ""
        text = (
            "# stalewatch for Hermes WebUI: restart it after `hermes update` (stalewatch hermes setup).\n"
            "[Unit]\n"
            f"Description=stalewatch: restart {unit} onto new Hermes Agent code\n"
            "# Started with the WebUI, before it; never PartOf= it: the daemon drives the\n"
            "# WebUI's restarts and must outlive them.\n"
            f"Before={unit}\n\n"
            "[Service]\n"
            "Type=notify\n"
            "NotifyAccess=main\n"
            f"ExecStart={shlex.join(install.run)}\n"
            "ExecReload=/bin/kill -HUP $MAINPID\n"
            "Restart=on-failure\n"
            "RestartPreventExitStatus=2\n"
            "WatchdogSec=30\n"
            "TimeoutStopSec=5\n"
            f"{owner}"
            f"RuntimeDirectory={DAEMON_NAME}\n"
            # The WebUI connects: its user (same user), or its group (system scope).
            f"RuntimeDirectoryMode={'0700' if self.user or not found.user else '0750'}\n"
            "UMask=0077\n\n"
            "[Install]\n"
            f"WantedBy={unit} {'default.target' if self.user else 'multi-user.target'}\n"
        )
        dropin = (
            "# Written by `stalewatch hermes setup`: where the WebUI finds the stalewatch daemon,\n"
            "# for `accelerate(sys.modules[__name__], daemon=True)` (the daemon's `socket`).\n"
            "[Service]\n"
            f"Environment=STALEWATCH_SOCKET={install.socket}\n"
        )
        systemctl = shlex.join(["systemctl", *self.scope])
        return Service(
            ["systemctl", *self.scope, "try-restart", unit],
            {
                directory / f"{DAEMON_NAME}.service": (text, 0o644),
                directory / f"{unit}.d" / "stalewatch.conf": (dropin, 0o644),
            },
            [
                f"{systemctl} daemon-reload",
                f"{systemctl} enable --now {DAEMON_NAME}.service",
                f"{systemctl} restart {unit}",
            ],
            pid_command=["systemctl", *self.scope, "show", "--property=MainPID", "--value", unit],
        )


def _unit_environment(unit: Path) -> tuple[dict[str, str], str | None]:
    """``Environment=`` assignments and ``User=`` of a unit file (a bounded, plain read)."""
    variables: dict[str, str] = {}
    user = None
    for line in (read_text(unit) or "").splitlines():
        key, sep, value = line.strip().partition("=")
        if sep and key == "Environment":
            variables.update(assignments(value))
        elif sep and key == "User":
            user = value.strip() or None
    return variables, user


KINDS = (Systemd(user=True), Systemd(user=False))
