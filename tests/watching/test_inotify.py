"""stalewatch.watching.inotify: the shared instance, and the watchdog layer it is built on."""

from __future__ import annotations

import ctypes
import errno
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from stalewatch.watching import inotify as inotify_module
from stalewatch.watching import inotify_calls as abi
from stalewatch.watching.inotify import ANCHOR_MASK, REF_MASK, Inotify
from stalewatch.watching.notifier import Registration
from tests.support.notifiers import inotify_only

ROOT = Path(__file__).resolve().parents[2]
pytestmark = inotify_only


class Events:
    """A listener that records what the reader hands it."""

    def __init__(self) -> None:
        self.events: queue.SimpleQueue[tuple[str, bytes, bool]] = queue.SimpleQueue()
        self.overflows = 0
        self.died = threading.Event()

    def on_event(self, registration: Registration, name: bytes, deleted: bool) -> None:
        self.events.put((str(registration.path), name, deleted))

    def on_overflow(self) -> None:
        self.overflows += 1

    def on_reader_died(self) -> None:
        self.died.set()

    def next(self, timeout: float = 5.0) -> tuple[str, bytes, bool]:
        return self.events.get(timeout=timeout)


def kernel_masks(instance: Inotify) -> dict[int, int]:
    """The kernel's own record of the instance's watches: wd -> mask (/proc fdinfo, hex)."""
    return kernel_masks_of(instance.fd)


def kernel_masks_of(fd: int) -> dict[int, int]:
    masks = {}
    for line in Path(f"/proc/self/fdinfo/{fd}").read_text().splitlines():
        if line.startswith("inotify wd:"):
            fields = dict(field.split(":", 1) for field in line.split()[1:])
            masks[int(fields["wd"], 16)] = int(fields["mask"], 16)
    return masks


def test_the_libc_calls_and_constants_we_build_on_are_the_kernels() -> None:
    # stalewatch's inotify needs no watchdog: three libc calls and the kernel's ABI
    # (linux/inotify.h), written out in inotify_calls and checked here against what the
    # kernel does with them, and against watchdog's own table of the same ABI.
    from watchdog.observers import inotify_c

    c = inotify_c.InotifyConstants
    for name in dir(abi):
        if name.startswith("IN_"):
            assert getattr(abi, name) == int(getattr(c, name)), name
    fd = abi.inotify_init()
    assert fd >= 0
    try:
        assert not os.get_inheritable(fd)  # closed on exec: hooks never hold it
        wd = abi.inotify_add_watch(fd, os.fsencode(ROOT), abi.IN_CREATE)
        assert wd > 0
        again = abi.inotify_add_watch(fd, os.fsencode(ROOT), abi.IN_DELETE | abi.IN_MASK_ADD)
        assert again == wd  # the same inode, the same watch, masks merged
        assert kernel_masks_of(fd)[wd] & 0xFFFF == abi.IN_CREATE | abi.IN_DELETE
        assert abi.inotify_rm_watch(fd, wd) == 0
        assert abi.inotify_add_watch(fd, b"/nonexistent/stalewatch", abi.IN_CREATE) == -1
        assert ctypes.get_errno() == errno.ENOENT
    finally:
        os.close(fd)


def test_anchor_directories_are_never_watched_for_writes() -> None:
    in_access, in_modify, in_close_nowrite, in_open = 0x1, 0x2, 0x10, 0x20  # linux/inotify.h
    writes_or_reads = in_modify | abi.IN_CLOSE_WRITE | in_open | in_access | in_close_nowrite
    assert not ANCHOR_MASK & writes_or_reads
    assert REF_MASK & abi.IN_CLOSE_WRITE and not REF_MASK & (in_modify | in_open | in_access)


