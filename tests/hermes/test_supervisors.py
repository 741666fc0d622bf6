"""Which supervisor runs a WebUI server, read off real processes (Linux: their /proc)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from stalewatch.cli.run import parser
from stalewatch.hermes import supervisors
from stalewatch.hermes.discovery import Process, cgroup_unit
from tests.support.children import python_child

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")

# A parent named as a supervisor (its /proc/PID/comm) running a child, the "server",
# until its stdin closes; it prints the child's pid.
SUPERVISING = (
    "import subprocess, sys\n"
    "with open('/proc/self/comm', 'w') as comm:\n"
    "    comm.write({name!r})\n"
    "server = [sys.executable, '-c', 'import sys; sys.stdin.read()']\n"
    "child = subprocess.Popen(server, stdin=subprocess.PIPE)\n"
    "print(child.pid, flush=True)\n"
    "sys.stdin.read()\n"
    "child.stdin.close()\n"
    "child.wait()\n"
)


@pytest.mark.parametrize(("option", "comm"), [("runit", "runsv"), ("s6", "s6-supervise")])
def test_a_server_under_runsv_or_s6_supervise_is_found_in_its_service_directory(
    tmp_path: Path, option: str, comm: str
) -> None:
    service = tmp_path / "sv" / "hermes-webui"
    service.mkdir(parents=True)
    code = SUPERVISING.format(name=comm)
    with python_child(code, cwd=service, env=os.environ, stderr=tmp_path / "err") as parent:
        try:
            server = Process.read(int(parent.line()))
            assert server is not None
            found = supervisors.from_process(server, tmp_path / "webui", tmp_path / "home")
        finally:
            assert parent.finish() == 0
    assert found is not None and found.kind is supervisors.KINDS[option]
    assert (found.name, found.definition) == (str(service), service / "run")
    assert found.evidence == f"{comm} {parent.proc.pid} supervises it"


def test_a_server_ctl_sh_started_is_found_by_its_pid_file(tmp_path: Path) -> None:
    if cgroup_unit(os.getpid()) is not None:
        pytest.skip("the tests run in a systemd service: it would be found first")
    webui, home = tmp_path / "webui", tmp_path / "home"
    webui.mkdir()
    home.mkdir()
    (webui / "ctl.sh").write_text("#!/bin/bash\n")
    code = "import sys; print('up', flush=True); sys.stdin.read()"
    with python_child(code, cwd=tmp_path, env=os.environ, stderr=tmp_path / "err") as child:
        assert child.line() == "up\n"
        server = Process.read(child.proc.pid)
        assert server is not None
        assert supervisors.from_process(server, webui, home) is None  # no PID file: nothing runs it
        (home / "webui.pid").write_text(f"{child.proc.pid}\n")
        found = supervisors.from_process(server, webui, home)
        assert child.finish() == 0
    assert found is not None and found.kind is supervisors.KINDS["ctl.sh"]
    assert found.name == str(webui / "ctl.sh")


def test_every_kind_is_a_supervisor_offered_by_its_option() -> None:
    assert list(supervisors.KINDS) == [
        "systemd-user",
        "systemd-system",
        "launchd",
        "supervisord",
        "runit",
        "s6",
        "ctl.sh",
    ]
    for option, kind in supervisors.KINDS.items():
        assert isinstance(kind, supervisors.Supervisor) and kind.option == option
        args = parser().parse_args(["hermes", "setup", "--supervisor", option])
        assert args.supervisor == option
