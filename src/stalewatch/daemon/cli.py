"""The ``daemon``, ``events`` and ``status --socket`` commands (wired in :mod:`stalewatch.cli`).

Exit codes of these commands:
    0  stopped by SIGTERM/SIGINT (``daemon``, ``events``); status printed (``status``)
    1  ``daemon``: an unexpected failure while serving (logged)
    2  bad input: invalid configuration, a checkout that does not exist, a socket path
       in a missing directory, a socket another daemon is listening on
    3  ``events`` / ``status --socket``: the daemon cannot be reached (``events`` reconnects,
       with backoff, to a daemon that goes away once it was reached)
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import fcntl
import json
import logging
import os
import signal
import socket
import stat
import sys
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

from ..core.errors import StalewatchError
from ..core.escaping import printable
from .config import DaemonConfig, DaemonConfigError, load, with_checkouts
from .connection import DaemonUnavailableError, follow_reconnecting, read_status
from .lines import format_message
from .protocol import SocketPathError, default_socket_path
from .server import DaemonServer

__all__ = ["EXIT_UNREACHABLE", "add_daemon_commands", "cmd_daemon", "cmd_events", "cmd_status", "listen"]

logger = logging.getLogger("stalewatch.daemon")

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_UNREACHABLE = 3
_MAX_UNIX_PATH = 107  # sun_path holds 108 bytes including the terminating NUL
_JOURNAL_PRIORITY = {
    logging.DEBUG: 7,
    logging.INFO: 6,
    logging.WARNING: 4,
    logging.ERROR: 3,
    logging.CRITICAL: 2,
}


def add_daemon_commands(sub: Any) -> None:
    """Add ``daemon`` and ``events`` to the CLI's subparsers."""
    daemon = sub.add_parser("daemon", help="watch checkouts and push events over a Unix socket")
    daemon.add_argument(
        "checkouts", nargs="*", metavar="CHECKOUT", help="a checkout, or a source file in one"
    )
    daemon.add_argument("--socket", help="socket path (default: $RUNTIME_DIRECTORY/stalewatch.sock)")
    daemon.add_argument("--config", help="a TOML configuration file (reloaded on SIGHUP)")
    events = sub.add_parser("events", help="print a running daemon's snapshots and events as they come")
    events.add_argument("--socket", help="socket path (default: $RUNTIME_DIRECTORY/stalewatch.sock)")
    events.add_argument("--json", action="store_true", help="print the protocol's JSON lines")


# -- the daemon ---------------------------------------------------------------------------


