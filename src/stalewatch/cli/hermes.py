"""``stalewatch hermes setup``: print (or write) what restarts Hermes WebUI after ``hermes update``."""

from __future__ import annotations

import argparse
import sys

from ..core import exits
from ..core.errors import SetupError
from ..hermes import setup

__all__ = ["add_commands", "cmd_setup"]


def add_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``hermes setup`` to the CLI's subparsers."""
    hermes = sub.add_parser("hermes", help="Hermes WebUI: automatic restarts after `hermes update`")
    commands = hermes.add_subparsers(dest="hermes_command", required=True, metavar="COMMAND")
    parser = commands.add_parser("setup", help="print (or --write) a daemon configuration and systemd units")
    parser.add_argument(
        "--write", action="store_true", help="install the files (never overwriting without --force)"
    )
    parser.add_argument("--force", action="store_true", help="replace files that exist")
    parser.add_argument(
        "--agent-dir", help="the Hermes Agent checkout (default: found as the WebUI finds it)"
    )
    parser.add_argument("--hermes-home", help="Hermes' home (default: $HERMES_HOME, else ~/.hermes)")
    parser.add_argument("--python", help="the Agent's Python (default: its venv's)")
    parser.add_argument("--unit", help="the WebUI's systemd user unit (default: hermes-webui.service)")
    parser.add_argument("--config", help="where the daemon's configuration goes")
    parser.add_argument("--unit-dir", help="where systemd user units go (default: ~/.config/systemd/user)")


def cmd_setup(args: argparse.Namespace) -> int:
    """Print (or write) what makes ``hermes update`` restart the WebUI by itself."""
    try:
        install = setup.discover(args)
        files = setup.render(install)
        if args.write:
            setup.write(files, force=args.force)
    except (SetupError, OSError) as exc:
        print(f"stalewatch: {exc}", file=sys.stderr)
        return exits.USAGE
    out = sys.stdout
    found = [
        f"# Hermes Agent checkout: {install.agent_dir}",
        f"# Hermes home:           {install.hermes_home}",
        f"# Agent's Python:        {install.python or 'not found: the probe uses python3'}",
        f"# WebUI unit:            {install.unit} (systemctl --user), http://{install.host}:{install.port}/",
    ]
    print("\n".join(found), file=out)
    for path, text in files.items():
        verb = "wrote" if args.write else "would write"
        print(f"\n# --- {verb} {path}\n{text}", end="", file=out)
    print(
        "\n# Then:\n"
        f"#   systemctl --user daemon-reload && systemctl --user enable --now {setup.UNIT}\n"
        "# Optional, for restart-aware 409s and 150x cheaper checks: end the WebUI's\n"
        "# api/agent_runtime.py with\n"
        "#   from stalewatch.hermes import accelerate\n"
        '#   accelerate(sys.modules[__name__], daemon=os.environ.get("STALEWATCH_SOCKET"))',
        file=out,
    )
    if not args.write:
        print("# (nothing written: run again with --write)", file=out)
    return exits.OK
