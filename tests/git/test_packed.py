"""stalewatch.git.packed: packed-refs snapshots, binary search, and when a snapshot is reused (C10, C11)."""

from __future__ import annotations

import errno
import os
import re
import resource
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from stalewatch.core.errors import RefError
from stalewatch.git import packed
from stalewatch.git.files import STORE
from stalewatch.git.refs import find_git_dirs
from tests.support.forks import exit_status_in_fork, report_from_fork
from tests.support.packed_refs import find, snapshot
from tests.support.repos import Repo

resolve_head = STORE.resolve_head  # the files store's

HEADER = "# pack-refs with: peeled fully-peeled sorted \n"


@pytest.fixture(autouse=True)
def fresh_cache() -> Iterator[None]:
    packed._cache.clear()
    yield
    packed._cache.clear()


def oid(i: int) -> str:
    return f"{i:040x}"


@pytest.fixture
def settled_now(monkeypatch: pytest.MonkeyPatch) -> None:
    """Treat files as settled at once (what RACY_NS seconds of age would do)."""
    monkeypatch.setattr(packed, "RACY_NS", 0)


def write_packed(path: Path, refs: dict[str, str], *, header: str = HEADER, peel: bool = True) -> None:
    lines = [header] if header else []
    for i, (name, value) in enumerate(sorted(refs.items())):
        lines.append(f"{value} {name}\n")
        if peel and i % 3 == 0:
            lines.append(f"^{oid(10**6 + i)}\n")  # an annotated tag's commit, never a ref's value
    path.write_text("".join(lines))


def test_c11_binary_search_finds_every_ref_and_no_other(tmp_path: Path) -> None:
    refs = {f"refs/tags/v{i:05d}": oid(i) for i in range(0, 3000, 3)}
    refs |= {"refs/heads/main": oid(7), "refs/heads/feature/x": oid(8), "refs/remotes/o/main": oid(9)}
    path = tmp_path / "packed-refs"
    write_packed(path, refs)
    snap = snapshot(path)
    assert snap.index is None  # sorted: the bisect path
    for name, value in refs.items():
        assert find(path, snap, name) == value
    for absent in ("refs/tags/v00001", "refs/heads/mai", "refs/heads/mainx", "refs/a", "refs/zzz", ""):
        assert find(path, snap, absent) is None
    assert find(path, snap, f"^{oid(10**6)}") is None  # a peeled line is never a ref


def test_c11_real_git_packed_refs_agree_with_git(git_repo: Repo) -> None:
    head = git_repo.head()
    commands = "".join(f"create refs/tags/t{i} {head}\n" for i in range(500))
    subprocess.run(["git", "update-ref", "--stdin"], cwd=git_repo.path, input=commands, text=True, check=True)
    git_repo.git("tag", "-a", "annotated", "-m", "peeled")
    git_repo.git("branch", "other")
    git_repo.git("pack-refs", "--all")
    path = git_repo.path / ".git/packed-refs"
    assert path.read_text().startswith("# pack-refs with:") and " sorted" in path.read_text().splitlines()[0]
    snap = snapshot(path)
    assert snap.index is None  # sorted
    for line in git_repo.git("show-ref").splitlines():
        value, name = line.split(" ", 1)
        assert find(path, snap, name) == value, name
    assert find(path, snap, "refs/tags/t500") is None


def test_c11_unsorted_file_is_indexed_and_first_record_wins(tmp_path: Path) -> None:
    path = tmp_path / "packed-refs"
    path.write_text(
        "# pack-refs with: peeled \n"  # an old git: no "sorted"
        f"{oid(2)} refs/heads/zeta\n"
        f"{oid(1)} refs/heads/alpha\n"
        f"^{oid(3)}\n"
        "\n"
        f"{oid(4)} refs/heads/alpha\n"
    )
    snap = snapshot(path)
    assert snap.index is not None  # not sorted: indexed
    assert find(path, snap, "refs/heads/alpha") == oid(1)
    assert find(path, snap, "refs/heads/zeta") == oid(2)
    assert find(path, snap, "refs/heads/beta") is None


