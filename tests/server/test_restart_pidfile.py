"""A pidfile's pid is signalled only while it is the process the file was written for (R10).

Issue 15, item 7: a stale pidfile whose pid now belonged to an unrelated process; the
daemon sent it SIGHUP and killed it.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from stalewatch.core.procs import Proc, read_proc
from stalewatch.protocol.codec import encode
from stalewatch.protocol.messages import register_message
from stalewatch.server.restart.actions.handoff import Begun, pending, promoted
from stalewatch.server.restart.pidfile import TOLERANCE, Claim, judge, read_pidfile, server, signal_server
from tests.support.children import Child, python_child
from tests.support.daemons import Subscriber, greet, short_dir, start_daemon
from tests.support.repos import Repo
from tests.support.restarts import phases

PATH = Path("/run/app.pid")


def _claim(pid: int = 4242, written: float = 1000.0, owner: int = 1000) -> Claim:
    return Claim(PATH, pid, written, owner)


def _proc(pid: int = 4242, start: float = 990.0, uids: tuple[int, int] = (1000, 1000)) -> Proc:
    return Proc(pid, 1, start, uids)


@pytest.mark.unit
@pytest.mark.parametrize(
    ("claim", "proc", "refused"),
    [
        (_claim(), _proc(), None),  # started, then wrote its file
        (_claim(), _proc(start=1000.0 + TOLERANCE), None),  # within the clocks' tolerance
        (_claim(), _proc(uids=(0, 1000)), None),  # dropped privileges: effective uid owns it
        (_claim(), _proc(start=1000.0 + TOLERANCE + 0.01), "another process got the pid"),
        (_claim(), None, "which does not run"),
        (_claim(owner=0), _proc(), "the file belongs to uid 0"),
        (_claim(pid=1), _proc(pid=1), "never signalled"),
        (_claim(pid=777), _proc(pid=777), "never signalled"),  # the daemon itself
    ],
)
def test_r10_a_pid_is_the_server_only_while_it_is_the_files_process(
    claim: Claim, proc: Proc | None, refused: str | None
) -> None:
    reason = judge(claim, proc, me=777)
    if refused is None:
        assert reason is None
    else:
        assert reason is not None and refused in reason and str(PATH) in reason


CHILD = """
import os, signal, sys
def told(signum, frame):
    print(signal.Signals(signum).name, flush=True)
for name in ("SIGHUP", "SIGUSR1", "SIGUSR2", "SIGTERM", "SIGWINCH"):
    signal.signal(getattr(signal, name), told)
path = {path!r}
if path:
    with open(path + ".tmp", "w") as out:
        out.write(f"{{os.getpid()}}\\n")
    os.rename(path + ".tmp", path)  # as gunicorn writes its pidfile
