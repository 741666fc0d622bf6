"""The only module that runs ``git``: at binding time and where parsing cannot decide.

The barrier never comes here while the watcher is healthy. Every call has a timeout,
no stdin, no prompts, and no optional locks, so a wedged repository produces an
error, not a hang.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from ..core import settings
from ..core.errors import BindError, RefError
from ..core.revisions import is_object_id

_TIMEOUT = 10.0
# What `git rev-parse --local-env-vars` lists: git exports these to hooks, so a server
# restarted by an updater's hook inherits them, and they would point every git call
# here at another repository than the checkout's.
_REPOSITORY_VARIABLES = {
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_COMMON_DIR",
    "GIT_CONFIG",
    "GIT_CONFIG_COUNT",
    "GIT_CONFIG_PARAMETERS",
    "GIT_DIR",
    "GIT_GRAFT_FILE",
    "GIT_IMPLICIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_INTERNAL_SUPER_PREFIX",
    "GIT_NO_REPLACE_OBJECTS",
    "GIT_OBJECT_DIRECTORY",
    "GIT_PREFIX",
    "GIT_REPLACE_REF_BASE",
    "GIT_SHALLOW_FILE",
    "GIT_WORK_TREE",
}
# Keeps Windows from flashing a console window for every call (Hermes WebUI's complaint).
_NO_WINDOW = getattr(subprocess, "CREATE_NO_WINDOW", 0)


def run_git(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run ``git`` with ``args`` in ``cwd``; never prompts, never takes optional locks.

    Raises:
        FileNotFoundError: no ``git`` executable.
        subprocess.TimeoutExpired: git did not answer within the timeout.
    """
    env = {k: v for k, v in os.environ.items() if k not in _REPOSITORY_VARIABLES}
    env.update(GIT_OPTIONAL_LOCKS="0", GIT_TERMINAL_PROMPT="0", LC_ALL="C")
    return subprocess.run(
        [settings.git_executable(), *args],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=_TIMEOUT,
        check=False,
        creationflags=_NO_WINDOW,
    )


def is_tracked(worktree: Path, path: Path) -> bool:
    """True when the repository at ``worktree`` tracks exactly ``path``.

    The path is passed with ``--literal-pathspecs``, so ``[a]gent`` never matches
    ``agent``.

    Raises:
        BindError: git is missing, timed out or failed for another reason than "not
            tracked" (an untrusted-owner repository, a corrupt index).
    """
    relative = path.relative_to(worktree).as_posix()
    try:
        done = run_git(["--literal-pathspecs", "ls-files", "--error-unmatch", "--", relative], worktree)
    except FileNotFoundError as exc:
        raise BindError(path, "git is not installed; it is needed to check the file is tracked") from exc
    except subprocess.TimeoutExpired as exc:
        raise BindError(path, f"git ls-files did not answer within {_TIMEOUT:.0f} s") from exc
    if done.returncode in (0, 1):  # 1: not tracked
        return done.returncode == 0
    raise BindError(path, f"git ls-files failed: {done.stderr.strip() or done.returncode}")


def rev_parse_head(worktree: Path) -> str | None:
    """Resolve HEAD with ``git rev-parse`` (reftable).

    Returns ``None`` for an unborn branch.

    Raises:
        RefError: git failed, timed out, is missing, or printed something unexpected.
    """
    try:
        done = run_git(["rev-parse", "--verify", "--quiet", "HEAD^{commit}"], worktree)
    except FileNotFoundError as exc:
        raise RefError(worktree, "git is not installed; it is needed for this repository") from exc
    except subprocess.TimeoutExpired as exc:
        raise RefError(worktree, f"git rev-parse did not answer within {_TIMEOUT:.0f} s") from exc
    except OSError as exc:  # cwd deleted or unreadable
        raise RefError(worktree, f"cannot run git: {exc.strerror or exc}") from exc
    out = done.stdout.strip()
    if done.returncode == 0 and is_object_id(out):
        return out
    if done.returncode == 1 and not out:
        return None
    raise RefError(worktree, f"git rev-parse HEAD failed: {done.stderr.strip() or done.returncode}")
