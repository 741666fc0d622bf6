"""A headless Chromium driven over the DevTools protocol, for tests of what a page does.

Debian's ``chromium`` (``apt-get install chromium``; ``.ci/run`` installs it). The page
under test logs what it does with ``console.log``; :meth:`Browser.console` waits for
those lines, never sleeping blindly.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
WAIT = 30.0
# What the project's probe found Chromium needs here: no sandbox as root, and none of
# its own network traffic (the machine's network is closed).
FLAGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--remote-debugging-port=0",
]


class Browser:
    """One Chromium process and one page, both gone at :meth:`close`."""

    def __init__(self) -> None:
        if CHROMIUM is None:
            raise RuntimeError("chromium is not installed")
        self._profile = Path(tempfile.mkdtemp(prefix="sw-chromium-"))
        self.proc = subprocess.Popen(
            [CHROMIUM, *FLAGS, f"--user-data-dir={self._profile}", "about:blank"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,  # its helpers (zygote, renderers) are stopped with it
        )
        self._ids = iter(range(1, 1 << 30))
        self._replies: dict[int, queue.SimpleQueue[dict[str, Any]]] = {}
        self._console: queue.SimpleQueue[str] = queue.SimpleQueue()
        self.lines: list[str] = []
        self._ws: ClientConnection | None = None
        self._reader: threading.Thread | None = None
        self._stderr: threading.Thread | None = None
        self._failure: BaseException | None = None
        self._stack = contextlib.ExitStack()
        try:
            self._ws = self._stack.enter_context(
                connect(self._page_socket(), max_size=None, open_timeout=WAIT)
            )
            self._reader = threading.Thread(target=self._read, name="test-cdp-reader", daemon=True)
            self._reader.start()
            self.call("Runtime.enable")
            self.call("Page.enable")
        except BaseException:
            self.close()
            raise

    def _page_socket(self) -> str:
        # Chromium writes much to stderr (dbus complaints here): read all of it on a
        # thread, or a full pipe stalls the browser; the DevTools line gives the port.
        found: queue.SimpleQueue[str] = queue.SimpleQueue()

        def drain() -> None:
            assert self.proc.stderr is not None
            for line in self.proc.stderr:
                match = re.search(r"ws://127\.0\.0\.1:(\d+)/", line)
                if match:
                    found.put(match.group(1))
            found.put("")  # exited

        self._stderr = threading.Thread(target=drain, name="test-chromium-stderr", daemon=True)
        self._stderr.start()
        port = found.get(timeout=WAIT)
        if not port:
            raise RuntimeError("chromium exited before it listened for DevTools")
        import urllib.request

        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=WAIT) as answer:
            targets = json.load(answer)
        page = next(t for t in targets if t.get("type") == "page")
        return str(page["webSocketDebuggerUrl"])

    def _read(self) -> None:
        assert self._ws is not None
        try:
            for raw in self._ws:
                message = json.loads(raw)
                if "id" in message and message["id"] in self._replies:
                    self._replies[message["id"]].put(message)
                elif message.get("method") == "Runtime.consoleAPICalled":
                    args = message["params"].get("args", [])
                    text = " ".join(str(a.get("value", "")) for a in args)
                    self._console.put(text)
        except ConnectionClosed:
            pass  # close() closed it
        except BaseException as exc:  # the caller waiting on a reply learns why
            self._failure = exc

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        """Send one DevTools command and wait for its reply."""
        assert self._ws is not None
        number = next(self._ids)
        reply: queue.SimpleQueue[dict[str, Any]] = queue.SimpleQueue()
        self._replies[number] = reply
        self._ws.send(json.dumps({"id": number, "method": method, "params": params}))
        try:
            answer = reply.get(timeout=WAIT)
        except queue.Empty:
            raise RuntimeError(f"{method}: no reply (reader: {self._failure!r})") from None
        del self._replies[number]
        if "error" in answer:
            raise RuntimeError(f"{method}: {answer['error']}")
        return dict(answer.get("result", {}))

    def open(self, url: str) -> None:
        self.call("Page.navigate", url=url)

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        return result.get("result", {}).get("value")

    def console(self, predicate: Any, timeout: float = WAIT) -> dict[str, Any]:
        """The next ``stalewatch {...}`` line the page logs that matches ``predicate``."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                text = self._console.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no matching console line in {timeout} s; saw {self.lines}") from None
            self.lines.append(text)
            if text.startswith("stalewatch "):
                data: dict[str, Any] = json.loads(text[len("stalewatch ") :])
                if predicate(data):
                    return data

    def close(self) -> None:
        self._stack.close()
        for signum in (signal.SIGTERM, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signum)
            try:
                self.proc.wait(timeout=10)
                break
            except subprocess.TimeoutExpired:
                continue
        for thread in (self._reader, self._stderr):
            if thread is not None:
                thread.join(timeout=10)
        if self.proc.stderr is not None:
            self.proc.stderr.close()
        shutil.rmtree(self._profile, ignore_errors=True)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
