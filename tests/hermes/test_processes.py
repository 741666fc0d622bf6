"""The running WebUI, read from ``/proc``: its server, its environment, its systemd service.

A ``/proc``-shaped directory is written for each case (the functions take the
directory): what setup reads of a process is outside input, so odd content gives
``None`` or an empty field, never an exception (a property test feeds it bytes).
"""

from __future__ import annotations

import contextlib
import os
import struct
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stalewatch.hermes.discovery import Process, cgroup_unit, webui_servers
from stalewatch.watching import inotify_calls as abi
from tests.support.properties import budget

pytestmark = pytest.mark.unit


def fake_process(
    proc: Path,
    pid: int,
    *,
    name: str = "python3",
    ppid: int = 1,
    argv: tuple[str, ...] = ("python3",),
    environ: dict[str, str] | None = None,
    cwd: Path | None = None,
    cgroup: str | None = None,
) -> Path:
    base = proc / str(pid)
    base.mkdir(parents=True)
    rest = "0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 12345 " + " ".join(["0"] * 30)  # as the kernel writes it
    (base / "stat").write_text(f"{pid} ({name}) S {ppid} {pid} {pid} {rest}\n")
    (base / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
    (base / "environ").write_bytes(b"".join(f"{k}={v}".encode() + b"\0" for k, v in (environ or {}).items()))
    if cwd is not None:
        (base / "cwd").symlink_to(cwd)
    if cgroup is not None:
        (base / "cgroup").write_text(cgroup)
    return base


@pytest.mark.parametrize(
    ("cgroup", "unit"),
    [
        (
            "0::/user.slice/user-1000.slice/user@1000.service/app.slice/hermes-webui.service\n",
            ("hermes-webui.service", True),
        ),
        ("0::/system.slice/hermes-webui.service\n", ("hermes-webui.service", False)),
        ("0::/user.slice/user-1000.slice/session-3.scope\n", None),  # started in a terminal
        ("0::/user.slice/user-1000.slice/user@1000.service/init.scope\n", None),
        ("0::/user.slice/user-1000.slice/user@1000.service\n", None),  # the user manager itself
        ("12:pids:/system.slice/hermes-webui.service\n", None),  # cgroup v1 only: no unified line
        ("", None),
    ],
)
def test_the_systemd_service_comes_from_the_unified_cgroup_line(
    tmp_path: Path, cgroup: str, unit: tuple[str, bool] | None
) -> None:
    fake_process(tmp_path, 42, cgroup=cgroup)
    assert cgroup_unit(42, tmp_path) == unit
    assert cgroup_unit(43, tmp_path) is None  # gone


def test_a_process_is_read_whole_even_with_parentheses_in_its_name(tmp_path: Path) -> None:
    fake_process(
        tmp_path,
        7,
        name="py (3) )x",
        ppid=5,
        argv=("/usr/bin/python3", "server.py"),
        environ={"HERMES_WEBUI_PORT": "8800", "EMPTY": "", "A": "b=c"},
        cwd=tmp_path,
    )
    found = Process.read(7, tmp_path)
    assert found == Process(
        7,
        5,
        "py (3) )x",
        ("/usr/bin/python3", "server.py"),
        {"HERMES_WEBUI_PORT": "8800", "EMPTY": "", "A": "b=c"},
        tmp_path,
    )


def test_the_webuis_server_is_found_by_its_script_in_a_webui_checkout(tmp_path: Path) -> None:
    webui = tmp_path / "srv" / "hermes-webui"
    (webui / "api").mkdir(parents=True)
    (webui / "start.sh").write_text("#!/bin/bash\n")
    (webui / "api" / "agent_runtime.py").write_text("import sys\n")
    other = tmp_path / "elsewhere"
    other.mkdir()
    proc = tmp_path / "proc"
    fake_process(proc, 10, argv=("python3", "server.py"), cwd=webui, environ={"HERMES_WEBUI_PORT": "9"})
    fake_process(proc, 11, argv=("python3", str(webui / "server.py")))  # an absolute script
    fake_process(proc, 12, argv=("python3", "server.py"), cwd=other)  # not a WebUI's
    fake_process(proc, 13, argv=("bash", "start.sh"), cwd=webui)  # not its server
    found = sorted((p.pid, str(where)) for p, where in webui_servers(proc, uid=os.getuid()))
    assert found == [(10, str(webui)), (11, str(webui))]
    assert webui_servers(proc, uid=os.getuid() + 1) == []  # another user's processes are not ours
    assert webui_servers(tmp_path / "no-proc") == []


@contextlib.contextmanager
def opens(directories: list[Path]) -> Iterator[Callable[[], set[tuple[Path, str]]]]:
    """What was opened in ``directories`` so far: the kernel's IN_OPEN events, queued as each
    open happens (nothing to wait for once the call returns)."""
    fd = abi.inotify_init()
    if fd < 0:
        pytest.skip("no inotify instance left (fs.inotify.max_user_instances)")
    os.set_blocking(fd, False)
    watched = {abi.inotify_add_watch(fd, os.fsencode(d), 0x20): d for d in directories}  # IN_OPEN

    def opened() -> set[tuple[Path, str]]:
        found: set[tuple[Path, str]] = set()
        with contextlib.suppress(BlockingIOError):
            while data := os.read(fd, 1 << 16):
                offset = 0
                while offset < len(data):  # struct inotify_event: wd, mask, cookie, len, name
                    wd, _mask, _cookie, length = struct.unpack_from("iIII", data, offset)
                    name = data[offset + 16 : offset + 16 + length].rstrip(b"\0").decode()
                    found.add((watched[wd], name))
                    offset += 16 + length
        return found

    try:
        yield opened
    finally:
        os.close(fd)


@pytest.mark.skipif(not abi.AVAILABLE, reason="inotify: Linux")
def test_only_a_process_running_server_py_is_read_past_its_command_line(tmp_path: Path) -> None:
    # Every process of the user (as root: of the machine) is looked at: its environment
    # (up to 256 KiB), stat and cwd are read only for a server.py in a WebUI checkout.
    webui = tmp_path / "hermes-webui"
    (webui / "api").mkdir(parents=True)
    (webui / "start.sh").write_text("#!/bin/bash\n")
    (webui / "api" / "agent_runtime.py").write_text("import sys\n")
    proc = tmp_path / "proc"
    server = fake_process(proc, 10, argv=("python3", "server.py"), cwd=webui)
    others = [
        fake_process(proc, 11, argv=("bash",), cwd=webui),
        fake_process(proc, 12, argv=("python3", "other.py"), environ={"A": "b" * 1000}, cwd=webui),
        fake_process(proc, 13, argv=()),  # a kernel thread: an empty command line
    ]
    with opens([server, *others]) as opened:
        assert [(p.pid, d) for p, d in webui_servers(proc, uid=os.getuid())] == [(10, webui)]
        read = opened()
    assert {(server, "cmdline"), (server, "stat"), (server, "environ")} <= read
    assert {name for where, name in read if where != server} == {"cmdline"}
    assert {where for where, _ in read} == {server, *others}


@budget(300)
@given(stat=st.binary(max_size=300), cmdline=st.binary(max_size=300), cgroup=st.binary(max_size=300))
def test_odd_proc_files_never_raise(
    tmp_path_factory: pytest.TempPathFactory, stat: bytes, cmdline: bytes, cgroup: bytes
) -> None:
    proc = tmp_path_factory.mktemp("proc")
    base = proc / "5"
    base.mkdir()
    (base / "stat").write_bytes(stat)
    (base / "cmdline").write_bytes(cmdline)
    (base / "environ").write_bytes(cmdline)
    (base / "cgroup").write_bytes(cgroup)
    found = Process.read(5, proc)
    assert found is None or found.pid == 5
    unit = cgroup_unit(5, proc)
    assert unit is None or unit[0].endswith(".service")
    assert isinstance(webui_servers(proc), list)
