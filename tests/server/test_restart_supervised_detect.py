"""Which supervisor runs a master, told from /proc, on real child processes (issue 28).

systemd does not run here: its marks are what it gives a service's main process
(``NOTIFY_SOCKET``, ``MAINPID``; ``INVOCATION_ID`` under the manager), set on a real
child and read back from ``/proc/PID/environ``; supervisord's are its variables, or a
parent whose name is ``supervisord`` (a real parent renamed with ``prctl``).
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stalewatch.core.errors import DaemonConfigError, SupervisedHandoffError
from stalewatch.core.procs import read_proc
from stalewatch.server.restart.actions import Handoff, Signal
from stalewatch.server.restart.actions.handoff import Supervised, parse_environ, supervised
from tests.support.children import Child, python_child
from tests.support.properties import budget

# Writes its pidfile, says so, and waits for its stdin to close.
WAITING = (
    "import os, sys; open('master.pid', 'w').write(str(os.getpid()));"
    " print('up', flush=True); sys.stdin.read()"
)

# Renames itself supervisord (as its console script is named), starts WAITING as its
# child without any SUPERVISOR_* variable, prints the child's pid, waits for stdin.
PARENT = f"""
import ctypes, subprocess, sys
ctypes.CDLL(None).prctl(15, b"supervisord", 0, 0, 0)  # PR_SET_NAME
child = subprocess.Popen([sys.executable, "-c", {WAITING!r}], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
child.stdout.readline()
print(child.pid, flush=True)
sys.stdin.read()
child.stdin.close()
child.wait()
"""


def _env(**extra: str) -> dict[str, str]:
    keep = {
        k: v for k, v in os.environ.items() if not k.startswith(("SUPERVISOR_", "NOTIFY_", "INVOCATION_"))
    }
    keep.pop("MAINPID", None)
    return {**keep, **extra}


@contextlib.contextmanager
def _master(tmp_path: Path, **extra: str) -> Iterator[Child]:
    with python_child(WAITING, cwd=tmp_path, env=_env(**extra), stderr=tmp_path / "err") as child:
        assert child.line() == "up\n"
        yield child


@pytest.fixture
def notify(tmp_path: Path) -> Iterator[str]:
    """A real datagram socket, as systemd's notify socket is."""
    path = tmp_path / "notify"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(str(path))
        yield str(path)


def test_a_master_started_with_systemds_notify_socket_is_systemds(tmp_path: Path, notify: str) -> None:
    with _master(tmp_path, NOTIFY_SOCKET=notify) as child:
        assert supervised(child.proc.pid) == Supervised("systemd", "NOTIFY_SOCKET in its environment")
        with pytest.raises(SupervisedHandoffError) as caught:
            Handoff(tmp_path / "master.pid").check()
        error = caught.value
        assert (error.supervisor, error.pid) == ("systemd", child.proc.pid)
        assert isinstance(error, DaemonConfigError)
        assert "ExecReload=/bin/kill -s HUP $MAINPID" in str(error)
        assert "its cgroup, the new master included, is killed" in str(error)
        Signal(tmp_path / "master.pid", "HUP").check()  # HUP keeps the master: never refused


def test_mainpid_in_the_environment_is_systemds(tmp_path: Path) -> None:
    with _master(tmp_path, MAINPID="1234") as child:
        assert supervised(child.proc.pid) == Supervised("systemd", "MAINPID in its environment")


def test_an_invocation_id_under_a_parent_that_is_not_systemd_is_no_supervisor(tmp_path: Path) -> None:
    # A shell in a desktop session inherits its terminal's INVOCATION_ID: not a service's
    # main process, and a handoff there is gunicorn's own business.
    with _master(tmp_path, INVOCATION_ID="0123456789abcdef") as child:
        assert supervised(child.proc.pid) is None
        Handoff(tmp_path / "master.pid").check()


def test_supervisords_variables_name_it_and_its_program(tmp_path: Path) -> None:
    with _master(tmp_path, SUPERVISOR_ENABLED="1", SUPERVISOR_PROCESS_NAME="web") as child:
        found = supervised(child.proc.pid)
        assert found == Supervised("supervisord", "SUPERVISOR_PROCESS_NAME in its environment", "web")
        with pytest.raises(SupervisedHandoffError, match=r'"supervisorctl", "restart", "web"'):
            Handoff(tmp_path / "master.pid").check()


def test_a_parent_named_supervisord_is_supervisord(tmp_path: Path) -> None:
    with python_child(PARENT, cwd=tmp_path, env=_env(), stderr=tmp_path / "err") as parent:
        pid = int(parent.line())
        found = supervised(pid)
        assert found == Supervised("supervisord", f"its parent (pid {parent.proc.pid}) is supervisord")
        with pytest.raises(SupervisedHandoffError, match=r'"supervisorctl", "restart", "<program>"'):
            Handoff(tmp_path / "master.pid").check()


def test_a_plain_child_a_gone_pid_and_a_missing_pidfile_are_no_supervisor(tmp_path: Path) -> None:
    with _master(tmp_path) as child:
        assert supervised(child.proc.pid) is None
    assert read_proc(child.proc.pid) is None  # gone (reaped): not a live plain child
    assert supervised(child.proc.pid) is None
    (tmp_path / "master.pid").unlink()
    Handoff(tmp_path / "master.pid").check()  # no master yet: looked at again before each handoff


NAMES = st.text(st.characters(codec="utf-8", blacklist_characters="\0="), min_size=1, max_size=20)
VALUES = st.text(st.characters(codec="utf-8", blacklist_characters="\0"), max_size=20)


@budget(300)
@given(st.binary(max_size=400))
def test_parse_environ_never_raises_on_any_bytes(data: bytes) -> None:
    found = parse_environ(data)
    assert all(name and "\0" not in name for name in found)


@budget(300)
@given(
    st.dictionaries(
        NAMES, st.text(st.characters(codec="utf-8", blacklist_characters="\0"), max_size=20), max_size=8
    )
)
def test_parse_environ_reads_back_what_was_written(env: dict[str, str]) -> None:
    block = b"".join(f"{name}={value}".encode() + b"\0" for name, value in env.items())
    assert parse_environ(block) == env
