"""The ways of running the WebUI that need no reader of their own: systemd, launchd,
runit and s6, and ``ctl.sh`` (supervisord's configuration reader is :mod:`.supervisord`).

systemd, a user or a system unit: found from the server's control group or a unit file.
Setup writes the action ``systemctl [--user] try-restart UNIT`` (a stopped WebUI stays
stopped), its pid from ``systemctl show -p MainPID``, the daemon's service
``stalewatch-hermes.service``, and a drop-in for UNIT setting the socket (in the
daemon's ``RuntimeDirectory=``).

launchd (macOS): a LaunchAgent in ``~/Library/LaunchAgents`` naming the WebUI. Setup
writes the action ``launchctl kickstart -k gui/UID/LABEL``, the daemon's LaunchAgent
``com.stalewatch.hermes``, and the socket in the WebUI's ``.env``.

runit and s6: a service directory whose ``run`` script starts the WebUI. Setup writes
the action ``sv restart DIR`` or ``s6-svc -r DIR``, a service directory
``stalewatch-hermes`` beside DIR (linking it where the scanner looks is the user's
step), and the socket in the WebUI's ``.env``.

The WebUI's ``ctl.sh``: not a supervisor, a PID file (``start.sh`` by hand has nothing).
Setup writes the action ``ctl.sh restart``, no service (it prints a ``nohup`` command to
run), and the socket in the WebUI's ``.env``.
"""

from __future__ import annotations

import argparse
import os
import plistlib
import shlex
from pathlib import Path

from ...core.errors import SetupError
from ..discovery import MOST_BYTES, Process, cgroup_unit, read_bytes, read_text, resolved, webui_unit
from .base import DAEMON_NAME, Found, Install, Service, Supervisor, assignments, mentions_webui

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
    for key, sep, value in (line.strip().partition("=") for line in read_text(unit).splitlines()):
        if sep and key == "Environment":
            variables.update(assignments(value))
        elif sep and key == "User":
            user = value.strip() or None
    return variables, user


DAEMON_LABEL = "com.stalewatch.hermes"
"""The daemon's LaunchAgent label."""


class Launchd(Supervisor):
    option = "launchd"

    def definitions(self, webui_dir: Path | None, home: Path | None) -> list[Found]:
        found: list[Found] = []
        agents = home / "Library" / "LaunchAgents" if home is not None else Path("/nonexistent")
        label = os.environ.get("HERMES_WEBUI_LAUNCHD_LABEL", "").strip()
        for plist in sorted(agents.glob("*.plist")) if agents.is_dir() else []:
            entry = _launch_agent(plist)
            if entry is None or entry[0].startswith("com.stalewatch."):
                continue
            name, arguments, variables = entry
            if name == label or mentions_webui(" ".join(arguments), webui_dir):
                found.append(Found(self, name, f"LaunchAgent {plist}", plist, environ=variables))
        return found

    def named(self, args: argparse.Namespace, webui_dir: Path | None) -> Found:
        label = args.label or os.environ.get("HERMES_WEBUI_LAUNCHD_LABEL", "").strip()
        if not label:
            raise SetupError("--supervisor launchd: pass --label (the WebUI's LaunchAgent label)")
        return Found(self, label, "--supervisor")

    def status(self, found: Found, uid: int) -> list[str]:
        return ["launchctl", "print", f"gui/{uid}/{found.name}"]

    def arguments(self, definition: Path) -> list[str]:
        entry = _launch_agent(definition)
        return entry[1] if entry else []

    def service(self, found: Found, install: Install) -> Service:
        if install.home is None:
            raise SetupError("cannot tell where the LaunchAgents are (no home directory): set $HOME")
        agents = install.home / "Library" / "LaunchAgents"
        plist = agents / f"{DAEMON_LABEL}.plist"
        data: dict[str, object] = {"Label": DAEMON_LABEL, "ProgramArguments": install.run, "RunAtLoad": True}
        data |= {"KeepAlive": True, "ProcessType": "Background"}  # plistlib sorts the keys
        data |= {"StandardOutPath": str(install.log), "StandardErrorPath": str(install.log)}
        domain = f"gui/{os.getuid()}"
        return Service(
            ["launchctl", "kickstart", "-k", f"{domain}/{found.name}"],
            {plist: (plistlib.dumps(data).decode(), 0o644)},
            [
                f"launchctl bootstrap {domain} {shlex.quote(str(plist))}",
                f"launchctl kickstart -k {domain}/{found.name}",
            ],
        )


