"""stalewatch.protocol.codec: what decode takes and refuses at each bound, what encode writes.

The bounds are checked at the value itself and one past it (an off-by-one on either
side fails here); the property tests (``test_properties.py``) check that nothing else
escapes.
"""

from __future__ import annotations

import json
import math

import pytest

from stalewatch.core.errors import ProtocolError
from stalewatch.protocol.codec import MAX_DEPTH, MAX_INT_DIGITS, LineReader, decode, encode

pytestmark = pytest.mark.unit


def refusal(line: bytes) -> str:
    with pytest.raises(ProtocolError) as info:
        decode(line)
    assert info.value.line == line[:200]
    return info.value.reason


def nested(depth: int) -> bytes:
    """A ping whose ``id`` makes the whole message ``depth`` containers deep."""
    inner = "[" * (depth - 1) + "]" * (depth - 1)
    return f'{{"type":"ping","id":{inner}}}'.encode()


def test_encode_writes_one_compact_ascii_line() -> None:
    line = encode({"type": "event", "path": "/srv/caf\xe9", "n": [1, 2.5], "raw": "\udcff"})
    assert line == b'{"type":"event","path":"/srv/caf\\u00e9","n":[1,2.5],"raw":"\\udcff"}\n'
    assert decode(line) == {"type": "event", "path": "/srv/caf\xe9", "n": [1, 2.5], "raw": "\udcff"}


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_encode_refuses_nan_and_infinity(value: float) -> None:
    with pytest.raises(ValueError, match="JSON compliant"):
        encode({"type": "event", "at": value})


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_decode_refuses_the_constants_json_loads_would_take(constant: str) -> None:
    assert refusal(f'{{"type":"ping","id":{constant}}}'.encode()) == f"{constant} is not JSON"


@pytest.mark.parametrize("number", ["1e999", "-1e999", "1.5e400"])
def test_decode_refuses_a_float_that_overflows_to_infinity(number: str) -> None:
    assert refusal(f'{{"type":"ping","id":{number}}}'.encode()) == f"number {number} is out of range"


def test_an_overflowing_float_is_quoted_in_the_reason_at_most_40_characters() -> None:
    number = "9" * 30 + "e" + "9" * 30
    assert refusal(f'{{"type":"ping","id":{number}}}'.encode()) == f"number {number[:40]} is out of range"


def test_decode_keeps_a_finite_float_as_a_float() -> None:
    message = decode(b'{"type":"ping","id":1e308,"x":-2.5,"y":1.0}')
    assert message == {"type": "ping", "id": 1e308, "x": -2.5, "y": 1.0}
    assert type(message["y"]) is float


def test_decode_takes_an_integer_of_the_maximum_digits_and_refuses_one_more() -> None:
    assert MAX_INT_DIGITS == 64
    at_bound = "9" * MAX_INT_DIGITS
    assert decode(f'{{"type":"ping","id":{at_bound}}}'.encode())["id"] == int(at_bound)
    negative = "-" + "9" * (MAX_INT_DIGITS - 1)  # the sign counts as a digit
    assert decode(f'{{"type":"ping","id":{negative}}}'.encode())["id"] == int(negative)
    over = "1" * (MAX_INT_DIGITS + 1)
    assert refusal(f'{{"type":"ping","id":{over}}}'.encode()) == f"integer of {MAX_INT_DIGITS + 1} digits"


def test_decode_takes_nesting_of_exactly_the_maximum_depth_and_refuses_one_more() -> None:
    assert MAX_DEPTH == 32
    message = decode(nested(MAX_DEPTH))
    depth, value = 1, message["id"]
    while value is not None and isinstance(value, list):
        depth, value = depth + 1, value[0] if value else None
    assert depth == MAX_DEPTH
    assert refusal(nested(MAX_DEPTH + 1)) == f"nested deeper than {MAX_DEPTH}"


def test_depth_counts_objects_and_arrays_alike_along_every_branch() -> None:
    deep = {"k": None}
    for _ in range(MAX_DEPTH - 2):
        deep = {"k": deep}
    ok = json.dumps({"type": "x", "a": [1, 2], "b": deep}).encode()  # the top object + 31
    assert decode(ok)["b"] == deep
    too_deep = json.dumps({"type": "x", "a": 1, "b": [deep]}).encode()  # the last value is deepest
    assert refusal(too_deep) == f"nested deeper than {MAX_DEPTH}"
    first_deep = json.dumps({"type": "x", "b": [deep], "a": [1]}).encode()  # not only the last
    assert refusal(first_deep) == f"nested deeper than {MAX_DEPTH}"


def test_nesting_past_the_parsers_stack_is_refused_by_depth() -> None:
    line = b'{"type":"ping","id":' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    assert refusal(line) == f"nested deeper than {MAX_DEPTH}"


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        (b"", "not a JSON line"),
        (b"{", "not a JSON line"),
        (b"\xff\xfe", "not a JSON line"),
        (b"[1]", "not a JSON object"),
        (b'"type"', "not a JSON object"),
        (b"{}", "no 'type' string"),
        (b'{"type":1}', "no 'type' string"),
        (b'{"type":null}', "no 'type' string"),
    ],
)
def test_decode_names_what_is_wrong(line: bytes, reason: str) -> None:
    assert refusal(line) == reason


def test_decode_takes_a_line_with_its_newline() -> None:
    assert decode(b'{"type":"ping"}\n') == {"type": "ping"}


def test_a_refused_line_is_quoted_at_most_200_bytes() -> None:
    line = b'{"type":1,"pad":"' + b"x" * 500 + b'"}'
    with pytest.raises(ProtocolError) as info:
        decode(line)
    assert info.value.line == line[:200]
    assert str(info.value) == f"no 'type' string: {line[:200]!r}"


def test_a_line_reader_takes_a_line_of_exactly_its_limit_and_refuses_one_byte_more() -> None:
    reader = LineReader(10)
    assert reader.feed(b"0123456789") == []  # at the limit, still arriving
    assert reader.feed(b"\nab") == [b"0123456789"]
    assert reader.feed(b"c\n") == [b"abc"]
    with pytest.raises(ProtocolError, match="line longer than 10 bytes") as info:
        LineReader(10).feed(b"0123456789A")
    assert info.value.line == b"0123456789A"


def test_a_complete_line_over_the_limit_is_refused_even_with_a_short_rest() -> None:
    with pytest.raises(ProtocolError, match="line longer than 4 bytes"):
        LineReader(4).feed(b"12345\nab")
    assert LineReader(4).feed(b"1234\n\n") == [b"1234", b""]


def test_a_line_reader_keeps_a_partial_line_until_its_newline() -> None:
    reader = LineReader(100)
    assert reader.feed(b'{"type":') == []
    assert reader.feed(b'"ping"}\n{"ty') == [b'{"type":"ping"}']
    assert reader.feed(b'pe":"x"}\n') == [b'{"type":"x"}']
    assert reader.feed(b"") == []
