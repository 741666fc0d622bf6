"""stalewatch.protocol.messages in-process: every line the daemon builds, every request it parses,
and what a client reads of a hello (the daemon's subprocess tests check them end to end)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from stalewatch.core.cause import Cause
from stalewatch.core.errors import ProtocolError
from stalewatch.core.phases import RestartPhase, RestartState
from stalewatch.core.status import Event, Snapshot, Status, WatchMode
from stalewatch.protocol import messages
from stalewatch.protocol.codec import PROTOCOL_VERSION, decode, encode
from stalewatch.protocol.messages import (
    FEATURES,
    HELLO_TIMEOUT,
    MAX_ID_BYTES,
    MAX_INFLIGHT,
    Inflight,
    Ping,
    Register,
    error_message,
    event_line,
    health_message,
    hello_message,
    hello_problem,
    inflight_message,
    parse_request,
    ping_message,
    pong_message,
    processes_message,
    refused_message,
    register_message,
    removed_message,
    restart_message,
    silence_limit,
    snapshot_message,
)

pytestmark = pytest.mark.unit

A, B = "a" * 40, "b" * 40
NOW = 1_700_000_000.5


@pytest.fixture(autouse=True)
def frozen_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(messages.time, "time", lambda: NOW)


def echoed(message: dict[str, object]) -> dict[str, object]:
    """What a client receives: the message through encode and decode."""
    line = encode(message)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    return decode(line)


def test_hello_names_the_protocol_version_features_and_checkouts() -> None:
    hello = hello_message(["/srv/a", "/srv/b"], 15.0, "1.2.3")
    assert hello == {
        "type": "hello",
        "protocol": PROTOCOL_VERSION,
        "version": "1.2.3",
        "pid": os.getpid(),
        "keepalive": 15.0,
        "checkouts": ["/srv/a", "/srv/b"],
        "features": ["register", "inflight"],
        "at": NOW,
    }
    assert FEATURES == ("register", "inflight")
    assert echoed(hello) == hello
    assert hello_problem(echoed(hello)) is None


def _cause() -> Cause:
    return Cause("pull", "fast-forward", "pull: Fast-forward", "alice", "a@x", NOW, "+0000", "ahead", 2, 0)


def test_a_snapshot_line_carries_the_snapshot_the_daemons_generation_restart_and_processes() -> None:
    snap = Snapshot(
        Status.STALE, Path("/srv/app"), A, B, 7, NOW - 1, trusted=True, mode=WatchMode.NATIVE, cause=_cause()
    )
    state = RestartState(RestartPhase.SCHEDULED, "settle", B, 1, 3.0, NOW, None, 5.0, None)
    processes = [{"pid": 12, "revision": A, "since": NOW - 5}]
    line = snapshot_message(snap, 41, restart=state, processes=processes)
    assert line == {
        "type": "snapshot",
        **snap.to_dict(),
        "generation": 41,
        "restart": state.to_dict(),
        "processes": processes,
    }
    assert line["generation"] == 41 and snap.to_dict()["generation"] == 7  # the daemon's, not the guard's
    assert line["cause"] == _cause().to_dict()
    assert echoed(line) == line


def test_a_snapshot_without_restart_policy_or_processes_says_null_and_empty() -> None:
    snap = Snapshot(Status.CURRENT, Path("/srv/app"), A, A, 1, NOW)
    line = snapshot_message(snap, 3)
    assert (line["restart"], line["processes"], line["type"], line["status"]) == (
        None,
        [],
        "snapshot",
        "current",
    )
    assert snapshot_message(snap, 3, processes=[]) == line


def test_an_event_line_is_the_event_with_the_daemons_generation() -> None:
    event = Event(Path("/srv/app"), Status.UNREADABLE, Status.CURRENT, A, None, 4, NOW, error="HEAD: gone")
    line = decode(event_line(event, 99))
    assert line == {"type": "event", **event.to_dict(), "generation": 99}
    cause = Cause("pull", "fast-forward", "pull: Fast-forward", "al", "al@x", NOW, "+0200", "ahead", None, 0)
    for told in (event, Event(Path("/srv/app"), Status.STALE, Status.CURRENT, A, B, 5, NOW, cause=cause)):
        wanted = {"type": "event", **told.to_dict(), "generation": 99}
        assert event_line(told, 99) == encode(wanted)  # the bytes too, in their order
    assert (line["previous_status"], line["error"], line["cause"]) == ("current", "HEAD: gone", None)


def test_health_restart_processes_refused_removed_ping_and_error_lines() -> None:
    assert health_message("/srv/app", False, WatchMode.POLLING) == {
        "type": "health",
        "checkout": "/srv/app",
        "trusted": False,
        "mode": "polling",
        "at": NOW,
    }
    state = RestartState(RestartPhase.CONFIRMED, None, B, 1, None, NOW)
    assert restart_message("/srv/app", state) == {
        "type": "restart",
        "checkout": "/srv/app",
        **state.to_dict(),
    }
    procs = [{"pid": 3, "revision": B, "since": 1.0}]
    assert processes_message("/srv/app", procs) == {
        "type": "processes",
        "checkout": "/srv/app",
        "processes": procs,
        "at": NOW,
    }
    assert refused_message("register", "/srv/app", "never had it") == {
        "type": "refused",
        "request": "register",
        "checkout": "/srv/app",
        "reason": "never had it",
        "at": NOW,
    }
    assert removed_message("/srv/app") == {"type": "removed", "checkout": "/srv/app", "at": NOW}
    assert ping_message() == {"type": "ping", "at": NOW}
    assert error_message("protocol", "bad line") == {
        "type": "error",
        "reason": "protocol",
        "detail": "bad line",
        "at": NOW,
    }


def test_a_clients_register_and_inflight_lines_are_parsed_back_by_the_daemon() -> None:
    assert register_message("/srv/app", A) == {
        "type": "register",
        "checkout": "/srv/app",
        "revision": A,
        "inflight": 0,
    }
    assert parse_request(encode(register_message("/srv/app", A, 5))) == Register("/srv/app", A, 5)
    assert inflight_message("/srv/app", 2) == {"type": "inflight", "checkout": "/srv/app", "inflight": 2}
    assert parse_request(encode(inflight_message("/srv/app", 2))) == Inflight("/srv/app", 2)


def test_a_register_without_inflight_counts_none_and_sha256_revisions_are_full() -> None:
    assert parse_request(b'{"type":"register","checkout":"/c","revision":"' + A.encode() + b'"}') == Register(
        "/c", A, 0
    )
    long = "c" * 64
    assert parse_request(encode({"type": "register", "checkout": "/c", "revision": long})) == Register(
        "/c", long
    )


@pytest.mark.parametrize(
    "request_",
    [
        {"type": "register", "revision": A},
        {"type": "register", "checkout": 1, "revision": A},
        {"type": "register", "checkout": "/c"},
        {"type": "register", "checkout": "/c", "revision": 7},
        {"type": "register", "checkout": "/c", "revision": "abc"},
        {"type": "register", "checkout": "/c", "revision": "g" * 40},
    ],
)
def test_a_register_needs_a_checkout_and_a_full_revision(request_: dict[str, object]) -> None:
    with pytest.raises(ProtocolError) as info:
        parse_request(encode(request_))
    assert info.value.reason == "a register request needs a 'checkout' and a full 'revision'"


@pytest.mark.parametrize("count", [-1, MAX_INFLIGHT + 1, True, False, 1.0, "1", None])
@pytest.mark.parametrize("kind", ["register", "inflight"])
def test_a_count_out_of_bounds_or_not_a_whole_number_is_refused(kind: str, count: object) -> None:
    line = encode({"type": kind, "checkout": "/c", "revision": A, "inflight": count})
    with pytest.raises(ProtocolError) as info:
        parse_request(line)
    assert info.value.reason == f"'inflight' must be a whole number from 0 to {MAX_INFLIGHT}"


@pytest.mark.parametrize("count", [0, 1, MAX_INFLIGHT])
def test_counts_from_zero_to_the_bound_are_taken(count: int) -> None:
    assert parse_request(encode(inflight_message("/c", count))) == Inflight("/c", count)
    assert parse_request(encode(register_message("/c", A, count))) == Register("/c", A, count)


def test_an_inflight_needs_a_checkout_and_a_count() -> None:
    with pytest.raises(ProtocolError) as info:
        parse_request(b'{"type":"inflight","inflight":1}')
    assert info.value.reason == "an inflight request needs a 'checkout'"
    with pytest.raises(ProtocolError, match="whole number"):
        parse_request(b'{"type":"inflight","checkout":"/c"}')


def test_an_unknown_request_type_is_named() -> None:
    with pytest.raises(ProtocolError) as info:
        parse_request(b'{"type":"subscribe"}')
    assert info.value.reason == "unknown request type 'subscribe'"
    with pytest.raises(ProtocolError, match="not a JSON line"):
        parse_request(b"ping")


def test_a_ping_is_answered_with_its_id_even_null_and_without_one_when_it_had_none() -> None:
    assert parse_request(b'{"type":"ping"}') == Ping(None, False)
    assert pong_message(Ping()) == {"type": "pong", "at": NOW}
    assert parse_request(b'{"type":"ping","id":null}') == Ping(None, True)
    assert pong_message(Ping(None, True)) == {"type": "pong", "at": NOW, "id": None}
    assert pong_message(parse_request(b'{"type":"ping","id":[1,"x"]}')) == {
        "type": "pong",
        "at": NOW,
        "id": [1, "x"],
    }


def test_a_ping_id_of_the_maximum_length_is_taken_and_one_byte_more_refused() -> None:
    # encode({"id": s}) is s's JSON plus 8 bytes ({"id": and } and the newline).
    at_bound = "x" * (MAX_ID_BYTES - 2)  # quoted: MAX_ID_BYTES bytes
    assert len(encode({"id": at_bound})) == MAX_ID_BYTES + 8
    assert parse_request(encode({"type": "ping", "id": at_bound})) == Ping(at_bound, True)
    with pytest.raises(ProtocolError) as info:
        parse_request(encode({"type": "ping", "id": at_bound + "x"}))
    assert info.value.reason == f"'id' longer than {MAX_ID_BYTES} bytes"


@pytest.mark.parametrize(
    ("message", "problem"),
    [
        ({"type": "error", "reason": "busy", "detail": "too many clients"}, "busy: too many clients"),
        ({"type": "snapshot"}, "expected a hello line, got 'snapshot'"),
        ({}, "expected a hello line, got None"),
        ({"type": "hello", "protocol": 2}, "protocol 2; this client speaks 1"),
        ({"type": "hello"}, "protocol None; this client speaks 1"),
        ({"type": "hello", "protocol": "1"}, "protocol '1'; this client speaks 1"),
        ({"type": "hello", "protocol": 1}, None),
    ],
)
def test_what_a_client_makes_of_a_hello(message: dict[str, object], problem: str | None) -> None:
    assert hello_problem(message) == problem


@pytest.mark.parametrize(
    ("keepalive", "limit"),
    [
        (10, 30.0),
        (0.5, 1.5),
        (0, HELLO_TIMEOUT),
        (-1, HELLO_TIMEOUT),
        (True, HELLO_TIMEOUT),
        ("10", HELLO_TIMEOUT),
        (None, HELLO_TIMEOUT),
    ],
)
def test_a_daemon_may_stay_silent_for_three_keepalives(keepalive: object, limit: float) -> None:
    assert silence_limit({"type": "hello", "keepalive": keepalive}) == limit
    assert type(silence_limit({"keepalive": keepalive})) is float
    assert silence_limit({}) == HELLO_TIMEOUT == 5.0
