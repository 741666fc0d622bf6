"""Every fenced block of README.md and docs/*.md is exercised: run where it can run here,
else parsed, for a reason listed in doc_blocks.PARSED_ONLY.

Python blocks run in a fresh interpreter against real repositories, a real daemon and
real servers on loopback; shell blocks run with the installed ``stalewatch`` on PATH,
long-running commands (``watch``, ``events``, ``daemon``, the example servers) each in
a process group of its own, as in a terminal of its own; TOML blocks are loaded by a
real daemon. What is substituted in an example's text before it runs is listed in
sandbox.Sandbox.substitutions.
"""

from __future__ import annotations

import itertools
import json
import shutil
import signal
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from tests.docs.doc_blocks import (
    MARKED_LANGUAGES,
    OUTPUT_LANGUAGES,
    PARSED_LANGUAGES,
    PARSED_ONLY,
    ROOT,
    Block,
    blocks,
    console_commands,
    markers_in_docs,
    shell_commands,
)
from tests.docs.sandbox import Background, Sandbox, commit_file, long_running, wait_for_port
from tests.support.daemons import Notifications, Subscriber, greet, start_daemon
from tests.support.parts import CI_INSTALLS
from tests.support.repos import make_agent
from tests.support.web import request

ALL = blocks()
SHAPED_WEBUI = ROOT / "tests" / "support" / "webui_runtime.py"


@pytest.fixture
def sandbox() -> Iterator[Sandbox]:
    box = Sandbox()
    try:
        yield box
    finally:
        box.close()


def _of(language: str) -> list[Block]:
    return [block for block in ALL if block.language == language]


def _ids(found: list[Block]) -> list[str]:
    return [block.id for block in found]


# -- python blocks -------------------------------------------------------------------------


def run_library_tour(block: Block, box: Sandbox) -> None:
    box.python(box.sub(block.code), cwd=box.checkout.path, PYTHONPATH=str(box.checkout.path))


def run_work_in_flight(block: Block, box: Sandbox) -> None:
    # Every `guard.inflight()` of the example is recorded: the values its comments give.
    code = box.sub(block.code).replace("guard.inflight()", "_seen.append(guard.inflight())")
    checks = "\nassert _seen == [1, 1], _seen\nassert guard.inflight() == 0\n"
    box.python("_seen = []\n" + code + checks, cwd=box.checkout.path)


_WEB_APPS = """
def wsgi_app(environ, start_response):
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"ok"]

async def asgi_app(scope, receive, send):
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})
"""

_WEB_CHECKS = """
import asyncio, json, queue, subprocess
from wsgiref.util import setup_testing_defaults

def call(path):
    environ = {}
    setup_testing_defaults(environ)
    environ.update(REQUEST_METHOD="POST", PATH_INFO=path)
    statuses = []
    body = b"".join(wsgi_app(environ, lambda status, headers, exc=None: statuses.append(status)))
    return int(statuses[0].split()[0]), body

async def asgi_call(path):
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
             "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"",
             "root_path": "", "headers": [], "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80)}
    sent = []
    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}
    async def send(message):
        sent.append(message)
    await asgi_app(scope, receive, send)
    return sent[0]["status"]

assert call("/api/chat")[0] == 200 and asyncio.run(asgi_call("/api/chat")) == 200
seen = queue.Queue()
guard.subscribe(seen.put)
subprocess.run(["git", "commit", "-q", "--allow-empty", "-m", "a change"], check=True)
assert seen.get(timeout=20).status.value == "stale"
status, body = call("/api/chat")
assert status == 409 and json.loads(body)["retryable"] is False, (status, body)  # no restart comes
assert call("/api/chatty")[0] == 200          # per segment: not /api/chat
assert asyncio.run(asgi_call("/api/chat")) == 409
guard.stop()
"""


