"""stalewatch.hermes.accelerate: each rule of the two-line accelerator, against real git.

The module accelerated here is ``tests.support.webui_runtime`` (the WebUI's surface and its
three-``git`` read, written for these tests). Every answer of the accelerated read is
compared with the original read's on the same checkout.
"""

from __future__ import annotations

import inspect
import logging
import os
import sys
import threading
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stalewatch.git import files
from stalewatch.hermes import accelerate, agent_head
from stalewatch.hermes import accelerator as acceleration
from tests.support import webui_runtime
from tests.support.forks import report_from_fork
from tests.support.process_audit import processes
from tests.support.repos import Repo, make_agent, make_repo

AGENT_SOURCE = "class AIAgent:\n    pass\n"


@pytest.fixture(autouse=True)
def fresh_bindings() -> Iterator[None]:
    agent_head.BINDINGS.clear()
    before = set(sys.modules)
    yield
    for name in set(sys.modules) - before:
        if name.startswith("webui_shaped_runtime_"):
            del sys.modules[name]
    agent_head.BINDINGS.clear()


@pytest.fixture
def agent(tmp_path: Path) -> Repo:
    return make_agent(tmp_path / "hermes-agent")


@pytest.fixture
def module() -> types.ModuleType:
    return webui_runtime.load(accelerated=True)


class Reads:
    """The accelerated read and the original one, for one Agent checkout."""

    def __init__(self, module: types.ModuleType, agent: Repo) -> None:
        self.fast = module._read_agent_revision
        self.original = self.fast.__stalewatch_original__
        self.source_dir = agent.path.resolve()
        self.module_path = self.source_dir / "run_agent.py"

    def __call__(self) -> str | None:
        result: str | None = self.fast(self.source_dir, module_path=self.module_path)
        return result

    def upstream(self) -> str | None:
        result: str | None = self.original(self.source_dir, module_path=self.module_path)
        return result


@pytest.fixture
def reads(module: types.ModuleType, agent: Repo) -> Reads:
    return Reads(module, agent)


def land_commit(agent: Repo) -> str:
    """A commit written as git writes it, the ref renamed into place by this thread."""
    parent = agent.head()
    agent.write("run_agent.py", AGENT_SOURCE + f"# after {parent[:7]}\n")
    agent.git("add", "run_agent.py")
    new = agent.git("commit-tree", agent.git("write-tree"), "-p", parent, "-m", "update")
    ref = agent.path / ".git" / "refs" / "heads" / "main"
    ref.with_name("main.lock").write_text(new + "\n")
    ref.with_name("main.lock").replace(ref)
    return new


# -- the rules ------------------------------------------------------------------------------


def test_same_signature_name_and_meaning(module: types.ModuleType, reads: Reads, agent: Repo) -> None:
    assert inspect.signature(reads.fast) == inspect.signature(reads.original)
    assert reads.fast.__name__ == "_read_agent_revision"
    assert reads.fast.__doc__ == reads.original.__doc__
    assert reads() == reads.upstream() == agent.head()


def test_no_process_on_the_read_after_binding(reads: Reads, agent: Repo) -> None:
    with processes() as started:
        reads.upstream()
    assert "subprocess.Popen" in started  # the audit hook sees the original's processes
    assert len(started) == 3

    with processes() as started:
        first = reads()  # binding: one `git ls-files` to confirm the file is tracked (C2)
    assert started == ["subprocess.Popen"]
    with processes() as started:
        for _ in range(200):
            assert reads() == first
    assert started == []
    new = land_commit(agent)  # git runs here, outside the audited block
    with processes() as started:
        assert reads() == new
    assert started == []


def test_read_your_writes(reads: Reads, agent: Repo) -> None:
    reads()
    for _ in range(20):
        new = land_commit(agent)
        assert reads() == new  # the ref renamed just before the call is seen by it


