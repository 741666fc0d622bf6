"""What the restart machine reads of a checkout's policy: :class:`Rules`, a plain value.

The machine (:mod:`.machine`) needs to know *whether* there is a verify probe, a lock,
markers or a confirm probe, never their argv or paths: those are the executor's. So it
takes :class:`Rules`, made from the configured policy by :meth:`Rules.of`.
"""

from __future__ import annotations

from dataclasses import dataclass

from .actions import REPLACES, Traits, action_of
from .policy import RECONNECT_GRACE, DrainOutcome, RestartPolicy

__all__ = ["ANSWER_MARGIN", "RECONNECT_GRACE", "DrainOutcome", "Rules", "patience"]

ANSWER_MARGIN = 15.0
"""Seconds an answer may take beyond its commands' timeouts: the quick requests (markers,
the lock, HEAD), the handoff's wait for a promoted master (5 s), a loaded machine."""


def patience(policy: RestartPolicy) -> float:
    """Seconds after which an answer awaited is lost (never a hang with the lock held).

    Every command the executor runs has its timeout, and a request may wait on the one
    worker thread behind another that is still running (a dropped run's probe): twice
    the longest, and the margin.
    """
    timeouts = (
        policy.verify_timeout,
        policy.action_timeout,
        policy.drain_probe_timeout,
        policy.confirm_timeout,
    )
    return 2 * max(timeouts) + ANSWER_MARGIN


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
            markers=policy.update_marker is not None
            or bool(policy.incomplete_markers)
            or bool(policy.hold_while)
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
