"""stalewatch.git.refs: resolving HEAD in-process across every layout (C11), and bad input."""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

import pytest

from stalewatch.core.errors import RefError
from stalewatch.git import files, reftable
from stalewatch.git.refs import GitDirs, find_git_dirs
from tests.support.repos import Repo, make_repo

resolve_head, head_chain = files.STORE.resolve_head, files.STORE.head_chain  # the files store's


def resolve(path: Path) -> str | None:
    dirs = find_git_dirs(path.resolve())
    assert dirs is not None
    return dirs.store.resolve_head(dirs)


def test_c11_symbolic_head_on_loose_ref(git_repo: Repo) -> None:
    assert resolve(git_repo.path) == git_repo.head()


def test_c11_detached_head(git_repo: Repo) -> None:
    first = git_repo.head()
    git_repo.commit("second")
    git_repo.git("checkout", "-q", "--detach", first)
    assert resolve(git_repo.path) == first


def test_c11_packed_only_after_gc_with_peeled_tags(git_repo: Repo) -> None:
    git_repo.git("tag", "-a", "v1", "-m", "annotated")  # gives a ^peeled line
    git_repo.git("branch", "other")
    git_repo.git("pack-refs", "--all")
    assert not (git_repo.path / ".git/refs/heads/main").exists()
    packed = (git_repo.path / ".git/packed-refs").read_text()
    assert "\n^" in packed
    assert resolve(git_repo.path) == git_repo.head()


def test_c11_loose_ref_wins_over_packed(git_repo: Repo) -> None:
    git_repo.git("pack-refs", "--all")
    new = git_repo.commit("after pack")  # writes a loose ref, packed one is older
    assert resolve(git_repo.path) == new


def test_c11_branch_name_with_slashes(git_repo: Repo) -> None:
    git_repo.git("checkout", "-q", "-b", "feature/deep/name")
    new = git_repo.commit("on feature")
    assert resolve(git_repo.path) == new


def test_c11_unborn_branch_resolves_to_none(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "empty", initial=False)
    assert resolve(repo.path) is None


def test_c11_linked_worktree_uses_its_own_head_and_common_refs(git_repo: Repo, tmp_path: Path) -> None:
    git_repo.git("worktree", "add", "-q", "-b", "wt", str(tmp_path / "wt"))
    dirs = find_git_dirs((tmp_path / "wt").resolve())
    assert dirs is not None
    assert dirs.git_dir != dirs.common_dir
    assert dirs.common_dir == (git_repo.path / ".git").resolve()
    assert dirs.worktree == (tmp_path / "wt").resolve()
    wt = Repo(tmp_path / "wt")
    new = wt.commit("in worktree")
    assert resolve_head(dirs) == new
    assert resolve(git_repo.path) != new


def test_c11_submodule_gitfile(git_repo: Repo, tmp_path: Path) -> None:
    inner = make_repo(tmp_path / "inner")
    git_repo.git("-c", "protocol.file.allow=always", "submodule", "add", "-q", str(inner.path), "sub")
    sub = git_repo.path / "sub"
    assert (sub / ".git").is_file()
    assert resolve(sub) == inner.head()
    dirs = find_git_dirs((sub / "inner-file").resolve())  # a path that need not exist
    assert dirs is not None
    assert dirs.worktree == sub.resolve()
    assert dirs.git_dir == dirs.common_dir == (git_repo.path / ".git/modules/sub").resolve()


def test_c11_checkout_through_symlink(git_repo: Repo, tmp_path: Path) -> None:
    link = tmp_path / "link"
    link.symlink_to(git_repo.path)
    assert resolve(link / "module.py") == git_repo.head()
    dirs = find_git_dirs((link / "module.py").resolve())
    assert dirs == GitDirs(
        git_repo.path.resolve(), git_repo.path.resolve() / ".git", git_repo.path.resolve() / ".git"
    )


def test_c11_reftable_asks_git(git_repo: Repo, monkeypatch: pytest.MonkeyPatch) -> None:
    # git 2.39 cannot create reftable repositories; the layout marker is what we detect
    # (and this git, reading the files beside it, answers as a reftable one would).
    (git_repo.path / ".git/reftable").mkdir()
    dirs = find_git_dirs(git_repo.path.resolve())
    assert dirs is not None and dirs.store is reftable.STORE
    chain: list[Path] = []
    assert dirs.store.resolve_head(dirs, chain) == git_repo.head()
    assert chain == [] == dirs.store.head_chain(dirs)  # no ref files to follow
    monkeypatch.setenv("STALEWATCH_GIT", str(git_repo.path / "no-such-git"))
    with pytest.raises(RefError, match="git is not installed"):  # it does ask git
        resolve(git_repo.path)


