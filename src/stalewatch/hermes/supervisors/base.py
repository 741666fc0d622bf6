"""What every way of running Hermes WebUI answers (:class:`Supervisor`, in :mod:`.kinds` and
:mod:`.supervisord`), what finding one gives (:class:`Found`) and what setup writes for it
(:class:`Service`)."""

from __future__ import annotations

import abc
import argparse
import shlex
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from ..discovery import Process, read_text

DAEMON_NAME = "stalewatch-hermes"
"""The daemon's unit (``.service``), supervisord program and service directory."""


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
    """

    kind: Supervisor
    name: str
    evidence: str
    definition: Path | None = None
    config: Path | None = None
    user: str | None = None
    environ: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Service:
    """What one supervisor needs.

    Attributes:
        action: the daemon's restart action (an argv).
        files: files to write, by path: (text, mode).
        then: the commands that start the daemon and restart the WebUI once (printed).
        notes: what the user must know (printed).
        pid_command: an argv printing the WebUI's pid (0 or nothing: not running), so
            the daemon knows what a WebUI that has not registered runs and never
            starts a stopped one; ``None`` where the supervisor has no such
            command.
    """

    action: list[str]
    files: dict[Path, tuple[str, int]] = field(default_factory=dict)
    then: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    pid_command: list[str] | None = None


@dataclass(frozen=True)
class Install:
    """A Hermes install, as found, and what its daemon needs: also what a supervisor's
    service is made of (:meth:`Supervisor.service`).

    Attributes:
        run: the daemon's argv.
        unit_dir: where a systemd unit is written (``None``: the system's).
        checked: what the supervisor and the WebUI answered before anything was written.
    """

    agent_dir: Path
    hermes_home: Path
    home: Path | None
    python: Path | None
    webui_dir: Path | None
    host: str
    port: int
    supervisor: Found
    config: Path
    socket: Path
    unit_dir: Path | None
    run: list[str]
    checked: tuple[str, ...] = ()

    @property
    def health(self) -> str:
        return f"http://{self.host}:{self.port}/health"

    @property
    def log(self) -> Path:
        return self.hermes_home / f"{DAEMON_NAME}.log"

    @cached_property
    def service(self) -> Service:
        """The restart action, the daemon's service and the socket's setting, for its supervisor."""
        return self.supervisor.kind.service(self.supervisor, self)


def assignments(text: str) -> dict[str, str]:
    """The ``NAME=value`` words of ``text``, shell-quoted (``{}`` for an open quote)."""
    try:
        pairs = [word.partition("=") for word in shlex.split(text)]
    except ValueError:
        return {}
    return {name.strip(): value for name, has, value in pairs if has}


def mentions_webui(text: str, webui_dir: Path | None) -> bool:
    """Whether a definition's ``text`` runs the WebUI (in ``webui_dir``, where known)."""
    if webui_dir is not None:
        return str(webui_dir) in text
    return "hermes-webui" in text or ("start.sh" in text and "hermes" in text)


class Supervisor(abc.ABC):
    """A way of running the WebUI (``--supervisor OPTION``): how it is found, asked and served.

    Only what a kind overrides differs from the defaults here; ``__init__.KINDS`` lists them.

    Attributes:
        option: its ``--supervisor`` value.
        system: a system-wide service: the daemon runs as root (configuration in ``/etc``).
        dropin: the WebUI learns the socket from a drop-in :meth:`service` writes, not from
            its ``.env``; the daemon's service makes the socket's directory (else setup
            makes it, 0700).
    """

    option: str
    system = False
    dropin = False

    def parent(self, parent: Process, server: Process, webui_dir: Path) -> Found | None:
        """It, if ``parent`` (an ancestor of the running ``server``, nearest first) is it."""
        return None

    def process(self, server: Process, webui_dir: Path, hermes_home: Path | None) -> Found | None:
        """It, if it runs ``server`` (asked after every ancestor)."""
        return None

    def definitions(self, webui_dir: Path | None, home: Path | None) -> list[Found]:
        """Its definitions on disk that run the WebUI."""
        return []

    def given(self, args: argparse.Namespace) -> Found | None:
        """It as setup's flags name it in full, found or not (``None``: look first)."""
        return None

    @abc.abstractmethod
    def named(self, args: argparse.Namespace, webui_dir: Path | None) -> Found:
        """It as setup's flags name it, with no definition found (SetupError: a flag is missing)."""

    @abc.abstractmethod
    def status(self, found: Found, uid: int) -> list[str]:
        """The argv asking it about the WebUI's service."""

    def answered(self, found: Found, out: str, code: int) -> bool:
        """Whether :meth:`status` exiting ``code`` and printing ``out`` is an answer."""
        return code == 0

    def arguments(self, definition: Path) -> list[str]:
        """The words of ``definition`` that may name the WebUI's checkout."""
        return read_text(definition).replace("=", " ").split()

    @abc.abstractmethod
    def service(self, found: Found, install: Install) -> Service:
        """The restart action, the daemon's service and the socket's setting for ``found``."""

    def socket(self, uid: int, hermes_home: Path) -> Path:
        """The socket both sides name."""
        return hermes_home / "stalewatch" / "stalewatch.sock"
