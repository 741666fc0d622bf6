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

Every key, its default and its meaning are in docs/restart.md.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...core.tables import TableReader
from .rules import RECONNECT_GRACE, DrainOutcome

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
    "drain_timeout",
    "on_drain_timeout",
    "drain_probe",
    "drain_probe_timeout",
    "drain_poll",
    "reconnect_grace",
    "handoff",
    "pid_command",
}
_SIGNALS = frozenset(s.name.removeprefix("SIG") for s in signal.Signals)


@dataclass(frozen=True)
class RestartPolicy:
    """How and when the daemon restarts the servers of one checkout (R1-R6).

    Attributes:
        action: the argv run to restart through the supervisor (never a shell of ours);
            ``None`` when a signal is sent to the process in ``pidfile`` instead.
        pidfile: a file holding the server's pid (e.g. gunicorn's master): signalled
            when there is no ``action``; with one, it only tells what runs (R10).
        signal: the signal sent to that pid (a name such as ``"HUP"``).
        pid_command: an argv printing the server's pid (``supervisorctl pid web``,
            ``systemctl show -p MainPID --value app``; 0 or nothing: not running), to
            tell what runs when the servers do not register (R10); instead of ``pidfile``.
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
        max_attempts: actions per HEAD revision, at most.
        min_interval: seconds between two actions.
        drain_timeout: seconds the drain of work in flight may take (R8).
        on_drain_timeout: ``refuse`` (never cut work off) or ``restart`` once it passed.
        drain_probe: an argv printing the work in flight of servers that do not register.
        drain_probe_timeout: seconds one run of the drain probe may take.
        drain_poll: seconds between two looks at the drain (the probe; telling its count).
        reconnect_grace: seconds after the daemon starts during which no registration
            does not mean nothing in flight (the servers may be reconnecting); 0 when no
            server registers (a pidfile or a probe tells what runs).
        handoff: ``USR2`` starts a new gunicorn master beside the old, retired only once
            new workers registered on the new code (R9); needs ``pidfile``,
            ``signal = "USR2"`` and no ``action``.
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
    drain_timeout: float = 600.0
    on_drain_timeout: DrainOutcome = DrainOutcome.REFUSE
    drain_probe: tuple[str, ...] | None = None
    drain_probe_timeout: float = 10.0
    drain_poll: float = 1.0
    reconnect_grace: float = RECONNECT_GRACE
    handoff: bool = False
    pid_command: tuple[str, ...] | None = None


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
    if "action" not in data and "pidfile" not in data:
        reason = "give action (an argv), or pidfile (with signal)"
        reader.fail(reader.name(table, sub), None, reason, table, None, sub=sub)
    policy: dict[str, Any] = {}
    for key in ("action", "verify", "confirm", "drain_probe", "pid_command"):
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
        "drain_timeout": (0.0, 86400.0),
        "drain_probe_timeout": (0.1, 3600.0),
        "drain_poll": (0.0, 3600.0),
        "reconnect_grace": (0.0, 60.0),
    }
    for key, (low, high) in limits.items():
        if key in data:
            policy[key] = reader.number(data, key, table, low, high, sub=sub)
    if policy.get("drain_poll", 1.0) <= 0:  # a poll of 0 is a busy loop
        reader.refuse(data, "drain_poll", "expected more than 0", table, sub)
    if "max_attempts" in data:
        # A count: a bool (a TOML true is not 1) or a float (2.5 attempts) is a mistake.
        policy["max_attempts"] = reader.integer(data, "max_attempts", table, 1, 100, sub=sub)
    if "on_drain_timeout" in data:
        choices = tuple(outcome.value for outcome in DrainOutcome)
        policy["on_drain_timeout"] = DrainOutcome(
            reader.choice(data, "on_drain_timeout", table, choices, sub=sub)
        )
    if "handoff" in data:
        if not isinstance(data["handoff"], bool):
            reader.refuse(data, "handoff", "expected true or false", table, sub)
        policy["handoff"] = data["handoff"]
    if "signal" in data:
        name = data["signal"]
        # Not a string (a number, a list, a table): refused before the set lookup, which
        # would raise TypeError for an unhashable value instead of naming the key.
        name = name.upper().removeprefix("SIG") if isinstance(name, str) else None
        if name not in _SIGNALS:
            reader.refuse(data, "signal", "expected a signal name", table, sub)
        policy["signal"] = name
    _combinations(reader, data, policy, table)
    lock = policy.get("lock")
    if lock is not None and not lock.parent.is_dir():
        reason = f"its directory {lock.parent} does not exist"
        reader.fail(reader.name(table, "lock", sub), str(lock), reason, table, "lock", sub=sub)
    return RestartPolicy(**policy)


def _combinations(reader: TableReader, data: dict[str, Any], policy: dict[str, Any], table: int) -> None:
    """Keys that make sense only together, or never together."""
    sub = "restart"
    if "signal" in data and "action" in data:
        reason = "a signal is sent only without an action (to the pidfile's pid)"
        reader.refuse(data, "signal", reason, table, sub)
    if "pid_command" in data and "pidfile" in data:
        reason = "give one way to find the server's pid: pidfile or pid_command"
        reader.refuse(data, "pid_command", reason, table, sub)
    gunicorn = "action" not in data and "pidfile" in data and policy.get("signal") == "USR2"
    if policy.get("handoff") and not gunicorn:
        # The handoff knows one protocol: gunicorn's USR2 re-exec beside the old master.
        reason = 'a handoff needs pidfile with signal = "USR2" and no action (gunicorn\'s re-exec)'
        reader.refuse(data, "handoff", reason, table, sub)