def test_no_repository_gives_none(tmp_path: Path) -> None:
    assert find_git_dirs(tmp_path.resolve()) is None


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("garbage\n", "not a commit id"),
        ("ref: refs/heads/../../etc/passwd\n", "invalid ref"),
        ("ref: HEAD\n", "invalid ref"),
        ("", "not a commit id"),
    ],
)
def test_corrupt_head_is_a_clear_error(git_repo: Repo, content: str, message: str) -> None:
    (git_repo.path / ".git/HEAD").write_text(content)
    with pytest.raises(RefError, match=message) as info:
        resolve(git_repo.path)
    assert Path(info.value.path).name == "HEAD"


def test_head_naming_a_missing_ref_is_unborn(git_repo: Repo) -> None:
    (git_repo.path / ".git/HEAD").write_text("ref: refs/heads/nope\n")
    assert resolve(git_repo.path) is None


def test_malformed_packed_refs_is_a_clear_error(git_repo: Repo) -> None:
    git_repo.git("pack-refs", "--all")
    packed = git_repo.path / ".git/packed-refs"
    packed.write_text("# pack-refs with: peeled\nnot-a-sha refs/heads/main\n")
    with pytest.raises(RefError, match="malformed line 2"):
        resolve(git_repo.path)


def test_missing_head_is_a_clear_error(git_repo: Repo) -> None:
    (git_repo.path / ".git/HEAD").unlink()
    with pytest.raises(RefError) as info:
        resolve(git_repo.path)
    assert (info.value.path, info.value.reason) == (
        git_repo.path.resolve() / ".git/HEAD",
        "HEAD does not exist",
    )


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (
            "ref: refs/heads/" + "~" * 100,
            "symbolic ref names an invalid ref " + repr(("refs/heads/" + "~" * 100)[:80]),
        ),
        ("g" * 100, "not a commit id or symbolic ref: " + repr("g" * 80)),
    ],
)
def test_a_corrupt_heads_error_quotes_at_most_80_characters_of_it(
    git_repo: Repo, content: str, reason: str
) -> None:
    (git_repo.path / ".git/HEAD").write_text(content + "\n")
    with pytest.raises(RefError) as info:
        resolve(git_repo.path)
    assert (info.value.path, info.value.reason) == (git_repo.path.resolve() / ".git/HEAD", reason)


def test_fifo_in_place_of_a_ref_does_not_hang(git_repo: Repo) -> None:
    ref = git_repo.path / ".git/refs/heads/main"
    ref.unlink()
    os.mkfifo(ref)
    with pytest.raises(RefError, match="not a regular file"):
        resolve(git_repo.path)


def test_symref_loop_is_a_clear_error(git_repo: Repo) -> None:
    heads = git_repo.path / ".git/refs/heads"
    (heads / "a").write_text("ref: refs/heads/b\n")
    (heads / "b").write_text("ref: refs/heads/a\n")
    (git_repo.path / ".git/HEAD").write_text("ref: refs/heads/a\n")
    with pytest.raises(RefError) as info:
        resolve(git_repo.path)
    head = git_repo.path.resolve() / ".git/HEAD"
    assert (info.value.path, info.value.reason) == (head, "symbolic refs nested deeper than 5")


@pytest.mark.parametrize("content", ["nonsense\n", ""])
def test_gitfile_without_gitdir_line_is_a_clear_error(tmp_path: Path, content: str) -> None:
    (tmp_path / ".git").write_text(content)
    with pytest.raises(RefError) as info:
        find_git_dirs(tmp_path.resolve())
    assert (info.value.path, info.value.reason) == (
        tmp_path.resolve() / ".git",
        "a .git file must start with 'gitdir:'",
    )


def test_deleted_git_dir_is_unreadable(git_repo: Repo) -> None:
    dirs = find_git_dirs(git_repo.path.resolve())
    assert dirs is not None
    shutil.rmtree(git_repo.path / ".git")
    with pytest.raises(RefError):
        resolve_head(dirs)


