"""A daemon started while another process holds every inotify instance the user may have.

This test takes every inotify instance left to the user (``fs.inotify.max_user_instances``,
128 here, shared with every program of the user) for about a second: anything else
starting a watcher meanwhile falls back to polling. It lets go as soon as the
daemon has said it polls.
"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.daemons import (
    WAIT,
    LineReader,
    Notifications,
    Subscriber,
    daemon_command,
    greet,
    short_dir,
)
from tests.support.repos import Repo, make_repo

# Opens inotify instances until the kernel refuses (EMFILE) and reports; then keeps
# taking any instance another process frees, until its stdin closes; then exits and
# the kernel frees them all.
HOLDER = r"""
import ctypes, select, sys
libc = ctypes.CDLL(None, use_errno=True)
held = []
while (fd := libc.inotify_init()) >= 0:
    held.append(fd)
print(len(held), ctypes.get_errno(), flush=True)
while not select.select([sys.stdin], [], [], 0.002)[0]:
    while (fd := libc.inotify_init()) >= 0:
        held.append(fd)
"""


class _RaceLost(Exception):
    """Another program freed an instance and the daemon got it: start over."""


def _attempt(work: Path, repos: list[Repo], notes: Notifications) -> None:
    env = {**os.environ, "NOTIFY_SOCKET": str(notes.path)}
    env.pop("JOURNAL_STREAM", None)
    holder = subprocess.Popen([sys.executable, "-c", HOLDER], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    daemon: subprocess.Popen[bytes] | None = None
    try:
        held, code = map(int, LineReader(holder.stdout).line().split())
        assert code == errno.EMFILE, f"the kernel never refused an instance after {held}"
        daemon = subprocess.Popen(
            daemon_command("--socket", str(work / "d.sock"), *(str(r.path) for r in repos)),
            stdin=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=env,
        )
        log = LineReader(daemon.stderr)
        everyone = {str(r.path) for r in repos}
        # What the daemon says, line by line: each watcher's own word ("unavailable",
        # "available again"), and its health reports as the server logs (and
        # broadcasts) them: polling first, then native.
        unavailable: set[str] = set()
        polling: set[str] = set()
        native: set[str] = set()
        back = 0
        released = False
        while native != everyone:
            line = log.until(lambda line: "stalewatch:" in line, timeout=3 * WAIT)
            if "change notification unavailable for " in line:
                assert "instance limit reached" in line
                assert "retrying native notification" in line
                unavailable.add(line.split("unavailable for ", 1)[1].split(" (", 1)[0])
            elif "available again" in line:
                back += 1
            elif "watcher for " in line and ": trusted=" in line:
                path = line.split("watcher for ", 1)[1].split(": trusted=", 1)[0]
                if "trusted=False mode=polling" in line:
                    polling.add(path)
                elif "trusted=True mode=native" in line:
                    if not released:
                        raise _RaceLost(line)
                    assert path in polling  # it said it polled first
                    native.add(path)
            if not released and unavailable == everyone:
                # Every watcher tried and polls. The other process lets go (as an
                # editor or a sync tool would).
                holder.stdin.close()  # type: ignore[union-attr]
                holder.wait(timeout=WAIT)
                released = True
        assert back == len(repos)
        notes.wait_for(lambda m: "READY=1" in m.split("\n"))
        with Subscriber(work / "d.sock") as sub:
            _, snapshots = greet(sub)
            assert {(s["trusted"], s["mode"]) for s in snapshots} == {(True, "native")}
            new = repos[1].commit("seen natively")
            event = sub.next("event")
            assert event["current_revision"] == new
    finally:
        try:
            if holder.poll() is None:
                holder.kill()
                holder.wait(timeout=WAIT)
            if daemon is not None:
                if daemon.poll() is None:
                    daemon.send_signal(signal.SIGTERM)
                try:
                    daemon.wait(timeout=WAIT)
                except subprocess.TimeoutExpired:
                    daemon.kill()  # SIGTERM was not enough: it must not outlive the test
                    daemon.wait()
                    raise
        finally:
            if daemon is not None:
                daemon.stderr.close()  # type: ignore[union-attr]
            holder.stdout.close()  # type: ignore[union-attr]
            if holder.stdin is not None and not holder.stdin.closed:
                holder.stdin.close()


@pytest.mark.serial  # every other process of the user would fall back to polling meanwhile
def test_daemon_polls_while_every_instance_is_taken_says_so_and_returns_to_native(tmp_path: Path) -> None:
    repos = [make_repo(tmp_path / "a"), make_repo(tmp_path / "b")]
    for attempt in range(3):
        with short_dir() as work:
            notes = Notifications(work / "notify")
            try:
                _attempt(work, repos, notes)
            except _RaceLost:
                # Other programs of this user open and close instances all the time; one
                # freed between the holder's last try and the daemon's start. Not what
                # this test is about: hold them all again.
                if attempt == 2:
                    raise
            else:
                return
            finally:
                notes.close()