def test_two_listeners_on_one_directory_keep_their_own_events_and_names(tmp_path: Path) -> None:
    instance = Inotify()
    try:
        narrow, wide = Events(), Events()
        a = instance.add(tmp_path, True, frozenset({b"checkout"}), narrow)
        b = instance.add(tmp_path, False, frozenset({b"HEAD"}), wide)
        assert a.wd == b.wd
        assert kernel_masks(instance)[a.wd] & 0xFFFF == (ANCHOR_MASK | REF_MASK) & 0xFFFF  # the union
        (tmp_path / "HEAD").write_text("x")  # CREATE, CLOSE_WRITE: only `wide` wants the name
        (tmp_path / "checkout").mkdir()
        (tmp_path / "unrelated").write_text("x")  # nobody's name: nobody is called
        assert wide.next()[1:] == (b"HEAD", False)  # created
        assert wide.next()[1] == b"HEAD"  # its close-after-write
        assert narrow.next()[1] == b"checkout"
        instance.remove(b)  # a's registration keeps the directory watched
        assert a.wd in kernel_masks(instance)
        (tmp_path / "checkout").rmdir()
        assert narrow.next()[1] == b"checkout"
        assert wide.events.empty() and narrow.events.empty()
        instance.remove(a)
        assert kernel_masks(instance) == {}
    finally:
        instance.close()
    assert not instance.thread.is_alive()


def _until(predicate: Callable[[], bool], timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    pause = threading.Event()
    while not predicate():
        if time.monotonic() > deadline:
            return False
        pause.wait(0.01)  # the reader thread removes them on its own schedule
    return True


def test_watches_left_for_later_leave_the_kernel_in_a_batch(tmp_path: Path) -> None:
    """A daemon stopping ten thousand watchers leaves the kernel's watches to the reader."""
    instance = Inotify()
    try:
        listener = Events()
        directories = [tmp_path / f"d{n}" for n in range(600)]  # more than one batch
        for directory in directories:
            directory.mkdir()
        registrations = [instance.add(d, False, frozenset(), listener) for d in directories]
        assert len(kernel_masks(instance)) == 600
        for registration in registrations:
            instance.remove(registration, later=True)
        assert instance.watch_count() == 0  # ours at once
        assert _until(lambda: kernel_masks(instance) == {}), len(kernel_masks(instance))
        # A directory watched again before the reader got to it keeps its watch.
        again = instance.add(directories[0], False, frozenset({b"HEAD"}), listener)
        instance.remove(instance.add(directories[1], False, frozenset(), listener), later=True)
        instance.remove(again, later=True)
        kept = instance.add(directories[0], False, frozenset({b"HEAD"}), listener)
        assert _until(lambda: set(kernel_masks(instance)) == {kept.wd})
        (directories[0] / "HEAD").write_text("x")
        assert listener.next()[1] == b"HEAD"  # still delivered
    finally:
        instance.close()


def test_a_deleted_directory_marks_its_registrations_dead(tmp_path: Path) -> None:
    instance = Inotify()
    try:
        listener = Events()
        directory = tmp_path / "refs-heads-feature"
        directory.mkdir()
        registration = instance.add(directory, False, frozenset(), listener)
        directory.rmdir()
        assert listener.next()[1:] == (b"", True)  # IN_DELETE_SELF
        assert listener.next()[1:] == (b"", True)  # then the kernel drops the watch: IN_IGNORED
        assert not registration.alive
        assert instance.watch_count() == 0
    finally:
        instance.close()


def test_refused_watches_raise_instead_of_being_recorded(tmp_path: Path) -> None:
    instance = Inotify()
    try:
        with pytest.raises(FileNotFoundError):
            instance.add(tmp_path / "missing", False, frozenset(), Events())
        (tmp_path / "file").write_text("x")
        with pytest.raises(NotADirectoryError):  # IN_ONLYDIR
            instance.add(tmp_path / "file", False, frozenset(), Events())
        assert instance.watch_count() == 0
    finally:
        instance.close()


NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]