EXPECTED = "expected '<object id> <ref>'"
SORTED, UNSORTED = HEADER, "# pack-refs with: peeled \n"


@pytest.mark.parametrize(
    ("body", "line", "sorted_what", "unsorted_what"),
    [
        (f"{oid(1)} refs/heads/a\nnot-an-id refs/heads/b\n{oid(3)} refs/heads/c\n", 3, EXPECTED, EXPECTED),
        (f"{oid(1)} refs/heads/a\n{'z' * 40} refs/heads/b\n{oid(3)} refs/heads/c\n", 3, EXPECTED, EXPECTED),
        (f"{oid(1)} refs/heads/a\nabc123 refs/heads/b\n{oid(3)} refs/heads/c\n", 3, EXPECTED, EXPECTED),
        (f"{oid(1)} refs/heads/a\n{oid(2)}\n{oid(3)} refs/heads/c\n", 3, EXPECTED, EXPECTED),
        (
            f"{oid(1)} refs/heads/a\n^zz\n{oid(3)} refs/heads/c\n",
            3,
            "malformed peeled line",
            "malformed peeled line",
        ),
        (f"^{oid(1)}\n{oid(1)} refs/heads/b\n", 2, "peeled line without a ref", "peeled line without a ref"),
        (
            f"{oid(1)} refs/heads/a\n^{oid(2)}\n^{oid(2)}\n{oid(3)} refs/heads/c\n",
            4,
            "two peeled lines in a row",
            "peeled line without a ref",
        ),
    ],
)
@pytest.mark.parametrize("header", [SORTED, UNSORTED])
def test_malformed_line_is_a_ref_error_naming_it(
    tmp_path: Path, header: str, body: str, line: int, sorted_what: str, unsorted_what: str
) -> None:
    path = tmp_path / "packed-refs"
    path.write_text(header + body)
    errors = []
    # A sorted file is validated where the search reads (as git does), an unsorted one
    # whole: either way some lookup reaches the bad line, and none answers wrongly.
    for name in ("refs/heads/a", "refs/heads/b", "refs/heads/c"):
        try:
            found = packed.lookup(path, name)
        except RefError as exc:
            errors.append(exc)
        else:
            assert found in (None, oid(1), oid(3))
    assert errors
    what = sorted_what if header == SORTED else unsorted_what
    bad = (header + body).splitlines()[line - 1].encode()
    for error in errors:
        assert (Path(error.path), error.reason) == (path, f"malformed line {line} ({what}): {bad!r}")


@pytest.mark.parametrize("header", [SORTED, UNSORTED])
def test_ref_names_that_are_not_utf8_are_found_by_their_bytes(tmp_path: Path, header: str) -> None:
    # HEAD is read with surrogateescape: a branch named in Latin-1 keeps its bytes.
    path = tmp_path / "packed-refs"
    path.write_bytes(
        header.encode()
        + f"{oid(1)} refs/heads/caf".encode()
        + b"\xe9\n"
        + f"{oid(2)} refs/heads/z\n".encode()
    )
    assert packed.lookup(path, "refs/heads/caf\udce9") == oid(1)
    assert packed.lookup(path, "refs/heads/café") is None
    assert packed.lookup(path, "refs/heads/z") == oid(2)


@pytest.mark.parametrize("header", [SORTED, UNSORTED])
def test_a_record_whose_name_git_would_refuse_leaves_the_others_readable(tmp_path: Path, header: str) -> None:
    # git's own lookup compares names only: a bad name elsewhere is no error.
    refs = {"refs/heads/a": oid(1), "refs/heads/b c": oid(2), "refs/heads/d": oid(3)}
    path = tmp_path / "packed-refs"
    write_packed(path, refs, header=header)
    for name, value in refs.items():
        assert packed.lookup(path, name) == value
    assert packed.lookup(path, "refs/heads/b") is None


