"""Property tests over the daemon's parsers of outside input (issue 12): its configuration
file, and what an updater or a supervisor leaves for the restart sequence.

Each parser either succeeds or raises its one typed error, never anything else, and
never hangs (pytest-timeout bounds every example). The budgets are fixed so CI time
is too (:mod:`tests.support.properties`).
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import math
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stalewatch.core.declared import declared
from stalewatch.core.errors import DaemonConfigError
from stalewatch.server.commands import MAX_PID, parse_pid
from stalewatch.server.config import CheckoutConfig, DaemonConfig, HookConfig, load
from stalewatch.server.restart import markers
from tests.support.properties import budget

pytestmark = pytest.mark.unit

BUDGET = budget(300)

# -- the configuration loader -----------------------------------------------------------------

# Every key declared (a new one is covered at once), and a typo.
_KEYS = [*(key for key in declared(DaemonConfig) if key != "checkout"), "x"]
_CHECKOUT_KEYS = sorted({*declared(CheckoutConfig), *declared(HookConfig)} - {"restart"})

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
