"""Real git repositories for tests: :class:`Repo` runs real git commands in a directory."""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

__all__ = ["GIT_ENV", "Repo", "make_agent", "make_repo"]

# Commits must not depend on the machine's git identity or config.
GIT_ENV = {
    "GIT_AUTHOR_NAME": "stalewatch tests",
    "GIT_AUTHOR_EMAIL": "tests@stalewatch.invalid",
    "GIT_COMMITTER_NAME": "stalewatch tests",
    "GIT_COMMITTER_EMAIL": "tests@stalewatch.invalid",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
}


class Repo:
    """A real git repository for a test, with helpers that run real git commands."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def git(self, *args: str, check: bool = True, env: dict[str, str] | None = None) -> str:
        done = subprocess.run(
            ["git", *args],
            cwd=self.path,
            env={**os.environ, **GIT_ENV, **(env or {})},
            capture_output=True,
            text=True,
            check=False,
            timeout=30,
        )
        if check and done.returncode != 0:
            raise AssertionError(f"git {' '.join(args)} failed: {done.stderr}")
        return done.stdout.strip()

    def write(self, name: str, text: str) -> Path:
        path = self.path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return path

    def commit(self, message: str = "change", name: str = "module.py", *, at: float | None = None) -> str:
        """Append a line to ``name``, commit it, return the new HEAD.

        ``at``: the committer date (Unix seconds), and so the time of HEAD's reflog entry
        (git stamps it with the committer identity's time).
        """
        path = self.path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a") as f:
            f.write(f"# {message}\n")
        self.git("add", name)
        dated = None if at is None else {"GIT_COMMITTER_DATE": f"@{int(at)} +0000"}
        self.git("commit", "-q", "-m", message, env=dated)
        return self.head()

    def head(self) -> str:
        return self.git("rev-parse", "HEAD")


@functools.cache
def _one_commit(name: str, text: str, message: str) -> tuple[Path, tuple[tuple[str, int], ...]]:
    """A repository whose one commit adds ``name``, made by git once per process (removed at
    exit), and when git wrote each of its files: ns before its last write."""
    made = Path(tempfile.mkdtemp(prefix="sw-template-"))
    atexit.register(_remove, made, os.getpid())
    _commit_one(Repo(made), name, text, message)
    for sample in (made / ".git" / "hooks").glob("*.sample"):
        sample.unlink()  # inert, and a third of what each copy would copy
    written = {str(entry.relative_to(made)): entry.lstat().st_mtime_ns for entry in made.rglob("*")}
    last = max(written.values())
    return made, tuple((entry, when - last) for entry, when in written.items())


def _remove(path: Path, owner: int) -> None:
    if os.getpid() == owner:  # not a forked child's exit: the parent still copies it
        shutil.rmtree(path, ignore_errors=True)


def _commit_one(repo: Repo, name: str, text: str, message: str) -> Repo:
    repo.path.mkdir(parents=True, exist_ok=True)
    repo.git("init", "-q", "-b", "main")
    repo.write(name, text)
    repo.git("add", name)
    repo.git("commit", "-q", "-m", message)
    return repo


def _with_one_commit(path: Path, name: str, text: str, message: str) -> Repo:
    """A real repository at ``path`` whose one commit adds ``name``.

    Into an empty directory it is copied from one git made per process: the same objects,
    refs, reflog and index git wrote, each file's time as far before now as git wrote it
    before its last write, at a third of the cost of running git four times per test
    (hundreds of tests start from one).
    """
    path.mkdir(parents=True, exist_ok=True)
    if any(path.iterdir()):
        return _commit_one(Repo(path), name, text, message)
    template, written = _one_commit(name, text, message)
    shutil.copytree(template, path, symlinks=True, copy_function=shutil.copy, dirs_exist_ok=True)
    now = time.time_ns()
    for entry, before_last in written:  # git's order of writes (HEAD before the branch), as of now
        os.utime(path / entry, ns=(now + before_last, now + before_last), follow_symlinks=False)
    return Repo(path)


def make_repo(path: Path, *, initial: bool = True) -> Repo:
    """A real repository at ``path``, with one commit of ``module.py`` unless not ``initial``."""
    if initial:
        return _with_one_commit(path, "module.py", "VALUE = 1\n", "initial")
    path.mkdir(parents=True, exist_ok=True)
    repo = Repo(path)
    repo.git("init", "-q", "-b", "main")
    return repo


def make_agent(path: Path, source: str = "class AIAgent:\n    pass\n") -> Repo:
    """A Hermes Agent checkout: a real repository whose one commit tracks ``run_agent.py``."""
    return _with_one_commit(path, "run_agent.py", source, "agent")
