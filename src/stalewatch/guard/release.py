"""Releases switched by a symlink: where the revision comes from when code came through a
deploy link.

Capistrano, Deployer and ansistrano deploy into ``releases/<id>`` and rename a new
``current`` link over the old one; Kubernetes' git-sync adds a worktree
``<root>/.worktrees/<hash>`` and renames its ``--link`` onto it. A process that imported
through the link keeps running the old release while HEAD of that release never moves,
so for such code the revision is the one of the release the link names *now*:
:class:`DeployLink` reads it (a :class:`~.head.RevisionReader`, the guard's other variant
besides HEAD). A release's revision is HEAD of its checkout (a worktree or clone), else
the first line of its ``REVISION`` file (written by Capistrano and Deployer), else its
directory's name (git-sync's are the commit hash).

The link is found (:func:`find_link`) on the path the code was imported through, when
Python kept it unresolved (``sys.path`` entries are kept as given, so a module found
through ``PYTHONPATH=/srv/app/current`` has ``__file__`` under the link; a script's own
directory and the working directory are resolved, so ``python current/app.py`` and
``cd current`` lose it), or it is named (``deploy_link=``, a daemon's ``[[checkout]]
path``).
"""

from __future__ import annotations

import errno
import os
import stat
import time
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

from ..core.cache import BoundedCache
from ..core.cause import Cause
from ..core.errors import BindError, RefError
from ..git.refs import GitDirs, find_git_dirs

PathArg = str | os.PathLike[str]
LinkArg = PathArg | None

REVISION_FILE = "REVISION"
"""The file Capistrano and Deployer write into each release: the commit deployed."""
_MAX_REVISION = 4096  # one line; never read a giant
_MAX_REVISION_CHARS = 256
_TARGETS: BoundedCache[tuple[Path, str], Path] = BoundedCache(64)
_CHECKOUTS: BoundedCache[tuple[Path, int, int], tuple[GitDirs | None]] = BoundedCache(64)


class Release(NamedTuple):
    """One release directory and its revision (``None``: an unborn branch)."""

    path: Path
    revision: str | None


def parse_revision_file(data: bytes) -> str | None:
    """The revision a ``REVISION`` file states: its first line, trimmed; ``None`` when it
    states none (empty, not text, control characters, longer than 256 characters)."""
    line = data.split(b"\n", 1)[0].strip()
    text = line.decode("ascii") if line.isascii() else ""
    return text if 0 < len(text) <= _MAX_REVISION_CHARS and text.isprintable() else None


def _revision_file(directory: Path) -> str | None:
    path = directory / REVISION_FILE
    try:
        with path.open("rb") as file:
            return parse_revision_file(file.read(_MAX_REVISION))
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return None
    except OSError as exc:
        raise RefError(path, f"cannot read the release's REVISION: {exc.strerror or exc}") from exc


def _checkout_of(directory: Path) -> GitDirs | None:
    """The git dirs of the checkout whose top ``directory`` is, ``None``: none.

    Cached by the directory's identity: finding them costs ~250 µs, and a watcher reads
    the link's release on every wake-up (a release deleted and made again is another).
    """
    info = directory.stat()
    if not stat.S_ISDIR(info.st_mode):
        raise NotADirectoryError(errno.ENOTDIR, "not a directory", str(directory))
    key = (directory, info.st_dev, info.st_ino)
    cached = _CHECKOUTS.get(key)
    if cached is None:
        dirs = find_git_dirs(directory)
        cached = (dirs if dirs is not None and dirs.worktree == directory else None,)
        _CHECKOUTS.put(key, cached)
    return cached[0]


def revision_of(directory: Path, chain: list[Path] | None = None) -> str | None:
    """A release's revision: HEAD of its checkout, else its ``REVISION`` file, else its name.

    ``chain`` collects the loose refs HEAD went through (what the watcher watches).

    Raises:
        RefError: its HEAD or ``REVISION`` cannot be read.
        OSError: ``directory`` is gone.
    """
    dirs = _checkout_of(directory)
    if dirs is not None:
        return dirs.store.resolve_head(dirs, chain)
    return _revision_file(directory) or directory.name


def _target(link: Path) -> Path:
    """Where ``link`` leads, resolved. Cached by the link's text (one ``readlink``):
    resolving walks every component (~30 µs) on every read of a watcher's wake-up;
    a symlink above the link retargeted is not followed until the link itself changes."""
    key = (link, os.readlink(link))  # noqa: PTH115 - the text is the key: no Path built
    cached = _TARGETS.get(key)
    if cached is None:
        cached = link.resolve(strict=True)
        _TARGETS.put(key, cached)
    return cached


def read_release(link: Path, chain: list[Path] | None = None) -> Release:
    """The release ``link`` names now.

    Raises:
        RefError: the link is no symlink, dangling, a loop, names no directory, or its
            release cannot be read (from the ``OSError``: one for want of descriptors
            or memory, which says nothing of the release, the guard's read tells apart).
    """
    path = link
    try:
        path = _target(link)
        return Release(path, revision_of(path, chain))
    except FileNotFoundError:
        raise RefError(link, "the deploy link names no release (dangling, or removed)") from None
    except NotADirectoryError:
        raise RefError(link, f"the deploy link names {path}, not a directory") from None
    except (RuntimeError, OSError) as exc:  # Python < 3.13 reports a symlink loop as a RuntimeError
        if isinstance(exc, RuntimeError) or exc.errno == errno.ELOOP:
            raise RefError(link, "the deploy link is a symlink loop") from None
        if exc.errno == errno.EINVAL:
            raise RefError(link, "the deploy link is no longer a symlink") from None
        raise RefError(link, f"cannot read the deploy link: {exc.strerror or exc}") from exc


