"""``packed-refs``, read as git reads it: a snapshot per file identity, searched in place.

A repository with a monorepo's tags or a busy remote packs 100,000 refs and more;
parsing that whole file on every read costs ~60 ms. Like git (refs/packed-backend.c),
a :class:`Snapshot` keeps the file's bytes keyed by its identity — device, inode,
size, mtime and ctime, git's ``stat_validity`` — and finds a ref by binary search
over the bytes when the header says ``sorted`` (git has written it so since 2.0);
otherwise it indexes the file once. A lookup in a cached snapshot costs one
``stat`` and ~17 probes.

A snapshot is reused only when its file was last changed well before it was read
(:data:`RACY_NS`): a file rewritten twice within one timestamp tick, on a recycled
inode, with the same size, keeps its stat data, and only a file whose timestamps are
older than any tick can be told apart from its successor (C10). Racy files are read
afresh on every lookup until they age.

Pure: no threads, no processes; the cache is guarded by a lock.
"""

from __future__ import annotations

import os
import stat
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import RefError

__all__ = ["RACY_NS", "Snapshot", "clear_cache", "lookup", "read_snapshot"]

RACY_NS = 3_000_000_000
"""A file changed less than this long ago (ns) may change again without its stat data
changing: coarse filesystem timestamps tick at up to 2 s (FAT), 1 s (ext3, HFS+)."""
_MAX_FILE = 256 * 1024 * 1024  # never hold more than this in memory for one file
_CACHE_ENTRIES = 4096
_CACHE_BYTES = 128 * 1024 * 1024
_HEADER = b"# pack-refs with:"
_HEX = frozenset(b"0123456789abcdef")

Key = tuple[int, int, int, int, int]


def _key(st: os.stat_result) -> Key:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _is_oid(value: bytes) -> bool:
    return len(value) in (40, 64) and _HEX.issuperset(value)


@dataclass(frozen=True, eq=False)
class Snapshot:
    """One version of a ``packed-refs`` file.

    Attributes:
        path: the file it was read from.
        key: its identity when read (device, inode, size, mtime_ns, ctime_ns).
        data: its bytes.
        sorted: the header promises sorted records: binary search applies.
        body: offset of the first record (after the header line).
        index: for a file not marked sorted, every ref and its id (validated once).
    """

    path: Path
    key: Key
    data: bytes
    sorted: bool
    body: int
    index: Mapping[bytes, bytes] | None = None

    def find(self, name: str) -> str | None:
        """The object id this snapshot holds for ref ``name``, ``None`` if none.

        Raises:
            RefError: a line this lookup had to read is malformed (its number is named).
        """
        wanted = name.encode("utf-8", "surrogateescape")
        found = self._bisect(wanted) if self.index is None else self.index.get(wanted)
        return None if found is None else found.decode("ascii")

    # -- sorted: binary search over the bytes (git's find_reference_location) -----

    def _bisect(self, wanted: bytes) -> bytes | None:
        data, lo, hi = self.data, self.body, len(self.data)
        # Invariant: lo and hi are record starts (a ref line, never a "^" peeled line).
        # Each probe moves lo past a record or hi down to one: at most ~log2(n) probes.
        while lo < hi:
            mid = lo + (hi - lo) // 2
            newline = data.rfind(b"\n", lo, mid)
            start = lo if newline < 0 else newline + 1
            if data.startswith(b"^", start):  # a peeled line belongs to the record above
                if start <= lo:
                    raise self._malformed(start, "peeled line without a ref")
                following = data.find(b"\n", start)
                if not _is_oid(data[start + 1 : len(data) if following < 0 else following]):
                    raise self._malformed(start, "malformed peeled line")
                newline = data.rfind(b"\n", lo, start - 1)
                above = lo if newline < 0 else newline + 1
                if data.startswith(b"^", above):
                    raise self._malformed(start, "two peeled lines in a row")
                start = above
            end = data.find(b"\n", start)
            end = len(data) if end < 0 else end
            oid, _, ref = data[start:end].partition(b" ")
            if not _is_oid(oid) or not ref:
                raise self._malformed(start, "expected '<object id> <ref>'")
            if ref == wanted:
                return oid
            if ref < wanted:
                lo = end + 1
                while data.startswith(b"^", lo):  # skip this record's peeled line
                    following = data.find(b"\n", lo)
                    following = len(data) if following < 0 else following
                    if not _is_oid(data[lo + 1 : following]):
                        raise self._malformed(lo, "malformed peeled line")
                    lo = following + 1
                lo = min(lo, hi)
            else:
                hi = start
        return None

    def _malformed(self, offset: int, what: str) -> RefError:
        return _malformed(self.path, self.data, offset, what)