def test_an_io_error_in_the_middle_of_a_search_names_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "packed-refs"
    write_packed(path, {f"refs/tags/v{i:05d}": oid(i) for i in range(5000)})
    real = packed.pread

    def failing_after_the_header(fd: int, size: int, offset: int) -> bytes:
        if offset > 0:
            raise OSError(errno.EIO, os.strerror(errno.EIO))  # a disk (or NFS) failing mid-read
        return real(fd, size, offset)

    monkeypatch.setattr(packed, "pread", failing_after_the_header)
    with pytest.raises(RefError) as info:
        packed.lookup(path, "refs/tags/v02500")
    assert (info.value.path, info.value.reason) == (path, f"cannot read: {os.strerror(errno.EIO)}")


def test_fifo_in_place_of_packed_refs_does_not_hang(tmp_path: Path) -> None:
    path = tmp_path / "packed-refs"
    os.mkfifo(path)
    with pytest.raises(RefError) as info:
        packed.lookup(path, "refs/heads/main")
    assert (info.value.path, info.value.reason) == (path, "not a regular file")


def test_missing_file_is_none(tmp_path: Path) -> None:
    assert packed.lookup(tmp_path / "packed-refs", "refs/heads/main") is None


def test_c10_a_settled_snapshot_is_reused_until_the_file_changes(tmp_path: Path, settled_now: None) -> None:
    path = tmp_path / "packed-refs"
    write_packed(path, {"refs/heads/main": oid(1)})
    assert packed.lookup(path, "refs/heads/main") == oid(1)
    cached = packed._cache.entries[str(path)]
    assert packed.lookup(path, "refs/heads/main") == oid(1)
    assert packed._cache.entries[str(path)] is cached  # not read again
    # What git does: write packed-refs.new, rename it over. Same size, same mtime.
    new = tmp_path / "packed-refs.new"
    write_packed(new, {"refs/heads/main": oid(2)})
    st = path.stat()
    os.utime(new, ns=(st.st_atime_ns, st.st_mtime_ns))
    new.replace(path)
    assert packed.lookup(path, "refs/heads/main") == oid(2)


def test_c10_a_file_rewritten_within_one_timestamp_tick_is_never_served_stale(tmp_path: Path) -> None:
    # Two in-place rewrites within one tick keep inode, size, mtime and ctime: the stat
    # data cannot tell them apart. Such a racy file must be read afresh every time.
    path = tmp_path / "packed-refs"
    write_packed(path, {"refs/heads/main": oid(1)})
    assert packed.lookup(path, "refs/heads/main") == oid(1)
    before = path.stat()
    with path.open("r+") as f:  # same length, same inode
        f.write(path.read_text().replace(oid(1), oid(2)))
    after = path.stat()
    assert packed.lookup(path, "refs/heads/main") == oid(2)
    # Shows the hazard was real when the tick did not pass (most runs): identical stat data.
    if (before.st_mtime_ns, before.st_ctime_ns) == (after.st_mtime_ns, after.st_ctime_ns):
        assert before.st_ino == after.st_ino and before.st_size == after.st_size
    assert str(path) not in packed._cache.entries  # racy: never cached


def test_c11_strict_resolve_of_a_packed_only_branch_uses_the_snapshot(
    git_repo: Repo, settled_now: None
) -> None:
    git_repo.git("pack-refs", "--all")
    dirs = find_git_dirs(git_repo.path.resolve())
    assert dirs is not None
    assert resolve_head(dirs) == git_repo.head()
    assert str(dirs.packed_refs) in packed._cache.entries
    new = git_repo.commit("a loose ref now wins")
    assert resolve_head(dirs) == new
    git_repo.git("pack-refs", "--all")  # rewritten: a new identity
    assert resolve_head(dirs) == new