class DeployLink:
    """The revision of the release a deploy link names now, against the one loaded.

    A :class:`~.head.RevisionReader` (the guard reads through it instead of HEAD):
    ``read`` says the revision the link's release has now; a dangling link raises, so the
    guard says ``unreadable``, never ``current``.

    Attributes:
        link: the link (not resolved): ``/srv/app/current``.
        loaded: the release the code was loaded from, and its revision then.
    """

    def __init__(self, link: Path, loaded: Release) -> None:
        self.link = link
        self.loaded = loaded
        self._now = loaded  # the release the last read found
        # The releases read, by revision: a daemon that restarted its servers adopts a
        # revision, and the next switch is told from the release that has it.
        self._releases: dict[str | None, Path] = {loaded.revision: loaded.path}

    def read(self, chain: list[Path]) -> str | None:
        """The revision of the release the link names now (``None``: an unborn branch).

        Raises:
            RefError: as :func:`read_release`.
        """
        release = read_release(self.link, chain)
        self._now = release
        if self._releases.get(release.revision) != release.path:
            if len(self._releases) >= 64:
                self._releases = {self.loaded.revision: self.loaded.path}
            self._releases[release.revision] = release.path
        return release.revision

    def explain(self, chain: Sequence[Path], loaded: str | None, current: str) -> Cause | None:
        """``deploy: current switched releases/a1b2c3 -> releases/d4e5f6`` (the last read)."""
        del chain
        now = self._now
        source = self._releases.get(loaded, self.loaded.path)
        if now.path == source:
            return None  # the release's own HEAD moved: no switch to tell (and no reflog read)
        words = f"{self.link.name} switched {self._name(source)} -> {self._name(now.path)}"
        relation = "same" if current == loaded else "unknown"
        return Cause("deploy", words, words, "", "", time.time(), time.strftime("%z"), relation)

    def loaded_at_bind(self, now: str | None) -> str | None:
        """The loaded release's revision (the link may have moved on since the import)."""
        del now
        return self.loaded.revision

    def _name(self, release: Path) -> str:
        """A release as the link's directory sees it (``releases/a1b2c3``)."""
        base = self.link.parent.resolve()
        return str(release.relative_to(base)) if release.is_relative_to(base) else str(release)


def find_link(path: Path, worktree: Path | None, *, deploy_link: LinkArg = None) -> DeployLink | None:
    """The deploy link code at ``path`` came through (``None``: none).

    Args:
        path: the path as given (a module's ``__file__``, a configured path), not resolved.
        worktree: the top of the checkout the code is in (``None``: no git tracks it).
        deploy_link: the link, named (``Guard.for_module(..., deploy_link=...)``);
            ``None``: the nearest symlinked directory on ``path``, taken when it names
            the checkout's top, or (outside git) when it names a release with a
            ``REVISION`` file or is ``path`` itself. Any other symlink on the way (a
            ``/home`` pointing elsewhere) is no deploy link.

    Raises:
        BindError: a named link is not a symlink, or the code is in none of its releases.
    """
    absolute = Path(os.path.abspath(path.expanduser()))  # noqa: PTH100 - normalised, not resolved
    if deploy_link is not None:
        named = Path(os.path.abspath(Path(deploy_link).expanduser()))  # noqa: PTH100
        if not named.is_symlink():
            raise BindError(named, "deploy_link must be a symlink (current -> releases/X)")
        # A checkout too must be one of the link's releases: a mistyped link would
        # otherwise make every guarded request a 409.
        loaded = _release_among(named, worktree or absolute.resolve())
        return DeployLink(named, _loaded(worktree or loaded))
    # The nearest symlinked directory on the path, going up from it.
    link = next((p for p in (absolute, *absolute.parents) if p.is_symlink() and p.is_dir()), None)
    if link is None:
        return None
    target = link.resolve()
    if worktree is not None:
        found = target == worktree
    else:
        found = absolute.resolve().is_relative_to(target) and (
            link == absolute or (target / REVISION_FILE).is_file()
        )
    return DeployLink(link, _loaded(target)) if found else None


def _release_among(link: Path, source: Path) -> Path:
    """The release ``source`` is in, among the directories ``link`` switches between
    (its target's siblings: ``releases/*``)."""
    try:
        releases = link.resolve(strict=True).parent
    except (OSError, RuntimeError):
        raise BindError(link, "the deploy link names no release") from None
    found = next((p for p in (source, *source.parents) if p.parent == releases), None)
    if found is None:
        raise BindError(source, f"is in none of the releases {link} switches between")
    return found


def _loaded(release: Path) -> Release:
    try:
        return Release(release, revision_of(release))
    except RefError as exc:
        raise BindError(release, f"cannot read the loaded release's revision: {exc.reason}") from None
    except OSError as exc:  # deleted since its path was resolved
        raise BindError(release, f"cannot read the loaded release: {exc.strerror or exc}") from None
