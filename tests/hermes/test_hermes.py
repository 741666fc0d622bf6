"""stalewatch.hermes: the Hermes WebUI drop-in, against a real fake-agent checkout.

Each test builds a Hermes Agent checkout (``run_agent.py`` with ``class AIAgent``) in a
real git repository, imports it as the WebUI does, commits, and checks the contract
points (C1 to C6, C10) through the WebUI's own surface.
"""

from __future__ import annotations

import importlib
import json
import os
import pickle
import subprocess
import sys
import threading
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from stalewatch import StaleError, StalewatchError
from stalewatch.git import command as gitcmd
from stalewatch.hermes import dropin as hermes
from stalewatch.web import WSGIBarrier
from tests.support.children import python_child
from tests.support.forks import report_from_fork
from tests.support.repos import Repo, make_agent, make_repo

AGENT_SOURCE = "class AIAgent:\n    pass\n"


def put_on_path(directory: Path) -> None:
    sys.path.insert(0, str(directory))
    importlib.invalidate_caches()


@pytest.fixture(autouse=True)
def clean_hermes() -> Iterator[None]:
    """Every test starts and ends with no bound agent, no run_agent, no watcher."""
    saved_path = list(sys.path)
    hermes._reset_for_tests()
    sys.modules.pop("run_agent", None)
    yield
    hermes._reset_for_tests()
    sys.modules.pop("run_agent", None)
    sys.path[:] = saved_path
    importlib.invalidate_caches()


@pytest.fixture
def agent(tmp_path: Path) -> Repo:
    repo = make_agent(tmp_path / "hermes-agent")
    put_on_path(repo.path)
    return repo


class ReadSpy:
    """Wraps the real ``_read_agent_revision`` and records each call."""

    def __init__(self) -> None:
        self.real: Callable[..., str | None] = hermes._read_agent_revision
        self.calls: list[tuple[Any, Any]] = []

    def __call__(self, agent_dir: Path | None, *, module_path: Path | None = None) -> str | None:
        self.calls.append((agent_dir, module_path))
        return self.real(agent_dir, module_path=module_path)


@pytest.fixture
def read_spy(monkeypatch: pytest.MonkeyPatch) -> ReadSpy:
    spy = ReadSpy()
    monkeypatch.setattr(hermes, "_read_agent_revision", spy)
    return spy


# -- binding (C1) -------------------------------------------------------------------


def test_get_ai_agent_class_binds_to_the_loaded_checkout_and_starts_a_guard(agent: Repo) -> None:
    assert hermes.current_guard() is None
    cls = hermes.get_ai_agent_class()
    module = sys.modules["run_agent"]
    assert cls is module.AIAgent
    assert agent.head() == hermes._AGENT_REVISION
    assert agent.path.resolve() == hermes._AGENT_SOURCE_DIR
    assert (agent.path / "run_agent.py").resolve() == hermes._AGENT_MODULE_PATH
    guard = hermes.current_guard()
    assert guard is not None
    assert guard.checkout == agent.path.resolve()
    assert guard.loaded_revision == agent.head()
    # Cached: the same class and the same guard on every later call.
    assert hermes.get_ai_agent_class() is cls
    assert hermes.require_ai_agent_class() is cls
    assert hermes.current_guard() is guard


def test_c1_identity_comes_from_the_loaded_module_not_the_configured_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    configured = make_agent(tmp_path / "configured")
    loaded = make_agent(tmp_path / "loaded")
    monkeypatch.setenv("HERMES_WEBUI_AGENT_DIR", str(configured.path))
    hermes._reset_for_tests()
    assert configured.path.resolve() == hermes._AGENT_DIR
    put_on_path(loaded.path)

    hermes.get_ai_agent_class()
    assert loaded.path.resolve() == hermes._AGENT_SOURCE_DIR
    configured.commit("unrelated", name="run_agent.py")
    hermes.ensure_agent_runtime_current()  # the configured checkout means nothing
    loaded.commit("update", name="run_agent.py")
    with pytest.raises(hermes.AgentRuntimeChangedError):
        hermes.ensure_agent_runtime_current()


