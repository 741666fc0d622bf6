"""stalewatch.guard.release: a ``REVISION`` file is outside input; its parser is total."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stalewatch.guard.release import parse_revision_file

pytestmark = pytest.mark.unit


@given(st.binary(max_size=600))
def test_any_bytes_give_a_printable_line_or_none(data: bytes) -> None:
    revision = parse_revision_file(data)
    assert revision is None or (
        revision.isprintable()
        and 0 < len(revision) <= 256
        and "\n" not in revision
        and revision == revision.strip()
    )


@given(
    st.text(alphabet="0123456789abcdef", min_size=40, max_size=40),
    st.sampled_from(["", "\n", "\r\n", "\nmore\n"]),
)
def test_capistranos_revision_line_is_read_back(commit: str, tail: str) -> None:
    assert parse_revision_file(f"{commit}{tail}".encode()) == commit


def test_no_revision_stated() -> None:
    assert parse_revision_file(b"") is None
    assert parse_revision_file(b"\n\n") is None
    assert parse_revision_file(b"\xff\xfe") is None
    assert parse_revision_file(b"a\x1bb") is None
    assert parse_revision_file(b"x" * 257) is None
