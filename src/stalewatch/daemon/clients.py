"""The daemon's socket clients: bounded queues, non-blocking writes, dropping.

Every write is non-blocking. A line that does not fit in a client's socket buffer
waits in that client's queue; a queue that grows past its bound means the client is
not reading, so it is told (an ``error`` line, if it reads within a grace period) and
dropped. Nothing here ever waits for a client, so one stuck subscriber cannot delay
another.
"""

from __future__ import annotations

import contextlib
import logging
import selectors
import socket
import time
from collections import deque
from collections.abc import Callable, Iterator

from .protocol import MAX_REQUEST_LINE, LineReader, ProtocolError, decode, encode, error_message

__all__ = ["Client", "ClientSet"]

logger = logging.getLogger(__name__)

DROP_GRACE = 5.0  # seconds a dropped client gets to read its error line


class Client:
    """One subscriber connection."""

    def __init__(self, sock: socket.socket, number: int) -> None:
        self.sock = sock
        self.number = number
        self.out: deque[bytes] = deque()
        self.offset = 0  # bytes of out[0] already sent
        self.reader = LineReader(MAX_REQUEST_LINE)
        self.gens: dict[str, int] = {}  # last generation sent per checkout (exactly once)
        self.closing_at: float | None = None
        self.mask = 0


def _request(line: bytes) -> dict[str, object]:
    request = decode(line)
    if request["type"] != "ping":
        raise ProtocolError(line, f"unknown request type {request['type']!r}")
    return request


class ClientSet:
    """All connected clients of one daemon; used from the daemon's loop thread only.

    Args:
        selector: the loop's selector (clients register with themselves as data).
        max_clients: connections past this are told and closed at once.
        queue_limit: lines a client may have queued unread before it is dropped.
        buffer: the kernel send buffer per client (``SO_SNDBUF``), in bytes.
    """

    def __init__(
        self, selector: selectors.BaseSelector, max_clients: int, queue_limit: int, buffer: int
    ) -> None:
        self._selector = selector
        self.max_clients = max_clients
        self.queue_limit = queue_limit
        self.buffer = buffer
        self._clients: dict[int, Client] = {}
        self._numbers = 0

    def __len__(self) -> int:
        """The clients being served (a dropped one no longer counts)."""
        return sum(1 for c in self._clients.values() if c.closing_at is None)

    def __iter__(self) -> Iterator[Client]:
        """The clients still being served (not those closing after a drop)."""
        return iter([c for c in self._clients.values() if c.closing_at is None])

    def accept(self, listener: socket.socket, greet: Callable[[Client], None]) -> None:
        """Accept every pending connection; ``greet`` queues its first lines."""
        while True:
            try:
                sock, _ = listener.accept()
            except BlockingIOError:
                return
            except OSError as exc:  # EMFILE and friends: keep serving the others
                logger.warning("stalewatch: cannot accept a client: %s", exc)
                return
            sock.setblocking(False)
            # Lines the kernel holds for a client that does not read are invisible to
            # the queue bound: keep that share small so a stuck client is noticed.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self.buffer)
            if len(self) >= self.max_clients:
                logger.warning("stalewatch: refusing a client: %d clients already", len(self._clients))
                detail = f"the daemon serves at most {self.max_clients} clients"
                with contextlib.suppress(OSError):  # best effort: it is refused either way
                    sock.send(encode(error_message("too-many-clients", detail)))
                sock.close()
                continue
            self._numbers += 1
            client = Client(sock, self._numbers)
            self._clients[client.number] = client
            client.mask = selectors.EVENT_READ
            self._selector.register(sock, client.mask, client)
            logger.debug("stalewatch: client %d connected", client.number)
            greet(client)
            self.flush(client)

    def serve(self, client: Client, mask: int) -> None:
        """Handle readiness reported by the selector."""
        if mask & selectors.EVENT_WRITE:
            self.flush(client)
        if mask & selectors.EVENT_READ and client.number in self._clients and client.closing_at is None:
            self._read(client)

    def _read(self, client: Client) -> None:
        try:
            data = client.sock.recv(4096)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            logger.debug("stalewatch: client %d disconnected", client.number)
            self.close(client)
            return
        try:
            for line in client.reader.feed(data):
                if not line.strip():
                    continue
                request = _request(line)
                reply: dict[str, object] = {"type": "pong", "at": time.time()}
                if "id" in request:
                    reply["id"] = request["id"]
                self.send(client, encode(reply))
        except ProtocolError as exc:
            logger.warning("stalewatch: closing client %d: %s", client.number, exc)
            self.drop(client, "bad-request", str(exc))

    def send(self, client: Client, line: bytes, *, flush: bool = True) -> None:
        """Queue ``line`` for ``client`` and write what fits; drop it past the bound."""
        if client.closing_at is not None:
            return
        client.out.append(line)
        if len(client.out) > self.queue_limit:
            logger.warning(
                "stalewatch: dropping client %d: more than %d lines unread", client.number, self.queue_limit
            )
            self.drop(client, "slow-client", f"more than {self.queue_limit} lines queued unread")
        elif flush:
            self.flush(client)

    def broadcast(self, line: bytes) -> None:
        """Send ``line`` to every client being served."""
        for client in self:
            self.send(client, line)

    def drop(self, client: Client, reason: str, detail: str) -> None:
        """Tell the client why (if it reads within the grace period), then close it."""
        partial = client.out[0] if client.out and client.offset else None
        client.out.clear()
        if partial is not None:
            client.out.append(partial)  # finish the line already started: keep it valid JSON
        client.out.append(encode(error_message(reason, detail)))
        client.closing_at = time.monotonic() + DROP_GRACE
        self.flush(client)

    def flush(self, client: Client) -> None:
        """Write as much of the queue as the socket takes now, without blocking."""
        try:
            while client.out:
                head = client.out[0]
                client.offset += client.sock.send(memoryview(head)[client.offset :])
                if client.offset < len(head):
                    break  # the socket buffer is full: wait for EVENT_WRITE
                client.out.popleft()
                client.offset = 0
        except BlockingIOError:
            pass
        except OSError:
            self.close(client)
            return
        if not client.out and client.closing_at is not None:
            self.close(client)
            return
        mask = selectors.EVENT_READ if client.closing_at is None else 0
        if client.out:
            mask |= selectors.EVENT_WRITE
        if mask != client.mask and client.number in self._clients:
            if mask and client.mask:
                self._selector.modify(client.sock, mask, client)
            elif mask:
                self._selector.register(client.sock, mask, client)
            else:
                self._selector.unregister(client.sock)
            client.mask = mask

    def close(self, client: Client) -> None:
        """Close one client (harmless twice)."""
        if self._clients.pop(client.number, None) is None:
            return
        if client.mask:
            self._selector.unregister(client.sock)
        # Closing with unread input makes the kernel reset the connection, and the
        # client may then lose the error line it was sent: discard the input first.
        with contextlib.suppress(OSError):
            for _ in range(64):
                if not client.sock.recv(65536):
                    break
        client.sock.close()

    def next_deadline(self) -> float | None:
        """When the earliest dropped client must be closed, if any."""
        deadlines = [c.closing_at for c in self._clients.values() if c.closing_at is not None]
        return min(deadlines) if deadlines else None

    def expire(self, now: float) -> None:
        """Close dropped clients whose grace period is over."""
        for client in list(self._clients.values()):
            if client.closing_at is not None and now >= client.closing_at:
                self.close(client)

    def close_all(self) -> None:
        """Close every client."""
        for client in list(self._clients.values()):
            self.close(client)