def test_concurrent_first_calls_bind_once(agent: Repo) -> None:
    barrier = threading.Barrier(6)
    results: list[object] = []

    def call() -> None:
        barrier.wait(timeout=10)
        results.append(hermes.get_ai_agent_class())

    threads = [threading.Thread(target=call) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=20)
    assert len(results) == 6
    assert all(r is sys.modules["run_agent"].AIAgent for r in results)
    guard = hermes.current_guard()
    assert guard is not None
    assert guard.loaded_revision == agent.head()


# -- the barrier: guard path (C3, C10) and fallback path ---------------------------


def test_c10_a_commit_followed_at_once_by_a_check_raises_without_a_subprocess(
    agent: Repo, read_spy: ReadSpy
) -> None:
    hermes.get_ai_agent_class()
    loaded = agent.head()
    assert hermes.wait_until_watching(10)
    read_spy.calls.clear()
    # Land the commit the way git does (a ref renamed into place), in this thread, and
    # check in the very next statement: well inside the watcher's sub-millisecond lag,
    # so only a strict read can see it.
    agent.write("run_agent.py", AGENT_SOURCE + "# update\n")
    agent.git("add", "run_agent.py")
    new = agent.git("commit-tree", agent.git("write-tree"), "-p", loaded, "-m", "update")
    ref = agent.path / ".git" / "refs" / "heads" / "main"
    ref.with_name("main.lock").write_text(new + "\n")

    with no_git_calls() as git_calls:
        ref.with_name("main.lock").replace(ref)
        with pytest.raises(hermes.AgentRuntimeChangedError) as info:
            hermes.ensure_agent_runtime_current()
        with pytest.raises(hermes.AgentRuntimeChangedError):
            hermes.get_ai_agent_class()
    assert git_calls == []
    assert read_spy.calls == []  # the guard decided, not the synchronous read

    exc = info.value
    message = str(exc)
    assert "Hermes Agent was updated" in message
    assert "Restart Hermes WebUI" in message
    assert loaded[:7] in message
    assert new[:7] in message
    assert isinstance(exc, RuntimeError)
    assert isinstance(exc, StaleError)
    assert (exc.loaded_revision, exc.current_revision) == (loaded, new)
    assert hermes.agent_runtime_stale_payload(exc) == {
        "error": message,
        "type": "agent_runtime_stale",
        "retryable": True,
    }
    assert loaded == hermes._AGENT_REVISION  # C5: the known revision stays

    agent.git("reset", "-q", "--hard", loaded)  # C8: a rollback is current again
    hermes.ensure_agent_runtime_current()
    assert read_spy.calls == []


def test_the_drop_in_message_says_what_moved_head(agent: Repo) -> None:
    hermes.get_ai_agent_class()
    loaded = agent.head()
    assert hermes.wait_until_watching(10)
    new = agent.commit("update", name="run_agent.py")
    with pytest.raises(hermes.AgentRuntimeChangedError) as info:
        hermes.ensure_agent_runtime_current()
    where = f" in {agent.path.resolve()}"
    assert (
        f"(loaded {loaded[:7]}, now {new[:7]}{where}: commit (1 commit ahead) by stalewatch tests at "
        in str(info.value)
    )
    assert info.value.cause is not None
    assert (info.value.cause.action, info.value.cause.relation) == ("commit", "ahead")


