"""A checkout's restart policy: what the ``[checkout.restart]`` table of the configuration says.

Example::

    [[checkout]]
    path = "/srv/hermes-agent"

    [checkout.restart]
    action = ["systemctl", "--user", "--no-block", "restart", "hermes-webui.service"]
    settle = 2.0
    update_marker = "/home/me/.hermes/.hermes-update-in-progress"
    verify = ["/srv/hermes-agent/venv/bin/python", "-c", "import run_agent"]
    lock = "/home/me/.hermes/update.lock"

Each key is declared once, below (:mod:`stalewatch.core.declared`); docs/restart.md's
table is written from these declarations.
"""

from __future__ import annotations

import enum
import signal
from dataclasses import dataclass
from pathlib import Path

from ...core.declared import ARGV, FLAG, PATH, PATHS, Kind, Refused, choice, integer, read, seconds, setting
from ...core.tables import TableReader

__all__ = ["RECONNECT_GRACE", "DrainOutcome", "RestartPolicy", "parse_policy"]

RECONNECT_GRACE = 3.0
"""The default ``reconnect_grace``: seconds a server may take to register again, the
client's longest reconnect backoff (``client.following.MAX_BACKOFF``, 2 s) and a margin
(a test holds them together)."""

_SIGNALS = frozenset(s.name.removeprefix("SIG") for s in signal.Signals)


class DrainOutcome(enum.StrEnum):
    """What happens when the drain bound is reached with work still in flight.

    ``REFUSE``: give up on this revision (the servers keep answering 409 on guarded
    routes: stale but nothing is cut off) until another revision is wanted or a reload.
    ``RESTART``: restart anyway; the phase says how much was still in flight.
    """

    REFUSE = "refuse"
    RESTART = "restart"


def _signal(value: object, _: TableReader) -> str:
    # Not a string (a number, a list, a table): refused before the set lookup, which
    # would raise TypeError for an unhashable value instead of naming the key.
    name = value.upper().removeprefix("SIG") if isinstance(value, str) else None
    if name not in _SIGNALS:
        raise Refused("expected a signal name")
    return str(name)


def _lock(value: object, table: TableReader) -> Path:
    lock = PATH.read(value, table)
    if not lock.parent.is_dir():
        raise Refused(f"its directory {lock.parent} does not exist", str(lock))
    return lock


