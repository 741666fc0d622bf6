"""What the servers run, as the restart machine knows it (R10), and so which restart is wanted.

In order of precedence:

1. registrations: the servers that registered say what they loaded (the registry
   accepted only revisions the checkout had);
2. what the supervisor or the process tells of servers that do not register
   (:class:`~.inputs.Loaded`: HEAD's revision when the server process started, or a
   revision it started before), and a restart the machine confirmed itself;
3. only when nothing tells: the first HEAD the machine heard of is presumed loaded (so
   an action-only policy whose servers neither register nor can be asked still
   restarts when HEAD moves, and A->B->A ends with nothing to do, C8). The executor
   should feed :class:`~.inputs.Loaded` at start so that this never decides for a
   server that started before HEAD moved (issue 15, item 4).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .inputs import Loaded, Server

__all__ = ["Belief", "wanted"]


@dataclass(frozen=True)
class Belief:
    """What the servers that do not register run.

    Attributes:
        runs: the revision they run (told, or a restart confirmed onto it).
        not_runs: a revision they do not run (told: they started before HEAD moved to it).
        presumed: the first HEAD heard of (the fallback of rule 3).
    """

    runs: str | None = None
    not_runs: str | None = None
    presumed: str | None = None

    def told(self, loaded: Loaded) -> Belief:
        """What a :class:`~.inputs.Loaded` input makes of it (nothing when it cannot tell)."""
        if loaded.revision is not None:
            return Belief(loaded.revision, None, self.presumed)
        if loaded.not_revision is not None:
            return Belief(None, loaded.not_revision, self.presumed)
        return self

    def confirmed(self, revision: str) -> Belief:
        """The machine confirmed a restart onto ``revision``: the servers run it."""
        return Belief(revision, None, self.presumed)

    def heard(self, head: str | None) -> Belief:
        """A reading of HEAD: the first readable one becomes the presumption."""
        if self.presumed is not None or head is None:
            return self
        return Belief(self.runs, self.not_runs, head)


def wanted(head: str | None, servers: Sequence[Server], belief: Belief) -> str | None:
    """The revision the servers should be restarted onto (HEAD's), or ``None`` when none is."""
    if head is None:
        return None  # unborn or unreadable: nothing to restart onto
    if servers:
        return head if any(server.revision != head for server in servers) else None
    if belief.runs is not None:
        return head if belief.runs != head else None
    if belief.not_runs == head:
        return head
    if belief.presumed is not None and belief.presumed != head:
        return head
    return None
