"""Shared fixtures: real git repositories in tmp_path, and a no-thread-leak check."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import threading
import time
import traceback
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

# Commits must not depend on the machine's git identity or config.
_GIT_ENV = {
    "GIT_AUTHOR_NAME": "stalewatch tests",
    "GIT_AUTHOR_EMAIL": "tests@stalewatch.invalid",
    "GIT_COMMITTER_NAME": "stalewatch tests",
    "GIT_COMMITTER_EMAIL": "tests@stalewatch.invalid",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
}


class Repo:
    """A real git repository for a test, with helpers that run real git commands."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def git(self, *args: str, check: bool = True) -> str:
        done = subprocess.run(
            ["git", *args],
            cwd=self.path,
            env={**os.environ, **_GIT_ENV},
            capture_output=True,
            text=True,
            check=False,
            timeout=30,
        )
        if check and done.returncode != 0:
            raise AssertionError(f"git {' '.join(args)} failed: {done.stderr}")
        return done.stdout.strip()

    def write(self, name: str, text: str) -> Path:
        path = self.path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return path

    def commit(self, message: str = "change", name: str = "module.py") -> str:
        """Append a line to ``name``, commit it, return the new HEAD."""
        path = self.path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a") as f:
            f.write(f"# {message}\n")
        self.git("add", name)
        self.git("commit", "-q", "-m", message)
        return self.head()

    def head(self) -> str:
        return self.git("rev-parse", "HEAD")


def make_repo(path: Path, *, initial: bool = True) -> Repo:
    path.mkdir(parents=True, exist_ok=True)
    repo = Repo(path)
    repo.git("init", "-q", "-b", "main")
    if initial:
        repo.write("module.py", "VALUE = 1\n")
        repo.git("add", "module.py")
        repo.git("commit", "-q", "-m", "initial")
    return repo


def make_agent(path: Path, source: str = "class AIAgent:\n    pass\n") -> Repo:
    """A Hermes Agent checkout: a real repository whose one commit tracks ``run_agent.py``."""
    repo = make_repo(path, initial=False)
    repo.write("run_agent.py", source)
    repo.git("add", "run_agent.py")
    repo.git("commit", "-q", "-m", "agent")
    return repo


@pytest.fixture
def git_repo(tmp_path: Path) -> Repo:
    """A repository at tmp_path/'checkout' with one commit of ``module.py``."""
    return make_repo(tmp_path / "checkout")


@pytest.fixture(autouse=True)
def no_thread_leak() -> Iterator[None]:
    """Fail a test that leaves a thread running (a watcher someone forgot to stop)."""
    before = set(threading.enumerate())
    yield
    deadline = time.monotonic() + 3.0
    leaked: list[threading.Thread] = []
    while time.monotonic() < deadline:
        leaked = [t for t in threading.enumerate() if t not in before and t.is_alive()]
        if not leaked:
            return
        leaked[0].join(timeout=0.05)
    pytest.fail(f"threads leaked: {[t.name for t in leaked]}")


class Recorder:
    """Subscribes to a guard and lets a test wait for a status, without sleeping."""

    def __init__(self, guard: object) -> None:
        import queue

        from stalewatch import Event, Guard

        assert isinstance(guard, Guard)
        self.events: list[Event] = []
        self._queue: queue.Queue[Event] = queue.Queue()
        self.unsubscribe = guard.subscribe(self._on_event)

    def _on_event(self, event: object) -> None:
        self.events.append(event)  # type: ignore[arg-type]
        self._queue.put(event)  # type: ignore[arg-type]

    def wait_for(self, status: str, revision: str | None = None, timeout: float = 10.0) -> object:
        """Return the first not-yet-consumed event with this status (and revision)."""
        import queue

        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            try:
                event = self._queue.get(timeout=max(0.0, remaining))
            except queue.Empty:
                raise AssertionError(
                    f"no {status} event within {timeout} s; saw {[e.status.value for e in self.events]}"
                ) from None
            if event.status.value == status and (revision is None or event.current_revision == revision):
                return event


@pytest.fixture
def recorder() -> type[Recorder]:
    return Recorder


def report_from_fork(
    body: Callable[[], str], *, timeout: int = 20, holding: threading.Lock | None = None
) -> tuple[int, str]:
    """Fork (while this thread holds ``holding``, if given, as a parent's thread may),
    run ``body`` in the child under an alarm of ``timeout`` s; return the child's exit
    status and what ``body`` returned (on an exception: its traceback, exit status 1).

    A child that deadlocks (on a lock inherited held, say) is killed by its alarm
    (status ``-SIGALRM``); the parent waits at most a little longer, then kills it.
    """
    read_fd, write_fd = os.pipe()
    with holding or contextlib.nullcontext(), warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # fork with threads (3.12+)
        pid = os.fork()
        if pid == 0:  # child: leave without running pytest's teardown
            code, report = 1, b""
            try:
                os.close(read_fd)
                signal.signal(signal.SIGALRM, signal.SIG_DFL)
                signal.alarm(timeout)
                report = body().encode()
                code = 0
            except BaseException:
                report = traceback.format_exc().encode()
            finally:
                try:
                    view = memoryview(report)
                    while view:
                        view = view[os.write(write_fd, view) :]
                finally:
                    os._exit(code)
    os.close(write_fd)
    chunks: list[bytes] = []
    status: int | None = None
    try:
        poller = select.poll()
        poller.register(read_fd, select.POLLIN)
        deadline = time.monotonic() + timeout + 10.0  # the alarm ends it before this
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"forked child {pid} still running after {timeout + 10} s")
            if poller.poll(left * 1000):
                chunk = os.read(read_fd, 65536)
                if not chunk:
                    break
                chunks.append(chunk)
        _, status = os.waitpid(pid, 0)
    finally:
        os.close(read_fd)
        if status is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), b"".join(chunks).decode(errors="replace")


def exit_status_in_fork(body: Callable[[], None], *, holding: threading.Lock, timeout: int = 5) -> int:
    """Fork while this thread holds ``holding`` (as a parent's thread may), run ``body``
    in the child under an alarm of ``timeout`` s, return the child's exit status.

    A child whose ``body`` deadlocks on a lock inherited held is killed by its alarm.
    """

    def reporting() -> str:
        body()
        return ""

    code, _ = report_from_fork(reporting, timeout=timeout, holding=holding)
    return code


CI_INSTALLS = ".ci/run installs it"  # in a skip's reason: the part is Debian's, CI has it


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """On CI (``CI=true``, as ``.ci/run`` runs), a test skipped for want of a part
    ``.ci/run`` installs (its reason says ``.ci/run installs it``) fails instead: a
    silent install failure must not turn those tests into passes.
    """
    report = yield
    if report.skipped and os.environ.get("CI") == "true" and CI_INSTALLS in str(report.longrepr):
        report.outcome = "failed"
        why = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        report.longrepr = f"on CI, where .ci/run installs what it needs: {why}"
    return report
