"""``stalewatch hermes setup``: print (or write) what restarts Hermes WebUI after ``hermes update``."""

from __future__ import annotations

import argparse
import sys

from ..core import exits
from ..core.errors import SetupError
from ..hermes import setup


def cmd_hermes(args: argparse.Namespace) -> int:
    """Print (or write) what makes ``hermes update`` restart the WebUI by itself."""
    try:
        install = setup.discover(args)
        files = setup.render(install)
        if args.write:
            setup.write(files, force=args.force)
            if not install.supervisor.kind.dropin:  # else the daemon's service makes it
                setup.make_private_dirs(install.socket.parent)
    except OSError as exc:  # printed by the command line, which exits 2
        raise SetupError(str(exc)) from None
    found = install.supervisor
    print(f"# Hermes Agent checkout: {install.agent_dir}")
    print(f"# Hermes WebUI checkout: {install.webui_dir or 'not found (pass --webui-dir)'}")
    print(f"# Hermes home:           {install.hermes_home}")
    print(f"# Agent's Python:        {install.python or 'not found: the probe uses python3'}")
    print(f"# supervisor:            {found.kind.option} {found.name} ({found.evidence})")
    print(f"# the WebUI answers:     {install.health}")
    print(f"# the daemon's socket:   {install.socket}")
    sys.stdout.writelines(f"# checked: {line}\n" for line in install.checked)
    for path, (text, _mode) in files.items():
        verb = "wrote" if args.write else "would write"
        print(f"\n# --- {verb} {path}\n{text}", end="" if text.endswith("\n") else "\n")
    sys.stdout.writelines(
        "\n# Note: " + note.replace("\n", "\n#   ") + "\n" for note in install.service.notes
    )
    print("\n# Then:")
    sys.stdout.writelines(f"#   {command}\n" for command in install.service.then)
    print(
        "# For registration and restart-aware 409s (and a cheaper check: the WebUI's own check\n"
        f"# in its own process, {setup.ACCELERATOR_FIGURE} on exp-v0.52.262; settings and\n"
        "# command: docs/benchmarks.md),\n"
        "# end the WebUI's api/agent_runtime.py with these two lines, then restart it once:",
    )
    sys.stdout.writelines(f"#   {line}\n" for line in setup.ACCELERATOR_LINES)
    if not args.write:
        print("# (nothing written: run again with --write)")
    return exits.OK
