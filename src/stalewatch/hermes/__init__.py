"""Hermes WebUI: :func:`accelerate` for the WebUI's own file, and the drop-in replacing it.

The recommended way is :func:`~.accelerator.accelerate`: the WebUI keeps its
``api/agent_runtime.py`` (any version) and appends two lines::

    from stalewatch.hermes import accelerate
    accelerate(sys.modules[__name__])

Importing this package runs no discovery and starts nothing. The older drop-in lives in
:mod:`.dropin` (its three-line shim: ``sys.modules[__name__] = dropin``); its names
are also this package's, read from the drop-in on every use: :class:`AgentRuntimeChangedError`,
:func:`ensure_agent_runtime_current`, :func:`get_ai_agent_class`... and its state
attributes (``_AGENT_DIR``, ``_read_agent_revision``...), so the older shim
``sys.modules[__name__] = hermes`` reads what the drop-in holds; they are replaced on
the drop-in itself.

- :mod:`.accelerator`: :func:`accelerate`, and restart-aware 409s with a daemon.
- :mod:`.agent_head`: the one in-process read of the Agent checkout's HEAD.
- :mod:`.dropin`: the drop-in.
- :mod:`.discovery`: where Hermes lives, found as the WebUI finds it.
- :mod:`.setup`: what ``stalewatch hermes setup`` writes.
"""

from __future__ import annotations

import importlib
from typing import Any

from .accelerator import accelerate

__all__ = [
    "AgentRuntimeChangedError",
    "accelerate",
    "agent_runtime_stale_payload",
    "current_guard",
    "ensure_agent_runtime_current",
    "get_ai_agent_class",
    "require_ai_agent_class",
    "stop",
    "wait_until_watching",
]


def __getattr__(name: str) -> Any:
    # PEP 562: the drop-in's names, its public ones and its state (``_AGENT_DIR``...), read
    # from it on every access (never copied here, so a value replaced on the drop-in is
    # the one read through the package).
    if name not in __all__ and (not name.startswith("_") or name.startswith("__")):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.dropin"), name)
