"""What the restart executor reads from outside: /proc, probes' output, the reflog, its table.

Each parser either answers or says it cannot, never raises (hypothesis), and the
decisions built on them are checked on examples.
"""

from __future__ import annotations

import itertools
import json
import math
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from stalewatch.core.declared import declared
from stalewatch.core.errors import DaemonConfigError
from stalewatch.core.procs import parse_stat, parse_status_uids
from stalewatch.git.reflog import Entry
from stalewatch.protocol.messages import MAX_INFLIGHT
from stalewatch.server.config import load
from stalewatch.server.restart.inputs import Loaded
from stalewatch.server.restart.loaded import told_at
from stalewatch.server.restart.policy import DrainOutcome, RestartPolicy
from stalewatch.server.restart.state import Belief, wanted
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
        (200.5, True, None, C),  # within the second of the move to B: A or B, not C
        (199.95, True, None, C),  # the clocks' tolerance before it too
        (300.5, True, None, None),  # within the second of the move to C: B or C, cannot tell
        (100.5, True, None, C),  # no commit yet, or A: not C
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


def test_r10_a_start_within_an_older_moves_second_is_still_before_a_later_move() -> None:
    """Issue 29 item 1: commit A, the server 0.1 s later, commit B 2.5 s later."""
    log = [_entry(ZERO, A, 1000), _entry(A, B, 1002)]
    told = told_at(1000.1, log, True, B)
    assert (told.revision, told.not_revision) == (None, B)
    within = "it started within the second HEAD moved to aaaaaaa"
    assert told.why == f"the server runs no commit or aaaaaaa, not bbbbbbb: {within}"
    told = told_at(1000.1, [_entry(C, A, 1000), _entry(A, B, 1002)], True, B)
    assert told.why.startswith("the server runs ccccccc or aaaaaaa, not bbbbbbb")


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


@st.composite
def histories(draw: st.DrawFn) -> tuple[list[float], list[str], int, bool]:
    """HEAD's real history: its revisions (distinct) and the real times it moved
    (increasing, two in one second allowed), the moves the log read leaves out, whole."""
    count = draw(st.integers(1, 6))
    gaps = draw(st.lists(st.floats(0.0, 3.0), min_size=count, max_size=count))
    times = list(itertools.accumulate(gaps, initial=draw(st.floats(1000.0, 1001.0))))[1:]
    assume(all(a < b for a, b in itertools.pairwise(times)))
    whole = draw(st.booleans())
    first = ZERO if whole and draw(st.booleans()) else f"{1:040x}"  # from the first commit, or not
    revisions = [first, *(f"{n + 2:040x}" for n in range(count))]
    unread = 0 if whole else draw(st.integers(0, count - 1))
    return times, revisions, unread, whole


@budget(1000)
@given(histories(), st.floats(0.0, 1.0), st.floats(-0.099, 0.099))
def test_r10_the_reflogs_seconds_never_mislead_and_tell_all_they_can(
    history: tuple[list[float], list[str], int, bool], where: float, error: float
) -> None:
    """Real moves at ``times``; git writes each one's whole second. A process starts
    from 3 s before the first to 3 s after the last (``where``); ``/proc`` tells its start
    within the 0.1 s the module allows. Whatever is told is true; what can be told is."""
    times, revisions, unread, whole = history
    real = times[0] - 3 + where * (times[-1] - times[0] + 6)
    assume(all(at != real for at in times))
    loaded = revisions[sum(at < real for at in times)]  # what HEAD was when it started
    head = revisions[-1]
    log = [_entry(revisions[n], revisions[n + 1], math.floor(at)) for n, at in enumerate(times)][unread:]
    start = real + error
    told = told_at(start, log, whole, head)
    if told.revision is not None:
        assert told.revision == loaded
    if told.not_revision is not None:
        assert told.not_revision == head != loaded
    # A start within a second of an older move is still before a later one: a server that
    # does not run HEAD's commit is restarted, unless it started within the second of that
    # move, even by a daemon that presumed HEAD (it started after the move); one on HEAD never.
    want = wanted(head, (), Belief(presumed=head).told(Loaded(0.0, told.revision, told.not_revision)))
    if loaded == head:
        assert want is None, told
    elif start < log[-1].at - 0.1:
        assert want == head, told
    # Clear of every move's second, and after the oldest one read (or the log is whole):
    # the revision itself.
    clear = all(start >= e.at + 1.1 or start < e.at - 0.1 for e in log)
    if clear and loaded != ZERO and (whole or start >= log[0].at + 1.1):
        assert told.revision == loaded, told


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
