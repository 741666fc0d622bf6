"""A WebUI-shaped ``agent_runtime`` module, driven as the WebUI's own tests drive theirs.

Every test runs twice: on the module as it is, and with the two-line accelerator
suffix. The outcomes must be the same; with the suffix, a check after binding starts
no process.
"""

from __future__ import annotations

import importlib
import os
import sys
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

from stalewatch.hermes import agent_head
from tests.support import webui_runtime
from tests.support.children import python_child
from tests.support.process_audit import processes
from tests.support.repos import Repo, make_agent, make_repo

AGENT_SOURCE = "class AIAgent:\n    revision = 'before'\n"


@pytest.fixture(params=[False, True], ids=["upstream", "accelerated"])
def runtime(request: pytest.FixtureRequest) -> Iterator[types.ModuleType]:
    agent_head.BINDINGS.clear()
    saved_path = list(sys.path)
    sys.modules.pop("run_agent", None)
    module = webui_runtime.load(accelerated=request.param)
    assert hasattr(module._read_agent_revision, "__stalewatch_original__") is request.param
    yield module
    sys.modules.pop(module.__name__, None)
    sys.modules.pop("run_agent", None)
    sys.path[:] = saved_path
    importlib.invalidate_caches()
    agent_head.BINDINGS.clear()


def use_agent(repo: Repo) -> None:
    sys.path.insert(0, str(repo.path))
    importlib.invalidate_caches()


def test_the_loaded_agent_fails_closed_after_a_commit(runtime: types.ModuleType, tmp_path: Path) -> None:
    agent = make_agent(tmp_path / "hermes-agent", AGENT_SOURCE)
    use_agent(agent)
    loaded = agent.head()
    assert runtime.get_ai_agent_class().revision == "before"
    assert loaded == runtime._AGENT_REVISION
    runtime.ensure_agent_runtime_current()

    agent.write("run_agent.py", "class AIAgent:\n    revision = 'after'\n")
    agent.git("add", "run_agent.py")
    agent.git("commit", "-q", "-m", "after")
    with pytest.raises(runtime.AgentRuntimeChangedError, match="Restart Hermes WebUI"):
        runtime.get_ai_agent_class()
    with pytest.raises(runtime.AgentRuntimeChangedError):
        runtime.require_ai_agent_class()
    assert loaded == runtime._AGENT_REVISION

    agent.git("reset", "-q", "--hard", loaded)
    runtime.ensure_agent_runtime_current()


def test_a_non_git_install_keeps_working(runtime: types.ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runtime, "_AGENT_REVISION", None)
    monkeypatch.setattr(runtime, "_read_agent_revision", lambda _path, **_kwargs: None)
    runtime.ensure_agent_runtime_current()


def fake_run_agent(
    monkeypatch: pytest.MonkeyPatch, module_file: Path | None, agent_class: type | None = None
) -> None:
    loaded = types.ModuleType("run_agent")
    if module_file is not None:
        loaded.__file__ = str(module_file)
    if agent_class is not None:
        loaded.__dict__["AIAgent"] = agent_class
    monkeypatch.setitem(sys.modules, "run_agent", loaded)


