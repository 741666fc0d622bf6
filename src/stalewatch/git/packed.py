"""``packed-refs``, read as git reads it: searched in place, remembered per file identity.

Parsing a file of 100,000 refs on every read cost ~60 ms. Like git
(refs/packed-backend.c), a lookup binary-searches a file whose header says
``sorted``, reading only the pages it probes (``pread``); a file without the trait
is read and indexed once. A :class:`PackedFile` remembers a file's header and the
answers given, keyed by its identity (git's ``stat_validity``), so the same question
about an unchanged file costs one ``stat``.

A snapshot is cached only when its file was last changed :data:`RACY_NS` before it
was read: a file rewritten within one timestamp tick, on a recycled inode, with the
same size, keeps its stat data, and a cached snapshot would hide that change from a strict
check. A racy file is searched afresh on every lookup. The cache (``_cache``) is
process-wide.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ..core.cache import BoundedCache
from ..core.errors import RefError
from ..core.revisions import is_object_id_bytes

RACY_NS = 3_000_000_000
"""A file changed less than this long ago (ns) may change again without its stat data
changing: coarse filesystem timestamps tick at up to 2 s (FAT), 1 s (ext3, HFS+)."""
_MAX_FILE = 256 * 1024 * 1024  # an unsorted file is read whole: never more than this
# A record longer than this is malformed (git's ref names stay under PATH_MAX): a search
# reads at most this far for a line's ends, so a file with no line ends costs a few pages.
_MAX_LINE = 64 * 1024
_CHUNK = 1024 * 1024
_PAGE = 4096
_CACHE_ENTRIES = 4096
_MAX_ANSWERS = 64  # remembered per snapshot (a guard asks about one branch)
_HEADER = b"# pack-refs with:"

Key = tuple[int, int, int, int, int]
READ_FLAGS = (
    os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
)
"""How git's files are opened to be read (loose refs, reflogs too): a FIFO never blocks."""


def pread(fd: int, size: int, offset: int) -> bytes:
    """``os.pread``; where there is none (Windows), a seek and a read on our own fd."""
    if hasattr(os, "pread"):
        return os.pread(fd, size, offset)
    os.lseek(fd, offset, os.SEEK_SET)  # the fd is ours: moving its offset harms no one
    return os.read(fd, size)


def _key(st: os.stat_result) -> Key:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _unreadable(path: Path, exc: OSError) -> RefError:
    return RefError(path, f"cannot read: {exc.strerror or exc}")


