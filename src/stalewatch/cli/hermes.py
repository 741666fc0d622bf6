"""``stalewatch hermes setup``: print (or write) what restarts Hermes WebUI after ``hermes update``."""

from __future__ import annotations

import argparse
import sys

from ..core import exits
from ..core.errors import SetupError
from ..hermes import setup
from ..hermes.supervisors import KINDS

__all__ = ["add_commands", "cmd_setup"]


def add_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``hermes setup`` to the CLI's subparsers."""
    hermes = sub.add_parser("hermes", help="Hermes WebUI: automatic restarts after `hermes update`")
    commands = hermes.add_subparsers(dest="hermes_command", required=True, metavar="COMMAND")
    parser = commands.add_parser(
        "setup",
        help="print (or --write) a daemon configuration and a service under the WebUI's supervisor",
        formatter_class=argparse.RawDescriptionHelpFormatter,
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
    parser.add_argument("--webui-dir", help="the Hermes WebUI checkout (default: the running WebUI's)")
    parser.add_argument(
        "--agent-dir", help="the Hermes Agent checkout (default: found as the WebUI finds it)"
    )
    parser.add_argument("--hermes-home", help="Hermes' home (default: $HERMES_HOME, else ~/.hermes)")
    parser.add_argument("--python", help="the Agent's Python (default: its venv's)")
    parser.add_argument("--unit", help="systemd: the WebUI's unit (default: hermes-webui.service)")
    parser.add_argument("--label", help="launchd: the WebUI's LaunchAgent label")
    parser.add_argument("--program", help="supervisord: the WebUI's program (default: hermes-webui)")
    parser.add_argument(
        "--supervisord-conf", help="supervisord: its configuration file (for supervisorctl -c)"
    )
    parser.add_argument("--service-dir", help="runit, s6: the WebUI's service directory")
    parser.add_argument("--config", help="where the daemon's configuration goes")
    parser.add_argument("--socket", help="the daemon's socket (default: per supervisor)")
    parser.add_argument("--unit-dir", help="systemd: where units go (default: ~/.config/systemd/user)")


def cmd_setup(args: argparse.Namespace) -> int:
    """Print (or write) what makes ``hermes update`` restart the WebUI by itself."""
    try:
        install = setup.discover(args)
        files = setup.render(install)
        if args.write:
            setup.write(files, force=args.force)
            socket_dir = install.supervisor.kind.socket_dir(install.socket)
            if socket_dir is not None:
                setup.make_private_dirs(socket_dir)
    except (SetupError, OSError) as exc:
        print(f"stalewatch: {exc}", file=sys.stderr)
        return exits.USAGE
    out = sys.stdout
    found = install.supervisor
    print(
        "\n".join(
            [
                f"# Hermes Agent checkout: {install.agent_dir}",
                f"# Hermes WebUI checkout: {install.webui_dir or 'not found (pass --webui-dir)'}",
                f"# Hermes home:           {install.hermes_home}",
                f"# Agent's Python:        {install.python or 'not found: the probe uses python3'}",
                f"# supervisor:            {found.kind.option} {found.name} ({found.evidence})",
                f"# the WebUI answers:     {install.health}",
                f"# the daemon's socket:   {install.socket}",
                *(f"# checked: {line}" for line in install.checked),
            ]
        ),
        file=out,
    )
    for path, (text, _mode) in files.items():
        verb = "wrote" if args.write else "would write"
        print(f"\n# --- {verb} {path}\n{text}", end="" if text.endswith("\n") else "\n", file=out)
    for note in install.service.notes:
        print("\n# Note: " + note.replace("\n", "\n#   "), file=out)
    print("\n# Then:", file=out)
    for command in install.service.then:
        print(f"#   {command}", file=out)
    print(
        "# For registration and restart-aware 409s (and a cheaper check: the WebUI's own check\n"
        f"# in its own process, {setup.ACCELERATOR_FIGURE} on exp-v0.52.262; settings and\n"
        "# command: docs/benchmarks.md),\n"
        "# end the WebUI's api/agent_runtime.py with these two lines, then restart it once:",
        file=out,
    )
    for line in setup.ACCELERATOR_LINES:
        print(f"#   {line}", file=out)
    if not args.write:
        print("# (nothing written: run again with --write)", file=out)
    return exits.OK
