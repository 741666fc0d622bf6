"""One refusal value (issue 27): what a refused request is told, and each rendering of it."""

from __future__ import annotations

from pathlib import Path

import pytest

from stalewatch import Refusal, RestartPhase, RestartState, StaleError, Status
from stalewatch.core.refusal import NO_RESTART

pytestmark = pytest.mark.unit

A, B = "a" * 40, "b" * 40


def _stale(restart: RestartState | None = None) -> StaleError:
    return StaleError(Path("/srv/app"), A, B, Status.STALE, restart=restart)


def test_a_refusal_is_built_from_the_guards_error_with_every_field() -> None:
    draining = RestartState(RestartPhase.WAITING, "drain: 2 in flight", B, retry_after=2.2, inflight=2)
    said = Refusal.of(_stale(draining))
    assert (said.status, said.loaded_revision, said.current_revision) == (Status.STALE, A, B)
    assert (said.restart_phase, said.retry_after, said.retryable) == (RestartPhase.WAITING, 3, True)
    assert said.payload("code_stale") == {
        "error": str(_stale()),
        "type": "code_stale",
        "retryable": True,
        "restart_scheduled": True,
        "retry_after": 3,
        "restart_phase": "waiting",
        "restart_reason": "drain: 2 in flight",
        "restart_inflight": 2,
    }


def test_without_a_daemon_the_payload_says_why_no_restart_comes_and_that_retrying_is_vain() -> None:
    said = Refusal.of(_stale())
    assert (said.restart_phase, said.retry_after) == (None, None)
    assert said.payload("code_stale")["restart_reason"] == NO_RESTART
    assert said.body("agent_runtime_stale") == {
        "error": str(_stale()),
        "type": "agent_runtime_stale",
        "retryable": False,
    }


def test_a_phase_given_stands_for_the_errors_own_and_any_error_can_be_refused() -> None:
    refused = RestartState(RestartPhase.REFUSED, "verify-failed: exit 1", B)
    said = Refusal.of(RuntimeError("the WebUI's own words"), refused)
    assert said.message == "the WebUI's own words"
    assert said.loaded_revision is None and said.retry_after is None
    assert said.restart_fields() == {
        "restart_scheduled": False,
        "restart_phase": "refused",
        "restart_reason": "verify-failed: exit 1",
    }
    assert Refusal.of(_stale(RestartState(RestartPhase.IDLE)), None).restart_fields() == {}
