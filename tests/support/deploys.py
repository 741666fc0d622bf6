"""Deploys that switch a symlink, done the way the tools do them, with real git and coreutils.

- :class:`GitSync`: Kubernetes' git-sync (its README, "the contract"; ``main.go``'s
  ``worktreeFor`` and ``publishSymlink``): fetch without checking out, add a worktree
  ``<root>/.worktrees/<hash>``, write the link relative under ``tmp-link``, rename it onto
  ``--link``; a stale worktree is removed right after (``--stale-worktree-timeout=0``).
- :class:`Releases`: Capistrano (``deploy:symlink:release``: ``ln -s <release>
  releases/current``, ``mv releases/current <deploy_to>``; each release a ``git archive``
  export with a ``REVISION`` file) and Deployer (``mv -T <deploy_path>/release
  <deploy_path>/current``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from .repos import GIT_ENV, Repo

__all__ = ["GitSync", "Releases", "run"]


def run(*argv: str | Path, cwd: Path | None = None) -> str:
    """Run a real command (git, ln, mv, tar); fail the test with its stderr."""
    done = subprocess.run(
        [str(a) for a in argv],
        cwd=cwd,
        env={**os.environ, **GIT_ENV},
        capture_output=True,
        text=True,
        check=False,
        timeout=30,
    )
    assert done.returncode == 0, f"{' '.join(map(str, argv))} failed: {done.stderr}"
    return done.stdout.strip()


class GitSync:
    """git-sync's publishing, step by step, into ``root`` from the repository ``origin``."""

    def __init__(self, root: Path, origin: Repo, link: str = "app", *, keep: bool = False) -> None:
        self.root = root
        self.origin = origin
        self.link = root / link
        self.keep = keep  # a --stale-worktree-timeout long enough to keep the old worktree
        root.mkdir(parents=True, exist_ok=True)
        run("git", "init", "-q", root)

    def worktree(self, commit: str) -> Path:
        return self.root / ".worktrees" / commit

    def sync(self, commit: str) -> Path:
        """Publish ``commit``: worktree, ``tmp-link``, rename onto the link."""
        old = self.link.resolve() if self.link.is_symlink() else None
        worktree = self.worktree(commit)
        if not worktree.exists():
            run("git", "-C", self.root, "fetch", "-q", self.origin.path, commit)
            run("git", "-C", self.root, "worktree", "add", "-q", "--detach", worktree, commit)
        tmp = self.root / "tmp-link"
        tmp.symlink_to(os.path.relpath(worktree, self.root))
        tmp.rename(self.link)
        if old is not None and old != worktree and not self.keep:
            shutil.rmtree(old)  # git-sync's removeWorktree: RemoveAll, then prune
            run("git", "-C", self.root, "worktree", "prune")
        return worktree


class Releases:
    """A Capistrano or Deployer ``deploy_to``: ``releases/<id>``, ``current``."""

    def __init__(self, deploy_to: Path, origin: Repo) -> None:
        self.deploy_to = deploy_to
        self.origin = origin
        self.current = deploy_to / "current"
        (deploy_to / "releases").mkdir(parents=True, exist_ok=True)

    def export(self, name: str, commit: str) -> Path:
        """Capistrano's git strategy: ``git archive | tar -x`` and a ``REVISION`` file."""
        release = self.deploy_to / "releases" / name
        release.mkdir()
        archive = subprocess.run(
            ["git", "-C", str(self.origin.path), "archive", commit],
            capture_output=True,
            check=True,
            timeout=30,
        ).stdout
        subprocess.run(["tar", "-x", "-f", "-", "-C", str(release)], input=archive, check=True, timeout=30)
        (release / "REVISION").write_text(f"{commit}\n")
        return release

    def clone(self, name: str, commit: str) -> Path:
        """A release that is a git clone (Deployer's older ``git clone``)."""
        release = self.deploy_to / "releases" / name
        run("git", "clone", "-q", self.origin.path, release)
        run("git", "-C", release, "checkout", "-q", "--detach", commit)
        return release

    def capistrano_switch(self, release: Path) -> None:
        """``deploy:symlink:release``: ``ln -s`` beside the releases, ``mv`` into deploy_to."""
        tmp = release.parent / self.current.name
        run("ln", "-s", release, tmp)
        run("mv", tmp, self.deploy_to)

    def deployer_switch(self, release: Path) -> None:
        """Deployer's ``deploy:symlink``: a ``release`` link, then ``mv -T`` onto ``current``."""
        tmp = self.deploy_to / "release"
        run("ln", "-s", release, tmp)
        run("mv", "-T", tmp, self.current)
