"""Driving the pure restart machine in tests: a :class:`Driver` plays the executor.

It feeds inputs, keeps every effect, and answers the request the machine awaits with
what the test says (by default: all is well). No clock, no thread: time is ``now``.
"""

from __future__ import annotations

from typing import Any

from stalewatch.core.phases import RestartPhase, RestartState
from stalewatch.server.restart.effects import (
    Act,
    CheckMarkers,
    Effect,
    ProbeConfirm,
    ProbeDrain,
    Publish,
    ReadHead,
    TakeLock,
    Verify,
    Wake,
)
from stalewatch.server.restart.inputs import (
    Acted,
    Drain,
    Head,
    Input,
    Lock,
    Markers,
    Server,
    Servers,
    Tick,
    Verdict,
    Verified,
)
from stalewatch.server.restart.machine import State, step
from stalewatch.server.restart.policy import Rules

A, B, C, D = ("a" * 40, "b" * 40, "c" * 40, "d" * 40)

Request = CheckMarkers | Verify | ProbeDrain | TakeLock | ReadHead | Act | ProbeConfirm


class Driver:
    """The machine and an executor that does what the test says.

    Args:
        rules: the policy (default: settle 1 s, no interval, nothing else).
        head: HEAD's revision, read at ``now`` (the first reading: presumed loaded).
        now: the monotonic time to start at.
        started: when the daemon started (``None``: long ago; its servers reconnected).
    """

    def __init__(
        self,
        rules: Rules | None = None,
        *,
        head: str | None = A,
        now: float = 100.0,
        started: float | None = None,
    ) -> None:
        self.state = State(rules or Rules(settle=1.0, min_interval=0.0), started=started)
        self.now = now
        self.head = head
        self.effects: list[Effect] = []
        self.servers: dict[int, Server] = {}
        if head is not None:
            self.feed(Head(now, head))

    # -- feeding ---------------------------------------------------------------------------

    def feed(self, event: Input) -> list[Effect]:
        """One step; returns (and keeps) its effects."""
        self.state, effects = step(self.state, event)
        self.effects.extend(effects)
        return list(effects)

    def move(self, revision: str | None, *, silent: bool = False) -> list[Effect]:
        """HEAD moves (an updater); the watcher reports it unless ``silent``."""
        self.head = revision
        return [] if silent else self.feed(Head(self.now, revision))

    def later(self, seconds: float) -> list[Effect]:
        """Time passes; a tick comes (as the executor's timer would)."""
        self.now += seconds
        return self.feed(Tick(self.now))

    def until_timer(self) -> list[Effect]:
        """Jump to the wake-up the machine asked for, and tick."""
        timer = self.state.timer
        assert timer is not None, "the machine asked for no wake-up"
        self.now = max(self.now, timer)
        return self.feed(Tick(self.now))

    def register(self, pid: int, revision: str, inflight: int = 0) -> list[Effect]:
        """A server registers (or updates its work in flight)."""
        since = self.servers[pid].since if pid in self.servers else self.now
        self.servers[pid] = Server(pid, revision, inflight, since)
        return self.feed(Servers(self.now, tuple(self.servers.values())))

    def leave(self, *pids: int) -> list[Effect]:
        """Servers go away (their connections close)."""
        for pid in pids:
            self.servers.pop(pid, None)
        return self.feed(Servers(self.now, tuple(self.servers.values())))

    # -- answering -------------------------------------------------------------------------

    @property
    def request(self) -> Request | None:
        """The request the machine awaits an answer to, if any."""
        attempt = self.state.attempt
        if attempt is None or attempt.ask is None:
            return None
        for effect in reversed(self.effects):
            if isinstance(effect, Request) and effect.ticket == attempt.ask:
                return effect
        raise AssertionError(f"no request with ticket {attempt.ask}")

    def reply(self, **answer: Any) -> list[Effect]:
        """Answer the awaited request: all well unless ``answer`` says otherwise."""
        request = self.request
        assert request is not None, f"nothing awaited; stage {self.stage}"
        return self.feed(self.answer_to(request, **answer))

    def answer_to(self, request: Request, **answer: Any) -> Input:
        now, ticket = self.now, request.ticket
        if isinstance(request, CheckMarkers):
            return Markers(ticket, now, answer.get("verdict", Verdict.GO), answer.get("reason", ""))
        if isinstance(request, Verify):
            return Verified(ticket, now, answer.get("ok", True), answer.get("detail", "exited 1"))
        if isinstance(request, ProbeDrain):
            gone = answer.get("gone", frozenset())
            return Drain(ticket, now, answer.get("inflight", 0), answer.get("detail", ""), gone)
        if isinstance(request, TakeLock):
            return Lock(
                ticket, now, answer.get("acquired", True), answer.get("detail", ""), answer.get("error")
            )
        if isinstance(request, ReadHead):
            return Head(now, answer.get("revision", self.head), ticket)
        if isinstance(request, Act):
            return Acted(ticket, now, answer.get("ok", True), answer.get("detail", "exited 3"))
        return Verified(ticket, now, answer.get("ok", True), answer.get("detail", "exited 1"))

    def through(self, kind: type[Any], **answer: Any) -> None:
        """Answer every request all well until one of ``kind`` is awaited (not answered)."""
        for _ in range(50):
            request = self.request
            assert request is not None, f"nothing awaited before a {kind.__name__}; stage {self.stage}"
            if isinstance(request, kind):
                return
            self.reply(**answer)
        raise AssertionError(f"no {kind.__name__} asked")

    # -- reading ---------------------------------------------------------------------------

    @property
    def stage(self) -> str:
        attempt = self.state.attempt
        return "none" if attempt is None else attempt.stage.name

    @property
    def told(self) -> list[RestartState]:
        """Every phase published, in order."""
        return [e.state for e in self.effects if isinstance(e, Publish)]

    @property
    def last(self) -> RestartState:
        return self.state.published

    def of(self, kind: type[Any]) -> list[Any]:
        """Every effect of ``kind`` so far."""
        return [e for e in self.effects if isinstance(e, kind)]

    def mark(self) -> int:
        """A mark in the effects: ``since(mark)`` gives what came after."""
        return len(self.effects)

    def since(self, mark: int) -> list[Effect]:
        return self.effects[mark:]

    def wakes(self) -> list[float | None]:
        return [e.at for e in self.effects if isinstance(e, Wake)]


def names(states: list[RestartState]) -> list[str]:
    """``phase`` or ``phase: reason-head`` (the reason up to its first colon)."""
    return [s.phase.value + (f": {s.reason.split(':')[0]}" if s.reason else "") for s in states]


def phase(state: RestartState) -> tuple[RestartPhase, str | None, str | None]:
    return state.phase, state.reason, state.revision
