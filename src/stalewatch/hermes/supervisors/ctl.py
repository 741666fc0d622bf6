"""The WebUI's ``ctl.sh``: not a supervisor, a PID file (``start.sh`` by hand has nothing).

Setup writes the action ``ctl.sh restart``, no service (it prints a ``nohup`` command to
run), and the socket in the WebUI's ``.env``.
"""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

from ...core.errors import SetupError
from ..discovery import Process, read_text
from .base import Found, Install, Service, Supervisor


class Ctl(Supervisor):
    option = "ctl.sh"

    def process(self, server: Process, webui_dir: Path, hermes_home: Path | None) -> Found | None:
        default = (hermes_home or Path("/nonexistent")) / "webui.pid"
        pidfile = Path(server.environ.get("HERMES_WEBUI_PID_FILE", "") or default)
        try:
            recorded = int((read_text(pidfile) or "").split()[0])
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


KINDS = (Ctl(),)
