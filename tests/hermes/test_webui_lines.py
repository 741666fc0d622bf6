"""Every line we tell a Hermes user to paste works in the WebUI's file, of either shape.

The docs' exact blocks (docs/hermes.md) and what ``stalewatch hermes setup`` prints
are appended to WebUI-shaped ``api/agent_runtime.py`` files (:mod:`.webui_shapes`:
the older shape imports ``sys`` and not ``os``), imported in a fresh interpreter, and
must accelerate it. With ``daemon=``, a real daemon with a restart policy sees the
WebUI register the revision it loaded on both shapes; the newer shape's own restart
is left to the daemon, and its 409 says what the daemon says, never the opposite.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.docs.doc_blocks import blocks
from tests.hermes.webui_shapes import SHAPES, make_webui
from tests.support.children import python_child
from tests.support.daemons import Subscriber, greet, short_dir, start_daemon
from tests.support.repos import Repo, make_agent

ROOT = Path(__file__).resolve().parents[2]

_PROBE = """
import json, os, sys
import api.agent_runtime as runtime
read = runtime._read_agent_revision
view = getattr(read, "__stalewatch_view__", None)
print(json.dumps({
    "accelerated": hasattr(read, "__stalewatch_original__"),
    "daemon": None if view is None else str(view.socket),
    "self_restart_replaced": hasattr(
        getattr(runtime, "_schedule_automatic_restart", None), "__stalewatch_view__"
    ),
}))
"""


def doc_block(marker: str) -> str:
    (block,) = [b for b in blocks() if b.marker == marker]
    return block.code


def setup_lines() -> str:
    """The accelerator lines ``stalewatch hermes setup`` prints (its last comment lines)."""
    from stalewatch.hermes.setup import ACCELERATOR_LINES

    return "\n".join(ACCELERATOR_LINES) + "\n"


LINES = {
    "docs-plain": lambda: doc_block("hermes-accelerate"),
    "docs-daemon": lambda: doc_block("hermes-accelerate-daemon"),
    "setup-printed": setup_lines,
}


def probe(webui: Path, **env: str) -> dict[str, object]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("STALEWATCH_", "HERMES_"))}
    done = subprocess.run(
        [sys.executable, "-c", _PROBE],
        cwd=webui,
        env={**clean, "PYTHONPATH": str(webui), "PYTHONDONTWRITEBYTECODE": "1", **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout.splitlines()[-1]))


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("lines", sorted(LINES))
def test_the_lines_we_print_accelerate_the_webuis_file(tmp_path: Path, shape: str, lines: str) -> None:
    text = LINES[lines]()
    webui = make_webui(tmp_path / "hermes-webui", shape, text)
    assert "import os" not in (webui / "api" / "agent_runtime.py").read_text() or shape == "7160"
    socket = tmp_path / "run" / "stalewatch.sock"
    found = probe(webui, STALEWATCH_SOCKET=str(socket))
    assert found["accelerated"] is True, found
    with_daemon = "daemon=" in text
    assert found["daemon"] == (str(socket) if with_daemon else None)
    assert found["self_restart_replaced"] is (with_daemon and shape == "7160")


def test_the_printed_lines_are_the_docs_lines() -> None:
    assert setup_lines() == doc_block("hermes-accelerate-daemon")


def pasted() -> dict[str, str]:
    """Every Python block of README.md and docs/ that calls ``accelerate(``, and setup's lines."""
    found = {b.id: b.code for b in blocks() if b.language == "python" and "accelerate(" in b.code}
    return {**found, "setup-printed": setup_lines()}


def free_names(code: str) -> set[str]:
    """The names ``code`` reads without binding them itself (what the file around it must give)."""
    tree = ast.parse(code)
    bound = {
        a.asname or a.name.split(".")[0]
        for n in ast.walk(tree)
        if isinstance(n, (ast.Import, ast.ImportFrom))
        for a in n.names
    }
    bound |= {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    read = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    return read - bound


@pytest.mark.unit
def test_every_pasted_block_needs_sys_alone() -> None:
    # Issue 16, problem 1: `os.environ.get(...)` in a pasted block crashed the WebUI, whose
    # file never imports `os`. A block may read `sys` and the module's `__name__`, no more.
    found = pasted()
    assert {"hermes-accelerate", "hermes-accelerate-daemon"} <= {k.split("@")[0] for k in found}
    needs = {where: sorted(free_names(code) - {"sys", "__name__"}) for where, code in found.items()}
    assert needs == {where: [] for where in found}


@pytest.mark.parametrize("where", sorted(pasted()))
def test_every_pasted_block_works_in_a_file_importing_only_sys(tmp_path: Path, where: str) -> None:
    text = pasted()[where]
    webui = make_webui(tmp_path / "hermes-webui", "sys-only", text)
    socket = tmp_path / "run" / "stalewatch.sock"
    found = probe(webui, STALEWATCH_SOCKET=str(socket))
    assert found["accelerated"] is True, found
    assert found["daemon"] == (str(socket) if "daemon=" in text else None)


# -- with a real daemon -------------------------------------------------------------------

_CHILD = """
import json, os, sys
sys.path.append(os.environ["AGENT"])              # the Agent, as the WebUI appends it
import api.agent_runtime as runtime
import api.config as config
import api.updates as updates
assert runtime.get_ai_agent_class() is not None   # binds the Agent: registers
view = runtime._read_agent_revision.__stalewatch_view__
print(json.dumps({"bound": runtime._AGENT_REVISION}), flush=True)
for command in sys.stdin:
    command = command.strip()
    if command == "check":
        try:
            runtime.ensure_agent_runtime_current()
            answer = {"stale": False}
        except runtime.AgentRuntimeChangedError as exc:
            build = getattr(runtime, "agent_runtime_stale_payload", lambda exc: {"error": str(exc)})
            payload = build(exc)
            answer = {"stale": True, "payload": payload}
        state = view.state()
        answer["phase"] = state.phase.value if state else None
        answer["reason"] = state.reason if state else None
        answer["own_restarts"] = len(updates.RESTARTS_ASKED)
        print(json.dumps(answer), flush=True)
    elif command == "work":
        with config.STREAMS_LOCK:
            config.STREAMS["s1"] = object()
        with config.ACTIVE_RUNS_LOCK:
            config.ACTIVE_RUNS["s1"] = object()
            config.ACTIVE_RUNS["s2"] = object()
        print(json.dumps({"work": view.work_in_flight()}), flush=True)
"""


@pytest.fixture
def workdir() -> Iterator[Path]:
    with short_dir() as path:
        yield path


def policy(workdir: Path, agent: Repo, hold: Path, incomplete: Path) -> Path:
    file = workdir / "c.toml"
    action = json.dumps([sys.executable, "-c", "pass"])
    file.write_text(
        f'keepalive = 0.5\n[[checkout]]\npath = "{agent.path}"\n[checkout.restart]\n'
        f'action = {action}\nsettle = 0.05\nmin_interval = 0\nhold_while = "{hold}"\n'
        f'incomplete_markers = ["{incomplete}"]\n'
    )
    file.chmod(0o600)
    return file


@pytest.mark.parametrize("shape", SHAPES)
def test_the_webui_registers_and_leaves_restarts_to_the_daemon(
    workdir: Path, tmp_path: Path, shape: str
) -> None:
    agent = make_agent(tmp_path / "hermes-agent")
    webui = make_webui(tmp_path / "hermes-webui", shape, doc_block("hermes-accelerate-daemon"))
    hold = workdir / ".updating"
    hold.touch()  # the update "still runs": the daemon's restart waits, and says so
    incomplete = workdir / ".update-incomplete"
    config = policy(workdir, agent, hold, incomplete)
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
            registered = sub.next("processes", skip=("ping", "health"))["processes"]
            assert [(p["pid"], p["revision"]) for p in registered] == [(child.proc.pid, agent.head())]
            child.send("check\n")
            assert child.json() == {
                "stale": False,
                "phase": "idle",
                "reason": None,
                "own_restarts": 0,
            }
            agent.commit("update", name="run_agent.py")
            skip = ("ping", "health", "event", "processes")
            while not (sub.next("restart", skip=skip).get("reason") or "").startswith("hold"):
                pass
            for _ in range(100):  # the WebUI's client hears the same line soon after
                child.send("check\n")
                answer = child.json()
                if (answer["reason"] or "").startswith("hold"):
                    break
            payload = answer["payload"]
            assert answer["stale"] is True and answer["own_restarts"] == 0, answer
            if shape == "7160":
                assert "will restart after the Agent update finishes" in payload["error"]
                assert payload["restart_scheduled"] is True and payload["restart_phase"] == "waiting"
                assert payload["retry_after"] >= 1 and payload["server_started_at"] == 1234.5
                assert payload["retryable"] is True
            else:  # the routes build it inline: only the message, upstream's
                assert set(payload) == {"error"} and "Restart Hermes WebUI" in payload["error"]
            # The update dies half-way: the daemon refuses, and the WebUI says no restart comes.
            incomplete.touch()
            hold.unlink()
            while sub.next("restart", skip=skip)["phase"] != "refused":
                pass
            for _ in range(100):
                child.send("check\n")
                answer = child.json()
                if answer["phase"] == "refused":
                    break
            payload = answer["payload"]
            assert answer["own_restarts"] == 0, answer
            if shape == "7160":
                assert "could not be scheduled" in payload["error"]
                assert payload["restart_scheduled"] is False and payload["restart_phase"] == "refused"
                assert payload["restart_reason"].startswith("incomplete")
                assert payload["retryable"] is False  # retrying changes nothing now
            else:
                assert set(payload) == {"error"}
            child.send("work\n")
            assert child.json() == {"work": 2}  # s1 (stream and run) and s2 (a run unwinding)


@pytest.mark.unit
def test_the_accelerator_figure_is_one_figure_everywhere() -> None:
    # Issue 16, problem 7: setup said "150x", the README 418x, a measurement 380-490x.
    # One figure (the WebUI's own check in its own process, scripts/bench_hermes.py
    # --webui): what setup prints, the README, docs/hermes.md, and the benchmarks' run
    # it comes from.
    from stalewatch.hermes.setup import ACCELERATOR_FIGURE

    shape = re.fullmatch(r"([\d.]+ ms) -> ([\d.]+ µs) per call", ACCELERATOR_FIGURE)
    assert shape is not None, ACCELERATOR_FIGURE
    before, after = shape.groups()
    assert ACCELERATOR_FIGURE in (ROOT / "docs" / "hermes.md").read_text()
    readme = " ".join((ROOT / "README.md").read_text().split())  # its lines wrap anywhere
    assert f"{before} → {after} per call" in readme
    benchmarks = (ROOT / "docs" / "benchmarks.md").read_text()
    section = benchmarks[benchmarks.index("## Hermes WebUI's check") :]
    section = section[: section.find("\n## ", 1) if "\n## " in section[1:] else None]
    assert ACCELERATOR_FIGURE in section
    assert "bench_hermes.py --webui" in section
    assert re.search(rf"upstream: 3 git subprocesses\s+median\s+{re.escape(before)}", section)
    assert re.search(rf"with the docs' two lines\s+median\s+{re.escape(after)}", section)
