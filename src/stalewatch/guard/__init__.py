"""The guard: the stale flag, the barrier, and what a guard is bound to.

- :mod:`.guard`: :class:`~.guard.Guard`, its constructors, the barrier, the lifecycle.
- :mod:`.state`: :class:`~.state.GuardState`, Guard's base: the flag, the status, the
  read-and-apply that moves them, and the ordered, exactly-once delivery of events.
- :mod:`.head`: reading a guard's HEAD (grace for ``git branch -m``, first state).
- :mod:`.identity`: which checkout a guard watches.

A guard is fed by a :class:`~stalewatch.watching.source.Source`; it owns no thread.
"""

from .guard import Guard

__all__ = ["Guard"]
