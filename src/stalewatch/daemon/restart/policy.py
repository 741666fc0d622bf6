"""A checkout's restart policy: what the ``[checkout.restart]`` table of the configuration says.

Example::

    [[checkout]]
    path = "/srv/hermes-agent"

    [checkout.restart]
    action = ["systemctl", "--user", "--no-block", "restart", "hermes-webui.service"]
    settle = 2.0
    update_marker = "/home/me/.hermes/.hermes-update-in-progress"
    incomplete_markers = ["/srv/hermes-agent/.update-incomplete"]
    verify = ["/srv/hermes-agent/venv/bin/python", "-c", "import run_agent"]
    lock = "/home/me/.hermes/update.lock"

Every key, its default and its meaning are in the README ("Automatic restart").
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = ["RestartPolicy"]


@dataclass(frozen=True)
class RestartPolicy:
    """How and when the daemon restarts the servers of one checkout (R1-R6).

    Attributes:
        action: the argv run to restart through the supervisor (never a shell of ours);
            ``None`` when a signal is sent to the process in ``pidfile`` instead.
        pidfile: a file holding the pid to signal (e.g. gunicorn's master).
        signal: the signal sent to that pid (a name such as ``"HUP"``).
        settle: seconds HEAD must stay unchanged before anything else happens.
        hold_while: files that hold the restart while any of them exists.
        update_marker: a ``PID\\nUNIX_TIME\\n`` file an updater writes while it runs.
        update_marker_max_age: seconds after which a marker is no longer a live update.
        incomplete_markers: files whose presence means an update did not finish.
        verify: an argv probe run in the checkout against the new code; must exit 0.
        verify_timeout: seconds the probe may take.
        lock: a file ``flock``-ed from the final re-check until the restart is confirmed.
        confirm: an argv probe (a health check) used when no server registers.
        confirm_timeout: seconds for the new servers to be confirmed.
        action_timeout: seconds the action may take.
        max_attempts: actions per revision, at most.
        min_interval: seconds between two actions.
    """

    action: tuple[str, ...] | None = None
    pidfile: Path | None = None
    signal: str = "HUP"
    settle: float = 2.0
    hold_while: tuple[Path, ...] = ()
    update_marker: Path | None = None
    update_marker_max_age: float = 1200.0
    incomplete_markers: tuple[Path, ...] = ()
    verify: tuple[str, ...] | None = None
    verify_timeout: float = 60.0
    lock: Path | None = None
    confirm: tuple[str, ...] | None = None
    confirm_timeout: float = 60.0
    action_timeout: float = 30.0
    max_attempts: int = 3
    min_interval: float = 30.0

    def describe_action(self) -> str:
        """The action for a log line."""
        if self.action is not None:
            return " ".join(self.action)
        return f"kill -{self.signal} $(cat {self.pidfile})"
