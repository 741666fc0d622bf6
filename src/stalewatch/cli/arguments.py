"""Every command's arguments, help and examples: the parser the command line runs.

Kept apart from the commands so that parsing imports none of them: :func:`.run.main`
imports only the command that runs (``status`` never loads the daemon's modules).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

from ..core.version import __version__
from ..hermes.supervisors import KINDS
from ..protocol.socket_path import DEFAULT_TEXT


class _Command(argparse.ArgumentParser):
    """A command's parser: an argument it does not know is its usage error (its own
    usage printed), not the top level's (argparse hands unknown words up by default); its
    description and examples are shown as written."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **{"formatter_class": argparse.RawDescriptionHelpFormatter, **kwargs})

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
    for add in (_add_watch, _add_daemon, _add_events, _add_hermes):
        add(sub)
    return top


def _add_watch(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``watch`` and ``status`` to the CLI's subparsers."""
    watch = sub.add_parser(
        "watch",
        help="print a line for every status change until Ctrl-C",
        description="Watch a checkout from this process: a line now, then a line each time its status\n"
        "changes (current, stale, unreadable), until SIGTERM or Ctrl-C.",
        epilog="examples:\n"
        "  stalewatch watch                      # the checkout of the current directory\n"
        "  stalewatch watch /srv/app --json      # JSON lines, e.g. for jq\n"
        "  stalewatch watch /srv/app/run_agent.py  # a source file its repository tracks",
    )
    watch.add_argument("path", nargs="?", default=".", help="a checkout, or a source file in one")
    watch.add_argument("--json", action="store_true", help="print JSON lines")
    status = sub.add_parser(
        "status",
        help="print the checkout's current revision",
        description="Print the full commit id HEAD resolves to (exit 1 if it cannot be resolved), or,\n"
        "with --socket, what a running daemon says of the checkouts it watches.",
        epilog="examples:\n"
        "  stalewatch status                          # HEAD of the current directory's checkout\n"
        "  stalewatch status /srv/app --json          # where it stands, as JSON\n"
        "  stalewatch status --socket /tmp/sw.sock    # every checkout the daemon watches\n"
        "  stalewatch status --socket /tmp/sw.sock /srv/app  # just that one",
    )
    status.add_argument(
        "path",
        nargs="?",
        help="a checkout, or a source file in one (default: .; with --socket: every checkout)",
    )
    status.add_argument("--json", action="store_true", help="print one JSON object")
    status.add_argument("--socket", help="ask the daemon listening on this socket instead")


def _add_daemon(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``daemon`` to the CLI's subparsers."""
    daemon = sub.add_parser(
        "daemon",
        help="watch checkouts and push events over a Unix socket",
        description="Watch checkouts in the foreground and push every change to socket clients and\n"
        "hooks; with a restart policy, restart their servers onto new code. SIGHUP reloads\n"
        "--config; SIGTERM or Ctrl-C stops it.",
        epilog="examples:\n"
        "  stalewatch daemon --socket /tmp/sw.sock /srv/app        # one checkout, as you\n"
        "  stalewatch daemon --config /etc/stalewatch/daemon.toml  # under systemd\n"
        "  stalewatch daemon --config /etc/stalewatch/daemon.toml --check  # before a reload\n"
        "  kill -HUP PID                                            # reload its configuration",
    )
    daemon.add_argument(
        "checkouts", nargs="*", metavar="CHECKOUT", help="a checkout, or a source file in one"
    )
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


def _add_events(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``events`` to the CLI's subparsers (``status --socket`` is ``status``'s option)."""
    events = sub.add_parser(
        "events",
        help="print a running daemon's snapshots and events as they come",
        description="Follow a running daemon: where each checkout stands, then a line per change,\n"
        "reconnecting (with backoff) when the daemon restarts, until SIGTERM or Ctrl-C.",
        epilog="examples:\n"
        "  stalewatch events --socket /tmp/sw.sock\n"
        "  stalewatch events --socket /tmp/sw.sock --json | jq -c 'select(.type == \"event\")'",
    )
    events.add_argument("--socket", help=f"socket path (default: {DEFAULT_TEXT})")
    events.add_argument("--json", action="store_true", help="print the protocol's JSON lines")


def _add_hermes(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``hermes setup`` to the CLI's subparsers."""
    hermes = sub.add_parser("hermes", help="Hermes WebUI: automatic restarts after `hermes update`")
    commands = hermes.add_subparsers(dest="hermes_command", required=True, metavar="COMMAND")
    parser = commands.add_parser(
        "setup",
        help="print (or --write) a daemon configuration and a service under the WebUI's supervisor",
        description="Find the Hermes install and what supervises the WebUI, then print (or write) a\n"
        "daemon configuration that restarts the WebUI after `hermes update`, safely, and a\n"
        "service running that daemon under the same supervisor.",
        epilog="examples:\n"
        "  stalewatch hermes setup                      # print what it would write\n"
        "  stalewatch hermes setup --write              # write it (never overwriting)\n"
        "  stalewatch hermes setup --supervisor supervisord --port 8787 --write",
    )
    parser.add_argument(
        "--write", action="store_true", help="install the files (never overwriting without --force)"
    )
    parser.add_argument("--force", action="store_true", help="replace files that exist")
    parser.add_argument(
        "--no-check",
        action="store_true",
        help="do not ask the supervisor and the WebUI's /health first (a WebUI that is not running)",
    )
    parser.add_argument(
        "--supervisor",
        choices=list(KINDS),
        help="what runs the WebUI (default: found from its running server, else its definitions)",
    )
    parser.add_argument("--port", type=int, help="the WebUI's port (default: the running WebUI's)")
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
        parser.add_argument(flag, type=kind, help=text)


def _user_path(text: str) -> Path:
    """A path argument, ``~`` expanded once here (for every use, supervisorctl's ``-c`` too)."""
    try:
        return Path(text).expanduser()
    except RuntimeError:  # pathlib's word for "~user" naming nobody
        raise argparse.ArgumentTypeError(f"{text}: no home directory to expand ~ to") from None