class _Pages:
    """A file's bytes as far as a search needs them: ``pread`` of 4 KiB pages, kept."""

    def __init__(self, fd: int, size: int) -> None:
        self._fd, self._size = fd, size
        self._pages: dict[int, bytes] = {}

    def __len__(self) -> int:
        return self._size

    def _page(self, number: int) -> bytes:
        if number not in self._pages:
            self._pages[number] = pread(self._fd, _PAGE, number * _PAGE)
        return self._pages[number]

    def __getitem__(self, index: slice, /) -> bytes:
        start, stop, _ = index.indices(self._size)  # a file grown since it was sized is not read further
        first = start // _PAGE
        joined = b"".join(self._page(n) for n in range(first, (stop - 1) // _PAGE + 1))
        return joined[start - first * _PAGE : stop - first * _PAGE]

    def find(self, sub: bytes, start: int, end: int, /, *, reverse: bool = False) -> int:
        """``bytes.find`` (``rfind`` when ``reverse``) of the one byte ``sub``, page by page."""
        end = min(end, self._size)
        numbers = range(start // _PAGE, (end - 1) // _PAGE + 1)
        for number in reversed(numbers) if reverse else numbers:
            base, page = number * _PAGE, self._page(number)
            found = (page.rfind if reverse else page.find)(sub, max(start - base, 0), end - base)
            if found >= 0:
                return base + found
        return -1

    def count(self, sub: bytes, start: int, end: int, /) -> int:  # the error path only
        """Occurrences of the one byte ``sub``: read in chunks that are not kept."""
        end = min(end, self._size)
        chunks = (pread(self._fd, min(_CHUNK, end - at), at) for at in range(start, end, _CHUNK))
        return sum(chunk.count(sub) for chunk in chunks)


@dataclass(frozen=True, eq=False)
class PackedFile:
    """What is known of one version of a ``packed-refs`` file.

    Attributes:
        key: its identity when read (device, inode, size, mtime_ns, ctime_ns).
        body: offset of the first record (after the header line).
        index: every ref of a file not marked sorted, and its id (validated once);
            ``None`` when the header promises sorted records: binary search applies.
        found: answers given so far, by ref name.
    """

    key: Key
    body: int
    index: Mapping[bytes, bytes] | None = None
    found: dict[str, str | None] = field(default_factory=dict)


def _search(path: Path, snap: PackedFile, fd: int, name: str) -> str | None:
    """The object id ``snap``'s file (open at ``fd``) holds for ``name``, remembered."""
    wanted = name.encode("utf-8", "surrogateescape")
    if snap.index is not None:
        value = snap.index.get(wanted)
    else:
        try:
            value = _bisect(path, _Pages(fd, snap.key[2]), snap.body, wanted)
        except OSError as exc:
            raise _unreadable(path, exc) from exc
    answer = None if value is None else value.decode("ascii")
    if len(snap.found) < _MAX_ANSWERS:
        snap.found[name] = answer
    return answer


def _bisect(path: Path, data: _Pages, body: int, wanted: bytes) -> bytes | None:
    """git's find_reference_location: binary search over sorted records."""
    lo, hi = body, len(data)
    # Invariant: lo and hi are record starts (a ref line, never a "^" peeled line).
    # Each probe moves lo past a record or hi down to one: at most ~log2(n) probes.
    while lo < hi:
        mid = lo + (hi - lo) // 2
        start = _line_start(path, data, lo, mid)
        if data[start : start + 1] == b"^":  # a peeled line belongs to the record above
            if start <= lo:
                raise _malformed(path, data, start, "peeled line without a ref")
            _peeled_end(path, data, start)
            above = _line_start(path, data, lo, start - 1)
            if data[above : above + 1] == b"^":
                raise _malformed(path, data, start, "two peeled lines in a row")
            start = above
        end = _line_end(path, data, start)
        oid, _, ref = data[start:end].partition(b" ")
        if not is_object_id_bytes(oid) or not ref:
            raise _malformed(path, data, start, "expected '<object id> <ref>'")
        if ref == wanted:
            return oid
        if ref < wanted:
            lo = end + 1
            while data[lo : lo + 1] == b"^":  # skip this record's peeled line
                lo = _peeled_end(path, data, lo) + 1
            lo = min(lo, hi)
        else:
            hi = start
    return None


def _peeled_end(path: Path, data: _Pages, start: int) -> int:
    """Where the peeled line at ``start`` ends, once it is found well formed."""
    end = _line_end(path, data, start)
    if not is_object_id_bytes(data[start + 1 : end]):
        raise _malformed(path, data, start, "malformed peeled line")
    return end


def _line_start(path: Path, data: _Pages, lo: int, at: int) -> int:
    """Where the line holding the byte before ``at`` starts (``lo`` at the earliest)."""
    floor = max(lo, at - _MAX_LINE - 1)
    newline = data.find(b"\n", floor, at, reverse=True)
    if newline >= 0:
        return newline + 1
    if floor > lo:
        raise _malformed(path, data, at, f"a line longer than {_MAX_LINE} bytes")
    return lo


def _line_end(path: Path, data: _Pages, start: int) -> int:
    """Where the line at ``start`` ends: its newline, or the end of the file."""
    end = data.find(b"\n", start, start + _MAX_LINE + 1)
    if end >= 0:
        return end
    if start + _MAX_LINE < len(data):
        raise _malformed(path, data, start, f"a line longer than {_MAX_LINE} bytes")
    return len(data)


def _malformed(path: Path, data: bytes | _Pages, offset: int, what: str) -> RefError:
    line = data[offset : offset + 80].split(b"\n", 1)[0]
    if offset > _MAX_FILE:  # counting lines would read that much
        return RefError(path, f"malformed line at byte {offset} ({what}): {line!r}")
    number = data.count(b"\n", 0, offset) + 1
    return RefError(path, f"malformed line {number} ({what}): {line!r}")


def _index(path: Path, data: bytes, body: int) -> dict[bytes, bytes]:
    """Every ref of an unsorted file and its id, in one validating pass."""
    refs: dict[bytes, bytes] = {}
    offset, after_ref = body, False
    for line in data[body:].split(b"\n"):
        here, offset = offset, offset + len(line) + 1
        peeled, is_ref = line[:1] == b"^", line[:1] not in (b"", b"#", b"^")
        oid, _, ref = line.partition(b" ")
        if peeled and not after_ref:
            raise _malformed(path, data, here, "peeled line without a ref")
        if peeled and not is_object_id_bytes(line[1:]):
            raise _malformed(path, data, here, "malformed peeled line")
        if is_ref and (not is_object_id_bytes(oid) or not ref):
            raise _malformed(path, data, here, "expected '<object id> <ref>'")
        if is_ref:
            refs.setdefault(ref, oid)  # the first record wins, as a linear scan finds it
        after_ref = is_ref
    return refs


def _snapshot(path: Path, fd: int, st: os.stat_result) -> PackedFile:
    """Read what a snapshot keeps: the header, and the whole of an unsorted file."""
    if not stat.S_ISREG(st.st_mode):
        raise RefError(path, "not a regular file")
    try:
        head = pread(fd, _PAGE, 0)
        line, newline, _ = head.partition(b"\n")
        header = head.startswith(_HEADER)
        if header and not newline and len(head) == _PAGE:
            raise RefError(path, "malformed line 1 (a header longer than a page)")
        body = min(len(line) + len(newline), st.st_size) if header else 0
        if header and b"sorted" in line[len(_HEADER) :].split():
            return PackedFile(_key(st), body)
        if st.st_size > _MAX_FILE:
            raise RefError(path, f"larger than {_MAX_FILE} bytes and not sorted")
        chunks, size = [], 0
        while chunk := pread(fd, max(st.st_size - size, 0) + 65536, size):
            chunks.append(chunk)
            size += len(chunk)
            if size > _MAX_FILE:  # grew while read
                raise RefError(path, f"larger than {_MAX_FILE} bytes")
    except OSError as exc:
        raise _unreadable(path, exc) from exc
    return PackedFile(_key(st), body, _index(path, b"".join(chunks), body))


_cache: BoundedCache[str, PackedFile] = BoundedCache(_CACHE_ENTRIES)  # by path


def _settled(key: Key, now_ns: int) -> bool:
    """True when the file's stat data will change with its next write (not racy)."""
    return now_ns - max(key[3], key[4]) >= RACY_NS


def lookup(path: Path, name: str) -> str | None:
    """The object id ``packed-refs`` at ``path`` holds for ``name``; ``None`` if none.

    Peeled lines (``^<id>``, what an annotated tag points to) are never returned.

    Raises:
        RefError: the file cannot be read, is not a regular file, or a line the search
            reads is malformed (an unsorted file is validated whole).
    """
    where = str(path)
    try:
        key = _key(os.stat(where))  # noqa: PTH116 - on every strict check: no pathlib overhead
        snap = _cache.get(where)
        if snap is not None and snap.key == key and name in snap.found:
            return snap.found[name]  # a remembered answer about this version of the file
        now = time.time_ns()
        fd = os.open(where, READ_FLAGS)  # O_NONBLOCK: a FIFO planted here must not hang the reader
    except (FileNotFoundError, NotADirectoryError):
        return None  # no file (or removed since the stat)
    except OSError as exc:
        raise _unreadable(path, exc) from exc
    try:
        st = os.fstat(fd)  # the identity of what is read, even if the path is replaced now
        if snap is None or snap.key != _key(st):
            snap = _snapshot(path, fd, st)
        answer = _search(path, snap, fd, name)
    finally:
        os.close(fd)
    if _settled(snap.key, now):
        _cache.put(where, snap)
    return answer
