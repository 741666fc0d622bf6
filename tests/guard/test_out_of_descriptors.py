"""Out of descriptors is the reader's fault, not the checkout's: never ``unreadable`` for it.

A real ``RLIMIT_NOFILE``, lowered in a child process that runs a guard with its local
watcher: HEAD's read fails with ``EMFILE`` while a commit lands.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.daemons import LineReader
from tests.support.repos import Repo

ROOT = Path(__file__).resolve().parents[2]

CHILD = r"""
import errno, json, logging, os, resource, sys, threading
from stalewatch import Guard, LocalSource

events, seen, warned = [], threading.Condition(), threading.Event()

class Warned(logging.Handler):
    def emit(self, record):
        if "cannot read HEAD" in record.getMessage():
            with seen:
                warned.set()
                seen.notify_all()

logging.getLogger("stalewatch").addHandler(Warned())
guard = Guard.for_checkout(sys.argv[1], source=LocalSource(verify_interval=3600))

def on_event(event):
    with seen:
        events.append(event.status.value)
        seen.notify_all()

guard.subscribe(on_event)
guard.start()
assert guard.wait_ready(10)
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (max(int(fd) for fd in os.listdir("/proc/self/fd")) + 8, hard))
held = []
while True:
    try:
        held.append(os.open("/dev/null", os.O_RDONLY))
    except OSError as exc:
        assert exc.errno == errno.EMFILE, exc
        break
print("exhausted", flush=True)
sys.stdin.readline()  # the test committed
with seen:  # the watcher read HEAD: it either warned or told an event
    assert seen.wait_for(lambda: warned.is_set() or events, timeout=10), "no read of HEAD"
try:
    guard.check()
    checked = "passed"
except Exception as exc:
    checked = type(exc).__name__
print(json.dumps({"events": list(events), "status": guard.status.value,
                  "trusted": guard.snapshot().trusted, "check": checked}), flush=True)
for fd in held:
    os.close(fd)
resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
with seen:
    seen.wait_for(lambda: "stale" in events, timeout=10)
print(json.dumps({"events": list(events), "trusted": guard.snapshot().trusted}), flush=True)
guard.stop()
"""


@pytest.mark.parametrize("through", ["checkout", "deploy link"])
def test_running_out_of_descriptors_distrusts_the_flag_and_reads_again(
    git_repo: Repo, tmp_path: Path, through: str
) -> None:
    # Through a deploy link, the revision is HEAD of the release the link names: its
    # read short of descriptors is no more the checkout's fault than HEAD's own.
    path = git_repo.path
    if through == "deploy link":
        path = tmp_path / "current"
        path.symlink_to(git_repo.path)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert child.stdin is not None and child.stdout is not None
    try:
        lines = LineReader(child.stdout)
        assert lines.line() == "exhausted"
        git_repo.commit()  # HEAD moves while the child cannot open a file
        child.stdin.write(b"go\n")
        child.stdin.flush()
        during = json.loads(lines.line(timeout=20))
        # Nothing is known about HEAD: no event, the last status stands, the flag is
        # distrusted (the barrier reads for itself), and the barrier does not block.
        assert during == {"events": [], "status": "current", "trusted": False, "check": "passed"}
        after = json.loads(lines.line(timeout=20))
        # Descriptors back: read again within the backoff, not at the next verification.
        assert after == {"events": ["stale"], "trusted": True}
        assert child.wait(timeout=10) == 0
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        _, err = child.communicate()
    assert b"Traceback" not in err, err.decode(errors="replace")
