"""Pure drain decisions (R8): how much work is in flight, and what to do about it.

Registered servers say what they have in flight; a server that does not register is
asked by the drain probe. While work is in flight the restart waits (guarded routes
answer 409 meanwhile, so the count only falls), for ``drain_timeout`` at most; then
``on_drain_timeout`` decides: ``refuse`` (give up on this revision) or ``restart``.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence

from .inputs import Server
from .rules import DrainOutcome, Rules

__all__ = ["Next", "decide", "describe", "in_flight"]


class Next(enum.Enum):
    """What a drain decision says: go on, wait, or the bound's outcome."""

    GO = "go"
    WAIT = "wait"
    RESTART = "restart"  # the bound passed: restart anyway
    REFUSE = "refuse"  # the bound passed: give up on this revision


def in_flight(servers: Sequence[Server], rules: Rules, probed: int | None) -> int | None:
    """The work in flight: the registrations' plus the probe's (``None``: the probe cannot tell).

    ``probed``: the drain probe's last answer (``None``: failed, or not run yet).
    """
    total = sum(max(0, server.inflight) for server in servers)
    if not rules.drain_probe:
        return total
    if probed is None:
        return None
    return total + max(0, probed)


def describe(total: int | None, detail: str) -> str:
    """``3 in flight``, or what is known when the probe cannot tell."""
    if total is None:
        return f"unknown in flight (the drain probe {detail or 'has not answered'})"
    return f"{total} in flight"


def decide(total: int | None, since: float | None, now: float, rules: Rules) -> Next:
    """Whether to go on, wait, or apply the bound (reached at exactly ``since + drain_timeout``).

    ``since``: when the drain began (``None``: it begins now).
    """
    if total == 0:
        return Next.GO
    if since is None or now < since + rules.drain_timeout:
        return Next.WAIT
    if rules.on_drain_timeout is DrainOutcome.RESTART:
        return Next.RESTART
    return Next.REFUSE
