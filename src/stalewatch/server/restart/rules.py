"""What the restart machine reads of a checkout's policy: :class:`Rules`, a plain value.

The machine (:mod:`.machine`) needs to know *whether* there is a verify probe, a lock,
markers or a confirm probe, never their argv or paths: those are the executor's. So it
takes :class:`Rules`, made from the configured policy by :meth:`Rules.of`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Protocol

__all__ = ["DrainOutcome", "PolicyView", "Rules"]


class DrainOutcome(enum.StrEnum):
    """What happens when the drain bound is reached with work still in flight (R8).

    ``REFUSE``: give up on this revision (the servers keep answering 409 on guarded
    routes: stale but nothing is cut off) until another revision is wanted or a reload.
    ``RESTART``: restart anyway; the phase says how much was still in flight.
    """

    REFUSE = "refuse"
    RESTART = "restart"


class PolicyView(Protocol):
    """The attributes of ``RestartPolicy`` that :meth:`Rules.of` reads."""

    @property
    def settle(self) -> float: ...
    @property
    def max_attempts(self) -> int: ...
    @property
    def min_interval(self) -> float: ...
    @property
    def confirm_timeout(self) -> float: ...
    @property
    def verify(self) -> tuple[str, ...] | None: ...
    @property
    def lock(self) -> object | None: ...
    @property
    def confirm(self) -> tuple[str, ...] | None: ...
    @property
    def update_marker(self) -> object | None: ...
    @property
    def incomplete_markers(self) -> tuple[object, ...]: ...
    @property
    def hold_while(self) -> tuple[object, ...]: ...
    @property
    def drain_timeout(self) -> float: ...
    @property
    def on_drain_timeout(self) -> DrainOutcome: ...
    @property
    def drain_probe(self) -> tuple[str, ...] | None: ...
    @property
    def drain_poll(self) -> float: ...
    @property
    def handoff(self) -> bool: ...


@dataclass(frozen=True)
class Rules:
    """A policy as the machine sees it. See ``RestartPolicy``.

    Attributes:
        settle: seconds HEAD must hold still before anything else (R6).
        max_attempts: actions per HEAD revision, confirmed ones included (R6, R10).
        min_interval: seconds between two actions, whatever their revisions (R6).
        markers: the policy names markers to look at (R1).
        verify: the policy has a verify probe (R2, R9).
        lock: the policy has a handoff lock (R3).
        confirm_probe: the policy has a confirm probe (R5).
        confirm_timeout: seconds for the restarted servers to be confirmed (R5).
        drain_timeout: seconds the drain may take before ``on_drain_timeout`` applies (R8).
        on_drain_timeout: ``refuse`` (default: never cut off work) or ``restart``.
        drain_probe: the policy has a drain probe (asks servers that do not register).
        drain_poll: seconds between two looks at the drain: the probe, and telling its
            count (at most one drain phase per poll, whatever the servers report).
        handoff: the action starts the new servers beside the old (gunicorn ``USR2``); the
            old are retired only once as many new ones registered on the target, and the
            new are aborted if they do not (R9; needs servers that register).
    """

    settle: float = 2.0
    max_attempts: int = 3
    min_interval: float = 30.0
    markers: bool = False
    verify: bool = False
    lock: bool = False
    confirm_probe: bool = False
    confirm_timeout: float = 60.0
    drain_timeout: float = 600.0
    on_drain_timeout: DrainOutcome = DrainOutcome.REFUSE
    drain_probe: bool = False
    drain_poll: float = 1.0
    handoff: bool = False

    @classmethod
    def of(cls, policy: PolicyView) -> Rules:
        """The rules of a configured policy."""
        return cls(
            settle=policy.settle,
            max_attempts=policy.max_attempts,
            min_interval=policy.min_interval,
            markers=policy.update_marker is not None
            or bool(policy.incomplete_markers)
            or bool(policy.hold_while),
            verify=policy.verify is not None,
            lock=policy.lock is not None,
            confirm_probe=policy.confirm is not None,
            confirm_timeout=policy.confirm_timeout,
            drain_timeout=policy.drain_timeout,
            on_drain_timeout=policy.on_drain_timeout,
            drain_probe=policy.drain_probe is not None,
            drain_poll=policy.drain_poll,
            handoff=policy.handoff,
        )
