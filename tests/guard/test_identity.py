"""stalewatch.core.identity: which checkout a guard binds to (C1, C2) and bad input."""

from __future__ import annotations

import importlib.util
import logging
import sys
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

from stalewatch import BindError, Guard, Status
from stalewatch.cli.human_lines import human_line
from stalewatch.guard.identity import bind_checkout, bind_file, bind_module
from tests.support.repos import Repo, make_repo


@pytest.fixture
def fake_module() -> Iterator[types.ModuleType]:
    module = types.ModuleType("stalewatch_test_agent")
    sys.modules[module.__name__] = module
    yield module
    sys.modules.pop(module.__name__, None)


def test_c1_binds_to_the_checkout_that_supplied_the_module(
    git_repo: Repo, tmp_path: Path, fake_module: types.ModuleType
) -> None:
    decoy = make_repo(tmp_path / "configured-dir")  # a configured dir that is not the source
    fake_module.__file__ = str(git_repo.path / "module.py")
    binding = bind_module(fake_module.__name__)
    assert binding.checkout == git_repo.path.resolve()
    assert binding.checkout != decoy.path.resolve()
    assert Guard.for_module(fake_module.__name__).loaded_revision == git_repo.head()


def test_c1_resolves_a_symlinked_source_to_its_real_checkout(git_repo: Repo, tmp_path: Path) -> None:
    link = tmp_path / "elsewhere.py"
    link.symlink_to(git_repo.path / "module.py")
    assert bind_file(link).checkout == git_repo.path.resolve()


def test_c2_tracked_file_is_bound(git_repo: Repo) -> None:
    binding = bind_file(git_repo.path / "module.py")
    assert binding.tracked
    assert binding.source == (git_repo.path / "module.py").resolve()


def test_c2_file_in_no_repository_is_untracked(tmp_path: Path) -> None:
    source = tmp_path / "installed.py"
    source.write_text("x = 1\n")
    guard = Guard.for_file(source)
    assert guard.status is Status.UNTRACKED
    guard.check()
    guard.check(strict=True)


def test_c2_untracked_file_inside_an_outer_repository_ignores_its_commits(git_repo: Repo) -> None:
    vendored = git_repo.write("site-packages/agent.py", "x = 1\n")  # never added
    guard = Guard.for_file(vendored)
    assert guard.status is Status.UNTRACKED
    with guard:
        git_repo.commit("outer repository moves")
        guard.check(strict=True)
        assert guard.status is Status.UNTRACKED


def test_c2_pathspec_is_literal(git_repo: Repo) -> None:
    git_repo.write("agent/run.py", "x = 1\n")
    git_repo.git("add", "agent/run.py")
    git_repo.git("commit", "-q", "-m", "agent")
    literal = git_repo.write("[a]gent/run.py", "x = 1\n")  # glob would match agent/run.py
    assert not bind_file(literal).tracked
    assert bind_file(git_repo.path / "agent/run.py").tracked


def test_path_that_does_not_exist_is_a_bind_error(tmp_path: Path) -> None:
    with pytest.raises(BindError, match="does not exist") as info:
        Guard.for_file(tmp_path / "missing.py")
    assert Path(info.value.path) == tmp_path / "missing.py"


def test_directory_instead_of_file_is_a_bind_error(git_repo: Repo) -> None:
    with pytest.raises(BindError, match="is a directory"):
        Guard.for_file(git_repo.path)


def test_module_not_imported_is_a_bind_error() -> None:
    with pytest.raises(BindError, match="not imported"):
        Guard.for_module("stalewatch_no_such_module")


def test_module_without_file_is_a_bind_error(fake_module: types.ModuleType) -> None:
    with pytest.raises(BindError, match="no __file__"):
        Guard.for_module(fake_module.__name__)


def test_symlink_loop_is_a_bind_error(tmp_path: Path) -> None:
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    with pytest.raises(BindError, match="symlink loop"):
        Guard.for_file(tmp_path / "a")


def test_checkout_outside_any_repository_is_a_bind_error(tmp_path: Path) -> None:
    with pytest.raises(BindError, match="not inside a git working tree"):
        bind_checkout(tmp_path)


def test_corrupt_head_at_bind_time_is_a_bind_error(git_repo: Repo) -> None:
    (git_repo.path / ".git/HEAD").write_text("garbage\n")
    with pytest.raises(BindError, match="cannot resolve HEAD"):
        Guard.for_checkout(git_repo.path)


def test_checkout_from_any_path_inside(git_repo: Repo) -> None:
    sub = git_repo.path / "pkg"
    sub.mkdir()
    assert bind_checkout(sub).checkout == git_repo.path.resolve()


def test_c2_inherited_git_dir_does_not_point_binding_elsewhere(
    git_repo: Repo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = make_repo(tmp_path / "other")
    other.write("stray.py", "x = 1\n")
    other.git("add", "stray.py")
    other.git("commit", "-q", "-m", "stray")
    stray = git_repo.write("stray.py", "x = 1\n")  # untracked in its own checkout
    monkeypatch.setenv("GIT_DIR", str(other.path / ".git"))  # as exported to a git hook
    monkeypatch.setenv("GIT_WORK_TREE", str(other.path))
    assert not bind_file(stray).tracked
    assert bind_file(git_repo.path / "module.py").tracked


def _import(name: str, path: Path) -> types.ModuleType:
    """Import ``path`` as module ``name`` for real (the caller removes it from ``sys.modules``)."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("where", ["uncommitted", "outside"])
def test_a_guard_that_can_never_block_says_so_once_with_the_fix(
    git_repo: Repo, tmp_path: Path, where: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The quick start's first mistake (the app not committed) used to pass every request
    for ever without a word, even at DEBUG."""
    if where == "uncommitted":
        source, fix = git_repo.write("webapp.py", "app = None\n"), "git add webapp.py && git commit"
    else:
        source, fix = tmp_path / "outside" / "webapp.py", "is not in a git checkout"
        source.parent.mkdir()
        source.write_text("app = None\n")
    _import("stalewatch_test_webapp", source)
    try:
        with caplog.at_level(logging.DEBUG, logger="stalewatch"):
            guard = Guard.for_module("stalewatch_test_webapp")
            with guard:
                guard.check()
                guard.check(strict=True)
                snap = guard.snapshot()
    finally:
        sys.modules.pop("stalewatch_test_webapp", None)
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    (warning,) = warnings
    assert warning.name.startswith("stalewatch.")
    assert str(source.resolve()) in warning.getMessage() and fix in warning.getMessage()
    assert "never block" in warning.getMessage()
    assert snap.status is Status.UNTRACKED
    assert snap.error is not None and fix in snap.error
    assert snap.to_dict()["error"] == snap.error  # the wire's snapshot says it too (`error`)
    line = human_line({"type": "snapshot", **snap.to_dict()})
    assert line is not None and fix in line