def unbind(runtime: types.ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("_AGENT_SOURCE_DIR", "_AGENT_MODULE_PATH", "_AGENT_REVISION"):
        monkeypatch.setattr(runtime, name, None)


def test_an_untracked_module_in_an_outer_repository_is_not_git(
    runtime: types.ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    outer = make_repo(tmp_path / "outer-repo")
    module_file = outer.write("installed/hermes-agent/run_agent.py", "class AIAgent: pass\n")
    fake_run_agent(monkeypatch, module_file)
    unbind(runtime, monkeypatch)
    runtime._capture_loaded_agent_revision()
    assert module_file.parent.resolve() == runtime._AGENT_SOURCE_DIR
    assert module_file.resolve() == runtime._AGENT_MODULE_PATH
    assert runtime._AGENT_REVISION is None
    outer.commit("unrelated change")
    runtime.ensure_agent_runtime_current()


def test_pathspec_metacharacters_are_taken_literally(
    runtime: types.ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    outer = make_repo(tmp_path / "outer-repo")
    outer.write("installed/agent/run_agent.py", "class Other: pass\n")
    outer.git("add", "installed/agent/run_agent.py")
    outer.git("commit", "-q", "-m", "a tracked lookalike")
    module_file = outer.write("installed/[a]gent/run_agent.py", "class AIAgent: pass\n")
    fake_run_agent(monkeypatch, module_file)
    unbind(runtime, monkeypatch)
    runtime._capture_loaded_agent_revision()
    assert module_file.parent.resolve() == runtime._AGENT_SOURCE_DIR
    assert runtime._AGENT_REVISION is None


def test_identity_comes_from_the_loaded_module(
    runtime: types.ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    configured = make_agent(tmp_path / "configured-agent", "class AIAgent:\n    revision = 'configured'\n")
    loaded = make_agent(tmp_path / "loaded-agent", "class AIAgent:\n    revision = 'loaded'\n")
    fake_run_agent(monkeypatch, loaded.path / "run_agent.py")
    monkeypatch.setattr(runtime, "_AGENT_DIR", configured.path)
    unbind(runtime, monkeypatch)
    runtime._capture_loaded_agent_revision()
    assert loaded.path.resolve() == runtime._AGENT_SOURCE_DIR
    assert (loaded.path / "run_agent.py").resolve() == runtime._AGENT_MODULE_PATH
    assert loaded.head() == runtime._AGENT_REVISION


def test_a_known_revision_becoming_unreadable_fails_closed(
    runtime: types.ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runtime, "_AGENT_REVISION", "known-revision")
    monkeypatch.setattr(runtime, "_read_agent_revision", lambda _path, **_kwargs: None)
    with pytest.raises(runtime.AgentRuntimeChangedError):
        runtime.ensure_agent_runtime_current()


def test_a_recapture_cannot_downgrade_a_known_revision(
    runtime: types.ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    source_dir = tmp_path / "loaded-agent"
    source_dir.mkdir()
    fake_run_agent(monkeypatch, source_dir / "run_agent.py", type("AIAgent", (), {}))
    monkeypatch.setattr(runtime, "_AGENT_SOURCE_DIR", source_dir.resolve())
    monkeypatch.setattr(runtime, "_AGENT_MODULE_PATH", source_dir / "run_agent.py")
    monkeypatch.setattr(runtime, "_AGENT_REVISION", "known-revision")
    revisions = iter(("known-revision", None))
    monkeypatch.setattr(runtime, "_read_agent_revision", lambda _path, **_kwargs: next(revisions))
    with pytest.raises(runtime.AgentRuntimeChangedError):
        runtime.require_ai_agent_class()
    assert runtime._AGENT_REVISION == "known-revision"


def test_swapping_the_module_in_memory_is_not_a_change(
    runtime: types.ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    agent = make_agent(tmp_path / "loaded-agent", AGENT_SOURCE)
    fake_run_agent(monkeypatch, agent.path / "run_agent.py", type("LoadedAgent", (), {}))
    unbind(runtime, monkeypatch)
    runtime._capture_loaded_agent_revision()
    replacement = type("ReplacementAgent", (), {})
    fake_run_agent(monkeypatch, None, replacement)
    assert runtime.require_ai_agent_class() is replacement
    assert agent.path.resolve() == runtime._AGENT_SOURCE_DIR
    assert agent.head() == runtime._AGENT_REVISION


def test_with_the_suffix_a_check_starts_no_process(runtime: types.ModuleType, tmp_path: Path) -> None:
    agent = make_agent(tmp_path / "hermes-agent", AGENT_SOURCE)
    use_agent(agent)
    runtime.get_ai_agent_class()
    with processes() as started:
        for _ in range(100):
            runtime.ensure_agent_runtime_current()
        runtime.get_ai_agent_class()
    accelerated = hasattr(runtime._read_agent_revision, "__stalewatch_original__")
    assert len(started) == (0 if accelerated else 303)  # 3 git processes per check upstream
    agent.commit("update", name="run_agent.py")
    with processes() as started, pytest.raises(runtime.AgentRuntimeChangedError):
        runtime.ensure_agent_runtime_current()
    assert len(started) == (0 if accelerated else 3)


_PROBE = """
import json, sys
from api import agent_runtime
sys.path.insert(0, str(agent_runtime._AGENT_DIR))
cls = agent_runtime.get_ai_agent_class()
print(json.dumps({
    "accelerated": hasattr(agent_runtime._read_agent_revision, "__stalewatch_original__"),
    "revision": agent_runtime._AGENT_REVISION,
    "class": cls.revision,
}), flush=True)
sys.stdin.readline()  # the test commits meanwhile
try:
    agent_runtime.ensure_agent_runtime_current()
    print(json.dumps({"error": None}), flush=True)
except agent_runtime.AgentRuntimeChangedError as exc:
    print(json.dumps({"error": str(exc)}), flush=True)
"""


def test_the_suffix_at_import_in_a_fresh_process(tmp_path: Path) -> None:
    agent = make_agent(tmp_path / "hermes-agent", AGENT_SOURCE)
    webui = tmp_path / "webui"
    (webui / "api").mkdir(parents=True)
    (webui / "api" / "__init__.py").write_text("")
    source = Path(webui_runtime.__file__).read_text()
    (webui / "api" / "agent_runtime.py").write_text(source + webui_runtime.SUFFIX)
    env = {**os.environ, "HERMES_WEBUI_AGENT_DIR": str(agent.path)}
    with python_child(_PROBE, cwd=webui, env=env, stderr=tmp_path / "probe.stderr") as child:
        first = child.json()
        assert first == {"accelerated": True, "revision": agent.head(), "class": "before"}, child.stderr()
        agent.commit("update", name="run_agent.py")
        child.send("go\n")
        second = child.json()
        assert child.finish() == 0, child.stderr()
    assert second == {"error": webui_runtime.MESSAGE}  # upstream's message, untouched
