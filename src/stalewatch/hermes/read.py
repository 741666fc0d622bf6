"""The synchronous read of the Agent checkout's HEAD, in-process (what the WebUI's three
``git`` processes did): a literal tracked-file check at binding, HEAD parsed here.
"""

from __future__ import annotations

import sys
from pathlib import Path

from ..core.errors import RefError, StalewatchError
from ..git import refs
from ..git.head import head_commit
from ..guard import identity
from .discovery import AGENT_MODULE

__all__ = ["loaded_agent_identity", "read_agent_revision"]


def loaded_agent_identity() -> tuple[Path, Path] | None:
    """The (source directory, file) that supplied ``sys.modules['run_agent']`` (C1)."""
    module = sys.modules.get(AGENT_MODULE)
    module_file = getattr(module, "__file__", None)
    if not module_file:
        return None
    try:
        module_path = Path(module_file).resolve()
    except (OSError, RuntimeError, TypeError, ValueError):
        return None
    return module_path.parent, module_path


def read_agent_revision(agent_dir: Path | None, *, module_path: Path | None = None) -> str | None:
    """Return HEAD's commit for the checkout tracking the Agent module, else ``None``.

    The synchronous read, in-process (one ``git ls-files`` to confirm the file is
    tracked literally, C2; HEAD and refs are parsed here, ``git rev-parse`` only for
    reftable). ``None`` means untracked or unknown; never raises for a bad checkout.

    Args:
        agent_dir: the Agent source directory (``None``: nothing to read).
        module_path: the Agent module file; default: the loaded ``run_agent``'s.
    """
    if agent_dir is None:
        return None
    if module_path is None:
        loaded = loaded_agent_identity()
        if loaded is None:
            return None
        module_path = loaded[1]
    try:
        dirs = refs.find_git_dirs(Path(agent_dir).resolve(strict=True))
        if dirs is None:
            return None
        binding = identity.bind_file(module_path)
    except (StalewatchError, OSError, RuntimeError, ValueError):
        return None
    if binding.dirs is None or binding.dirs.worktree != dirs.worktree:
        return None  # untracked, or tracked by another repository than agent_dir's (C2)
    try:
        return head_commit(binding.dirs)
    except RefError:
        return None
