"""The restart machine's pure decisions (see :mod:`.machine`), beside its state (:mod:`.state`).

**The drain.** How much work is in flight, and what to do about it.

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

**Confirmation.** Do the restarted servers run the new code?

- Plain restarts (stop-then-start, HUP): every registered server runs one revision,
  the target or HEAD now (a commit that landed during the restart is what new servers
  load), and at least one registered since the action.
- New servers beside the old (``Traits.beside``: gunicorn's ``USR2`` handoff): the
  servers registered since the action that are not among the old ones all run one
  such revision, and there are as many of them as old ones (at least one: a new
  master whose first worker booted may still lose the others to a boot error and
  halt); the old ones are still there, serving, until retired.

Servers are counted as processes, by pid: one process registering on two connections
(two guards, a reconnect) is one server, never the second worker it stands in for.

**retry_after.** A truthful one: every wait the restart machine knows of, added up.

Until the new servers answer, a client waits for: what is left of settle and of the
minimum interval and of the wait for the servers' counts (their clocks run at once, so
the longest of them), the stage's own
wait of unknown length (markers, a held lock: at least until the next look), a drain
(unknown length: at least the next re-check), the verify probes still to run, and the
restart itself. Probe and restart times are the last measured ones (defaults until
then). The figure is a lower bound on what is known, never a promise.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from .inputs import Server
from .policy import DrainOutcome, Rules
from .state import DEPARTED, Departed

# -- the drain (R8) ------------------------------------------------------------------------


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
    (``None``: the probe cannot tell). ``probed``: the drain probe's last answer
    (``None``: failed, or not run yet)."""
    total = sum(max(0, server.inflight) for server in servers) + sum(d.inflight for d in departed)
    if not rules.drain_probe:
        return total
    return None if probed is None else total + max(0, probed)


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
    return Next.RESTART if rules.on_drain_timeout is DrainOutcome.RESTART else Next.REFUSE


# -- confirmation (R5, R9) -------------------------------------------------------------------


def newcomers(servers: Sequence[Server], acted_at: float, old: Collection[int]) -> list[Server]:
    """The servers registered since the action that are not among the old ones."""
    return [s for s in servers if s.since >= acted_at and s.pid not in old]


def registered_on(
    servers: Sequence[Server],
    heads: Collection[str | None],
    acted_at: float,
    *,
    beside: bool,
    old: Collection[int] = (),
) -> str | None:
    """The revision the restarted servers run, once confirmed; else ``None``.

    ``heads``: the revisions they may run (the target, and HEAD now).
    """
    group = newcomers(servers, acted_at, old) if beside else list(servers)
    revisions = {s.revision for s in group}
    if len(revisions) != 1 or (beside and len({s.pid for s in group}) < max(1, len(set(old)))):
        return None
    if not beside and not any(s.since >= acted_at for s in group):
        return None
    (revision,) = revisions
    return revision if revision in heads else None


def old_code(servers: Sequence[Server], heads: Collection[str | None]) -> bool:
    """Whether a registered server runs other code than ``heads`` (a confirm probe is not enough)."""
    return any(s.revision not in heads for s in servers)


def runs(servers: Sequence[Server]) -> str:
    """Who runs what: ``1a2b3c4: pids [10, 11]; ...`` (``(none): pids []`` when nobody)."""
    table: dict[str, list[int]] = {}
    for server in servers:
        table.setdefault(server.revision[:7], []).append(server.pid)
    return "; ".join(f"{rev}: pids {pids}" for rev, pids in (table or {"(none)": []}).items())


# -- a truthful retry_after (R7) ---------------------------------------------------------------


@dataclass(frozen=True)
class Waits:
    """The waits ahead of a published phase, in seconds (counts for the probes).

    Attributes:
        settle: what is left of settle.
        interval: what is left of the minimum interval before the next action.
        counts: what is left until the servers' counts of work in flight are in.
        poll: the stage's own wait of unknown length, until its next look.
        drain: a drain ahead or under way (at least its next re-check).
        verifies: verify probe runs still ahead (the one running included).
        restart: the action and its confirmation are still ahead (or under way).
    """

    settle: float = 0.0
    interval: float = 0.0
    counts: float = 0.0
    poll: float = 0.0
    drain: float = 0.0
    verifies: int = 0
    restart: bool = True


def retry_after(waits: Waits, verify_seconds: float, restart_seconds: float) -> float:
    """Seconds until the new servers should answer: never less than any single wait
    (settle, the interval and the counts run at once: the longest of them)."""
    start = max(0.0, waits.settle, waits.interval, waits.counts)
    restart = restart_seconds if waits.restart else 0.0
    return start + waits.poll + waits.drain + waits.verifies * verify_seconds + restart


def estimate(settle: float, verify: bool, verify_seconds: float, restart_seconds: float) -> float:
    """Seconds from a new commit to new servers when nothing else waits: settle, the two
    verify probes (fail fast, then under the lock) and the restart, as last measured.

    What a server that sees a commit before the daemon tells its clients (with
    ``earliest``): ``retry_after = estimate + max(0, earliest - now)`` covers every wait
    the daemon knew of when it last spoke.
    """
    return settle + (2 * verify_seconds if verify else 0.0) + restart_seconds
