"""What the board says, for ``scripts/check_hermes_server.py``: predicates and figures.

Pure functions over the observations of a :class:`~hermes_client.Board` (daemon lines,
load replies, SSE events): which ones a scenario waits for, and how its figures read.
"""

from __future__ import annotations

from collections.abc import Callable

from hermes_client import Board, Reply, Seen


def phase(*phases: str, revision: str | None = None) -> Callable[[Seen], bool]:
    def match(seen: Seen) -> bool:
        data = seen.data
        return (
            seen.kind == "daemon"
            and data.get("type") == "restart"
            and data.get("phase") in phases
            and (revision is None or data.get("revision") == revision)
        )

    return match


def verdict_on(target: str) -> Callable[[Seen], bool]:
    """How the daemon's sequence for ``target`` ended: confirmed, failed, refused, or idle
    (nothing left to do: the servers registered HEAD, e.g. after restarting themselves)."""
    return any_of(phase("confirmed", "failed", "refused", revision=target), phase("idle"))


def any_of(*predicates: Callable[[Seen], bool]) -> Callable[[Seen], bool]:
    return lambda seen: any(predicate(seen) for predicate in predicates)


def turn_end(name: str) -> Callable[[Seen], bool]:
    return lambda seen: seen.kind == "turn" and seen.data.get("name") == name and seen.data["event"] == "end"


def turn_event(name: str, event: str) -> Callable[[Seen], bool]:
    return lambda seen: seen.kind == "turn" and seen.data.get("name") == name and seen.data["event"] == event


def guarded(status: int, after: float) -> Callable[[Seen], bool]:
    """A load reply of the guard route with ``status``, to a request sent after ``after``."""
    return lambda seen: (
        seen.kind == "reply"
        and seen.data["path"] == "/api/btw"
        and seen.data["status"] == status
        and seen.data["start"] > after
    )


def restart_began(started: float | None) -> Callable[[Seen], bool]:
    """The daemon's action, a refused/reset connection, or a WebUI with another start time."""

    def match(seen: Seen) -> bool:
        if phase("restarting")(seen):
            return True
        if seen.kind != "reply":
            return False
        other_start = seen.data.get("started") not in (None, started)
        return other_start or (seen.data["error"] is not None and seen.data["status"] is None)

    return match


def phases_seen(board: Board, since: int, origin: float) -> str:
    lines = board.select(
        phase("scheduled", "waiting", "verifying", "restarting", "confirmed", "refused", "failed", "idle"),
        since,
    )
    text = [
        f"{s.data['phase']}{': ' + s.data['reason'] if s.data.get('reason') else ''} ({s.at - origin:+.1f} s)"
        for s in lines
    ]
    return "; ".join(text) or "none"


def since(origin: float, then: float | Seen | None) -> str:
    """Seconds from ``origin`` to ``then`` (a time or an observation), or "never"."""
    if then is None:
        return "never"
    return f"{(then.at if isinstance(then, Seen) else then) - origin:.2f} s"


def counts(replies: list[Reply]) -> str:
    guarded = [r for r in replies if r.path == "/api/btw"]
    return (
        f"{len(replies)} requests ({len(guarded)} guarded): "
        f"404 {sum(r.status == 404 for r in guarded)}, 409 {sum(r.status == 409 for r in guarded)}, "
        f"/health 200 {sum(r.path == '/health' and r.status == 200 for r in replies)}, "
        f"refused {sum(r.refused for r in replies)}, "
        f"reset {sum(r.unserved and not r.refused for r in replies)}, "
        f"lost {sum(r.lost for r in replies)}"
    )


def outage(replies: list[Reply], after: float) -> str:
    """From the first request not served after ``after`` to the next one served."""
    first = next((r for r in replies if r.start > after and r.unserved), None)
    if first is None:
        return "no connection refused or reset"
    back = next((r for r in replies if r.start > first.start and r.status is not None), None)
    until = back.start if back is not None else replies[-1].end
    unserved = sum(r.unserved for r in replies if first.start <= r.start < until)
    return f"{unserved} connections refused or reset over {until - first.start:.2f} s"


def restart_fields(replies: list[Reply]) -> str:
    last = next(
        (r.payload for r in reversed(replies) if r.status == 409 and isinstance(r.payload, dict)), None
    )
    if last is None:
        return "no 409 seen"
    extra = {k: v for k, v in last.items() if k not in ("error", "type", "retryable")}
    return f"last 409: {last.get('error', '')[:90]!r} {extra or '(no restart fields)'}"
