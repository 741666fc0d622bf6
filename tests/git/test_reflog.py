"""stalewatch.git.reflog: what moved HEAD, from real git commands, and bad reflogs.

Each action kind is produced by the real git command, then explained from the reflog
the way the guard does it (``explain(dirs, chain, loaded, current)``). Malformed input
(missing, huge, truncated, a FIFO, arbitrary bytes) gives ``None`` or a cause, never an
exception or a hang.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import subprocess
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from stalewatch.core import cause as cause_module
from stalewatch.git import packed, reflog, reftable
from stalewatch.git.files import STORE
from stalewatch.git.refs import find_git_dirs
from tests.support.properties import budget
from tests.support.repos import Repo, make_repo

resolve_head = STORE.resolve_head  # the files store's

_ENV = {
    "GIT_AUTHOR_NAME": "alice",
    "GIT_AUTHOR_EMAIL": "alice@example.invalid",
    "GIT_COMMITTER_NAME": "alice",
    "GIT_COMMITTER_EMAIL": "alice@example.invalid",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_EDITOR": "true",
    "GIT_SEQUENCE_EDITOR": "true",
    "GIT_MERGE_AUTOEDIT": "no",
}


def git(repo: Repo | Path, *args: str, **env: str) -> str:
    path = repo if isinstance(repo, Path) else repo.path
    done = subprocess.run(
        ["git", *args],
        cwd=path,
        env={**os.environ, **_ENV, **env},
        capture_output=True,
        text=True,
        check=False,
        timeout=30,
    )
    assert done.returncode == 0, f"git {' '.join(args)}: {done.stderr}"
    return done.stdout.strip()


def commit(repo: Repo | Path, message: str) -> str:
    git(repo, "commit", "-q", "--allow-empty", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def cause_of(path: Path, loaded: str) -> reflog.Cause | None:
    """Explain HEAD now, as the guard does: resolve it, then read the reflogs."""
    dirs = find_git_dirs(path.resolve())
    assert dirs is not None
    chain: list[Path] = []
    current = resolve_head(dirs, chain)
    assert current is not None
    return reflog.explain(dirs, chain, loaded, current)


@pytest.fixture
def pair(tmp_path: Path) -> tuple[Repo, Repo]:
    """An upstream repository and a clone of it (the Agent checkout a user pulls into)."""
    upstream = make_repo(tmp_path / "upstream")
    git(tmp_path, "clone", "-q", str(upstream.path), "clone")
    return upstream, Repo(tmp_path / "clone")


def phrase(cause: reflog.Cause | None) -> str:
    assert cause is not None
    return cause.describe(now=cause.at)


# -- one test per action ------------------------------------------------------------------


def test_without_pread_the_cause_is_read_all_the_same(
    git_repo: Repo, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As on Windows, which has no os.pread: the reflog's tail is read by a seek and a read.
    loaded = git_repo.head()
    for n in range(2):
        commit(git_repo, f"c{n}")
    wanted = cause_of(git_repo.path, loaded)
    monkeypatch.delattr(os, "pread")
    monkeypatch.setattr(reflog, "_pread", packed.pread)
    assert cause_of(git_repo.path, loaded) == wanted
    assert wanted is not None and (wanted.relation, wanted.ahead) == ("ahead", 2)


def test_commits_are_counted_ahead(git_repo: Repo) -> None:
    loaded = git_repo.head()
    for n in range(3):
        commit(git_repo, f"c{n}")
    cause = cause_of(git_repo.path, loaded)
    assert cause is not None
    assert (cause.action, cause.detail, cause.relation, cause.ahead) == ("commit", None, "ahead", 3)
    assert cause.message == "commit: c2"
    assert (cause.name, cause.email) == ("alice", "alice@example.invalid")
    assert phrase(cause).startswith("commit (3 commits ahead) by alice at ")


def test_amend_of_the_loaded_commit_diverges(git_repo: Repo) -> None:
    loaded = git_repo.head()
    git(git_repo, "commit", "-q", "--amend", "--allow-empty", "-m", "amended")
    cause = cause_of(git_repo.path, loaded)
    assert cause is not None
    assert (cause.action, cause.relation, cause.ahead, cause.behind) == ("amend", "diverged", 1, 1)
    assert phrase(cause).startswith("amend (diverged: 1 commit ahead, 1 commit behind) by alice")


def test_amend_of_a_later_commit_stays_ahead(git_repo: Repo) -> None:
    loaded = git_repo.head()
    commit(git_repo, "one")
    git(git_repo, "commit", "-q", "--amend", "--allow-empty", "-m", "one, amended")
    cause = cause_of(git_repo.path, loaded)
    assert cause is not None
    assert (cause.action, cause.relation, cause.ahead) == ("amend", "ahead", 1)


def test_pull_fast_forward_is_ahead(pair: tuple[Repo, Repo]) -> None:
    upstream, clone = pair
    loaded = clone.head()
    for n in range(3):
        commit(upstream, f"upstream {n}")
    git(clone, "pull", "-q", "--ff-only")
    cause = cause_of(clone.path, loaded)
    assert cause is not None
    assert (cause.action, cause.detail, cause.relation) == ("pull", "fast-forward", "ahead")
    assert cause.ahead is None  # a fast-forward's length is not in the reflog
    assert phrase(cause).startswith("pull (fast-forward, some commits ahead) by alice at ")


def test_pull_with_a_merge_is_ahead(pair: tuple[Repo, Repo]) -> None:
    upstream, clone = pair
    commit(upstream, "upstream")
    loaded = commit(clone, "local")
    git(clone, "pull", "-q", "--no-rebase", "--no-edit")
    cause = cause_of(clone.path, loaded)
    assert cause is not None
    assert (cause.action, cause.detail, cause.relation) == ("pull", "merge", "ahead")


def test_pull_with_rebase(pair: tuple[Repo, Repo]) -> None:
    upstream, clone = pair
    commit(upstream, "upstream")
    loaded = commit(clone, "local")
    git(clone, "pull", "-q", "--rebase")
    cause = cause_of(clone.path, loaded)
    assert cause is not None
    assert cause.action == "pull"
    assert cause.detail == "rebase finish"
    assert cause.relation == "unknown"  # onto a commit the reflog never related to ours
    assert "ahead/behind unknown" in phrase(cause)


def test_merge_fast_forward_and_merge_commit(git_repo: Repo) -> None:
    loaded = git_repo.head()
    git(git_repo, "checkout", "-q", "-b", "feature")
    commit(git_repo, "on feature")
    git(git_repo, "checkout", "-q", "main")
    git(git_repo, "merge", "-q", "feature")
    cause = cause_of(git_repo.path, loaded)
    assert cause is not None
    assert (cause.action, cause.detail, cause.relation) == ("merge", "fast-forward", "ahead")

    git(git_repo, "checkout", "-q", "-b", "other", loaded)
    commit(git_repo, "on other")
    git(git_repo, "checkout", "-q", "main")
    git(git_repo, "merge", "-q", "--no-ff", "--no-edit", "other")
    cause = cause_of(git_repo.path, loaded)
    assert cause is not None
    assert (cause.action, cause.detail, cause.relation) == ("merge", "merge", "ahead")


def test_checkout_of_another_branch_relates_through_its_commits(git_repo: Repo) -> None:
    loaded = git_repo.head()
    git(git_repo, "checkout", "-q", "-b", "feature")
    commit(git_repo, "f1")
    commit(git_repo, "f2")
    git(git_repo, "checkout", "-q", "main")
    git(git_repo, "checkout", "-q", "feature")
    cause = cause_of(git_repo.path, loaded)
    assert cause is not None
    assert (cause.action, cause.detail) == ("checkout", "to feature")
    assert (cause.relation, cause.ahead) == ("ahead", 2)  # learnt from the commits before


def test_switch_and_detached_checkout(git_repo: Repo) -> None:
    loaded = git_repo.head()
    git(git_repo, "branch", "side")
    git(git_repo, "switch", "-q", "side")
    commit(git_repo, "side")
    detached = commit(git_repo, "more")
    git(git_repo, "switch", "-q", "main")
    git(git_repo, "checkout", "-q", "--detach", detached)
    cause = cause_of(git_repo.path, loaded)
    assert cause is not None
    assert cause.action == "checkout"
    assert (cause.relation, cause.ahead) == ("ahead", 2)


@pytest.mark.parametrize(("target", "behind"), [("HEAD~1", 1), ("HEAD^^", 2), ("HEAD~3", 3)])
def test_reset_back_is_behind(git_repo: Repo, target: str, behind: int) -> None:
    for n in range(3):
        commit(git_repo, f"c{n}")
    loaded = git_repo.head()
    git(git_repo, "reset", "-q", "--hard", target)
    cause = cause_of(git_repo.path, loaded)
    assert cause is not None
    assert (cause.action, cause.detail, cause.relation, cause.behind) == ("reset", target, "behind", behind)
    assert phrase(cause).startswith(f"reset ({target}, {behind} commit{'s' if behind > 1 else ''} behind)")


def test_reset_to_a_commit_the_chain_knows(git_repo: Repo) -> None:
    loaded = git_repo.head()
    first = commit(git_repo, "one")
    commit(git_repo, "two")
    git(git_repo, "reset", "-q", "--hard", first)
    cause = cause_of(git_repo.path, loaded)
    assert cause is not None
    assert (cause.action, cause.relation, cause.ahead) == ("reset", "ahead", 1)


def test_reset_after_commits_can_end_behind(git_repo: Repo) -> None:
    commit(git_repo, "one")
    loaded = git_repo.head()
    commit(git_repo, "two")
    git(git_repo, "reset", "-q", "--hard", "HEAD~2")
    cause = cause_of(git_repo.path, loaded)
    assert cause is not None
    assert (cause.relation, cause.behind) == ("behind", 1)


def test_rebase_onto_a_moved_branch(git_repo: Repo) -> None:
    base = git_repo.head()
    git(git_repo, "checkout", "-q", "-b", "feature")
    loaded = commit(git_repo, "feature work")
    git(git_repo, "checkout", "-q", "main")
    commit(git_repo, "main moves")
    git(git_repo, "checkout", "-q", "feature")
    git(git_repo, "rebase", "-q", "main")
    cause = cause_of(git_repo.path, loaded)
    assert cause is not None
    assert (cause.action, cause.detail) == ("rebase", "finish")
    assert cause.relation == "diverged"  # a child of main's new commit, a child of base
    assert base != loaded


def test_interactive_rebase_with_a_fixup_is_composed(git_repo: Repo) -> None:
    loaded = git_repo.head()
    commit(git_repo, "one")
    commit(git_repo, "fixup! one")
    git(git_repo, "rebase", "-q", "-i", "--autosquash", loaded)
    cause = cause_of(git_repo.path, loaded)
    assert cause is not None
    assert cause.action == "rebase"
    assert (cause.relation, cause.ahead) == ("ahead", 1)


def test_cherry_pick_and_revert(git_repo: Repo) -> None:
    loaded = git_repo.head()
    git(git_repo, "checkout", "-q", "-b", "feature")
    git_repo.commit("picked", name="picked.py")
    picked = git_repo.head()
    git(git_repo, "checkout", "-q", "main")
    git(git_repo, "cherry-pick", picked)
    cause = cause_of(git_repo.path, loaded)
    assert cause is not None
    assert (cause.action, cause.relation, cause.ahead) == ("cherry-pick", "ahead", 1)

    git(git_repo, "revert", "--no-edit", "HEAD")
    cause = cause_of(git_repo.path, loaded)
    assert cause is not None
    assert (cause.action, cause.relation, cause.ahead) == ("revert", "ahead", 2)


def test_a_custom_reflog_action_and_an_update_without_message(git_repo: Repo) -> None:
    loaded = git_repo.head()
    target = commit(git_repo, "two")
    git(git_repo, "reset", "-q", "--hard", loaded)
    git(git_repo, "reset", "-q", "--hard", target, GIT_REFLOG_ACTION="hermes update")
    cause = cause_of(git_repo.path, loaded)
    assert cause is not None
    assert (cause.action, cause.relation, cause.ahead) == ("hermes update", "ahead", 1)

    git(git_repo, "update-ref", "refs/heads/main", loaded)
    git(git_repo, "update-ref", "refs/heads/main", target)
    cause = cause_of(git_repo.path, loaded)
    assert cause is not None
    assert (cause.action, cause.message, cause.relation) == ("other", "", "ahead")


def test_a_linked_worktree_reads_its_own_head_log(git_repo: Repo, tmp_path: Path) -> None:
    git(git_repo, "worktree", "add", "-q", "-b", "wt", str(tmp_path / "wt"))
    loaded = git(tmp_path / "wt", "rev-parse", "HEAD")
    commit(tmp_path / "wt", "in the worktree")
    cause = cause_of(tmp_path / "wt", loaded)
    assert cause is not None
    assert (cause.action, cause.relation, cause.ahead) == ("commit", "ahead", 1)
    assert (tmp_path / "wt" / ".git").is_file()  # its HEAD log lives in .git/worktrees/wt


# -- reflogs that are missing, partial, huge, truncated or odd ---------------------------


def test_missing_reflogs_give_no_cause(git_repo: Repo) -> None:
    loaded = git_repo.head()
    commit(git_repo, "two")
    (git_repo.path / ".git" / "logs" / "HEAD").unlink()
    cause = cause_of(git_repo.path, loaded)  # the branch's own log still says
    assert cause is not None
    assert (cause.action, cause.relation) == ("commit", "ahead")
    (git_repo.path / ".git" / "logs" / "refs" / "heads" / "main").unlink()
    assert cause_of(git_repo.path, loaded) is None


def test_reflogs_switched_off_give_no_cause(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r", initial=False)
    git(repo, "config", "core.logAllRefUpdates", "false")
    loaded = commit(repo, "one")
    commit(repo, "two")
    assert not (repo.path / ".git" / "logs").exists()
    assert cause_of(repo.path, loaded) is None


def test_a_huge_reflog_is_read_from_its_end_only(git_repo: Repo) -> None:
    loaded = git_repo.head()
    new = commit(git_repo, "two")
    log = git_repo.path / ".git" / "logs" / "HEAD"
    tail = log.read_bytes()
    with log.open("r+b") as f:  # 64 GiB of hole before the real entries: reading it all would never end
        f.truncate(0)
        f.seek(64 << 30)
        f.write(b"\n" + tail)
    assert log.stat().st_size > 64 << 30
    tracemalloc.start()
    try:
        cause = cause_of(git_repo.path, loaded)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 << 20  # bounded memory: the bounded tail, never the file
    assert cause is not None
    assert (cause.action, cause.relation, cause.ahead) == ("commit", "ahead", 1)
    assert new == git_repo.head()


def test_the_loaded_commit_far_back_is_found_within_the_bound(git_repo: Repo) -> None:
    loaded = git_repo.head()
    new = commit(git_repo, "two")
    logs = [git_repo.path / ".git/logs/HEAD", git_repo.path / ".git/logs/refs/heads/main"]
    lines = [log.read_bytes().splitlines(keepends=True) for log in logs]
    filler = lines[0][-1].replace(b"commit: two", b"checkout: moving from main to main")
    filler = filler.replace(loaded.encode(), new.encode())

    def pad(size: int) -> None:
        for log, original in zip(logs, lines, strict=True):
            log.write_bytes(b"".join(original) + filler * (size // len(filler) + 1))

    pad(40 * 1024)  # beyond the first read, within the bound
    cause = cause_of(git_repo.path, loaded)
    assert cause is not None
    assert (cause.action, cause.relation, cause.ahead) == ("checkout", "ahead", 1)
    pad(300 * 1024)
    cause = cause_of(git_repo.path, loaded)  # past the bound: the action, not the relation
    assert cause is not None
    assert (cause.action, cause.relation) == ("checkout", "unknown")
    logs[1].write_bytes(b"".join(lines[1]))  # the branch's log reaches the loaded commit
    cause = cause_of(git_repo.path, loaded)
    assert cause is not None
    assert (cause.action, cause.relation, cause.ahead) == ("checkout", "ahead", 1)


def test_a_line_truncated_mid_way_counts_for_nothing(git_repo: Repo) -> None:
    loaded = git_repo.head()
    commit(git_repo, "two")
    for log in (git_repo.path / ".git/logs/HEAD", git_repo.path / ".git/logs/refs/heads/main"):
        data = log.read_bytes()
        log.write_bytes(data[:-10])  # the newest entry loses its end (and its newline)
    assert cause_of(git_repo.path, loaded) is None


def test_a_fifo_where_the_log_should_be_never_hangs(git_repo: Repo) -> None:
    loaded = git_repo.head()
    commit(git_repo, "two")
    for log in (git_repo.path / ".git/logs/HEAD", git_repo.path / ".git/logs/refs/heads/main"):
        log.unlink()
        os.mkfifo(log)
    assert cause_of(git_repo.path, loaded) is None


def test_odd_lines_are_skipped() -> None:
    a, b = "a" * 40, "b" * 40
    good = f"{a} {b} Bob <bob@x> 1700000000 +0100\tcommit: fine".encode()
    data = b"\n".join(
        [
            b"garbage",
            f"{a} {b} no email 1700000000 +0100\tcommit: x".encode(),
            f"{a} {'c' * 64} Bob <b> 1700000000 +0100\tmixed lengths".encode(),
            f"{a} {b} Bob <b> soon +0100\tcommit: x".encode(),
            f"{a} {b} Bob <b> 1700000000 0100\tcommit: x".encode(),
            good,
            b"",
        ]
    )
    entries = reflog.parse_log(data, whole=True)
    assert [e.message for e in entries] == ["commit: fine"]
    cause = reflog.explain_entries(entries, a, b)
    assert cause is not None
    assert cause.describe(now=1700000000) == "commit (1 commit ahead) by Bob at 23:13"
    assert cause.describe(now=1800000000) == "commit (1 commit ahead) by Bob at 2023-11-14 23:13"


def test_control_characters_and_nul_never_reach_the_cause() -> None:
    a, b = "a" * 40, "b" * 40
    line = f"{a} {b} Ev\x1b[31mil <e\x00v@x> 1700000000 +0000\tcommit: \x07bell\r".encode()
    entry = reflog.parse_entry(line)
    assert entry is not None
    for text in (entry.name, entry.email, entry.message):
        assert not any(ord(c) < 32 or 127 <= ord(c) < 160 for c in text)


# -- properties over any input --------------------------------------------------------------

_OIDS = [c * 40 for c in "0123abcd"]
_MESSAGES = [
    "commit: x",
    "commit (amend): x",
    "commit (merge): x",
    "commit (initial): x",
    "pull: Fast-forward",
    "pull --rebase (pick): x",
    "merge b: Merge made by the 'ort' strategy.",
    "reset: moving to HEAD~2",
    "reset: moving to HEAD^^^",
    "rebase (fixup): x",
    "checkout: moving from a to b",
    "cherry-pick: x",
    "",
]


@st.composite
def reflog_lines(draw: st.DrawFn) -> bytes:
    """Mostly well-formed entries over a few commits, mixed with arbitrary bytes."""
    parts = []
    for _ in range(draw(st.integers(0, 30))):
        kind = draw(st.sampled_from(["entry", "entry", "torn", "bytes"]))
        if kind == "entry":
            old, new = draw(st.sampled_from(_OIDS)), draw(st.sampled_from(_OIDS))
            msg = draw(st.one_of(st.sampled_from(_MESSAGES), st.text(max_size=40)))
            tz = draw(st.sampled_from(["+0000", "-0930", "+9999", "-0000"]))
            when = draw(st.integers(0, 10**12 - 1))
            parts.append(f"{old} {new} N <e> {when} {tz}\t{msg}".encode("utf-8", "surrogatepass"))
        elif kind == "torn":  # its ids where an entry's are, the rest broken
            old, new = draw(st.sampled_from(_OIDS)), draw(st.sampled_from(_OIDS))
            parts.append(f"{old} {new} ".encode() + draw(st.binary(max_size=20)))
        else:
            parts.append(draw(st.binary(max_size=120)))
    return b"\n".join(parts) + draw(st.sampled_from([b"", b"\n"]))


@budget(500)
@given(data=st.one_of(st.binary(max_size=2000), reflog_lines()), whole=st.booleans())
def test_any_bytes_give_a_cause_or_none(data: bytes, whole: bool) -> None:
    entries = reflog.parse_log(data, whole=whole)
    assert len(entries) <= data.count(b"\n")
    for loaded in (_OIDS[1], _OIDS[2], None):
        for current in _OIDS[1:4]:
            cause = reflog.explain_entries(entries, loaded, current)
            if cause is None:
                continue
            assert cause.relation in ("ahead", "behind", "diverged", "same", "unknown")
            assert all(n is None or n >= 0 for n in (cause.ahead, cause.behind))
            if cause.relation == "same":
                assert loaded == current  # only the loaded commit itself is "same"
            summary = cause.to_dict()["summary"]
            assert isinstance(summary, str)
            assert "\x00" not in summary
            assert len(cause.message) <= 200


def _entry(old: str, new: str, message: str = "commit: x") -> str:
    return f"{old} {new} N <e> 1700000000 +0000\t{message}\n"


@budget(300)
@given(data=st.one_of(st.binary(max_size=2000), reflog_lines()), whole=st.booleans())
@example(  # a torn newest line naming the current commit: the one before it is the cause
    data=(_entry(_OIDS[3], _OIDS[2]) + _entry(_OIDS[2], _OIDS[1]) + f"{_OIDS[1]} {_OIDS[2]} torn\n").encode(),
    whole=True,
)
def test_parsing_only_the_relevant_lines_gives_the_same_cause(data: bytes, whole: bool) -> None:
    for loaded in (_OIDS[1], _OIDS[2], None):
        for current in _OIDS[1:4]:
            everything = reflog.explain_entries(reflog.parse_log(data, whole=whole), loaded, current)
            relevant = reflog.relevant_entries(data, whole=whole, loaded=loaded, current=current)
            assert reflog.explain_entries(relevant, loaded, current) == everything


@budget(50)
@given(unit=st.binary(min_size=1, max_size=8))
def test_pathological_repetition_is_linear(unit: bytes) -> None:
    data = unit * (256 * 1024 // len(unit))  # as large as one read can ever be
    entries = reflog.parse_log(data, whole=False)
    reflog.explain_entries(entries, _OIDS[1], _OIDS[2])


# -- soundness: derived relations against a model of real histories ---------------------------


class History:
    """A tree of commits (one parent each) and the reflog git would write for HEAD."""

    def __init__(self) -> None:
        self.parent: dict[str, str | None] = {}
        self.lines: list[bytes] = []
        self.head = self._new(None)
        self._log("0" * 40, self.head, "commit (initial): root")

    def _new(self, parent: str | None) -> str:
        commit = f"{len(self.parent) + 1:040x}"
        self.parent[commit] = parent
        return commit

    def _log(self, old: str, new: str, message: str) -> None:
        self.lines.append(f"{old} {new} A <a@x> 1700000000 +0000\t{message}".encode())

    def move(self, new: str, message: str) -> None:
        self._log(self.head, new, message)
        self.head = new

    def ancestors(self, commit: str) -> list[str]:
        chain: list[str] = []
        node: str | None = commit
        while node is not None:
            chain.append(node)
            node = self.parent[node]
        return chain

    def truth(self, loaded: str, current: str) -> tuple[str, int, int]:
        ahead = len(set(self.ancestors(current)) - set(self.ancestors(loaded)))
        behind = len(set(self.ancestors(loaded)) - set(self.ancestors(current)))
        kind = {(False, False): "same", (True, False): "ahead", (False, True): "behind"}.get(
            (ahead > 0, behind > 0), "diverged"
        )
        return kind, ahead, behind


@budget(500)
@given(
    ops=st.lists(
        st.tuples(st.sampled_from(["commit", "amend", "reset", "checkout", "ff"]), st.integers(0, 50))
    )
)
def test_derived_relations_are_true_or_unknown(ops: list[tuple[str, int]]) -> None:
    history = History()
    heads = [history.head]
    for op, n in ops:
        commits = sorted(history.parent)
        if op == "commit":
            history.move(history._new(history.head), f"commit: c{n}")
        elif op == "amend":
            history.move(history._new(history.parent[history.head]), f"commit (amend): a{n}")
        elif op == "reset":
            chain = history.ancestors(history.head)
            k = n % len(chain)
            if k:
                history.move(chain[k], f"reset: moving to HEAD~{k}")
        elif op == "checkout":
            history.move(commits[n % len(commits)], "checkout: moving from main to x")
        else:
            later = [c for c in commits if history.head in history.ancestors(c) and c != history.head]
            if later:
                history.move(later[n % len(later)], "pull: Fast-forward")
        heads.append(history.head)
    entries = reflog.parse_log(b"\n".join(history.lines) + b"\n", whole=True)
    for loaded in set(heads):
        cause = reflog.explain_entries(entries, loaded, history.head)
        assert cause is not None
        if cause.relation == "unknown":
            continue
        kind, ahead, behind = history.truth(loaded, history.head)
        assert cause.relation == kind, (loaded, history.head)
        if cause.ahead is not None:
            assert cause.ahead == ahead
        if cause.behind is not None:
            assert cause.behind == behind


@budget(300)
@given(
    ops=st.lists(st.tuples(st.sampled_from(["commit", "amend", "reset"]), st.integers(0, 50)), max_size=30)
)
def test_commits_amends_and_resets_are_always_related_exactly(ops: list[tuple[str, int]]) -> None:
    # Each of these moves says exactly how its new commit relates to its old one: composed
    # from any commit HEAD was at, the relation is never unknown, and it is the truth.
    history = History()
    heads = [history.head]
    for op, n in ops:
        if op == "commit":
            history.move(history._new(history.head), f"commit: c{n}")
        elif op == "amend" and history.parent[history.head] is not None:
            history.move(history._new(history.parent[history.head]), f"commit (amend): a{n}")
        elif op == "reset":
            chain = history.ancestors(history.head)
            k = n % len(chain)
            if k:
                history.move(chain[k], f"reset: moving to HEAD~{k}")
        heads.append(history.head)
    entries = reflog.parse_log(b"\n".join(history.lines) + b"\n", whole=True)
    for loaded in set(heads):
        cause = reflog.explain_entries(entries, loaded, history.head)
        assert cause is not None
        kind, ahead, behind = history.truth(loaded, history.head)
        expected = (
            kind,
            ahead if kind in ("ahead", "diverged") else None,
            behind if kind in ("behind", "diverged") else None,
        )
        assert (cause.relation, cause.ahead, cause.behind) == expected, (loaded, history.head)


# -- what a cause says ----------------------------------------------------------------------


def a_cause(
    relation: str, ahead: int | None = None, behind: int | None = None, **fields: object
) -> reflog.Cause:
    values: dict[str, object] = {
        "action": "commit",
        "detail": None,
        "message": "commit: x",
        "name": "alice",
        "email": "a@x",
        "at": 1700000000.0,
        "tz": "+0000",
        "relation": relation,
        "ahead": ahead,
        "behind": behind,
    }
    return reflog.Cause(**{**values, **fields})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("cause", "phrase"),
    [
        (a_cause("same"), "commit (back to the loaded commit) by alice at 22:13"),
        (a_cause("unknown"), "commit (ahead/behind unknown) by alice at 22:13"),
        (a_cause("diverged", 1, 1), "commit (diverged: 1 commit ahead, 1 commit behind) by alice at 22:13"),
        (a_cause("diverged", 2, None), "commit (diverged: 2 commits ahead) by alice at 22:13"),
        (a_cause("diverged", None, 3), "commit (diverged: 3 commits behind) by alice at 22:13"),
        (a_cause("diverged"), "commit (diverged) by alice at 22:13"),
        (a_cause("ahead", 1, 0), "commit (1 commit ahead) by alice at 22:13"),
        (a_cause("ahead", 3), "commit (3 commits ahead) by alice at 22:13"),
        (a_cause("ahead"), "commit (some commits ahead) by alice at 22:13"),
        (a_cause("behind", None, 1), "commit (1 commit behind) by alice at 22:13"),
        (a_cause("behind", None, 2), "commit (2 commits behind) by alice at 22:13"),
        (a_cause("behind"), "commit (some commits behind) by alice at 22:13"),
        (
            a_cause("ahead", 1, detail="fast-forward"),
            "commit (fast-forward, 1 commit ahead) by alice at 22:13",
        ),
        (a_cause("same", name="", email=""), "commit (back to the loaded commit) at 22:13"),
        (a_cause("same", name="", email="e@x"), "commit (back to the loaded commit) by e@x at 22:13"),
        (a_cause("same", tz="-0530"), "commit (back to the loaded commit) by alice at 16:43"),
        (a_cause("same", tz="+0130"), "commit (back to the loaded commit) by alice at 23:43"),
        (a_cause("same", tz="+1400"), "commit (back to the loaded commit) by alice at 12:13"),
        (a_cause("same", at=1699990000.0), "commit (back to the loaded commit) by alice at 19:26"),
        (a_cause("same", at=1600000000.0), "commit (back to the loaded commit) by alice at 2020-09-13 12:26"),
        (a_cause("same", tz="x"), "commit (back to the loaded commit) by alice at @1700000000"),
        (a_cause("same", tz="+99"), "commit (back to the loaded commit) by alice at @1700000000"),
        (a_cause("same", at=1e20), "commit (back to the loaded commit) by alice at @100000000000000000000"),
    ],
)
def test_a_cause_says_what_moved_head_in_one_phrase(cause: reflog.Cause, phrase: str) -> None:
    assert cause.describe(now=1700000000) == phrase


def test_a_cause_is_dated_in_its_own_offset_relative_to_today_there(monkeypatch: pytest.MonkeyPatch) -> None:
    cause = a_cause("same", tz="-0500", at=1700000000.0)  # 17:13 on 2023-11-14 at -05:00
    assert cause.describe(now=1700000000 + 6 * 3600) == "commit (back to the loaded commit) by alice at 17:13"
    assert cause.describe(now=1700000000 + 7 * 3600) == (  # already the 15th at -05:00
        "commit (back to the loaded commit) by alice at 2023-11-14 17:13"
    )
    monkeypatch.setattr(cause_module.time, "time", lambda: 1700000000.0)
    assert cause.describe() == "commit (back to the loaded commit) by alice at 17:13"


def test_a_cause_as_a_dict_carries_every_field_and_its_phrase() -> None:
    cause = a_cause("diverged", 2, 1, detail="merge", tz="+0200")
    assert cause.to_dict() == {
        "action": "commit",
        "detail": "merge",
        "message": "commit: x",
        "name": "alice",
        "email": "a@x",
        "at": 1700000000.0,
        "tz": "+0200",
        "relation": "diverged",
        "ahead": 2,
        "behind": 1,
        "summary": cause.describe(),
    }


def test_a_reflog_line_is_parsed_into_its_fields() -> None:
    a, b = "a" * 40, "b" * 40
    entry = reflog.parse_entry(f"{a} {b} Alice Smith <alice@x> 1700000000 -0130\tcommit: fix: a bug".encode())
    assert entry == reflog.Entry(a, b, "Alice Smith", "alice@x", 1700000000, "-0130", "commit: fix: a bug")
    entry = reflog.parse_entry(f"{a} {b} <> 0 +0000\t".encode())
    assert entry == reflog.Entry(a, b, "", "", 0, "+0000", "")
    entry = reflog.parse_entry(f"{a} {b} A <x> <a@x> 1700000000 +0000\tno tab\there".encode())
    assert entry == reflog.Entry(a, b, "A <x>", "a@x", 1700000000, "+0000", "no tab\ufffdhere")


@pytest.mark.parametrize(
    "line",
    [
        "{a} {b}",
        "{a} {b} A <a@x> 1700000000\tx",
        "{a} {b} A <a@x> 1700000000 +0000 extra\tx",
        "{a} {b} A a@x> 1700000000 +0000\tx",
        "{a} {b} A <a@x 1700000000 +0000\tx",
        "{a} {b} A <a@x> 1700000000000 +0000\tx",
        "{a} {b} A <a@x> -1 +0000\tx",
        "{a} {b} A <a@x> 1700000000 +000\tx",
        "{a} {b} A <a@x> 1700000000 ~0000\tx",
        "{a}x {b} A <a@x> 1700000000 +0000\tx",
        "{a} {B} A <a@x> 1700000000 +0000\tx",
        "{a}{b} A <a@x> 1700000000 +0000\tx",
        "{a}  {b} A <a@x> 1700000000 +0000\tx",  # git reads one space between fields, as here
        "{a}\v{b} A <a@x> 1700000000 +0000\tx",
        "{e} {b} A <a@x> 1700000000 +0000\tx",
        "{a} {e} A <a@x> 1700000000 +0000\tx",
    ],
)
def test_a_line_that_is_not_a_reflog_entry_is_none(line: str) -> None:
    text = line.format(a="a" * 40, b="b" * 40, B="B" * 40, e="é" * 20)
    assert reflog.parse_entry(text.encode()) is None


def test_names_and_messages_are_bounded_in_characters() -> None:
    a, b = "a" * 40, "b" * 40
    name, email, message = "n" * 150, "e" * 150, "é" * 300
    entry = reflog.parse_entry(f"{a} {b} {name} <{email}> 1700000000 +0000\t{message}".encode())
    assert entry is not None
    assert (entry.name, entry.email, entry.message) == ("n" * 100, "e" * 100, "é" * 200)
    entry = reflog.parse_entry(f"{a} {b} A <a@x> 1700000000 +0000\t  {'x' * 199}  ".encode())
    assert entry is not None and entry.message == "x" * 198  # cut to 200, then trimmed


def test_a_bug_in_reading_the_reflog_costs_the_cause_only(
    git_repo: Repo, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # The last guard of a diagnostic: whatever explain() raises, the watcher goes on.
    loaded = git_repo.head()
    commit(git_repo, "two")
    dirs = find_git_dirs(git_repo.path.resolve())
    assert dirs is not None
    chain: list[Path] = []
    current = resolve_head(dirs, chain)
    assert current is not None
    assert reflog.explain_move(dirs, chain, loaded, current) == reflog.explain(dirs, chain, loaded, current)

    def broken(*args: object) -> reflog.Cause | None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(reflog, "explain", broken)
    with caplog.at_level(logging.ERROR, logger="stalewatch.git.reflog"):
        assert reflog.explain_move(dirs, chain, loaded, current) is None
    [record] = caplog.records
    assert record.getMessage() == f"stalewatch: could not read the reflog of {dirs.worktree}; no cause"
    assert record.exc_info is not None and str(record.exc_info[1]) == "a bug"


def test_the_relevant_entries_run_from_the_first_naming_the_loaded_commit_to_the_move() -> None:
    a, b, c, d = (x * 40 for x in "abcd")
    lines = [
        _entry(d, a),
        _entry(a, b),
        _entry(b, c, "commit: y"),
        _entry(c, d),
        _entry(d, b, "reset: moving to b"),
    ]
    data = "".join(lines).encode()
    entries = reflog.relevant_entries(data, whole=True, loaded=b, current=c)
    assert [(e.old, e.new) for e in entries] == [(a, b), (b, c)]  # nothing before b, nothing after c
    assert [(e.old, e.new) for e in reflog.relevant_entries(data, whole=False, loaded=a, current=b)] == [
        (a, b),
        (b, c),
        (c, d),
        (d, b),
    ]  # not whole: the first line may be torn, and is never read
    assert reflog.relevant_entries(data, whole=True, loaded=None, current=b) == [
        reflog.parse_entry(lines[4][:-1].encode())
    ]
    assert reflog.relevant_entries(data, whole=True, loaded=a, current="e" * 40) == []


def test_a_fresh_clones_only_entry_is_its_cause(pair: tuple[Repo, Repo]) -> None:
    _, clone = pair
    log = clone.path / ".git/logs/HEAD"
    assert len(log.read_bytes().splitlines()) == 1
    cause = cause_of(clone.path, "f" * 40)
    assert cause is not None
    assert (cause.action, cause.relation) == ("clone", "unknown")


class Reads:
    """Counts the tails read (still reading them)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.limits: list[int] = []
        real = reflog._read_tail

        def counting(path: Path, limit: int) -> tuple[bytes, bool]:
            self.limits.append(limit)
            return real(path, limit)

        monkeypatch.setattr(reflog, "_read_tail", counting)