def test_c11_symlinked_head_is_a_symbolic_ref_and_its_branch_is_on_the_chain(git_repo: Repo) -> None:
    # core.preferSymlinkRefs: git writes HEAD as a symlink to refs/heads/<branch>.
    git_repo.git("branch", "side")
    git_repo.git("-c", "core.preferSymlinkRefs=true", "checkout", "-q", "side")
    head = git_repo.path / ".git/HEAD"
    assert head.is_symlink() and str(head.readlink()) == "refs/heads/side"
    new = git_repo.commit("on side")
    dirs = find_git_dirs(git_repo.path.resolve())
    assert dirs is not None
    chain: list[Path] = []
    assert resolve_head(dirs, chain) == new
    assert chain == [dirs.common_dir / "refs/heads/side"]  # the file whose writes move HEAD
    assert head_chain(dirs) == chain


def test_c11_symlinked_head_to_a_packed_only_branch(git_repo: Repo) -> None:
    git_repo.git("branch", "side")
    git_repo.git("-c", "core.preferSymlinkRefs=true", "checkout", "-q", "side")
    git_repo.git("pack-refs", "--all")  # the symlink now dangles: the ref is packed
    assert resolve(git_repo.path) == git_repo.head()


def test_a_symlink_outside_refs_is_read_through(git_repo: Repo, tmp_path: Path) -> None:
    commit = git_repo.head()
    elsewhere = tmp_path / "head-elsewhere"
    elsewhere.write_text("ref: refs/heads/main\n")
    head = git_repo.path / ".git/HEAD"
    head.unlink()
    head.symlink_to(elsewhere)
    dirs = find_git_dirs(git_repo.path.resolve())
    assert dirs is not None
    chain: list[Path] = []
    assert resolve_head(dirs, chain) == commit  # git itself refuses this layout; we read it
    assert chain == [dirs.common_dir / "refs/heads/main"]


@pytest.mark.parametrize("target", ["refs/heads/../../../etc/passwd", "refs/heads/a\nb", "refs/"])
def test_symlinked_head_naming_an_invalid_ref_is_a_clear_error(git_repo: Repo, target: str) -> None:
    head = git_repo.path / ".git/HEAD"
    head.unlink()
    head.symlink_to(target)
    with pytest.raises(RefError, match="invalid ref"):
        resolve(git_repo.path)


def test_symlink_loop_at_head_is_a_clear_error(git_repo: Repo) -> None:
    head = git_repo.path / ".git/HEAD"
    head.unlink()
    head.symlink_to("HEAD")
    with pytest.raises(RefError, match="cannot read"):
        resolve(git_repo.path)


# -- per-worktree refs, reftable detection, SHA-256 ------------------------------------------


def linked_worktree(repo: Repo, path: Path) -> tuple[Repo, GitDirs]:
    repo.git("worktree", "add", "-q", "-b", "wt", str(path))
    dirs = find_git_dirs(path.resolve())
    assert dirs is not None and dirs.git_dir != dirs.common_dir
    return Repo(path), dirs


@pytest.mark.parametrize("name", ["refs/worktree/mine", "refs/bisect/bad", "refs/rewritten/onto"])
def test_c11_head_on_a_per_worktree_ref_reads_the_worktrees_own_ref(
    git_repo: Repo, tmp_path: Path, name: str
) -> None:
    first = git_repo.head()
    second = git_repo.commit("second")
    git_repo.git("update-ref", name, second)  # the main worktree's own ref of that name
    wt, dirs = linked_worktree(git_repo, tmp_path / "wt")
    wt.git("update-ref", name, first)
    wt.git("symbolic-ref", "HEAD", name)
    assert wt.git("rev-parse", "HEAD") == first  # git reads the worktree's ref, not the main one's
    chain: list[Path] = []
    assert resolve_head(dirs, chain) == first
    assert chain == [dirs.git_dir / name]
    assert head_chain(dirs) == chain
    main = find_git_dirs(git_repo.path.resolve())
    assert main is not None
    git_repo.git("symbolic-ref", "HEAD", name)
    assert resolve_head(main) == second == git_repo.git("rev-parse", "HEAD")


def test_c11_a_per_worktree_ref_found_only_in_packed_refs_reads_as_git_reads_it(
    git_repo: Repo, tmp_path: Path
) -> None:
    # git never packs per-worktree refs, but reads packed-refs for any ref not found loose.
    commit = git_repo.head()
    wt, dirs = linked_worktree(git_repo, tmp_path / "wt")
    packed = dirs.common_dir / "packed-refs"
    git_repo.git("pack-refs", "--all")
    packed.write_text(packed.read_text() + f"{commit} refs/worktree/packed\n")
    wt.git("symbolic-ref", "HEAD", "refs/worktree/packed")
    assert wt.git("rev-parse", "HEAD") == commit
    assert resolve_head(dirs) == commit