def _launch_agent(plist: Path) -> tuple[str, list[str], dict[str, str]] | None:
    """A LaunchAgent's label, program and arguments, and environment; ``None`` for a file that is
    not one (unreadable, not a regular file, past :data:`MOST_BYTES`, not a plist), or whose keys
    read here are not of launchd's types (strings; a list of them; a dict of them)."""
    try:  # a malformed (or unread: empty) plist raises no one type (ExpatError, binascii.Error...)
        data = plistlib.loads(read_bytes(plist, MOST_BYTES, whole=True))
    except Exception:
        return None
    if not isinstance(data, dict):
        return None
    label, program = data.get("Label"), data.get("Program")
    arguments, variables = data.get("ProgramArguments", []), data.get("EnvironmentVariables", {})
    if not (isinstance(label, str) and isinstance(arguments, list) and isinstance(variables, dict)):
        return None
    argv = ([] if program is None else [program]) + arguments
    if not all(isinstance(word, str) for word in [*argv, *variables, *variables.values()]):
        return None
    return label, argv, variables


_SCANNED = tuple(map(Path, ("/etc/sv", "/etc/service", "/var/service", "/etc/s6/sv", "/run/service")))


class ServiceDirectory(Supervisor):
    """runit's or s6's service directories: its option, its supervisor's and scanner's names, and
    the argv asking about, and restarting, a service directory."""

    def __init__(
        self, option: str, supervise: str, scanner: str, status: tuple[str, ...], restart: tuple[str, ...]
    ) -> None:
        self.option, self.supervise, self.scanner, self.s6 = option, supervise, scanner, option == "s6"
        self.ask, self.restart = status, restart

    def parent(self, parent: Process, server: Process, webui_dir: Path) -> Found | None:
        if parent.name != self.supervise or (cwd := parent.cwd) is None:
            return None
        return Found(self, str(cwd), f"{self.supervise} {parent.pid} supervises it", cwd / "run")

    def definitions(self, webui_dir: Path | None, home: Path | None) -> list[Found]:
        found = []
        for directory in (*_SCANNED, *([home / "service"] if home is not None else [])):
            for run in sorted(directory.glob("*/run")) if directory.is_dir() else []:
                s6 = "s6" in str(directory) or (run.parent / "type").exists()  # s6-rc's definition
                ours = s6 == self.s6 and not run.parent.name.startswith("stalewatch")
                if ours and mentions_webui(read_text(run), webui_dir):
                    found.append(Found(self, str(run.parent), f"service directory {run.parent}", run))
        return found

    def given(self, args: argparse.Namespace) -> Found | None:
        if (directory := args.service_dir) is None:
            return None
        return Found(self, str(resolved(directory, "--service-dir")), "--service-dir", directory / "run")

    def named(self, args: argparse.Namespace, webui_dir: Path | None) -> Found:
        raise SetupError(f"--supervisor {self.option}: pass --service-dir (the WebUI's service directory)")

    def status(self, found: Found, uid: int) -> list[str]:
        return [*self.ask, found.name]

    def service(self, found: Found, install: Install) -> Service:
        directory, action = Path(found.name).parent / DAEMON_NAME, [*self.restart, found.name]
        script = (
            "#!/bin/sh\n# stalewatch for Hermes WebUI (stalewatch hermes setup)\n"
            f"exec 2>&1\nexec {shlex.join(install.run)}\n"
        )
        link = f"<the directory {self.scanner} scans, where {Path(found.name).name} is linked>"
        runs = (
            f"the daemon runs as whoever {self.scanner} runs it as: "
            "the WebUI's user (chpst -u / s6-setuidgid)"
        )
        return Service(
            action,
            {directory / "run": (script, 0o755)},
            [f"ln -s {shlex.quote(str(directory))} {link}", shlex.join(action)],
            [runs],
        )


class Ctl(Supervisor):
    option = "ctl.sh"

    def process(self, server: Process, webui_dir: Path, hermes_home: Path | None) -> Found | None:
        default = (hermes_home or Path("/nonexistent")) / "webui.pid"
        pidfile = Path(server.environ.get("HERMES_WEBUI_PID_FILE", "") or default)
        try:
            recorded = int(read_text(pidfile).split()[0])
        except (ValueError, IndexError):
            return None
        if recorded != server.pid or not (webui_dir / "ctl.sh").is_file():
            return None
        return Found(self, str(webui_dir / "ctl.sh"), f"ctl.sh started it (pid {server.pid} in {pidfile})")

    def named(self, args: argparse.Namespace, webui_dir: Path | None) -> Found:
        if webui_dir is None:
            raise SetupError("--supervisor ctl.sh: pass --webui-dir")
        return Found(self, str(webui_dir / "ctl.sh"), "--supervisor")

    def status(self, found: Found, uid: int) -> list[str]:
        return ["/bin/bash", found.name, "status"]

    def service(self, found: Found, install: Install) -> Service:
        return Service(
            ["/bin/bash", found.name, "restart"],
            {},
            [
                f"nohup {shlex.join(install.run)} >> {shlex.quote(str(install.log))} 2>&1 &",
                f"/bin/bash {shlex.quote(found.name)} restart",
            ],
            [
                "ctl.sh is not a supervisor: nothing restarts the daemon if it stops; start it at "
                "login (e.g. from your crontab: @reboot) with the nohup line below"
            ],
        )
