"""git itself as the oracle of what a HEAD file names (outside input, C11).

HEAD written with any of git's traps in the ref name and any spacing around it names
exactly the ref ``git symbolic-ref HEAD`` reads there, or is refused when git refuses it.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from stalewatch.core.errors import RefError
from stalewatch.git.files import STORE
from stalewatch.git.refs import GitDirs
from tests.support.properties import budget
from tests.support.repos import Repo, make_repo

resolve_head = STORE.resolve_head  # the files store's

# A ref name's components: plain text, with one of git's traps before or after it.
TRAPS = ["", ".", ".lock", "..", "@{", "@", "{", "~", "^", ":", "?", "*", "[", "\\", " ", "\t", "\x7f", "-"]
COMPONENT = st.tuples(
    st.sampled_from(["", ".", "-", "@"]), st.text("abX-é", max_size=4), st.sampled_from(TRAPS)
).map("".join)
TAILS = st.lists(COMPONENT, max_size=3).map("/".join)
SPACES = st.sampled_from(["", " ", "\t", "\r", " \t", "\x0b", "\x0c", "\xa0", "\x1f"])


@pytest.fixture(scope="module")
def oracle(tmp_path_factory: pytest.TempPathFactory) -> Repo:
    return make_repo(tmp_path_factory.mktemp("oracle") / "repo")


@budget(300)
@given(tail=TAILS, before=SPACES, after=SPACES)
@example(tail="a.", before=" ", after="")
@example(tail="a.lock", before=" ", after="")
@example(tail="x/.a", before=" ", after="")
@example(tail="a..b", before=" ", after="")
@example(tail="a//b", before=" ", after="")
@example(tail="a/", before=" ", after="")
@example(tail="a@{1}", before=" ", after="")
@example(tail="a b", before=" ", after="")
@example(tail="a\x7f", before=" ", after="")
@example(tail="X", before="", after="\t")
def test_head_names_the_ref_git_reads_there(oracle: Repo, tail: str, before: str, after: str) -> None:
    # git itself is the oracle: HEAD written as `ref:<space><name><space>` names the ref
    # `git symbolic-ref HEAD` reads there, or is corrupt when git refuses it.
    head = oracle.path / ".git/HEAD"
    head.write_bytes(f"ref:{before}refs/heads/{tail}{after}\n".encode())
    done = subprocess.run(
        ["git", "symbolic-ref", "-q", "HEAD"],
        cwd=oracle.path,
        env={**os.environ, "GIT_CEILING_DIRECTORIES": str(oracle.path.parent)},
        capture_output=True,
        check=False,
    )
    git_reads = done.stdout.decode().removesuffix("\n") if done.returncode == 0 else None
    dirs = GitDirs(oracle.path, oracle.path / ".git", oracle.path / ".git")
    chain: list[Path] = []
    try:
        resolve_head(dirs, chain)
    except RefError as exc:
        assert git_reads is None, (head.read_bytes(), git_reads, exc.reason)
    else:
        assert chain, head.read_bytes()
        assert chain[0].relative_to(dirs.common_dir).as_posix() == git_reads, head.read_bytes()
