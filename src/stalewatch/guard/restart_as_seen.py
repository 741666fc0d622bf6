"""What a guard tells clients of a daemon's restart: the daemon's word, brought up to date.

A process can see a commit before the daemon announces it: a polling daemon (``STALEWATCH_POLL=1``,
or no inotify instance left) notices up to a poll later, while the process's own
checks re-read HEAD. Meanwhile the daemon's last phase is about an earlier revision
(``idle``, or ``confirmed`` onto the revision this process loaded), and telling a
client "no automatic restart is configured" or "confirmed" would be wrong: a daemon
with a restart policy (it published a phase at all) will see the commit and restart.
So the process says what is pending: ``scheduled`` for the revision it sees, with the
daemon's own ``estimate`` plus what is left of the minimum interval (``earliest``).
"""

from __future__ import annotations

from ..core.phases import RestartPhase, RestartState
from ..core.status import Snapshot, Status


def restart_as_seen(state: RestartState | None, snap: Snapshot, now: float) -> RestartState | None:
    """The restart phase to tell for ``state`` (the daemon's latest) as this process sees ``snap``.

    ``state`` itself while it applies: no daemon policy (``None``), the code not stale,
    a restart already coming, or a phase about the revision HEAD names now (a refusal
    or a failure for it stands). Otherwise the daemon has not caught up with the
    commit: ``scheduled`` for it, ``retry_after`` the daemon's ``estimate`` plus the
    seconds left until ``earliest`` (``None`` when the daemon gives no estimate), and
    ``at`` when this process saw the move. ``now``: ``time.time()``.
    """
    if state is None or snap.status is not Status.STALE or snap.current_revision is None:
        return state
    if state.scheduled or state.revision == snap.current_revision:
        return state
    left = 0.0 if state.earliest is None else max(0.0, state.earliest - now)
    wait = None if state.estimate is None else state.estimate + left
    return RestartState(
        RestartPhase.SCHEDULED,
        revision=snap.current_revision,
        retry_after=wait,
        at=snap.changed_at,
        estimate=state.estimate,
        earliest=state.earliest,
    )
