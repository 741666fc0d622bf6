"""systemd's readiness protocol, sd_notify(3), without libsystemd.

A notification is one datagram of ``KEY=value`` lines sent to the ``AF_UNIX`` socket
named by ``$NOTIFY_SOCKET`` (a leading ``@`` means the abstract namespace). Outside
systemd the variable is unset and every call is a cheap no-op.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Mapping

__all__ = ["SD_ENV", "notify", "watchdog_interval"]

logger = logging.getLogger(__name__)

SD_ENV = ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "LISTEN_FDS", "LISTEN_PID", "LISTEN_FDNAMES")
"""Variables meant for this process only: never passed on to hook commands."""


def notify(state: str, environ: Mapping[str, str] = os.environ) -> bool:
    """Send ``state`` (e.g. ``"READY=1\\nSTATUS=watching 2 checkouts"``) to systemd.

    Returns True when a datagram was sent, False when not under systemd or the send
    failed (logged: the service must keep running even if systemd went away).
    """
    address = environ.get("NOTIFY_SOCKET", "")
    if not address:
        return False
    if address.startswith("@"):
        address = "\0" + address[1:]
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            # Never block: a receiver that stopped reading fills its queue after ~10
            # datagrams, and the daemon's loop must not wait for it.
            sock.setblocking(False)
            sock.sendto(state.encode(), address)
    except BlockingIOError:
        logger.debug("stalewatch: systemd's notification queue is full; dropped %r", state)
        return False
    except OSError as exc:
        logger.warning("stalewatch: cannot notify systemd at %s: %s", environ.get("NOTIFY_SOCKET"), exc)
        return False
    return True


def watchdog_interval(environ: Mapping[str, str] = os.environ) -> float | None:
    """Seconds between ``WATCHDOG=1`` pings (half of ``WatchdogSec=``), or ``None``.

    ``None`` when no watchdog is configured or it is meant for another process
    (``WATCHDOG_PID`` names a different pid).
    """
    usec, pid = environ.get("WATCHDOG_USEC", ""), environ.get("WATCHDOG_PID", "")
    if pid and pid != str(os.getpid()):
        return None
    try:
        value = int(usec)
    except ValueError:
        return None
    return value / 2e6 if value > 0 else None
