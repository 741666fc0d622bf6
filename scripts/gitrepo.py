"""Running git in the scripts' throwaway repositories, the same way in every script.

Commits must not depend on the machine's git identity or configuration; every call has
a timeout. ``from gitrepo import git`` works from any script (``scripts/`` is first on
``sys.path`` when one runs).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

__all__ = ["GIT_ENV", "git", "git_run", "two_commits"]

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


def two_commits(repo: Path, name: str, text: str, *init: str) -> tuple[str, str]:
    """A new repository at ``repo`` with two commits (``name`` holding ``text``, then an
    empty one), HEAD back on the first: ``(first, second)``, for benches that move HEAD
    between them. ``init``: extra ``git init`` arguments.
    """
    repo.mkdir()
    git(repo, "init", "-q", *init, "-b", "main")
    (repo / name).write_text(text)
    git(repo, "add", name)
    git(repo, "commit", "-q", "-m", "a")
    first = git(repo, "rev-parse", "HEAD")
    git(repo, "commit", "-q", "--allow-empty", "-m", "b")
    second = git(repo, "rev-parse", "HEAD")
    git(repo, "reset", "-q", "--hard", first)
    return first, second
