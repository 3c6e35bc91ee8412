"""How the client talks to jobgate: GraphQL over HTTP (httpx) and subscriptions over
WebSocket (``graphql-transport-ws``, websockets), with the server's errors raised as the
exceptions of :mod:`jobgate.errors`.

It owns the connection settings (URL, token, TLS, timeouts, keepalive) and nothing about
jobs: which operation to send and what to do after a failure is the clients' business.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import ssl
from collections.abc import AsyncIterator, Mapping
from typing import Any, Optional, Union

import httpx
import websockets
from pydantic import BaseModel
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus

from . import errors
from ._generated.base_model import UnsetType

#: The server the clients use when none is given and ``JOBGATE_SERVER`` is unset.
DEFAULT_SERVER = "http://127.0.0.1:8080"

#: What ``verify`` takes: True (the system's roots), False (no check), a CA bundle's path,
#: or an ``ssl.SSLContext``.
Verify = Union[bool, str, "os.PathLike[str]", ssl.SSLContext]

_SUBPROTOCOL = websockets.Subprotocol("graphql-transport-ws")


def _endpoint(url: str) -> str:
    url = url.rstrip("/")
    return url if url.endswith("/graphql") else url + "/graphql"


def _ssl_context(verify: Verify) -> Union[bool, ssl.SSLContext]:
    if isinstance(verify, ssl.SSLContext):
        return verify
    if verify is True:
        return ssl.create_default_context()
    if verify is False:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context
    return ssl.create_default_context(cafile=os.fspath(verify))


def _json_value(value: Any) -> Any:
    """A variable as JSON: models by their GraphQL names, unset fields left out."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", by_alias=True, exclude_unset=True)
    if isinstance(value, Mapping):
        return {k: _json_value(v) for k, v in value.items() if not isinstance(v, UnsetType)}
    if isinstance(value, (list, tuple)):
        return [_json_value(v) for v in value]
    return value


def _raise_errors(body: Mapping[str, Any]) -> None:
    found = body.get("errors")
    if isinstance(found, list) and found:
        first = found[0] if isinstance(found[0], Mapping) else {"message": str(found[0])}
        raise errors.error_from_graphql(first)


