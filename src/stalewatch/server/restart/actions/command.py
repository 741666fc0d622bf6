"""The restart through the supervisor's own command (``action = [...]``).

``supervisorctl restart web``, ``systemctl restart app``: the supervisor stops the old
servers and starts new ones, and stays the one that knows them. Done when the command's
process exits 0 within ``action_timeout``.
"""

from __future__ import annotations

import threading

from .base import Action, Done, Run


class Command(Action):
    """Run ``argv`` (never through a shell of ours) with the restart's variables."""

    def __init__(self, argv: tuple[str, ...], timeout: float) -> None:
        self.argv = argv
        self.timeout = timeout

    def act(self, revision: str, run: Run, stop: threading.Event) -> Done:
        if not self.argv:  # the parser refuses a policy with neither action nor pidfile
            return Done(False, "no action nor pidfile")
        outcome = run(self.argv, "the restart action", revision, self.timeout)
        return Done(outcome.ok, outcome.detail)