@pytest.mark.parametrize(
    "config",
    [
        "[extensions]\n\trefstorage = reftable\n",
        "[extensions]\n\trefStorage = reftable\n",
        "[EXTENSIONS]\n\tREFSTORAGE=REFTABLE\n",
    ],
)
def test_c11_reftable_is_known_from_the_repository_config(git_repo: Repo, config: str) -> None:
    config_file = git_repo.path / ".git/config"
    config_file.write_text(config_file.read_text() + config)
    dirs = find_git_dirs(git_repo.path.resolve())
    assert dirs is not None and dirs.store is reftable.STORE
    assert dirs.store.head_chain(dirs) == []


def test_c11_a_linked_worktree_of_a_reftable_repository_asks_git(git_repo: Repo, tmp_path: Path) -> None:
    _, dirs = linked_worktree(git_repo, tmp_path / "wt")
    assert dirs.store is files.STORE
    config_file = dirs.common_dir / "config"  # the shared config, not the worktree's git dir
    config_file.write_text(config_file.read_text() + "[extensions]\n\trefstorage = reftable\n")
    dirs = find_git_dirs((tmp_path / "wt").resolve())
    assert dirs is not None and dirs.store is reftable.STORE


@pytest.mark.parametrize("config", ["[extensions]\n\trefstorage = files\n", "[core]\n\tbare = false\n"])
def test_the_files_backend_is_read_in_process(git_repo: Repo, config: str) -> None:
    (git_repo.path / ".git/config").write_text(config)
    dirs = find_git_dirs(git_repo.path.resolve())
    assert dirs is not None and dirs.store is files.STORE
    assert resolve_head(dirs) == git_repo.head()


def test_a_repository_without_config_is_not_reftable(git_repo: Repo) -> None:
    (git_repo.path / ".git/config").unlink()
    dirs = find_git_dirs(git_repo.path.resolve())
    assert dirs is not None and dirs.store is files.STORE


def test_c11_sha256_repository_resolves_loose_and_packed(tmp_path: Path) -> None:
    repo = Repo(tmp_path / "sha256")
    repo.path.mkdir()
    repo.git("init", "-q", "--object-format=sha256", "-b", "main")
    repo.commit("one")
    commit = repo.head()
    assert len(commit) == 64
    assert resolve(repo.path) == commit
    repo.git("pack-refs", "--all")
    assert not (repo.path / ".git/refs/heads/main").exists()
    assert resolve(repo.path) == commit
    repo.git("checkout", "-q", "--detach")
    assert resolve(repo.path) == commit


def test_a_config_that_is_not_utf8_is_still_read(git_repo: Repo) -> None:
    config_file = git_repo.path / ".git/config"
    config_file.write_bytes(config_file.read_bytes() + b"[user]\n\tname = J\xf6rg\n")
    dirs = find_git_dirs(git_repo.path.resolve())
    assert dirs is not None and dirs.store is files.STORE
    config_file.write_bytes(config_file.read_bytes() + b"[extensions]\n\trefstorage = reftable\n")
    dirs = find_git_dirs(git_repo.path.resolve())
    assert dirs is not None and dirs.store is reftable.STORE


def test_the_chain_read_before_a_broken_ref_is_still_known(git_repo: Repo) -> None:
    # What to watch: the files resolution went through, even when one of them is corrupt.
    heads = git_repo.path / ".git/refs/heads"
    (heads / "a").write_text("ref: refs/heads/b\n")
    (heads / "b").write_text("garbage\n")
    (git_repo.path / ".git/HEAD").write_text("ref: refs/heads/a\n")
    dirs = find_git_dirs(git_repo.path.resolve())
    assert dirs is not None
    assert head_chain(dirs) == [dirs.common_dir / "refs/heads/a", dirs.common_dir / "refs/heads/b"]
    with pytest.raises(RefError, match="not a commit id"):
        resolve_head(dirs)


# -- every way a ref can fail to be read: the file and the reason, exactly -----------------


def head_names(repo: Repo, target: str) -> GitDirs:
    (repo.path / ".git/HEAD").write_text(f"ref: {target}\n")
    dirs = find_git_dirs(repo.path.resolve())
    assert dirs is not None
    return dirs