print("ready", flush=True)
sys.stdin.read()
"""


@contextmanager
def process(tmp: Path, pidfile: Path | None) -> Iterator[Child]:
    """A process reporting every signal it gets; it writes ``pidfile`` itself if given."""
    code = CHILD.format(path=str(pidfile) if pidfile else "")
    with python_child(code, cwd=tmp, env=dict(os.environ), stderr=tmp / "child.err") as child:
        assert child.line().strip() == "ready"
        yield child


def reused(tmp: Path, child: Child) -> Path:
    """A pidfile written before ``child`` started, naming the pid ``child`` now has."""
    path = tmp / "stale.pid"
    path.write_text(f"{child.proc.pid}\n")
    started = read_proc(child.proc.pid)
    assert started is not None
    written = started.start - 60.0  # the server that wrote it died; its pid was given again
    os.utime(path, (written, written))
    return path


def test_r10_the_pidfiles_own_process_is_signalled(tmp_path: Path) -> None:
    pidfile = tmp_path / "app.pid"
    with process(tmp_path, pidfile) as child:
        proc, detail = signal_server(pidfile, "USR2")
        assert proc is not None and proc.pid == child.proc.pid, detail
        assert child.line().strip() == "SIGUSR2"


def test_r10_a_stale_pidfile_whose_pid_was_reused_is_never_signalled(tmp_path: Path) -> None:
    with process(tmp_path, None) as stranger:
        path = reused(tmp_path, stranger)
        proc, detail = signal_server(path, "HUP")
        assert proc is None
        assert detail.startswith("refused: ") and "another process got the pid" in detail
        assert server(path).stopped  # what runs: no server (R10)
        os.kill(stranger.proc.pid, signal.SIGUSR1)  # sent after the refusal
        # Pending signals are delivered lowest first: a SIGHUP sent before would come first.
        assert stranger.line().strip() == "SIGUSR1"
        assert stranger.proc.poll() is None


def test_r10_a_pidfile_is_read_without_following_links_and_holds_one_pid(tmp_path: Path) -> None:
    good = tmp_path / "good.pid"
    good.write_text(f"{os.getpid()}\n")
    (tmp_path / "link.pid").symlink_to(good)
    os.mkfifo(tmp_path / "fifo.pid")
    cases = {
        "link": "cannot read",
        "fifo": "not a regular file",
        "missing": "does not exist",
    }
    for name, text in {"huge": "9" * 30, "negative": "-15", "underscored": "1_234", "bad": "x"}.items():
        (tmp_path / f"{name}.pid").write_text(text)  # huge: os.kill raised OverflowError
        cases[name] = "does not hold a pid"
    for name, reason in cases.items():
        found = read_pidfile(tmp_path / f"{name}.pid")
        assert isinstance(found, str) and reason in found, (name, found)
    claim = read_pidfile(good)
    assert isinstance(claim, Claim) and claim.pid == os.getpid() and claim.owner == os.getuid()
    assert signal_server(good, "USR1")[1].endswith("never signalled (init or the daemon itself)")


# slow (quick: end to end of test_r10_a_stale_pidfile_whose_pid_was_reused_is_never_signalled)
@pytest.mark.slow
def test_r10_the_daemon_refuses_to_signal_a_reused_pid_and_says_why(git_repo: Repo) -> None:
    """End to end: a server still registered on old code wants a restart; the pidfile lies."""
    with short_dir() as workdir, process(workdir, None) as stranger:
        path = reused(workdir, stranger)
        config = workdir / "stalewatch.toml"
        config.write_text(
            f'[[checkout]]\npath = "{git_repo.path}"\n\n[checkout.restart]\n'
            f'pidfile = "{path}"\nsignal = "HUP"\nsettle = 0.05\nmin_interval = 0\n'
        )
        config.chmod(0o600)
        with (
            start_daemon(workdir, "--config", str(config)) as daemon,
            Subscriber(daemon.socket) as old,
            Subscriber(daemon.socket) as sub,
        ):
            greet(old)
            greet(sub)
            old.send(encode(register_message(str(git_repo.path), git_repo.head())))
            assert sub.next("processes", skip=("ping", "health", "restart"))["processes"]
            new = git_repo.commit()
            refused = phases(sub, "refused", "failed", "confirmed")[-1]
            assert (refused["phase"], refused["revision"]) == ("refused", new), refused
            assert refused["reason"].startswith("signal: ") and "stale pidfile" in refused["reason"]
            os.kill(stranger.proc.pid, signal.SIGUSR1)
            assert stranger.line().strip() == "SIGUSR1" and stranger.proc.poll() is None


def test_r9_a_new_masters_pidfile_is_a_handoff_under_way_only_while_its_process_runs(tmp_path: Path) -> None:
    """A ``<pidfile>.2`` whose new master was killed would block every later action."""
    pidfile = tmp_path / "app.pid"
    new = tmp_path / "app.pid.2"
    assert pending(pidfile) is None  # no .2: nothing under way
    with process(tmp_path, new) as child:
        under_way = pending(pidfile)
        assert under_way is not None and f"(pid {child.proc.pid})" in under_way
        assert f"old master (pid {os.getpid()})" in under_way  # its parent still runs
        child.proc.kill()
        child.proc.wait()
    assert new.exists() and pending(pidfile) is None  # a dead new master's leftover: ignored
    with process(tmp_path, None) as stranger:
        reused(tmp_path, stranger).rename(new)  # the dead master's pid given to another
        assert pending(pidfile) is None
    assert promoted(pidfile, threading.Event(), wait=0.0) is None


def test_r9_retiring_the_old_master_signals_only_that_very_process_and_says_what_happened(
    tmp_path: Path,
) -> None:
    """A handoff's retire: TERM to the old master while it is the process signalled at the
    handoff; gone (exited, or its pid given to another since): said so, nothing signalled."""
    pidfile = tmp_path / "app.pid"
    with process(tmp_path, None) as old:
        proc = read_proc(old.proc.pid)
        assert proc is not None
        said = Begun(pidfile, proc, time.time()).retire()
        assert said.startswith(f"sent SIGTERM to the old master (pid {proc.pid})"), said
        assert old.line().strip() == "SIGTERM"
    with process(tmp_path, None) as old:
        proc = read_proc(old.proc.pid)
        assert proc is not None
        old.proc.kill()
        old.proc.wait()
    begun = Begun(pidfile, proc, time.time())
    assert begun.retire() == f"the old master (pid {proc.pid}) is gone already"
    assert begun.retired  # the new master serves: never aborted
    with process(tmp_path, None) as stranger:
        now = read_proc(stranger.proc.pid)
        assert now is not None
        earlier = dataclasses.replace(now, start=now.start - 60.0)  # the old master had this pid
        said = Begun(pidfile, earlier, time.time()).retire()
        assert said == f"the old master (pid {now.pid}) is gone already", said
        # Sent after the retire; pending signals are handled lowest first, and WINCH > TERM.
        os.kill(stranger.proc.pid, signal.SIGWINCH)
        assert stranger.line().strip() == "SIGWINCH"  # a SIGTERM sent before would have come first
        assert stranger.proc.poll() is None
