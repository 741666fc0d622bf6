"""What to watch for one checkout, and which writes matter: pure, no threads, no watchdog.

Only a few files can move HEAD's commit: ``HEAD``, the loose ref of each symbolic ref
HEAD goes through (``refs/heads/main``), ``packed-refs``, and reftable's
``tables.list``; for code that came through a deploy link, the link too
(:attr:`GitDirs.deploy_link`). A plan watches just their directories, each
non-recursively, so a watch refused for lack of inotify watches raises instead of
being skipped inside a recursive watch, and ``git fetch`` or tag traffic never wakes
anyone. It also
watches the worktree and its parent, so the checkout or its ``.git`` being moved,
deleted or swapped is seen at once (it must block) — but only for that: those two are
``narrow`` (no content writes are watched there, so an app's log file in or beside
the checkout wakes nothing, issue 12). A directory the watcher may not read (a
traverse-only parent) cannot be watched; the identity check of every
re-verification backs that case up. For each watched directory the plan names the
entries in it that matter (:meth:`Plan.names`); events for any other name are
dropped on the reader thread. A plan is remade whenever HEAD is re-resolved:
switching branches moves the watches with HEAD.
"""

from __future__ import annotations

import enum
import functools
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..git.refs import GitDirs


class Relevance(enum.Enum):
    """What a write at some path means to the watcher."""

    NONE = "none"  # nothing that can move HEAD's commit
    REF = "ref"  # re-resolve HEAD (and re-plan: the chain may have changed)
    ANCHOR = "anchor"  # the checkout or a git dir itself moved: re-watch from scratch


@dataclass(frozen=True)
class Plan:
    """The directories to watch and the paths in them that matter.

    Attributes:
        watch: existing directories to watch, each non-recursively.
        anchors: the worktree, its git dirs and its ``.git``: identity checked on
            every health tick, and a write *at* one of these paths means "re-watch".
        files: files whose writes can move HEAD's commit.
        parents: directories from ``refs/`` (included) to a chain ref; created or
            deleted (``git checkout -b a/b``, ``pack-refs``), they change the plan.
        narrow: watched directories that matter only as the home of an anchor (the
            worktree and its parent): watched for renames, creations, deletions and
            permission changes, never for writes to file contents.
        interest: for each watched directory, the names in it that matter.
    """

    watch: frozenset[Path] = frozenset()
    anchors: frozenset[str] = frozenset()
    files: frozenset[str] = frozenset()
    parents: frozenset[str] = frozenset()
    narrow: frozenset[Path] = frozenset()
    interest: Mapping[Path, frozenset[str]] = field(default_factory=dict)

    def names(self, directory: Path) -> frozenset[str]:
        """The entries of watched ``directory`` whose changes matter (see :meth:`relevance`)."""
        return self.interest.get(directory, frozenset())

    def relevance_in(self, directory: Path, name: str) -> Relevance:
        """What an event in watched ``directory`` means: about entry ``name``, or ``""``
        for the directory itself (deleted, moved away, unmounted)."""
        if name:
            return self.relevance(os.path.join(directory, name))  # noqa: PTH118 - every event: no Path
        if directory in self.narrow or str(directory) in self.anchors:
            return Relevance.ANCHOR  # the checkout, or where it lives, moved: re-watch
        return Relevance.REF  # a ref directory went away: plan again

    def relevance(self, path: str) -> Relevance:
        """What a write at ``path`` (created, modified, moved to/from, deleted) means."""
        if path in self.files or path in self.parents:
            return Relevance.REF
        if path in self.anchors:
            return Relevance.ANCHOR
        return Relevance.NONE


def anchors(dirs: GitDirs) -> frozenset[str]:
    """The worktree, its ``.git`` and its git dirs: moved or replaced, they mean "re-watch".

    Behind a deploy link, only the link's directory: the release is read through the
    link, and one switched away from is deleted in the normal course (git-sync's default).
    """
    link = _link(dirs)
    if link is not None:
        return frozenset({str(link.parent)})
    return frozenset(str(p) for p in (dirs.worktree, dirs.worktree / ".git", dirs.git_dir, dirs.common_dir))


def _link(dirs: GitDirs) -> Path | None:
    """The deploy link where it is: in its directory resolved (a watch never follows the
    last component of its path, so a symlinked directory could not be watched)."""
    link = dirs.deploy_link
    return None if link is None else Path(os.path.realpath(link.parent)) / link.name


