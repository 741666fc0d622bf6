"""stalewatch: know, for a flag read, when the git checkout under a running server moved.

Example::

    from stalewatch import Guard, StaleError

    guard = Guard.for_module("run_agent").start()
    guard.check()          # None while current; raises StaleError after a git pull
"""

from __future__ import annotations

from .client.daemon import Daemon
from .core.errors import BindError, ConfigError, RefError, StaleError, StalewatchError
from .core.phases import RestartPhase, RestartState
from .core.refusal import Refusal
from .core.status import Event, Snapshot, Status
from .core.version import __version__
from .guard.guard import Guard
from .watching.local import LocalSource
from .watching.source import Source

__all__ = [
    "BindError",
    "ConfigError",
    "Daemon",
    "Event",
    "Guard",
    "LocalSource",
    "RefError",
    "Refusal",
    "RestartPhase",
    "RestartState",
    "Snapshot",
    "Source",
    "StaleError",
    "StalewatchError",
    "Status",
    "__version__",
]
