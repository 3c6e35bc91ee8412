"""``AsyncClient``: jobgate's API for asyncio code.

It owns what a user means by submitting, reading, waiting for and following jobs: the safe
retry of a submission (its own idempotency key), pages read lazily, and subscriptions that
resume after their last cursor when the connection drops or the server restarts. How bytes
reach the server is the transport's business; the sync ``Client`` runs this one.
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections.abc import (
    AsyncGenerator,
    AsyncIterator,
    Awaitable,
    Callable,
    Iterable,
    Mapping,
    Sequence,
)
from typing import Any, Optional, TypeVar, Union, get_args

from pydantic import BaseModel

from . import errors
from ._generated.client import Operations
from ._generated.enums import JobPhase
from ._generated.fragments import JobFields, LogLineFields, StatusEventFields
from ._generated.input_types import EnvVarInput, JobFilter, SubmitJobInput
from ._progress import ProgressBar
from ._transport import Transport, Verify

#: A job as the client reads it.
Job = JobFields
#: One status event of a job: a phase change or a progress update, with its cursor.
StatusEvent = StatusEventFields
#: One line of a job's output, with its cursor.
LogLine = LogLineFields

#: Phases a job never leaves.
TERMINAL = frozenset({JobPhase.SUCCEEDED, JobPhase.FAILED, JobPhase.CANCELLED})

#: The most jobs one ``submitJobs`` call takes; ``submit_many`` splits longer lists.
SUBMIT_BATCH = 1000
#: Lines per page when reading a job's archived output.
LOG_PAGE = 1000

T = TypeVar("T")

#: An input of ``submit_many``: the keyword arguments of ``submit`` as a mapping, or a model.
JobInput = Union[Mapping[str, Any], SubmitJobInput]


def job_input(fields: Mapping[str, Any]) -> SubmitJobInput:
    """A ``SubmitJobInput`` from ``submit``'s keyword arguments (snake_case or GraphQL
    names); ``env`` may be a mapping of names to values. A field it does not know is a
    :class:`~jobgate.errors.BadUserInput`, raised before anything is sent."""
    values = dict(fields)
    env = values.get("env")
    if isinstance(env, Mapping):
        values["env"] = [EnvVarInput(name=str(k), value=str(v)) for k, v in env.items()]
    unknown = _unknown_fields(SubmitJobInput, values, "")
    if unknown:
        raise errors.BadUserInput(
            f"submit takes no field {', '.join(unknown)}: it takes the fields of SubmitJobInput "
            f"({', '.join(sorted(SubmitJobInput.model_fields))})",
            extensions={"code": errors.BadUserInput.code, "field": unknown[0]},
        )
    try:
        return SubmitJobInput.model_validate(values)
    except ValueError as e:
        raise errors.BadUserInput(f"the job's fields do not fit SubmitJobInput: {e}") from e


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The input models a field's type holds (``Optional[X]``, ``list[X]`` …)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [model for arg in get_args(annotation) for model in _models_in(arg)]


def _unknown_fields(model: type[BaseModel], value: Any, path: str) -> list[str]:
    """The keys of ``value``, at any depth, that name no field of ``model`` (by its
    snake_case or GraphQL name). Pydantic would drop them silently, and a misspelt
    ``retry_policy`` or ``resources`` key would submit a job without what it meant."""
    if not isinstance(value, Mapping):
        return []
    fields = dict(model.model_fields)
    fields.update({f.alias: f for f in model.model_fields.values() if f.alias})
    found: list[str] = []
    for key, item in value.items():
        where = f"{path}.{key}" if path else str(key)
        field = fields.get(key)
        if field is None:
            found.append(where)
            continue
        for inner in _models_in(field.annotation):
            if isinstance(item, (list, tuple)):
                for i, one in enumerate(item):
                    found.extend(_unknown_fields(inner, one, f"{where}[{i}]"))
            else:
                found.extend(_unknown_fields(inner, item, where))
    return sorted(found)


def _keyed(model: SubmitJobInput) -> SubmitJobInput:
    """The input with an idempotency key of its own when it has none, so that sending it
    again after a failure cannot submit the job twice."""
    if model.idempotency_key is None:
        model = model.model_copy(update={"idempotency_key": f"py-{uuid.uuid4().hex}"})
        model.model_fields_set.add("idempotency_key")
    return model


def _pause(e: errors.JobgateError, backoff: float) -> float:
    """Seconds to wait before trying again after ``e``: the back-off, jittered, but never
    less than the ``retry_after`` a refusal gave, since a try before it is refused again."""
    if isinstance(e, errors.RateLimited) and e.retry_after:
        return e.retry_after * (1 + 0.5 * random.random())
    return backoff * (0.5 + random.random())


class SubmitManyError(errors.JobgateError):
    """Some inputs of ``submit_many`` were refused; the others were accepted.

    ``jobs`` has one entry per input, in order (None where refused); ``refused`` maps each
    refused input's index to its error.
    """

    def __init__(self, jobs: list[Optional[Job]], refused: dict[int, errors.JobgateError]) -> None:
        first = min(refused)
        super().__init__(
            f"{len(refused)} of {len(jobs)} jobs were refused; the first, input {first}: {refused[first]}"
        )
        self.jobs = jobs
        self.refused = refused


class AsyncClient:
    """jobgate's API for asyncio code.

    ``url`` defaults to ``JOBGATE_SERVER`` (else http://127.0.0.1:8080) and ``token`` to
    ``JOBGATE_TOKEN``. ``verify`` is True (the system's CA roots), a CA bundle's path, an
    ``ssl.SSLContext`` or False. ``retries`` bounds how often a call failing for a transient
    cause (unreachable, UNAVAILABLE, RATE_LIMITED) is tried again, after RATE_LIMITED no
    sooner than the server's ``retry_after``; ``reconnect_timeout`` how long (seconds) a
    subscription keeps reconnecting before it raises.
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
        self._transport = Transport(url, token, verify=verify, timeout=timeout, keepalive=keepalive)
        self._ops = Operations(self._transport)
        self.retries = retries
        self.reconnect_timeout = reconnect_timeout

    @property
    def url(self) -> str:
        """The GraphQL endpoint this client calls."""
        return self._transport.url

    async def aclose(self) -> None:
        await self._transport.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _retrying(self, call: Callable[[], Awaitable[T]], patient: bool = False) -> T:
        """``call()``, tried again after a transient failure: up to ``retries`` times, or,
        ``patient`` (the first read of a subscription, which then reconnects for as long),
        until the server has been out of reach for ``reconnect_timeout`` seconds."""
        delay = 0.2
        started = time.monotonic()
        attempt = 0
        while True:
            try:
                return await call()
            except errors.JobgateError as e:
                if not e.transient:
                    raise
                if patient:
                    if time.monotonic() - started >= self.reconnect_timeout:
                        raise
                elif attempt == self.retries:
                    raise
                attempt += 1
                await asyncio.sleep(_pause(e, delay))
                delay = min(delay * 2, 5.0)

    async def _job(self, id: str, patient: bool) -> Job:
        found = await self._retrying(lambda: self._ops.get_job(id=id), patient)
        if found.job is None:
            raise errors.NotFound(f"no job with id {id!r}")
        return found.job

    async def submit(self, **fields: Any) -> Job:
        """Submits a job and returns it, PENDING: ``fields`` are those of ``SubmitJobInput``
        in snake_case (``name``, ``command``, ``env``, ``parallelism``, ``retry_policy`` …).
        Without an ``idempotency_key`` it makes one, so that a retry after a transient
        failure cannot submit the job twice."""
        model = _keyed(job_input(fields))
        payload = await self._retrying(lambda: self._ops.submit_job(input=model))
        return payload.submit_job.job

    async def submit_many(self, inputs: Iterable[JobInput]) -> list[Job]:
        """Submits many jobs in as few calls as it can (1,000 each), each as ``submit``
        would, and returns them in input order. When some are refused, the others are
        still accepted and :class:`SubmitManyError` says which and why; so it does when a
        call fails as a whole after earlier ones were accepted (the inputs of that call and
        the later ones are then refused with its error)."""
        models = [_keyed(i if isinstance(i, SubmitJobInput) else job_input(i)) for i in inputs]
        jobs: list[Optional[Job]] = []
        refused: dict[int, errors.JobgateError] = {}
        for start in range(0, len(models), SUBMIT_BATCH):
            batch = models[start : start + SUBMIT_BATCH]
            try:
                payload = await self._retrying(lambda: self._ops.submit_jobs(inputs=batch))
            except errors.JobgateError as failure:
                if start == 0:
                    raise
                # Earlier calls were accepted: say which, rather than lose them, so that only
                # the rest (refused with this call's error) is submitted again.
                jobs.extend([None] * (len(models) - start))
                refused.update({i: failure for i in range(start, len(models))})
                raise SubmitManyError(jobs, refused) from failure
            jobs.extend(payload.submit_jobs.jobs)
            for e in payload.submit_jobs.errors:
                # The server numbers the inputs of its own call; the caller's list is longer.
                ours = (f"inputs[{e.index}]", f"inputs[{start + e.index}]")
                message, field = e.message, e.field
                if message.startswith(ours[0]):
                    message = ours[1] + message[len(ours[0]) :]
                if field is not None and field.startswith(ours[0]):
                    field = ours[1] + field[len(ours[0]) :]
                refused[start + e.index] = errors.error_from_graphql(
                    {"message": message, "extensions": {"code": e.code, "field": field}}
                )
        if refused:
            raise SubmitManyError(jobs, refused)
        return [job for job in jobs if job is not None]

    async def get(self, id: str) -> Job:
        """The job; :class:`~jobgate.errors.NotFound` when there is none the caller may see."""
        return await self._job(id, patient=False)

    async def list(
        self,
        *,
        phases: Optional[Sequence[Union[JobPhase, str]]] = None,
        namespace: Optional[str] = None,
        name_contains: Optional[str] = None,
        page_size: int = 100,
    ) -> AsyncGenerator[Job, None]:
        """Every job matching the filters, newest first, read a page at a time as the
        iteration goes on (a page may be short or empty while more follow)."""
        job_filter = JobFilter(
            phases=[JobPhase(p) for p in phases] if phases is not None else None,
            namespace=namespace,
            name_contains=name_contains,
        )
        after: Optional[str] = None
        while True:
            page = await self._retrying(
                lambda: self._ops.list_jobs(first=page_size, after=after, filter_=job_filter)
            )
            for edge in page.jobs.edges:
                yield edge.node
            if not page.jobs.page_info.has_next_page:
                return
            after = page.jobs.page_info.end_cursor

    async def cancel(self, id: str) -> Job:
        """Cancels a PENDING or RUNNING job and returns it as the cancellation left it."""
        payload = await self._retrying(lambda: self._ops.cancel_job(id=id))
        return payload.cancel_job.job

    async def wait(
        self, id: str, timeout: Optional[float] = None, progress: bool = False
    ) -> Job:
        """The job once it has finished (SUCCEEDED, FAILED or CANCELLED), learnt from its
        pushed events rather than by polling. :class:`~jobgate.errors.WaitTimeout` after
        ``timeout`` seconds; with ``progress``, a tqdm bar (terminal or notebook) counts
        its completions."""
        try:
            return await asyncio.wait_for(self._wait(id, progress), timeout)
        except asyncio.TimeoutError as e:
            raise errors.WaitTimeout(f"job {id} had not finished after {timeout} s") from e

    async def _wait(self, id: str, progress: bool) -> Job:
        job = await self._job(id, patient=True)
        bar = ProgressBar(job) if progress else None
        try:
            if job.phase in TERMINAL:
                return job
            async for event in self.watch(id, after=job.last_event_cursor):
                job = event.job
                if bar is not None:
                    bar.update(job)
            return job
        finally:
            if bar is not None:
                bar.close(job)

    async def logs(self, id: str, follow: bool = False) -> AsyncGenerator[LogLine, None]:
        """The job's output from its first line, a line at a time; with ``follow``, then
        every new line until the job has finished and its output is all read. A dropped
        connection resumes after the last line received."""
        after: Optional[str] = None
        while True:
            page = await self._retrying(
                lambda: self._ops.job_log_lines(id=id, first=LOG_PAGE, after=after)
            )
            if page.job is None:
                raise errors.NotFound(f"no job with id {id!r}")
            for edge in page.job.log_lines.edges:
                yield edge.node
                after = edge.node.cursor or after
            if not page.job.log_lines.page_info.has_next_page:
                break
            after = page.job.log_lines.page_info.end_cursor or after
        if not follow:
            return
        async for line in self._follow_logs(id, after):
            yield line

    async def _follow_logs(self, id: str, after: Optional[str]) -> AsyncIterator[LogLine]:
        async def lines(cursor: Optional[str]) -> AsyncIterator[LogLine]:
            # Without a cursor no line has been read yet: the tail (as long as the server
            # gives) then holds every line archived since the page was read.
            tail = 10000 if cursor is None else 0
            async for data in self._ops.job_logs(id=id, follow=True, tail_lines=tail, after=cursor):
                yield data.job_logs

        async for line in self._resuming(lines, after, lambda line: line.cursor):
            yield line

    async def watch(
        self,
        id: Optional[str] = None,
        after: Optional[str] = None,
        *,
        phases: Optional[Sequence[Union[JobPhase, str]]] = None,
        namespace: Optional[str] = None,
        name_contains: Optional[str] = None,
    ) -> AsyncGenerator[StatusEvent, None]:
        """Status events in cursor order: one job's (``id``; it ends after the job's
        terminal event) or every job's matching the filters (it goes on until stopped).
        From after ``after`` (an event's cursor) when given, else from now. When the
        connection drops or the server restarts it reconnects and resumes after the last
        event it yielded: no gap, no repeat."""
        job_filter = None
        if phases is not None or namespace is not None or name_contains is not None:
            job_filter = JobFilter(
                phases=[JobPhase(p) for p in phases] if phases is not None else None,
                namespace=namespace,
                name_contains=name_contains,
            )
        if after is None:
            if id is not None:
                after = (await self._job(id, patient=True)).last_event_cursor
            else:
                head = await self._retrying(self._ops.event_head, patient=True)
                after = head.job_stats.cursor

        async def events(cursor: Optional[str]) -> AsyncIterator[StatusEvent]:
            async for data in self._ops.job_events(filter_=job_filter, after=cursor, job_id=id):
                yield data.job_events

        async for event in self._resuming(events, after, lambda event: event.cursor):
            yield event

    async def _resuming(
        self,
        open_stream: Callable[[Optional[str]], AsyncIterator[T]],
        cursor: Optional[str],
        cursor_of: Callable[[T], Optional[str]],
    ) -> AsyncIterator[T]:
        """The items of ``open_stream(cursor)``, reopened after the last item's cursor each
        time it fails for a transient cause, until it ends; raises once the server has been
        out of reach for ``reconnect_timeout`` seconds, or for a lasting cause at once."""
        delay = 0.1
        failing_since: Optional[float] = None
        while True:
            try:
                async for item in open_stream(cursor):
                    failing_since = None
                    delay = 0.1
                    cursor = cursor_of(item) or cursor
                    yield item
                return
            except errors.JobgateError as e:
                if not e.transient:
                    raise
                now = time.monotonic()
                failing_since = failing_since or now
                if now - failing_since >= self.reconnect_timeout:
                    raise
                await asyncio.sleep(_pause(e, delay))
                delay = min(delay * 2, 2.0)
