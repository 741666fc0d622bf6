"""Where Hermes lives on this machine, found the way Hermes WebUI finds it.

The WebUI's server finds the Agent in its ``api/config.py`` (``_discover_agent_dir``);
:func:`discover_agent_dir` takes the same candidates in the same order, including the
one that needs the WebUI's own checkout: ``hermes-agent`` beside it (so an install
in ``/srv/hermes-webui`` + ``/srv/hermes-agent`` is found with an empty HOME).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path

AGENT_MODULE = "run_agent"
"""The Agent module the WebUI imports ``AIAgent`` from."""
_SYSTEM_CANDIDATES = ("/opt/hermes-agent", "/usr/local/hermes-agent", "/usr/local/share/hermes-agent")


def read_text(path: Path, limit: int = 64 * 1024) -> str | None:
    """The first ``limit`` bytes of ``path`` as text (odd bytes replaced); ``None`` if unreadable.

    Everything setup reads of the machine is outside input: a bounded read that never raises.
    """
    try:
        with path.open("rb") as file:
            return file.read(limit).decode("utf-8", "replace")
    except OSError:
        return None


def probe(path: Path, test: Callable[[Path], bool] = Path.is_file) -> bool:
    """``test(path)``, false where the path cannot be looked at (an unreadable parent, a loop)."""
    try:
        return test(path)
    except OSError:  # Python 3.11 raises for a path it may not look at (EACCES)
        return False


def user_home(env: Mapping[str, str] = os.environ) -> Path | None:
    """``$HOME`` (this process's: else its passwd entry), ``None`` when neither says."""
    home = env.get("HOME", "").strip()
    if home or env is not os.environ:
        return Path(home) if home else None
    try:
        return Path("~").expanduser()
    except RuntimeError:  # no HOME and no passwd entry
        return None


def _named(env: Mapping[str, str], variable: str) -> Path | None:
    value = env.get(variable, "").strip()
    return Path(value).expanduser() if value else None


def hermes_home(env: Mapping[str, str] = os.environ) -> Path | None:
    """``$HERMES_HOME``, else ``~/.hermes``: where Hermes keeps its state and update marker."""
    if explicit := _named(env, "HERMES_HOME"):
        return explicit
    home = user_home(env)
    return home / ".hermes" if home is not None else None


def agent_python(agent_dir: Path, env: Mapping[str, str] = os.environ) -> Path | None:
    """The Python with the Agent's dependencies, found as the WebUI finds it.

    ``$HERMES_WEBUI_PYTHON``, else the Agent's ``venv`` or ``.venv``; ``None`` when
    neither exists (the WebUI then falls back to the system's python3).
    """
    if explicit := _named(env, "HERMES_WEBUI_PYTHON"):
        return explicit
    found = (agent_dir / v / b for v in ("venv", ".venv") for b in ("bin/python", "Scripts/python.exe"))
    return next((candidate for candidate in found if candidate.exists()), None)


def webui_unit(env: Mapping[str, str] = os.environ) -> str:
    """The WebUI's systemd unit: ``$HERMES_WEBUI_SYSTEMD_UNIT``, else ``hermes-webui.service``."""
    unit = env.get("HERMES_WEBUI_SYSTEMD_UNIT", "").strip() or "hermes-webui.service"
    return unit if "." in unit else f"{unit}.service"


def looks_like_webui(path: Path) -> bool:
    """Whether ``path`` is a Hermes WebUI checkout (its start script and its guard's module)."""
    return probe(path / "start.sh") and probe(path / "api" / "agent_runtime.py")


def _pip_style(path: Path) -> bool:
    return probe(path / "cron" / "jobs.py") and any(
        probe(path / name, Path.is_dir) for name in ("hermes", "hermes_cli")
    )


def agent_candidates(webui_dir: Path | None = None, env: Mapping[str, str] = os.environ) -> list[Path]:
    """Where the WebUI looks for the Agent, in its order (``api/config.py``)."""
    candidates: list[Path] = []
    if explicit := _named(env, "HERMES_WEBUI_AGENT_DIR"):
        candidates.append(explicit)
    if (hermes := hermes_home(env)) is not None:
        candidates.append(hermes / "hermes-agent")
    if webui_dir is not None:
        candidates += [webui_dir.parent / "hermes-agent", webui_dir.parent]
    home = user_home(env)
    if home is not None:
        candidates += [home / ".hermes" / "hermes-agent", home / "hermes-agent"]
        data = _named(env, "XDG_DATA_HOME") or home / ".local" / "share"
        candidates.append(data / "hermes-agent")
    candidates += [Path(p) for p in _SYSTEM_CANDIDATES]
    return list(dict.fromkeys(candidates))  # each once, in order


def discover_agent_dir(webui_dir: Path | None = None, env: Mapping[str, str] = os.environ) -> Path | None:
    """Find the Hermes Agent checkout the way Hermes WebUI does.

    Candidates in the WebUI's order (:func:`agent_candidates`): ``$HERMES_WEBUI_AGENT_DIR``,
    ``$HERMES_HOME/hermes-agent``, ``hermes-agent`` beside the WebUI's checkout, the
    directory holding the WebUI's checkout, ``~/.hermes/hermes-agent``,
    ``~/hermes-agent``, ``$XDG_DATA_HOME/hermes-agent``, ``/opt/hermes-agent``,
    ``/usr/local/hermes-agent``, ``/usr/local/share/hermes-agent``. The first holding
    ``run_agent.py`` wins, else the first laid out as a pip install; resolved; ``None``
    when none is. For the guard this is a diagnostic value: its identity always comes
    from the loaded module.
    """
    candidates = agent_candidates(webui_dir, env)
    for test in (lambda path: probe(path / f"{AGENT_MODULE}.py"), _pip_style):
        for candidate in candidates:
            if test(candidate):
                try:
                    return candidate.resolve()
                except (OSError, RuntimeError):
                    continue
    return None


def read_dotenv(path: Path) -> dict[str, str]:
    """``KEY=VALUE`` lines of a ``.env`` file as the WebUI's bootstrap reads them (``{}`` if none).

    At most 64 KiB read; never raises for a missing or unreadable file.
    """
    return read_dotenv_text(read_text(path) or "")


def read_dotenv_text(text: str) -> dict[str, str]:
    """``KEY=VALUE`` lines: comments and blank lines skipped, ``export`` and quotes removed."""
    found: dict[str, str] = {}
    for raw_line in text.splitlines():
        line = raw_line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, value = line.split("=", 1)
        key = key.strip().removeprefix("export ").strip()
        if key:
            found[key] = value.strip().strip('"').strip("'")
    return found