def refused(dirs: GitDirs) -> tuple[Path, str]:
    with pytest.raises(RefError) as info:
        resolve_head(dirs)
    return Path(info.value.path), info.value.reason


def test_a_ref_that_is_a_fifo_is_refused_by_name(git_repo: Repo) -> None:
    ref = git_repo.path / ".git/refs/heads/main"
    ref.unlink()
    os.mkfifo(ref)
    assert refused(head_names(git_repo, "refs/heads/main")) == (ref.resolve(), "not a regular file")


def test_a_ref_of_4096_bytes_is_read_whole_and_a_larger_one_refused(git_repo: Repo) -> None:
    commit = git_repo.head()
    ref = git_repo.path / ".git/refs/heads/main"
    ref.write_text(" " * (4096 - 40) + commit)  # its last byte still matters
    dirs = head_names(git_repo, "refs/heads/main")
    assert resolve_head(dirs) == commit
    ref.write_text(" " * (4097 - 41) + commit + "\n")
    assert refused(dirs) == (ref.resolve(), "larger than 4096 bytes; not a ref")


def test_a_ref_that_cannot_be_opened_is_refused_with_the_systems_reason(git_repo: Repo) -> None:
    dirs = head_names(git_repo, "refs/heads/" + "n" * 300)  # a valid name no filesystem holds
    path, reason = refused(dirs)
    assert path == dirs.common_dir / "refs/heads" / ("n" * 300)
    assert reason == f"cannot read: {os.strerror(errno.ENAMETOOLONG)}"


def test_a_ref_that_cannot_be_read_is_refused_with_the_systems_reason(git_repo: Repo) -> None:
    if not Path("/proc/self/mem").exists():
        pytest.skip("needs Linux's /proc")
    ref = git_repo.path / ".git/refs/heads/main"
    ref.unlink()
    ref.symlink_to("/proc/self/mem")  # opens as a regular file; reading it fails (EIO)
    assert refused(head_names(git_repo, "refs/heads/main")) == (ref, f"cannot read: {os.strerror(errno.EIO)}")


def test_a_git_dir_behind_a_symlink_loop_is_refused_by_its_head(tmp_path: Path) -> None:
    loop = tmp_path / "loop"
    loop.symlink_to("loop")
    git_dir = loop / ".git"
    dirs = GitDirs(tmp_path, git_dir, git_dir)
    assert refused(dirs) == (git_dir / "HEAD", f"cannot read: {os.strerror(errno.ELOOP)}")


