"""``stalewatch hermes setup``: print (or write) what restarts Hermes WebUI after ``hermes update``."""

from __future__ import annotations

import argparse
import sys

from ..core import exits
from ..core.errors import SetupError
from ..hermes import setup

__all__ = ["cmd_setup"]


def cmd_setup(args: argparse.Namespace) -> int:
    """Print (or write) what makes ``hermes update`` restart the WebUI by itself."""
    try:
        install = setup.discover(args)
        files = setup.render(install)
        if args.write:
            setup.write(files, force=args.force)
            if not install.supervisor.kind.dropin:  # else the daemon's service makes it
                setup.make_private_dirs(install.socket.parent)
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
