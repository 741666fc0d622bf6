#!/usr/bin/env python3
"""Torture the watcher: random git operations on a real repository while a guard watches.

The guard's periodic re-verification is set to an hour, so only the watcher's events
can keep it right. Before and after each operation the truth is ``git rev-parse HEAD``;
every commit HEAD pointed at during the operation comes from the entries it added to
``git reflog HEAD`` (a rebase logs each intermediate HEAD).

- **miss**: HEAD's commit changed and no event named the new one within a deadline; or
  the events left the guard showing something other than the truth once the operation
  settled; or, after settling, ``guard.check()`` (the flag path) disagreed with the
  truth; or ``guard.check(strict=True)`` disagreed at all (C3, C8, C10, C12).
- **false alarm**: an event that is ``unreadable`` (no operation here makes HEAD
  unreadable, C4/C7), whose status disagrees with its own current vs loaded revision,
  or that names a commit HEAD never pointed at during the operation it arrived in (or,
  delivered late, the one before: counted as ``late``).
- **disorder**: events whose generations are not consecutive, or whose previous status
  is not the status of the event before (C12).

Intermediate states (a rebase's picks, a conflict's round trip) are legitimate and
counted as ``transient``. Nothing sleeps to synchronise: the run waits on the event
queue with deadlines.

With ``--checkouts K`` the operations are spread at random over K checkouts, all
watched at once by this process (one inotify instance, the shared workers), each
audited on its own: an event on a checkout no operation touched is a false alarm.

Usage: python scripts/torture.py [--ops 500] [--seed N] [--checkouts K] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import logging
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

from stalewatch import Event, Guard, LocalSource, StaleError, Status

_ENV = {
    **os.environ,
    "GIT_AUTHOR_NAME": "torture",
    "GIT_AUTHOR_EMAIL": "torture@stalewatch.invalid",
    "GIT_COMMITTER_NAME": "torture",
    "GIT_COMMITTER_EMAIL": "torture@stalewatch.invalid",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_EDITOR": "true",  # cherry-pick --continue, rebase: never open an editor
}
DEADLINE = 5.0  # seconds for an event to arrive before it counts as a miss
SETUP = -1  # the phase of events before the first operation


def git_run(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["git", *args], cwd=cwd, env=_ENV, capture_output=True, text=True, timeout=60, check=False
    )


def git(cwd: Path, *args: str, check: bool = True) -> str:
    done = git_run(cwd, *args)
    if check and done.returncode:
        raise RuntimeError(f"git {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout.strip()


@dataclass
class Step:
    """One operation and what HEAD did during it."""

    index: int
    name: str
    before: str
    after: str = ""
    window: set[str] = field(default_factory=set)  # every commit HEAD pointed at


@dataclass
class Result:
    operations: int = 0
    head_changes: int = 0  # operations that ended on another commit
    round_trips: int = 0  # operations that moved HEAD and brought it back
    misses: int = 0
    false_alarms: int = 0
    disorders: int = 0
    events: int = 0
    transient: int = 0  # valid events naming an intermediate commit, not the final one
    late: int = 0  # valid events that arrived during the operation after theirs
    untrusted: int = 0  # settled but the flag was not trusted (check() re-read instead)
    slowest: tuple[float, str] = (0.0, "")  # the longest wait for the events to settle
    watcher_errors: list[str] = field(default_factory=list)  # stalewatch's own ERROR logs
    flag_checks: int = 0
    strict_checks: int = 0
    by_op: Counter[str] = field(default_factory=Counter)
    skipped: Counter[str] = field(default_factory=Counter)  # could not apply: a no-op
    problems: list[str] = field(default_factory=list)
    seen: list[Event] = field(default_factory=list)
    phases: list[int] = field(default_factory=list)  # the operation each event arrived in
    steps: list[Step] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.misses == 0 and self.false_alarms == 0 and self.disorders == 0

    def merge(self, other: Result) -> None:
        """Add ``other``'s tallies (another checkout of a multi-checkout run)."""
        for name in ("operations", "head_changes", "round_trips", "misses", "false_alarms", "disorders"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for name in ("events", "transient", "late", "untrusted", "flag_checks", "strict_checks"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.slowest = max(self.slowest, other.slowest)
        self.by_op.update(other.by_op)
        self.skipped.update(other.skipped)
        self.problems.extend(other.problems)
        self.seen.extend(other.seen)
        self.phases.extend(other.phases)
        self.steps.extend(other.steps)


class _ErrorLog(logging.Handler):
    """Collects stalewatch's ERROR records: a watcher that fails over is not a miss, but is news."""

    def __init__(self, torture: Torture | _Current) -> None:
        super().__init__(logging.ERROR)
        self.torture = torture

    def emit(self, record: logging.LogRecord) -> None:
        reason = f": {record.exc_info[1]!r}" if record.exc_info else ""
        self.torture.result.watcher_errors.append(f"in {self.torture.where}: {record.getMessage()}{reason}")


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
        self.loaded = git(self.repo, "rev-parse", "HEAD")
        # gc --prune=now after a reflog expire would drop the loaded commit otherwise.
        git(self.repo, "update-ref", "refs/keep/loaded", self.loaded)
        self.worktrees = 0
        self.result = Result()
        self.events: queue.Queue[tuple[int, Event]] = queue.Queue()
        self.phase = SETUP
        self.where = "setup"
        self.shown: tuple[Status, str | None] = (Status.CURRENT, self.loaded)

    # -- operations: each leaves the checkout clean; False means "could not apply" -------

    def _edit_commit(self, cwd: Path, message: str) -> None:
        self.n += 1
        if self.rng.random() < 0.5:  # a file of its own: cherry-picks and rebases apply
            (cwd / f"f{self.n}.txt").write_text(f"{self.n}\n")
        else:  # the shared file: rebases and cherry-picks conflict, and abort
            with (cwd / "a.txt").open("a") as f:
                f.write(f"{self.n}\n")
        git(cwd, "add", "-A")
        git(cwd, "commit", "-q", "-m", message)

    def _branches(self) -> list[str]:
        names = git(self.repo, "for-each-ref", "--format=%(refname:short)", "refs/heads")
        return names.splitlines()

    def _current(self) -> str:
        return git(self.repo, "branch", "--show-current")  # "" when detached

    def _others(self) -> list[str]:
        """Branches other than the checked-out one, not checked out in a worktree."""
        current = self._current()
        return [b for b in self._branches() if b != current and not b.startswith("wt/")]

    def op_commit(self) -> None:
        self._edit_commit(self.repo, "commit")

    def op_amend(self) -> None:
        git(self.repo, "commit", "-q", "--amend", "--allow-empty", "-m", f"amend {self.rng.random()}")

    def op_switch_new(self) -> None:
        self.n += 1
        git(self.repo, "checkout", "-q", "-b", f"topic/{self.n}")

    def op_switch_nested(self) -> None:
        self.n += 1  # new directories under refs/heads each time
        git(self.repo, "checkout", "-q", "-b", f"a{self.n}/b/c")

    def op_switch(self) -> bool:
        branches = self._branches()  # all may be gone: update-ref -d while detached
        if not branches:
            return False
        # A branch checked out in another worktree is refused by git: that is fine.
        git(self.repo, "checkout", "-q", self.rng.choice(branches), check=False)
        return True

    def op_switch_packed(self) -> bool:
        others = self._others()
        if not others:
            return False
        git(self.repo, "pack-refs", "--all")
        target = self.rng.choice(others)
        if (self.repo / ".git" / "refs" / "heads" / target).exists():
            raise RuntimeError(f"pack-refs --all left refs/heads/{target} loose")
        git(self.repo, "switch", "-q", target)
        return True

    def op_switch_commit(self) -> bool:
        others = self._others()
        if not others:
            return False
        git(self.repo, "switch", "-q", self.rng.choice(others))
        self._edit_commit(self.repo, "commit after switch")
        return True

    def op_rename_branch(self) -> bool:
        current = self._current()
        if not current:
            return False  # detached: nothing checked out to rename
        self.n += 1
        git(self.repo, "branch", "-m", self.rng.choice([f"renamed/{self.n}", f"r{self.n}"]))
        if self.rng.random() < 0.5:
            git(self.repo, "branch", "-m", current)  # and back
        return True

    def op_detach(self) -> None:
        git(self.repo, "checkout", "-q", "--detach", "HEAD~1" if self._has_parent() else "HEAD")

    def op_reset(self) -> bool:
        if not self._has_parent():
            return False
        git(self.repo, "reset", "-q", "--hard", "HEAD~1")
        return True

    def op_reset_to_loaded(self) -> None:
        git(self.repo, "reset", "-q", "--hard", self.loaded)

    def op_merge_ff(self) -> bool:
        branches = self._branches()
        if not branches:
            return False
        git(self.repo, "merge", "-q", "--ff-only", self.rng.choice(branches), check=False)
        return True

    def op_rebase(self) -> bool:
        branches = self._branches()
        if not branches:
            return False
        # Replays every commit of HEAD not in `onto`: HEAD moves once per commit.
        git(self.repo, "rebase", "-q", self.rng.choice(branches), check=False)
        if self._rebasing():  # a conflict: abort moves HEAD back, which we must see too
            git(self.repo, "rebase", "--abort")
        return True

    def op_cherry_pick(self) -> bool:
        others = self._others()
        self.rng.shuffle(others)
        for other in others:
            commits = git(self.repo, "rev-list", f"HEAD..{other}").split()
            if commits:
                break
        else:
            return False
        done = git_run(self.repo, "cherry-pick", self.rng.choice(commits))
        if done.returncode:  # a conflict, or already applied (empty): leave it clean
            if (self.repo / ".git" / "CHERRY_PICK_HEAD").exists():
                git(self.repo, "cherry-pick", "--abort")
            else:
                raise RuntimeError(f"git cherry-pick: {done.stderr.strip()}")
        return True

    def op_fetch(self) -> None:
        self._edit_commit(self.upstream, "upstream")
        git(self.repo, "fetch", "-q", "origin")

    def op_tag(self) -> None:
        self.n += 1
        git(self.repo, "tag", "-a", f"v{self.n}", "-m", "tag")

    def op_branch_delete(self) -> bool:
        others = self._others()
        if not others:
            return False
        git(self.repo, "branch", "-D", self.rng.choice(others))
        return True

    def op_update_ref_delete(self) -> bool:
        others = self._others()
        if not others:
            return False
        git(self.repo, "update-ref", "-d", f"refs/heads/{self.rng.choice(others)}")
        return True

    def op_reflog_expire(self) -> None:
        git(self.repo, "reflog", "expire", "--expire=now", "--all")

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

    def _assert_clean(self, name: str) -> None:
        git_dir = self.repo / ".git"
        states = ("rebase-merge", "rebase-apply", "CHERRY_PICK_HEAD", "MERGE_HEAD")
        busy = [p for p in states if (git_dir / p).exists()]
        dirty = git(self.repo, "status", "--porcelain")
        if busy or dirty:
            raise RuntimeError(f"{name} left the checkout unclean: {busy} {dirty!r}")

    def operations(self) -> dict[str, Callable[[], bool | None]]:
        return {name[3:]: getattr(self, name) for name in dir(self) if name.startswith("op_")}

    # -- the run ------------------------------------------------------------------------

    def _reflog(self) -> list[str]:
        """HEAD's reflog, newest first (the commit each entry moved HEAD to)."""
        return git(self.repo, "reflog", "HEAD", "--format=%H").split()

    def record(self, event: Event) -> None:
        """The guard's subscriber: each event with the operation it arrived in."""
        self.events.put((self.phase, event))

    def run(self, ops: int) -> Result:
        source = LocalSource(verify_interval=3600)  # events only: no periodic safety net
        guard = Guard.for_checkout(self.repo, source=source)
        guard.subscribe(lambda event: self.events.put((self.phase, event)))
        errors = _ErrorLog(self)
        logging.getLogger("stalewatch").addHandler(errors)
        start = time.perf_counter()
        try:
            with guard:
                if not guard.wait_ready(10):
                    raise RuntimeError("watcher never became ready")
                self._loop(guard, ops)
        finally:
            logging.getLogger("stalewatch").removeHandler(errors)
        self.result.seconds = time.perf_counter() - start
        self._audit()
        return self.result

    def _loop(self, guard: Guard, ops: int) -> None:
        self.begin()
        for _ in range(ops):
            self.one(guard)
        self.end(guard)

    def begin(self) -> None:
        """Before the first operation (the guard is watching)."""
        self._operations = self.operations()
        self._names = sorted(self._operations)
        # Every kind once in a random order, then at random: short runs cover them all.
        self._order = self.rng.sample(self._names, len(self._names))
        self._truth = self.loaded
        self._reflog_seen = self._reflog()

    def one(self, guard: Guard) -> None:
        """One random operation, then wait for the events and check both barriers."""
        result = self.result
        index = len(result.steps)
        name = self._order[index] if index < len(self._order) else self.rng.choice(self._names)
        step = Step(index, name, self._truth)
        self.phase, self.where = index, f"#{index} {name}"
        if self._operations[name]() is False:
            result.skipped[name] += 1
        self._assert_clean(name)
        result.operations += 1
        result.by_op[name] += 1
        step.after = self._truth = git(self.repo, "rev-parse", "HEAD")
        new_reflog = self._reflog()
        added = new_reflog[: max(0, len(new_reflog) - len(self._reflog_seen))]  # none after an expire
        self._reflog_seen = new_reflog
        step.window = {step.before, step.after, *added}
        result.steps.append(step)
        if step.after != step.before:
            result.head_changes += 1
        elif len(step.window) > 1:
            result.round_trips += 1
        self._settle(guard, step)
        self._check(guard, step, strict=False)
        self._check(guard, step, strict=True)
        self._drain()

    def end(self, guard: Guard) -> None:
        """After the last operation: the guard must show the truth."""
        result = self.result
        self.phase, self.where = len(result.steps), "the end"
        self._drain()
        expected = _expected(self.loaded, self._truth)
        if guard.status is not expected:
            result.misses += 1
            result.problems.append(f"miss at the end: status {guard.status}, HEAD says {expected}")

    def _take(self, timeout: float) -> Event | None:
        try:
            phase, event = self.events.get(timeout=timeout) if timeout > 0 else self.events.get_nowait()
        except queue.Empty:
            return None
        self.result.seen.append(event)
        self.result.phases.append(phase)
        self.result.events += 1
        self.shown = (event.status, event.current_revision)
        return event

    def _drain(self) -> None:
        while self._take(0) is not None:
            pass

    def _settle(self, guard: Guard, step: Step) -> None:
        """Wait for the events to show the truth: a miss if they do not by the deadline."""
        truth = step.after
        shows = (_expected(self.loaded, truth), truth)
        named = truth == step.before  # HEAD moved: some event must name the new commit
        began = time.monotonic()
        deadline = began + DEADLINE
        while True:
            while (event := self._take(0)) is not None:
                named = named or event.current_revision == truth
            if named and self.shown == shows:
                waited = time.monotonic() - began
                if waited > self.result.slowest[0]:
                    self.result.slowest = (waited, f"#{step.index} {step.name}")
                return
            event = self._take(deadline - time.monotonic())
            if event is None:
                break
            named = named or event.current_revision == truth
        status, revision = self.shown
        self.result.misses += 1
        if not named:
            problem = f"no event for {truth[:7]}"
        else:
            problem = f"events left the guard {status} at {_short(revision)}, HEAD is {truth[:7]}"
        self.result.problems.append(f"miss after #{step.index} {step.name}: {problem}")
        guard.refresh()  # resync so one miss is counted once

    def _check(self, guard: Guard, step: Step, *, strict: bool) -> None:
        """The barrier must raise exactly when HEAD's commit differs from the loaded one."""
        if strict:
            self.result.strict_checks += 1
        else:
            self.result.flag_checks += 1
            if not guard.snapshot().trusted:
                self.result.untrusted += 1
        try:
            guard.check(strict=strict)
            raised = False
        except StaleError:
            raised = True
        if raised != (step.after != self.loaded):
            self.result.misses += 1
            path = "strict" if strict else "flag"
            verb = "raised" if raised else "passed"
            shown = _short(guard.snapshot().current_revision)
            self.result.problems.append(
                f"miss after #{step.index} {step.name}: check({path}) {verb}, HEAD is {step.after[:7]} "
                f"and loaded {self.loaded[:7]} (guard {guard.status} at {shown})"
            )
            if not strict:
                guard.refresh()

    def _audit(self) -> None:
        result = self.result
        setup = Step(SETUP, "setup", self.loaded, self.loaded, {self.loaded})
        last = result.steps[-1].after if result.steps else self.loaded
        end = Step(len(result.steps), "end", last, last, {last})  # the final drain
        steps = {s.index: s for s in (setup, *result.steps, end)}
        generation, status = 0, Status.CURRENT
        for phase, event in zip(result.phases, result.seen, strict=True):
            step, earlier = steps[phase], steps.get(phase - 1, setup)
            where = f"#{step.index} {step.name}"
            if event.generation != generation + 1 or event.previous_status is not status:
                result.disorders += 1
                result.problems.append(
                    f"disorder in {where}: generation {event.generation} after {generation}, "
                    f"previous {event.previous_status} after {status}"
                )
            generation, status = event.generation, event.status
            wrong = []
            if event.status is Status.UNREADABLE or event.current_revision is None:
                wrong.append("unreadable")  # no operation here makes HEAD unreadable
            else:
                if event.status is not _expected(self.loaded, event.current_revision):
                    wrong.append("status disagrees with its current vs loaded revision")
                if event.current_revision in step.window:
                    pass
                elif event.current_revision in earlier.window:
                    result.late += 1  # delivered after its operation ended: legitimate lag
                else:
                    wrong.append("HEAD never pointed there during the operation")
            if event.loaded_revision != self.loaded:
                wrong.append(f"loaded revision {_short(event.loaded_revision)}")
            if wrong:
                result.false_alarms += 1
                result.problems.append(
                    f"false alarm in {where}: {event.status} {_short(event.current_revision)} "
                    f"({'; '.join(wrong)}; {event.error or 'no error'})"
                )
            elif event.current_revision not in (step.after, earlier.after):
                result.transient += 1


def _expected(loaded: str, current: str | None) -> Status:
    return Status.CURRENT if current == loaded else Status.STALE


def _short(revision: str | None) -> str:
    return revision[:7] if revision else "None"


def run(ops: int, seed: int, workdir: Path | None = None) -> Result:
    """Run ``ops`` random operations with ``seed``; return the tallies."""
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        return Torture(Path(tmp), random.Random(seed)).run(ops)


def run_many(ops: int, seed: int, checkouts: int, workdir: Path | None = None) -> Result:
    """``ops`` random operations spread over ``checkouts`` checkouts, all watched at once
    by this process (one inotify instance, the shared workers); the tallies summed.

    Each checkout is audited on its own: an event on a checkout that no operation
    touched is a false alarm like any other, a missed one a miss.
    """
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        fleet = []
        for i in range(checkouts):
            root = Path(tmp) / f"t{i}"
            root.mkdir()
            fleet.append(Torture(root, random.Random(rng.random())))
        guards = []
        for torture in fleet:
            guard = Guard.for_checkout(torture.repo, source=LocalSource(verify_interval=3600))
            guard.subscribe(torture.record)
            guards.append(guard)
        current: list[Torture] = [fleet[0]]
        errors = _ErrorLog(_Current(current))
        logging.getLogger("stalewatch").addHandler(errors)
        start = time.perf_counter()
        try:
            for guard in guards:
                guard.start()
            for guard in guards:
                if not guard.wait_ready(10):
                    raise RuntimeError("a watcher never became ready")
            for torture in fleet:
                torture.begin()
            for _ in range(ops):
                k = rng.randrange(checkouts)
                current[0] = fleet[k]
                fleet[k].one(guards[k])
            for torture, guard in zip(fleet, guards, strict=True):
                torture.end(guard)
        finally:
            for guard in guards:
                guard.stop()
            logging.getLogger("stalewatch").removeHandler(errors)
        total = Result(seconds=time.perf_counter() - start)
        for torture in fleet:
            torture._audit()
            total.merge(torture.result)
        total.watcher_errors = errors.torture.result.watcher_errors
        return total


class _Current:
    """The torture an error log line belongs to (whichever operation runs now)."""

    def __init__(self, current: list[Torture]) -> None:
        self._current = current
        self.result = Result()

    @property
    def where(self) -> str:
        torture = self._current[0]
        return f"{torture.repo.parent.name} {torture.where}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=500)
    parser.add_argument("--seed", type=int, default=int(time.time()))
    parser.add_argument("--checkouts", type=int, default=1, help="checkouts watched at once")
    parser.add_argument("--workdir", type=Path)
    args = parser.parse_args()
    if args.checkouts > 1:
        result = run_many(args.ops, args.seed, args.checkouts, args.workdir)
    else:
        result = run(args.ops, args.seed, args.workdir)
    print(f"seed:          {args.seed}")
    print(f"checkouts:     {args.checkouts} (watched by this one process)")
    print(f"operations:    {result.operations} ({result.seconds:.1f} s)")
    print("  by kind:")
    for kind, count in sorted(result.by_op.items()):
        skipped = f" ({result.skipped[kind]} skipped)" if result.skipped[kind] else ""
        print(f"    {kind:<18} {count}{skipped}")
    print(f"HEAD changes:  {result.head_changes} (+{result.round_trips} round trips)")
    print(f"events:        {result.events} ({result.transient} transient, {result.late} late)")
    untrusted = f"{result.untrusted} untrusted"
    print(f"checks:        {result.flag_checks} flag ({untrusted}), {result.strict_checks} strict")
    wait, where = result.slowest
    print(f"slowest:       {wait * 1000:.2f} ms to settle after the audit's git calls ({where or '-'})")
    print(f"misses:        {result.misses}")
    print(f"false alarms:  {result.false_alarms}")
    print(f"disorders:     {result.disorders}")
    print(f"watcher errors: {len(result.watcher_errors)} (logged by stalewatch; not counted as misses)")
    for error in result.watcher_errors[:5]:
        print(f"  {error}")
    for problem in result.problems[:20]:
        print(f"  {problem}")
    if len(result.problems) > 20:
        print(f"  ... and {len(result.problems) - 20} more")
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