class no_git_calls:
    """Context manager: record (and refuse) stalewatch git runs inside the block."""

    def __enter__(self) -> list[list[str]]:
        self.calls: list[list[str]] = []
        self._saved = gitcmd.run_git

        def refuse(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
            self.calls.append(args)
            raise AssertionError(f"git {args} was run on the checked path")

        gitcmd.run_git = refuse
        return self.calls

    def __exit__(self, *exc: object) -> None:
        gitcmd.run_git = self._saved


def test_without_a_running_guard_the_synchronous_read_decides(agent: Repo, read_spy: ReadSpy) -> None:
    hermes.get_ai_agent_class()
    loaded = agent.head()
    hermes.stop()
    assert hermes.current_guard() is None
    assert not hermes.wait_until_watching(0.01)
    read_spy.calls.clear()

    hermes.ensure_agent_runtime_current()
    source = (agent.path.resolve(), (agent.path / "run_agent.py").resolve())
    assert read_spy.calls == [source]
    new = agent.commit("update", name="run_agent.py")
    with pytest.raises(hermes.AgentRuntimeChangedError) as info:
        hermes.ensure_agent_runtime_current()
    assert new[:7] in str(info.value)
    assert len(read_spy.calls) == 2
    agent.git("reset", "-q", "--hard", loaded)
    hermes.ensure_agent_runtime_current()


def test_replaced_attributes_never_let_the_guard_decide_for_another_revision(
    agent: Repo, read_spy: ReadSpy, monkeypatch: pytest.MonkeyPatch
) -> None:
    hermes.get_ai_agent_class()
    assert hermes.wait_until_watching(10)
    new = agent.commit("update", name="run_agent.py")
    # The guard watches the old revision and is stale now; the attributes say the
    # new one is loaded, which the checkout confirms: the read must decide, and pass.
    monkeypatch.setattr(hermes, "_AGENT_REVISION", new)
    read_spy.calls.clear()
    hermes.ensure_agent_runtime_current()
    assert len(read_spy.calls) == 1

    # Another source directory with the guard's own revision: the read decides again.
    monkeypatch.setattr(hermes, "_AGENT_REVISION", agent.git("rev-parse", "HEAD~1"))
    monkeypatch.setattr(hermes, "_AGENT_SOURCE_DIR", agent.path.parent)
    with pytest.raises(hermes.AgentRuntimeChangedError):
        hermes.ensure_agent_runtime_current()
    assert len(read_spy.calls) == 2


@pytest.mark.parametrize("path", ["guard", "read"])
def test_c4_c5_an_unreadable_checkout_fails_closed_and_keeps_the_revision(agent: Repo, path: str) -> None:
    hermes.get_ai_agent_class()
    loaded = agent.head()
    if path == "guard":
        assert hermes.wait_until_watching(10)
    else:
        hermes.stop()
    head_file = agent.path / ".git" / "HEAD"
    original = head_file.read_text()
    head_file.write_text("this is not a ref\n")

    with pytest.raises(hermes.AgentRuntimeChangedError) as info:
        hermes.ensure_agent_runtime_current()
    assert "now unknown" in str(info.value)
    assert "Restart Hermes WebUI" in str(info.value)
    with pytest.raises(hermes.AgentRuntimeChangedError):
        hermes._capture_loaded_agent_revision()  # a re-bind cannot downgrade (C5)
    assert loaded == hermes._AGENT_REVISION

    head_file.write_text(original)
    hermes.ensure_agent_runtime_current()


def test_c4_a_moved_checkout_fails_closed(agent: Repo, tmp_path: Path) -> None:
    hermes.get_ai_agent_class()
    moved = tmp_path / "moved"
    agent.path.rename(moved)
    try:
        with pytest.raises(hermes.AgentRuntimeChangedError, match="now unknown"):
            hermes.ensure_agent_runtime_current()
    finally:
        moved.rename(agent.path)
    hermes.ensure_agent_runtime_current()


def test_c6_swapping_run_agent_in_sys_modules_is_not_a_change(agent: Repo, tmp_path: Path) -> None:
    hermes.get_ai_agent_class()
    loaded = agent.head()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "run_agent.py").write_text(AGENT_SOURCE)
    swapped = types.ModuleType("run_agent")
    swapped.__file__ = str(elsewhere / "run_agent.py")
    swapped.AIAgent = type("AIAgent", (), {})  # type: ignore[attr-defined]
    sys.modules["run_agent"] = swapped

    hermes.ensure_agent_runtime_current()
    hermes._capture_loaded_agent_revision()
    assert loaded == hermes._AGENT_REVISION
    assert agent.path.resolve() == hermes._AGENT_SOURCE_DIR
    agent.commit("update", name="run_agent.py")  # the checkout still defines staleness
    with pytest.raises(hermes.AgentRuntimeChangedError):
        hermes.ensure_agent_runtime_current()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork() is POSIX-only")
