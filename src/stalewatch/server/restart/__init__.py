"""Automatic restart: after an update, the servers come back on the new code.

The sequence is a pure state machine; a thread only carries it out.

- :mod:`.policy`: :class:`~.policy.RestartPolicy`, a checkout's ``[checkout.restart]``,
  and :class:`~.policy.Rules`, what the machine reads of it.
- :mod:`.machine`: ``step(state, input) -> (state, effects)``, the whole sequence
  (:mod:`.stages`: the moves; :mod:`.run`: one step's bookkeeping and its pure
  decisions; values in :mod:`.state`, :mod:`.inputs`, :mod:`.effects`).
- :mod:`.executor`: :class:`~.executor.Restarter`, which feeds the machine under one
  lock and carries out its effects on one worker thread (:mod:`.work`).
- The restart action, one class per way (:mod:`.actions`: a command, a signal,
  gunicorn's ``USR2`` handoff, refused under a supervisor it would leave
  without its server).
- What it carries out with: :mod:`.markers`, :mod:`.pidfile` (a pid signalled only
  while it is the file's process), :mod:`.loaded` (what runs).
"""
