"""What ``stalewatch hermes setup`` writes for each supervisor: the restart action, a
service running the daemon under the same supervisor, and how the WebUI learns the
daemon's socket (one path, named on both sides).

- systemd (user or system): the action ``systemctl [--user] restart UNIT``; the
  daemon's service ``stalewatch-hermes.service``; a drop-in for UNIT sets the socket.
- launchd: ``launchctl kickstart -k gui/UID/LABEL``; a LaunchAgent
  ``com.stalewatch.hermes``; the WebUI's ``.env`` sets the socket.
- supervisord: ``supervisorctl -c CONF restart PROGRAM``; ``[program:stalewatch-hermes]``
  beside the WebUI's program; the WebUI's ``.env``.
- runit, s6: ``sv restart DIR``, ``s6-svc -r DIR``; a service directory beside DIR
  (linking it where the scanner looks is the user's step); the WebUI's ``.env``.
- ``ctl.sh``: ``ctl.sh restart``; no service (a ``nohup`` command to run); the
  WebUI's ``.env``.

The WebUI's ``.env`` (in its checkout) is read by every way it starts: ``start.sh``
sources it, ``bootstrap.py`` loads it, ``ctl.sh`` loads it.
"""

from __future__ import annotations

import plistlib
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from .supervisors import Found, Kind

__all__ = ["DAEMON_LABEL", "DAEMON_NAME", "Service", "service_for"]

DAEMON_NAME = "stalewatch-hermes"
"""The daemon's unit (``.service``), supervisord program and service directory."""
DAEMON_LABEL = "com.stalewatch.hermes"
"""The daemon's LaunchAgent label."""
RUNTIME = DAEMON_NAME  # systemd's RuntimeDirectory= holding the socket


@dataclass(frozen=True)
class Service:
    """What one supervisor needs.

    Attributes:
        action: the daemon's restart action (an argv).
        files: files to write, by path: (text, mode).
        env_file: the WebUI's ``.env``, to hold ``STALEWATCH_SOCKET`` (``None``: a drop-in does).
        then: the commands that start the daemon and restart the WebUI once (printed).
        notes: what the user must know (printed).
    """

    action: list[str]
    files: dict[Path, tuple[str, int]] = field(default_factory=dict)
    env_file: Path | None = None
    then: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def socket_for(found: Found, uid: int, hermes_home: Path) -> Path:
    """The socket both sides name: systemd's runtime directory, else one in Hermes' home."""
    if found.kind is Kind.SYSTEMD_USER:
        return Path(f"/run/user/{uid}") / RUNTIME / "stalewatch.sock"
    if found.kind is Kind.SYSTEMD_SYSTEM:
        return Path("/run") / RUNTIME / "stalewatch.sock"
    return hermes_home / "stalewatch" / "stalewatch.sock"


def service_for(
    found: Found,
    *,
    daemon: list[str],
    config: Path,
    socket: Path,
    webui_dir: Path | None,
    hermes_home: Path,
    home: Path | None,
    unit_dir: Path | None,
    uid: int,
) -> Service:
    """The files and commands for ``found`` (``daemon``: the argv running ``stalewatch``)."""
    run = [*daemon, "daemon", "--config", str(config)]
    env_file = webui_dir / ".env" if webui_dir is not None else None
    log = hermes_home / f"{DAEMON_NAME}.log"
    match found.kind:
        case Kind.SYSTEMD_USER | Kind.SYSTEMD_SYSTEM:
            return _systemd(found, run, socket, unit_dir)
        case Kind.LAUNCHD:
            agents = (home or Path("~").expanduser()) / "Library" / "LaunchAgents"
            plist = agents / f"{DAEMON_LABEL}.plist"
            data = {
                "Label": DAEMON_LABEL,
                "ProgramArguments": run,
                "RunAtLoad": True,
                "KeepAlive": True,
                "ProcessType": "Background",
                "StandardOutPath": str(log),
                "StandardErrorPath": str(log),
            }
            domain = f"gui/{uid}"
            return Service(
                ["launchctl", "kickstart", "-k", f"{domain}/{found.name}"],
                {plist: (plistlib.dumps(data).decode(), 0o644)},
                env_file,
                [
                    f"launchctl bootstrap {domain} {shlex.quote(str(plist))}",
                    f"launchctl kickstart -k {domain}/{found.name}",
                ],
            )
        case Kind.SUPERVISORD:
            return _supervisord(found, run, env_file, hermes_home, log)
        case Kind.RUNIT | Kind.S6:
            directory = Path(found.name).parent / DAEMON_NAME
            script = (
                "#!/bin/sh\n# stalewatch for Hermes WebUI (stalewatch hermes setup)\n"
                f"exec 2>&1\nexec {shlex.join(run)}\n"
            )
            runit = found.kind is Kind.RUNIT
            action = ["sv", "restart", found.name] if runit else ["s6-svc", "-r", found.name]
            scan = "runsvdir" if runit else "s6-svscan"
            return Service(
                action,
                {directory / "run": (script, 0o755)},
                env_file,
                [
                    f"ln -s {shlex.quote(str(directory))} <the directory {scan} scans, "
                    f"where {Path(found.name).name} is linked>",
                    shlex.join(action),
                ],
                [f"the daemon runs as whoever {scan} runs it as: the WebUI's user (chpst -u / s6-setuidgid)"],
            )
        case Kind.CTL:
            return Service(
                ["/bin/bash", found.name, "restart"],
                {},
                env_file,
                [
                    f"nohup {shlex.join(run)} >> {shlex.quote(str(log))} 2>&1 &",
                    f"/bin/bash {shlex.quote(found.name)} restart",
                ],
                [
                    "ctl.sh is not a supervisor: nothing restarts the daemon if it stops; start it at "
                    "login (e.g. from your crontab: @reboot) with the nohup line below"
                ],
            )
    raise AssertionError(found.kind)  # pragma: no cover - every kind is matched


