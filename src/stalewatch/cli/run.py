"""The ``stalewatch`` command line: every command's arguments, help and examples, and
:func:`main`, which parses and runs one command, importing only the module of the
command that runs (``status`` never loads the daemon's modules).

Exit codes: :mod:`stalewatch.core.exits` (0 success, 1 unreadable HEAD or a daemon
failure, 2 bad input, 3 the daemon cannot be reached).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..core import exits
from ..core.errors import DaemonUnavailableError, HeadUnreadableError, StalewatchError
from ..core.version import __version__
from ..hermes.supervisors import KINDS
from ..protocol.socket_path import DEFAULT_TEXT


class _Command(argparse.ArgumentParser):
    """A command's parser: an argument it does not know is its usage error (its own
    usage printed), not the top level's (argparse hands unknown words up by default)."""

    def parse_known_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> Any:  # type: ignore[override]
        parsed, extra = super().parse_known_args(args, namespace)
        if extra:
            self.error(f"unrecognized arguments: {' '.join(extra)}")
        return parsed, extra


def _command(commands: Any, name: str, summary: str, text: str, *examples: str) -> argparse.ArgumentParser:
    """A command's parser: its help, its description and its examples shown as written."""
    epilog = "examples:\n" + "\n".join(f"  {example}" for example in examples)
    formatter = argparse.RawDescriptionHelpFormatter
    parser: argparse.ArgumentParser = commands.add_parser(
        name, help=summary, description=text, epilog=epilog, formatter_class=formatter
    )
    return parser


