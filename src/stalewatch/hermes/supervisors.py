"""Which supervisor runs Hermes WebUI, found rather than guessed, and whether it answers.

The WebUI documents five ways to run it (its docs/supervisor.md and ``ctl.sh``): a
systemd unit (user or system), a launchd LaunchAgent (macOS), a supervisord program,
a runit or s6 service directory, and ``ctl.sh`` (a PID file; ``start.sh`` by hand has
no one to restart it). :func:`from_process` reads it off the running server (Linux:
its nearest supervising ancestor, else its systemd service from its control group,
else the PID file ``ctl.sh`` keeps); :func:`from_definitions` reads the definitions
on disk (every platform; the WebUI may be stopped); :func:`answers` asks the
supervisor itself before anything is written.
"""

from __future__ import annotations

import configparser
import enum
import os
import plistlib
import shlex
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from .discovery import WEBUI_UNIT, looks_like_webui
from .processes import Process, ancestors, cgroup_unit

__all__ = ["Found", "Kind", "answers", "from_definitions", "from_process"]

_TIMEOUT = 15


class Kind(enum.StrEnum):
    """A way of running the WebUI (``--supervisor``)."""

    SYSTEMD_USER = "systemd-user"
    SYSTEMD_SYSTEM = "systemd-system"
    LAUNCHD = "launchd"
    SUPERVISORD = "supervisord"
    RUNIT = "runit"
    S6 = "s6"
    CTL = "ctl.sh"


@dataclass(frozen=True)
class Found:
    """A supervisor running (or defined to run) the WebUI.

    Attributes:
        kind: which one.
        name: the unit, LaunchAgent label, supervisord program, or service directory.
        evidence: how it was found, for the user to read.
        definition: the file defining it (unit, plist, supervisord file, run script).
        config: supervisord's own configuration (for ``supervisorctl -c``).
        user: the user it runs the WebUI as, where the definition says.
        environ: the environment the definition gives the WebUI.
        webui_dir: the WebUI checkout it runs, where known.
    """

    kind: Kind
    name: str
    evidence: str
    definition: Path | None = None
    config: Path | None = None
    user: str | None = None
    environ: dict[str, str] = field(default_factory=dict)
    webui_dir: Path | None = None


# -- from the running server (Linux) ------------------------------------------------------


def from_process(server: Process, webui_dir: Path, hermes_home: Path | None) -> Found | None:
    """Who runs ``server``: its nearest supervising ancestor, its service, or ``ctl.sh``."""
    for parent in ancestors(server.pid):
        name = parent.name
        if name == "supervisord" or any(a.endswith("/supervisord") for a in parent.argv[:2]):
            return _supervisord_parent(parent, server, webui_dir)
        if name == "runsv" and parent.cwd is not None:
            return Found(Kind.RUNIT, str(parent.cwd), f"runsv {parent.pid} supervises it", parent.cwd / "run")
        if name == "s6-supervise" and parent.cwd is not None:
            return Found(
                Kind.S6, str(parent.cwd), f"s6-supervise {parent.pid} supervises it", parent.cwd / "run"
            )
    unit = cgroup_unit(server.pid)
    if unit is not None:
        name, user = unit
        kind = Kind.SYSTEMD_USER if user else Kind.SYSTEMD_SYSTEM
        scope = "user" if user else "system"
        return Found(kind, name, f"it runs in the {scope} service {name} (its control group)")
    pidfile = Path(
        server.environ.get("HERMES_WEBUI_PID_FILE", "") or (hermes_home or Path("/nonexistent")) / "webui.pid"
    )
    try:
        recorded = int(pidfile.read_text(encoding="ascii", errors="replace").split()[0])
    except (OSError, ValueError, IndexError):
        recorded = None
    if recorded == server.pid and (webui_dir / "ctl.sh").is_file():
        return Found(
            Kind.CTL, str(webui_dir / "ctl.sh"), f"ctl.sh started it (pid {server.pid} in {pidfile})"
        )
    return None


def _supervisord_parent(parent: Process, server: Process, webui_dir: Path) -> Found:
    config = _supervisord_config(parent)
    program = server.environ.get("SUPERVISOR_PROCESS_NAME", "")
    defined = _supervisord_programs(config) if config is not None else []
    match = next(((p, f, e, u) for p, f, e, u in defined if p == program), None)
    if match is None:
        match = next(
            ((p, f, e, u) for p, f, e, u in defined if str(webui_dir) in f.read_text(errors="replace")), None
        )
    definition = match[1] if match else config
    return Found(
        Kind.SUPERVISORD,
        program or (match[0] if match else "hermes-webui"),
        f"supervisord {parent.pid} runs it (program {program or '?'})",
        definition,
        config,
        match[3] if match else None,
        match[2] if match else {},
    )


