"""What a restart action is: :class:`Traits` for the machine, :class:`Action` for the worker.

The pure machine (:mod:`..machine`) never knows which action runs: it asks the
action's :class:`Traits` what it can do (start the new servers beside the old,
retire the old, abort the new, still be under way). The executor's worker carries
the action out through :class:`Action`: check it can be done at all, do it; what it
started beside the old servers is retired or aborted later (:class:`~.handoff.Begun`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from ...commands import Outcome

if TYPE_CHECKING:
    from .handoff import Begun

Run = Callable[[tuple[str, ...], str, str, float], Outcome]
"""Runs a configured argv: ``(argv, what, revision, timeout)`` (the worker's commands)."""


@dataclass(frozen=True)
class Traits:
    """What an action can do, as the machine asks it.

    Attributes:
        beside: the new servers start beside the old ones, which serve on meanwhile: it
            is confirmed by servers that register (as many new as old, on the target),
            never by an exit status or a probe alone.
        retires: once the new servers are confirmed, the old are stopped (``Retire``);
            they leave as they finish their work.
        aborts: when the new servers are not confirmed, they are stopped (``Abort``) and
            the old serve on.
        lingers: a previous action may still be under way when the next one is due (an
            old master finishing its requests): looked at with the markers, waited for.
    """

    beside: bool = False
    retires: bool = False
    aborts: bool = False
    lingers: bool = False


REPLACES = Traits()
"""An action whose new servers replace the old: nothing beside, retired, aborted, lingering."""


@dataclass(frozen=True)
class Done:
    """How an action went: ``ok``; ``detail`` for the phase and the log; ``refused``:
    nothing was done, and doing it again would be refused too (a verdict, not a failure);
    ``started``: what it started beside the old servers (``Traits.beside``), if anything:
    retired or aborted once the machine decided (only the very action's)."""

    ok: bool
    detail: str
    refused: bool = False
    started: Begun | None = None


class Action:
    """One way to restart a checkout's servers (one class per way, :mod:`.`). By default
    its new servers replace the old (a stop-then-start, a reload): nothing to refuse,
    nothing under way, nothing started beside the old."""

    traits: ClassVar[Traits] = REPLACES

    def check(self) -> None:
        """Refuse, at start and on reload, what cannot end with one server the supervisor knows.

        Raises:
            SupervisedHandoffError: the server's supervisor cannot follow this action.
        """

    def act(self, revision: str, run: Run, stop: threading.Event) -> Done:
        """Restart the servers onto ``revision`` (on the worker thread)."""
        raise NotImplementedError

    def under_way(self) -> str | None:
        """A previous action still under way (what, said), else ``None``."""
        return None
