"""Property tests over the protocol's parsers of outside input (issue 12): what a client
sends the daemon, and what a daemon sends a client.

Each parser either succeeds or raises its one typed error, never anything else, and
never hangs (pytest-timeout bounds every example). The budgets are fixed so CI time
is too (:mod:`tests.support.properties`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stalewatch.core.cause import Cause
from stalewatch.core.errors import ProtocolError
from stalewatch.core.phases import RestartPhase, RestartState
from stalewatch.core.status import Event, Status
from stalewatch.protocol.codec import MAX_REQUEST_LINE, LineReader, decode, encode
from stalewatch.protocol.messages import (
    MAX_INFLIGHT,
    Inflight,
    Ping,
    Register,
    event_line,
    parse_request,
    pong_message,
)
from tests.support.properties import budget

pytestmark = pytest.mark.unit

BUDGET = budget(300)

# -- the protocol decoder ------------------------------------------------------------------

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**80), max_value=10**80),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=40,
)


def _decodes_or_refuses(line: bytes) -> dict[str, Any] | None:
    """decode(line) is a message that re-encodes to itself, or a ProtocolError."""
    try:
        message = decode(line)
    except ProtocolError as exc:
        assert len(exc.line) <= 200
        return None
    assert isinstance(message, dict) and isinstance(message["type"], str)
    again = encode(message)  # what the daemon echoes must always encode
    assert decode(again) == message
    return message


@BUDGET
@given(st.binary(max_size=600))
def test_decode_takes_any_bytes(line: bytes) -> None:
    _decodes_or_refuses(line)


@BUDGET
@given(json_values, st.sampled_from(["ping", "pong", "event", ""]))
def test_decode_takes_any_json_python_writes(value: Any, kind: str) -> None:
    """NaN, Infinity, 1e999-like floats, 80-digit integers, nesting: refused or round-tripped."""
    line = json.dumps({"type": kind, "id": value}, allow_nan=True).encode()
    message = _decodes_or_refuses(line)
    if message is not None:
        assert not _has_non_finite(message)


def _has_non_finite(value: Any) -> bool:
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, dict):
        return any(_has_non_finite(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_non_finite(v) for v in value)
    return False


@BUDGET
@given(st.integers(min_value=1, max_value=5000), st.sampled_from([b"[", b'{"a":', b"[[{}, "]))
def test_decode_refuses_deep_nesting_without_exhausting_the_stack(depth: int, opener: bytes) -> None:
    line = b'{"type":"ping","id":' + opener * depth
    _decodes_or_refuses(line)
    _decodes_or_refuses(line + b"1" + b"]" * depth + b"}")


@BUDGET
@given(st.lists(st.binary(max_size=300), max_size=12), st.data())
def test_any_line_split_gives_the_same_lines_or_one_protocol_error(chunks: list[bytes], data: Any) -> None:
    """Feeding the bytes in any pieces splits them as split(b"\\n") would, within the limit."""
    limit = data.draw(st.integers(min_value=1, max_value=400))
    stream = b"".join(chunks)
    *expected, rest = stream.split(b"\n")
    reader = LineReader(limit)
    got: list[bytes] = []
    try:
        for chunk in chunks:
            got += reader.feed(chunk)
    except ProtocolError:
        assert any(len(line) > limit for line in [*expected, rest])
        return
    assert got == expected
    for line in got:
        if line.strip():
            _decodes_or_refuses(line)


@BUDGET
@given(st.binary(max_size=MAX_REQUEST_LINE))
def test_a_request_is_a_ping_or_a_protocol_error(line: bytes) -> None:
    try:
        request = parse_request(line)
    except ProtocolError:
        return
    assert isinstance(request, Ping | Register | Inflight)
    if isinstance(request, Ping):
        encode(pong_message(request))  # the reply always encodes


@BUDGET
@given(
    kind=st.sampled_from(["register", "inflight"]),
    checkout=json_scalars,
    inflight=st.one_of(json_scalars, st.integers(min_value=-2, max_value=MAX_INFLIGHT + 2)),
    with_count=st.booleans(),
)
def test_r8_a_count_of_work_in_flight_is_a_bounded_whole_number_or_refused(
    kind: str, checkout: Any, inflight: Any, with_count: bool
) -> None:
    message: dict[str, Any] = {"type": kind, "checkout": checkout, "revision": "a" * 40}
    if with_count:
        message["inflight"] = inflight
    try:
        line = encode(message)
    except ValueError:  # NaN or infinity: not JSON the daemon could receive from us
        return
    try:
        request = parse_request(line)
    except ProtocolError:
        counted = type(inflight) is int and 0 <= inflight <= MAX_INFLIGHT
        valid = isinstance(checkout, str) and (counted if with_count else kind == "register")
        assert not valid, message
        return
    assert isinstance(request, Register | Inflight) and isinstance(request.checkout, str)
    assert type(request.inflight) is int and 0 <= request.inflight <= MAX_INFLIGHT
    assert request.inflight == (inflight if with_count else 0)


# -- what a client reads from a daemon ------------------------------------------------------


@BUDGET
@given(
    st.one_of(
        json_values,
        st.dictionaries(
            st.sampled_from(
                [
                    "phase",
                    "reason",
                    "revision",
                    "attempt",
                    "retry_after",
                    "at",
                    "inflight",
                    "estimate",
                    "earliest",
                ]
            ),
            json_values,
            max_size=9,
        ),
        st.builds(
            dict,
            phase=st.sampled_from([p.value for p in RestartPhase]),
            reason=json_scalars,
            revision=json_scalars,
            attempt=json_scalars,
            retry_after=json_scalars,
            at=json_scalars,
            inflight=json_scalars,
            estimate=json_scalars,
            earliest=json_scalars,
        ),
    )
)
def test_a_restart_state_from_a_daemon_is_parsed_or_ignored(data: Any) -> None:
    """A guard fed by a daemon reads its restart phases: bounded, finite, or None."""
    state = RestartState.from_dict(data)
    if state is None:
        return
    assert isinstance(state.phase, RestartPhase) and state.attempt >= 0
    assert len(state.reason or "") <= 500 and len(state.revision or "") <= 64
    assert state.retry_after is None or (math.isfinite(state.retry_after) and state.retry_after >= 0)
    assert math.isfinite(state.at)
    assert state.inflight is None or (type(state.inflight) is int and state.inflight >= 0)
    assert state.estimate is None or (math.isfinite(state.estimate) and state.estimate >= 0)
    assert state.earliest is None or math.isfinite(state.earliest)
    assert RestartState.from_dict(decode(encode({"type": "x", **state.to_dict()}))) == state


# -- the event line, written out -----------------------------------------------------------

# Any text, with what escaping must get right: surrogates (a path that is not UTF-8),
# controls, separators, quotes, backslashes (st.text never draws a surrogate).
_TEXT = st.lists(st.characters() | st.sampled_from('\udcff\ud800\x00\u2028"\\'), max_size=40).map("".join)
_MAYBE_ID = st.none() | st.text("0123456789abcdef", min_size=40, max_size=40)
_TIME = st.floats()  # NaN and infinities too: encode refuses them, so must the line
_COUNT = st.none() | st.integers(min_value=0, max_value=10**9)
_CAUSES = st.none() | st.builds(
    Cause, _TEXT, st.none() | _TEXT, _TEXT, _TEXT, _TEXT, _TIME, _TEXT, _TEXT, _COUNT, _COUNT
)


@BUDGET
@given(
    checkout=_TEXT.filter(bool),
    statuses=st.tuples(st.sampled_from(Status), st.sampled_from(Status)),
    revisions=st.tuples(_MAYBE_ID, _MAYBE_ID),
    numbers=st.tuples(st.integers(min_value=0, max_value=2**63), st.integers(min_value=0) | st.booleans()),
    at=_TIME,
    error=st.none() | _TEXT,
    cause=_CAUSES,
)
def test_the_event_line_is_what_encode_writes_of_the_event(
    checkout: str,
    statuses: tuple[Status, Status],
    revisions: tuple[str | None, str | None],
    numbers: tuple[int, int],
    at: float,
    error: str | None,
    cause: Cause | None,
) -> None:
    event = Event(Path(checkout), *statuses, *revisions, numbers[0], at, error, cause)
    assert _outcome(lambda: event_line(event, numbers[1])) == _outcome(
        lambda: encode({"type": "event", **event.to_dict(), "generation": numbers[1]})
    )


def _outcome(make: Callable[[], bytes]) -> bytes | str:
    try:
        return make()
    except ValueError as exc:  # what encode raises for a float that is not finite
        return f"ValueError: {exc}"
