"""What the publisher sends, and when it logs it: a real client set over a real Unix socket."""

from __future__ import annotations

import contextlib
import json
import logging
import selectors
import socket
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import pytest

from stalewatch.core.status import Event, Status
from stalewatch.server.checkout import Checkout
from stalewatch.server.connections import ClientSet
from stalewatch.server.publisher import Publisher
from stalewatch.server.registry import Registry
from tests.support.daemons import short_dir

pytestmark = pytest.mark.unit

A, B = "a" * 40, "b" * 40


@pytest.fixture
def served() -> Iterator[tuple[ClientSet, Publisher, socket.socket]]:
    """A client set with one accepted client, its publisher, and the client's own socket."""
    with (
        short_dir() as path,
        contextlib.closing(selectors.DefaultSelector()) as selector,
        socket.socket(socket.AF_UNIX) as listener,
        socket.socket(socket.AF_UNIX) as peer,
    ):
        listener.bind(str(path / "s"))
        listener.listen()
        listener.setblocking(False)
        clients = ClientSet(selector, max_clients=4, queue_limit=64, buffer=1 << 16)
        peer.connect(str(path / "s"))
        assert clients.accept(listener, lambda client: None, 1)
        assert len(clients) == 1
        try:
            yield clients, Publisher(clients, Registry()), peer
        finally:
            clients.close_all()


def test_an_event_is_logged_only_after_its_line_was_written(
    served: tuple[ClientSet, Publisher, socket.socket], caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 17: the journal line comes after the subscribers' flush, once per event."""
    clients, publisher, peer = served
    entry = cast(Checkout, SimpleNamespace(key="/srv/co", base=100))
    event = Event(Path("/srv/co"), Status.STALE, Status.CURRENT, A, B, 2, 0.0)
    caplog.set_level(logging.INFO, logger="stalewatch.server.publisher")

    publisher.event(entry, event)
    clients.flush_pending()
    assert caplog.records == []  # written to the client, not yet logged
    peer.settimeout(5.0)
    line = json.loads(peer.recv(1 << 16).split(b"\n")[0])
    assert (line["type"], line["generation"], line["current_revision"]) == ("event", 102, B)

    publisher.log_events()
    publisher.log_events()  # nothing new: nothing logged twice
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (logging.WARNING, f"stalewatch: /srv/co is stale (loaded {A}, current {B}, generation 102)")
    ]