def _supervisord_config(parent: Process) -> Path | None:
    argv = list(parent.argv)
    for flag in ("-c", "--configuration"):
        if flag in argv[:-1]:
            given = Path(argv[argv.index(flag) + 1])
            return given if given.is_absolute() or parent.cwd is None else parent.cwd / given
    for arg in argv:
        if arg.startswith("--configuration="):
            return Path(arg.split("=", 1)[1])
    for default in ("/etc/supervisor/supervisord.conf", "/etc/supervisord.conf"):
        if Path(default).is_file():
            return Path(default)
    return None


# -- from definitions on disk -------------------------------------------------------------


def _mentions_webui(text: str, webui_dir: Path | None) -> bool:
    if webui_dir is not None:
        return str(webui_dir) in text
    return "hermes-webui" in text or ("start.sh" in text and "hermes" in text)


def _supervisord_programs(config: Path) -> list[tuple[str, Path, dict[str, str], str | None]]:
    """``(program, file, environment, user)`` of every program the configuration defines."""
    files = [config]
    parser = configparser.RawConfigParser(strict=False, interpolation=None)
    try:
        parser.read(config)
        include = parser.get("include", "files", fallback="")
    except (configparser.Error, OSError, UnicodeDecodeError):
        return []
    for pattern in include.split():
        base = config.parent
        files += sorted(
            base.glob(pattern) if not Path(pattern).is_absolute() else Path("/").glob(pattern[1:])
        )
    found = []
    for file in files:
        section_parser = configparser.RawConfigParser(strict=False, interpolation=None)
        try:
            section_parser.read(file)
        except (configparser.Error, OSError, UnicodeDecodeError):
            continue
        for section in section_parser.sections():
            if section.startswith("program:"):
                environ = _supervisord_environment(section_parser.get(section, "environment", fallback=""))
                user = section_parser.get(section, "user", fallback=None)
                found.append((section.split(":", 1)[1], file, environ, user))
    return found


def _supervisord_environment(raw: str) -> dict[str, str]:
    environ = {}
    for part in shlex.split(raw.replace(",", " "), posix=True) if raw else []:
        key, sep, value = part.partition("=")
        if sep:
            environ[key.strip()] = value
    return environ


def supervisord_webui(config: Path, webui_dir: Path | None) -> list[Found]:
    """The programs of supervisord's ``config`` running the WebUI, in it or in a file it
    includes (``[include] files =``: globs relative to its directory)."""
    found = []
    for program, file, variables, user in _supervisord_programs(config):
        text = file.read_text(errors="replace") if file.is_file() else ""
        if program == "hermes-webui" or _mentions_webui(text, webui_dir):
            evidence = f"supervisord program {program} in {file}"
            found.append(Found(Kind.SUPERVISORD, program, evidence, file, config, user, variables))
    return found


def from_definitions(webui_dir: Path | None, home: Path | None, environ: Mapping[str, str]) -> list[Found]:
    """Every definition on disk that runs the WebUI (several: ask which with ``--supervisor``)."""
    found: list[Found] = []
    unit = environ.get("HERMES_WEBUI_SYSTEMD_UNIT", "").strip() or WEBUI_UNIT
    unit = unit if "." in unit else f"{unit}.service"
    user_units = [home / ".config" / "systemd" / "user"] if home is not None else []
    for kind, directories in (
        (Kind.SYSTEMD_USER, user_units),
        (
            Kind.SYSTEMD_SYSTEM,
            [Path("/etc/systemd/system"), Path("/usr/lib/systemd/system"), Path("/lib/systemd/system")],
        ),
    ):
        for directory in directories:
            if (directory / unit).is_file():
                variables, user = _unit_environment(directory / unit)
                evidence = f"unit file {directory / unit}"
                found.append(Found(kind, unit, evidence, directory / unit, None, user, variables))
                break
    if home is not None:
        agents = home / "Library" / "LaunchAgents"
        label = environ.get("HERMES_WEBUI_LAUNCHD_LABEL", "").strip()
        for plist in sorted(agents.glob("*.plist")) if agents.is_dir() else []:
            entry = _launch_agent(plist)
            if entry is None or entry[0].startswith("com.stalewatch."):
                continue
            name, arguments, variables = entry
            if name == label or _mentions_webui(" ".join(arguments), webui_dir):
                found.append(Found(Kind.LAUNCHD, name, f"LaunchAgent {plist}", plist, environ=variables))
    for config in (Path("/etc/supervisor/supervisord.conf"), Path("/etc/supervisord.conf")):
        if config.is_file():
            found += supervisord_webui(config, webui_dir)
            break
    scan = [
        Path("/etc/sv"),
        Path("/etc/service"),
        Path("/var/service"),
        Path("/etc/s6/sv"),
        Path("/run/service"),
    ]
    for directory in scan + ([home / "service"] if home is not None else []):
        for run in sorted(directory.glob("*/run")) if directory.is_dir() else []:
            try:
                text = run.read_text(errors="replace")[:65536]
            except OSError:
                continue
            if _mentions_webui(text, webui_dir) and not run.parent.name.startswith("stalewatch"):
                kind = Kind.S6 if "s6" in str(directory) or (run.parent / "type").exists() else Kind.RUNIT
                found.append(Found(kind, str(run.parent), f"service directory {run.parent}", run))
    return found


