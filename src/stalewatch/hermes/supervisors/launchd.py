"""launchd (macOS): a LaunchAgent in ``~/Library/LaunchAgents`` naming the WebUI.

Setup writes the action ``launchctl kickstart -k gui/UID/LABEL``, the daemon's
LaunchAgent ``com.stalewatch.hermes``, and the socket in the WebUI's ``.env``.
"""

from __future__ import annotations

import argparse
import os
import plistlib
import shlex
from pathlib import Path

from ...core.errors import SetupError
from ..discovery import read_bytes
from .base import Found, Install, Service, Supervisor, mentions_webui

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


MOST_BYTES = 1 << 20
"""Bytes of one LaunchAgent read at most."""


def _launch_agent(plist: Path) -> tuple[str, list[str], dict[str, str]] | None:
    """A LaunchAgent's label, program and arguments, and environment; ``None`` for a file that is
    not one (unreadable, not a regular file, past :data:`MOST_BYTES`, not a plist), or whose keys
    read here are not of launchd's types (strings; a list of them; a dict of them)."""
    raw = read_bytes(plist, MOST_BYTES, whole=True)
    try:  # a malformed plist raises no one type (ExpatError, AttributeError, binascii.Error...)
        data = plistlib.loads(raw) if raw is not None else None
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


KINDS = (Launchd(),)