def test_a_log_is_read_once_when_its_first_tail_tells(
    git_repo: Repo, monkeypatch: pytest.MonkeyPatch
) -> None:
    loaded = git_repo.head()
    commit(git_repo, "two")
    reads = Reads(monkeypatch)
    cause = cause_of(git_repo.path, loaded)  # a small log: read whole at once
    assert cause is not None and cause.relation == "ahead"
    assert reads.limits == [16 * 1024]
    log = git_repo.path / ".git/logs/HEAD"
    log.write_bytes(b"x" * 40000 + b"\n" + log.read_bytes())  # larger than the first read
    reads.limits.clear()
    cause = cause_of(git_repo.path, loaded)
    assert cause is not None and cause.relation == "ahead"
    assert reads.limits == [16 * 1024]  # the relation is known from the newest 16 KiB
    reads.limits.clear()
    assert cause_of(git_repo.path, "f" * 40) is not None  # the loaded commit is in no log
    assert reads.limits == [16 * 1024, 256 * 1024, 16 * 1024]  # HEAD's log twice, the branch's whole


def test_the_branchs_log_can_tell_how_far_behind(git_repo: Repo) -> None:
    commit(git_repo, "one")
    loaded = commit(git_repo, "two")
    git(git_repo, "reset", "-q", "--hard", "HEAD~2")
    # HEAD's log knows the move, not the loaded commit: the branch's log tells the rest.
    (git_repo.path / ".git/logs/HEAD").write_text(
        _entry("d" * 40, git_repo.head(), "reset: moving to HEAD~2")
    )
    cause = cause_of(git_repo.path, loaded)
    assert cause is not None
    assert (cause.action, cause.relation, cause.ahead, cause.behind) == ("reset", "behind", None, 2)


