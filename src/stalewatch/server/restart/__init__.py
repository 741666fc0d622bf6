"""Automatic restart (R1-R7): after an update, the servers come back on the new code.

- :mod:`.policy`: :class:`~.policy.RestartPolicy`, a checkout's ``[checkout.restart]``.
- :mod:`.markers`: has the update finished, and cleanly? (R1)
- :mod:`.lock`: the ``flock`` handoff with a cooperating updater (R3).
- :mod:`.sequence`: :class:`~.sequence.Restarter`, one checkout's sequence (R1-R7).
- :mod:`.confirm`: is the restart done? (R5)
- :mod:`.announce`: telling each phase, in order, with its estimate (R7).
- :mod:`.action`: the action through the supervisor (R4) and the verify probe (R2).
"""