def test_exactly_one_read_of_head_per_call(reads: Reads, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[object] = []
    real = files.Files.resolve_head

    def counting(*args: Any, **kwargs: Any) -> str | None:
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(files.Files, "resolve_head", counting)
    for n in range(1, 6):
        reads()
        assert len(calls) == n


def test_rollback_reads_the_loaded_commit_again(reads: Reads, agent: Repo) -> None:
    loaded = reads()
    new = agent.commit("update", name="run_agent.py")
    assert reads() == new == reads.upstream()
    agent.git("reset", "-q", "--hard", loaded or "")
    assert reads() == loaded == reads.upstream()


def test_a_corrupt_head_defers_to_the_original(
    reads: Reads, agent: Repo, monkeypatch: pytest.MonkeyPatch
) -> None:
    loaded = reads()
    head = agent.path / ".git" / "HEAD"
    original_text = head.read_text()
    head.write_text("not a ref\n")
    deferred: list[object] = []
    real = reads.original

    def spy(*args: Any, **kwargs: Any) -> str | None:
        deferred.append(args)
        result: str | None = real(*args, **kwargs)
        return result

    monkeypatch.setattr(reads, "original", spy)
    fast = acceleration.accelerated(spy)
    assert fast(reads.source_dir, module_path=reads.module_path) is None  # upstream's answer
    assert len(deferred) == 1
    head.write_text(original_text)
    assert fast(reads.source_dir, module_path=reads.module_path) == loaded
    assert len(deferred) == 1  # readable again: decided in-process


def test_an_unborn_branch_and_a_moved_checkout_defer(reads: Reads, agent: Repo, tmp_path: Path) -> None:
    reads()
    agent.git("checkout", "-q", "--orphan", "empty")
    assert reads() is None is reads.upstream()
    agent.git("checkout", "-q", "main")
    moved = tmp_path / "moved"
    agent.path.rename(moved)
    try:
        assert reads() is None is reads.upstream()
    finally:
        moved.rename(agent.path)
    assert reads() == agent.head()


def test_untracked_in_an_outer_repository_is_none_until_tracked(
    module: types.ModuleType, tmp_path: Path
) -> None:
    outer = make_repo(tmp_path / "outer")
    outer.write("installed/hermes-agent/run_agent.py", AGENT_SOURCE)
    source = (outer.path / "installed" / "hermes-agent").resolve()
    fast = module._read_agent_revision

    def both() -> tuple[str | None, str | None]:
        path = source / "run_agent.py"
        return fast(source, module_path=path), fast.__stalewatch_original__(source, module_path=path)

    assert both() == (None, None)
    with processes() as started:
        assert fast(source, module_path=source / "run_agent.py") is None
    assert started == []  # the untracked answer is kept while the index is unchanged
    outer.commit("the outer repository moves")
    assert both() == (None, None)
    outer.git("add", "installed/hermes-agent/run_agent.py")
    outer.git("commit", "-q", "-m", "now it tracks the agent")
    assert both() == (outer.head(), outer.head())


def test_pathspec_metacharacters_are_literal(module: types.ModuleType, tmp_path: Path) -> None:
    outer = make_repo(tmp_path / "outer")
    outer.write("installed/agent/run_agent.py", "class Other: pass\n")
    outer.git("add", "installed/agent/run_agent.py")
    outer.git("commit", "-q", "-m", "a tracked lookalike")
    outer.write("installed/[a]gent/run_agent.py", AGENT_SOURCE)
    source = (outer.path / "installed" / "[a]gent").resolve()
    fast = module._read_agent_revision
    assert fast(source, module_path=source / "run_agent.py") is None
    assert fast.__stalewatch_original__(source, module_path=source / "run_agent.py") is None
    lookalike = (outer.path / "installed" / "agent").resolve()
    assert fast(lookalike, module_path=lookalike / "run_agent.py") == outer.head()


def test_threads_read_consistently_while_commits_land(reads: Reads, agent: Repo) -> None:
    seen: set[str | None] = {reads()}
    commits = set(seen)
    errors: list[BaseException] = []
    stop = threading.Event()

    def reader() -> None:
        try:
            while not stop.is_set():
                seen.add(reads())
        except BaseException as exc:  # reported to the test thread
            errors.append(exc)

    threads = [threading.Thread(target=reader, name=f"reader-{n}") for n in range(6)]
    for thread in threads:
        thread.start()
    try:
        for _ in range(30):
            commits.add(land_commit(agent))
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=10)
    assert errors == []
    assert seen <= commits  # never a torn or unknown read: each is a commit HEAD held
    assert reads() == agent.head()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork() is POSIX-only")
def test_a_forked_worker_reads_correctly_without_restarting_anything(reads: Reads, agent: Repo) -> None:
    reads()  # bound in the parent
    new = agent.commit("after binding", name="run_agent.py")
    threads = threading.active_count()

    def child() -> str:
        with processes() as started:
            first = reads()
        newer = land_commit(agent)  # git runs here, outside the audited reads
        with processes() as started_again:
            second = reads()
        count = len(started) + len(started_again)
        return f"{first} {second} {newer} {count} {threading.active_count()}"

    code, report = report_from_fork(child)
    assert code == 0, report
    first, second, newer, count, child_threads = report.split()
    assert (first, second) == (new, newer)  # right answers, read-your-writes in the child
    assert (count, child_threads) == ("0", "1")  # no process, no thread started
    assert threading.active_count() == threads
    assert reads() == newer == agent.head()  # and the parent still reads correctly


