"""stalewatch: know, for a flag read, when the git checkout under a running server moved.

Example::

    from stalewatch import Guard, StaleError

    guard = Guard.for_module("run_agent").start()
    guard.check()          # None while current; raises StaleError after a git pull

Each public name is imported when first asked for: importing the package itself runs
nothing, so the command line (:mod:`stalewatch.__main__`) is in charge of Ctrl-C from
its first instant.
"""

from __future__ import annotations

import importlib

TYPE_CHECKING = False  # not typing's: importing typing takes ~25 ms a Ctrl-C could land in
if TYPE_CHECKING:
    from .client.daemon import Daemon
    from .core.errors import BindError, ConfigError, RefError, StaleError, StalewatchError
    from .core.phases import RestartPhase, RestartState
    from .core.refusal import Refusal
    from .core.status import Event, Snapshot, Status
    from .core.version import __version__
    from .guard.guard import Guard
    from .watching.local import LocalSource
    from .watching.source import Source

_HOMES = {  # where each public name lives (as imported above for type checkers)
    "client.daemon": ("Daemon",),
    "core.errors": ("BindError", "ConfigError", "RefError", "StaleError", "StalewatchError"),
    "core.phases": ("RestartPhase", "RestartState"),
    "core.refusal": ("Refusal",),
    "core.status": ("Event", "Snapshot", "Status"),
    "core.version": ("__version__",),
    "guard.guard": ("Guard",),
    "watching.local": ("LocalSource",),
    "watching.source": ("Source",),
}

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


def __getattr__(name: str) -> object:
    home = next((home for home, names in _HOMES.items() if name in names), None)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value  # asked once
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
