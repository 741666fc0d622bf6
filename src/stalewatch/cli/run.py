"""The ``stalewatch`` command line: :func:`main` parses and runs one command.

Exit codes: :mod:`stalewatch.core.exits` (0 success, 1 unreadable HEAD or a daemon
failure, 2 bad input, 3 the daemon cannot be reached).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any, cast

from ..core import exits
from ..core.errors import DaemonUnavailableError, HeadUnreadableError, StalewatchError
from ..core.version import __version__
from . import check, daemon, events, hermes, watch

__all__ = ["main", "parser"]


class _Command(argparse.ArgumentParser):
    """A command's parser: an argument it does not know is its usage error (its own
    usage printed), not the top level's (argparse hands unknown words up by default)."""

    def parse_known_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> Any:  # type: ignore[override]
        parsed, extra = super().parse_known_args(args, namespace)
        if extra:
            self.error(f"unrecognized arguments: {' '.join(extra)}")
        return parsed, extra


def parser() -> argparse.ArgumentParser:
    """The argument parser of every command."""
    top = argparse.ArgumentParser(
        prog="stalewatch",
        description="Watch a git checkout and report when its HEAD moves away from the loaded code.",
    )
    top.add_argument("--version", action="version", version=f"stalewatch {__version__}")
    commands = top.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Command)
    sub = cast("argparse._SubParsersAction[argparse.ArgumentParser]", commands)
    watch.add_commands(sub)
    daemon.add_commands(sub)
    events.add_commands(sub)
    hermes.add_commands(sub)
    return top


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit code (see :mod:`stalewatch.core.exits`)."""
    try:
        args = parser().parse_args(argv)
    except SystemExit as exc:  # argparse exits 0 for --help/--version, 2 for usage errors
        return int(exc.code or 0)
    try:
        match args.command:
            case "status" if args.socket:
                return events.cmd_status(args)
            case "status":
                return watch.cmd_status(args)
            case "daemon" if args.check:
                return check.cmd_check(args)
            case "daemon":
                return daemon.cmd_daemon(args)
            case "events":
                return events.cmd_events(args)
            case "hermes":
                return hermes.cmd_setup(args)
            case _:
                return watch.cmd_watch(args)
    except StalewatchError as exc:
        print(f"stalewatch: {exc}", file=sys.stderr)
        if isinstance(exc, DaemonUnavailableError):
            return exits.UNREACHABLE
        return exits.UNREADABLE if isinstance(exc, HeadUnreadableError) else exits.USAGE
    except BrokenPipeError:
        return exits.OK
