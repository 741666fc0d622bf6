"""The ``stalewatch`` command line: :func:`main` parses and runs one command.

Exit codes: :mod:`stalewatch.core.exits` (0 success, 1 unreadable HEAD or a daemon
failure, 2 bad input, 3 the daemon cannot be reached).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence
from typing import cast

from ..core import exits
from ..core.errors import DaemonUnavailableError, HeadUnreadableError, StalewatchError
from .arguments import parser


def _command(args: argparse.Namespace) -> Callable[[argparse.Namespace], int]:
    """The function that runs ``args``' command, its module imported now (only that one)."""
    where = {  # only this command's namespace has its flags
        "watch": "watch:cmd_watch",
        "status": "watch:cmd_daemon_status" if getattr(args, "socket", None) else "watch:cmd_status",
        "daemon": "daemon:cmd_check" if getattr(args, "check", False) else "daemon:cmd_daemon",
        "events": "watch:cmd_events",
        "hermes": "hermes:cmd_setup",
    }[args.command]
    module, name = where.split(":")
    run = getattr(importlib.import_module(f".{module}", __package__), name)
    return cast("Callable[[argparse.Namespace], int]", run)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit code (see :mod:`stalewatch.core.exits`)."""
    try:
        args = parser().parse_args(argv)
    except SystemExit as exc:  # argparse exits 0 for --help/--version, 2 for usage errors
        return int(exc.code or 0)
    try:
        return _command(args)(args)
    except StalewatchError as exc:
        print(f"stalewatch: {exc}", file=sys.stderr)
        if isinstance(exc, DaemonUnavailableError):
            return exits.UNREACHABLE
        return exits.UNREADABLE if isinstance(exc, HeadUnreadableError) else exits.USAGE
    except BrokenPipeError:
        return exits.OK
