"""The public contract: the names ``stalewatch`` exports, and its type marker."""

from __future__ import annotations

from importlib import resources

import pytest

import stalewatch

pytestmark = pytest.mark.unit


def test_public_names_are_pinned() -> None:
    assert sorted(stalewatch.__all__) == sorted(
        [
            "BindError",
            "ConfigError",
            "Daemon",
            "Event",
            "Guard",
            "LocalSource",
            "RefError",
            "Refusal",
            "RestartPhase",
            "RestartState",
            "Snapshot",
            "Source",
            "StaleError",
            "StalewatchError",
            "Status",
            "__version__",
        ]
    )
    for name in stalewatch.__all__:
        assert hasattr(stalewatch, name), name


def test_errors_share_one_base_and_the_barrier_error_is_a_runtime_error() -> None:
    for name in ("BindError", "ConfigError", "RefError", "StaleError"):
        assert issubclass(getattr(stalewatch, name), stalewatch.StalewatchError)
    assert issubclass(stalewatch.StaleError, RuntimeError)


def test_package_is_typed() -> None:
    assert resources.files("stalewatch").joinpath("py.typed").is_file()


def test_status_values_are_the_wire_names() -> None:
    assert [s.value for s in stalewatch.Status] == ["current", "stale", "unreadable", "untracked"]


def test_work_in_flight_is_part_of_the_guard() -> None:
    """R8: a guard counts its work in flight (``work``), adds outside counts
    (``count_work``) and says the total (``inflight``)."""
    for name in ("work", "count_work", "inflight"):
        assert callable(getattr(stalewatch.Guard, name)), name