def plan(dirs: GitDirs, chain: Sequence[Path] | None = None) -> Plan:
    """Make the watch plan for ``dirs``.

    Args:
        dirs: the checkout's git directories.
        chain: the loose refs HEAD's last resolution went through (what
            the store's ``resolve_head`` collects); ``None``: read HEAD
            now to find them.
    """
    return Planner(dirs).plan(chain)


def _walk(dirs: GitDirs, ref: Path) -> tuple[tuple[Path, str], ...]:
    """The directories to try for ``ref``, deepest first: its own, then its ancestors up
    to (not including) ``refs/``'s base."""
    base = dirs.git_dir if ref.is_relative_to(dirs.git_dir / "refs") else dirs.common_dir
    steps = []
    directory = ref.parent
    while directory != base and directory.is_relative_to(base):
        steps.append((directory, str(directory)))
        directory = directory.parent
    steps.append((base, str(base)))
    return tuple(steps)


class Planner:
    """:func:`plan` for one checkout, cheap to call on every re-resolve.

    A plan depends on HEAD's chain and on which of a few directories exist. The
    planner checks just those (a ``stat`` each) and hands back the same :class:`Plan`
    object for the same answers, instead of building one anew (pathlib work costing
    more than the resolve itself); both remembered up to a bound (a long life of
    branch switches).
    """

    def __init__(self, dirs: GitDirs) -> None:
        self._dirs = dirs
        fixed = [dirs.worktree.parent, dirs.worktree, dirs.git_dir, dirs.common_dir]
        wide = {dirs.git_dir, dirs.common_dir}
        watched = dirs.store.watched(dirs)
        files = {dirs.head_file, *watched}
        fixed += (path.parent for path in watched)  # the store's own directories (reftable/)
        wide.update(path.parent for path in watched)
        link = _link(dirs)
        if link is not None:
            # A deploy is a rename onto the link's name: planned like a ref file, in a
            # directory watched for renames and creations only (narrow).
            files.add(link)
            fixed.append(link.parent)
        self._fixed = tuple(dict.fromkeys((p, str(p)) for p in fixed))
        self._walk = walk = functools.lru_cache(256)(functools.partial(_walk, dirs))
        # A function of the planner's parts, not a bound method: a cache on the planner
        # that held the planner would keep a stopped watcher's until the cycle collector.
        self._build = functools.lru_cache(64)(functools.partial(_make, (dirs, files, wide, walk)))

    def plan(self, chain: Sequence[Path] | None = None) -> Plan:
        """The plan for ``chain`` (``None``: read HEAD now) and the directories as they are."""
        refs = tuple(self._dirs.store.head_chain(self._dirs) if chain is None else chain)
        # os.path on strings: a stat each, without pathlib's per-call cost.
        existing = tuple(path for path, text in self._fixed if os.path.isdir(text))  # noqa: PTH112
        # Each ref's directory, or the deepest one of its ancestors that exists, so the
        # directory's creation is seen and the plan moves down to it.
        homes = tuple(
            next((path for path, text in self._walk(ref) if os.path.isdir(text)), None)  # noqa: PTH112
            for ref in refs
        )
        return self._build(refs, existing, homes)


def _make(
    parts: tuple[GitDirs, set[Path], set[Path], Callable[[Path], Sequence[tuple[Path, str]]]],
    refs: Sequence[Path],
    existing: Sequence[Path],
    homes: Sequence[Path | None],
) -> Plan:
    """The plan a :class:`Planner` builds for what it found (``parts``: its own, fixed)."""
    dirs, fixed_files, fixed_wide, walk = parts
    files, watch, wide, parents = set(fixed_files), set(existing), set(fixed_wide), set[Path]()
    for ref, home in zip(refs, homes, strict=True):
        if home is None:
            continue  # its git dir is gone (a release deleted): nothing there to watch
        files.add(ref)
        watch.add(home)
        wide.add(home)
        # Its directories up to refs/ itself: a linked worktree's git dir has none
        # until its first per-worktree ref (refs/worktree/, refs/bisect/) is written.
        parents.update(path for path, _ in walk(ref)[:-1])
    marks = anchors(dirs)
    interest: dict[Path, set[str]] = {directory: set() for directory in watch}
    for path in (*files, *parents, *(Path(a) for a in marks)):
        if path.parent in interest:
            interest[path.parent].add(path.name)
    return Plan(
        # Ref directories are not filtered again: one git removes right after the
        # check above fails to be watched, and the watcher plans again (never a
        # blind gap).
        watch=frozenset(watch),
        anchors=marks,
        files=frozenset(str(p) for p in files),
        parents=frozenset(str(p) for p in parents),
        narrow=frozenset(watch - wide),
        interest={directory: frozenset(names) for directory, names in interest.items()},
    )
