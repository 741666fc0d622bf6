"""The restart by a signal to the server's master (``pidfile`` and ``signal``).

gunicorn's ``HUP``: the master stays (the pid its supervisor knows), starts new workers
on the new code and stops the old ones gracefully. The pid is signalled only while it is
still the process the file was written for (:mod:`..pidfile`).
"""

from __future__ import annotations

import threading
from pathlib import Path

from ..pidfile import signal_server
from .base import Action, Done, Run
from .handoff import promoted


class Signal(Action):
    """Send ``SIG<name>`` to the master in ``pidfile``."""

    def __init__(self, pidfile: Path, name: str) -> None:
        self.pidfile = pidfile
        self.name = name

    def act(self, revision: str, run: Run, stop: threading.Event) -> Done:
        # Right after a handoff (the policy changed by a reload) the new master has yet
        # to take the pidfile over: a signal now would find no pidfile.
        still = promoted(self.pidfile, stop)
        if still is not None:
            return Done(False, still)
        proc, detail = signal_server(self.pidfile, self.name)
        refused = detail.startswith("refused: ")
        return Done(proc is not None, detail.removeprefix("refused: "), refused=refused)
