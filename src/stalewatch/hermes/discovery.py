"""Where Hermes lives on this machine, found the way Hermes WebUI finds it."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["AGENT_MODULE", "WEBUI_UNIT", "agent_python", "discover_agent_dir", "hermes_home", "webui_unit"]

AGENT_MODULE = "run_agent"
"""The Agent module the WebUI imports ``AIAgent`` from."""
WEBUI_UNIT = "hermes-webui.service"
"""The WebUI's systemd unit when ``$HERMES_WEBUI_SYSTEMD_UNIT`` does not name another."""


def _home() -> Path | None:
    try:
        return Path("~").expanduser()
    except RuntimeError:  # no HOME and no passwd entry
        return None


def hermes_home() -> Path | None:
    """``$HERMES_HOME``, else ``~/.hermes``: where Hermes keeps its state and update marker."""
    explicit = os.environ.get("HERMES_HOME", "").strip()
    if explicit:
        return Path(explicit).expanduser()
    home = _home()
    return home / ".hermes" if home is not None else None


def agent_python(agent_dir: Path) -> Path | None:
    """The Python with the Agent's dependencies, found as the WebUI finds it.

    ``$HERMES_WEBUI_PYTHON``, else the Agent's ``venv`` or ``.venv``; ``None`` when
    neither exists (the WebUI then falls back to the system's python3).
    """
    explicit = os.environ.get("HERMES_WEBUI_PYTHON", "").strip()
    if explicit:
        return Path(explicit).expanduser()
    for venv in ("venv", ".venv"):
        for binary in (Path("bin") / "python", Path("Scripts") / "python.exe"):
            candidate = agent_dir / venv / binary
            if candidate.exists():
                return candidate
    return None


def webui_unit() -> str:
    """The WebUI's systemd unit: ``$HERMES_WEBUI_SYSTEMD_UNIT``, else ``hermes-webui.service``."""
    unit = os.environ.get("HERMES_WEBUI_SYSTEMD_UNIT", "").strip() or WEBUI_UNIT
    return unit if "." in unit else f"{unit}.service"


def discover_agent_dir() -> Path | None:
    """Find the Hermes Agent checkout the way Hermes WebUI does.

    Candidates in order: ``$HERMES_WEBUI_AGENT_DIR``, ``$HERMES_HOME/hermes-agent``,
    ``~/.hermes/hermes-agent``, ``~/hermes-agent``, ``$XDG_DATA_HOME/hermes-agent``,
    ``/opt/hermes-agent``, ``/usr/local/hermes-agent``. The first holding
    ``run_agent.py`` wins, resolved; ``None`` when none does. For the guard this is a
    diagnostic value: its identity always comes from the loaded module (C1).
    """
    candidates: list[Path] = []
    explicit = os.environ.get("HERMES_WEBUI_AGENT_DIR", "").strip()
    if explicit:
        candidates.append(Path(explicit).expanduser())
    explicit_home = os.environ.get("HERMES_HOME", "").strip()
    if explicit_home:
        candidates.append(Path(explicit_home).expanduser() / "hermes-agent")
    home = _home()
    if home is not None:
        candidates += [home / ".hermes" / "hermes-agent", home / "hermes-agent"]
        xdg = os.environ.get("XDG_DATA_HOME", "").strip()
        candidates.append((Path(xdg).expanduser() if xdg else home / ".local" / "share") / "hermes-agent")
    candidates += [Path("/opt/hermes-agent"), Path("/usr/local/hermes-agent")]
    for candidate in candidates:
        try:
            if (candidate / f"{AGENT_MODULE}.py").is_file():
                return candidate.resolve()
        except (OSError, RuntimeError):  # unreadable parent, symlink loop
            continue
    return None