def test_a_forked_worker_restarts_its_watcher(agent: Repo) -> None:
    hermes.get_ai_agent_class()
    assert hermes.wait_until_watching(10)

    def child() -> str:  # the child reports how far it got
        guard = hermes.current_guard()
        if guard is None:
            return "no guard"
        if guard.snapshot().trusted:
            return "trusts the parent's watcher"  # the thread did not survive the fork
        hermes.ensure_agent_runtime_current()  # decided by the read; restarts it
        return "watching" if hermes.wait_until_watching(10) else "not watching"

    assert report_from_fork(child) == (0, "watching")
    assert hermes.wait_until_watching(0)  # the parent's watcher is untouched


# -- untracked (C2) -----------------------------------------------------------------


def test_c2_an_untracked_agent_in_an_outer_repository_never_blocks(tmp_path: Path) -> None:
    outer = make_repo(tmp_path / "outer")
    outer.write("agent/run_agent.py", AGENT_SOURCE)
    outer.git("add", "agent/run_agent.py")
    outer.git("commit", "-q", "-m", "a tracked agent/ next door")
    # "[a]gent" would match "agent" as a glob; taken literally it is untracked.
    outer.write("[a]gent/run_agent.py", AGENT_SOURCE)
    put_on_path(outer.path / "[a]gent")

    cls = hermes.get_ai_agent_class()
    assert cls is sys.modules["run_agent"].AIAgent
    assert sys.modules["run_agent"].__file__ == str(outer.path / "[a]gent" / "run_agent.py")
    assert hermes._AGENT_REVISION is None
    assert hermes.current_guard() is None
    outer.commit("outer moves")
    outer.commit("and again", name="agent/run_agent.py")
    hermes.ensure_agent_runtime_current()
    assert hermes.get_ai_agent_class() is cls


def test_get_ai_agent_class_is_none_when_the_import_fails_and_retries(tmp_path: Path) -> None:
    broken = make_agent(tmp_path / "broken", source="NOT_THE_CLASS = 1\n")
    put_on_path(broken.path)
    assert hermes.get_ai_agent_class() is None
    with pytest.raises(ImportError, match="AIAgent"):
        hermes.require_ai_agent_class()
    sys.modules.pop("run_agent")
    sys.path.remove(str(broken.path))
    assert hermes.get_ai_agent_class() is None  # no run_agent anywhere

    good = make_agent(tmp_path / "good")
    put_on_path(good.path)
    cls = hermes.get_ai_agent_class()
    assert cls is not None
    assert cls.__name__ == "AIAgent"


# -- pure logic with a replaced read (how Hermes WebUI's own tests drive it) ----------


def test_no_known_revision_is_a_no_op(monkeypatch: pytest.MonkeyPatch) -> None:
    def never(agent_dir: Path | None, *, module_path: Path | None = None) -> str | None:
        raise AssertionError("read without a known revision")

    monkeypatch.setattr(hermes, "_read_agent_revision", never)
    hermes.ensure_agent_runtime_current()
    hermes._capture_loaded_agent_revision()  # no run_agent loaded: nothing to bind


@pytest.mark.parametrize(
    ("reading", "raises"),
    [("a" * 40, False), ("b" * 40, True), (None, True), (OSError("gone"), True)],
)
def test_a_replaced_read_decides_against_the_known_revision(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, reading: str | Exception | None, raises: bool
) -> None:
    def fake(agent_dir: Path | None, *, module_path: Path | None = None) -> str | None:
        assert agent_dir == tmp_path
        if isinstance(reading, Exception):
            raise reading
        return reading

    monkeypatch.setattr(hermes, "_AGENT_REVISION", "a" * 40)
    monkeypatch.setattr(hermes, "_AGENT_SOURCE_DIR", tmp_path)
    monkeypatch.setattr(hermes, "_read_agent_revision", fake)
    if raises:
        with pytest.raises(hermes.AgentRuntimeChangedError, match="Hermes Agent was updated"):
            hermes.ensure_agent_runtime_current()
    else:
        hermes.ensure_agent_runtime_current()
    assert hermes._AGENT_REVISION == "a" * 40


