"""The daemon's socket clients, and what they may ask: bounded queues, non-blocking writes.

A line that does not fit in a client's socket buffer waits in its queue; past the
queue's bound the client is told (an ``error`` line, if it reads within a grace period)
and dropped. Nothing waits for a client, and each client's handling runs under
:meth:`ClientSet.isolated`: one client's bug drops that client only. A client asks for
``ping`` (answered ``pong``); a server process registers the revision it loaded
(``register``, one per connection), then says when its work in flight changes
(``inflight``, for the checkout it registered for): the daemon records them.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import logging
import select
import selectors
import socket
import time
from collections import deque
from collections.abc import Callable, Iterator

from ..core.errors import ProtocolError
from ..core.procs import peer_pid
from ..protocol.codec import MAX_REQUEST_LINE, LineReader, encode
from ..protocol.messages import (
    Inflight,
    Register,
    error_message,
    parse_request,
    pong_message,
)
from .observer import DaemonObserver

logger = logging.getLogger(__name__)

DROP_GRACE = 5.0  # seconds a dropped client gets to read its error line
ACCEPT_PAUSE = 0.5  # seconds the listener rests after running out of file descriptors
_FD_EXHAUSTED = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)
_LINES_PER_WRITE = 256  # lines one sendmsg() may carry (IOV_MAX is 1024)


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
        self.half_closed = False  # it shut down its write side only: it still reads
        self.pid = peer_pid(sock)
        self.registered: tuple[str, str] | None = None  # (checkout, revision): one per connection


class ClientSet:
    """All connected clients of one daemon; used under the loop's turn (see :mod:`.inbox`).

    Clients register with the loop's ``selector`` with themselves as data.
    ``queue_limit``: lines a client may have queued unread; ``buffer``: its
    ``SO_SNDBUF``. ``on_register``/``on_inflight`` get a server process's lines (checked
    here), ``on_close`` an admitted client's end; ``observer`` hears of clients admitted,
    closed, dropped or refused (``bad-request``, ``slow-client``, ``too-many-clients``,
    ``error``).
    """

    def __init__(
        self,
        selector: selectors.BaseSelector,
        max_clients: int,
        queue_limit: int,
        buffer: int,
        *,
        observer: DaemonObserver | None = None,
        on_register: Callable[[Client, str, str, int], None] = lambda client, key, revision, n: None,
        on_inflight: Callable[[Client, str, int], None] = lambda client, key, n: None,
        on_close: Callable[[Client], None] = lambda client: None,
    ) -> None:
        self._selector = selector
        self._observer = observer or DaemonObserver()
        self._on_register, self._on_inflight, self._on_close = on_register, on_inflight, on_close
        self.configure(max_clients, queue_limit, buffer)
        self._clients: dict[int, Client] = {}
        self._unflushed: dict[int, Client] = {}  # sent to without a write yet (flush_pending)
        self._numbers = itertools.count(1)
        self.burst = 1  # lines of one greeting (hello + a snapshot per checkout)
        self._paused: tuple[float, socket.socket] | None = None  # out of descriptors: until when
        self.deferring = False  # a posting thread writes the loop's lines: see close()
        self._fd_warned = 0.0

    def configure(self, max_clients: int, queue_limit: int, buffer: int) -> None:
        """Take reloaded limits (for clients from now on; ``buffer`` for new ones)."""
        self.max_clients, self.queue_limit, self.buffer = max_clients, queue_limit, buffer

    def __len__(self) -> int:
        """The clients being served (a dropped one no longer counts)."""
        return sum(1 for c in self._clients.values() if c.closing_at is None)

    def __iter__(self) -> Iterator[Client]:
        """The clients still being served (not those closing after a drop)."""
        return iter([c for c in self._clients.values() if c.closing_at is None])

    @property
    def limit(self) -> int:
        """Lines a client may have queued: ``queue_limit`` beyond one greeting (1 + a
        snapshot per checkout), which a small ``client_queue`` must not count."""
        return self.queue_limit + self.burst

    def accept(self, listener: socket.socket, greet: Callable[[Client], None], limit: int) -> bool:
        """Accept up to ``limit`` pending connections (the rest wait in the backlog for
        the next turns); ``greet`` queues their first lines.

        Returns False when out of file descriptors: the pending connection keeps the
        listener readable, so it rests (out of the selector) for :data:`ACCEPT_PAUSE`
        seconds (:meth:`expire` takes it back; the backlog holds new clients meanwhile).
        """
        for _ in range(limit):
            try:
                sock, _ = listener.accept()
            except BlockingIOError:
                return True
            except OSError as exc:
                if exc.errno not in _FD_EXHAUSTED:
                    logger.warning("stalewatch: cannot accept a client: %s", exc)
                    return True
                now = time.monotonic()
                if now - self._fd_warned >= 60.0:  # once a minute, not once a turn
                    self._fd_warned = now
                    logger.warning(
                        "stalewatch: cannot accept clients: %s; pausing accepts for %.1f s",
                        exc.strerror or exc,
                        ACCEPT_PAUSE,
                    )
                self._selector.unregister(listener)
                self._paused = (now + ACCEPT_PAUSE, listener)
                return False
            with self.isolated(None, sock):
                self._admit(sock, greet)
        return True

    def _admit(self, sock: socket.socket, greet: Callable[[Client], None]) -> None:
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
            self._dropped("too-many-clients")
            return
        client = Client(sock, next(self._numbers))
        self._clients[client.number] = client
        self._update_mask(client)  # registered for reading
        logger.debug("stalewatch: client %d connected", client.number)
        self._observer.client_connected()
        with self.isolated(client):
            greet(client)
            self.flush(client)

    @contextlib.contextmanager
    def isolated(self, client: Client | None, sock: socket.socket | None = None) -> Iterator[None]:
        """Run one client's handling; an unexpected exception (a bug its input reached:
        bad input is refused at decode time) drops only that client."""
        try:
            yield
        except Exception:
            self.failed(client, sock)

    def failed(self, client: Client | None, sock: socket.socket | None = None) -> None:
        """:meth:`isolated`'s answer to an unexpected exception (logged here); for a hot
        path's own ``try`` (a generator per client would cost an update's line ~30 µs)."""
        number = client.number if client is not None else "(new)"
        logger.exception("stalewatch: dropping client %s after an unexpected error", number)
        self._dropped("error")
        if client is not None:
            with contextlib.suppress(Exception):
                self.close(client)
        elif sock is not None:
            sock.close()

    def serve(self, client: Client, mask: int) -> None:
        """Handle readiness reported by the selector (isolated: see :meth:`isolated`)."""
        with self.isolated(client):
            if mask & selectors.EVENT_WRITE:
                self.flush(client)
            if mask & client.mask & selectors.EVENT_READ:  # still reading: see _update_mask
                self._read(client)

    def _read(self, client: Client) -> None:
        try:
            data = client.sock.recv(4096)
        except BlockingIOError:
            return
        except OSError:
            logger.debug("stalewatch: client %d disconnected", client.number)
            self.close(client)
            return
        if not data:
            # End of its input, not necessarily of the connection: `cmd <&-`, or a
            # client that shuts down its write side, still reads. Keep sending; a
            # write error or the peer's hang-up (see expire) ends it.
            logger.debug("stalewatch: client %d closed its write side", client.number)
            client.half_closed = True
            self._update_mask(client)
            return
        try:
            for line in client.reader.feed(data):
                if not line.strip():
                    continue
                match parse_request(line):
                    case Register(checkout, revision, inflight) if client.registered != (checkout, revision):
                        self._register(client, line, checkout, revision, inflight)
                    case Register(checkout, _, inflight) | Inflight(checkout, inflight):
                        self._inflight(client, line, checkout, inflight)
                    case ping:
                        self.send(client, encode(pong_message(ping)), flush=False)
        except ProtocolError as exc:
            logger.warning("stalewatch: closing client %d: %s", client.number, exc)
            self.drop(client, "bad-request", str(exc))
            return
        if client.number in self._clients:
            self.flush(client)  # the pongs of one read together

    def _register(self, client: Client, line: bytes, checkout: str, revision: str, inflight: int) -> None:
        # One registration per connection (a process loads its code once): a repeat only
        # reports its work in flight; another claim would flood the registry.
        if client.registered is not None:
            raise ProtocolError(line, "this connection already registered another revision")
        client.registered = (checkout, revision)
        self._on_register(client, checkout, revision, inflight)

    def _inflight(self, client: Client, line: bytes, checkout: str, inflight: int) -> None:
        # Only a registered server has work the daemon waits for (R8).
        if client.registered is None or client.registered[0] != checkout:
            raise ProtocolError(line, "an inflight request needs a registration for that checkout first")
        self._on_inflight(client, checkout, inflight)

    def send(self, client: Client, line: bytes, *, flush: bool = True) -> None:
        """Queue ``line`` for ``client`` and write what fits; drop it past the bound.

        ``flush=False``: written by the loop's next :meth:`flush_pending`, in the same
        turn (a turn's lines to one client cost one system call).
        """
        if client.closing_at is not None:
            return
        client.out.append(line)
        if len(client.out) > self.limit:
            logger.warning(
                "stalewatch: dropping client %d: more than %d lines unread", client.number, self.limit
            )
            self.drop(client, "slow-client", f"more than {self.limit} lines queued unread")
        elif flush:
            self.flush(client)
        else:
            self._unflushed[client.number] = client

    def flush_pending(self) -> None:
        """Write what :meth:`send` queued without writing (each client once)."""
        pending, self._unflushed = self._unflushed, {}
        for number, client in pending.items():
            if number in self._clients and client.out:
                try:
                    self.flush(client)
                except Exception:
                    self.failed(client)

    def broadcast(self, line: bytes, *, flush: bool = True) -> None:
        """Send ``line`` to every client being served (``flush``: as :meth:`send`)."""
        for client in self:
            with self.isolated(client):
                self.send(client, line, flush=flush)

    def drop(self, client: Client, reason: str, detail: str) -> None:
        """Tell the client why (if it reads within the grace period), then close it."""
        self._dropped(reason)
        partial = client.out[0] if client.out and client.offset else None
        client.out.clear()
        if partial is not None:
            client.out.append(partial)  # finish the line already started: keep it valid JSON
        client.out.append(encode(error_message(reason, detail)))
        client.closing_at = time.monotonic() + DROP_GRACE
        self.flush(client)

    def _dropped(self, reason: str) -> None:
        with contextlib.suppress(Exception):  # counting a drop must not cost the loop
            self._observer.client_dropped(reason)

    def flush(self, client: Client) -> None:
        """Write as much of the queue as the socket takes now, many lines to a
        ``sendmsg`` (a greeting of a thousand snapshots is a few calls)."""
        out = client.out
        try:
            while out:
                chunk: list[bytes | memoryview] = [memoryview(out[0])[client.offset :]]
                chunk += itertools.islice(out, 1, _LINES_PER_WRITE)
                wanted = sum(map(len, chunk))
                sent = client.sock.sendmsg(chunk)
                done = client.offset + sent
                while out and done >= len(out[0]):
                    done -= len(out.popleft())
                client.offset = done  # bytes of the new head already sent
                if sent < wanted:
                    break  # the socket buffer is full: wait for EVENT_WRITE
        except BlockingIOError:
            pass
        except OSError:
            self.close(client)
            return
        if not client.out and client.closing_at is not None:
            self.close(client)
            return
        self._update_mask(client)

    def _update_mask(self, client: Client) -> None:
        reading = client.closing_at is None and not client.half_closed
        mask = selectors.EVENT_READ if reading else 0
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
        """Close one client (harmless twice); while :attr:`deferring` (a posting thread, see
        :mod:`.inbox`: perhaps the restart machine, which a close tells), the loop does."""
        if self.deferring:
            client.closing_at = time.monotonic()
            return
        if self._clients.pop(client.number, None) is None:
            return
        try:  # a closing client is closed whatever its bookkeeping does
            self._observer.client_closed()
            self._on_close(client)
        except Exception:
            logger.exception("stalewatch: while closing client %d", client.number)
        if client.mask:
            self._selector.unregister(client.sock)
            client.mask = 0
        # Closing with unread input makes the kernel reset the connection, and the
        # client may then lose the error line it was sent: discard the input first.
        with contextlib.suppress(OSError):
            for _ in range(64):
                if not client.sock.recv(65536):
                    break
        client.sock.close()

    def next_deadline(self) -> float | None:
        """When the earliest dropped client must be closed, or the listener taken back."""
        deadlines = [c.closing_at for c in self._clients.values() if c.closing_at is not None]
        if self._paused is not None:
            deadlines.append(self._paused[0])
        return min(deadlines, default=None)

    def expire(self, now: float) -> None:
        """Close dropped clients whose grace period is over, and hung-up half-closed ones;
        take a rested listener back."""
        if self._paused is not None and now >= self._paused[0]:
            self._selector.register(self._paused[1], selectors.EVENT_READ, "listen")
            self._paused = None
        half_closed: list[Client] = []
        for client in list(self._clients.values()):
            if client.closing_at is not None and now >= client.closing_at:
                self.close(client)
            elif client.half_closed:
                half_closed.append(client)
        if half_closed:
            # The selector cannot watch a half-closed client for reading (its end of
            # input is always "readable"); poll with an empty mask reports only
            # POLLHUP/POLLERR: the peer closed the whole connection.
            poller = select.poll()
            for client in half_closed:
                poller.register(client.sock, 0)
            gone = {fd for fd, _ in poller.poll(0)}
            for client in half_closed:
                if client.sock.fileno() in gone:
                    logger.debug("stalewatch: client %d disconnected", client.number)
                    self.close(client)

    def close_all(self) -> None:
        """Close every client."""
        for client in list(self._clients.values()):
            self.close(client)
