"""`stalewatch hermes setup` beside a real supervisord running a WebUI-shaped server.

The server is ours (it answers ``/health`` on ``$HERMES_WEBUI_PORT`` from a directory
laid out as a WebUI checkout); supervisord, supervisorctl, the daemon and setup are
real. Setup finds the running server, reads its port from its environment and its
supervisor from its parent, checks both answer, and writes a program block that
supervisord starts: the daemon serves the socket the WebUI's ``.env`` names, and its
restart action restarts the WebUI through supervisord.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from stalewatch.cli import main
from stalewatch.hermes import discovery
from stalewatch.server.config import load
from tests.support.daemons import WAIT, short_dir
from tests.support.repos import make_agent

pytestmark = [pytest.mark.real_server, pytest.mark.slow]

BIN = Path(sys.executable).parent
SERVER = """
import http.server, json, os
class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({"status": "ok", "pid": os.getpid()}).encode()
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", int(os.environ["HERMES_WEBUI_PORT"])), Health).serve_forever()
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def until(predicate: object, what: str) -> None:
    """A readiness probe, asked again every 50 ms up to WAIT seconds."""
    pace = threading.Event()
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        pace.wait(0.05)
    raise AssertionError(f"never: {what}")


def health(port: int) -> int | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as answer:
            return int(answer.status)
    except OSError:
        return None


