"""Pure confirmation decisions: do the restarted servers run the new code?

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
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from .inputs import Server

__all__ = ["newcomers", "old_code", "registered_on", "runs"]


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
