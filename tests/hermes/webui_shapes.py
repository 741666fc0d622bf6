"""WebUI-shaped ``api`` packages on disk, of the two shapes Hermes WebUI has had (our code).

The *older* shape (release exp-v0.52.262): ``api/agent_runtime.py`` imports ``Path``,
``sys``, ``subprocess`` and ``threading`` and nothing else (no ``os``); it has no
``agent_runtime_stale_payload``: the routes build the 409's body inline from
``str(exc)``. The *newer* shape (pull request 7160): it imports ``os``, raises
``AgentRuntimeChangedError(message, restart_scheduled=, server_started_at=)``, builds
the body in ``agent_runtime_stale_payload(exc)``, and restarts itself after an Agent
update through ``_schedule_automatic_restart()`` → ``api.updates._schedule_restart``
(here: it only records that it was asked). Both have ``api.config`` with ``STREAMS``
and ``ACTIVE_RUNS`` and their locks. The names, signatures and import lines are the
WebUI's; the bodies are written for these tests.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

SHAPES = ("262", "7160")

CONFIG = """\
import os
import threading
from pathlib import Path

_AGENT_DIR = Path(os.environ["HERMES_WEBUI_AGENT_DIR"]) if os.environ.get("HERMES_WEBUI_AGENT_DIR") else None
STREAMS: dict = {}
STREAMS_LOCK = threading.Lock()
ACTIVE_RUNS: dict = {}
ACTIVE_RUNS_LOCK = threading.Lock()
SERVER_START_TIME = 1234.5
"""

UPDATES = """\
RESTARTS_ASKED = []


def _schedule_restart(delay=2.0, *, restart_ready=None):
    RESTARTS_ASKED.append(restart_ready)  # the real one re-executes the server (os.execv)
    return True
"""

READ = '''

def _read_agent_revision(agent_dir, *, module_path=None):
    """HEAD of the checkout tracking the Agent module, else None (three git processes)."""
    if agent_dir is None:
        return None
    if module_path is None:
        identity = _loaded_agent_source_identity()
        if identity is None:
            return None
        module_path = identity[1]
    try:
        top = subprocess.run(["git", "-C", str(agent_dir), "rev-parse", "--show-toplevel"],
                             capture_output=True, text=True, timeout=5, check=False)
        if top.returncode != 0:
            return None
        worktree = Path(top.stdout.strip()).resolve()
        inside = module_path.relative_to(worktree).as_posix()
        listed = subprocess.run(["git", "--literal-pathspecs", "-C", str(worktree), "ls-files",
                                 "--error-unmatch", "--", inside],
                                capture_output=True, text=True, timeout=5, check=False)
        if listed.returncode != 0:
            return None
        head = subprocess.run(["git", "-C", str(worktree), "rev-parse", "--verify", "HEAD"],
                              capture_output=True, text=True, timeout=5, check=False)
    except (OSError, subprocess.TimeoutExpired, RuntimeError, ValueError):
        return None
    return head.stdout.strip() if head.returncode == 0 and head.stdout.strip() else None


_AGENT_SOURCE_DIR = None
_AGENT_MODULE_PATH = None
_AGENT_REVISION = None
_AIAgent = None
_RUNTIME_LOCK = threading.Lock()


def _loaded_agent_source_identity():
    module_file = getattr(sys.modules.get("run_agent"), "__file__", None)
    if not module_file:
        return None
    path = Path(module_file).resolve()
    return path.parent, path


def _capture_loaded_agent_revision():
    global _AGENT_SOURCE_DIR, _AGENT_MODULE_PATH, _AGENT_REVISION
    if _AGENT_REVISION is not None:
        ensure_agent_runtime_current()
        return
    identity = _loaded_agent_source_identity()
    if identity is None:
        return
    source_dir, module_path = identity
    revision = _read_agent_revision(source_dir, module_path=module_path)
    _AGENT_SOURCE_DIR, _AGENT_MODULE_PATH, _AGENT_REVISION = source_dir, module_path, revision


def require_ai_agent_class():
    ensure_agent_runtime_current()
    from run_agent import AIAgent

    _capture_loaded_agent_revision()
    return AIAgent


def get_ai_agent_class():
    global _AIAgent
    with _RUNTIME_LOCK:
        ensure_agent_runtime_current()
        if _AIAgent is None:
            try:
                _AIAgent = require_ai_agent_class()
            except ImportError:
                return None
        return _AIAgent
'''

OLDER = (
    '''\
"""WebUI-shaped api/agent_runtime.py, older shape: imports sys, never os."""

from __future__ import annotations

from pathlib import Path
import sys
import subprocess
import threading

from api.config import _AGENT_DIR  # noqa: F401

_RESTART_MESSAGE = "Hermes Agent was updated while Hermes WebUI was running. Restart Hermes WebUI."
'''
    + READ
    + """