def _malformed(path: Path, data: bytes, offset: int, what: str) -> RefError:
    number = data.count(b"\n", 0, offset) + 1
    end = data.find(b"\n", offset)
    line = data[offset : len(data) if end < 0 else end][:80]
    return RefError(path, f"malformed line {number} ({what}): {line!r}")


def _index(path: Path, data: bytes, body: int) -> dict[bytes, bytes]:
    """Every ref of an unsorted file and its id, in one validating pass."""
    refs: dict[bytes, bytes] = {}
    offset, after_ref = body, False
    for line in data[body:].split(b"\n"):
        here, offset = offset, offset + len(line) + 1
        if not line or line.startswith(b"#"):
            after_ref = False
            continue
        if line.startswith(b"^"):
            if not after_ref:
                raise _malformed(path, data, here, "peeled line without a ref")
            if not _is_oid(line[1:]):
                raise _malformed(path, data, here, "malformed peeled line")
            after_ref = False
            continue
        oid, _, ref = line.partition(b" ")
        if not _is_oid(oid) or not ref:
            raise _malformed(path, data, here, "expected '<object id> <ref>'")
        refs.setdefault(ref, oid)  # the first record wins, as a linear scan finds it
        after_ref = True
    return refs


def read_snapshot(path: Path) -> Snapshot | None:
    """Read ``path`` now (no cache); ``None`` when it does not exist.

    Raises:
        RefError: the file cannot be read, is not a regular file, or is too large.
    """
    try:
        # O_NONBLOCK: a FIFO planted here must not hang the reader.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        raise RefError(path, f"cannot read: {exc.strerror or exc}") from exc
    try:
        st = os.fstat(fd)  # the identity of what is read, even if the path is replaced now
        if not stat.S_ISREG(st.st_mode):
            raise RefError(path, "not a regular file")
        if st.st_size > _MAX_FILE:
            raise RefError(path, f"larger than {_MAX_FILE} bytes")
        chunks, size = [], 0
        while chunk := os.read(fd, max(st.st_size - size, 0) + 65536):
            chunks.append(chunk)
            size += len(chunk)
            if size > _MAX_FILE:  # grew while read
                raise RefError(path, f"larger than {_MAX_FILE} bytes")
    except OSError as exc:
        raise RefError(path, f"cannot read: {exc.strerror or exc}") from exc
    finally:
        os.close(fd)
    data = b"".join(chunks)
    body, is_sorted = 0, False
    if data.startswith(_HEADER):
        end = data.find(b"\n")
        end = len(data) if end < 0 else end
        is_sorted = b"sorted" in data[len(_HEADER) : end].split()
        body = min(end + 1, len(data))
    index = None if is_sorted else _index(path, data, body)
    return Snapshot(path, _key(st), data, is_sorted, body, index)


class _Cache:
    """Snapshots by path, least recently used first, bounded in entries and bytes."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.entries: OrderedDict[str, Snapshot] = OrderedDict()
        self.size = 0

    def get(self, path: str, key: Key) -> Snapshot | None:
        with self.lock:
            snap = self.entries.get(path)
            if snap is None or snap.key != key:
                return None
            self.entries.move_to_end(path)
            return snap

    def put(self, path: str, snap: Snapshot) -> None:
        if len(snap.data) > _CACHE_BYTES // 4:
            return  # one giant file must not evict every other repository's
        with self.lock:
            old = self.entries.pop(path, None)
            if old is not None:
                self.size -= len(old.data)
            self.entries[path] = snap
            self.size += len(snap.data)
            while len(self.entries) > _CACHE_ENTRIES or self.size > _CACHE_BYTES:
                _, evicted = self.entries.popitem(last=False)
                self.size -= len(evicted.data)

    def clear(self) -> None:
        with self.lock:
            self.entries.clear()
            self.size = 0


_cache = _Cache()


def _settled(key: Key, now_ns: int) -> bool:
    """True when the file's stat data will change with its next write (not racy)."""
    return now_ns - max(key[3], key[4]) >= RACY_NS


def lookup(path: Path, name: str) -> str | None:
    """The object id ``packed-refs`` at ``path`` holds for ``name``; ``None`` if none.

    Peeled lines (``^<id>``, what an annotated tag points to) are never returned.

    Raises:
        RefError: the file cannot be read, or a line the search reads is malformed.
    """
    where = str(path)
    try:
        key = _key(path.stat())
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        raise RefError(path, f"cannot read: {exc.strerror or exc}") from exc
    snap = _cache.get(where, key)
    if snap is None:
        now = time.time_ns()
        snap = read_snapshot(path)
        if snap is None:
            return None
        if _settled(snap.key, now):
            _cache.put(where, snap)
    return snap.find(name)


def clear_cache() -> None:
    """Forget every snapshot (tests, and a process that wants its memory back)."""
    _cache.clear()
