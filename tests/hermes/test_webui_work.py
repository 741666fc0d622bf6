"""The WebUI's chat turns are its work in flight (R8): a real daemon hears them counted.

A WebUI-shaped process of either shape, with the docs' ``daemon=`` lines, registers
with a real daemon whose restart policy waits (a hold file) once the Agent moved;
its active streams and agent runs reach the daemon's ``processes`` as ``inflight``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from stalewatch.client.connection import read_status
from tests.hermes.test_webui_lines import doc_block
from tests.hermes.webui_shapes import SHAPES, make_webui
from tests.support.children import python_child
from tests.support.daemons import WAIT, Subscriber, greet, short_dir, start_daemon
from tests.support.repos import make_agent

_CHILD = """
import json, os, sys
sys.path.append(os.environ["AGENT"])
import api.agent_runtime as runtime
import api.config as config
assert runtime.get_ai_agent_class() is not None   # binds the Agent: registers
print(json.dumps({"bound": runtime._AGENT_REVISION}), flush=True)
for command in sys.stdin:
    name, _, stream = command.strip().partition(" ")
    if name == "start":                            # a chat turn starts: a stream and its run
        with config.STREAMS_LOCK:
            config.STREAMS[stream] = object()
        with config.ACTIVE_RUNS_LOCK:
            config.ACTIVE_RUNS[stream] = object()
    elif name == "end":                            # it ends: the stream first, then the run
        with config.STREAMS_LOCK:
            config.STREAMS.pop(stream, None)
        with config.ACTIVE_RUNS_LOCK:
            config.ACTIVE_RUNS.pop(stream, None)
    print(json.dumps({"done": command.strip()}), flush=True)
"""


@pytest.fixture
def workdir() -> Iterator[Path]:
    with short_dir() as path:
        yield path


def counts(path: Path) -> list[int]:
    _, (snapshot,) = read_status(path)
    return [p["inflight"] for p in snapshot["processes"]]


def wait_counts(path: Path, pace: Subscriber, expected: list[int]) -> None:
    """Until the daemon lists ``expected``; between looks, its next line (a ping) paces us."""
    deadline = time.monotonic() + WAIT
    while (seen := counts(path)) != expected:
        assert time.monotonic() < deadline, f"the daemon lists {seen}, not {expected}"
        pace.next(skip=())


@pytest.mark.parametrize("shape", SHAPES)
def test_r8_the_webuis_chat_turns_reach_the_daemon_as_work_in_flight(
    workdir: Path, tmp_path: Path, shape: str
) -> None:
    agent = make_agent(tmp_path / "hermes-agent")
    webui = make_webui(tmp_path / "hermes-webui", shape, doc_block("hermes-accelerate-daemon"))
    hold = workdir / ".updating"
    hold.touch()  # the update "still runs": the restart is coming, and waits
    config = workdir / "c.toml"
    action = json.dumps([sys.executable, "-c", "pass"])
    config.write_text(
        f'keepalive = 0.5\n[[checkout]]\npath = "{agent.path}"\n[checkout.restart]\n'
        f'action = {action}\nsettle = 0.05\nmin_interval = 0\nhold_while = "{hold}"\n'
    )
    config.chmod(0o600)
    with start_daemon(workdir, "--config", str(config)) as daemon, Subscriber(daemon.socket) as sub:
        greet(sub)
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("STALEWATCH_", "HERMES_"))},
            "PYTHONPATH": str(webui),
            "STALEWATCH_SOCKET": str(daemon.socket),
            "AGENT": str(agent.path),
        }
        with python_child(_CHILD, cwd=webui, env=env, stderr=tmp_path / "child.err") as child:
            assert child.json()["bound"] == agent.head()
            registered = sub.next("processes")["processes"]
            assert [(p["pid"], p["inflight"]) for p in registered] == [(child.proc.pid, 0)]  # none running
            child.send("start s1\n")
            child.json()
            agent.commit("update", name="run_agent.py")  # `hermes update` pulled
            skip = ("ping", "health", "event", "processes")
            while not (sub.next("restart", skip=skip).get("reason") or "").startswith("hold"):
                pass
            wait_counts(daemon.socket, sub, [1])  # the turn running since before the pull
            child.send("start s2\n")
            child.json()
            wait_counts(daemon.socket, sub, [2])
            child.send("end s1\n")
            child.json()
            child.send("end s2\n")
            child.json()
            wait_counts(daemon.socket, sub, [0])