def test_a_cause_without_relation_stands_when_the_branch_has_no_log(git_repo: Repo) -> None:
    commit(git_repo, "one")
    (git_repo.path / ".git/logs/refs/heads/main").unlink()
    cause = cause_of(git_repo.path, "f" * 40)
    assert cause is not None
    assert (cause.action, cause.relation) == ("commit", "unknown")


def test_every_log_on_the_chain_is_asked_until_one_tells(git_repo: Repo) -> None:
    # HEAD -> refs/heads/alias -> refs/heads/main: HEAD's log, then main's, then alias's.
    loaded = git_repo.head()
    current = commit(git_repo, "two")
    git(git_repo, "symbolic-ref", "refs/heads/alias", "refs/heads/main")
    git(git_repo, "symbolic-ref", "HEAD", "refs/heads/alias")
    logs = git_repo.path / ".git/logs"
    told = _entry(loaded, current).encode()
    (logs / "HEAD").write_bytes(_entry("c" * 40, current, "pull: Fast-forward").encode())
    (logs / "refs/heads/main").write_bytes(_entry("d" * 40, current).encode())
    (logs / "refs/heads/alias").write_bytes(told)
    cause = cause_of(git_repo.path, loaded)
    assert cause is not None
    assert (cause.action, cause.detail) == ("pull", "fast-forward")  # HEAD's newest move names the action
    assert (cause.relation, cause.ahead) == ("ahead", 1)  # the last log on the chain knew the loaded commit