@dataclass(frozen=True)
class RestartPolicy:
    """How and when the daemon restarts the servers of one checkout: each
    field's declaration says what it means (docs/restart.md shows them)."""

    action: tuple[str, ...] | None = setting(
        None,
        ARGV,
        "run to restart the servers through their supervisor",
        shown="(one of `action`, `pidfile`)",
    )
    pidfile: Path | None = setting(
        None,
        PATH,
        "instead of `action`: the server's pid (gunicorn's master), sent `signal`; beside an "
        "`action`, it only tells what runs",
        shown="(one of `action`, `pidfile`)",
    )
    signal: str = setting(
        "HUP", Kind(_signal, "signal name"), "sent to the pid in `pidfile` (gunicorn: reload)"
    )
    settle: float = setting(
        2.0, seconds(0.0, 3600.0), "HEAD must not move this long before anything else happens"
    )
    hold_while: tuple[Path, ...] = setting((), PATHS, "the restart waits while any of these exists")
    update_marker: Path | None = setting(
        None, PATH, "an updater's `PID\\nUNIX_TIME\\n` file (Hermes: `~/.hermes/.hermes-update-in-progress`)"
    )
    update_marker_max_age: float = setting(
        1200.0, seconds(1.0, 7 * 86400.0), "after this long, that marker is stale (the update did not end)"
    )
    incomplete_markers: tuple[Path, ...] = setting(
        (), PATHS, "their presence means an update failed (`refused: incomplete`)"
    )
    verify: tuple[str, ...] | None = setting(
        None, ARGV, "run in the checkout; must exit 0 for the restart to go on"
    )
    verify_timeout: float = setting(60.0, seconds(0.1, 3600.0), "what the probe may take")
    lock: Path | None = setting(
        None,
        Kind(_lock, "path"),
        "a lock file shared with the updater (`flock LOCK update`), in an existing directory",
    )
    confirm: tuple[str, ...] | None = setting(
        None, ARGV, "a health check that must pass, with no registered server on other code"
    )
    confirm_timeout: float = setting(60.0, seconds(0.1, 3600.0), "for the restart to be confirmed")
    action_timeout: float = setting(
        30.0,
        seconds(0.1, 3600.0),
        "what the action may take (then its process group is killed, and what it "
        "started that left the group: see [Hooks](daemon.md#hooks))",
    )
    max_attempts: int = setting(3, integer(1, 100), "actions per `HEAD` revision")
    min_interval: float = setting(30.0, seconds(0.0, 86400.0), "between two actions")
    drain_timeout: float = setting(
        600.0, seconds(0.0, 86400.0), "what the drain of work in flight may take ([R8](contract.md#r8))"
    )
    on_drain_timeout: DrainOutcome = setting(
        DrainOutcome.REFUSE,
        choice(DrainOutcome),
        "then: give this revision up (cut nothing off) or restart anyway",
    )
    drain_probe: tuple[str, ...] | None = setting(
        None, ARGV, "prints the work in flight of servers that do not register (a whole number)"
    )
    drain_probe_timeout: float = setting(
        10.0, seconds(0.1, 3600.0), "what one run of the drain probe may take"
    )
    drain_poll: float = setting(
        1.0,
        seconds(0.0, 3600.0),
        "more than 0: between two runs of the drain probe, and two tellings of its count",
    )
    reconnect_grace: float = setting(
        RECONNECT_GRACE,
        seconds(0.0, 60.0),
        "after the daemon starts, no registration is not taken for nothing "
        "in flight (servers reconnect within 2 s); `0` if no server registers",
    )
    handoff: bool = setting(
        False,
        FLAG,
        'gunicorn\'s `USR2` handoff (with `pidfile`, `signal = "USR2"`), for a gunicorn no supervisor runs:'
        " [Recipe](#recipe-gunicorn)",
    )
    pid_command: tuple[str, ...] | None = setting(
        None,
        ARGV,
        "instead of `pidfile`: prints the server's pid (`supervisorctl pid web`), to tell what runs "
        "when no server registers",
    )


def parse_policy(reader: TableReader, data: object, table: int) -> RestartPolicy:
    """Read a ``[checkout.restart]`` table (``table``: the checkout's index).

    Raises:
        DaemonConfigError: through ``reader.fail``, naming the file, line and key.
    """
    place = reader.at(table, "restart")
    if not isinstance(data, dict):
        place.fail(None, data, "expected a [checkout.restart] table")
    (policy,) = read(place, data, RestartPolicy)
    if "action" not in data and "pidfile" not in data:
        place.fail(None, None, "give action (an argv), or pidfile (with signal)")
    if policy.get("drain_poll", 1.0) <= 0:  # a poll of 0 is a busy loop
        place.fail("drain_poll", data["drain_poll"], "expected more than 0")
    if "signal" in data and "action" in data:
        place.fail("signal", data["signal"], "a signal is sent only without an action (to the pidfile's pid)")
    if "pid_command" in data and "pidfile" in data:
        reason = "give one way to find the server's pid: pidfile or pid_command"
        place.fail("pid_command", data["pid_command"], reason)
    gunicorn = "action" not in data and "pidfile" in data and policy.get("signal") == "USR2"
    if policy.get("handoff") and not gunicorn:
        # The handoff knows one protocol: gunicorn's USR2 re-exec beside the old master.
        reason = 'a handoff needs pidfile with signal = "USR2" and no action (gunicorn\'s re-exec)'
        place.fail("handoff", data["handoff"], reason)
    return RestartPolicy(**policy)