def run_web_barriers(block: Block, box: Sandbox) -> None:
    commit_file(box.checkout, "myapp/__init__.py", "")
    commit_file(box.checkout, "myapp/handlers.py", "def handle():\n    return 'ok'\n")
    code = _WEB_APPS + box.sub(block.code) + _WEB_CHECKS
    box.python(code, cwd=box.checkout.path, PYTHONPATH=str(box.checkout.path))


def run_sse_stream(block: Block, box: Sandbox) -> None:
    prelude = f"""
from stalewatch import Guard
guard = Guard.for_checkout({str(box.checkout.path)!r}).start()

def guarded_app(environ, start_response):
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"guarded"]
"""
    checks = """
from wsgiref.util import setup_testing_defaults
environ = {}
setup_testing_defaults(environ)
environ["PATH_INFO"] = "/"
assert b"".join(app(environ, lambda status, headers, exc=None: None)) == b"guarded"
guard.stop()
"""
    box.python(prelude + box.sub(block.code) + checks)


def _daemon_for(box: Sandbox, socket_dir: Path, checkout: Path, name: str = "stalewatch"):  # type: ignore[no-untyped-def]
    return start_daemon(socket_dir, str(checkout), name=name, env=box.env())


def run_daemon_client(block: Block, box: Sandbox) -> None:
    checks = '\nassert guard.wait_ready(20)\nassert guard.snapshot().mode == "daemon"\nguard.stop()\n'
    with _daemon_for(box, box.root / "run" / "stalewatch", box.checkout.path):
        box.python(box.sub(block.code) + checks, cwd=box.checkout.path, PYTHONPATH=str(box.checkout.path))


def run_gunicorn_app(block: Block, box: Sandbox) -> None:
    commit_file(box.checkout, "app.py", box.sub(block.code))
    checks = (
        "import app\nassert app.guard.wait_ready(20)\nsnap = app.guard.snapshot()\n"
        "assert (snap.status.value, snap.mode) == ('current', 'daemon'), snap\napp.guard.stop()\n"
    )
    with _daemon_for(box, box.root / "run" / "stalewatch", box.checkout.path):
        box.python(checks, cwd=box.checkout.path, PYTHONPATH=str(box.checkout.path))


def run_guard_collector(block: Block, box: Sandbox) -> None:
    commit_file(box.checkout, "myapp.py", "VALUE = 1\n")
    checks = f"""
import urllib.request
body = urllib.request.urlopen("http://127.0.0.1:{box.port}/metrics", timeout=20).read().decode()
assert 'stalewatch_status{{checkout=' in body, body[:2000]
guard.stop()
"""
    box.python(box.sub(block.code) + checks, cwd=box.checkout.path, PYTHONPATH=str(box.checkout.path))


def _webui(box: Sandbox, text: str) -> Path:
    webui = box.root / "webui"
    webui.mkdir()
    (webui / "agent_runtime.py").write_text(text)
    return webui


_ACCELERATED = """
import pathlib, subprocess
import agent_runtime
agent = pathlib.Path({agent!r})
assert hasattr(agent_runtime._read_agent_revision, "__stalewatch_original__"), "not accelerated"
head = subprocess.run(["git", "-C", str(agent), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
assert agent_runtime._read_agent_revision(agent, module_path=agent / "run_agent.py") == head.strip()
"""


def run_hermes_accelerate(block: Block, box: Sandbox) -> None:
    # Appended to the end of a module shaped like the WebUI's api/agent_runtime.py.
    webui = _webui(box, SHAPED_WEBUI.read_text() + "\n" + block.code)
    agent = str(box.agent.path)
    box.python(_ACCELERATED.format(agent=agent), cwd=webui, HERMES_WEBUI_AGENT_DIR=agent)


def run_hermes_accelerate_daemon(block: Block, box: Sandbox) -> None:
    webui = _webui(box, SHAPED_WEBUI.read_text() + "\n" + block.code)
    agent = str(box.agent.path)
    with _daemon_for(box, box.root / "run", box.agent.path) as daemon:
        box.python(
            _ACCELERATED.format(agent=agent),
            cwd=webui,
            HERMES_WEBUI_AGENT_DIR=agent,
            STALEWATCH_SOCKET=str(daemon.socket),
        )