def _systemd(found: Found, run: list[str], socket: Path, unit_dir: Path | None) -> Service:
    user = found.kind is Kind.SYSTEMD_USER
    scope = ["--user"] if user else []
    directory = unit_dir or Path("/etc/systemd/system")
    unit = found.name
    owner = f"Group={found.user}\n" if not user and found.user else ""
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
        f"ExecStart={shlex.join(run)}\n"
        "ExecReload=/bin/kill -HUP $MAINPID\n"
        "Restart=on-failure\n"
        "RestartPreventExitStatus=2\n"
        "WatchdogSec=30\n"
        "TimeoutStopSec=5\n"
        f"{owner}"
        f"RuntimeDirectory={RUNTIME}\n"
        # The WebUI connects: its user (same user), or its group (system scope).
        f"RuntimeDirectoryMode={'0700' if user or not found.user else '0750'}\n"
        "UMask=0077\n\n"
        "[Install]\n"
        f"WantedBy={unit} {'default.target' if user else 'multi-user.target'}\n"
    )
    dropin = (
        "# Written by `stalewatch hermes setup`: where the WebUI finds the stalewatch daemon,\n"
        "# for `accelerate(sys.modules[__name__], daemon=True)` (the daemon's `socket`).\n"
        "[Service]\n"
        f"Environment=STALEWATCH_SOCKET={socket}\n"
    )
    systemctl = shlex.join(["systemctl", *scope])
    return Service(
        ["systemctl", *scope, "restart", unit],
        {
            directory / f"{DAEMON_NAME}.service": (text, 0o644),
            directory / f"{unit}.d" / "stalewatch.conf": (dropin, 0o644),
        },
        None,
        [
            f"{systemctl} daemon-reload",
            f"{systemctl} enable --now {DAEMON_NAME}.service",
            f"{systemctl} restart {unit}",
        ],
    )


def _supervisord(
    found: Found, run: list[str], env_file: Path | None, hermes_home: Path, log: Path
) -> Service:
    config = found.config
    ctl = ["supervisorctl", *(["-c", str(config)] if config else [])]
    block = (
        "; stalewatch for Hermes WebUI: restart it after `hermes update` (stalewatch hermes setup).\n"
        f"[program:{DAEMON_NAME}]\n"
        f"command={shlex.join(run)}\n"
        f"directory={hermes_home}\n"
        + (f"user={found.user}\n" if found.user else "")
        + "autostart=true\nautorestart=true\nstartsecs=2\nstopsignal=TERM\nstopwaitsecs=10\n"
        "redirect_stderr=true\n"
        f"stdout_logfile={log}\n"
    )
    definition = found.definition
    included = definition is not None and config is not None and definition != config
    notes = []
    files: dict[Path, tuple[str, int]] = {}
    if included and definition is not None:
        files[definition.with_name(f"{DAEMON_NAME}{definition.suffix}")] = (block, 0o644)
    else:
        notes.append(
            f"the WebUI's program is in supervisord's own file ({config}): append the "
            f"[program:{DAEMON_NAME}] block printed below to it (setup never edits that file)"
        )
    notes.append(f"the daemon runs `{shlex.join(ctl)}`: its user must be allowed by [unix_http_server]")
    return Service(
        [*ctl, "restart", found.name],
        files,
        env_file,
        [f"{shlex.join(ctl)} update", f"{shlex.join(ctl)} restart {found.name}"],
        notes + ([] if included else [block]),
    )
