"""Reading git's HEAD and refs in-process: pure functions, no threads, no subprocesses.

Everything here reads files and returns values. ``resolve_head`` costs ~20 µs for a
loose ref, which is what lets a strict barrier check see a completed update without
spawning ``git`` (C10). Layouts covered (C11): ``.git`` directory; ``.git`` file with
``gitdir:`` (worktrees, submodules) and ``commondir``; symbolic and detached HEAD;
loose refs; packed refs with peeled ``^`` lines (:mod:`.packed`: a snapshot per file
identity, binary search); branch names with slashes; unborn branches; symbolic refs
written as symlinks (``core.preferSymlinkRefs``). Reftable repositories raise
:class:`NeedsGitError`: their tables are not parsed.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from ..core.errors import NeedsGitError, RefError
from ..core.revisions import is_object_id
from . import packed

__all__ = ["HEAD_MISSING", "GitDirs", "find_git_dirs", "head_chain", "is_object_id", "resolve_head"]

HEAD_MISSING = "HEAD does not exist"
"""The :class:`RefError` reason when there is no HEAD file (nor symlink) at all."""

_MAX_SMALL_FILE = 4096  # HEAD and loose refs are one line; never read a corrupt giant
_MAX_SYMREF_DEPTH = 5  # git's own limit for chains of symbolic refs
_SPACE = " \t\n\r"  # what git trims around a ref's value (its isspace): not "\v", "\f", U+00A0
# Refs that live in a worktree's own git dir rather than the common dir (git-worktree(1)).
_PER_WORKTREE_PREFIXES = ("refs/bisect/", "refs/worktree/", "refs/rewritten/")


@dataclass(frozen=True)
class GitDirs:
    """Where a working tree's git data lives.

    Attributes:
        worktree: top of the working tree (resolved).
        git_dir: the directory holding this worktree's ``HEAD``.
        common_dir: the directory holding ``refs/`` and ``packed-refs`` (equal to
            ``git_dir`` except in linked worktrees).
        reftable: the repository stores refs in reftable format.
        deploy_link: a symlink naming this worktree as the release in use
            (``current -> releases/X``, :mod:`stalewatch.guard.release`): retargeted, the
            code moved, so its name is watched in its directory like a ref.
    """

    worktree: Path
    git_dir: Path
    common_dir: Path
    reftable: bool = False
    deploy_link: Path | None = None

    @property
    def checkout(self) -> Path:
        """The path guards and a daemon name this checkout by: the deploy link the code
        came through (the same for every release), else the worktree."""
        return self.worktree if self.deploy_link is None else self.deploy_link

    @classmethod
    def plain(cls, directory: Path, deploy_link: Path) -> GitDirs:
        """A release no git owns (an export with a ``REVISION`` file), named by ``deploy_link``.

        Its "git dirs" are the directory itself: nothing of git's is ever found there,
        so only the directory's identity and the link are watched.
        """
        return cls(directory, directory, directory, deploy_link=deploy_link)

    # Paths built once per checkout: a pathlib join costs 2 to 5 µs, and a turn of the
    # watcher would otherwise build seven (issue 17: every microsecond of an update's
    # path is paid again, several times slower, on a CPU just woken).

    @cached_property
    def head_file(self) -> Path:
        return self.git_dir / "HEAD"

    @cached_property
    def packed_refs(self) -> Path:
        return self.common_dir / "packed-refs"

    @cached_property
    def head_log(self) -> Path:
        """``logs/HEAD``: HEAD's reflog."""
        return self.git_dir / "logs" / "HEAD"

    def ref_path(self, name: str) -> Path:
        """The loose file of ref ``name`` (per-worktree refs in the worktree's git dir)."""
        paths = self._ref_paths
        path = paths.get(name)
        if path is None:
            if len(paths) >= 256:  # a long life of branch switches: start over
                paths.clear()
            base = self.git_dir if name.startswith(_PER_WORKTREE_PREFIXES) else self.common_dir
            path = paths[name] = base / name
        return path

    def log_path(self, ref: Path) -> Path | None:
        """The reflog of the loose ref file ``ref`` (``None``: not under either git dir)."""
        paths = self._log_paths
        cached = paths.get(ref)  # one read: another thread may clear() meanwhile
        if cached is not None:
            return cached[0]
        if len(paths) >= 256:
            paths.clear()
        found = None
        # Per-worktree refs live under the worktree's git dir, which may itself sit
        # inside the common dir (.git/worktrees/x): look there first.
        for base in (self.git_dir, self.common_dir):
            if ref.is_relative_to(base):
                found = base / "logs" / ref.relative_to(base)
                break
        paths[ref] = (found,)
        return found

    @cached_property
    def _ref_paths(self) -> dict[str, Path]:
        return {}

    @cached_property
    def _log_paths(self) -> dict[Path, tuple[Path | None]]:
        return {}