def run_hermes_dropin(block: Block, box: Sandbox) -> None:
    webui = _webui(box, block.code)
    checks = (
        "import sys\nimport agent_runtime\nfrom stalewatch.hermes import dropin\n"
        "assert sys.modules['agent_runtime'] is dropin\n"
        "assert agent_runtime.ensure_agent_runtime_current() is None  # nothing bound yet\n"
    )
    box.python(checks, cwd=webui)


def run_readme_web_app(block: Block, box: Sandbox) -> None:
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed (the README's requests use it)")
    commit_file(box.checkout, "serve.py", box.sub(block.code))
    server = box.start("python serve.py", cwd=box.checkout.path)
    wait_for_port(box.port, server)
    requests = _by_marker("readme-web-requests")
    first, commit, again = (box.sub(command) for command in shell_commands(requests))
    assert box.run(first, cwd=box.checkout.path) == "served by the code this process loaded\n"
    box.run(commit, cwd=box.checkout.path)
    # The watcher flips the flag within about a millisecond of the commit; a request
    # sent sooner is still served, so the refusal is awaited (bounded), not assumed.
    answer = _until(lambda: box.run(again, cwd=box.checkout.path), lambda out: out.startswith("{"))
    payload = json.loads(answer)
    assert payload["type"] == "code_stale" and "was updated" in payload["error"], payload
    server.interrupt(signal.SIGTERM)


def _until(action: Callable[[], str], done: Callable[[str], bool], attempts: int = 200) -> str:
    for _ in range(attempts):
        result = action()
        if done(result):
            return result
    raise AssertionError(f"never done; last: {result!r}")


# -- shell blocks ----------------------------------------------------------------------------


def play(block: Block, box: Sandbox, cwd: Path | None = None) -> tuple[list[Background], list[str]]:
    """Run a shell block as written: long-running commands in the background (each
    awaited until it is serving: a first line, or a daemon's READY=1), the others in
    order. Returns the background processes and the others' outputs."""
    where = cwd or box.root
    started, outputs = [], []
    for command in (box.sub(c) for c in shell_commands(block)):
        if command.startswith("cd "):
            where = Path(command.split(maxsplit=1)[1])
        elif command.startswith("stalewatch daemon"):
            notes = Notifications(box.root / f"notify-{len(started)}")
            notes.path.chmod(0o666)  # the daemon may run as an unprivileged user
            try:
                started.append(box.start(command, cwd=where, NOTIFY_SOCKET=str(notes.path)))
                notes.wait_for(lambda m: "READY=1" in m.split("\n"))
            finally:
                notes.close()
        elif long_running(command):
            started.append(background := box.start(command, cwd=where))
            background.first = background.line()
        else:
            outputs.append(box.run(command, cwd=where))
    return started, outputs


def run_cli_quickstart(block: Block, box: Sandbox) -> None:
    box.as_normal_user()
    (watch,), (status,) = play(block, box)
    assert status.strip() == box.checkout.head()
    assert watch.first.startswith("current ")
    box.run('git commit -q --allow-empty -m "a change"', cwd=box.checkout.path)  # "another terminal"
    assert str(box.checkout.path) in watch.line_starting("stale ")
    assert watch.interrupt(signal.SIGINT) == 130  # Ctrl-C


def run_cli_watch_json(block: Block, box: Sandbox) -> None:
    (watch,), (status,) = play(block, box)
    assert json.loads(status)["current_revision"] == box.checkout.head()
    assert json.loads(watch.first)["status"] == "current"
    box.checkout.git("commit", "-q", "--allow-empty", "-m", "a change")
    assert json.loads(watch.line_starting("{"))["status"] == "stale"
    assert watch.interrupt(signal.SIGTERM) == 0


def run_daemon_quickstart(block: Block, box: Sandbox) -> None:
    box.as_normal_user()
    (daemon, events), (_, status) = play(block, box)
    assert events.first.startswith("# stalewatch daemon")  # its hello, then a line per checkout
    events.line_starting("current ")
    assert events.line_starting("stale ").split()[1] == str(box.checkout.path)
    assert str(box.checkout.path) in status
    assert events.interrupt(signal.SIGINT) == 130
    assert daemon.interrupt(signal.SIGINT) == 130


def run_first_screen(block: Block, box: Sandbox) -> None:
    # The main job runs here as written; the test command is the runner of this very
    # test, so it is checked to be exactly what CI runs (.ci/run ends by exec'ing it).
    daemon_line, test_line = shell_commands(block)
    assert test_line.split("#")[0].strip() == "./scripts/test"
    assert (ROOT / ".ci" / "run").read_text().rstrip().splitlines()[-1] == "exec ./scripts/test"
    box.as_normal_user()
    (daemon,), _ = play(replace(block, code=daemon_line), box)
    checkout = str(box.checkout.path)
    status = box.run(f"stalewatch status --socket {box.sub('/tmp/stalewatch-demo.sock')} {checkout}")
    assert checkout in status and "current" in status, status
    assert daemon.interrupt(signal.SIGINT) == 130


def run_example_servers(block: Block, box: Sandbox) -> None:
    servers, _ = play(block, box, cwd=ROOT)
    for server in servers:
        assert server.first.startswith("serving "), server.first
        port = int(server.first.rsplit(":", 1)[1].strip().rstrip("/"))
        status, _, body = request(port, "GET", "/")
        assert status == 200 and b"EventSource" in body
        assert server.interrupt(signal.SIGINT) == 0


_HEALTH = (
    "import http.server, os\n"
    "class H(http.server.BaseHTTPRequestHandler):\n"
    "    def do_GET(self):\n"
    "        self.send_response(200 if self.path == '/health' else 404); self.end_headers()\n"
    "    def log_message(self, *a): pass\n"
    "print('serving', flush=True)\n"
    "http.server.HTTPServer(('127.0.0.1', {port}), H).serve_forever()\n"
)


def run_hermes_setup(block: Block, box: Sandbox) -> None:
    # pip and systemctl are stand-ins that record their arguments (systemctl answers
    # `show` as systemd does for a loaded unit): there is no user systemd here, and
    # nothing is downloaded. The user's WebUI unit names its port, and a stand-in
    # answers /health there; `stalewatch hermes setup` runs for real, checks included.
    calls = box.root / "calls"
    for name in ("pip", "systemctl"):
        stub = box.root / "bin" / name
        answer = 'case "$*" in *show*) echo LoadState=loaded; echo ActiveState=active;; esac\n'
        stub.write_text(f'#!/bin/sh\necho "{name} $*" >> {calls}\n' + (answer if name == "systemctl" else ""))
        stub.chmod(0o755)
    agent = make_agent(box.home / ".hermes" / "hermes-agent").path
    units = box.home / ".config" / "systemd" / "user"
    units.mkdir(parents=True)
    (units / "hermes-webui.service").write_text(
        "[Service]\nType=simple\n"
        f"Environment=HERMES_WEBUI_PORT={box.port}\n"
        "ExecStart=/bin/bash %h/hermes-webui/start.sh --foreground\n"
    )
    script = box.root / "health.py"
    script.write_text(_HEALTH.format(port=box.port))
    webui = box.start(f"python3 {script}")
    assert webui.line().strip() == "serving"
    try:
        out = box.run("set -euo pipefail\n" + block.code)
    finally:
        webui.kill()
    # The page's commands after setup are the ones setup itself says to run (`# Then:`).
    told = out.split("\n# Then:\n", 1)[1].splitlines()
    told = [line.removeprefix("#   ") for line in itertools.takewhile(lambda s: s.startswith("#   "), told)]
    written = [
        c.split("#")[0].strip() for c in shell_commands(block) if not c.startswith(("pip ", "stalewatch "))
    ]
    assert [part.strip() for c in written for part in c.split("&&")] == told, (written, told)
    config = box.home / ".config" / "stalewatch" / "hermes.toml"
    dropin = (units / "hermes-webui.service.d" / "stalewatch.conf").read_text()
    enabled = [line.split()[-1] for line in calls.read_text().splitlines() if "enable --now" in line]
    assert enabled and all((units / unit).is_file() for unit in enabled), (enabled, list(units.iterdir()))
    with (
        start_daemon(box.root, "--config", str(config), name="hermes", env=box.env()) as daemon,
        Subscriber(daemon.socket) as subscriber,
    ):
        hello, _ = greet(subscriber)
    assert hello["checkouts"] == [str(agent.resolve())]
    socket = next(line for line in config.read_text().splitlines() if line.startswith("socket = "))
    assert f"STALEWATCH_SOCKET={json.loads(socket.split('=', 1)[1].split('#')[0])}" in dropin


RUN: dict[str, Callable[[Block, Sandbox], None]] = {
    "library-tour": run_library_tour,
    "work-in-flight": run_work_in_flight,
    "web-barriers": run_web_barriers,
    "sse-stream": run_sse_stream,
    "daemon-client": run_daemon_client,
    "gunicorn-app": run_gunicorn_app,
    "guard-collector": run_guard_collector,
    "hermes-accelerate": run_hermes_accelerate,
    "hermes-accelerate-daemon": run_hermes_accelerate_daemon,
    "hermes-dropin": run_hermes_dropin,
    "readme-web-app": run_readme_web_app,
    "cli-quickstart": run_cli_quickstart,
    "cli-watch-json": run_cli_watch_json,
    "daemon-quickstart": run_daemon_quickstart,
    "first-screen": run_first_screen,
    "example-servers": run_example_servers,
    "hermes-setup": run_hermes_setup,
}
# Blocks run by another block's handler (the requests sent to the README's web app).
RUN_BY = {"readme-web-requests": "readme-web-app"}


def _by_marker(marker: str) -> Block:
    (found,) = [block for block in ALL if block.marker == marker]
    return found


# -- what every block must be ------------------------------------------------------------------


def test_every_block_has_a_known_handling() -> None:
    known = OUTPUT_LANGUAGES | MARKED_LANGUAGES | PARSED_LANGUAGES
    unknown = [b.where for b in ALL if b.language not in known]
    assert unknown == [], f"blocks without a known language: {unknown}"
    unmarked = [b.where for b in ALL if b.language in MARKED_LANGUAGES and b.marker is None]
    assert unmarked == [], f"python/sh blocks need <!-- example: NAME --> before them: {unmarked}"
    handled = set(RUN) | set(RUN_BY) | set(PARSED_ONLY)
    assert {b.marker for b in ALL if b.marker} - handled == set(), "markers without a handler"
    assert handled - markers_in_docs() == set(), "handlers or reasons for markers no doc has"
    assert markers_in_docs() == {b.marker for b in ALL if b.marker}, "a marker not followed by a block"
    assert set(RUN).isdisjoint(PARSED_ONLY)
    parsed_python = [b.where for b in ALL if b.language == "python" and b.marker in PARSED_ONLY]
    assert parsed_python == [], "every Python block runs"


def test_the_docs_have_the_blocks_this_test_expects() -> None:
    # A guard against a parser that finds nothing (every other test would pass vacuously).
    assert len(ALL) > 50
    assert {"python", "sh", "toml", "text"} <= {b.language for b in ALL}


@pytest.mark.parametrize("block", _of("python"), ids=_ids(_of("python")))
def test_python_block_compiles(block: Block) -> None:
    compile(block.code, block.where, "exec")


_SHELL = [b for b in ALL if b.language in ("sh", "console")]


@pytest.mark.parametrize("block", _SHELL, ids=_ids(_SHELL))
def test_shell_block_parses(block: Block) -> None:
    script = console_commands(block) if block.language == "console" else block.code
    done = subprocess.run(
        ["bash", "-n"], input=script, capture_output=True, text=True, timeout=30, check=False
    )
    assert done.returncode == 0, done.stderr


_RUNNABLE = [b for b in ALL if b.marker in RUN]


@pytest.mark.parametrize("block", _RUNNABLE, ids=_ids(_RUNNABLE))
def test_example_runs_as_written(block: Block, sandbox: Sandbox) -> None:
    assert block.marker is not None
    RUN[block.marker](block, sandbox)


def _completed_toml(block: Block, box: Sandbox) -> str:
    """A fragment made whole: a lone ``[checkout.restart]`` table gets its ``[[checkout]]``
    (``/srv/app``), top-level keys alone get a checkout to watch."""
    text = box.sub(block.code)
    if "[[checkout]]" in text:
        return text
    if text.lstrip().startswith("[checkout.restart]") or "\n[checkout.restart]" in text:
        return f'[[checkout]]\npath = "{box.app.path}"\n\n{text}'
    return f'{text}\n[[checkout]]\npath = "{box.checkout.path}"\n'


@pytest.mark.parametrize("block", _of("toml"), ids=_ids(_of("toml")))
def test_toml_block_is_loaded_by_a_real_daemon(block: Block, sandbox: Sandbox) -> None:
    config = sandbox.root / "etc" / "stalewatch" / "example.toml"
    config.write_text(_completed_toml(block, sandbox))
    config.chmod(0o600)
    tables = config.read_text().count("[[checkout]]")
    with start_daemon(sandbox.root, "--config", str(config), env=sandbox.env()) as daemon:
        with Subscriber(daemon.socket) as subscriber:
            hello, snapshots = greet(subscriber)
        assert len(hello["checkouts"]) == tables
        assert {s["status"] for s in snapshots} == {"current"}
        assert daemon.stop() == 0, daemon.log_text()


_PROMTOOL = shutil.which("promtool")
_NEEDS_PROMTOOL = pytest.mark.skipif(
    _PROMTOOL is None, reason=f"needs promtool (apt-get install prometheus; {CI_INSTALLS})"
)


@pytest.mark.parametrize("block", _of("yaml"), ids=_ids(_of("yaml")))
def test_yaml_block_parses(block: Block) -> None:
    assert isinstance(yaml.safe_load(block.code), dict)


@_NEEDS_PROMTOOL
@pytest.mark.parametrize("block", _of("yaml"), ids=_ids(_of("yaml")))
def test_prometheus_configuration_is_valid_for_promtool(block: Block, tmp_path: Path) -> None:
    for rules in yaml.safe_load(block.code).get("rule_files", []):
        shutil.copy(ROOT / "prometheus" / rules, tmp_path / rules)
    (tmp_path / "prometheus.yml").write_text(block.code)
    assert _PROMTOOL is not None
    done = subprocess.run(
        [_PROMTOOL, "check", "config", "prometheus.yml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


@_NEEDS_PROMTOOL
@pytest.mark.parametrize("block", _of("promql"), ids=_ids(_of("promql")))
def test_promql_block_parses(block: Block, tmp_path: Path) -> None:
    queries = [line.strip() for line in block.code.splitlines() if line.strip()]
    rules = [{"record": f"docs:query_{n}", "expr": query} for n, query in enumerate(queries)]
    (tmp_path / "rules.yml").write_text(yaml.safe_dump({"groups": [{"name": "docs", "rules": rules}]}))
    assert _PROMTOOL is not None
    done = subprocess.run(
        [_PROMTOOL, "check", "rules", str(tmp_path / "rules.yml")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{len(queries)} rules found" in done.stdout


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
@pytest.mark.parametrize("block", _of("js"), ids=_ids(_of("js")))
def test_javascript_block_parses(block: Block, tmp_path: Path) -> None:
    (tmp_path / "block.js").write_text(block.code)
    done = subprocess.run(
        ["node", "--check", str(tmp_path / "block.js")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
