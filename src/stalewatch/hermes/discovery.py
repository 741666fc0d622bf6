"""Where Hermes lives on this machine, found the way Hermes WebUI finds it."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["AGENT_MODULE", "discover_agent_dir"]

AGENT_MODULE = "run_agent"
"""The Agent module the WebUI imports ``AIAgent`` from."""


def discover_agent_dir() -> Path | None:
    """Find the Hermes Agent checkout the way Hermes WebUI does.

    Candidates in order: ``$HERMES_WEBUI_AGENT_DIR``, ``$HERMES_HOME/hermes-agent``,
    ``~/.hermes/hermes-agent``, ``~/hermes-agent``. The first holding ``run_agent.py``
    wins, resolved; ``None`` when none does. This is a diagnostic value: the guard's
    identity always comes from the loaded module (C1).
    """
    candidates: list[Path] = []
    explicit = os.environ.get("HERMES_WEBUI_AGENT_DIR", "").strip()
    if explicit:
        candidates.append(Path(explicit).expanduser())
    hermes_home = os.environ.get("HERMES_HOME", "").strip()
    if hermes_home:
        candidates.append(Path(hermes_home).expanduser() / "hermes-agent")
    try:
        home = Path("~").expanduser()
    except RuntimeError:  # no HOME and no passwd entry
        home = None
    if home is not None:
        candidates += [home / ".hermes" / "hermes-agent", home / "hermes-agent"]
    for candidate in candidates:
        try:
            if (candidate / f"{AGENT_MODULE}.py").is_file():
                return candidate.resolve()
        except (OSError, RuntimeError):  # unreadable parent, symlink loop
            continue
    return None
