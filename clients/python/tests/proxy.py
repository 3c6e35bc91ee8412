"""A TCP proxy on 127.0.0.1 in front of a real jobgate, for the tests of what the client does
when the network misbehaves: ``cut()`` resets every open connection, ``freeze()`` stops
every byte both ways (and every close) while the sockets stay open, as a stalled network
path or a dead NAT entry does, and ``thaw()`` lets them through again. It counts the
connections it carried, and which of them were WebSocket upgrades, so that a test can see a
client reconnect or close its subscription.

It forwards bytes and nothing else: it neither reads nor changes what they say, apart from
noting whether a connection's first bytes ask for a WebSocket upgrade.
"""

from __future__ import annotations

import select
import socket
import struct
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Optional

#: How often (seconds) a connection's thread looks at its flags when no byte moves.
_TICK = 0.02


class Connection:
    """One client connection and its connection to the server."""

    def __init__(self, number: int, client: socket.socket) -> None:
        self.number = number
        self.client = client
        self.upstream: Optional[socket.socket] = None
        self.websocket = False
        #: Set when the proxy must reset both sockets (``cut()``).
        self.cut = False
        #: Set once the client closed or reset its side.
        self.closed_by_client = False
        #: Set once both sockets are closed and the thread is gone.
        self.done = threading.Event()
        self.thread: Optional[threading.Thread] = None


class Proxy:
    """Listens on a free loopback port and forwards each connection to ``target``
    (``host:port``, read again for every new connection, so a restarted server on the same
    port is reached). ``url`` is the base URL clients use instead of the server's."""

    def __init__(self, target: str) -> None:
        self.target = target
        self._lock = threading.Condition()
        self._connections: list[Connection] = []
        self._frozen = False
        self._closed = False
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self._listener.settimeout(_TICK * 5)
        self.port: int = self._listener.getsockname()[1]
        self._acceptor = threading.Thread(target=self._accept, name="proxy-accept", daemon=True)
        self._acceptor.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # -- what tests read ---------------------------------------------------------------

    @property
    def connections(self) -> int:
        """Connections accepted so far."""
        with self._lock:
            return len(self._connections)

    @property
    def websocket_connections(self) -> int:
        """Connections accepted so far whose first bytes asked for a WebSocket upgrade."""
        with self._lock:
            return sum(1 for c in self._connections if c.websocket)

    @property
    def open_websockets(self) -> int:
        """WebSocket connections still open."""
        with self._lock:
            return sum(1 for c in self._connections if c.websocket and not c.done.is_set())

    @property
    def websockets_closed_by_client(self) -> int:
        """WebSocket connections the client closed or reset itself."""
        with self._lock:
            return sum(1 for c in self._connections if c.websocket and c.closed_by_client)

    def wait_for(self, condition: Callable[[Proxy], bool], timeout: float = 60.0) -> None:
        """Returns once ``condition(self)`` holds; AssertionError after ``timeout`` s."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while not condition(self):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(
                        f"the proxy never reached the awaited state in {timeout} s: "
                        f"{len(self._connections)} connections, "
                        f"{sum(1 for c in self._connections if c.websocket)} WebSocket, "
                        f"{sum(1 for c in self._connections if not c.done.is_set())} open"
                    )
                # Threads notify on every change; the short wait covers flags read unlocked.
                self._lock.wait(min(left, _TICK * 5))

    # -- what tests do -----------------------------------------------------------------

    def cut(self) -> int:
        """Resets (TCP RST) every open connection on both sides and returns how many."""
        with self._lock:
            open_ones = [c for c in self._connections if not c.done.is_set()]
            for c in open_ones:
                c.cut = True
        for c in open_ones:
            c.done.wait(10)
        return len(open_ones)

    def freeze(self) -> None:
        """Stops forwarding on every connection, open or new: bytes and closes are held
        (sockets stay open) until ``thaw()``. A client that closes its side is still seen."""
        with self._lock:
            self._frozen = True
            self._lock.notify_all()

    def thaw(self) -> None:
        """Forwards what was held and goes on forwarding."""
        with self._lock:
            self._frozen = False
            self._lock.notify_all()

    def close(self) -> None:
        with self._lock:
            self._closed = True
        self._acceptor.join()
        self._listener.close()
        self.cut()

    def __enter__(self) -> Proxy:
        return self

    def __exit__(
        self,
        kind: Optional[type[BaseException]],
        value: Optional[BaseException],
        trace: Optional[TracebackType],
    ) -> None:
        self.close()

    # -- the threads -------------------------------------------------------------------

    def _accept(self) -> None:
        while True:
            with self._lock:
                if self._closed:
                    return
            try:
                client, _ = self._listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            with self._lock:
                connection = Connection(len(self._connections), client)
                self._connections.append(connection)
                self._lock.notify_all()
            thread = threading.Thread(
                target=self._serve, args=(connection,), name=f"proxy-{connection.number}", daemon=True
            )
            connection.thread = thread
            thread.start()

    def _serve(self, connection: Connection) -> None:
        client = connection.client
        host, port = self.target.rsplit(":", 1)
        try:
            upstream = socket.create_connection((host, int(port)), timeout=10)
        except OSError:
            # The server is down: the client sees its connection reset, as it would have.
            _reset(client)
            self._finish(connection)
            return
        connection.upstream = upstream
        client.setblocking(False)
        upstream.setblocking(False)
        # Bytes still to write to each socket (all of them while frozen), and whether each
        # side has ended (EOF or reset).
        pending = {client: bytearray(), upstream: bytearray()}
        ended = {client: False, upstream: False}
        peer = {client: upstream, upstream: client}
        first = True
        try:
            while True:
                if connection.cut:
                    return
                frozen = self._frozen
                if not frozen:
                    for side in (client, upstream):
                        while pending[side] and not ended[side]:
                            try:
                                sent = side.send(pending[side])
                            except BlockingIOError:
                                break
                            del pending[side][:sent]
                    # One side has ended and what it sent is delivered: end the other.
                    if any(ended[s] and not pending[peer[s]] for s in (client, upstream)):
                        client.close()
                        upstream.close()
                        return
                readable = [s for s in (client, upstream) if not ended[s]]
                writable = [] if frozen else [s for s in (client, upstream) if pending[s]]
                ready, _, _ = select.select(readable, writable, [], _TICK)
                for side in ready:
                    try:
                        data = side.recv(65536)
                    except BlockingIOError:
                        continue
                    except OSError:
                        data = b""
                    if side is client and first and data:
                        first = False
                        head = data.split(b"\r\n\r\n", 1)[0].lower()
                        if b"upgrade: websocket" in head:
                            with self._lock:
                                connection.websocket = True
                                self._lock.notify_all()
                    if data:
                        pending[peer[side]] += data
                        continue
                    ended[side] = True
                    if side is client:
                        with self._lock:
                            connection.closed_by_client = True
                            self._lock.notify_all()
                        if frozen:
                            # The client has given up on the path: nothing is left to hold.
                            return
        except OSError:
            pass
        finally:
            _reset(client)
            _reset(upstream)
            self._finish(connection)

    def _finish(self, connection: Connection) -> None:
        with self._lock:
            connection.done.set()
            self._lock.notify_all()


def _reset(sock: socket.socket) -> None:
    """Closes with a TCP RST (linger 0) rather than a FIN."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    sock.close()
