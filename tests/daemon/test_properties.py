"""Property tests over the daemon's parsers of outside input (issue 12).

Each parser either succeeds or raises its one typed error, never anything else, and
never hangs (pytest-timeout bounds every example). The budgets are fixed so CI time
is too: ``max_examples`` below, ``deadline=None`` (a loaded CI machine is slow, not
wrong).
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import math
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stalewatch.core.errors import DaemonConfigError, ProtocolError
from stalewatch.core.phases import RestartPhase, RestartState
from stalewatch.protocol.codec import MAX_REQUEST_LINE, LineReader, decode, encode
from stalewatch.protocol.messages import Ping, Register, parse_request, pong_message
from stalewatch.server.commands import MAX_PID, parse_pid
from stalewatch.server.config import DaemonConfig, load
from stalewatch.server.restart import markers

BUDGET = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

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
    assert isinstance(request, Ping | Register)
    if isinstance(request, Ping):
        encode(pong_message(request))  # the reply always encodes


# -- the configuration loader -----------------------------------------------------------------

_KEYS = [
    "socket",
    "keepalive",
    "max_clients",
    "client_queue",
    "client_buffer",
    "log_level",
    "metrics_address",
    "metrics_textfile",
    "metrics_interval",
    "x",
]
_CHECKOUT_KEYS = ["path", "revision", "on_stale", "on_current", "on_unreadable", "hook_timeout", "hold_while"]

toml_scalars = st.one_of(
    st.text(max_size=12),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.datetimes(min_value=datetime.datetime(1, 1, 1), max_value=datetime.datetime(9999, 1, 1)),
    st.dates(),
    st.sampled_from(["/srv/app", "info", "DEBUG", "ab" * 20, "", "\0", "rel/path"]),
    # metrics: addresses good and bad, .prom files in a directory that exists or not
    st.sampled_from(
        [
            "127.0.0.1:9840",
            "[::1]:0",
            "[1.2.3.4]:1",
            "::1:80",
            "1.2.3.4:99999",
            "host:80",
            "/tmp/s.prom",
            "s.prom",
        ]
    ),
)
toml_values = st.recursive(
    toml_scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(["a", "b"]), inner, max_size=2)
    ),
    max_leaves=8,
)
checkout_tables = st.dictionaries(st.sampled_from(_CHECKOUT_KEYS), toml_values, max_size=5)
documents = st.fixed_dictionaries(
    {},
    optional={
        **{key: toml_values for key in _KEYS},
        "checkout": st.one_of(st.lists(checkout_tables, max_size=3), toml_values),
    },
)


def _toml(value: Any) -> str:
    """A TOML value (strings as JSON-escaped basic strings; TOML may still refuse some)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return (
            "nan"
            if math.isnan(value)
            else ("inf" if value > 0 else "-inf")
            if math.isinf(value)
            else repr(value)
        )
    if isinstance(value, int):
        return str(value)
    if isinstance(value, datetime.date):
        return value.isoformat()
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return "{" + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items()) + "}"


def _document(data: dict[str, Any]) -> str:
    lines = [f"{k} = {_toml(v)}" for k, v in data.items() if k != "checkout"]
    tables = data.get("checkout")
    if isinstance(tables, list) and all(isinstance(t, dict) for t in tables):
        for table in tables:
            lines.append("[[checkout]]")
            lines += [f"{k} = {_toml(v)}" for k, v in table.items()]
    elif "checkout" in data:
        lines.insert(0, f"checkout = {_toml(tables)}")
    return "\n".join(lines) + "\n"


def _load_or_refuse(content: bytes) -> DaemonConfig | None:
    with tempfile.TemporaryDirectory() as tmp:
        file = Path(tmp) / "c.toml"
        file.write_bytes(content)
        file.chmod(0o600)
        try:
            config = load(file)
        except DaemonConfigError as exc:
            assert str(exc).startswith(str(file))
            return None
    assert isinstance(config, DaemonConfig)
    if config.metrics_address is not None:  # what MetricsServer binds: an IP literal and a port
        host, port = config.metrics_address
        assert ipaddress.ip_address(host) and 0 <= port <= 65535
    if config.metrics_textfile is not None:
        assert config.metrics_textfile.suffix == ".prom" and "\0" not in str(config.metrics_textfile)
    assert 1.0 <= config.metrics_interval <= 3600
    for checkout in config.checkouts:
        assert "\0" not in str(checkout.path)
        for argv in (checkout.hooks.on_stale, checkout.hooks.on_current, checkout.hooks.on_unreadable):
            assert argv is None or (argv and all(isinstance(a, str) and "\0" not in a for a in argv))
    return config


@BUDGET
@given(documents)
def test_load_takes_any_toml(data: dict[str, Any]) -> None:
    _load_or_refuse(_document(data).encode("utf-8", "surrogatepass"))


@BUDGET
@given(st.binary(max_size=400))
def test_load_takes_any_bytes(content: bytes) -> None:
    _load_or_refuse(content)


@BUDGET
@given(st.integers(min_value=1, max_value=3000), st.sampled_from(["[", "{a = "]))
def test_load_refuses_deep_nesting_with_its_error(depth: int, opener: str) -> None:
    closer = "]" if opener == "[" else "}"
    _load_or_refuse(f"keepalive = {opener * depth}1{closer * depth}\n".encode())


# -- what an updater, a supervisor or a daemon leaves for the restart sequence ---------------

marker_texts = st.one_of(
    st.binary(max_size=200),
    st.tuples(
        st.one_of(st.integers(min_value=-(10**30), max_value=10**30).map(str), st.text(max_size=12)),
        st.one_of(st.floats(allow_nan=True, allow_infinity=True).map(repr), st.text(max_size=12)),
    ).map(lambda parts: f"{parts[0]}\n{parts[1]}\n".encode("utf-8", "surrogatepass")),
)


@BUDGET
@given(marker_texts, st.floats(min_value=0, max_value=1e6), st.floats(min_value=0, max_value=4e9))
def test_any_pid_marker_is_a_wait_or_a_refusal_never_an_error(
    data: bytes, max_age: float, now: float
) -> None:
    """A marker present means an update ran: the verdict is never `go`, never an exception."""
    verdict = markers._judge(Path("/marker"), data, max_age, now)
    assert verdict.action in ("wait", "refuse")
    assert verdict.reason.startswith(("update-marker", "update-running"))


@BUDGET
@given(
    st.one_of(
        st.binary(max_size=40), st.integers(min_value=-(10**40), max_value=10**40).map(lambda n: b"%d" % n)
    )
)
def test_a_pidfile_holds_a_signalable_pid_or_nothing(data: bytes) -> None:
    pid = parse_pid(data)
    assert pid is None or 0 < pid <= MAX_PID  # os.kill takes it (no OverflowError)
    if pid is not None:
        assert data.strip().isdigit() and int(data) == pid


@BUDGET
@given(
    st.one_of(
        json_values,
        st.dictionaries(
            st.sampled_from(["phase", "reason", "revision", "attempt", "retry_after", "at"]),
            json_values,
            max_size=6,
        ),
        st.builds(
            dict,
            phase=st.sampled_from([p.value for p in RestartPhase]),
            reason=json_scalars,
            revision=json_scalars,
            attempt=json_scalars,
            retry_after=json_scalars,
            at=json_scalars,
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
    assert RestartState.from_dict(decode(encode({"type": "x", **state.to_dict()}))) == state
