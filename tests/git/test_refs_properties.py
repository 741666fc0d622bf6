"""Property tests: the refs parser takes any HEAD, ref and packed-refs content (outside input).

Each read either succeeds (``None`` or a full object id) or raises ``RefError``: never
another exception, never a hang (pytest-timeout bounds every run; the binary search
moves a bound on every probe). A model checks that well-formed files give exactly
the answers a plain dictionary gives, sorted or not.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stalewatch.core.errors import RefError
from stalewatch.core.revisions import is_object_id
from stalewatch.git import packed
from stalewatch.git.files import STORE
from stalewatch.git.refs import GitDirs
from tests.support.packed_refs import find, snapshot
from tests.support.properties import budget

resolve_head = STORE.resolve_head  # the files store's

pytestmark = pytest.mark.unit

BUDGET = budget(250)

OIDS = st.one_of(
    st.text("0123456789abcdef", min_size=40, max_size=40),
    st.text("0123456789abcdef", min_size=64, max_size=64),
)
# Characters and pieces git forbids or treats specially in ref names are drawn often.
TRICKY = st.sampled_from(list("ab.-_~^:?*[\\ @{}\x00\x01\x7f\t\r\udcff"))
SEGMENT = st.one_of(
    st.text(
        st.one_of(TRICKY, st.characters(codec="utf-8", exclude_characters="/\n")), min_size=1, max_size=9
    ),
    st.sampled_from([".lock", "..", "x.lock", ".hidden", "@{1}", "a."]),
)
REF_NAMES = st.builds(
    lambda kind, parts: f"refs/{kind}/" + "/".join(parts),
    st.sampled_from(["heads", "tags", "remotes/origin"]),
    st.lists(SEGMENT, min_size=1, max_size=3),
)
NEAR_VALID = st.one_of(
    OIDS.map(lambda o: o + "\n"),
    REF_NAMES.map(lambda n: f"ref: {n}\n"),
    st.just("ref: refs/heads/main\n"),
    st.just("ref: refs/heads/loop\n"),
    st.text(max_size=120),
)
CONTENT = st.one_of(NEAR_VALID.map(lambda t: t.encode("utf-8", "surrogateescape")), st.binary(max_size=300))


@contextmanager
def repository() -> Iterator[GitDirs]:
    root = Path(tempfile.mkdtemp(prefix="sw-prop-"))
    try:
        git = root / ".git"
        (git / "refs/heads").mkdir(parents=True)
        yield GitDirs(root, git, git)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def packed_text(entries: list[tuple[str, str, str | None]], header: str) -> str:
    lines = [header]
    for name, value, peeled in entries:
        lines.append(f"{value} {name}\n")
        if peeled is not None:
            lines.append(f"^{peeled}\n")
    return "".join(lines)


PACKED_ENTRIES = st.lists(st.tuples(REF_NAMES, OIDS, st.none() | OIDS), max_size=40, unique_by=lambda e: e[0])
HEADERS = st.sampled_from(
    ["", "# pack-refs with: peeled fully-peeled sorted \n", "# pack-refs with: peeled \n", "# junk\n"]
)


@st.composite
def packed_contents(draw: st.DrawFn) -> bytes:
    """Well-formed files, the same corrupted at a random place, or any bytes."""
    entries = sorted(draw(PACKED_ENTRIES), key=lambda e: e[0].encode("utf-8", "surrogateescape"))
    text = packed_text(entries, draw(HEADERS)).encode("utf-8", "surrogateescape")
    how = draw(st.sampled_from(["intact", "insert", "truncate", "bytes"]))
    if how == "insert" and text:
        at = draw(st.integers(0, len(text)))
        text = text[:at] + draw(st.binary(min_size=1, max_size=50)) + text[at:]
    elif how == "truncate" and text:
        text = text[: draw(st.integers(0, len(text)))]
    elif how == "bytes":
        text = draw(st.binary(max_size=500))
    return text


def outcome(dirs: GitDirs) -> str | None:
    chain: list[Path] = []
    try:
        value = resolve_head(dirs, chain)
    except RefError:
        return "RefError"
    assert value is None or is_object_id(value), value
    for ref in chain:  # every file on the chain lies inside the repository
        assert ref.is_relative_to(dirs.common_dir) or ref.is_relative_to(dirs.git_dir)
    return value


@BUDGET
@given(
    head=CONTENT,
    main=st.none() | CONTENT,
    loop=st.none() | CONTENT,
    packed_refs=st.none() | packed_contents(),
)
def test_any_head_ref_and_packed_refs_content_resolves_or_raises_ref_error(
    head: bytes, main: bytes | None, loop: bytes | None, packed_refs: bytes | None
) -> None:
    with repository() as dirs:
        dirs.head_file.write_bytes(head)
        for name, content in (("main", main), ("loop", loop)):
            if content is not None:
                (dirs.common_dir / "refs/heads" / name).write_bytes(content)
        if packed_refs is not None:
            dirs.packed_refs.write_bytes(packed_refs)
        packed._cache.clear()
        outcome(dirs)


@BUDGET
@given(target=st.one_of(REF_NAMES, st.text(max_size=60).filter(lambda t: t and "\0" not in t)), main=CONTENT)
def test_any_symlinked_head_resolves_or_raises_ref_error(target: str, main: bytes) -> None:
    with repository() as dirs:
        (dirs.common_dir / "refs/heads/main").write_bytes(main)
        try:
            dirs.head_file.symlink_to(target)
        except (OSError, ValueError):
            return  # not a name this filesystem can hold
        outcome(dirs)


@BUDGET
@given(entries=PACKED_ENTRIES, header=HEADERS, probes=st.lists(REF_NAMES, max_size=10))
def test_well_formed_packed_refs_answer_like_a_dictionary(
    entries: list[tuple[str, str, str | None]], header: str, probes: list[str]
) -> None:
    entries = sorted(entries, key=lambda e: e[0].encode("utf-8", "surrogateescape"))
    model = {name: value for name, value, _ in entries}
    with repository() as dirs:
        dirs.packed_refs.write_text(packed_text(entries, header), "utf-8", "surrogateescape")
        snap = snapshot(dirs.packed_refs)
        for name in [*model, *probes]:
            assert find(dirs.packed_refs, snap, name) == model.get(name)


@BUDGET
@given(data=st.binary(max_size=2000), probes=st.lists(st.text(max_size=30), min_size=1, max_size=5))
def test_any_packed_refs_bytes_are_searched_or_refused(data: bytes, probes: list[str]) -> None:
    for header in (b"# pack-refs with: sorted\n", b""):
        with repository() as dirs:
            dirs.packed_refs.write_bytes(header + data)
            for name in probes:
                try:
                    found = packed.lookup(dirs.packed_refs, name)
                except RefError:
                    continue
                assert found is None or is_object_id(found)


@BUDGET
@given(
    data=st.binary(max_size=3 * 4096).map(lambda b: b.replace(b"x", b"\n")),
    a=st.integers(0, 3 * 4096 + 10),
    b=st.integers(0, 3 * 4096 + 10),
)
def test_the_paged_file_reads_like_its_bytes(data: bytes, a: int, b: int) -> None:
    # Sorted packed-refs files are searched through pread pages, never read whole:
    # every operation the search uses must answer as the bytes themselves would.
    with repository() as dirs:
        dirs.packed_refs.write_bytes(data)
        fd = os.open(dirs.packed_refs, os.O_RDONLY)
        try:
            pages = packed._Pages(fd, len(data))
            lo, hi = min(a, b), max(a, b)
            assert len(pages) == len(data)
            assert pages[lo:hi] == data[lo:hi]
            assert pages.find(b"\n", lo, hi) == data.find(b"\n", lo, hi)
            assert pages.find(b"\n", lo, len(data) + 10) == data.find(b"\n", lo)
            assert pages.find(b"\n", lo, hi, reverse=True) == data.rfind(b"\n", lo, hi)
            assert pages.count(b"\n", lo, hi) == data.count(b"\n", lo, hi)
        finally:
            os.close(fd)
