"""A ``.git`` the process cannot read: a clear error at binding, ``unreadable`` after (C4).

Root reads everything, so as root the probe runs without the capabilities that bypass
file permissions (``setpriv --bounding-set=-dac_override,-dac_read_search``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.repos import Repo

PROBE = """
import sys
from stalewatch import Guard, StalewatchError, StaleError
try:
    guard = Guard.for_checkout(sys.argv[1])
except StalewatchError as exc:
    print(f"bind-error {type(exc).__name__}: {exc}", flush=True)
    raise SystemExit(0)
print("bound", flush=True)
sys.stdin.readline()
try:
    guard.check(strict=True)
    print("passed", flush=True)
except StaleError as exc:
    print(f"blocked {exc.status}", flush=True)
"""


def _prefix() -> list[str]:
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root without setpriv: cannot take away the right to read")
    return [setpriv, "--bounding-set=-dac_override,-dac_read_search"]


@pytest.fixture
def restore_modes(git_repo: Repo) -> Iterator[list[Path]]:
    changed: list[Path] = []
    yield changed
    for path in changed:
        path.chmod(0o755)


def _probe(repo: Repo) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*_prefix(), sys.executable, "-c", PROBE, str(repo.path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_git_dir_unreadable_at_bind_time_is_a_clear_error(git_repo: Repo, restore_modes: list[Path]) -> None:
    git_dir = git_repo.path / ".git"
    git_dir.chmod(0o000)
    restore_modes.append(git_dir)
    proc = _probe(git_repo)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert out.startswith("bind-error BindError:"), out
    assert "cannot read" in out
    assert "Traceback" not in err


def test_c4_read_permission_lost_after_binding_is_unreadable(
    git_repo: Repo, restore_modes: list[Path]
) -> None:
    proc = _probe(git_repo)
    try:
        assert proc.stdout is not None and proc.stdin is not None
        assert proc.stdout.readline().strip() == "bound"
        head = git_repo.path / ".git/HEAD"
        head.chmod(0o000)
        restore_modes.append(head)
        proc.stdin.write("go\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == "blocked unreadable"
        assert proc.wait(timeout=30) == 0
    finally:
        proc.kill()
        proc.communicate()
