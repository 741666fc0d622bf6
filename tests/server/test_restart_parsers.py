"""What the restart executor reads from outside: /proc, probes' output, the reflog, its table.

Each parser either answers or says it cannot, never raises (hypothesis), and the
decisions built on them are checked on examples.
"""

from __future__ import annotations

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
from stalewatch.git.reflog import Entry
from stalewatch.protocol.messages import MAX_INFLIGHT
from stalewatch.server.config import load
from stalewatch.server.restart.loaded import told_at
from stalewatch.server.restart.policy import RestartPolicy
from stalewatch.server.restart.procs import parse_stat, parse_status_uids
from stalewatch.server.restart.rules import DrainOutcome
from stalewatch.server.restart.work import parse_count
from tests.support.properties import budget

pytestmark = pytest.mark.unit

A, B, C = "a" * 40, "b" * 40, "c" * 40
ZERO = "0" * 40


# -- /proc ---------------------------------------------------------------------------------


def test_a_stat_line_is_read_after_the_last_parenthesis() -> None:
    line = b"4242 (web) (x) R 17 4242 4242 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 98765 1000 0\n"
    assert parse_stat(line) == (17, 98765)
    assert parse_stat(b"4242 (web R 17") is None
    assert parse_stat(b"") is None


@budget(300)
@given(st.binary(max_size=300), st.text(max_size=20))
def test_any_stat_is_a_parent_and_a_start_or_nothing(data: bytes, comm: str) -> None:
    for raw in (data, b"1 (" + comm.encode("utf-8", "surrogatepass") + b") " + data):
        parsed = parse_stat(raw)
        assert parsed is None or (parsed[0] >= 0 and parsed[1] >= 0)


@budget(300)
@given(st.binary(max_size=300))
def test_any_status_is_two_uids_or_nothing(data: bytes) -> None:
    parsed = parse_status_uids(data)
    assert parsed is None or all(0 <= uid < 10**10 for uid in parsed)
    assert parse_status_uids(b"Name:\tx\nUid:\t1000\t1001\t1000\t1000\n") == (1000, 1001)


# -- the drain probe's answer ----------------------------------------------------------------


def test_the_drain_probe_answers_with_its_last_line() -> None:
    assert parse_count("3\n") == 3
    assert parse_count("checking\n  0  \n") == 0
    assert parse_count("") is None
    assert parse_count("-1") is None
    assert parse_count("٣") is None  # a digit, but not ASCII
    assert parse_count(str(MAX_INFLIGHT + 1)) is None


@budget(300)
@given(st.text(max_size=200))
def test_any_probe_output_is_a_bounded_count_or_nothing(output: str) -> None:
    count = parse_count(output)
    assert count is None or 0 <= count <= MAX_INFLIGHT


# -- what a process started at some time runs (R10) -------------------------------------------------


def _entry(old: str, new: str, at: int) -> Entry:
    return Entry(old, new, "n", "e", at, "+0000", "commit: x")


LOG = [_entry(ZERO, A, 100), _entry(A, B, 200), _entry(B, C, 300)]


@pytest.mark.parametrize(
    ("start", "whole", "revision", "not_revision"),
    [
        (250.0, True, B, None),  # between two moves: what HEAD was
        (301.5, True, C, None),  # after the last move: HEAD's commit
        (200.5, True, None, None),  # within the second of a move: cannot tell
        (199.95, True, None, None),  # the clocks' tolerance before it too
        (150.0, True, A, None),
        (50.0, True, None, C),  # before the first commit: not HEAD's commit, at least
        (50.0, False, None, C),  # before the oldest entry read: only "not HEAD's commit"
    ],
)
def test_r10_what_a_server_runs_from_its_start_and_the_reflog(
    start: float, whole: bool, revision: str | None, not_revision: str | None
) -> None:
    log = LOG if whole else LOG[1:]
    told = told_at(start, log, whole, C)
    assert (told.revision, told.not_revision, told.stopped) == (revision, not_revision, False), told
    assert told.why


def test_r10_no_reflog_tells_nothing() -> None:
    assert told_at(10.0, [], True, A).revision is None


entries = st.builds(
    _entry, st.sampled_from([ZERO, A, B, C]), st.sampled_from([ZERO, A, B, C]), st.integers(0, 400)
)


@budget(300)
@given(st.floats(-10.0, 500.0), st.lists(entries, max_size=6), st.booleans(), st.sampled_from([A, B, C]))
def test_any_reflog_tells_a_real_revision_or_nothing(
    start: float, log: list[Entry], whole: bool, head: str
) -> None:
    told = told_at(start, sorted(log, key=lambda e: e.at), whole, head)
    assert told.revision in (None, A, B, C) and told.not_revision in (None, head)
    assert not (told.revision and told.not_revision) and told.why


# -- the [checkout.restart] table --------------------------------------------------------------------

values = st.one_of(
    st.booleans(),
    st.integers(-5, 10**6),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
    st.sampled_from(["USR2", "HUP", "refuse", "restart", "/tmp/x.pid", "rel/p"]),
    st.lists(st.text(max_size=6), max_size=3),
)
tables = st.dictionaries(st.sampled_from([*sorted(declared(RestartPolicy)), "bogus"]), values, max_size=6)


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return json.dumps(value)


@budget(300)
@given(tables)
def test_any_restart_table_is_a_policy_or_its_named_error(table: dict[str, Any]) -> None:
    body = "".join(f"{key} = {_toml(value)}\n" for key, value in table.items())
    with tempfile.TemporaryDirectory() as tmp:
        file = Path(tmp) / "c.toml"
        file.write_text(
            f'[[checkout]]\npath = "/srv/app"\n\n[checkout.restart]\n{body}', "utf-8", "surrogatepass"
        )
        file.chmod(0o600)
        try:
            policy = load(file).checkouts[0].restart
        except DaemonConfigError as exc:
            assert str(exc).startswith(f"{file}:")
            return
    assert policy is not None
    assert policy.action is not None or policy.pidfile is not None
    assert policy.drain_poll > 0 and isinstance(policy.max_attempts, int)
    assert not isinstance(policy.max_attempts, bool) and policy.max_attempts >= 1
    assert isinstance(policy.on_drain_timeout, DrainOutcome)
    if policy.handoff:
        assert policy.action is None and policy.pidfile is not None and policy.signal == "USR2"