def parser() -> argparse.ArgumentParser:
    """The argument parser of every command."""
    top = argparse.ArgumentParser(
        prog="stalewatch",
        description="Watch a git checkout and report when its HEAD moves away from the loaded code.",
    )
    top.add_argument("--version", action="version", version=f"stalewatch {__version__}")
    commands = top.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Command)
    path = "a checkout, or a source file in one"
    watch = _command(
        commands,
        "watch",
        "print a line for every status change until Ctrl-C",
        "Watch a checkout from this process: a line now, then a line each time its status\n"
        "changes (current, stale, unreadable), until SIGTERM or Ctrl-C.",
        "stalewatch watch                      # the checkout of the current directory",
        "stalewatch watch /srv/app --json      # JSON lines, e.g. for jq",
        "stalewatch watch /srv/app/run_agent.py  # a source file its repository tracks",
    )
    watch.add_argument("path", nargs="?", default=".", help=path)
    watch.add_argument("--json", action="store_true", help="print JSON lines")
    status = _command(
        commands,
        "status",
        "print the checkout's current revision",
        "Print the full commit id HEAD resolves to (exit 1 if it cannot be resolved), or,\n"
        "with --socket, what a running daemon says of the checkouts it watches.",
        "stalewatch status                          # HEAD of the current directory's checkout",
        "stalewatch status /srv/app --json          # where it stands, as JSON",
        "stalewatch status --socket /tmp/sw.sock    # every checkout the daemon watches",
        "stalewatch status --socket /tmp/sw.sock /srv/app  # just that one",
    )
    status.add_argument("path", nargs="?", help=f"{path} (default: .; with --socket: every checkout)")
    status.add_argument("--json", action="store_true", help="print one JSON object")
    status.add_argument("--socket", help="ask the daemon listening on this socket instead")
    daemon = _command(
        commands,
        "daemon",
        "watch checkouts and push events over a Unix socket",
        "Watch checkouts in the foreground and push every change to socket clients and\n"
        "hooks; with a restart policy, restart their servers onto new code. SIGHUP reloads\n"
        "--config; SIGTERM or Ctrl-C stops it.",
        "stalewatch daemon --socket /tmp/sw.sock /srv/app        # one checkout, as you",
        "stalewatch daemon --config /etc/stalewatch/daemon.toml  # under systemd",
        "stalewatch daemon --config /etc/stalewatch/daemon.toml --check  # before a reload",
        "kill -HUP PID                                            # reload its configuration",
    )
    daemon.add_argument("checkouts", nargs="*", metavar="CHECKOUT", help=path)
    daemon.add_argument(
        "--socket", help=f"socket path (default: the configuration's socket, else {DEFAULT_TEXT})"
    )
    daemon.add_argument("--config", help="a TOML configuration file (reloaded on SIGHUP)")
    daemon.add_argument(
        "--check",
        action="store_true",
        help="read and check the configuration as a start would, print what would run, and exit "
        "(0: valid, 2: the error a start would print); opens no socket, starts no watcher",
    )
    events = _command(
        commands,
        "events",
        "print a running daemon's snapshots and events as they come",
        "Follow a running daemon: where each checkout stands, then a line per change,\n"
        "reconnecting (with backoff) when the daemon restarts, until SIGTERM or Ctrl-C.",
        "stalewatch events --socket /tmp/sw.sock",
        "stalewatch events --socket /tmp/sw.sock --json | jq -c 'select(.type == \"event\")'",
    )
    events.add_argument("--socket", help=f"socket path (default: {DEFAULT_TEXT})")
    events.add_argument("--json", action="store_true", help="print the protocol's JSON lines")
    hermes = commands.add_parser("hermes", help="Hermes WebUI: automatic restarts after `hermes update`")
    setup = _command(
        hermes.add_subparsers(dest="hermes_command", required=True, metavar="COMMAND"),
        "setup",
        "print (or --write) a daemon configuration and a service under the WebUI's supervisor",
        "Find the Hermes install and what supervises the WebUI, then print (or write) a\n"
        "daemon configuration that restarts the WebUI after `hermes update`, safely, and a\n"
        "service running that daemon under the same supervisor.",
        "stalewatch hermes setup                      # print what it would write",
        "stalewatch hermes setup --write              # write it (never overwriting)",
        "stalewatch hermes setup --supervisor supervisord --port 8787 --write",
    )
    setup.add_argument(
        "--write", action="store_true", help="install the files (never overwriting without --force)"
    )
    setup.add_argument("--force", action="store_true", help="replace files that exist")
    setup.add_argument(
        "--no-check",
        action="store_true",
        help="do not ask the supervisor and the WebUI's /health first (a WebUI that is not running)",
    )
    setup.add_argument(
        "--supervisor",
        choices=list(KINDS),
        help="what runs the WebUI (default: found from its running server, else its definitions)",
    )
    setup.add_argument("--port", type=int, help="the WebUI's port (default: the running WebUI's)")
    for flag, text in (  # the paths and names setup finds by itself unless told
        ("--webui-dir", "the Hermes WebUI checkout (default: the running WebUI's)"),
        ("--agent-dir", "the Hermes Agent checkout (default: found as the WebUI finds it)"),
        ("--hermes-home", "Hermes' home (default: $HERMES_HOME, else ~/.hermes)"),
        ("--python", "the Agent's Python (default: its venv's)"),
        ("--unit", "systemd: the WebUI's unit (default: hermes-webui.service)"),
        ("--label", "launchd: the WebUI's LaunchAgent label"),
        ("--program", "supervisord: the WebUI's program (default: hermes-webui)"),
        ("--supervisord-conf", "supervisord: its configuration file (for supervisorctl -c)"),
        ("--service-dir", "runit, s6: the WebUI's service directory"),
        ("--config", "where the daemon's configuration goes"),
        ("--socket", "the daemon's socket (default: per supervisor)"),
        ("--unit-dir", "systemd: where units go (default: ~/.config/systemd/user)"),
    ):
        kind = str if flag in ("--unit", "--label", "--program") else _user_path
        setup.add_argument(flag, type=kind, help=text)
    return top


def _user_path(text: str) -> Path:
    """A path argument, ``~`` expanded once here (for every use, supervisorctl's ``-c`` too)."""
    try:
        return Path(text).expanduser()
    except RuntimeError:  # pathlib's word for "~user" naming nobody
        raise argparse.ArgumentTypeError(f"{text}: no home directory to expand ~ to") from None


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit code (see :mod:`stalewatch.core.exits`).

    Each command is ``cmd_<command>`` of its module (``status``, ``events``: :mod:`.watch`).
    """
    try:
        args = parser().parse_args(argv)
    except SystemExit as exc:  # argparse exits 0 for --help/--version, 2 for usage errors
        return int(exc.code or 0)
    try:
        module = {"status": "watch", "events": "watch"}.get(args.command, args.command)
        run = getattr(importlib.import_module(f".{module}", __package__), f"cmd_{args.command}")
        return int(run(args))
    except StalewatchError as exc:
        print(f"stalewatch: {exc}", file=sys.stderr)
        if isinstance(exc, DaemonUnavailableError):
            return exits.UNREACHABLE
        return exits.UNREADABLE if isinstance(exc, HeadUnreadableError) else exits.USAGE
    except BrokenPipeError:
        return exits.OK