def test_a_ref_deleted_and_created_again_relates_to_nothing_through_the_zero_id() -> None:
    zero, x, y = "0" * 40, "a" * 40, "b" * 40
    data = (
        _entry(zero, x, "commit: x") + _entry(x, zero, "branch: deleted") + _entry(zero, y, "commit: y")
    ).encode()
    entries = reflog.parse_log(data, whole=True)
    cause = reflog.explain_entries(entries, x, y)
    assert cause is not None
    assert (cause.action, cause.relation, cause.ahead, cause.behind) == ("commit", "unknown", None, None)
    assert reflog.explain_entries(entries, zero, y) == reflog.explain_entries(
        entries, None, y
    )  # unborn: unknown


def test_a_reflog_that_contradicts_itself_teaches_nothing() -> None:
    # A reset one back from a commit one ahead must land on the loaded commit itself:
    # landing elsewhere (an edited log) makes that commit unknown, and what follows it.
    loaded, ahead, elsewhere, later = "a" * 40, "b" * 40, "c" * 40, "d" * 40
    data = (
        _entry(loaded, ahead, "commit: one")
        + _entry(ahead, elsewhere, "reset: moving to HEAD~1")
        + _entry(elsewhere, later, "commit: two")
    ).encode()
    entries = reflog.parse_log(data, whole=True)
    for current in (elsewhere, later):
        cause = reflog.explain_entries(entries, loaded, current)
        assert cause is not None and (cause.relation, cause.ahead, cause.behind) == ("unknown", None, None)
    cause = reflog.explain_entries(entries, loaded, ahead)
    assert cause is not None and (cause.relation, cause.ahead) == ("ahead", 1)