@pytest.fixture
def world(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Path, int]]:
    if not (BIN / "supervisord").exists():
        pytest.skip("supervisord not installed beside this Python: pip install supervisor (the test extra)")
    with short_dir() as root:
        home = root / "h"
        make_agent(home / ".hermes" / "hermes-agent")
        webui = root / "hermes-webui"
        (webui / "api").mkdir(parents=True)
        (webui / "start.sh").write_text("#!/bin/bash\n")
        (webui / "api" / "agent_runtime.py").write_text("import sys\n")
        (webui / "server.py").write_text(SERVER)
        port = free_port()
        (root / "conf.d").mkdir()
        conf = root / "supervisord.conf"
        conf.write_text(
            f"[supervisord]\nnodaemon=true\nlogfile={root}/supervisord.log\npidfile={root}/supervisord.pid\n"
            f"[unix_http_server]\nfile={root}/s.sock\n"
            "[rpcinterface:supervisor]\n"
            "supervisor.rpcinterface_factory = supervisor.rpcinterface:make_main_rpcinterface\n"
            f"[supervisorctl]\nserverurl=unix://{root}/s.sock\n"
            "[include]\nfiles = conf.d/*.conf\n"
        )
        # The WebUI's program, as its docs/supervisor.md shows it (our server, our paths).
        (root / "conf.d" / "hermes-webui.conf").write_text(
            f"[program:hermes-webui]\ncommand={sys.executable} {webui}/server.py\ndirectory={webui}\n"
            "autostart=true\nautorestart=true\nstopsignal=TERM\nstopwaitsecs=10\n"
            f'environment=HOME="{home}",HERMES_WEBUI_PORT="{port}"\n'
        )
        for name in list(os.environ):
            if name.startswith(("HERMES_", "XDG_", "STALEWATCH_")):
                monkeypatch.delenv(name)
        monkeypatch.setenv("HOME", str(home))
        monkeypatch.setenv("PATH", f"{BIN}:{os.environ['PATH']}")
        proc = subprocess.Popen(
            [str(BIN / "supervisord"), "-c", str(conf)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            until(lambda: health(port) == 200, "the WebUI answers /health under supervisord")
            yield root, port
        finally:
            subprocess.run(
                [str(BIN / "supervisorctl"), "-c", str(conf), "shutdown"],
                capture_output=True,
                timeout=WAIT,
                check=False,
            )
            try:
                proc.wait(timeout=WAIT)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)  # the group we created
                proc.wait(timeout=WAIT)


def ctl(root: Path, *args: str) -> str:
    done = subprocess.run(
        [str(BIN / "supervisorctl"), "-c", str(root / "supervisord.conf"), *args],
        capture_output=True,
        text=True,
        timeout=WAIT,
        check=False,
    )
    return done.stdout.strip()


def test_setup_finds_supervisord_and_its_daemon_program_restarts_the_webui(
    world: tuple[Path, int], capsys: pytest.CaptureFixture[str]
) -> None:
    root, port = world
    config = root / "h.toml"
    # --webui-dir: other WebUIs may run on this machine (setup would ask which).
    args = ["--write", "--config", str(config), "--webui-dir", str(root / "hermes-webui")]
    assert main(["hermes", "setup", *args]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "# supervisor:            supervisord hermes-webui" in out
    assert f"http://127.0.0.1:{port}/health: 200" in out  # checked before writing
    loaded = load(config)
    (checkout,) = loaded.checkouts
    assert checkout.restart is not None
    action = checkout.restart.action
    assert action == ("supervisorctl", "-c", str(root / "supervisord.conf"), "restart", "hermes-webui")
    # The pid_command, asked of the real supervisord, names the WebUI's running process
    # (0 once stopped: the daemon then never starts it, R10).
    pid_command = checkout.restart.pid_command
    assert pid_command == ("supervisorctl", "-c", str(root / "supervisord.conf"), "pid", "hermes-webui")
    printed = subprocess.run(pid_command, capture_output=True, text=True, timeout=30, check=False).stdout
    assert int(printed.strip()) > 0 and Path(f"/proc/{printed.strip()}").exists(), printed
    assert discovery.read_dotenv(root / "hermes-webui" / ".env")["STALEWATCH_SOCKET"] == str(loaded.socket)
    assert (root / "conf.d" / "stalewatch-hermes.conf").is_file()
    # The generated program, started by the real supervisord, serves the agreed socket.
    ctl(root, "update")
    try:
        until(lambda: "RUNNING" in ctl(root, "status", "stalewatch-hermes"), "the daemon's program runs")
    except AssertionError:
        log = (root / "h" / ".hermes" / "stalewatch-hermes.log").read_text(errors="replace")[-3000:]
        raise AssertionError(f"{ctl(root, 'status')}\n{log}") from None
    until(loaded.socket.is_socket, f"the daemon listens on {loaded.socket}")
    done = subprocess.run(
        [sys.executable, "-m", "stalewatch", "status", "--socket", str(loaded.socket)],
        capture_output=True,
        text=True,
        timeout=WAIT,
        check=False,
    )
    assert str(root / "h" / ".hermes" / "hermes-agent") in done.stdout, done.stdout + done.stderr
    # The daemon's action, as the daemon runs it: the WebUI restarts through supervisord.
    before = ctl(root, "pid", "hermes-webui")
    subprocess.run(list(action), capture_output=True, timeout=WAIT, check=True)
    until(lambda: health(port) == 200, "the WebUI answers again")
    assert ctl(root, "pid", "hermes-webui") not in (before, "0", "")


def test_a_port_other_than_the_running_webuis_names_the_one_it_found(
    world: tuple[Path, int], capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 29: `--port 8787` while the WebUI ran on another port said `no running server found`."""
    root, port = world
    other = free_port()
    args = ["--config", str(root / "h.toml"), "--webui-dir", str(root / "hermes-webui"), "--port", str(other)]
    assert main(["hermes", "setup", *args]) == 2
    err = capsys.readouterr().err
    assert f"no Hermes WebUI server runs on port {other}, but one runs here" in err, err
    assert f"on port {port}" in err and "no running server found" not in err, err


@pytest.mark.parametrize("named", [[], ["--supervisor", "supervisord"]])
def test_a_stopped_webuis_program_is_found_in_the_file_supervisord_includes(
    world: tuple[Path, int], named: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 29: with the WebUI stopped, `--supervisord-conf` missed the program in
    `conf.d/` (an `[include]` glob, relative to the configuration's directory) and asked
    to edit supervisord.conf by hand."""
    root, port = world
    ctl(root, "stop", "hermes-webui")
    until(lambda: health(port) is None, "the WebUI stopped")
    conf = root / "supervisord.conf"
    args = [
        "--write",
        "--no-check",
        "--config",
        str(root / "h.toml"),
        "--supervisord-conf",
        str(conf),
        *named,
    ]
    assert main(["hermes", "setup", *args]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert f"supervisord program hermes-webui in {root / 'conf.d' / 'hermes-webui.conf'}" in out, out
    assert "append the" not in out, out  # nothing to edit by hand
    assert (root / "conf.d" / "stalewatch-hermes.conf").is_file()
    assert f"http://127.0.0.1:{port}/health" in out  # the port, from the program's environment


def test_a_supervisord_conf_under_home_is_expanded_for_supervisorctl_too(
    world: tuple[Path, int], capsys: pytest.CaptureFixture[str]
) -> None:
    """`--supervisord-conf ~/...` reaches `supervisorctl -c` expanded (supervisorctl does
    not expand `~`)."""
    root, _ = world
    named = "~/../supervisord.conf"  # HOME is root/h
    args = ["--write", "--no-check", "--config", str(root / "h.toml"), "--supervisord-conf", named]
    assert main(["hermes", "setup", *args]) == 0, capsys.readouterr().err
    written = (root / "h.toml").read_text()
    assert f'"-c", "{root / "supervisord.conf"}"' in written, written


def test_a_path_under_a_home_nobody_has_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["hermes", "setup", "--webui-dir", "~no-such-user-stalewatch/webui"]) == 2
    assert "no home directory to expand ~ to" in capsys.readouterr().err
