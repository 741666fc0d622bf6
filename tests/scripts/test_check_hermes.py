"""scripts/check_hermes.py on a WebUI-shaped checkout: both runs, both summaries, same outcomes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.repos import Repo, make_repo

ROOT = Path(__file__).resolve().parents[2]
SHAPED = ROOT / "tests" / "support" / "webui_runtime.py"

GUARD_TESTS = """
import subprocess, sys, types
from pathlib import Path

from api import agent_runtime


def test_a_commit_fails_closed(tmp_path, monkeypatch):
    repo = tmp_path / "agent"
    repo.mkdir()
    (repo / "run_agent.py").write_text("class AIAgent: pass\\n")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t.invalid"]
    subprocess.run([*git, "init", "-q"], cwd=repo, check=True)
    subprocess.run([*git, "add", "run_agent.py"], cwd=repo, check=True)
    subprocess.run([*git, "commit", "-qm", "one"], cwd=repo, check=True)
    loaded = types.ModuleType("run_agent")
    loaded.__file__ = str(repo / "run_agent.py")
    monkeypatch.setitem(sys.modules, "run_agent", loaded)
    for name in ("_AGENT_SOURCE_DIR", "_AGENT_MODULE_PATH", "_AGENT_REVISION"):
        monkeypatch.setattr(agent_runtime, name, None)
    agent_runtime._capture_loaded_agent_revision()
    agent_runtime.ensure_agent_runtime_current()
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "two"], cwd=repo, check=True)
    try:
        agent_runtime.ensure_agent_runtime_current()
    except agent_runtime.AgentRuntimeChangedError:
        return
    raise AssertionError("not stale")


def test_git_in_the_copy_is_a_repository_of_its_own():
    repo = Path(__file__).resolve().parents[1]
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t.invalid", "-C", str(repo)]
    assert subprocess.run([*git, "ls-files", "--error-unmatch", "api/agent_runtime.py"]).returncode == 0
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "made in the copy"], check=True)


def test_fails_in_both_runs():
    assert agent_runtime.MESSAGE == "another message"
"""


@pytest.mark.slow
def test_check_hermes_runs_the_guard_tests_with_and_without_the_suffix(tmp_path: Path) -> None:
    webui = make_repo(tmp_path / "webui", initial=False).path
    (webui / "api").mkdir()
    (webui / "api" / "__init__.py").write_text("")
    (webui / "api" / "agent_runtime.py").write_text(SHAPED.read_text())
    (webui / "tests").mkdir()
    (webui / "tests" / "test_agent_runtime_guard.py").write_text(GUARD_TESTS)
    (webui / "tests" / "test_unrelated.py").write_text("def test_nothing():\n    pass\n")
    repo = Repo(webui)
    repo.git("add", "-A")
    repo.git("commit", "-q", "-m", "the webui")
    (webui / "api" / "uncommitted.py").write_text("# copied too\n")
    before = (webui / "api" / "agent_runtime.py").read_text()
    head = repo.head()

    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "check_hermes.py"), str(webui), "--timeout", "120"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    assert "tests: 1 files: tests/test_agent_runtime_guard.py" in out
    assert "with the suffix, api.agent_runtime is accelerated" in out
    assert "without the suffix: 1 failed, 2 passed" in out
    assert "with the suffix:    1 failed, 2 passed" in out
    assert (
        "fails without the suffix too: tests.test_agent_runtime_guard::test_fails_in_both_runs (failed)"
        in out
    )
    assert "per test: 3 identical outcomes, 0 differ" in out
    assert (webui / "api" / "agent_runtime.py").read_text() == before  # the checkout is never changed
    assert repo.head() == head  # the copies' commits stayed in the copies


@pytest.mark.slow
def test_check_hermes_reports_a_test_whose_outcome_differs(tmp_path: Path) -> None:
    webui = tmp_path / "webui"
    (webui / "api").mkdir(parents=True)
    (webui / "tests").mkdir()
    (webui / "api" / "__init__.py").write_text("")
    (webui / "api" / "agent_runtime.py").write_text(SHAPED.read_text())
    (webui / "tests" / "test_agent_runtime_read.py").write_text(
        "from api import agent_runtime\n\n"
        "def test_the_read_is_the_modules_own():\n"
        "    assert agent_runtime._read_agent_revision.__module__ == agent_runtime.__name__\n"
        "    assert not hasattr(agent_runtime._read_agent_revision, '__stalewatch_original__')\n"
    )
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "check_hermes.py"), str(webui), "--timeout", "120"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert (
        "differs: tests.test_agent_runtime_read::test_the_read_is_the_modules_own: passed / failed"
        in done.stdout
    )
    assert "per test: 0 identical outcomes, 1 differ" in done.stdout


def test_check_hermes_refuses_what_is_not_a_webui(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "check_hermes.py"), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "not a Hermes WebUI checkout" in done.stderr