def test_names_and_messages_that_are_not_utf8_are_replaced_not_refused() -> None:
    a, b = "a" * 40, "b" * 40
    line = f"{a} {b} J".encode() + b"\xf6rg <j@x> 1700000000 +0000\tcommit: caf" + b"\xe9"
    entry = reflog.parse_entry(line)
    assert entry is not None
    assert (entry.name, entry.message) == ("J\ufffdrg", "commit: caf\ufffd")


def test_a_time_right_after_the_email_and_the_longest_time_are_read() -> None:
    a, b = "a" * 40, "b" * 40
    entry = reflog.parse_entry(f"{a} {b} A <a@x>1700000000 +0000\tm".encode())
    assert entry == reflog.Entry(a, b, "A", "a@x", 1700000000, "+0000", "m")
    entry = reflog.parse_entry(f"{a} {b} A <a@x> {'9' * 12} +0000\tm".encode())
    assert entry is not None and entry.at == 999_999_999_999
    assert reflog.parse_entry(f"{a} {b} A <a@x> {'9' * 13} +0000\tm".encode()) is None


def test_head_log_reads_where_head_was_and_says_whether_it_is_all(git_repo: Repo, tmp_path: Path) -> None:
    second = commit(git_repo, "second")
    dirs = find_git_dirs(git_repo.path)
    assert dirs is not None
    entries, whole = reflog.head_log(dirs)
    assert whole is True and [e.new for e in entries][-1] == second
    assert entries[-1].message == "commit: second"
    # Read from the file's start: its first line counts too (HEAD born from nothing).
    assert len(entries) == len((dirs.git_dir / "logs/HEAD").read_bytes().splitlines())
    assert set(entries[0].old) == {"0"}
    (dirs.git_dir / "logs/HEAD").unlink()
    assert reflog.head_log(dirs) == ([], True)  # no log: nothing, never an error
    assert reflog.head_log(dataclasses.replace(dirs, store=reftable.STORE)) == ([], False)


def test_a_tail_is_empty_and_whole_for_what_is_not_a_regular_file(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo")
    assert reflog._read_tail(tmp_path / "fifo", 100) == (b"", True)  # never blocks on a FIFO
    assert reflog._read_tail(tmp_path / "none", 100) == (b"", True)
    (tmp_path / "log").write_bytes(b"0123456789")
    assert reflog._read_tail(tmp_path / "log", 10) == (b"0123456789", True)
    assert reflog._read_tail(tmp_path / "log", 4) == (b"6789", False)
