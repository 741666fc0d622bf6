"""The restart action: one class per way of restarting a checkout's servers.

- :class:`~.command.Command`: the supervisor's own command (``action = [...]``);
- :class:`~.signal.Signal`: a signal to the master in ``pidfile`` (gunicorn ``HUP``);
- :class:`~.handoff.Handoff`: gunicorn's ``USR2`` handoff (``handoff = true``), a new
  master beside the old.

Each declares its :class:`~.base.Traits` (what the machine asks of it) and carries
itself out behind :class:`~.base.Action`. :func:`action_of` is the one place that
tells, from a policy's keys, which one runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .base import REPLACES, Action, Traits
from .command import Command
from .handoff import Begun, Handoff
from .signal import Signal

if TYPE_CHECKING:
    from ..policy import RestartPolicy

__all__ = ["REPLACES", "Action", "Begun", "Handoff", "Signal", "Traits", "action_of"]


def action_of(policy: RestartPolicy) -> Action:
    """The action a policy configures (the parser guarantees ``action`` or ``pidfile``)."""
    if policy.action is not None or policy.pidfile is None:
        return Command(policy.action or (), policy.action_timeout)
    if policy.handoff:
        return Handoff(policy.pidfile, policy.signal)
    return Signal(policy.pidfile, policy.signal)
