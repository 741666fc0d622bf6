"""Where the daemon's socket is when no path is given (both sides use the same default)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from ..core.errors import SocketPathError

SOCKET_NAME = "stalewatch.sock"
DEFAULT_TEXT = f"$RUNTIME_DIRECTORY/{SOCKET_NAME}, else $XDG_RUNTIME_DIR/{SOCKET_NAME}"
"""The default as ``--help`` says it (the docs say the same)."""


def default_socket_path(environ: Mapping[str, str] | None = None) -> Path:
    """``$RUNTIME_DIRECTORY/stalewatch.sock``, else ``$XDG_RUNTIME_DIR/stalewatch.sock``.

    systemd sets ``RUNTIME_DIRECTORY`` (first entry of a colon-separated list) from the
    unit's ``RuntimeDirectory=``; ``XDG_RUNTIME_DIR`` covers a developer's session.

    Raises:
        SocketPathError: neither variable is set.
    """
    env = os.environ if environ is None else environ
    for directory in (env.get("RUNTIME_DIRECTORY", "").split(":")[0], env.get("XDG_RUNTIME_DIR", "")):
        if directory:
            return Path(directory) / SOCKET_NAME
    raise SocketPathError(
        None, "no socket path: pass --socket PATH (neither RUNTIME_DIRECTORY nor XDG_RUNTIME_DIR is set)"
    )