class Transport:
    """One server's connection settings, shared by every call of a client.

    ``url`` defaults to ``JOBGATE_SERVER`` (else http://127.0.0.1:8080) and ``token`` to
    ``JOBGATE_TOKEN``, as for the CLI. ``timeout`` bounds one HTTP call; ``keepalive``
    is how often (seconds) a subscription's connection is pinged: one that does not answer
    within as long again is taken as lost.
    """

    def __init__(
        self,
        url: Optional[str] = None,
        token: Optional[str] = None,
        *,
        verify: Verify = True,
        timeout: float = 30.0,
        keepalive: float = 15.0,
    ) -> None:
        self.url = _endpoint(url or os.environ.get("JOBGATE_SERVER") or DEFAULT_SERVER)
        self.token = token if token is not None else os.environ.get("JOBGATE_TOKEN") or None
        self.keepalive = keepalive
        self._ssl = _ssl_context(verify)
        headers = {"User-Agent": "jobgate-python"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        self._http = httpx.AsyncClient(headers=headers, timeout=timeout, verify=self._ssl)
        # Every subscription's open socket, so that closing the client closes them: a
        # stream its consumer abandoned is otherwise closed only when collected.
        self._sockets: set[ClientConnection] = set()
        self._closed = False

    @property
    def ws_url(self) -> str:
        if self.url.startswith("https://"):
            return "wss://" + self.url[len("https://") :]
        if self.url.startswith("http://"):
            return "ws://" + self.url[len("http://") :]
        return self.url

    async def aclose(self) -> None:
        """Closes the HTTP connections and every subscription's socket; a subscription
        still being read then raises a JobgateError that is not transient."""
        self._closed = True
        await asyncio.gather(*(ws.close() for ws in list(self._sockets)), return_exceptions=True)
        await self._http.aclose()

    def _check_open(self) -> None:
        if self._closed:
            raise errors.JobgateError("the client is closed")

    async def execute(
        self, query: str, operation_name: Optional[str], variables: Mapping[str, Any]
    ) -> dict[str, Any]:
        """Runs a query or mutation; its ``data``, or the exception of its first error."""
        payload = {
            "query": query,
            "operationName": operation_name,
            "variables": _json_value(variables),
        }
        try:
            response = await self._http.post(self.url, json=payload)
        except httpx.TimeoutException as e:
            raise errors.ConnectionFailed(f"no answer from {self.url} in time: {e}") from e
        except httpx.TransportError as e:
            raise _unreachable(self.url, e) from e
        try:
            body = response.json()
        except ValueError:
            body = None
        if not isinstance(body, dict):
            message = f"{self.url} answered HTTP {response.status_code} without a GraphQL answer"
            if response.status_code >= 500 or response.status_code == 429:
                raise errors.ConnectionFailed(message)
            raise errors.JobgateError(message)
        _raise_errors(body)
        data = body.get("data")
        if not isinstance(data, dict):
            raise errors.JobgateError(f"{self.url} answered HTTP {response.status_code} without data")
        return data

    async def subscribe(
        self, query: str, operation_name: Optional[str], variables: Mapping[str, Any]
    ) -> AsyncIterator[dict[str, Any]]:
        """Runs a subscription on a connection of its own: each event's ``data``, until the
        server completes it. A connection lost on the way raises ConnectionFailed; a
        refusal raises the exception of its code."""
        self._check_open()
        init: dict[str, Any] = {"type": "connection_init"}
        if self.token:
            init["payload"] = {"authorization": f"Bearer {self.token}"}
        ssl_arg = self._ssl if self.ws_url.startswith("wss://") else None
        opened: Optional[ClientConnection] = None
        try:
            async with connect(
                self.ws_url,
                subprotocols=[_SUBPROTOCOL],
                ssl=ssl_arg,
                ping_interval=self.keepalive,
                ping_timeout=self.keepalive,
                # Once a ping goes unanswered the client sends a close frame and waits this
                # long for the server's before dropping the socket: on a dead path none
                # comes, so the wait must scale with keepalive, not websockets' default 10 s.
                close_timeout=min(self.keepalive, 10.0),
                open_timeout=max(self.keepalive, 10.0),
                max_size=16 * 1024 * 1024,
                user_agent_header="jobgate-python",
            ) as ws:
                opened = ws
                self._sockets.add(ws)
                self._check_open()
                await ws.send(json.dumps(init))
                await self._await_ack(ws)
                await ws.send(
                    json.dumps(
                        {
                            "id": "1",
                            "type": "subscribe",
                            "payload": {
                                "query": query,
                                "operationName": operation_name,
                                "variables": _json_value(variables),
                            },
                        }
                    )
                )
                async for data in self._events(ws):
                    yield data
        except ConnectionClosed as e:
            self._check_open()
            raise _closed(e) from e
        except InvalidStatus as e:
            status = e.response.status_code
            if status >= 500 or status == 429:
                raise errors.ConnectionFailed(f"{self.ws_url} answered HTTP {status}") from e
            raise errors.JobgateError(f"{self.ws_url} refused the WebSocket: HTTP {status}") from e
        except (OSError, InvalidHandshake, TimeoutError) as e:
            raise _unreachable(self.ws_url, e) from e
        finally:
            # Only once the socket is closed (leaving ``connect`` waits for that).
            if opened is not None:
                self._sockets.discard(opened)

    async def _await_ack(self, ws: ClientConnection) -> None:
        async for raw in ws:
            message = json.loads(raw)
            kind = message.get("type")
            if kind == "connection_ack":
                return
            if kind == "ping":
                await ws.send(json.dumps({"type": "pong"}))
        raise _closed_without_frame()

    async def _events(self, ws: ClientConnection) -> AsyncIterator[dict[str, Any]]:
        async for raw in ws:
            message = json.loads(raw)
            kind = message.get("type")
            if kind == "ping":
                await ws.send(json.dumps({"type": "pong"}))
            elif kind == "next":
                payload = message.get("payload") or {}
                _raise_errors(payload)
                data = payload.get("data")
                if isinstance(data, dict):
                    yield data
            elif kind == "error":
                found = message.get("payload")
                first = found[0] if isinstance(found, list) and found else {"message": str(found)}
                raise errors.error_from_graphql(first)
            elif kind == "complete":
                return
        self._check_open()
        raise _closed_without_frame()


def _unreachable(url: str, e: BaseException) -> errors.JobgateError:
    """ConnectionFailed for a connection that could not be made. A certificate the client
    does not trust is no passing failure: it is not retried, and says so."""
    cause: Optional[BaseException] = e
    seen: set[int] = set()
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, ssl.SSLCertVerificationError):
            break
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    else:
        cause = None
    if cause is None:
        return errors.ConnectionFailed(f"cannot reach {url}: {e}")
    failed = errors.ConnectionFailed(
        f"cannot reach {url}: certificate verification failed ({cause}); pass the server's "
        "CA bundle as verify="
    )
    failed.transient = False
    return failed


def _closed_without_frame() -> errors.JobgateError:
    return errors.ConnectionFailed("the server closed the subscription's connection")


#: Close codes whose cause lasts: calling again the same way fails the same way.
_PERMANENT = {4400, 4401, 4406, 4409, 4429}


def _closed(e: ConnectionClosed) -> errors.JobgateError:
    frame = e.rcvd
    if frame is None:
        return errors.ConnectionFailed(f"the subscription's connection was lost: {e}")
    code, reason = frame.code, frame.reason
    if code == 4403:
        return errors.Unauthenticated(reason or "the server refused the token")
    if code == 1013:
        # "too many connections: retry in N s": the wait is only in the words.
        wait = re.search(r"retry in (\d+) s", reason)
        extensions = {"code": errors.RateLimited.code, "retryAfterSeconds": int(wait[1])} if wait else None
        return errors.RateLimited(reason or "too many connections", extensions=extensions)
    if code in _PERMANENT:
        return errors.JobgateError(f"the server closed the subscription ({code}): {reason}")
    return errors.ConnectionFailed(f"the server closed the subscription ({code}): {reason}")