def test_a_forked_child_reads_packed_refs_though_a_parent_thread_held_the_cache(git_repo: Repo) -> None:
    """gunicorn forks its workers from a master whose watcher thread may be mid-lookup."""
    git_repo.git("pack-refs", "--all")
    head = git_repo.head()
    path = git_repo.path / ".git" / "packed-refs"

    def body() -> None:
        if packed.lookup(path, "refs/heads/main") != head:
            raise AssertionError("wrong answer in the child")

    assert exit_status_in_fork(body, holding=packed._cache.lock) == 0


def test_a_sorted_file_without_line_ends_is_refused_in_bounded_memory(tmp_path: Path) -> None:
    # Outside input: a corrupt (or hostile) sorted packed-refs of 4 GiB with no newline.
    # The search reads a line's ends at most 64 KiB away, so it refuses the file having
    # read a few pages; reading on for a newline kept every page it read (GiBs).
    path = tmp_path / "packed-refs"
    with path.open("wb") as f:
        f.write(HEADER.encode())
        f.truncate(4 << 30)  # sparse: no disk space

    def body() -> str:
        pages = int(Path("/proc/self/statm").read_text().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        resource.setrlimit(resource.RLIMIT_AS, (pages + (256 << 20), resource.RLIM_INFINITY))
        try:
            packed.lookup(path, "refs/heads/main")
        except RefError as exc:
            return f"{exc.path}\n{exc.reason}"
        return "no error"

    code, report = report_from_fork(body, timeout=30)
    assert code == 0, report
    middle = len(HEADER) + ((4 << 30) - len(HEADER)) // 2  # the first probe, 2 GiB in
    # So far in, the line is named by its byte offset: counting lines would read 2 GiB.
    assert (
        report == f"{path}\nmalformed line at byte {middle} (a line longer than 65536 bytes): {bytes(80)!r}"
    )


@pytest.mark.parametrize("header", [HEADER, ""])
def test_a_ref_name_as_long_as_git_allows_is_found(tmp_path: Path, header: str) -> None:
    long_name = "refs/heads/" + "/".join(["d" * 250] * 16)  # about PATH_MAX
    refs = {long_name: oid(1), "refs/heads/a": oid(2), "refs/tags/z": oid(3)}
    path = tmp_path / "packed-refs"
    write_packed(path, refs, header=header)
    for name, value in refs.items():
        assert packed.lookup(path, name) == value
    assert packed.lookup(path, long_name + "x") is None


def test_a_line_longer_than_any_ref_is_malformed_wherever_the_search_meets_it(tmp_path: Path) -> None:
    refs = {f"refs/tags/v{i:04d}": oid(i) for i in range(200)}
    path = tmp_path / "packed-refs"
    write_packed(path, refs)
    lines = path.read_text().splitlines(keepends=True)
    lines.insert(100, f"{oid(5)} refs/tags/{'x' * 70000}\n")
    path.write_text("".join(lines))
    with pytest.raises(RefError) as info:
        for name in refs:
            packed.lookup(path, name)
    assert info.value.path == path
    assert re.fullmatch(
        r"malformed line 101 \(a line longer than 65536 bytes\): b'[0-9a-f]{40} refs/tags/x+'",
        info.value.reason,
    )


@pytest.mark.parametrize(
    ("body", "line", "what"),
    [
        (f"{oid(1)} refs/heads/a\n\n^{oid(2)}\n", 3, "peeled line without a ref"),
        (f"{oid(1)} refs/heads/a\n# comment\n^{oid(2)}\n", 3, "peeled line without a ref"),
        (f"\n{oid(1)} refs/heads/a\nnot-an-id refs/heads/b\n", 3, "expected '<object id> <ref>'"),
        (f"{oid(1)} refs/heads/a\n^{oid(2)}x\n", 2, "malformed peeled line"),
        (f"{oid(1)}\n", 1, "expected '<object id> <ref>'"),
    ],
)
def test_an_unsorted_file_is_validated_whole_and_its_bad_line_named(
    tmp_path: Path, body: str, line: int, what: str
) -> None:
    path = tmp_path / "packed-refs"
    path.write_text(body)
    with pytest.raises(RefError) as info:
        packed.lookup(path, "refs/heads/a")
    bad = body.splitlines()[line - 1].encode()
    assert (info.value.path, info.value.reason) == (path, f"malformed line {line} ({what}): {bad!r}")


class Calls:
    """Counts calls to a function of ``packed`` (still calling it)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
        self.count = 0
        real = getattr(packed, name)

        def counting(*args: object) -> object:
            self.count += 1
            return real(*args)

        monkeypatch.setattr(packed, name, counting)


def test_c10_a_settled_file_answers_a_question_asked_before_from_one_stat(
    tmp_path: Path, settled_now: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "packed-refs"
    write_packed(path, {"refs/heads/main": oid(1), "refs/heads/side": oid(2)})
    searches, snapshots = Calls(monkeypatch, "_search"), Calls(monkeypatch, "_snapshot")  # one open each
    assert packed.lookup(path, "refs/heads/main") == oid(1)
    assert (searches.count, snapshots.count) == (1, 1)
    assert packed.lookup(path, "refs/heads/main") == oid(1)
    assert packed.lookup(path, "refs/heads/gone") is None
    assert packed.lookup(path, "refs/heads/gone") is None  # an absent ref is remembered too
    assert (searches.count, snapshots.count) == (2, 1)  # the header is not read again
    assert packed.lookup(path, "refs/heads/side") == oid(2)
    assert (searches.count, snapshots.count) == (3, 1)
    write_packed(path, {"refs/heads/main": oid(3)})  # a new identity: read again
    assert packed.lookup(path, "refs/heads/main") == oid(3)
    assert snapshots.count == 2


def test_c10_a_file_stamped_in_the_future_is_racy_and_never_kept(tmp_path: Path, settled_now: None) -> None:
    # The later of mtime and ctime decides: a clock ahead (NFS) leaves mtime in the future.
    path = tmp_path / "packed-refs"
    write_packed(path, {"refs/heads/main": oid(1)})
    future = path.stat().st_mtime_ns + 3600 * 10**9
    os.utime(path, ns=(future, future))
    assert packed.lookup(path, "refs/heads/main") == oid(1)
    assert str(path) not in packed._cache.entries


def test_lookups_leave_no_descriptor_open(tmp_path: Path) -> None:
    path = tmp_path / "packed-refs"
    write_packed(path, {f"refs/heads/b{i}": oid(i) for i in range(50)})
    before = len(list(Path("/proc/self/fd").iterdir()))
    for i in range(60):
        assert packed.lookup(path, f"refs/heads/b{i}") == (oid(i) if i < 50 else None)
    assert len(list(Path("/proc/self/fd").iterdir())) == before


def test_a_packed_refs_path_that_cannot_be_looked_at_is_refused_with_the_systems_reason(
    tmp_path: Path,
) -> None:
    loop = tmp_path / "loop"
    loop.symlink_to("loop")
    with pytest.raises(RefError) as info:
        packed.lookup(loop / "packed-refs", "refs/heads/main")
    assert (info.value.path, info.value.reason) == (
        loop / "packed-refs",
        f"cannot read: {os.strerror(errno.ELOOP)}",
    )


@pytest.mark.parametrize("filler", [0, 40, 300])
def test_a_record_of_64_kib_is_read_and_one_byte_more_is_malformed(tmp_path: Path, filler: int) -> None:
    limit = 64 * 1024
    name = "refs/tags/" + "x" * (limit - 41 - len("refs/tags/"))  # "<oid> <name>": exactly the limit
    assert len(f"{oid(1)} {name}") == limit
    refs = {name: oid(1)} | {f"refs/{c}{i}": oid(i) for i in range(filler) for c in "ahz"}
    path = tmp_path / "packed-refs"
    write_packed(path, refs, peel=False)
    for ref, value in refs.items():
        assert packed.lookup(path, ref) == value
    write_packed(path, {k: v for k, v in refs.items() if k != name} | {name + "x": oid(1)}, peel=False)
    with pytest.raises(RefError) as info:
        for ref in [name + "x", *refs]:
            packed.lookup(path, ref)
    assert info.value.path == path
    assert re.fullmatch(
        r"malformed line \d+ \(a line longer than 65536 bytes\): b'[0-9a-f]{40} refs/tags/x+'",
        info.value.reason,
    )


def test_a_file_is_settled_from_exactly_the_racy_window_after_its_last_change() -> None:
    changed = 5_000_000_000
    assert packed._settled((1, 2, 3, changed, changed - 9), changed + packed.RACY_NS)
    assert not packed._settled((1, 2, 3, changed, changed - 9), changed + packed.RACY_NS - 1)
    assert not packed._settled((1, 2, 3, 0, changed), changed + packed.RACY_NS - 1)  # ctime counts too


def test_a_malformed_line_past_the_counting_bound_is_named_by_its_byte(tmp_path: Path) -> None:
    path = tmp_path / "packed-refs"
    data = b"x\n" * 10
    at_bound = packed._malformed(path, data, packed._MAX_FILE, "why")
    assert (at_bound.path, at_bound.reason) == (path, "malformed line 11 (why): b''")
    past = packed._malformed(path, data, packed._MAX_FILE + 1, "why")
    assert (past.path, past.reason) == (path, f"malformed line at byte {packed._MAX_FILE + 1} (why): b''")
    assert packed._malformed(path, b"ab\ncd\nef", 3, "w").reason == "malformed line 2 (w): b'cd'"


def test_pages_count_newlines_across_chunks_as_the_bytes_do(tmp_path: Path) -> None:
    data = (b"a" * 1000 + b"\n") * (3 * packed._CHUNK // 1001 + 7)
    path = tmp_path / "packed-refs"
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    try:
        pages = packed._Pages(fd, len(data))
        for start, end in ((0, len(data)), (5, len(data) - 3), (packed._CHUNK - 2, 2 * packed._CHUNK + 9)):
            assert pages.count(b"\n", start, end) == data.count(b"\n", start, end)
        assert pages.count(b"\n", 0, len(data) + 100) == data.count(b"\n")
        assert pages.count(b"\n", 10, 10) == 0
    finally:
        os.close(fd)


def test_an_unsorted_file_past_the_bound_is_refused_unread(tmp_path: Path) -> None:
    path = tmp_path / "packed-refs"
    with path.open("wb") as f:  # sparse: 256 MiB and one byte, none of it on disk
        f.write(UNSORTED.encode() + f"{oid(1)} refs/heads/main\n".encode())
        f.truncate(packed._MAX_FILE + 1)
    with pytest.raises(RefError) as info:
        packed.lookup(path, "refs/heads/main")
    assert (info.value.path, info.value.reason) == (
        path,
        f"larger than {packed._MAX_FILE} bytes and not sorted",
    )


def test_a_header_longer_than_a_page_is_malformed_and_one_within_it_is_read(tmp_path: Path) -> None:
    path = tmp_path / "packed-refs"
    path.write_bytes(b"# pack-refs with: peeled " + b"x" * packed._PAGE + b"\n")
    with pytest.raises(RefError) as info:
        packed.lookup(path, "refs/heads/main")
    assert (info.value.path, info.value.reason) == (path, "malformed line 1 (a header longer than a page)")
    path.write_bytes(b"# pack-refs with: peeled sorted")  # a header alone, no newline: an empty file
    assert packed.lookup(path, "refs/heads/main") is None
    path.write_bytes(SORTED.encode() + f"{oid(1)} refs/heads/main\n".encode())
    assert packed.lookup(path, "refs/heads/main") == oid(1)
