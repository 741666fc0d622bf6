"""A free TCP port on the loopback interface, for a real server a test starts."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A port nobody listens on now (the kernel's pick; a server bound to it soon after gets it)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
