"""runit and s6: a service directory whose ``run`` script starts the WebUI.

Setup writes the action ``sv restart DIR`` or ``s6-svc -r DIR``, a service directory
``stalewatch-hermes`` beside DIR (linking it where the scanner looks is the user's
step), and the socket in the WebUI's ``.env``.
"""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

from ...core.errors import SetupError
from ..discovery import Process, read_text, resolved
from .base import DAEMON_NAME, Found, Install, Service, Supervisor, mentions_webui

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
                if ours and mentions_webui(read_text(run) or "", webui_dir):
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


KINDS = (
    ServiceDirectory("runit", "runsv", "runsvdir", ("sv", "status"), ("sv", "restart")),
    ServiceDirectory("s6", "s6-supervise", "s6-svscan", ("s6-svstat",), ("s6-svc", "-r")),
)
