"""``Client``: jobgate's API for code without asyncio (scripts, notebooks, Airflow tasks).

Every call runs the ``AsyncClient``'s on an event loop of the client's own, in a thread of
its own, so it works the same where another loop already runs (a Jupyter kernel). It adds
no behaviour of its own: what a call does is documented on ``AsyncClient``.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Coroutine, Iterable, Iterator, Sequence
from typing import Any, Optional, TypeVar, Union

from ._generated.enums import JobPhase
from ._transport import Verify
from .aio import AsyncClient, Job, JobInput, LogLine, StatusEvent

T = TypeVar("T")


class Client:
    """jobgate's API, blocking: the same calls as :class:`~jobgate.AsyncClient`.

    Close it (``close()`` or a ``with`` block) to release its connections and thread.
    """

    def __init__(
        self,
        url: Optional[str] = None,
        token: Optional[str] = None,
        *,
        verify: Verify = True,
        timeout: float = 30.0,
        keepalive: float = 15.0,
        retries: int = 5,
        reconnect_timeout: float = 300.0,
    ) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="jobgate-client", daemon=True)
        self._thread.start()

        async def make() -> AsyncClient:
            return AsyncClient(
                url,
                token,
                verify=verify,
                timeout=timeout,
                keepalive=keepalive,
                retries=retries,
                reconnect_timeout=reconnect_timeout,
            )

        self._client = self._run(make())

    @property
    def url(self) -> str:
        """The GraphQL endpoint this client calls."""
        return self._client.url

    def _run(self, call: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(call, self._loop).result()

    def _iterate(self, items: AsyncIterator[T]) -> Iterator[T]:
        async def step() -> T:
            return await items.__anext__()

        try:
            while True:
                try:
                    yield self._run(step())
                except StopAsyncIteration:
                    return
        finally:
            # Stopped early (a break, an exception): close the stream on its loop.
            aclose = getattr(items, "aclose", None)
            if aclose is not None and not self._loop.is_closed():
                self._run(aclose())

    def close(self) -> None:
        if self._loop.is_closed():
            return

        async def shutdown() -> None:
            await self._client.aclose()
            # Their sockets are closed now: end what still runs on this loop (a stream read
            # from another thread, a stream its reader left that is still closing), then
            # the streams left unclosed, before the loop goes.
            others = asyncio.all_tasks() - {asyncio.current_task()}
            for task in others:
                task.cancel()
            await asyncio.gather(*others, return_exceptions=True)
            await self._loop.shutdown_asyncgens()

        self._run(shutdown())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def submit(self, **fields: Any) -> Job:
        """See :meth:`AsyncClient.submit`."""
        return self._run(self._client.submit(**fields))

    def submit_many(self, inputs: Iterable[JobInput]) -> list[Job]:
        """See :meth:`AsyncClient.submit_many`."""
        return self._run(self._client.submit_many(list(inputs)))

    def get(self, id: str) -> Job:
        """See :meth:`AsyncClient.get`."""
        return self._run(self._client.get(id))

    def list(
        self,
        *,
        phases: Optional[Sequence[Union[JobPhase, str]]] = None,
        namespace: Optional[str] = None,
        name_contains: Optional[str] = None,
        page_size: int = 100,
    ) -> Iterator[Job]:
        """See :meth:`AsyncClient.list`."""
        return self._iterate(
            self._client.list(
                phases=phases, namespace=namespace, name_contains=name_contains, page_size=page_size
            )
        )

    def cancel(self, id: str) -> Job:
        """See :meth:`AsyncClient.cancel`."""
        return self._run(self._client.cancel(id))

    def wait(self, id: str, timeout: Optional[float] = None, progress: bool = False) -> Job:
        """See :meth:`AsyncClient.wait`."""
        return self._run(self._client.wait(id, timeout=timeout, progress=progress))

    def logs(self, id: str, follow: bool = False) -> Iterator[LogLine]:
        """See :meth:`AsyncClient.logs`."""
        return self._iterate(self._client.logs(id, follow=follow))

    def watch(
        self,
        id: Optional[str] = None,
        after: Optional[str] = None,
        *,
        phases: Optional[Sequence[Union[JobPhase, str]]] = None,
        namespace: Optional[str] = None,
        name_contains: Optional[str] = None,
    ) -> Iterator[StatusEvent]:
        """See :meth:`AsyncClient.watch`."""
        return self._iterate(
            self._client.watch(
                id, after, phases=phases, namespace=namespace, name_contains=name_contains
            )
        )
