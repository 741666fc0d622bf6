#!/usr/bin/env python3
"""Torture the watcher: random git operations on a real repository while a guard watches.

After each operation the truth comes from ``git rev-parse HEAD``. Where HEAD's commit
changed, the guard's watcher (not a strict re-read: the periodic re-verification is set
to an hour so it cannot mask a lost event) must deliver an event naming the new commit
within a deadline, else it is a **miss**. Every event must name a commit HEAD really
pointed at (``git reflog``) with the status that commit implies, else it is a **false
alarm** (e.g. a read caught between gc's write of packed-refs and its unlink of a loose ref).

Usage: python scripts/torture.py [--ops 500] [--seed N] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import os
import queue
import random
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from stalewatch import Event, Guard, LocalSource, Status

_ENV = {
    **os.environ,
    "GIT_AUTHOR_NAME": "torture",
    "GIT_AUTHOR_EMAIL": "torture@stalewatch.invalid",
    "GIT_COMMITTER_NAME": "torture",
    "GIT_COMMITTER_EMAIL": "torture@stalewatch.invalid",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
}
DEADLINE = 5.0  # seconds for an event to arrive before it counts as a miss


def git(cwd: Path, *args: str, check: bool = True) -> str:
    done = subprocess.run(
        ["git", *args], cwd=cwd, env=_ENV, capture_output=True, text=True, timeout=60, check=False
    )
    if check and done.returncode:
        raise RuntimeError(f"git {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout.strip()


@dataclass
class Result:
    operations: int = 0
    head_changes: int = 0
    misses: int = 0
    false_alarms: int = 0
    events: int = 0
    by_op: Counter[str] = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)
    seen: list[Event] = field(default_factory=list)
    seconds: float = 0.0


class Torture:
    def __init__(self, root: Path, rng: random.Random) -> None:
        self.rng = rng
        self.repo = root / "checkout"
        self.upstream = root / "upstream"
        self.root = root
        self.n = 0
        self.repo.mkdir()
        git(self.repo, "init", "-q", "-b", "main")
        (self.repo / "a.txt").write_text("0\n")
        git(self.repo, "add", "a.txt")
        git(self.repo, "commit", "-q", "-m", "initial")
        git(root, "clone", "-q", str(self.repo), str(self.upstream))
        git(self.repo, "remote", "add", "origin", str(self.upstream))
        self.worktrees = 0

    # -- operations: each leaves the checkout clean ------------------------------------

    def _edit_commit(self, cwd: Path, message: str) -> None:
        self.n += 1
        with (cwd / "a.txt").open("a") as f:
            f.write(f"{self.n}\n")
        git(cwd, "commit", "-q", "-am", message)

    def _branches(self) -> list[str]:
        names = git(self.repo, "for-each-ref", "--format=%(refname:short)", "refs/heads")
        return names.splitlines()

    def op_commit(self) -> None:
        self._edit_commit(self.repo, "commit")

    def op_amend(self) -> None:
        git(self.repo, "commit", "-q", "--amend", "--allow-empty", "-m", f"amend {self.rng.random()}")

    def op_switch_new(self) -> None:
        self.n += 1
        git(self.repo, "checkout", "-q", "-b", f"topic/{self.n}")

    def op_switch(self) -> None:
        # A branch checked out in another worktree is refused by git: that is fine.
        git(self.repo, "checkout", "-q", self.rng.choice(self._branches()), check=False)

    def op_detach(self) -> None:
        git(self.repo, "checkout", "-q", "--detach", "HEAD~1" if self._has_parent() else "HEAD")

    def op_reset(self) -> None:
        if self._has_parent():
            git(self.repo, "reset", "-q", "--hard", "HEAD~1")

    def op_reset_to_loaded(self) -> None:
        git(self.repo, "reset", "-q", "--hard", self.loaded)

    def op_merge_ff(self) -> None:
        other = self.rng.choice(self._branches())
        git(self.repo, "merge", "-q", "--ff-only", other, check=False)

    def op_rebase(self) -> None:
        onto = self.rng.choice(self._branches())
        git(self.repo, "rebase", "-q", onto, check=False)
        if self._rebasing():  # a conflict: abort moves HEAD back, which we must see too
            git(self.repo, "rebase", "--abort")

    def op_fetch(self) -> None:
        self._edit_commit(self.upstream, "upstream")
        git(self.repo, "fetch", "-q", "origin")

    def op_tag(self) -> None:
        self.n += 1
        git(self.repo, "tag", "-a", f"v{self.n}", "-m", "tag")

    def op_branch_delete(self) -> None:
        current = git(self.repo, "branch", "--show-current")
        others = [b for b in self._branches() if b not in (current, "main") and not b.startswith("wt/")]
        if others:
            git(self.repo, "branch", "-D", self.rng.choice(others))

    def op_gc(self) -> None:
        git(self.repo, "gc", "-q", "--prune=now")

    def op_pack_refs(self) -> None:
        git(self.repo, "pack-refs", "--all")

    def op_stash(self) -> None:
        (self.repo / "a.txt").write_text("stashed\n")
        git(self.repo, "stash", "-q")
        git(self.repo, "stash", "pop", "-q")
        git(self.repo, "checkout", "-q", "--", "a.txt")

    def op_worktree(self) -> None:
        self.worktrees += 1
        path = self.root / f"wt{self.worktrees}"
        git(self.repo, "worktree", "add", "-q", "-b", f"wt/{self.worktrees}", str(path))
        self._edit_commit(path, "in worktree")

    def _has_parent(self) -> bool:
        return git(self.repo, "rev-parse", "-q", "--verify", "HEAD~1", check=False) != ""

    def _rebasing(self) -> bool:
        git_dir = self.repo / ".git"
        return (git_dir / "rebase-merge").exists() or (git_dir / "rebase-apply").exists()

    def operations(self) -> dict[str, Callable[[], None]]:
        return {name[3:]: getattr(self, name) for name in dir(self) if name.startswith("op_")}

    # -- the run ------------------------------------------------------------------------

    def run(self, ops: int) -> Result:
        result = Result()
        self.loaded = git(self.repo, "rev-parse", "HEAD")
        source = LocalSource(verify_interval=3600)  # events only: no periodic safety net
        events: queue.Queue[Event] = queue.Queue()
        guard = Guard.for_checkout(self.repo, source=source)
        guard.subscribe(events.put)
        operations = self.operations()
        names = sorted(operations)
        start = time.perf_counter()
        with guard:
            if not guard.wait_ready(10):
                raise RuntimeError("watcher never became ready")
            truth = self.loaded
            for _ in range(ops):
                name = self.rng.choice(names)
                operations[name]()
                result.operations += 1
                result.by_op[name] += 1
                new_truth = git(self.repo, "rev-parse", "HEAD")
                if new_truth != truth:
                    result.head_changes += 1
                    if not self._await(events, new_truth, result):
                        result.misses += 1
                        result.problems.append(f"miss after {name}: no event for {new_truth[:7]}")
                        guard.refresh()  # resync so one miss is counted once
                truth = new_truth
            self._await(events, None, result)  # drain what is left
            expected = Status.CURRENT if truth == self.loaded else Status.STALE
            if guard.status is not expected:
                result.misses += 1
                result.problems.append(f"final status {guard.status} but HEAD says {expected}")
        result.seconds = time.perf_counter() - start
        valid = set(git(self.repo, "reflog", "--format=%H", "HEAD").split()) | {self.loaded}
        for problem in self._audit(result.seen, valid):
            result.false_alarms += 1
            result.problems.append(problem)
        return result

    def _await(self, events: queue.Queue[Event], revision: str | None, result: Result) -> bool:
        deadline = time.monotonic() + DEADLINE
        while True:
            timeout = deadline - time.monotonic() if revision is not None else 0
            try:
                event = events.get(timeout=max(0.0, timeout)) if timeout > 0 else events.get_nowait()
            except queue.Empty:
                return revision is None
            result.seen.append(event)
            result.events += 1
            if revision is not None and event.current_revision == revision:
                return True

    def _audit(self, events: list[Event], valid: set[str]) -> list[str]:
        problems = []
        for event in events:
            expected = Status.CURRENT if event.current_revision == self.loaded else Status.STALE
            if event.current_revision not in valid or event.status is not expected:
                problems.append(
                    f"false alarm: {event.status} {event.current_revision} ({event.error or 'no error'})"
                )
        return problems


def run(ops: int, seed: int, workdir: Path | None = None) -> Result:
    """Run ``ops`` random operations with ``seed``; return the tallies."""
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        return Torture(Path(tmp), random.Random(seed)).run(ops)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=500)
    parser.add_argument("--seed", type=int, default=int(time.time()))
    parser.add_argument("--workdir", type=Path)
    args = parser.parse_args()
    result = run(args.ops, args.seed, args.workdir)
    print(f"seed:          {args.seed}")
    print(f"operations:    {result.operations} ({result.seconds:.1f} s)")
    print("  by kind:     " + ", ".join(f"{k} {v}" for k, v in sorted(result.by_op.items())))
    print(f"HEAD changes:  {result.head_changes}")
    print(f"events:        {result.events}")
    print(f"misses:        {result.misses}")
    print(f"false alarms:  {result.false_alarms}")
    for problem in result.problems[:20]:
        print(f"  {problem}")
    return 0 if result.misses == 0 and result.false_alarms == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