def test_the_error_is_built_from_one_message() -> None:
    exc = hermes.AgentRuntimeChangedError("Hermes Agent was updated. Restart Hermes WebUI.")
    assert str(exc) == "Hermes Agent was updated. Restart Hermes WebUI."
    assert isinstance(exc, RuntimeError)
    assert isinstance(exc, StalewatchError)
    copy = pickle.loads(pickle.dumps(exc))  # noqa: S301 - our own bytes; crosses process boundaries
    assert type(copy) is hermes.AgentRuntimeChangedError
    assert str(copy) == str(exc)
    assert hermes.agent_runtime_stale_payload(exc) == {
        "error": str(exc),
        "type": "agent_runtime_stale",
        "retryable": True,
    }


def test_a_web_barrier_answers_409_with_the_hermes_payload(agent: Repo) -> None:
    hermes.get_ai_agent_class()
    agent.commit("update", name="run_agent.py")

    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        start_response("200 OK", [])
        return [b"chat started"]

    barrier = WSGIBarrier(app, hermes.ensure_agent_runtime_current, ["/api/chat"], kind="agent_runtime_stale")
    statuses: list[str] = []
    body = b"".join(
        barrier({"REQUEST_METHOD": "POST", "PATH_INFO": "/api/chat"}, lambda s, h: statuses.append(s))  # type: ignore[arg-type]
    )
    assert statuses == ["409 Conflict"]
    payload = json.loads(body)
    assert payload["type"] == "agent_runtime_stale"
    assert payload["retryable"] is False  # no daemon: retrying changes nothing until a restart
    assert "Restart Hermes WebUI" in payload["error"]


# -- discovery and a fresh process ----------------------------------------------------


def test_agent_dir_discovery_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("HERMES_WEBUI_AGENT_DIR", raising=False)
    monkeypatch.delenv("HERMES_HOME", raising=False)
    assert hermes._discover_agent_dir() is None

    def agent_at(path: Path) -> Path:
        path.mkdir(parents=True)
        (path / "run_agent.py").write_text(AGENT_SOURCE)
        return path

    flat = agent_at(home / "hermes-agent")
    assert hermes._discover_agent_dir() == flat
    dotted = agent_at(home / ".hermes" / "hermes-agent")
    assert hermes._discover_agent_dir() == dotted
    custom_home = tmp_path / "custom-home"
    monkeypatch.setenv("HERMES_HOME", str(custom_home))
    assert hermes._discover_agent_dir() == dotted  # no agent under $HERMES_HOME yet
    in_home = agent_at(custom_home / "hermes-agent")
    assert hermes._discover_agent_dir() == in_home
    monkeypatch.setenv("HERMES_WEBUI_AGENT_DIR", str(tmp_path / "empty"))
    assert hermes._discover_agent_dir() == in_home  # no run_agent.py there: skipped
    explicit = agent_at(tmp_path / "explicit")
    link = tmp_path / "link"
    link.symlink_to(explicit)
    monkeypatch.setenv("HERMES_WEBUI_AGENT_DIR", str(link))
    assert hermes._discover_agent_dir() == explicit.resolve()


_WEBUI_SCRIPT = """
import json, sys
import api.agent_runtime as agent_runtime
from stalewatch.hermes import dropin

assert agent_runtime is dropin, agent_runtime
print(json.dumps({"agent_dir": str(agent_runtime._AGENT_DIR)}), flush=True)
sys.path.insert(0, str(agent_runtime._AGENT_DIR))  # as the WebUI's api.config does
cls = agent_runtime.get_ai_agent_class()
print(json.dumps({
    "class": cls.__name__,
    "revision": agent_runtime._AGENT_REVISION,
    "watching": agent_runtime.wait_until_watching(10),
}), flush=True)
sys.stdin.readline()  # the test commits meanwhile
try:
    agent_runtime.ensure_agent_runtime_current()
    print(json.dumps({"payload": None}), flush=True)
except agent_runtime.AgentRuntimeChangedError as exc:
    print(json.dumps({"payload": agent_runtime.agent_runtime_stale_payload(exc)}), flush=True)
agent_runtime.stop()
"""


