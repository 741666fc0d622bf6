"""A module shaped like Hermes WebUI's ``api/agent_runtime.py`` (written for these tests).

Same public names, same module attributes, same function signatures and the same
three-``git``-process read as the WebUI's guard; none of the WebUI's code. Tests load
it with :func:`load` under a fresh name, with or without the two-line accelerator
suffix, and drive it the way the WebUI's own tests do (monkeypatching
``_read_agent_revision``, ``_AGENT_REVISION``, ``_AGENT_SOURCE_DIR``,
``_AGENT_MODULE_PATH``, ``_AGENT_DIR`` and ``sys.modules["run_agent"]``).
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import threading
from pathlib import Path
from types import ModuleType
from typing import Any

SUFFIX = "\nfrom stalewatch.hermes import accelerate\naccelerate(sys.modules[__name__])\n"
_names = itertools.count()

_AGENT_DIR = Path(os.environ["HERMES_WEBUI_AGENT_DIR"]) if os.environ.get("HERMES_WEBUI_AGENT_DIR") else None
MESSAGE = "Hermes Agent changed under a running WebUI. Restart Hermes WebUI, then retry."


def _git(args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], check=False, capture_output=True, text=True, timeout=5)


def _read_agent_revision(agent_dir: Path | None, *, module_path: Path | None = None) -> str | None:
    """HEAD of the checkout tracking the Agent module, else None (three git processes)."""
    if agent_dir is None:
        return None
    if module_path is None:
        loaded = _loaded_agent_source_identity()
        if loaded is None:
            return None
        module_path = loaded[1]
    try:
        top = _git(["-C", str(agent_dir), "rev-parse", "--show-toplevel"])
        if top.returncode != 0:
            return None
        worktree = Path(top.stdout.strip()).resolve()
        inside = module_path.relative_to(worktree).as_posix()
        listed = _git(
            ["--literal-pathspecs", "-C", str(worktree), "ls-files", "--error-unmatch", "--", inside]
        )
        if listed.returncode != 0:
            return None
        head = _git(["-C", str(worktree), "rev-parse", "--verify", "HEAD"])
    except (OSError, subprocess.TimeoutExpired, RuntimeError, ValueError):
        return None
    return head.stdout.strip() if head.returncode == 0 and head.stdout.strip() else None


_AGENT_SOURCE_DIR: Path | None = None
_AGENT_MODULE_PATH: Path | None = None
_AGENT_REVISION: str | None = None
_AIAgent: Any = None
_RUNTIME_LOCK = threading.Lock()


class AgentRuntimeChangedError(RuntimeError):
    """The loaded Agent no longer matches its checkout."""


def _loaded_agent_source_identity() -> tuple[Path, Path] | None:
    module_file = getattr(sys.modules.get("run_agent"), "__file__", None)
    if not module_file:
        return None
    try:
        path = Path(module_file).resolve()
    except (OSError, RuntimeError, TypeError):
        return None
    return path.parent, path


def _capture_loaded_agent_revision() -> None:
    global _AGENT_SOURCE_DIR, _AGENT_MODULE_PATH, _AGENT_REVISION
    if _AGENT_REVISION is not None:
        ensure_agent_runtime_current()
        return
    loaded = _loaded_agent_source_identity()
    if loaded is None:
        return
    source_dir, module_path = loaded
    revision = _read_agent_revision(source_dir, module_path=module_path)
    _AGENT_SOURCE_DIR, _AGENT_MODULE_PATH, _AGENT_REVISION = source_dir, module_path, revision


def ensure_agent_runtime_current() -> None:
    if _AGENT_REVISION is None:
        return
    if _read_agent_revision(_AGENT_SOURCE_DIR, module_path=_AGENT_MODULE_PATH) != _AGENT_REVISION:
        raise AgentRuntimeChangedError(MESSAGE)


def require_ai_agent_class() -> Any:
    ensure_agent_runtime_current()
    from run_agent import AIAgent  # type: ignore[import-not-found]

    _capture_loaded_agent_revision()
    return AIAgent


def get_ai_agent_class() -> Any:
    global _AIAgent  # noqa: PLW0603
    with _RUNTIME_LOCK:
        ensure_agent_runtime_current()
        if _AIAgent is None:
            try:
                _AIAgent = require_ai_agent_class()
            except ImportError:
                return None
        return _AIAgent


def load(*, accelerated: bool) -> ModuleType:
    """This file as a fresh module (as the WebUI imports its own), with or without the suffix."""
    name = f"webui_shaped_runtime_{next(_names)}"
    source = Path(__file__).read_text()
    module = ModuleType(name)
    module.__file__ = __file__
    sys.modules[name] = module
    exec(compile(source + (SUFFIX if accelerated else ""), __file__, "exec"), module.__dict__)  # noqa: S102
    return module
