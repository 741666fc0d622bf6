"""What moved HEAD: the newest reflog entries, read in-process, turned into a :class:`Cause`.

git appends one line per ref update to ``logs/HEAD`` and to the branch's own log::

    <old id> <new id> <name> <<email>> <unix time> <+hhmm>\\t<action>: <message>

The action is git's ``GIT_REFLOG_ACTION`` ("pull: Fast-forward", "commit (amend): ...",
"checkout: moving from a to b", "reset: moving to HEAD~1", "rebase (finish): ...").

Everything here is pure: no threads, no processes, only bounded reads from the end of a
file. Reading a reflog is a diagnostic, never a decision: a missing, huge, truncated or
odd reflog gives ``None``, never an error. Whether the new commit is ahead of, behind or
diverged from the loaded one is derived from the chain of reflog entries alone (no
object is read): each action says how its new commit relates to its old one
(:mod:`.moves`: a commit is a child, a fast-forward a descendant, an amend a sibling,
``reset HEAD~k`` an ancestor), and those relations are composed from the loaded commit. Counts are
along the first-parent line; anything the chain cannot tell is ``unknown``.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import stat
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from ..core.cause import Cause
from ..core.revisions import is_object_id
from . import moves
from .packed import READ_FLAGS, pread
from .refs import GitDirs

logger = logging.getLogger(__name__)

_FIRST_READ = 16 * 1024  # the newest entries; almost always enough
_MAX_READ = 256 * 1024  # never more than this from one log, however large it is
_MAX_MESSAGE = 200
_MAX_NAME = 100
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_TZ = re.compile(rb"[+-][0-9]{4}")
_ZERO = frozenset("0")
_pread = getattr(os, "pread", pread)  # Windows has none: packed's seek and read


@dataclass(frozen=True)
class Entry:
    """One parsed reflog line.

    Attributes:
        old, new: the ref's value before and after (all zeros: none).
        name, email: who ran the command (git's committer identity), sanitised.
        at: Unix time of the update; ``tz``: its offset as written (``+0200``).
        message: the reflog message, sanitised and shortened.
    """

    old: str
    new: str
    name: str
    email: str
    at: int
    tz: str
    message: str


# -- parsing ----------------------------------------------------------------------------


def _text(raw: bytes, limit: int) -> str:
    # Names and messages reach log lines, terminals and hook environments (where a NUL
    # is fatal): no control characters, and a bounded length.
    return _CONTROL.sub("\ufffd", raw[: limit * 4].decode("utf-8", "replace"))[:limit].strip()


@functools.lru_cache(maxsize=256)  # lines of a few hundred bytes: tens of KiB
def parse_entry(line: bytes) -> Entry | None:
    """Parse one reflog line (without its newline); ``None`` if it is not one.

    Kept for the lines read again at the next update (a written line never changes):
    each update parses only the lines it adds."""
    header, _, message = line.partition(b"\t")
    parts = header.split(b" ", 2)
    if len(parts) != 3:
        return None
    old, new, ident = (parts[0].decode("ascii", "replace"), parts[1].decode("ascii", "replace"), parts[2])
    if not (is_object_id(old) and is_object_id(new) and len(old) == len(new)):
        return None
    close = ident.rfind(b">")
    start = ident.rfind(b"<", 0, close)
    if close < 0 or start < 0:
        return None
    when = ident[close + 1 :].split()
    if len(when) != 2 or not when[0].isdigit() or len(when[0]) > 12 or not _TZ.fullmatch(when[1]):
        return None
    return Entry(
        old=old,
        new=new,
        name=_text(ident[:start], _MAX_NAME),
        email=_text(ident[start + 1 : close], _MAX_NAME),
        at=int(when[0]),
        tz=when[1].decode("ascii"),
        message=_text(message, _MAX_MESSAGE),
    )


def parse_log(data: bytes, *, whole: bool) -> list[Entry]:
    """Parse the entries in a reflog's tail, oldest first.

    Only complete lines count: the text after the last newline (a line being written,
    or torn) is dropped, and so is the first line unless ``whole`` (the data starts at
    the file's start). Lines that do not parse are skipped.
    """
    return [entry for entry in map(parse_entry, _complete_lines(data, whole=whole)) if entry is not None]


def _complete_lines(data: bytes, *, whole: bool) -> list[bytes]:
    """The lines of a log's tail that are whole: not the one after the last newline
    (being written, or torn), nor the first unless the tail starts at the file's start."""
    return data.split(b"\n")[0 if whole else 1 : -1]


def _relation(entries: Sequence[Entry], target: int, loaded: str) -> moves.Rel:
    """Compose the relations from the first entry naming ``loaded`` up to ``target``."""
    start = next((i for i in range(target + 1) if loaded in (entries[i].old, entries[i].new)), None)
    if start is None:
        return moves.UNKNOWN
    # Each relation is a fact about two commits, true whenever it was derived (it does
    # not depend on when HEAD was where): so every entry since HEAD first left or reached
    # the loaded commit may teach something, and a commit seen twice keeps what it has.
    known: dict[str, moves.Rel] = {loaded: moves.SAME}
    for entry in entries[start : target + 1]:
        if entry.old == entry.new or _ZERO.issuperset(entry.old) or _ZERO.issuperset(entry.new):
            continue  # no move, or a ref created from or deleted to nothing: nothing to learn
        _, kind, steps_back = moves.classify(entry.message)[1:]
        old, new = known.get(entry.old, moves.UNKNOWN), known.get(entry.new, moves.UNKNOWN)
        if new[0] == "unknown":
            learnt, commit = moves.step(old, kind, steps_back), entry.new
        elif old[0] == "unknown" and kind == moves.CHILD and not steps_back:
            learnt, commit = moves.back(new, 1), entry.old  # a commit's old value is its first parent
        else:
            continue
        # Only the loaded commit itself is "same" (known from the start, never learnt): a
        # reflog that says so of another (edited, or not git's) contradicts itself.
        known[commit] = moves.UNKNOWN if learnt[0] == "same" else learnt
    return known.get(entries[target].new, moves.UNKNOWN)


def explain_entries(entries: Sequence[Entry], loaded: str | None, current: str) -> Cause | None:
    """The cause of HEAD being at ``current`` (the newest entry that moved it there)."""
    target = next((i for i in reversed(range(len(entries))) if entries[i].new == current), None)
    if target is None:
        return None
    entry = entries[target]
    if loaded == current:
        relation = moves.SAME
    elif loaded is None or _ZERO.issuperset(loaded):
        relation = moves.UNKNOWN
    else:
        relation = _relation(entries, target, loaded)
    action, detail, _, _ = moves.classify(entry.message)
    kind, ahead, behind = relation
    return Cause(
        action=action,
        detail=detail,
        message=entry.message,
        name=entry.name,
        email=entry.email,
        at=float(entry.at),
        tz=entry.tz,
        relation=kind,
        ahead=ahead if kind in ("ahead", "diverged") else None,
        behind=behind if kind in ("behind", "diverged") else None,
    )


# -- reading -------------------------------------------------------------------------------


def _read_tail(path: Path, limit: int) -> tuple[bytes, bool]:
    """Up to ``limit`` bytes from the end of a regular file, and whether that is all of it."""
    try:
        fd = os.open(path, READ_FLAGS)  # O_NONBLOCK: a FIFO planted here must not hang us
    except OSError:
        return b"", True
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return b"", True
        start = max(0, info.st_size - limit)
        return _pread(fd, info.st_size - start, start), start == 0
    except OSError:
        return b"", True
    finally:
        os.close(fd)


def relevant_entries(data: bytes, *, whole: bool, loaded: str | None, current: str) -> list[Entry]:
    """The entries :func:`explain_entries` needs from a log's tail, parsing no others.

    The same answer as parsing the whole tail: the newest entry that moved HEAD to
    ``current``, and those since the first line naming ``loaded`` (found by a byte
    search, so lines before it, which cannot name it, are never parsed).
    """
    lines = _complete_lines(data, whole=whole)
    width = len(current)
    wanted = current.encode("ascii", "replace")
    for target in range(len(lines) - 1, -1, -1):
        line = lines[target]
        if line[width + 1 : 2 * width + 1] != wanted:
            continue
        entry = parse_entry(line)
        if entry is not None and entry.new == current:
            break
    else:
        return []
    ids = loaded.encode("ascii", "replace") if loaded else None
    start = next((i for i in range(target) if ids and ids in lines[i][: 2 * width + 1]), target)
    return [entry for entry in map(parse_entry, lines[start : target + 1]) if entry is not None]


def _explain_log(path: Path, loaded: str | None, current: str) -> Cause | None:
    limit = _FIRST_READ
    while True:
        data, whole = _read_tail(path, limit)
        entries = relevant_entries(data, whole=whole, loaded=loaded, current=current)
        cause = explain_entries(entries, loaded, current)
        settled = cause is not None and cause.relation != "unknown"
        if settled or whole or limit >= _MAX_READ:
            return cause
        limit = _MAX_READ  # the loaded commit is further back: one larger read, bounded


def explain(dirs: GitDirs, chain: Sequence[Path], loaded: str | None, current: str) -> Cause | None:
    """Why HEAD is at ``current``: ``logs/HEAD`` first, then the branch's own log.

    Args:
        dirs: the checkout's git directories (a store without reflog files: ``None``).
        chain: the refs HEAD resolved through (from its store's ``resolve_head``).
        loaded: the commit the process loaded.
        current: the commit HEAD resolves to now.
    """
    found = None
    for log in dirs.store.reflogs(dirs, chain):
        cause = _explain_log(log, loaded, current)
        if found is None:
            found = cause  # the newest move of HEAD names the action
        elif cause is not None and cause.relation != "unknown":
            # The branch's log may reach further back: it can still tell the relation.
            return replace(found, relation=cause.relation, ahead=cause.ahead, behind=cause.behind)
        if found is not None and found.relation != "unknown":
            return found
    return found


def head_log(dirs: GitDirs) -> tuple[list[Entry], bool]:
    """The newest entries of ``logs/HEAD`` (oldest first, at most 256 KiB read) and
    whether they are all of it: where HEAD was, and since when.

    Empty for a store without reflog files (reftable), a missing or odd log: never an error.
    """
    logs = dirs.store.reflogs(dirs)
    if not logs:
        return [], False
    data, whole = _read_tail(logs[0], _MAX_READ)
    return parse_log(data, whole=whole), whole


def explain_move(dirs: GitDirs, chain: Sequence[Path], loaded: str | None, current: str) -> Cause | None:
    """:func:`explain`, for the watcher: a diagnostic never costs detection.

    The parser is total (property-tested); this last guard keeps an unforeseen bug in a
    diagnostic from ever failing a strict check or stopping a watcher.
    """
    try:
        return explain(dirs, chain, loaded, current)
    except Exception:
        logger.exception("stalewatch: could not read the reflog of %s; no cause", dirs.worktree)
        return None
