"""What a forked child forgets: one registry of at-fork callbacks for the whole package.

Threads do not survive ``fork()``. A lock one of the parent's threads held at that
moment stays held for ever in the child, and what a parent's thread reads (the inotify
instance) or runs (the workers) is the parent's. Every owner of such state registers
here what its child must do instead (a fresh lock, forgetting an instance); the
registry runs each callback once in the child, in registration order, right after the
fork and before the child's code goes on (``os.register_at_fork``). A callback that
fails is logged; the others still run.

A bound method is held weakly (an owner that goes away takes its callback with it);
a plain function is held for the life of the process.
"""

from __future__ import annotations

import inspect
import logging
import os
import weakref
from collections.abc import Callable

logger = logging.getLogger(__name__)

_Ref = Callable[[], "Callable[[], object] | None"]
_callbacks: list[_Ref] = []
_pruned_at = 0  # len(_callbacks) after the last pruning of dead weak references


def in_child(callback: Callable[[], object]) -> None:
    """Run ``callback()`` in every child this process forks from now on.

    Example: ``forking.in_child(self._after_fork_in_child)`` in an owner's ``__init__``.
    """
    ref: _Ref = weakref.WeakMethod(callback) if inspect.ismethod(callback) else lambda: callback
    _callbacks.append(ref)  # list.append is atomic: no lock a fork could leave held
    if len(_callbacks) > 2 * max(_pruned_at, 32):  # amortised: dead owners do not pile up
        prune()


def prune() -> None:
    """Forget the callbacks of owners that went away now (not at the next growth): after
    thousands of owners stopped together, their dead references would stay for as long
    as the registry does not double again, scattered through freed memory."""
    global _pruned_at  # noqa: PLW0603 - the registry is the process's, by design
    _callbacks[:] = [r for r in _callbacks if r() is not None]
    _pruned_at = len(_callbacks)


def _run_in_child() -> None:
    for callback in filter(None, (ref() for ref in list(_callbacks))):  # owners still alive
        try:
            callback()
        except Exception:  # one owner's failure must not leave the others' locks held
            logger.exception("stalewatch: at-fork callback %r failed in the child", callback)


if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_run_in_child)
