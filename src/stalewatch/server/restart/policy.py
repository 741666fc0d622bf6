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

:class:`Rules` is what the restart machine (:mod:`.machine`) reads of a policy: *whether*
there is a verify probe, a lock, markers or a confirm probe, never their argv or paths
(those are the executor's); made from the configured policy by :meth:`Rules.of`.
"""

from __future__ import annotations

import enum
import signal
from dataclasses import dataclass
from pathlib import Path

from ...core.declared import ARGV, FLAG, PATH, PATHS, Kind, Refused, choice, integer, read, seconds, setting
from ...core.tables import TableReader
from .actions import REPLACES, Traits, action_of

# The default ``reconnect_grace``: seconds a server may take to register again, the
# client's longest reconnect backoff (``client.connection.MAX_BACKOFF``, 2 s) and a margin
# (a test holds them together).
RECONNECT_GRACE = 3.0

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


# Seconds an answer may take beyond its commands' timeouts: the quick requests (markers,
# the lock, HEAD), the handoff's wait for a promoted master (5 s), a loaded machine.
ANSWER_MARGIN = 15.0


def patience(policy: RestartPolicy) -> float:
    """Seconds after which an answer awaited is lost (never a hang with the lock held).

    Every command the executor runs has its timeout, and a request may wait on the one
    worker thread behind another that is still running (a dropped run's probe): twice
    the longest, and the margin.
    """
    longest = max(
        policy.verify_timeout, policy.action_timeout, policy.drain_probe_timeout, policy.confirm_timeout
    )
    return 2 * longest + ANSWER_MARGIN


_DEFAULT = RestartPolicy()  # the declared defaults, which the rules' own follow


@dataclass(frozen=True)
class Rules:
    """A policy as the machine sees it; its defaults are the policy's (the declarations).

    Attributes:
        settle: seconds HEAD must hold still before anything else.
        max_attempts: actions per HEAD revision, confirmed ones included.
        min_interval: seconds between two actions, whatever their revisions.
        markers: the policy names markers to look at, or its action lingers (a
            previous one still under way is waited for with them).
        verify: the policy has a verify probe.
        lock: the policy has a handoff lock.
        confirm_probe: the policy has a confirm probe.
        confirm_timeout: seconds for the restarted servers to be confirmed.
        drain_timeout: seconds the drain may take before ``on_drain_timeout`` applies.
        on_drain_timeout: ``refuse`` (default: never cut off work) or ``restart``.
        drain_probe: the policy has a drain probe (asks servers that do not register).
        drain_poll: seconds between two looks at the drain: the probe, and telling its
            count (at most one drain phase per poll, whatever the servers report).
        reconnect_grace: seconds after the daemon's start (or a server's connection
            dropping without a pid) during which silence is not "nothing in flight": the
            servers may still be reconnecting.
        action: what the restart action can do (:class:`~.actions.base.Traits`): e.g.
            gunicorn's ``USR2`` starts the new servers beside the old, retired only once
            as many new ones registered on the target, the new aborted if they do not.
        patience: seconds after which an answer still awaited counts as lost (the
            executor answers every request, failures included; this is the backstop):
            the run fails rather than waits for ever holding the lock (:func:`patience`).
    """

    settle: float = _DEFAULT.settle
    max_attempts: int = _DEFAULT.max_attempts
    min_interval: float = _DEFAULT.min_interval
    markers: bool = False
    verify: bool = False
    lock: bool = False
    confirm_probe: bool = False
    confirm_timeout: float = _DEFAULT.confirm_timeout
    drain_timeout: float = _DEFAULT.drain_timeout
    on_drain_timeout: DrainOutcome = _DEFAULT.on_drain_timeout
    drain_probe: bool = False
    drain_poll: float = _DEFAULT.drain_poll
    reconnect_grace: float = _DEFAULT.reconnect_grace
    action: Traits = REPLACES
    patience: float = patience(_DEFAULT)

    @classmethod
    def of(cls, policy: RestartPolicy) -> Rules:
        """The rules of a configured policy."""
        action = action_of(policy).traits
        return cls(
            settle=policy.settle,
            max_attempts=policy.max_attempts,
            min_interval=policy.min_interval,
            # An action that lingers is looked at with the markers: a previous handoff
            # whose old master still finishes its requests is waited for (R9).
            markers=bool(policy.update_marker or policy.incomplete_markers or policy.hold_while)
            or action.lingers,
            verify=policy.verify is not None,
            lock=policy.lock is not None,
            confirm_probe=policy.confirm is not None,
            confirm_timeout=policy.confirm_timeout,
            drain_timeout=policy.drain_timeout,
            on_drain_timeout=policy.on_drain_timeout,
            drain_probe=policy.drain_probe is not None,
            drain_poll=policy.drain_poll,
            reconnect_grace=policy.reconnect_grace,
            action=action,
            patience=patience(policy),
        )
