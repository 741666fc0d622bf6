"""`accelerate(module, daemon=SOCKET)`: restart-aware 409s from a real daemon (issues 8, 9).

The module is WebUI-shaped, of the newer kind that builds its stale payload in
``agent_runtime_stale_payload(exc)`` (our own code; none of the WebUI's). A real daemon
with a restart policy watches the Agent checkout; a hold file keeps its restart
"waiting" while the payload is inspected.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import signal
import sys
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

from stalewatch.hermes import accelerate, agent_head
from stalewatch.hermes.accelerator import RestartView
from tests.support import webui_runtime
from tests.support.daemons import WAIT, Subscriber, greet, short_dir, start_daemon
from tests.support.repos import Repo, make_agent

PAYLOAD_FUNCTION = """

def agent_runtime_stale_payload(exc):
    return {"error": str(exc), "type": "agent_runtime_stale", "retryable": True}
"""


def load(socket: Path | None, *, payload: bool = True) -> types.ModuleType:
    """A fresh WebUI-shaped module (with a payload function), accelerated."""
    name = f"webui_shaped_daemon_{id(socket)}_{payload}"
    source = Path(webui_runtime.__file__).read_text() + (PAYLOAD_FUNCTION if payload else "")
    module = types.ModuleType(name)
    module.__file__ = webui_runtime.__file__
    sys.modules[name] = module
    exec(compile(source, webui_runtime.__file__, "exec"), module.__dict__)  # noqa: S102
    assert accelerate(module, daemon=socket) is True
    VIEWS.append(module._read_agent_revision.__stalewatch_view__)
    return module


VIEWS: list[RestartView | None] = []  # every load()'s link to the daemon, stopped after each test


@pytest.fixture
def workdir() -> Iterator[Path]:
    with short_dir() as path:
        yield path


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[Repo]:
    repo = make_agent(tmp_path / "hermes-agent")
    saved = list(sys.path)
    sys.modules.pop("run_agent", None)
    sys.path.insert(0, str(repo.path))
    importlib.invalidate_caches()
    agent_head.BINDINGS.clear()
    yield repo
    while VIEWS:  # no client thread outlives the test
        if (view := VIEWS.pop()) is not None:
            view.stop()
    sys.path[:] = saved
    sys.modules.pop("run_agent", None)
    agent_head.BINDINGS.clear()


def daemon_config(workdir: Path, agent: Repo, hold: Path) -> Path:
    file = workdir / "c.toml"
    action = json.dumps([sys.executable, "-c", "pass"])
    file.write_text(
        f'keepalive = 0.5\n[[checkout]]\npath = "{agent.path}"\n[checkout.restart]\n'
        f'action = {action}\nsettle = 0.05\nmin_interval = 0\nhold_while = "{hold}"\n'
    )
    file.chmod(0o600)
    return file


def test_r7_the_payload_says_a_restart_is_coming_and_the_webui_registers_its_revision(
    workdir: Path, agent: Repo
) -> None:
    hold = workdir / ".updating"
    hold.touch()  # the update is "still running": the restart waits, and says so
    config = daemon_config(workdir, agent, hold)
    with start_daemon(workdir, "--config", str(config)) as daemon, Subscriber(daemon.socket) as sub:
        greet(sub)
        runtime = load(daemon.socket)
        plain = load(None)  # the same module without a daemon: upstream's payload
        runtime.get_ai_agent_class()  # binds the Agent: the WebUI registers
        registered = sub.next("processes", skip=("ping", "health"))["processes"]
        assert [(p["pid"], p["revision"]) for p in registered] == [(os.getpid(), agent.head())]
        agent.commit("update", name="run_agent.py")
        skip = ("ping", "health", "event", "processes")
        while not (line := sub.next("restart", skip=skip))["reason"] or not line["reason"].startswith("hold"):
            pass
        assert line["phase"] == "waiting"
        with pytest.raises(runtime.AgentRuntimeChangedError) as caught:
            runtime.ensure_agent_runtime_current()
        view = runtime.agent_runtime_stale_payload.__stalewatch_view__
        for _ in range(int(WAIT / 0.5)):  # the WebUI's client hears the same lines
            state = view.state()
            if state is not None and (state.reason or "").startswith("hold"):
                break
            sub.next("ping", skip=("health", "restart", "processes", "event"))
        payload = runtime.agent_runtime_stale_payload(caught.value)
        assert payload["restart_scheduled"] is True
        assert payload["restart_phase"] == "waiting"
        assert isinstance(payload["retry_after"], int) and payload["retry_after"] >= 1
        upstream = plain.agent_runtime_stale_payload(caught.value)
        assert {k: payload[k] for k in ("error", "type", "retryable")} == upstream
        # Without a daemon the payload is upstream's, byte for byte.
        expected = {"error": str(caught.value), "type": "agent_runtime_stale", "retryable": True}
        assert json.dumps(upstream) == json.dumps(expected)


def test_a_module_without_a_payload_function_still_follows_the_daemon_and_says_so(
    workdir: Path, agent: Repo, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="stalewatch.hermes"):
        module = load(workdir / "nowhere.sock", payload=False)  # release exp-v0.52.262's shape
    assert hasattr(module._read_agent_revision, "__stalewatch_original__")
    assert "agent_runtime_stale_payload" in caplog.text and "registers" in caplog.text
    assert not hasattr(module, "agent_runtime_stale_payload")
    view = module._read_agent_revision.__stalewatch_view__
    assert view.socket == workdir / "nowhere.sock" and view.module is module


def test_r7_a_commit_the_webui_sees_before_a_polling_daemon_is_a_restart_pending(
    workdir: Path, agent: Repo
) -> None:
    file = workdir / "c.toml"
    action = json.dumps([sys.executable, "-c", "pass"])
    file.write_text(
        f'keepalive = 5\n[[checkout]]\npath = "{agent.path}"\n[checkout.restart]\n'
        f"action = {action}\nsettle = 0.05\nmin_interval = 0\n"
    )
    file.chmod(0o600)
    poll = {"STALEWATCH_POLL": "1", "STALEWATCH_POLL_INTERVAL": "0.2"}
    with start_daemon(workdir, "--config", str(file), env=poll) as daemon, Subscriber(daemon.socket) as sub:
        greet(sub)
        runtime = load(daemon.socket)
        runtime.get_ai_agent_class()  # binds the Agent: the WebUI registers
        assert sub.next("processes", skip=("ping", "health"))["processes"]
        view = runtime.agent_runtime_stale_payload.__stalewatch_view__
        # The WebUI's client registers once it applied its snapshot: announced, it knows.
        assert view.state() is not None and view.state().phase.value == "idle"
        daemon.signal(signal.SIGSTOP)  # the daemon cannot see the update: the WebUI is first
        try:
            agent.commit("update", name="run_agent.py")
            with pytest.raises(runtime.AgentRuntimeChangedError) as caught:
                runtime.ensure_agent_runtime_current()
            payload = runtime.agent_runtime_stale_payload(caught.value)
        finally:
            daemon.signal(signal.SIGCONT)
        assert payload["restart_scheduled"] is True and payload["restart_phase"] == "scheduled", payload
        assert isinstance(payload["retry_after"], int) and payload["retry_after"] >= 1, payload
