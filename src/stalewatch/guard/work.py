"""A guard's work in flight: what an automatic restart must let finish first.

Two kinds add up. Units counted with ``with guard.work():`` (the WSGI and ASGI
barriers count each guarded request this way), on the hot path: entering appends to
a deque and leaving pops from it, both atomic, so the count is the deque's length and
no lock is taken. And outside counts an application registers
(``guard.count_work(fn)``: Hermes' active chat streams), read only when someone asks
for the total: a daemon's client while a restart is coming or the code is stale.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable

logger = logging.getLogger(__name__)

Counter = Callable[[], "int | None"]
"""An outside count of work in flight: a whole number, or ``None`` when it cannot tell now."""


class WorkInFlight:
    """One guard's work in flight: its units and its outside counters.

    It is the context manager :meth:`~stalewatch.Guard.work` returns: one unit while
    inside. One object serves every caller and every thread at once, so
    ``guard.work()`` allocates nothing; ``__enter__`` and ``__exit__`` are plain calls
    too: a barrier enters when a request arrives and exits when its response is
    closed, on another call.
    """

    def __init__(self) -> None:
        self._units: deque[None] = deque()
        # Each change, and the copy total() reads, is one step of the dict's own: no lock.
        self._counters: dict[object, Counter] = {}
        self._failed: set[object] = set()  # counters already logged as failing (once each)

    def __enter__(self) -> None:
        self._units.append(None)

    def __exit__(self, *exc_info: object) -> None:
        # Empty only when a fork() between enter and exit cleared the child's count
        # (the units of the parent's other threads never end in the child). A
        # try, not contextlib.suppress: this is the hot path, and that costs an object.
        try:  # noqa: SIM105
            self._units.pop()
        except IndexError:
            pass

    def add(self, counter: Counter) -> Callable[[], None]:
        """Add an outside counter; returns the function that removes it (harmless twice)."""
        if not callable(counter):
            raise TypeError(f"count_work needs a callable returning an int, not {counter!r}")
        key = object()
        self._counters[key] = counter

        def remove() -> None:
            self._counters.pop(key, None)

        return remove

    def total(self) -> int:
        """The units plus every outside counter's answer, read now.

        A counter that raises, or answers anything but a whole number from 0 up, adds
        nothing this time (logged once per counter); ``None`` (cannot tell) adds nothing.
        Counters are called on the caller's thread.
        """
        counters = self._counters.copy()  # one step: added or removed meanwhile, no matter
        total = len(self._units)
        for key, counter in counters.items():
            try:
                value = counter()
            except Exception:
                self._failed_once(key, "stalewatch: work-in-flight counter %r raised", counter, exc_info=True)
                continue
            if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                total += value
            elif value is not None:
                what = "stalewatch: work-in-flight counter %r answered %r, not a whole number"
                self._failed_once(key, what, counter, value)
        return total

    def _failed_once(self, key: object, message: str, *args: object, exc_info: bool = False) -> None:
        if key not in self._failed:
            self._failed.add(key)
            logger.warning(message, *args, exc_info=exc_info)

    def after_fork_in_child(self) -> None:
        """Forget the parent's units (their threads are gone); the counters stay."""
        self._units.clear()
