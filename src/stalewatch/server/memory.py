"""The daemon's heap with thousands of checkouts: collections that stay short, memory that comes back.

Python's cyclic collector walks every object of the generation it collects: with ten
thousand checkouts (a few hundred objects each) a full collection holds the GIL for
hundreds of milliseconds, wherever it happens to start (on the loop, or on a worker
in the middle of an update: issue 17 measured 9-22 ms updates at 1,000 checkouts and
1.3 s at exit). What the daemon keeps for as long as it watches a checkout is moved
out of the collector's sight once it exists (:func:`settle`: ``gc.freeze()``); the
collector then only walks what came since. When a reload stops checkouts, their
objects are garbage the collector no longer sees: :func:`reclaim` gives it one full
look, once, and hands the freed pages back to the system (glibc keeps them in its
arenas otherwise).
"""

from __future__ import annotations

import contextlib
import ctypes
import gc

from ..core import forking

__all__ = ["reclaim", "settle"]


def settle() -> None:
    """Everything alive now lives long: the cyclic collector stops walking it."""
    gc.freeze()


def reclaim() -> None:
    """Collect what :func:`settle` hid and is garbage now, then give the memory back.

    One full collection (its pause is the price of a shrink, paid once, not in every
    later collection), then :func:`settle` again.
    """
    gc.unfreeze()
    gc.collect()
    forking.prune()  # the stopped owners' at-fork references, dead since the collection
    # glibc keeps freed pages in its arenas (RSS stayed at 240 MB after 10,000 checkouts
    # went): malloc_trim(0) hands them back. musl and macOS have no such call.
    with contextlib.suppress(OSError, AttributeError):
        trim = ctypes.CDLL(None).malloc_trim  # the process's own symbols: libc's among them
        trim.argtypes = [ctypes.c_size_t]
        trim(0)
    settle()