def test_a_symlinked_ref_replaced_by_a_file_while_read_is_read_as_that_file(
    git_repo: Repo, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The race: the ref is a symlink when opened, a regular file when its link is read.
    first = git_repo.head()
    second = git_repo.commit("second")
    ref = git_repo.path / ".git/refs/heads/main"
    ref.unlink()
    ref.symlink_to("elsewhere")
    real_readlink = os.readlink

    def replaced_meanwhile(path: str | os.PathLike[str]) -> str:
        ref.unlink()
        ref.write_text(first + "\n")  # what a concurrent `git update-ref` leaves
        return real_readlink(path)

    monkeypatch.setattr(os, "readlink", replaced_meanwhile)
    assert resolve_head(head_names(git_repo, "refs/heads/main")) == first != second


@pytest.mark.parametrize("space", [" ", "\t", "\r", "\x0b", "\x0c", "\x1f", "\xa0"])
def test_only_the_spaces_git_trims_around_a_ref_are_trimmed(git_repo: Repo, space: str) -> None:
    commit = git_repo.head()
    trims = space in " \t\r"
    head = git_repo.path / ".git/HEAD"
    head.write_bytes(f"ref: refs/heads/main{space}\n".encode())
    git_resolves = git_repo.git("rev-parse", "-q", "--verify", "HEAD", check=False) == commit
    assert git_resolves == trims
    dirs = find_git_dirs(git_repo.path.resolve())
    assert dirs is not None
    try:
        ours = resolve_head(dirs)
    except RefError:
        ours = None
    assert (ours == commit) == trims
    head.write_text("ref: refs/heads/main\n")
    (git_repo.path / ".git/refs/heads/main").write_bytes(f"{commit}{space}\n".encode())
    assert (git_repo.git("rev-parse", "-q", "--verify", "HEAD", check=False) == commit) == trims
    try:
        ours = resolve_head(dirs)
    except RefError:
        ours = None
    assert (ours == commit) == trims


@pytest.mark.parametrize("content", ["", "\n", " \t\r\n"])
def test_an_empty_ref_is_refused_by_name_as_git_refuses_it(git_repo: Repo, content: str) -> None:
    ref = git_repo.path / ".git/refs/heads/main"
    ref.write_text(content)
    assert git_repo.git("rev-parse", "-q", "--verify", "HEAD", check=False) == ""
    assert refused(head_names(git_repo, "refs/heads/main")) == (ref.resolve(), "empty ref file")


def test_a_checkouts_paths_are_where_git_keeps_them_and_built_once() -> None:
    dirs = GitDirs(Path("/w"), Path("/w/.git/worktrees/x"), Path("/w/.git"))
    assert dirs.head_file == Path("/w/.git/worktrees/x/HEAD")
    assert dirs.packed_refs == Path("/w/.git/packed-refs")
    assert dirs.head_log == Path("/w/.git/worktrees/x/logs/HEAD")
    assert dirs.head_file is dirs.head_file  # kept, not joined anew
    # Branches in the common dir; per-worktree refs (bisect, worktree) in the worktree's own.
    assert dirs.ref_path("refs/heads/main") == Path("/w/.git/refs/heads/main")
    assert dirs.ref_path("refs/bisect/bad") == Path("/w/.git/worktrees/x/refs/bisect/bad")
    assert dirs.ref_path("refs/heads/main") is dirs.ref_path("refs/heads/main")
    # A ref's log under the git dir it lives in: the worktree's own first (it sits
    # inside the common dir); nothing for a file under neither.
    assert dirs.log_path(Path("/w/.git/worktrees/x/refs/bisect/bad")) == Path(
        "/w/.git/worktrees/x/logs/refs/bisect/bad"
    )
    assert dirs.log_path(Path("/w/.git/refs/heads/main")) == Path("/w/.git/logs/refs/heads/main")
    branch = Path("/w/.git/refs/heads/main")
    assert dirs.log_path(branch) is dirs.log_path(branch)  # kept, not joined anew
    assert dirs.log_path(Path("/elsewhere/refs/heads/main")) is None
    assert dirs.log_path(Path("/elsewhere/refs/heads/main")) is None  # the cached answer too
    # Equality and hashing are the fields' alone: what was cached does not count.
    twin = GitDirs(Path("/w"), Path("/w/.git/worktrees/x"), Path("/w/.git"))
    assert twin == dirs and hash(twin) == hash(dirs)


def test_the_path_caches_stay_bounded_over_a_long_life_of_branch_switches() -> None:
    dirs = GitDirs(Path("/w"), Path("/w/.git"), Path("/w/.git"))
    most = [0, 0]
    for i in range(1000):
        name = f"refs/heads/b{i}"
        assert dirs.ref_path(name) == Path("/w/.git") / name
        assert dirs.log_path(Path("/w/.git") / name) == Path("/w/.git/logs") / name
        sizes = (dirs.ref_path.cache_info().currsize, dirs.log_path.cache_info().currsize)  # type: ignore[attr-defined]
        most = [max(most[0], sizes[0]), max(most[1], sizes[1])]
    assert most == [256, 256]


def test_a_fifo_with_data_in_place_of_a_ref_is_refused_and_not_drained(tmp_path: Path) -> None:
    """A FIFO whose writer wrote a ref-like line is refused, not read as the ref (a read
    would take the bytes from whoever owns the pipe)."""
    fifo = tmp_path / "HEAD"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # keep the pipe open for the writer
    writer = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    try:
        os.write(writer, ("1" * 40 + "\n").encode())
        with pytest.raises(RefError, match="not a regular file"):
            files.read_small(fifo, ref=True)
        assert os.read(reader, 100) == ("1" * 40 + "\n").encode()  # the writer's bytes are still there
    finally:
        os.close(writer)
        os.close(reader)


def test_a_terminal_in_place_of_a_file_is_refused_and_its_input_left_alone(tmp_path: Path) -> None:
    """A character device is read too now: a symlink (a .git file, commondir, or a
    symlinked ref read through) to a terminal takes what the user typed as the file."""
    master, slave = os.openpty()
    try:
        os.write(master, b"gitdir: /elsewhere\n")
        link = tmp_path / "commondir"
        link.symlink_to(os.ttyname(slave))
        with pytest.raises(RefError, match="not a regular file"):
            files.read_small(link)
    finally:
        os.close(master)
        os.close(slave)
