"""Which threads run a wake-up's turn themselves, and when (issue 27: no hop on an update's path).

inotify's readers do, around the calls of one read (:func:`one_turn_after`): the first
wake-up asked there claims its turn if no turn runs anywhere
(:meth:`.scheduler.Scheduler.wake`), and it runs once every call of the read is made.
Not in the middle of them: a turn may block in a subscriber, and the calls after it
may be other checkouts' events. Meanwhile the other reader reads.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

_local = threading.local()  # .claiming: inside one_turn_after(); .claimed: (slot, its turn)


def one_turn_after(call: Callable[[bytes], object], arg: bytes, before: Callable[[], object]) -> None:
    """``call(arg)``, letting a wake-up asked inside it claim its turn for this thread,
    run after, ``before()`` first (a plain call: an update's path makes no context manager)."""
    local = _local
    local.claiming, local.claimed = True, None
    try:
        call(arg)
    finally:  # even if the call raised: a claimed turn left unrun would block its task
        claimed, local.claiming, local.claimed = local.claimed, False, None
        if claimed is not None:
            before()
            claimed[1]()


def may_claim() -> bool:
    """Inside :func:`one_turn_after`, and nothing claimed yet."""
    return getattr(_local, "claiming", False) and _local.claimed is None


def pending() -> object | None:
    """The slot this thread claimed and has not run yet."""
    claimed = getattr(_local, "claimed", None)
    return None if claimed is None else claimed[0]


def claim(slot: object, turn: Callable[[], None]) -> None:
    """Call ``turn`` (``slot``'s, begun) when the block ends."""
    _local.claimed = (slot, turn)
