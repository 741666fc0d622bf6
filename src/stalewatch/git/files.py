"""git's default ref store: loose ref files, then ``packed-refs``, read in-process.

Pure reads, no threads, no subprocesses: ``resolve_head`` costs ~20 µs for a loose ref,
which is what lets a strict barrier check see a completed update without spawning
``git``. Covered: symbolic and detached HEAD; loose refs; packed refs with
peeled ``^`` lines (:mod:`.packed`: a snapshot per file identity, binary search);
branch names with slashes; unborn branches; symbolic refs written as symlinks
(``core.preferSymlinkRefs``); per-worktree refs in a linked worktree's git dir.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..core.errors import RefError
from ..core.revisions import is_object_id
from . import packed
from .packed import READ_FLAGS

if TYPE_CHECKING:  # refs imports this module for its default store
    from .refs import GitDirs
    from .store import RefStore


HEAD_MISSING = "HEAD does not exist"
"""The :class:`RefError` reason when there is no HEAD file (nor symlink) at all."""

_MAX_SMALL_FILE = 4096  # HEAD and loose refs are one line; never read a corrupt giant
_MAX_SYMREF_DEPTH = 5  # git's own limit for chains of symbolic refs
_SPACE = " \t\n\r"  # what git trims around a ref's value (its isspace): not "\v", "\f", U+00A0

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


def read_small(path: Path, *, ref: bool = False) -> str | None:
    """Return a small file's text, ``None`` when it does not exist.

    Args:
        ref: ``path`` is a loose ref (HEAD included): a symlink there whose target
            starts with ``refs/`` is a symbolic ref to that name, returned as
            ``ref: <target>`` (git's files backend; ``core.preferSymlinkRefs``).
            Any other symlink is read through.

    Raises:
        RefError: the file exists but cannot be read (permission, I/O error, loop).
    """
    try:
        # O_NONBLOCK: a FIFO planted where a ref should be must not hang the reader.
        # O_NOFOLLOW: a symlinked ref fails with ELOOP instead of being read through,
        # which would hide the branch it names (and so the file to watch).
        fd = os.open(path, READ_FLAGS | (_NOFOLLOW if ref else 0))
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        if ref and exc.errno == errno.ELOOP:
            return _read_symlinked_ref(path)
        raise RefError(path, f"cannot read: {exc.strerror or exc}") from exc
    try:
        # What the file is, before a byte is read: a FIFO's or a terminal's bytes are
        # someone else's (a read takes them), and never a ref.
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            if stat.S_ISDIR(mode):
                return None  # refs/heads/a is a directory when only a/b exists
            raise RefError(path, "not a regular file")
        data = os.read(fd, _MAX_SMALL_FILE + 1)
    except OSError as exc:
        raise RefError(path, f"cannot read: {exc.strerror or exc}") from exc
    finally:
        os.close(fd)
    if len(data) > _MAX_SMALL_FILE:
        raise RefError(path, f"larger than {_MAX_SMALL_FILE} bytes; not a ref")
    return data.decode("utf-8", "surrogateescape")


def _read_symlinked_ref(path: Path) -> str | None:
    try:
        # Not Path.readlink(): it normalises the text ("refs/heads//x" reads "refs/heads/x").
        target = os.readlink(path)  # noqa: PTH115
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        if exc.errno != errno.EINVAL:  # EINVAL: not a symlink (replaced meanwhile)
            raise RefError(path, f"cannot read: {exc.strerror or exc}") from exc
        return read_small(path)
    if target.startswith("refs/"):
        return f"ref: {target}"  # validated like any symbolic ref by the caller
    return read_small(path)  # git reads any other symlink through


@functools.lru_cache(maxsize=256)  # HEAD names the same branch at every read
def _valid_ref_name(name: str) -> bool:
    parts = name.split("/")
    return (
        name.startswith("refs/")
        and all(parts)
        and not any(p.startswith(".") or p.endswith(".lock") for p in parts)
        and ".." not in name
        and not any(c in name for c in "\\ ~^:?*[")
        and not any(ord(c) < 0x20 or c == "\x7f" for c in name)  # control characters, as git
        and "@{" not in name
        and not name.endswith(".")
    )


def read_ref(dirs: GitDirs, name: str) -> str | None:
    """Return the raw value of ref ``name`` (an id or ``ref: …``), ``None`` if absent.

    A loose ref file wins over ``packed-refs``, as in git.
    """
    loose = read_small(dirs.ref_path(name), ref=True)
    if loose is not None:
        value = loose.strip(_SPACE)
        if not value:
            raise RefError(dirs.ref_path(name), "empty ref file")
        return value
    # Per-worktree refs too: git never packs them, but reads packed-refs for any ref.
    return packed.lookup(dirs.packed_refs, name)


@dataclass(frozen=True)
class Files:
    """Loose refs, then ``packed-refs``: git's default store (see the module doc)."""

    name = "files"

    def found_in(self, common_dir: Path) -> bool:
        """Always: the default, for a repository no other store claims."""
        return True

    def resolve_head(self, dirs: GitDirs, chain: list[Path] | None = None) -> str | None:
        """Resolve HEAD to a full commit id, in-process.

        Args:
            dirs: the checkout's git directories.
            chain: if given, receives the loose-ref path of every symbolic ref HEAD goes
                through (``refs/heads/main``…), as far as resolution got: the files whose
                writes can move HEAD's commit.

        Returns:
            The object id HEAD points to, or ``None`` when HEAD names a branch that does
            not exist (an unborn branch, e.g. a repository without commits).

        Raises:
            RefError: HEAD is missing, unreadable or corrupt, a ref is malformed, or a
                symbolic ref chain is too deep.
        """
        head = read_small(dirs.head_file, ref=True)
        if head is None:
            raise RefError(dirs.head_file, HEAD_MISSING)
        value = head.strip(_SPACE)
        for _ in range(_MAX_SYMREF_DEPTH):
            if value.startswith("ref:"):
                name = value[len("ref:") :].strip(_SPACE)
                if not _valid_ref_name(name):
                    raise RefError(dirs.head_file, f"symbolic ref names an invalid ref {name[:80]!r}")
                if chain is not None:
                    chain.append(dirs.ref_path(name))
                target = read_ref(dirs, name)
                if target is None:
                    return None
                value = target
                continue
            if is_object_id(value):
                return value
            raise RefError(dirs.head_file, f"not a commit id or symbolic ref: {value[:80]!r}")
        raise RefError(dirs.head_file, f"symbolic refs nested deeper than {_MAX_SYMREF_DEPTH}")

    def head_chain(self, dirs: GitDirs) -> list[Path]:
        """The loose-ref paths HEAD's commit depends on (empty for a detached HEAD)."""
        chain: list[Path] = []
        # On an error, what was collected before it still tells what to watch.
        with contextlib.suppress(RefError):
            self.resolve_head(dirs, chain)
        return chain

    def watched(self, dirs: GitDirs) -> tuple[Path, ...]:
        """``packed-refs``: ``git pack-refs`` moves a ref there (and a branch may live only there)."""
        return (dirs.packed_refs,)

    def reflogs(self, dirs: GitDirs, chain: Sequence[Path] = ()) -> list[Path]:
        """``logs/HEAD``, then the log of each loose ref of ``chain``, innermost first."""
        return [dirs.head_log, *(log for log in map(dirs.log_path, reversed(chain)) if log is not None)]


STORE: RefStore = Files()
"""The one instance: a store keeps no state of its own."""
