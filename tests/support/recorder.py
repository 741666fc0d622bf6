"""Waiting for a guard's events without sleeping: :class:`Recorder`."""

from __future__ import annotations

import queue
import time

from stalewatch import Event, Guard

__all__ = ["Recorder"]


class Recorder:
    """Subscribes to a guard and lets a test wait for a status, without sleeping."""

    def __init__(self, guard: object) -> None:
        assert isinstance(guard, Guard)
        self.events: list[Event] = []
        self._queue: queue.Queue[Event] = queue.Queue()
        self.unsubscribe = guard.subscribe(self._on_event)

    def _on_event(self, event: object) -> None:
        self.events.append(event)  # type: ignore[arg-type]
        self._queue.put(event)  # type: ignore[arg-type]

    def wait_for(self, status: str, revision: str | None = None, timeout: float = 10.0) -> object:
        """Return the first not-yet-consumed event with this status (and revision)."""
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            try:
                event = self._queue.get(timeout=max(0.0, remaining))
            except queue.Empty:
                raise AssertionError(
                    f"no {status} event within {timeout} s; saw {[e.status.value for e in self.events]}"
                ) from None
            if event.status.value == status and (revision is None or event.current_revision == revision):
                return event