def test_bindings_are_bounded(module: types.ModuleType, tmp_path: Path) -> None:
    agents = [make_agent(tmp_path / f"a{n}").path.resolve() for n in range(agent_head.MAX_BINDINGS + 6)]
    fast = module._read_agent_revision
    for path in agents:
        assert fast(path, module_path=path / "run_agent.py") is not None
        assert len(agent_head.BINDINGS.entries) <= agent_head.MAX_BINDINGS
    assert len(agent_head.BINDINGS.entries) == agent_head.MAX_BINDINGS
    first = agents[0]
    assert agent_head.BINDINGS.get((first, first / "run_agent.py")) is None  # the oldest went
    assert fast(first, module_path=first / "run_agent.py") is not None  # and binds again


def test_no_thread_is_started(agent: Repo) -> None:
    before = threading.active_count()
    module = webui_runtime.load(accelerated=True)
    source = agent.path.resolve()
    for _ in range(10):
        module._read_agent_revision(source, module_path=source / "run_agent.py")
    assert threading.active_count() == before


def test_calling_it_twice_changes_nothing(module: types.ModuleType) -> None:
    fast = module._read_agent_revision
    original = fast.__stalewatch_original__
    assert accelerate(module) is True
    assert accelerate(module) is True
    assert module._read_agent_revision is fast
    assert fast.__stalewatch_original__ is original
    assert not hasattr(original, "__stalewatch_original__")


def test_only_the_read_is_replaced() -> None:
    module = webui_runtime.load(accelerated=False)
    before = dict(vars(module))
    assert accelerate(module) is True
    after = dict(vars(module))
    assert after.keys() == before.keys()
    changed = [name for name in before if after[name] is not before[name]]
    assert changed == ["_read_agent_revision"]
    assert after["_read_agent_revision"].__stalewatch_original__ is before["_read_agent_revision"]


def test_a_module_without_a_compatible_function_is_left_untouched(caplog: pytest.LogCaptureFixture) -> None:
    def two_positionals(agent_dir: Path, module_path: Path, extra: int) -> str | None:
        return None

    cases: list[types.ModuleType] = []
    for attribute in (None, 42, two_positionals, print):
        case = types.ModuleType(f"case_{len(cases)}")
        if attribute is not None:
            case._read_agent_revision = attribute  # type: ignore[attr-defined]
        cases.append(case)
    for case in cases:
        before = dict(vars(case))
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="stalewatch.hermes"):
            assert accelerate(case) is False
        assert vars(case) == before
        warnings_logged = [r for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings_logged) == 1
        assert "left untouched" in warnings_logged[0].getMessage()


def test_it_never_raises_into_the_import(caplog: pytest.LogCaptureFixture) -> None:
    class Frozen(types.ModuleType):
        def __setattr__(self, name: str, value: object) -> None:
            raise AttributeError(f"read-only module: {name}")

    def _read_agent_revision(agent_dir: Path | None, *, module_path: Path | None = None) -> str | None:
        return None

    frozen = Frozen("frozen")
    types.ModuleType.__setattr__(frozen, "_read_agent_revision", _read_agent_revision)
    with caplog.at_level(logging.WARNING, logger="stalewatch.hermes"):
        assert accelerate(frozen) is False
    assert frozen._read_agent_revision is _read_agent_revision  # type: ignore[attr-defined]
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 1


def test_odd_arguments_defer_to_the_original(module: types.ModuleType, agent: Repo) -> None:
    fast = module._read_agent_revision
    source = agent.path.resolve()
    with processes() as started:
        assert fast(None, module_path=source / "run_agent.py") is None  # upstream: None, at once
    assert started == []
    with pytest.raises(AttributeError):  # upstream's own failure for a str path, unchanged
        fast(str(source), module_path=str(source / "run_agent.py"))
    assert fast(source / "nul\0byte", module_path=source / "run_agent.py") is None
    assert fast(source.parent, module_path=source / "run_agent.py") is None  # not a checkout


def test_without_module_path_the_loaded_run_agent_is_used(
    module: types.ModuleType, agent: Repo, monkeypatch: pytest.MonkeyPatch
) -> None:
    fast = module._read_agent_revision
    source = agent.path.resolve()
    assert fast(source) is None  # no run_agent loaded
    loaded = types.ModuleType("run_agent")
    loaded.__file__ = str(source / "run_agent.py")
    monkeypatch.setitem(sys.modules, "run_agent", loaded)
    assert fast(source) == agent.head() == fast.__stalewatch_original__(source)