def _importable_by_nobody(root: Path) -> Path:
    """A copy of what the child imports (stalewatch and watchdog) that ``nobody`` can read.

    The clone and its virtualenv may live under a directory only their owner can
    enter (root's home, ``mktemp -d``): ``nobody`` could import nothing from there.
    """
    import watchdog

    ignore = shutil.ignore_patterns("__pycache__")
    shutil.copytree(ROOT / "src" / "stalewatch", root / "stalewatch", ignore=ignore)
    shutil.copytree(Path(watchdog.__file__).parent, root / "watchdog", ignore=ignore)
    for path in [root, *root.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return root


def test_permission_denied_is_raised_not_silently_ignored(tmp_path: Path) -> None:
    # watchdog's InotifyFD records a watch refused with EACCES as if it existed. Run as
    # an unprivileged user (root may watch anything) in a child process.
    code = (
        "import errno, sys; from pathlib import Path\n"
        "from stalewatch.watching.inotify import Inotify\n"
        "i = Inotify()\n"
        "try:\n"
        "    i.add(Path(sys.argv[1]), False, frozenset(), None)\n"
        "except PermissionError as e:\n"
        "    print('refused', e.errno == errno.EACCES, i.watch_count())\n"
        "finally:\n"
        "    i.close()\n"
    )
    if os.geteuid() != 0:
        secret = tmp_path / "secret"
        secret.mkdir(mode=0o311)
        env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
        command = [sys.executable, "-c", code, str(secret)]
        share = None
    else:
        # Everything nobody touches lives outside the clone, which may be 0700: the
        # base interpreter (not the venv's link to it) and a copy of the packages.
        share = Path(tempfile.mkdtemp(prefix="sw-nobody-", dir="/tmp"))
        share.chmod(0o755)  # mkdtemp makes it 0700
        secret = share / "secret"
        secret.mkdir(mode=0o311)
        python = os.path.realpath(getattr(sys, "_base_executable", sys.executable))
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "PYTHONPATH": str(_importable_by_nobody(share / "lib")),
            "PYTHONNOUSERSITE": "1",
            "PYTHONDONTWRITEBYTECODE": "1",
        }
        command = [*NOBODY, python, "-c", code, str(secret)]
    try:
        if share is not None:
            runs = subprocess.run(
                [*NOBODY, command[len(NOBODY)], "-c", "pass"], check=False, capture_output=True, timeout=30
            )
            if runs.returncode != 0:
                pytest.skip(
                    f"nobody cannot run this interpreter ({command[len(NOBODY)]}): {runs.stderr[-200:]!r}"
                )
        done = subprocess.run(command, capture_output=True, text=True, timeout=30, check=False, env=env)
    finally:
        secret.rmdir()
        if share is not None:
            shutil.rmtree(share)
    assert done.stdout.strip() == "refused True 0", done.stderr


def test_the_instance_is_shared_and_closed_by_its_last_user() -> None:
    first = inotify_module.acquire()
    second = inotify_module.acquire()
    try:
        assert first is second and inotify_module._shared.users(first) == 2
    finally:
        second.release()
    assert first.thread.is_alive()
    first.release()
    assert not first.thread.is_alive()
    third = inotify_module.acquire()
    try:
        assert third is not first  # a fresh one after the last user left
    finally:
        third.release()


def test_instance_limit_is_a_clear_os_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def exhausted() -> int:
        ctypes.set_errno(errno.EMFILE)
        return -1

    monkeypatch.setattr(inotify_module, "inotify_init", exhausted)
    with pytest.raises(OSError, match="instance limit reached") as info:
        inotify_module.acquire()
    assert info.value.errno == errno.EMFILE


@pytest.mark.parametrize("short", ["pipe", "epoll"])
def test_an_instance_short_of_descriptors_half_way_leaves_none_open(
    short: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The instance is open when the next descriptor cannot be had (EMFILE): it, and the
    # pipe when the epoll fails, are closed, not left to the process's last descriptors.
    def exhausted() -> None:
        raise OSError(errno.EMFILE, "Too many open files")

    target = os if short == "pipe" else inotify_module.select
    monkeypatch.setattr(target, short, exhausted)
    before = sorted(Path("/proc/self/fd").iterdir())
    with pytest.raises(OSError, match="Too many open files"):
        Inotify()
    assert sorted(Path("/proc/self/fd").iterdir()) == before


def test_the_instance_is_not_inherited_by_child_processes() -> None:
    # A hook the daemon runs must not hold (or read) the daemon's instance.
    instance = Inotify()
    try:
        assert not os.get_inheritable(instance.fd)
    finally:
        instance.close()
