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

import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...core.tables import TableReader

__all__ = ["RestartPolicy", "parse_policy"]

KEYS = {
    "action",
    "pidfile",
    "signal",
    "settle",
    "hold_while",
    "update_marker",
    "update_marker_max_age",
    "incomplete_markers",
    "verify",
    "verify_timeout",
    "lock",
    "confirm",
    "confirm_timeout",
    "action_timeout",
    "max_attempts",
    "min_interval",
}
_SIGNALS = frozenset(s.name.removeprefix("SIG") for s in signal.Signals)


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


def parse_policy(reader: TableReader, data: object, table: int) -> RestartPolicy:
    """Read a ``[checkout.restart]`` table (``table``: the checkout's index).

    Raises:
        DaemonConfigError: through ``reader.fail``, naming the file, line and key.
    """
    sub = "restart"
    if not isinstance(data, dict):
        reader.fail(
            reader.name(table, sub), data, "expected a [checkout.restart] table", table, None, sub=sub
        )
    for key in data:
        if key not in KEYS:
            known = ", ".join(sorted(KEYS))
            reader.fail(
                reader.name(table, key, sub), data[key], f"unknown key (known: {known})", table, key, sub=sub
            )
    if ("action" in data) == ("pidfile" in data):
        reason = "give exactly one of action (an argv) or pidfile (with signal)"
        reader.fail(reader.name(table, sub), None, reason, table, None, sub=sub)
    policy: dict[str, Any] = {}
    for key in ("action", "verify", "confirm"):
        if key in data:
            policy[key] = reader.argv(data, key, table, sub)
    for key in ("pidfile", "update_marker", "lock"):
        if key in data:
            policy[key] = reader.path(data, key, table, sub)
    for key in ("hold_while", "incomplete_markers"):
        if key in data:
            policy[key] = reader.paths(data, key, table, sub)
    limits = {
        "settle": (0.0, 3600.0),
        "update_marker_max_age": (1.0, 7 * 86400.0),
        "verify_timeout": (0.1, 3600.0),
        "confirm_timeout": (0.1, 3600.0),
        "action_timeout": (0.1, 3600.0),
        "min_interval": (0.0, 86400.0),
    }
    for key, (low, high) in limits.items():
        if key in data:
            policy[key] = reader.number(data, key, table, low, high, sub=sub)
    if "max_attempts" in data:
        value = data["max_attempts"]
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 100:
            reason = "expected a whole number between 1 and 100"
            reader.fail(
                reader.name(table, "max_attempts", sub), value, reason, table, "max_attempts", sub=sub
            )
        policy["max_attempts"] = value
    if "signal" in data:
        name = data["signal"]
        name = name.upper().removeprefix("SIG") if isinstance(name, str) else name
        if name not in _SIGNALS:
            reader.fail(
                reader.name(table, "signal", sub),
                data["signal"],
                "expected a signal name",
                table,
                "signal",
                sub=sub,
            )
        policy["signal"] = name
    lock = policy.get("lock")
    if lock is not None and not lock.parent.is_dir():
        reason = f"its directory {lock.parent} does not exist"
        reader.fail(reader.name(table, "lock", sub), str(lock), reason, table, "lock", sub=sub)
    return RestartPolicy(**policy)
