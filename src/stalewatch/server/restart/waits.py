"""A truthful ``retry_after``: every wait the restart machine knows of, added up.

Until the new servers answer, a client waits for: what is left of settle and of the
minimum interval and of the wait for the servers' counts (their clocks run at once, so
the longest of them), the stage's own
wait of unknown length (markers, a held lock: at least until the next look), a drain
(unknown length: at least the next re-check), the verify probes still to run, and the
restart itself. Probe and restart times are the last measured ones (defaults until
then). The figure is a lower bound on what is known, never a promise.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DEFAULT_RESTART", "DEFAULT_VERIFY", "Waits", "estimate", "retry_after"]

DEFAULT_RESTART = 5.0  # seconds from action to confirmed, until one is measured
DEFAULT_VERIFY = 1.0  # seconds a verify probe takes, until one is measured


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
    """Seconds until the new servers should answer: never less than any single wait."""
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
