"""stalewatch.git.packed at its edges: page boundaries, the bounds, and the file named in every error.

A sorted file is searched through 4 KiB pages; an error meets the search where a
probe lands. These tests place the probe on purpose (:func:`probing`) so each error
path of the search is reached, and check the whole error: the file and the reason.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from stalewatch.core.errors import RefError
from stalewatch.git import packed
from tests.support.packed_refs import find, snapshot

HEADER = b"# pack-refs with: peeled fully-peeled sorted \n"
UNSORTED = b"# pack-refs with: peeled \n"
PAGE = packed._PAGE
LONG = f"a line longer than {packed._MAX_LINE} bytes"


@pytest.fixture(autouse=True)
def fresh_cache() -> Iterator[None]:
    packed._cache.clear()
    yield
    packed._cache.clear()


def oid(i: int) -> str:
    return f"{i:040x}"


def record(i: int, name: str) -> bytes:
    return f"{oid(i)} {name}\n".encode()


def fillers(size: int, prefix: str) -> list[bytes]:
    """Records of exactly ``size`` bytes in all, named ``prefix`` + a number (in order)."""
    lines: list[bytes] = []
    while size:
        base = len(record(0, f"{prefix}{len(lines):04d}"))
        take = size if size <= 1000 else min(1000, size - base)  # never leave less than a record
        assert take >= base, f"{size} bytes cannot be filled with records"
        lines.append(record(len(lines), f"{prefix}{len(lines):04d}" + "x" * (take - base)))
        size -= take
    return lines


def probing(lines: list[bytes], target: int) -> bytes:
    """A sorted file whose first probe lands on ``lines[target]``: records are added
    before (names ``refs/0/...``) and after (``refs/zz/...``) to move the middle there."""
    start = sum(len(line) for line in lines[:target])
    total = sum(len(line) for line in lines)
    # The middle of the body, relative to the body, must fall within [start, end of line].
    want = 2 * start + len(lines[target]) - 1 - total  # after - before, to land mid-line
    after, before = max(want, 0), max(-want, 0)
    if 0 < after < 200 or 0 < before < 200:  # too few bytes for a record: pad both sides
        after, before = after + 300, before + 300
    body = b"".join([*fillers(before, "refs/0/"), *lines, *fillers(after, "refs/zz/")])
    middle = len(body) // 2
    assert before + start <= middle < before + start + len(lines[target])  # the probe is there
    return HEADER + body


def line_number(data: bytes, offset: int) -> int:
    return data.count(b"\n", 0, offset) + 1


def refused(path: Path, name: str) -> tuple[Path | str, str]:
    with pytest.raises(RefError) as info:
        packed.lookup(path, name)
    return info.value.path, info.value.reason


# --- the paged file: what the search reads must be the bytes, at every page boundary


BOUNDARIES = [0, 1, PAGE - 2, PAGE - 1, PAGE, PAGE + 1, PAGE + 5, 2 * PAGE - 1, 2 * PAGE, 2 * PAGE + 1]


@pytest.mark.unit
@pytest.mark.parametrize("newline", BOUNDARIES)
def test_a_paged_file_finds_a_newline_on_either_side_of_every_page_boundary(
    tmp_path: Path, newline: int
) -> None:
    data = bytearray(b"a" * (3 * PAGE))
    data[newline] = ord("\n")
    path = tmp_path / "packed-refs"
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    try:
        pages = packed._Pages(fd, len(data))
        edges = [*BOUNDARIES, len(data), len(data) + 5]
        for lo in edges:
            assert pages[lo:] == data[lo:]
            for hi in edges:
                where = (newline, lo, hi)
                assert pages[lo:hi] == data[lo:hi], where
                assert pages.find(b"\n", lo, hi) == data.find(b"\n", lo, hi), where
                assert pages.find(b"\n", lo, hi, reverse=True) == data.rfind(b"\n", lo, hi), where
    finally:
        os.close(fd)


@pytest.mark.unit
def test_a_paged_file_that_shrank_since_it_was_sized_reads_what_is_left(tmp_path: Path) -> None:
    data = (b"x" * 99 + b"\n") * 50
    path = tmp_path / "packed-refs"
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    try:
        pages = packed._Pages(fd, len(data) + 3 * PAGE)  # sized before it was cut
        assert pages.count(b"\n", 0, len(pages)) == 50
        assert pages.find(b"y", 0, len(pages)) == -1
        assert pages[len(data) - 5 : len(pages)] == data[-5:]
    finally:
        os.close(fd)


@pytest.mark.unit
def test_without_pread_a_seek_and_a_read_give_the_same_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = bytes(range(256)) * 40
    path = tmp_path / "packed-refs"
    path.write_bytes(data)
    monkeypatch.delattr(os, "pread")  # as on Windows
    fd = os.open(path, os.O_RDONLY)
    try:
        for offset, size in ((0, 10), (PAGE, PAGE), (len(data) - 3, 100), (7, 0), (len(data) + 1, 5)):
            assert packed.pread(fd, size, offset) == data[offset : offset + size]
    finally:
        os.close(fd)


@pytest.mark.unit
def test_a_lookup_reads_a_few_pages_of_a_large_sorted_file_and_each_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = [f"refs/tags/v{i:06d}" for i in range(50_000)]
    path = tmp_path / "packed-refs"
    path.write_bytes(HEADER + b"".join(record(i, name) for i, name in enumerate(names)))
    snap = snapshot(path)
    assert snap.index is None  # sorted
    reads: list[int] = []
    real = packed.pread

    def counting(fd: int, size: int, offset: int) -> bytes:
        reads.append(offset)
        return real(fd, size, offset)

    monkeypatch.setattr(packed, "pread", counting)
    for i in (0, 1, 17_000, 49_998, 49_999):
        reads.clear()
        assert find(path, snap, names[i]) == oid(i)
        assert len(reads) == len(set(reads)), f"a page read twice: {sorted(reads)}"
        assert len(reads) <= 40 < path.stat().st_size // PAGE  # ~log2(50,000) probes, not the file


# --- the search's error paths: the probe meets the bad line, the error names it


@pytest.mark.parametrize(
    "probe",
    [
        pytest.param(1, id="the-probe-lands-on-it"),
        # The probe reads record a, moves past it, and meets its peeled line while skipping it.
        pytest.param(0, id="it-follows-the-record-the-probe-lands-on"),
    ],
)
def test_a_long_peeled_line_is_named_where_the_probe_meets_it(tmp_path: Path, probe: int) -> None:
    lines = [record(1, "refs/heads/a"), b"^" + b"f" * 70_000 + b"\n", record(3, "refs/heads/c")]
    data = probing(lines, probe)
    path = tmp_path / "packed-refs"
    path.write_bytes(data)
    at = data.index(b"^")
    assert refused(path, "refs/heads/b") == (
        path,
        f"malformed line {line_number(data, at)} ({LONG}): {data[at : at + 80]!r}",
    )


def test_a_malformed_peeled_line_after_the_record_the_probe_lands_on_is_named(tmp_path: Path) -> None:
    lines = [record(1, "refs/heads/a"), b"^zz\n", record(3, "refs/heads/c")]
    data = probing(lines, 0)
    path = tmp_path / "packed-refs"
    path.write_bytes(data)
    at = data.index(b"^zz")
    reason = f"malformed line {line_number(data, at)} (malformed peeled line): b'^zz'"
    assert refused(path, "refs/heads/b") == (path, reason)
    assert packed.lookup(path, "refs/heads/a") == oid(1)  # the probe's own record reads well


@pytest.mark.parametrize("length", [packed._MAX_LINE, packed._MAX_LINE + 1])
def test_the_record_above_a_peeled_line_is_read_up_to_the_longest_line_and_no_further(
    tmp_path: Path, length: int
) -> None:
    # The probe lands on the peeled line; the search looks back for its record's start.
    name = "refs/heads/a" + "x" * (length - 41 - len("refs/heads/a"))
    lines = [record(0, "refs/heads/0"), record(1, name), f"^{oid(2)}\n".encode(), record(3, "refs/heads/c")]
    data = probing(lines, 2)
    path = tmp_path / "packed-refs"
    path.write_bytes(data)
    if length == packed._MAX_LINE:
        assert packed.lookup(path, name) == oid(1)
        return
    newline = data.index(b"\n^")  # where the long record ends
    assert refused(path, name) == (path, f"malformed line {line_number(data, newline)} ({LONG}): b''")


def test_an_empty_line_above_a_peeled_line_is_malformed_not_skipped(tmp_path: Path) -> None:
    lines = [record(1, "refs/heads/a"), b"\n", f"^{oid(2)}\n".encode(), record(3, "refs/heads/c")]
    data = probing(lines, 2)
    path = tmp_path / "packed-refs"
    path.write_bytes(data)
    empty = data.index(b"\n\n^") + 1
    reason = f"malformed line {line_number(data, empty)} (expected '<object id> <ref>'): b''"
    for name in ("refs/heads/a", "refs/heads/b", "refs/heads/c"):
        assert refused(path, name) == (path, reason)


def test_a_line_too_long_where_the_probe_lands_is_named_from_the_probe(tmp_path: Path) -> None:
    lines = [record(1, "refs/heads/a"), record(2, "refs/heads/b" + "x" * 200_000), record(3, "refs/heads/c")]
    data = HEADER + b"".join(lines)
    path = tmp_path / "packed-refs"
    path.write_bytes(data)
    middle = len(HEADER) + (len(data) - len(HEADER)) // 2  # 100 KB into the long line
    assert refused(path, "refs/heads/c") == (path, f"malformed line 3 ({LONG}): {b'x' * 80!r}")
    assert data[middle : middle + 80] == b"x" * 80


@pytest.mark.parametrize("length", [60, packed._MAX_LINE])
def test_the_last_record_may_lack_its_newline(tmp_path: Path, length: int) -> None:
    last = "refs/tags/z" + "z" * (length - 41 - len("refs/tags/z"))
    data = HEADER + record(1, "refs/heads/a") + record(2, "refs/heads/b") + f"{oid(3)} {last}".encode()
    path = tmp_path / "packed-refs"
    path.write_bytes(data)
    assert packed.lookup(path, last) == oid(3)
    assert packed.lookup(path, "refs/heads/b") == oid(2)
    assert packed.lookup(path, last + "z") is None


# --- snapshots: the header, the bounds of an unsorted file, errors while reading


def test_a_sorted_header_without_a_newline_is_an_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "packed-refs"
    path.write_bytes(HEADER.rstrip(b"\n"))  # git's own header, its trailing space kept
    assert packed.lookup(path, "refs/heads/main") is None
    snap = snapshot(path)
    assert snap.index is None and snap.body == len(HEADER) - 1


@pytest.mark.parametrize("header", [HEADER, UNSORTED, b""])
def test_a_snapshot_knows_where_its_records_start(tmp_path: Path, header: bytes) -> None:
    path = tmp_path / "packed-refs"
    path.write_bytes(header + record(1, "refs/heads/main"))
    snap = snapshot(path)
    assert (snap.index is None, snap.body) == (header == HEADER, len(header))


def test_a_snapshot_remembers_a_bounded_number_of_answers(tmp_path: Path) -> None:
    path = tmp_path / "packed-refs"
    path.write_bytes(HEADER + b"".join(record(i, f"refs/heads/b{i:03d}") for i in range(100)))
    snap = snapshot(path)
    for i in range(100):
        assert find(path, snap, f"refs/heads/b{i:03d}") == oid(i)
    assert list(snap.found) == [f"refs/heads/b{i:03d}" for i in range(packed._MAX_ANSWERS)]


def test_an_unsorted_file_is_read_up_to_the_bound_and_refused_one_byte_past_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = UNSORTED + b"".join(record(i, f"refs/heads/b{i}") for i in range(40))
    path = tmp_path / "packed-refs"
    path.write_bytes(data)
    monkeypatch.setattr(packed, "_MAX_FILE", len(data))  # the bound, scaled down
    assert packed.lookup(path, "refs/heads/b39") == oid(39)
    monkeypatch.setattr(packed, "_MAX_FILE", len(data) - 1)
    assert refused(path, "refs/heads/b39") == (path, f"larger than {len(data) - 1} bytes and not sorted")


def test_an_unsorted_file_that_grew_while_read_is_read_whole_up_to_the_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The snapshot sizes the file with fstat, then reads: a writer may append between.
    path = tmp_path / "packed-refs"
    path.write_bytes(UNSORTED + record(0, "refs/heads/main"))
    sized = path.stat()
    with path.open("ab") as f:  # ~220 KB more: read in several chunks
        f.write(b"".join(record(i, f"refs/tags/t{i:05d}") for i in range(1, 4000)))
    grown = {b"refs/heads/main": oid(0).encode()} | {
        f"refs/tags/t{i:05d}".encode(): oid(i).encode() for i in range(1, 4000)
    }
    fd = os.open(path, os.O_RDONLY)
    try:
        snap = packed._snapshot(path, fd, sized)
        assert snap.index == grown
        monkeypatch.setattr(packed, "_MAX_FILE", 150_000)
        with pytest.raises(RefError) as info:
            packed._snapshot(path, fd, sized)
        assert (info.value.path, info.value.reason) == (path, "larger than 150000 bytes")
    finally:
        os.close(fd)


def test_an_io_error_reading_an_unsorted_file_names_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "packed-refs"
    path.write_bytes(UNSORTED + record(1, "refs/heads/main"))
    real, calls = packed.pread, []

    def failing_after_the_header(fd: int, size: int, offset: int) -> bytes:
        calls.append(offset)
        if len(calls) > 1:
            raise OSError(errno.EIO, os.strerror(errno.EIO))  # the disk fails after the header
        return real(fd, size, offset)

    monkeypatch.setattr(packed, "pread", failing_after_the_header)
    assert refused(path, "refs/heads/main") == (path, f"cannot read: {os.strerror(errno.EIO)}")