class AgentRuntimeChangedError(RuntimeError):
    pass


def ensure_agent_runtime_current():
    if _AGENT_REVISION is None:
        return
    if _read_agent_revision(_AGENT_SOURCE_DIR, module_path=_AGENT_MODULE_PATH) != _AGENT_REVISION:
        raise AgentRuntimeChangedError(_RESTART_MESSAGE)
"""
)

NEWER = (
    '''\
"""WebUI-shaped api/agent_runtime.py, newer shape: its own payload and its own restart."""

from __future__ import annotations

import logging
import os
from pathlib import Path
import sys
import subprocess
import threading

from api.config import SERVER_START_TIME, _AGENT_DIR  # noqa: F401

_PENDING = "Hermes Agent was updated. Hermes WebUI will restart after the Agent update finishes."
_FAILED = "Hermes Agent was updated. The automatic WebUI restart could not be scheduled."
_AUTO_RESTART_LOCK = threading.Lock()
_AUTO_RESTART_SCHEDULED = False
'''
    + READ
    + """

class AgentRuntimeChangedError(RuntimeError):
    def __init__(self, message, *, restart_scheduled=None, server_started_at=None):
        super().__init__(message)
        self.restart_scheduled = restart_scheduled
        self.server_started_at = server_started_at


def agent_runtime_stale_payload(exc):
    payload = {"error": str(exc), "type": "agent_runtime_stale", "retryable": True}
    if exc.restart_scheduled is not None:
        payload["restart_scheduled"] = exc.restart_scheduled
    if exc.server_started_at is not None:
        payload["server_started_at"] = exc.server_started_at
    return payload


def _wait_for_agent_restart_ready():
    return True


def _delegate_webui_restart(*, restart_ready):
    from api.updates import _schedule_restart

    return _schedule_restart(restart_ready=restart_ready)


def _schedule_automatic_restart():
    global _AUTO_RESTART_SCHEDULED
    with _AUTO_RESTART_LOCK:
        if _AUTO_RESTART_SCHEDULED:
            return True
        _AUTO_RESTART_SCHEDULED = bool(_delegate_webui_restart(restart_ready=_wait_for_agent_restart_ready))
        return _AUTO_RESTART_SCHEDULED


def ensure_agent_runtime_current():
    if _AGENT_REVISION is None:
        return
    if _read_agent_revision(_AGENT_SOURCE_DIR, module_path=_AGENT_MODULE_PATH) != _AGENT_REVISION:
        scheduled = _schedule_automatic_restart()
        raise AgentRuntimeChangedError(
            _PENDING if scheduled else _FAILED,
            restart_scheduled=scheduled,
            server_started_at=SERVER_START_TIME,
        )
"""
)


def make_webui(root: Path, shape: str, suffix: str = "") -> Path:
    """A WebUI checkout-like tree at ``root`` (``api/`` package); ``suffix`` ends agent_runtime.py."""
    api = root / "api"
    api.mkdir(parents=True)
    (api / "__init__.py").write_text("")
    (api / "config.py").write_text(CONFIG)
    (api / "updates.py").write_text(UPDATES)
    runtime = {"262": OLDER, "7160": NEWER}[shape]
    (api / "agent_runtime.py").write_text(runtime + ("\n" + textwrap.dedent(suffix) if suffix else ""))
    return root


def routes_payload(runtime: object, exc: BaseException) -> dict[str, object]:
    """The 409's body as the WebUI's routes build it, for either shape."""
    payload = getattr(runtime, "agent_runtime_stale_payload", None)
    if payload is not None:
        return dict(payload(exc))
    return {"error": str(exc), "type": "agent_runtime_stale", "retryable": True}  # inline, as 262 does
