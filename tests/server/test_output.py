"""A hook's output: bounded in bytes; pipes held by background writers drained, within a bound."""

from __future__ import annotations

import logging
import os
import select
import signal
import subprocess

import pytest

from stalewatch.server.drain import MAX_DRAINED, BoundedOutput, OutputDrain
from tests.support.daemons import WAIT


def test_bounded_output_keeps_head_and_tail_and_counts_the_rest() -> None:
    out = BoundedOutput(head=10, tail=10)
    for _ in range(10_000):
        out.feed(b"y\n")
    assert (out.total, len(out.head), len(out.tail), out.dropped) == (20_000, 10, 10, 19_980)
    lines = out.lines()
    assert lines[5] == "[... 19980 bytes not logged ...]" and lines.count("y") == 10
    whole = BoundedOutput(head=10, tail=10)
    whole.feed(b"ab\ncd\x1b[2J\n")  # contiguous: nothing dropped, escapes escaped
    assert whole.lines() == ["ab", "cd\\x1b[2J"]


def _hung_up(write_end: int, timeout: float = WAIT) -> bool:
    """Wait until the pipe's read end is closed (POLLERR on the write end)."""
    poller = select.poll()
    poller.register(write_end, 0)  # an empty mask: only POLLERR/POLLHUP are reported
    return bool(poller.poll(timeout * 1000))


def test_the_drain_holds_at_most_max_drained_pipes(caplog: pytest.LogCaptureFixture) -> None:
    """A hook run often, each time leaving `sleep 3600 &` on its stdout, costs bounded fds."""
    drain = OutputDrain()
    writers: list[int] = []
    try:
        with caplog.at_level(logging.INFO, logger="stalewatch.server"):
            for n in range(MAX_DRAINED + 6):
                read_end, write_end = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
                writers.append(write_end)
                drain.adopt(read_end, f"hook {n}", BoundedOutput())
            assert len(drain._pipes) == MAX_DRAINED
            for oldest in writers[:6]:
                assert _hung_up(oldest)  # closed by the drain: its writer would get EPIPE
            assert not _hung_up(writers[6], timeout=0.05)  # the others are still drained
            thread = drain._thread
            assert thread is not None
            os.write(writers[-1], b"still read\n")
            while writers:
                os.close(writers.pop())  # every writer gone: the drain's thread ends
            thread.join(WAIT)
            assert not thread.is_alive()
    finally:
        for fd in writers:
            os.close(fd)
        drain.stop()
    assert caplog.text.count("closing the oldest") == 6
    assert f"hook {MAX_DRAINED + 5}: still read" in caplog.text
    assert not drain._pipes


def test_a_background_flood_is_cut_off_instead_of_busying_the_drain_for_ever(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """`yes &` left behind by a hook: the pipe is closed past the rate, and `yes` ends (EPIPE)."""
    drain = OutputDrain()
    read_end, write_end = os.pipe()  # as a hook's: the writer blocks, our end does not
    os.set_blocking(read_end, False)
    flood = subprocess.Popen(["yes"], stdout=write_end)
    os.close(write_end)
    try:
        with caplog.at_level(logging.INFO, logger="stalewatch.server"):
            drain.adopt(read_end, "on_stale hook for /srv/app", BoundedOutput())
            assert flood.wait(timeout=WAIT) in (1, -signal.SIGPIPE)  # EPIPE, or SIGPIPE
            # The drain logs what it kept after closing the pipe: join it while INFO is
            # still captured (`yes` may exit before the drain's last line is logged).
            drain.stop()
    finally:
        flood.kill()
        flood.wait()
        drain.stop()
    assert "writes more than 65536 bytes/s" in caplog.text
    assert "bytes not logged" in caplog.text


def test_a_slow_background_writer_is_drained_for_as_long_as_it_writes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    drain = OutputDrain()
    read_end, write_end = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        with caplog.at_level(logging.INFO, logger="stalewatch.server"):
            drain.adopt(read_end, "hook", BoundedOutput())
            for n in range(20):  # 20 lines, well under the rate: never cut off
                os.write(write_end, f"request {n}\n".encode())
                assert not _hung_up(write_end, timeout=0.01)
            thread = drain._thread
            os.close(write_end)
            write_end = -1
            assert thread is not None
            thread.join(WAIT)
    finally:
        if write_end >= 0:
            os.close(write_end)
        drain.stop()
    assert "closed by its last writer" in caplog.text and "hook: request 19" in caplog.text
