"""Running git in the scripts' throwaway repositories, the same way in every script.

Commits must not depend on the machine's git identity or configuration; every call has
a timeout. ``from gitrepo import git`` works from any script (``scripts/`` is first on
``sys.path`` when one runs).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

__all__ = ["GIT_ENV", "git", "git_run"]

GIT_ENV = {
    **os.environ,
    "GIT_AUTHOR_NAME": "bench",
    "GIT_AUTHOR_EMAIL": "bench@stalewatch.invalid",
    "GIT_COMMITTER_NAME": "bench",
    "GIT_COMMITTER_EMAIL": "bench@stalewatch.invalid",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
}


def git_run(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``git args`` in ``cwd``; the completed process, whatever its status."""
    return subprocess.run(
        ["git", *args], cwd=cwd, env=GIT_ENV, capture_output=True, text=True, timeout=60, check=False
    )


def git(cwd: Path, *args: str, check: bool = True) -> str:
    """Run ``git args`` in ``cwd``; its stripped output.

    Raises:
        RuntimeError: git failed (with its stderr), when ``check``.
    """
    done = git_run(cwd, *args)
    if check and done.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout.strip()
