"""A Python child process a test talks to line by line, never blocking on it for ever.

Its stdout is read by a thread into a queue, so every line is waited for with a
timeout; its stderr goes to a file, which can be read at any moment (reading a pipe
would block while the child waits on its stdin); and it is killed, whatever happened,
when the ``with`` block ends.
"""

from __future__ import annotations

import contextlib
import json
import queue
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

WAIT = 20.0  # seconds: a bound for what takes well under one


class Child:
    """A running child: :meth:`line` reads its stdout, :meth:`send` writes its stdin."""

    def __init__(self, proc: subprocess.Popen[str], stderr: Path) -> None:
        self.proc = proc
        self.stderr_path = stderr
        self._lines: queue.SimpleQueue[str | None] = queue.SimpleQueue()  # None: end of output
        self._ended = False
        self._reader = threading.Thread(target=self._read, name="test-child-stdout", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        stdout = self.proc.stdout
        try:
            if stdout is not None:
                for line in stdout:
                    self._lines.put(line)
        except (OSError, ValueError):  # closed under it: the test is over
            pass
        finally:
            self._lines.put(None)

    def stderr(self) -> str:
        """What the child wrote to its stderr so far."""
        return self.stderr_path.read_text(errors="replace")

    def line(self, timeout: float = WAIT) -> str:
        """The next line of its stdout; ``""`` at its end (as ``readline`` returns)."""
        if self._ended:
            return ""
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(
                f"no line from the child in {timeout} s; its stderr:\n{self.stderr()}"
            ) from None
        if line is None:
            self._ended = True
            return ""
        return line

    def json(self, timeout: float = WAIT) -> Any:
        """The next line, decoded (``None`` at the end of its output)."""
        return json.loads(self.line(timeout) or "null")

    def send(self, text: str) -> None:
        stdin = self.proc.stdin
        assert stdin is not None
        stdin.write(text)
        stdin.flush()

    def finish(self, timeout: float = WAIT) -> int:
        """Close its stdin and wait for it to exit; its exit status."""
        if self.proc.stdin is not None:
            with contextlib.suppress(OSError):  # it exited without reading the rest
                self.proc.stdin.close()
        return self.proc.wait(timeout=timeout)

    def close(self) -> None:
        """Kill it if it still runs, reap it, stop the reader; each step whatever the others did."""
        proc = self.proc
        try:
            if proc.poll() is None:
                proc.kill()  # by its pid: Popen never signals a process it has reaped
        finally:
            try:
                proc.wait(timeout=WAIT)
            finally:
                if proc.stdin is not None:
                    with contextlib.suppress(OSError):  # what it never read
                        proc.stdin.close()
                self._reader.join(timeout=WAIT)  # the pipe ends with the child
                if proc.stdout is not None:
                    proc.stdout.close()


@contextlib.contextmanager
def python_child(code: str, *, cwd: Path, env: Mapping[str, str], stderr: Path) -> Iterator[Child]:
    """Run ``python -c code`` with pipes for stdin and stdout and ``stderr`` as its stderr."""
    with stderr.open("w") as err:
        proc: subprocess.Popen[str] = subprocess.Popen(
            [sys.executable, "-c", code],
            cwd=cwd,
            env=dict(env),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
        )
    child = Child(proc, stderr)
    try:
        yield child
    finally:
        child.close()
