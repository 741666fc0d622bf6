"""Pure drain decisions: how much work is in flight, and what to do about it.

Registered servers say what they have in flight; a server that does not register is
asked by the drain probe. While work is in flight the restart waits (guarded routes
answer 409 meanwhile, so the count only falls), for ``drain_timeout`` at most; then
``on_drain_timeout`` decides: ``refuse`` (give up on this revision) or ``restart``.

A server whose registration went away with work in flight, outside the restart's own
action (its connection dropped: a slow client cut off, a daemon hiccup), took its count
with it, not its work: the work may still run. It stays counted (:class:`Departed`)
until it registers again (its new count rules) or its process is gone (the executor
looks, by the pid the kernel gave, at each look of the drain): while the process runs,
the drain waits for it, bounded by ``drain_timeout`` as any work in flight. Without a
pid, for the policy's ``reconnect_grace``. The action ends them all (what it stops is what the
drain was for); at most :data:`DEPARTED` are kept.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

from .inputs import Server
from .rules import DrainOutcome, Rules

__all__ = ["DEPARTED", "Departed", "Next", "decide", "describe", "grace", "held", "in_flight"]

DEPARTED = 64
"""Departed servers kept at most (the newest): memory bounded whatever clients do."""


@dataclass(frozen=True)
class Departed:
    """A registration that went away with ``inflight`` work, at ``left`` (monotonic)."""

    pid: int
    inflight: int
    left: float


def grace(rules: Rules) -> float:
    """Seconds silence is not taken for nothing in flight after the daemon starts, or a
    pid-less server leaves: the servers may be reconnecting (never past the drain's bound)."""
    return min(rules.reconnect_grace, rules.drain_timeout)


def held(departed: Sequence[Departed], now: float, rules: Rules) -> tuple[Departed, ...]:
    """The departed servers whose work still counts (see the module doc)."""
    return tuple(d for d in departed if d.pid > 0 or now < d.left + grace(rules))[-DEPARTED:]


class Next(enum.Enum):
    """What a drain decision says: go on, wait, or the bound's outcome."""

    GO = "go"
    WAIT = "wait"
    RESTART = "restart"  # the bound passed: restart anyway
    REFUSE = "refuse"  # the bound passed: give up on this revision


def in_flight(
    servers: Sequence[Server], rules: Rules, probed: int | None, departed: Sequence[Departed] = ()
) -> int | None:
    """The work in flight: the registrations', the departed's still held, plus the probe's
    (``None``: the probe cannot tell).

    ``probed``: the drain probe's last answer (``None``: failed, or not run yet).
    """
    total = sum(max(0, server.inflight) for server in servers) + sum(d.inflight for d in departed)
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
