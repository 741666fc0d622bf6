"""The loop's inbox: a message posted while the loop waits is handled on the posting
thread (issue 27: no hop to the loop's thread on an update's path); during the loop's
turn, and from a reload's ``Bound`` on, it is the loop's."""

from __future__ import annotations

import threading
from typing import cast

from stalewatch.server.inbox import Inbox, Message
from stalewatch.server.reloader import Bound


def _message(name: str) -> Message:
    return cast(Message, name)  # the inbox only queues and hands messages on


class _Loop:
    """An inbox with a handler that records what it took, and on which thread."""

    def __init__(self) -> None:
        self.woken = 0
        self.handled: list[tuple[str, object]] = []
        self.inbox = Inbox(self._wake, self._handle)

    def _wake(self) -> None:
        self.woken += 1

    def _handle(self) -> None:
        name = threading.current_thread().name
        self.handled += [(name, message) for message in self.inbox.take(posted_only=True)]


def _post_from_thread(inbox: Inbox, message: Message, name: str) -> None:
    thread = threading.Thread(target=inbox.post, args=(message,), name=name)
    thread.start()
    thread.join(5)
    assert not thread.is_alive()


def test_a_post_while_the_loop_waits_is_handled_on_the_posting_thread_then_the_loop_is_woken() -> None:
    loop = _Loop()
    _post_from_thread(loop.inbox, _message("event"), "poster")
    assert loop.handled == [("poster", "event")]
    assert loop.woken == 1  # for what waits until the line is out (the journal, STATUS=)
    assert list(loop.inbox.take()) == []


def test_a_post_during_the_loops_turn_is_left_to_the_loop_and_never_waits_for_it() -> None:
    loop = _Loop()
    with loop.inbox.turn:  # the loop is in its turn
        _post_from_thread(loop.inbox, _message("first"), "poster")
        _post_from_thread(loop.inbox, _message("second"), "poster")
        assert loop.handled == []
        assert loop.woken == 1  # one wake-up per batch
        assert list(loop.inbox.take()) == ["first", "second"]


def test_a_bound_and_what_follows_it_are_the_loops_in_order() -> None:
    loop = _Loop()
    bound = Bound()
    with loop.inbox.turn:
        loop.inbox.post(_message("before"))
        loop.inbox.post(bound)
    _post_from_thread(loop.inbox, _message("after"), "poster")
    assert loop.handled == [("poster", "before")]
    assert list(loop.inbox.take()) == [bound, "after"]


def test_once_closed_nothing_is_handled_on_a_posting_thread() -> None:
    loop = _Loop()
    loop.inbox.close()
    _post_from_thread(loop.inbox, _message("late"), "poster")
    assert loop.handled == []
    assert list(loop.inbox.take()) == ["late"]
