"""What the servers run, as the restart machine knows it, and so which restart is wanted.

In order of precedence:

1. registrations: the servers that registered say what they loaded (the registry
   accepted only revisions the checkout had);
2. what the supervisor or the process tells of servers that do not register
   (:class:`~.inputs.Loaded`: HEAD's revision when the server process started, or a
   revision it started before), and a restart the machine confirmed itself;
3. only when nothing tells: the daemon's loaded revision is presumed loaded (HEAD when
   it began watching, or the configured ``revision``; the first HEAD heard of when
   there was none), so an action-only policy whose servers neither register nor can be
   asked still restarts when HEAD moves, and A->B->A ends with nothing to do. The
   executor feeds :class:`~.inputs.Loaded` at start so that this never decides for a
   server that started before HEAD moved (issue 15, item 4).

All of it outlives the policy: a restart table changed, or removed and added back, by
reloads starts from what was known (the daemon saw its servers load A: issue 29).

Stopped servers run nothing: when the servers that registered all went away outside a
restart of the machine's, or the supervisor or the process says none runs, no restart
is wanted (restarting through a supervisor would *start* them, the Hermes WebUI bug).
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
        stopped: no server runs (they went away, or the supervisor says so).
    """

    runs: str | None = None
    not_runs: str | None = None
    presumed: str | None = None
    stopped: bool = False

    def told(self, loaded: Loaded) -> Belief:
        """What a :class:`~.inputs.Loaded` input makes of it (nothing when it cannot tell)."""
        if loaded.revision is not None:
            return Belief(loaded.revision, None, self.presumed)
        if loaded.not_revision is not None:
            return Belief(None, loaded.not_revision, self.presumed)
        if loaded.stopped:
            return self.gone()
        return self

    def gone(self) -> Belief:
        """No server runs now: none runs old code (until one registers or is told of)."""
        return Belief(None, None, self.presumed, stopped=True)

    def confirmed(self, revision: str) -> Belief:
        """The machine confirmed a restart onto ``revision``: the servers run it."""
        return Belief(revision, None, self.presumed)

    def describe(self) -> str:
        """What is known, in words (the log's while no server registers)."""
        if self.stopped:
            return "no server runs (they went away, or the supervisor said so)"
        if self.runs is not None:
            return f"they run {self.runs[:7]}"
        if self.not_runs is not None:
            return f"they do not run {self.not_runs[:7]}"
        return f"what they run is presumed to be {(self.presumed or '-')[:7]}, the loaded revision"

    def heard(self, head: str | None) -> Belief:
        """A reading of HEAD: the first readable one becomes the presumption."""
        if self.presumed is not None or head is None:
            return self
        return Belief(self.runs, self.not_runs, head, self.stopped)


def wanted(head: str | None, servers: Sequence[Server], belief: Belief) -> str | None:
    """The revision the servers should be restarted onto (HEAD's), or ``None`` when none is."""
    if head is None:
        return None  # unborn or unreadable: nothing to restart onto
    if servers:
        return head if any(server.revision != head for server in servers) else None
    if belief.stopped:
        return None  # never start a stopped server: nothing runs old code
    if belief.runs is not None:
        return head if belief.runs != head else None
    if belief.not_runs == head:
        return head
    if belief.presumed is not None and belief.presumed != head:
        return head
    return None