class _OneLineFormatter(logging.Formatter):
    """Escapes control characters in the message: a path or a client's line holding a
    newline must not forge a log line of its own (a traceback stays as it is)."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = printable(record.message)
        return super().formatMessage(record)


class _JournalFormatter(_OneLineFormatter):
    """journald adds its own timestamps; a ``<N>`` prefix carries the priority."""

    def format(self, record: logging.LogRecord) -> str:
        priority = _JOURNAL_PRIORITY.get(record.levelno, 6)
        return f"<{priority}>{super().format(record)}"


def _journal_attached() -> bool:
    # systemd sets JOURNAL_STREAM to the device:inode of the stream it connected;
    # honour it only when stderr still is that stream (not redirected by a wrapper).
    device, _, inode = os.environ.get("JOURNAL_STREAM", "").partition(":")
    try:
        info = os.fstat(sys.stderr.fileno())
        return (info.st_dev, info.st_ino) == (int(device), int(inode))
    except (ValueError, OSError, AttributeError):
        return False


def _logging_handler(level: str) -> logging.Handler:
    handler = logging.StreamHandler(sys.stderr)
    if _journal_attached():
        handler.setFormatter(_JournalFormatter("%(message)s"))
    else:
        handler.setFormatter(_OneLineFormatter("%(asctime)s %(levelname)s %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(level.upper())
    return handler


def _load(args: argparse.Namespace) -> DaemonConfig:
    settings = load(Path(args.config)) if args.config else DaemonConfig()
    return with_checkouts(settings, args.checkouts)


def listen(path: Path) -> tuple[socket.socket, int]:
    """Bind and listen on ``path`` (mode 0660), replacing a stale socket from a crash.

    Holds an exclusive ``flock`` on ``<path>.lock`` for the daemon's lifetime, so two
    daemons starting at once cannot both decide the socket is stale. Returns the
    listening socket and the lock's file descriptor.

    No path is ever followed as a link: the lock is opened with ``O_NOFOLLOW`` and
    must be a regular file, a stale socket is removed only if it still is the socket
    probed, and the socket gets its mode from the umask at ``bind`` (a ``chmod``
    afterwards would follow a symlink swapped in meanwhile).

    Raises:
        SocketPathError: the path is too long, its directory is missing, it is not a
            socket, a live daemon is listening on it, or the lock is not a regular file.
    """
    if len(os.fsencode(path)) > _MAX_UNIX_PATH:
        raise SocketPathError(path, f"too long for a Unix socket (more than {_MAX_UNIX_PATH} bytes)")
    if not path.parent.is_dir():
        raise SocketPathError(path, f"directory {path.parent} does not exist")
    lock = _open_lock(Path(f"{path}.lock"))
    try:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise SocketPathError(path, "another stalewatch daemon is running on this socket") from None
        _remove_stale(path)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        # The mode comes from the umask at bind, never from a chmod of the path.
        old_umask = os.umask(0o117)
        try:
            sock.bind(os.fspath(path))
        except OSError as exc:
            sock.close()
            raise SocketPathError(path, f"cannot bind: {exc.strerror or exc}") from None
        finally:
            os.umask(old_umask)
        sock.listen(128)
        sock.setblocking(False)
    except BaseException:
        os.close(lock)
        raise
    return sock, lock


def _open_lock(lock_path: Path) -> int:
    # O_NOFOLLOW: a planted symlink must not make us create or lock a file elsewhere;
    # O_NONBLOCK: a planted FIFO must not hang us (refused below as not a regular file).
    flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK
    try:
        lock = os.open(lock_path, flags, 0o660)
    except OSError as exc:
        reason = "it is a symbolic link" if exc.errno == errno.ELOOP else exc.strerror
        raise SocketPathError(lock_path, f"cannot open the lock file: {reason}") from None
    if not stat.S_ISREG(os.fstat(lock).st_mode):
        os.close(lock)
        raise SocketPathError(lock_path, "the lock file is not a regular file")
    return lock


def _remove_stale(path: Path) -> None:
    try:
        info = path.lstat()
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(info.st_mode):
        raise SocketPathError(path, "exists and is not a socket; refusing to replace it")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(1.0)
    try:
        probe.connect(os.fspath(path))
    except ConnectionRefusedError:
        logger.info("stalewatch: replacing the stale socket %s (its daemon is gone)", path)
        _unlink_if_same(path, info)
        return
    except OSError as exc:
        raise SocketPathError(path, f"exists and cannot be probed: {exc.strerror or exc}") from None
    finally:
        probe.close()
    raise SocketPathError(path, "a daemon is already listening on it")


def _unlink_if_same(path: Path, seen: os.stat_result) -> None:
    """Unlink ``path`` only if it still is the file ``seen`` (lstat: links are not followed)."""
    with contextlib.suppress(FileNotFoundError):
        now = path.lstat()
        if (now.st_dev, now.st_ino) == (seen.st_dev, seen.st_ino):
            path.unlink()  # unlink removes a link itself, never its target


def _fail(exc: Exception, code: int) -> int:
    print(f"stalewatch: {exc}", file=sys.stderr)
    return code


def cmd_daemon(args: argparse.Namespace) -> int:
    """Run the daemon in the foreground until SIGTERM/SIGINT."""
    with contextlib.ExitStack() as cleanup:  # undone in reverse, on every way out
        try:
            settings = _load(args)
            if not settings.checkouts:
                raise DaemonConfigError(
                    "checkout",
                    None,
                    "nothing to watch: name a CHECKOUT or add [[checkout]] tables",
                    file=settings.file,
                )
            path = Path(args.socket) if args.socket else settings.socket or default_socket_path()
            handler = _logging_handler(settings.log_level)
            cleanup.callback(logging.getLogger().removeHandler, handler)
            server = DaemonServer(settings, (lambda: _load(args)) if args.config else None)
            cleanup.callback(server.close)
            sock, lock = listen(path)
        except StalewatchError as exc:
            return _fail(exc, EXIT_USAGE)
        cleanup.callback(os.close, lock)
        cleanup.callback(_unlink_if_ours, path, path.lstat())
        cleanup.callback(sock.close)
        try:
            server.start_metrics()  # after the socket: a second daemon is refused for that first
        except StalewatchError as exc:
            return _fail(exc, EXIT_USAGE)
        try:
            server.serve(sock)
        except Exception:
            logger.exception("stalewatch: the daemon failed")
            return EXIT_FAILED
    return EXIT_OK


def _unlink_if_ours(path: Path, bound: os.stat_result) -> None:
    """Remove our socket file, never a successor's (or a link) that replaced it meanwhile."""
    with contextlib.suppress(OSError):
        _unlink_if_same(path, bound)


# -- clients of a running daemon ------------------------------------------------------------


def _socket_path(args: argparse.Namespace) -> Path:
    return Path(args.socket) if args.socket else default_socket_path()


@contextlib.contextmanager
def _stop_on_sigterm() -> Iterator[None]:
    def on_signal(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, on_signal)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def cmd_events(args: argparse.Namespace) -> int:
    """Print a running daemon's messages until interrupted or disconnected."""
    try:
        path = _socket_path(args)

        def lost(exc: DaemonUnavailableError) -> None:
            print(f"stalewatch: lost the daemon ({exc.reason}); reconnecting", file=sys.stderr, flush=True)

        def back() -> None:
            print(f"stalewatch: reconnected to the daemon at {path}", file=sys.stderr, flush=True)

        with _stop_on_sigterm():
            for message in follow_reconnecting(path, on_lost=lost, on_back=back):
                if message.get("type") in ("ping", "pong"):
                    continue
                line = json.dumps(message, separators=(",", ":")) if args.json else format_message(message)
                if line is not None:
                    print(line, flush=True)
    except KeyboardInterrupt:
        return EXIT_OK
    except SocketPathError as exc:
        return _fail(exc, EXIT_USAGE)
    except DaemonUnavailableError as exc:
        return _fail(exc, EXIT_UNREACHABLE)
    return EXIT_OK


def cmd_status(args: argparse.Namespace) -> int:
    """Print the daemon's snapshot of every checkout it watches."""
    try:
        _, snapshots = read_status(Path(args.socket))
    except DaemonUnavailableError as exc:
        return _fail(exc, EXIT_UNREACHABLE)
    for snapshot in snapshots:
        if args.json:
            print(json.dumps(snapshot, separators=(",", ":")))
        else:
            print(format_message(snapshot))
    return EXIT_OK
