"""An HTTP/1.1 relay in front of a real jobgate, on 127.0.0.1, for the tests that need to see
or break what passes between the client and the server: it records each request, and for
each one a test decides whether it is forwarded, forwarded with its answer withheld (the
connection dropped after the server acted), or answered by the relay itself. With an
``ssl.SSLContext`` it terminates TLS, so the client speaks https/wss to a plain jobgate.

Each request goes to jobgate on a connection of its own (``Connection: close``) and the
client's connection is closed after the answer; a WebSocket upgrade is forwarded and then
piped both ways untouched.
"""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Optional

#: What the relay does with one request: pass it on, pass it on and drop the connection
#: instead of answering, or answer 503 itself without passing it on.
Action = Literal["forward", "drop_answer", "answer_503"]


@dataclass
class Request:
    """One request the relay received: its method, target, headers (names lowercase) and body."""

    method: str
    target: str
    headers: dict[str, str]
    body: bytes
    #: What the relay did with it.
    action: Action = "forward"

    @property
    def json(self) -> Any:
        return json.loads(self.body) if self.body else None

    @property
    def operation(self) -> Optional[str]:
        body = self.json
        return body.get("operationName") if isinstance(body, dict) else None


@dataclass
class Relay:
    """Listens on 127.0.0.1 (``url``) and relays to ``upstream`` (``host:port``)."""

    upstream: str
    decide: Callable[[Request], Action] = lambda _request: "forward"
    tls: Optional[ssl.SSLContext] = None
    requests: list[Request] = field(default_factory=list)
    _server: Optional[asyncio.Server] = None
    _tasks: set[asyncio.Task[Any]] = field(default_factory=set)

    _port: int = 0

    @property
    def url(self) -> str:
        assert self._port, "the relay has not started"
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self._port}"

    def operations(self) -> list[Optional[str]]:
        """The GraphQL operation names of the requests so far, in order."""
        return [r.operation for r in self.requests if r.method == "POST"]

    async def __aenter__(self) -> Relay:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self.tls)
        self._port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            await self._relay(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError):
            pass  # the client went away, or refused the relay's certificate
        finally:
            self._tasks.discard(task)
            writer.close()

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        method, target, _version = lines[0].split(" ", 2)
        headers: dict[str, str] = {}
        for line in lines[1:]:
            if ":" in line:
                name, value = line.split(":", 1)
                headers[name.strip().lower()] = value.strip()
        body = await reader.readexactly(int(headers.get("content-length", "0")))
        request = Request(method, target, headers, body)
        request.action = self.decide(request)
        self.requests.append(request)
        if request.action == "answer_503":
            text = b"the relay answers 503 once"
            writer.write(
                b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\n"
                b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(text), text)
            )
            await writer.drain()
            return
        host, port = self.upstream.rsplit(":", 1)
        up_reader, up_writer = await asyncio.open_connection(host, int(port))
        try:
            if headers.get("upgrade", "").lower() == "websocket":
                up_writer.write(head + body)
                await up_writer.drain()
                await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
                return
            # One request per upstream connection: the answer is whatever comes until the
            # server closes it.
            kept = [line for line in lines[1:] if line and not line.lower().startswith("connection:")]
            forwarded = "\r\n".join([lines[0], *kept, "Connection: close", "", ""]).encode("latin-1")
            up_writer.write(forwarded + body)
            await up_writer.drain()
            answer = await up_reader.read()
        finally:
            up_writer.close()
        if request.action == "drop_answer":
            # jobgate has answered, so it has acted; the client never learns how.
            writer.transport.abort()
            return
        writer.write(answer)
        await writer.drain()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while chunk := await reader.read(65536):
            writer.write(chunk)
            await writer.drain()
    except (ConnectionError, ssl.SSLError):
        pass
    finally:
        if writer.can_write_eof():
            try:
                writer.write_eof()
            except (OSError, RuntimeError):
                pass
        else:
            writer.close()
