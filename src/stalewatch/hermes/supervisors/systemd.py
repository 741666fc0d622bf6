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
_UNIT = """\
# stalewatch for Hermes WebUI: restart it after `hermes update` (stalewatch hermes setup).
[Unit]
Description=stalewatch: restart {unit} onto new Hermes Agent code
# Started with the WebUI, before it; never PartOf= it: the daemon drives the
# WebUI's restarts and must outlive them.
Before={unit}

[Service]
Type=notify
NotifyAccess=main
ExecStart={run}
ExecReload=/bin/kill -HUP $MAINPID
Restart=on-failure
RestartPreventExitStatus=2
WatchdogSec=30
TimeoutStopSec=5
{owner}RuntimeDirectory={name}
RuntimeDirectoryMode={mode}
UMask=0077

[Install]
WantedBy={unit} {target}
"""
_DROPIN = """\
# Written by `stalewatch hermes setup`: where the WebUI finds the stalewatch daemon,
# for `accelerate(sys.modules[__name__], daemon=True)` (the daemon's `socket`).
[Service]
Environment=STALEWATCH_SOCKET={socket}
"""


class Systemd(Supervisor):
    """A unit of the user's manager (``user``) or of the system's."""

    dropin = True  # and the daemon's RuntimeDirectory= holds the socket

    def __init__(self, user: bool) -> None:
        self.user, self.system = user, not user
        self.option = "systemd-user" if user else "systemd-system"
        self.systemctl = ["systemctl", "--user"] if user else ["systemctl"]

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
        return [*self.systemctl, "show", "--property=LoadState,ActiveState", found.name]

    def answered(self, found: Found, out: str, code: int) -> bool:
        return code == 0 and "LoadState=loaded" in out

    def socket(self, uid: int, hermes_home: Path) -> Path:
        return (Path(f"/run/user/{uid}") if self.user else Path("/run")) / DAEMON_NAME / "stalewatch.sock"

    def service(self, found: Found, install: Install) -> Service:
        directory, unit = install.unit_dir or _SYSTEM_UNITS[0], found.name
        owner = f"Group={found.user}\n" if not self.user and found.user else ""
        target, mode = "default.target" if self.user else "multi-user.target", "0750" if owner else "0700"
        text = _UNIT.format(
            unit=unit, run=shlex.join(install.run), owner=owner, mode=mode, target=target, name=DAEMON_NAME
        )
        then = ("daemon-reload", f"enable --now {DAEMON_NAME}.service", f"restart {unit}")
        return Service(
            [*self.systemctl, "try-restart", unit],
            {
                directory / f"{DAEMON_NAME}.service": (text, 0o644),
                directory / f"{unit}.d" / "stalewatch.conf": (_DROPIN.format(socket=install.socket), 0o644),
            },
            [f"{shlex.join(self.systemctl)} {verb}" for verb in then],
            pid_command=[*self.systemctl, "show", "--property=MainPID", "--value", unit],
        )


def _unit_environment(unit: Path) -> tuple[dict[str, str], str | None]:
    """``Environment=`` assignments and ``User=`` of a unit file (a bounded, plain read)."""
    variables: dict[str, str] = {}
    user = None
    for key, sep, value in (line.strip().partition("=") for line in (read_text(unit) or "").splitlines()):
        if sep and key == "Environment":
            variables.update(assignments(value))
        elif sep and key == "User":
            user = value.strip() or None
    return variables, user


KINDS = (Systemd(user=True), Systemd(user=False))