def _unit_environment(unit: Path) -> tuple[dict[str, str], str | None]:
    """``Environment=`` assignments and ``User=`` of a unit file (a bounded, plain read)."""
    variables: dict[str, str] = {}
    user = None
    try:
        text = unit.read_text(errors="replace")[:65536]
    except OSError:
        return variables, user
    for line in text.splitlines():
        key, sep, value = line.strip().partition("=")
        if sep and key == "Environment":
            try:
                words = shlex.split(value)
            except ValueError:
                continue
            for word in words:
                name, has, setting = word.partition("=")
                if has:
                    variables[name] = setting
        elif sep and key == "User":
            user = value.strip() or None
    return variables, user


def _launch_agent(plist: Path) -> tuple[str, list[str], dict[str, str]] | None:
    try:
        with plist.open("rb") as file:
            data = plistlib.load(file)
    except (OSError, plistlib.InvalidFileException, ValueError):
        return None
    label = data.get("Label") if isinstance(data, dict) else None
    if not isinstance(label, str):
        return None
    arguments = [str(a) for a in data.get("ProgramArguments", []) if isinstance(a, str)]
    program = data.get("Program")
    if isinstance(program, str):
        arguments.insert(0, program)
    variables = data.get("EnvironmentVariables") or {}
    if not isinstance(variables, dict):
        variables = {}
    return label, arguments, {str(k): str(v) for k, v in variables.items()}


def webui_dir_of(found: Found) -> Path | None:
    """The WebUI checkout a definition runs (its ``start.sh`` or ``directory=``), if it says."""
    if found.definition is None:
        return None
    try:
        text = found.definition.read_bytes()[:65536]
    except OSError:
        return None
    if found.kind is Kind.LAUNCHD:
        entry = _launch_agent(found.definition)
        words = entry[1] if entry else []
    else:
        words = text.decode("utf-8", "replace").replace("=", " ").split()
    for word in words:
        path = Path(word.strip("\"'"))
        for candidate in (path.parent, path):
            if candidate.is_absolute() and looks_like_webui(candidate):
                return candidate
    return None


# -- does it answer? ------------------------------------------------------------------------


def answers(found: Found, uid: int | None = None) -> tuple[bool, str]:
    """Ask the supervisor about the WebUI's service: ``(answered, what it said)``."""
    uid = os.getuid() if uid is None else uid
    command = {
        Kind.SYSTEMD_USER: ["systemctl", "--user", "show", "--property=LoadState,ActiveState", found.name],
        Kind.SYSTEMD_SYSTEM: ["systemctl", "show", "--property=LoadState,ActiveState", found.name],
        Kind.LAUNCHD: ["launchctl", "print", f"gui/{uid}/{found.name}"],
        Kind.SUPERVISORD: [
            "supervisorctl",
            *(["-c", str(found.config)] if found.config else []),
            "status",
            found.name,
        ],
        Kind.RUNIT: ["sv", "status", found.name],
        Kind.S6: ["s6-svstat", found.name],
        Kind.CTL: ["/bin/bash", found.name, "status"],
    }[found.kind]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=_TIMEOUT, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"`{shlex.join(command)}`: {exc}"
    said = (done.stdout + done.stderr).strip().replace("\n", "; ")[:300]
    ok = done.returncode == 0
    if found.kind in (Kind.SYSTEMD_USER, Kind.SYSTEMD_SYSTEM):
        ok = ok and "LoadState=loaded" in done.stdout
    elif found.kind is Kind.SUPERVISORD:
        # supervisorctl exits 3 for a program not running; it answered all the same.
        ok = found.name in done.stdout and any(state in done.stdout for state in ("RUNNING", "STARTING"))
    return ok, f"`{shlex.join(command)}`: {said or f'exit {done.returncode}'}"
