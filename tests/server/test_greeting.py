"""A new client's greeting is kept, not encoded anew: the kept hello is the line ``encode`` writes."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stalewatch.core.version import __version__
from stalewatch.protocol.codec import encode
from stalewatch.protocol.messages import hello_message
from stalewatch.server.publisher import _hello_around_at
from tests.support.properties import budget

pytestmark = pytest.mark.unit

# Checkout keys as the daemon holds them: any path text, non-UTF-8 bytes as surrogates.
KEYS = st.lists(
    st.text(st.characters(codec=None, exclude_categories=["Cs"]) | st.sampled_from('\udcff\udc80\n"\\')),
    max_size=20,
)


@budget(300)
@given(keys=KEYS, keepalive=st.floats(0.05, 3600), at=st.floats(0, 4e9))
def test_the_kept_hello_with_its_at_is_the_line_encode_writes(
    keys: list[str], keepalive: float, at: float
) -> None:
    before, after = _hello_around_at(keys, keepalive)
    line = before + repr(at).encode() + after
    message = hello_message(keys, keepalive, __version__)
    message["at"] = at
    assert line == encode(message)
    assert json.loads(line)["at"] == at