def test_the_three_line_drop_in_in_a_fresh_process(tmp_path: Path) -> None:
    repo = make_agent(tmp_path / "hermes-agent")
    link = tmp_path / "agent-link"
    link.symlink_to(repo.path)
    webui = tmp_path / "webui"
    (webui / "api").mkdir(parents=True)
    (webui / "api" / "__init__.py").write_text("")
    (webui / "api" / "agent_runtime.py").write_text(
        "import sys\nfrom stalewatch.hermes import dropin\nsys.modules[__name__] = dropin\n"
    )
    env = {**os.environ, "HERMES_WEBUI_AGENT_DIR": str(link), "HOME": str(tmp_path / "home")}
    env.pop("HERMES_HOME", None)
    with python_child(_WEBUI_SCRIPT, cwd=webui, env=env, stderr=tmp_path / "webui.stderr") as child:
        first = child.json()
        assert first == {"agent_dir": str(repo.path.resolve())}, child.stderr()
        bound = child.json()
        assert bound == {"class": "AIAgent", "revision": repo.head(), "watching": True}, child.stderr()
        new = repo.commit("update", name="run_agent.py")
        child.send("go\n")
        payload = child.json()["payload"]
        assert child.finish() == 0, child.stderr()
    assert payload["type"] == "agent_runtime_stale"
    assert payload["retryable"] is True
    assert "Hermes Agent was updated" in payload["error"]
    assert new[:7] in payload["error"]
    assert bound["revision"][:7] in payload["error"]


# -- the package and the older shim ------------------------------------------------------


def test_the_package_reads_the_drop_in_names_and_its_replaced_state(
    agent: Repo, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``sys.modules[__name__] = stalewatch.hermes`` (the older shim) reads what the drop-in holds."""
    import stalewatch.hermes as package

    assert package.get_ai_agent_class is hermes.get_ai_agent_class
    assert package.AgentRuntimeChangedError is hermes.AgentRuntimeChangedError
    assert package.get_ai_agent_class() is sys.modules["run_agent"].AIAgent
    assert package._AGENT_REVISION == hermes._AGENT_REVISION == agent.head()
    calls: list[object] = []

    def fake(agent_dir: Path | None, *, module_path: Path | None = None) -> str | None:
        calls.append(agent_dir)
        return "f" * 40

    monkeypatch.setattr(hermes, "_read_agent_revision", fake)  # replaced on the drop-in...
    assert package._read_agent_revision is fake  # ...is what the package reads
    assert "_read_agent_revision" not in vars(package)  # never copied: read on every access
    with pytest.raises(AttributeError):
        package.logger  # noqa: B018 - only the drop-in's names are the package's
    hermes.stop()  # the read decides
    with pytest.raises(hermes.AgentRuntimeChangedError):
        package.ensure_agent_runtime_current()
    assert calls == [agent.path.resolve()]


_IMPORT_SCRIPT = """
import json, pathlib
looked = []
real = pathlib.Path.is_file
def is_file(path):
    if path.name == "run_agent.py":
        looked.append(str(path))
    return real(path)
pathlib.Path.is_file = is_file
from stalewatch.hermes import accelerate
from stalewatch.hermes import dropin
before = len(looked)
agent_dir = dropin._AGENT_DIR
print(json.dumps({"at_import": before, "on_use": len(looked), "found": str(agent_dir)}))
"""


def test_importing_the_package_or_the_drop_in_runs_no_discovery(tmp_path: Path) -> None:
    agent = make_agent(tmp_path / "agent")
    env = {**os.environ, "HERMES_WEBUI_AGENT_DIR": str(agent.path), "HOME": str(tmp_path / "home")}
    done = subprocess.run(
        [sys.executable, "-c", _IMPORT_SCRIPT],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["at_import"] == 0  # accelerate alone, and the drop-in's import, discover nothing
    assert report["on_use"] >= 1  # _AGENT_DIR is discovered on first use
    assert report["found"] == str(agent.path.resolve())


def test_the_error_keeps_the_callers_message_through_stale_error() -> None:
    exc = hermes.AgentRuntimeChangedError("words of the caller", loaded_revision="a" * 40)
    assert str(exc) == "words of the caller"
    assert exc.args == ("words of the caller",)
    assert (exc.loaded_revision, exc.current_revision, exc.restart) == ("a" * 40, None, None)
    assert isinstance(exc, StaleError)