_OPEN = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


def _read_small(path: Path, *, ref: bool = False) -> str | None:
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
        # which would hide the branch it names (and so the file to watch, C11).
        fd = os.open(path, _OPEN | (_NOFOLLOW if ref else 0))
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        if ref and exc.errno == errno.ELOOP:
            return _read_symlinked_ref(path)
        raise RefError(path, f"cannot read: {exc.strerror or exc}") from exc
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            if stat.S_ISDIR(os.fstat(fd).st_mode):
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
        return _read_small(path)
    if target.startswith("refs/"):
        return f"ref: {target}"  # validated like any symbolic ref by the caller
    return _read_small(path)  # git reads any other symlink through


def find_git_dirs(start: Path) -> GitDirs | None:
    """Find the git data of the working tree enclosing ``start`` (a resolved path).

    Walks up from ``start`` (or its parent, for a file) to the first ``.git``
    directory or ``.git`` file, the way git discovers a repository. Returns ``None``
    when no ancestor has one.

    Raises:
        RefError: a ``.git`` file or ``commondir`` exists but cannot be read or parsed.
    """
    here = start if start.is_dir() else start.parent
    for directory in (here, *here.parents):
        dotgit = directory / ".git"
        if dotgit.is_dir():
            return _layout(directory, dotgit)
        if dotgit.is_file():
            text = _read_small(dotgit) or ""
            if not text.startswith("gitdir:"):
                raise RefError(dotgit, "a .git file must start with 'gitdir:'")
            target = Path(text[len("gitdir:") :].strip())
            git_dir = (directory / target) if not target.is_absolute() else target
            return _layout(directory, git_dir.resolve())
    return None


def _layout(worktree: Path, git_dir: Path) -> GitDirs:
    common_text = _read_small(git_dir / "commondir")
    common_dir = git_dir
    if common_text is not None and common_text.strip():
        common = Path(common_text.strip())
        common_dir = (common if common.is_absolute() else git_dir / common).resolve()
    return GitDirs(worktree, git_dir, common_dir, reftable=_uses_reftable(common_dir))


def _uses_reftable(common_dir: Path) -> bool:
    if (common_dir / "reftable").is_dir():
        return True
    config = _read_config(common_dir / "config")
    return "refstorage = reftable" in config or "refstorage=reftable" in config


def _read_config(path: Path) -> str:
    try:
        return path.read_text("utf-8", "replace").lower()
    except OSError:
        return ""


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
    loose = _read_small(dirs.ref_path(name), ref=True)
    if loose is not None:
        value = loose.strip(_SPACE)
        if not value:
            raise RefError(dirs.ref_path(name), "empty ref file")
        return value
    # Per-worktree refs too: git never packs them, but reads packed-refs for any ref.
    return packed.lookup(dirs.packed_refs, name)


def resolve_head(dirs: GitDirs, chain: list[Path] | None = None) -> str | None:
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
        NeedsGitError: reftable storage; resolve with ``git rev-parse`` instead.
        RefError: HEAD is missing, unreadable or corrupt, a ref is malformed, or a
            symbolic ref chain is too deep.
    """
    if dirs.reftable:
        raise NeedsGitError(dirs.common_dir / "reftable", "reftable refs are resolved by git")
    head = _read_small(dirs.head_file, ref=True)
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


def head_chain(dirs: GitDirs) -> list[Path]:
    """The loose-ref paths HEAD's commit depends on (see :func:`resolve_head`); never raises.

    Empty for a detached HEAD or a reftable repository.
    """
    chain: list[Path] = []
    if not dirs.reftable:
        # On an error, what was collected before it still tells what to watch.
        with contextlib.suppress(RefError):
            resolve_head(dirs, chain)
    return chain
