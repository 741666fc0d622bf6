"""Reading a guard's HEAD: in-process, with git only where parsing cannot decide.

Pure of guard state: the guard passes what it knows and applies what comes back; the
grace for ``git branch -m``, and a new guard's first state.
"""

from __future__ import annotations

import errno
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from ..core.cause import Cause
from ..core.errors import BindError, HeadUnreadableError, RefError, ResourceExhaustedError
from ..core.revisions import is_object_id
from ..core.status import Status, decide
from ..git import reflog
from ..git.files import HEAD_MISSING

if TYPE_CHECKING:  # identity builds a deploy link's reader (release imports this module)
    from .identity import Binding


MISSING_REF_GRACE = (0.001, 0.004, 0.016, 0.064)
"""Seconds to look again when HEAD names a missing branch, or is missing, while a
revision is known."""

EXHAUSTED = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS})
"""Errors that say the reader is short of descriptors or memory, not that HEAD is bad."""


def _exhausted(exc: BaseException) -> int | None:
    """The errno of the ``OSError`` behind ``exc`` when it is :data:`EXHAUSTED` (``git/``
    raises its ``RefError`` from the ``OSError`` of the read that failed)."""
    seen: BaseException | None = exc
    for _ in range(8):  # a bounded walk: a cycle of causes is not ours to follow
        if seen is None:
            return None
        if isinstance(seen, OSError) and seen.errno in EXHAUSTED:
            return seen.errno
        seen = seen.__cause__ or seen.__context__
    return None


class RevisionReader(Protocol):
    """Where a guard's current revision comes from: HEAD (:class:`HeadReader`), or the
    release a deploy link names (:class:`~.release.DeployLink`)."""

    def read(self, chain: list[Path]) -> str | None:
        """The revision now (``None``: an unborn branch); ``chain`` collects the loose
        refs the reading went through. Raises :class:`RefError` (unreadable) or
        :class:`ResourceExhaustedError` (nothing known)."""
        ...

    def explain(self, chain: Sequence[Path], loaded: str | None, current: str) -> Cause | None:
        """What moved the revision from ``loaded`` to ``current`` (after a :meth:`read`)."""
        ...

    def loaded_at_bind(self, now: str | None) -> str | None:
        """The revision the code was loaded from, given the one read ``now`` at binding."""
        ...


class HeadReader:
    """The checkout's HEAD, and the reflog for what moved it."""

    def __init__(self, binding: Binding) -> None:
        self._binding = binding

    def read(self, chain: list[Path]) -> str | None:
        """HEAD's commit (``None``: an unborn branch); see ``RefStore.resolve_head``.

        Raises:
            RefError: untracked, or HEAD cannot be resolved.
        """
        dirs = self._binding.dirs
        if dirs is None:
            raise RefError(self._binding.checkout, "untracked: nothing to resolve")
        return dirs.store.resolve_head(dirs, chain)

    def explain(self, chain: Sequence[Path], loaded: str | None, current: str) -> Cause | None:
        dirs = self._binding.dirs
        return None if dirs is None else reflog.explain_move(dirs, chain, loaded, current)

    def loaded_at_bind(self, now: str | None) -> str | None:
        return now  # the code was just imported from HEAD's tree


Read = Callable[[list[Path]], "str | None"]
"""A :meth:`RevisionReader.read`."""


def _once(read: Read, chain: list[Path]) -> tuple[str | None, str | None, bool]:
    """``(current, error, passing)``: ``passing`` when the reading may be a state git
    passes through (a missing branch, a missing HEAD), worth a second look.

    Raises:
        ResourceExhaustedError: the read failed for want of descriptors or memory
            (whatever the reader: each raises its ``RefError`` from the ``OSError`` of
            the read that failed). Not a reading, and never the checkout's fault: the
            caller distrusts its flag and reads again later.
    """
    chain.clear()  # only the last attempt's chain counts
    try:
        current = read(chain)
    except ResourceExhaustedError:
        raise
    except RefError as exc:
        short = _exhausted(exc)
        if short is not None:
            raise ResourceExhaustedError(exc.path, exc.reason, short) from exc
        return None, str(exc), exc.reason == HEAD_MISSING
    return current, None, current is None


def read_settled(read: Read, chain: list[Path], *, known: bool) -> tuple[str | None, str | None]:
    """``(current, error)`` from ``read``; a missing branch or HEAD is looked at again when ``known``.

    Raises :class:`ResourceExhaustedError` rather than return it as an ``error``.

    Git passes through two such states while a revision is known, so look again briefly
    before calling it lost or unreadable, not to raise a false alarm: HEAD naming a
    branch without a commit (`git branch -m` renames the ref before it rewrites HEAD),
    and no HEAD at all (with ``core.preferSymlinkRefs`` a switch unlinks HEAD, then
    makes the new symlink; a turn already under way may read in between, which the
    watcher's own grace for HEAD's deletion does not cover).
    """
    current, error, passing = _once(read, chain)
    if passing and known:
        for delay in MISSING_REF_GRACE:
            time.sleep(delay)  # waits for another process (git), not for a thread
            current, error, passing = _once(read, chain)
            if not passing:
                break
    return current, error


def checked_revision(revision: str) -> str:
    """``revision`` if it is a full commit id.

    Raises:
        BindError: it is not (40 or 64 hex digits).
    """
    if not is_object_id(revision):
        raise BindError(revision, "loaded_revision must be a full commit id (40 or 64 hex digits)")
    return revision


def initial(
    binding: Binding, reader: RevisionReader, loaded_revision: str | None
) -> tuple[Status, str | None, str | None]:
    """A new guard's ``(status, loaded, current)``: ``reader``'s revision now, against what
    was loaded.

    Raises:
        HeadUnreadableError: HEAD cannot be resolved and no revision is known, or
            it cannot be read now for want of descriptors or memory (whatever is
            known: a checkout that may be fine is not bound as unreadable).
        BindError: ``loaded_revision`` is not a full commit id.
    """
    if binding.dirs is None:
        return Status.UNTRACKED, None, None
    try:
        current, error, _ = _once(reader.read, [])
    except ResourceExhaustedError as exc:
        raise HeadUnreadableError(binding.checkout, f"cannot read HEAD now: {exc}") from None
    if error is not None:
        if loaded_revision is None:
            raise HeadUnreadableError(binding.checkout, f"cannot resolve HEAD: {error}") from None
        return Status.UNREADABLE, checked_revision(loaded_revision), None  # C4: blocks
    loaded = reader.loaded_at_bind(current) if loaded_revision is None else checked_revision(loaded_revision)
    return decide(loaded, current, readable=True), loaded, current
