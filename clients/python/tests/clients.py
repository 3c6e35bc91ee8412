"""The blocking and the asyncio client behind one async interface, so that one test runs
against both (``KINDS``): the blocking ``Client``'s calls run in a worker thread, as a
user's script would run them, while the test's event loop stays free (for a relay)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Iterable, Iterator
from typing import Any, Optional, Union

import jobgate
from jobgate.aio import JobInput

KINDS = ["sync", "async"]

#: The longest a test waits for a condition it expects (a job reaching a phase): a bound
#: against hanging, not a measure.
PATIENCE = 120.0


class Api:
    """``Client`` (``kind="sync"``) or ``AsyncClient`` (``"async"``), awaited alike."""

    def __init__(self, kind: str, url: str, **options: Any) -> None:
        self.kind = kind
        self._sync: Optional[jobgate.Client] = None
        self._async: Optional[jobgate.AsyncClient] = None
        if kind == "sync":
            self._sync = jobgate.Client(url, **options)
        else:
            assert kind == "async", kind
            self._async = jobgate.AsyncClient(url, **options)

    async def __aenter__(self) -> Api:
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._sync is not None:
            await asyncio.to_thread(self._sync.close)
        if self._async is not None:
            await self._async.aclose()

    async def submit(self, **fields: Any) -> jobgate.Job:
        if self._sync is not None:
            return await asyncio.to_thread(lambda: self._sync_client().submit(**fields))
        return await self._async_client().submit(**fields)

    async def submit_many(self, inputs: Iterable[JobInput]) -> list[jobgate.Job]:
        if self._sync is not None:
            return await asyncio.to_thread(self._sync.submit_many, inputs)
        return await self._async_client().submit_many(inputs)

    async def get(self, id: str) -> jobgate.Job:
        if self._sync is not None:
            return await asyncio.to_thread(self._sync.get, id)
        return await self._async_client().get(id)

    async def cancel(self, id: str) -> jobgate.Job:
        if self._sync is not None:
            return await asyncio.to_thread(self._sync.cancel, id)
        return await self._async_client().cancel(id)

    async def wait(self, id: str, timeout: Optional[float] = PATIENCE) -> jobgate.Job:
        if self._sync is not None:
            return await asyncio.to_thread(self._sync.wait, id, timeout)
        return await self._async_client().wait(id, timeout)

    async def list(
        self, limit: Optional[int] = None, **filters: Union[str, int, list[Any], None]
    ) -> list[jobgate.Job]:
        """``list(**filters)``, stopped after ``limit`` jobs (every job when None)."""
        if self._sync is not None:
            sync = self._sync

            def take() -> list[jobgate.Job]:
                jobs: Iterator[jobgate.Job] = sync.list(**filters)  # type: ignore[arg-type]
                try:
                    return list(itertools.islice(jobs, limit))
                finally:
                    getattr(jobs, "close")()

            return await asyncio.to_thread(take)
        found: list[jobgate.Job] = []
        jobs = self._async_client().list(**filters)  # type: ignore[arg-type]
        try:
            # Asks for the next job only while one is wanted, as islice does.
            while limit is None or len(found) < limit:
                try:
                    found.append(await jobs.__anext__())
                except StopAsyncIteration:
                    break
        finally:
            await jobs.aclose()
        return found

    def _sync_client(self) -> jobgate.Client:
        assert self._sync is not None
        return self._sync

    def _async_client(self) -> jobgate.AsyncClient:
        assert self._async is not None
        return self._async


async def wait_phase(url: str, id: str, phase: jobgate.JobPhase) -> jobgate.Job:
    """The job once it has reached ``phase``, learnt from its events."""

    async def reach() -> jobgate.Job:
        async with jobgate.AsyncClient(url) as client:
            job = await client.get(id)
            if job.phase == phase:
                return job
            # Closed when left early, so its connection goes with it rather than at exit.
            async with contextlib.aclosing(client.watch(id, after=job.last_event_cursor)) as events:
                async for event in events:
                    if event.job.phase == phase:
                        return event.job
            raise AssertionError(f"job {id} ended without reaching {phase}")

    return await asyncio.wait_for(reach(), PATIENCE)
