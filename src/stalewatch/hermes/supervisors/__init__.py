"""Which supervisor runs Hermes WebUI, found rather than guessed, and whether it answers.

The WebUI documents five ways to run it (its docs/supervisor.md and ``ctl.sh``): a
systemd unit (user or system), a launchd LaunchAgent (macOS), a supervisord program,
a runit or s6 service directory, and ``ctl.sh`` (a PID file; ``start.sh`` by hand has
no one to restart it). Each is a :class:`~.base.Supervisor` in a file of its own,
listed in :data:`KINDS`. :func:`from_process` reads it off the running server (Linux:
its nearest supervising ancestor, else its systemd service from its control group,
else the PID file ``ctl.sh`` keeps); :func:`from_definitions` reads the definitions
on disk (every platform; the WebUI may be stopped); :func:`answers` asks the
supervisor itself before anything is written.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

from ..discovery import looks_like_webui
from ..processes import Process, ancestors
from . import ctl, launchd, servicedir, supervisord, systemd
from .base import Found, Service, Supervisor, Where

__all__ = ["KINDS", "Found", "Service", "Supervisor", "Where", "answers", "from_definitions", "from_process"]

_MODULES = (systemd, launchd, supervisord, servicedir, ctl)  # a new kind's module is added here
KINDS: dict[str, Supervisor] = {kind.option: kind for module in _MODULES for kind in module.KINDS}
"""Every way of running the WebUI by its ``--supervisor`` name, in the order they are tried."""


def from_process(server: Process, webui_dir: Path, hermes_home: Path | None) -> Found | None:
    """Who runs ``server``: its nearest supervising ancestor, its service, or ``ctl.sh``."""
    for parent in ancestors(server.pid):
        for kind in KINDS.values():
            if found := kind.parent(parent, server, webui_dir):
                return found
    return next((f for kind in KINDS.values() if (f := kind.process(server, webui_dir, hermes_home))), None)


def from_definitions(webui_dir: Path | None, home: Path | None) -> list[Found]:
    """Every definition on disk that runs the WebUI (several: ask which with ``--supervisor``)."""
    return [found for kind in KINDS.values() for found in kind.definitions(webui_dir, home)]


def webui_dir_of(found: Found) -> Path | None:
    """The WebUI checkout a definition runs (its ``start.sh`` or ``directory=``), if it says."""
    try:
        words = found.kind.arguments(found.definition) if found.definition is not None else []
    except OSError:
        return None
    for word in words:
        path = Path(word.strip("\"'"))
        for candidate in (path.parent, path):
            if candidate.is_absolute() and looks_like_webui(candidate):
                return candidate
    return None


def answers(found: Found, uid: int | None = None) -> tuple[bool, str]:
    """Ask the supervisor about the WebUI's service: ``(answered, what it said)``."""
    command = found.kind.status(found, os.getuid() if uid is None else uid)
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=15, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"`{shlex.join(command)}`: {exc}"
    said = (done.stdout + done.stderr).strip().replace("\n", "; ")[:300]
    ok = found.kind.answered(found, done.stdout, done.returncode)
    return ok, f"`{shlex.join(command)}`: {said or f'exit {done.returncode}'}"
