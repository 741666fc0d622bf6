"""Fixtures and hooks only (helpers live in :mod:`tests.support`).

Every test has exactly one of the markers ``unit``, ``integration`` (the default) and
``real_server`` (see pyproject.toml); a test marked ``unit`` that starts a thread or a
process, or forks, fails (``unit_isolation``). Every test must leave no thread running
(``no_thread_leak``).
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.kinds import KINDS
from tests.support.parts import CI_INSTALLS
from tests.support.recorder import Recorder
from tests.support.repos import Repo, make_repo


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test without a kind ``integration``; refuse a test with two kinds."""
    for item in items:
        kinds = {kind for kind in KINDS if item.get_closest_marker(kind) is not None}
        if len(kinds) > 1:
            raise pytest.UsageError(f"{item.nodeid} is marked {' and '.join(sorted(kinds))}: one kind only")
        if not kinds:
            item.add_marker(pytest.mark.integration)


@pytest.fixture
def git_repo(tmp_path: Path) -> Repo:
    """A repository at tmp_path/'checkout' with one commit of ``module.py``."""
    return make_repo(tmp_path / "checkout")


@pytest.fixture
def recorder() -> type[Recorder]:
    return Recorder


@pytest.fixture(autouse=True)
def no_thread_leak() -> Iterator[None]:
    """Fail a test that leaves a thread running (a watcher someone forgot to stop)."""
    before = set(threading.enumerate())
    yield
    deadline = time.monotonic() + 3.0
    leaked: list[threading.Thread] = []
    while time.monotonic() < deadline:
        leaked = [t for t in threading.enumerate() if t not in before and t.is_alive()]
        if not leaked:
            return
        leaked[0].join(timeout=0.05)
    pytest.fail(f"threads leaked: {[t.name for t in leaked]}")


@pytest.fixture(autouse=True)
def unit_isolation(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """A ``unit`` test is pure logic: starting a thread or a process, or forking, fails it."""
    if request.node.get_closest_marker("unit") is None:
        return

    def refuse(what: str) -> object:
        def refused(*args: object, **kwargs: object) -> object:
            raise AssertionError(f"a unit test {what}: mark it integration")

        return refused

    monkeypatch.setattr(threading.Thread, "start", refuse("started a thread"))
    monkeypatch.setattr(subprocess.Popen, "__init__", refuse("started a process"))
    monkeypatch.setattr(os, "fork", refuse("forked"))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """On CI (``CI=true``, as ``.ci/run`` runs), a test skipped for want of a part
    ``.ci/run`` installs (its reason says ``.ci/run installs it``) fails instead: a
    silent install failure must not turn those tests into passes.
    """
    report = yield
    if report.skipped and os.environ.get("CI") == "true" and CI_INSTALLS in str(report.longrepr):
        report.outcome = "failed"
        why = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        report.longrepr = f"on CI, where .ci/run installs what it needs: {why}"
    return report
