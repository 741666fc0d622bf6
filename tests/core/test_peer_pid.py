"""The daemon takes a client's pid from the kernel: SO_PEERCRED on Linux, LOCAL_PEERPID on macOS."""

from __future__ import annotations

import os
import socket
import struct

import pytest

from stalewatch.core import procs


class _MacSocket:
    """Answers getsockopt as macOS does for LOCAL_PEERPID (level SOL_LOCAL = 0, option 2)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.asked: list[tuple[int, int, int]] = []

    def getsockopt(self, level: int, option: int, size: int) -> bytes:
        self.asked.append((level, option, size))
        if (level, option) != (0, 2):
            raise OSError(42, "Protocol not available")
        return struct.pack("i", self.pid)


@pytest.mark.unit
def test_on_macos_the_pid_comes_from_local_peerpid(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(socket, "SO_PEERCRED", raising=False)  # as on Darwin
    sock = _MacSocket(4242)
    assert procs.peer_pid(sock, "darwin") == 4242  # type: ignore[arg-type]
    assert sock.asked == [(0, 2, struct.calcsize("i"))]


@pytest.mark.unit
def test_an_unknown_peer_pid_is_zero(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(socket, "SO_PEERCRED", raising=False)
    failing = _MacSocket(4242)
    failing.getsockopt = lambda *_: (_ for _ in ()).throw(OSError(22, "Invalid argument"))  # type: ignore[method-assign]
    assert procs.peer_pid(failing, "darwin") == 0  # type: ignore[arg-type]
    assert procs.peer_pid(_MacSocket(4242), "freebsd") == 0  # type: ignore[arg-type]
    assert procs.peer_pid(_MacSocket(-1), "darwin") == 0  # type: ignore[arg-type]


@pytest.mark.skipif(not hasattr(socket, "SO_PEERCRED"), reason="SO_PEERCRED is Linux's")
def test_on_linux_the_pid_comes_from_so_peercred() -> None:
    left, right = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with left, right:
        assert procs.peer_pid(left) == os.getpid()
