"""The core: the guard that owns the stale flag, and the values and errors it reports.

- :mod:`.guard`: :class:`~.guard.Guard`, the flag, the barrier, the lifecycle.
- :mod:`.delivery`: ordered, exactly-once delivery of events to subscribers (C12).
- :mod:`.status`: :class:`~.status.Status`, :class:`~.status.Snapshot`, :class:`~.status.Event`.
- :mod:`.identity`: which checkout a guard watches (C1, C2).
- :mod:`.errors`: every error stalewatch raises, under one base class.
- :mod:`.settings`: defaults, keyword argument first, then ``STALEWATCH_*``.

Nothing here imports watchdog or owns a thread: notifications come from a
:class:`~stalewatch.watching.source.Source`.
"""
