"""Every error code jobgate answers, provoked for real through the server's flags and state,
raised by the client as the exception of that code with the server's own message; the
failures below GraphQL (nothing listening, an answer withheld, a 503) as ConnectionFailed;
and ``submit`` retried after a lost answer creating its job exactly once.

Where the client offers no call that meets a code (LIMIT_EXCEEDED), the test sends the
server's operation through the client's own transport, the path every call takes.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import sqlite3
import subprocess
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import jobgate
from clients import KINDS, PATIENCE, Api
from jobgate import JobPhase
from jobgate._transport import Transport
from relay import Action, Relay, Request
from server import Server, binary

StartServer = Callable[..., Server]


def namespace() -> str:
    return f"t-{uuid.uuid4().hex[:12]}"


def tokens_file(path: Path, *entries: str) -> Path:
    """A tokens file (docs/CONFIG.md) of ``(name, token, extra TOML)`` entries, each token
    stored as the digest ``jobgate hash-token`` prints for it."""
    path.write_text("".join(entries))
    return path


def token_entry(name: str, token: str, extra: str) -> str:
    digest = subprocess.run(
        [str(binary()), "hash-token"], input=token, capture_output=True, text=True, check=True
    ).stdout.strip()
    return f'[[token]]\nname = "{name}"\nsha256 = "{digest}"\n{extra}\n\n'


def assert_error(
    error: jobgate.JobgateError, cls: type[jobgate.JobgateError], code: str, message: str
) -> None:
    """The exception is exactly ``cls``, with ``code`` and the server's ``message``."""
    assert type(error) is cls, f"{type(error).__name__}: {error}"
    assert error.code == code
    assert error.extensions.get("code") == code
    assert error.message == message
    assert str(error) == f"{code}: {message}"


# -- BAD_USER_INPUT, NOT_FOUND, FAILED_PRECONDITION ---------------------------------------


@pytest.mark.parametrize("kind", KINDS)
async def test_bad_user_input_names_the_field(server: Server, kind: str) -> None:
    async with Api(kind, server.url) as api:
        with pytest.raises(jobgate.BadUserInput) as raised:
            await api.submit(command=["true"], parallelism=1000)
    assert_error(
        raised.value,
        jobgate.BadUserInput,
        "BAD_USER_INPUT",
        "input.parallelism: must be at most 64, got 1000",
    )
    assert raised.value.field == "input.parallelism"


@pytest.mark.parametrize("kind", KINDS)
async def test_not_found(server: Server, kind: str) -> None:
    async with Api(kind, server.url) as api:
        with pytest.raises(jobgate.NotFound) as raised:
            await api.cancel("no-such-job")
    assert_error(raised.value, jobgate.NotFound, "NOT_FOUND", 'no job with id "no-such-job"')


async def test_not_found_over_a_subscription(server: Server) -> None:
    async with jobgate.AsyncClient(server.url) as client:
        job = await client.submit(command=["true"], namespace=namespace())
        with pytest.raises(jobgate.NotFound) as raised:
            async for _ in client.watch("no-such-job", after=job.last_event_cursor):
                pass
    assert_error(raised.value, jobgate.NotFound, "NOT_FOUND", 'no job with id "no-such-job"')


async def test_get_of_a_job_that_is_not_there_is_not_found(server: Server) -> None:
    # The server answers `job: null`; the client says which id it asked for.
    async with jobgate.AsyncClient(server.url) as client:
        with pytest.raises(jobgate.NotFound) as raised:
            await client.get("no-such-job")
    assert raised.value.code == "NOT_FOUND"
    assert "no-such-job" in raised.value.message


@pytest.mark.parametrize("kind", KINDS)
async def test_failed_precondition_cancelling_a_finished_job(server: Server, kind: str) -> None:
    async with Api(kind, server.url) as api:
        job = await api.submit(command=["true"], namespace=namespace())
        assert (await api.wait(job.id)).phase == JobPhase.SUCCEEDED
        with pytest.raises(jobgate.FailedPrecondition) as raised:
            await api.cancel(job.id)
    error = raised.value
    assert type(error) is jobgate.FailedPrecondition and error.code == "FAILED_PRECONDITION"
    # Recorded, or (a moment before) still being recorded: the server words both.
    assert error.message in (
        f"job {job.id} has already finished (SUCCEEDED)",
        f"job {job.id} has already finished; its outcome is being recorded",
    ), error.message


# -- UNAUTHENTICATED and FORBIDDEN --------------------------------------------------------

MISSING = "missing credentials: send `Authorization: Bearer <token>`"
INVALID = "invalid credentials"


@pytest.fixture
def no_token_in_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """A client given no token takes ``JOBGATE_TOKEN``: these tests mean none at all."""
    monkeypatch.delenv("JOBGATE_TOKEN", raising=False)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.usefixtures("no_token_in_the_environment")
async def test_unauthenticated_without_or_with_a_wrong_token(start_server: StartServer, kind: str) -> None:
    server = start_server("--api-token", "the-right-token")
    for token, message in [(None, MISSING), ("a-wrong-token", INVALID)]:
        async with Api(kind, server.url, token=token) as api:
            with pytest.raises(jobgate.Unauthenticated) as raised:
                await api.submit(command=["true"])
            assert_error(raised.value, jobgate.Unauthenticated, "UNAUTHENTICATED", message)
            with pytest.raises(jobgate.Unauthenticated):
                await api.list()
    async with Api(kind, server.url, token="the-right-token") as api:
        job = await api.submit(command=["true"])
        assert (await api.wait(job.id)).phase == JobPhase.SUCCEEDED


@pytest.mark.usefixtures("no_token_in_the_environment")
async def test_unauthenticated_subscriptions_raise_rather_than_reconnect(
    start_server: StartServer, tmp_path: Path
) -> None:
    tokens = tokens_file(tmp_path / "tokens.toml", token_entry("ops", "ops-token", "admin = true"))
    server = start_server("--api-tokens-file", str(tokens))
    async with jobgate.AsyncClient(server.url, token="ops-token") as ops:
        job = await ops.submit(command=["sleep", "600"])
    try:
        for token, why in [(None, MISSING), ("a-wrong-token", INVALID)]:
            # A reconnecting client would go on for reconnect_timeout (300 s): the bound below
            # turns that into a failure.
            async with jobgate.AsyncClient(server.url, token=token) as client:

                async def follow() -> None:
                    async for _ in client.watch(after=job.last_event_cursor):
                        pass

                with pytest.raises(jobgate.Unauthenticated) as watched:
                    await asyncio.wait_for(follow(), PATIENCE)
                # The WebSocket refusal (close 4403) carries the server's words.
                assert watched.value.code == "UNAUTHENTICATED"
                assert watched.value.message == f"Forbidden: {why}"

                with pytest.raises(jobgate.Unauthenticated) as waited:
                    await asyncio.wait_for(client.wait(job.id), PATIENCE)
                assert_error(waited.value, jobgate.Unauthenticated, "UNAUTHENTICATED", why)
    finally:
        async with jobgate.AsyncClient(server.url, token="ops-token") as ops:
            await ops.cancel(job.id)


@pytest.mark.parametrize("kind", KINDS)
async def test_forbidden_outside_the_tokens_namespaces(
    start_server: StartServer, tmp_path: Path, kind: str
) -> None:
    tokens = tokens_file(tmp_path / "tokens.toml", token_entry("ci", "ci-token", 'namespaces = ["team-a"]'))
    server = start_server("--api-tokens-file", str(tokens))
    async with Api(kind, server.url, token="ci-token") as api:
        with pytest.raises(jobgate.Forbidden) as raised:
            await api.submit(command=["true"], namespace="team-b")
        assert_error(raised.value, jobgate.Forbidden, "FORBIDDEN", 'you may not use namespace "team-b"')
        # The server's default namespace is outside it too.
        with pytest.raises(jobgate.Forbidden) as default:
            await api.submit(command=["true"])
        assert_error(default.value, jobgate.Forbidden, "FORBIDDEN", 'you may not use namespace "default"')
        job = await api.submit(command=["true"], namespace="team-a")
        assert job.submitter == "ci"


# -- RATE_LIMITED, QUOTA_EXCEEDED, LIMIT_EXCEEDED -----------------------------------------


@pytest.mark.parametrize("kind", KINDS)
async def test_rate_limited_surfaces_without_retries(start_server: StartServer, kind: str) -> None:
    server = start_server("--mutations-per-minute", "1")
    async with Api(kind, server.url, retries=0) as api:
        await api.submit(command=["true"])
        with pytest.raises(jobgate.RateLimited) as raised:
            await api.submit(command=["true"])
    error = raised.value
    assert error.retry_after is not None and 1 <= error.retry_after <= 60
    seconds = int(error.retry_after)
    assert_error(error, jobgate.RateLimited, "RATE_LIMITED", f"too many mutations: retry in {seconds} s")
    assert error.extensions["retryAfterSeconds"] == seconds


async def test_rate_limited_is_retried_after_the_time_the_server_gives(
    start_server: StartServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 6 a minute: one more every 10 s once a burst of 6 has spent the bucket. (A slower
    # refill leaves the test more slack between spending the bucket and being refused.)
    server = start_server("--mutations-per-minute", "6")
    # The retry's jitter at its least, so that the test does not depend on luck.
    monkeypatch.setattr(random, "random", lambda: 0.0)
    async with Relay(server.address or "") as relay:
        async with jobgate.AsyncClient(relay.url, retries=1) as client:
            # Six refused inputs spend six mutations and start no process.
            with pytest.raises(jobgate.SubmitManyError):
                await client.submit_many([{"command": ["true"], "depends_on": ["missing"]}] * 6)
            relay.requests.clear()
            # Refused, then tried once more: one retry is enough when it waits as long as
            # the server said (10 s); sooner, it is refused again and the retry is spent.
            job = await client.submit(name="after-waiting", command=["true"])
        sent = [r for r in relay.requests if r.operation == "SubmitJob"]
        assert len(sent) == 2, "refused once, then accepted"
        assert sent[0].json["variables"]["input"]["idempotencyKey"] == job.spec.idempotency_key
        assert sent[1].json["variables"]["input"]["idempotencyKey"] == job.spec.idempotency_key
        assert job.name == "after-waiting"


async def test_a_rate_limited_subscription_resumes_after_the_time_the_server_gives(
    start_server: StartServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 6 subscriptions a minute: one more every 10 s once six have spent the bucket.
    server = start_server("--subscriptions-per-minute", "6")
    async with jobgate.AsyncClient(server.url, reconnect_timeout=0) as spender:
        job = await spender.submit(command=["true"])
        start = job.last_event_cursor
        assert (await spender.wait(job.id, timeout=PATIENCE)).phase == JobPhase.SUCCEEDED
        with pytest.raises(jobgate.RateLimited) as raised:
            for _ in range(7):
                assert [e.phase async for e in spender.watch(job.id, after=start)][-1] == JobPhase.SUCCEEDED
    assert raised.value.retry_after == 10
    assert raised.value.message == "too many subscriptions: retry in 10 s"

    monkeypatch.setattr(random, "random", lambda: 0.0)
    async with Relay(server.address or "") as relay, jobgate.AsyncClient(relay.url) as client:
        phases = await asyncio.wait_for(_phases(client.watch(job.id, after=start)), PATIENCE)
    assert phases[-1] == JobPhase.SUCCEEDED
    # Refused once, then opened again once the server's 10 s had passed, not every
    # back-off step (0.05 s, doubling to 2 s) in between.
    upgrades = [r for r in relay.requests if r.headers.get("upgrade", "").lower() == "websocket"]
    assert len(upgrades) == 2


async def test_a_subscription_refused_for_too_many_connections_reconnects_after_the_time_given(
    start_server: StartServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 6 WebSocket connections a minute; a seventh is closed with 1013 and when to retry.
    server = start_server("--connections-per-minute", "6")
    async with jobgate.AsyncClient(server.url, reconnect_timeout=0) as spender:
        job = await spender.submit(command=["true"])
        start = job.last_event_cursor
        assert (await spender.wait(job.id, timeout=PATIENCE)).phase == JobPhase.SUCCEEDED
        with pytest.raises(jobgate.RateLimited) as raised:
            for _ in range(7):
                assert (await _phases(spender.watch(job.id, after=start)))[-1] == JobPhase.SUCCEEDED
    assert raised.value.message == "too many connections: retry in 10 s"
    assert raised.value.retry_after == 10

    monkeypatch.setattr(random, "random", lambda: 0.0)
    async with Relay(server.address or "") as relay, jobgate.AsyncClient(relay.url) as client:
        phases = await asyncio.wait_for(_phases(client.watch(job.id, after=start)), PATIENCE)
    assert phases[-1] == JobPhase.SUCCEEDED
    upgrades = [r for r in relay.requests if r.headers.get("upgrade", "").lower() == "websocket"]
    assert len(upgrades) == 2


async def _phases(events: Any) -> list[JobPhase]:
    return [event.phase async for event in events]


@pytest.mark.parametrize("kind", KINDS)
async def test_quota_exceeded(start_server: StartServer, kind: str) -> None:
    server = start_server("--max-active-jobs-per-namespace", "1")
    ns = namespace()
    async with Api(kind, server.url) as api:
        running = await api.submit(command=["sleep", "600"], namespace=ns)
        with pytest.raises(jobgate.QuotaExceeded) as raised:
            await api.submit(command=["true"], namespace=ns)
        assert_error(
            raised.value,
            jobgate.QuotaExceeded,
            "QUOTA_EXCEEDED",
            f'namespace "{ns}" already has 1 active jobs (PENDING or RUNNING), its quota; '
            "submit again when some have finished",
        )
        # Another namespace has a quota of its own.
        other = await api.submit(command=["true"], namespace=namespace())
        assert other.phase == JobPhase.PENDING
        await api.cancel(running.id)


CREATE_WEBHOOK = """mutation CreateWebhook($input: CreateWebhookInput!) {
  createWebhook(input: $input) { webhook { id } }
}"""


async def test_limit_exceeded(start_server: StartServer) -> None:
    # A caller may own 100 webhook endpoints. The client has no webhook calls: its transport
    # sends the server's mutation, and maps the answer as for every call.
    server = start_server("--webhook-allow-private-targets")
    transport = Transport(server.url)
    try:
        variables = {"input": {"url": "http://127.0.0.1:9/hook", "filter": {"namespace": namespace()}}}
        for _ in range(100):
            await transport.execute(CREATE_WEBHOOK, "CreateWebhook", variables)
        with pytest.raises(jobgate.LimitExceeded) as raised:
            await transport.execute(CREATE_WEBHOOK, "CreateWebhook", variables)
    finally:
        await transport.aclose()
    assert_error(
        raised.value,
        jobgate.LimitExceeded,
        "LIMIT_EXCEEDED",
        "at most 100 webhooks per caller; delete one first",
    )


# -- CURSOR_EXPIRED -----------------------------------------------------------------------


async def test_cursor_expired_with_the_oldest_cursor_to_resume_after(start_server: StartServer) -> None:
    # Finished jobs go 0.0001 days (8.64 s) after they finish; sweeps run every 100 ms.
    server = start_server("--retention-days", "0.0001", "--retention-interval-ms", "100")
    async with jobgate.AsyncClient(server.url) as client:
        gone = await client.submit(name="gone", command=["true"])
        before = gone.last_event_cursor
        assert before is not None
        assert (await client.wait(gone.id, timeout=PATIENCE)).phase == JobPhase.SUCCEEDED

        async def deleted() -> None:
            while True:
                try:
                    await client.get(gone.id)
                except jobgate.NotFound:
                    return
                await asyncio.sleep(0.1)

        await asyncio.wait_for(deleted(), PATIENCE)

        with pytest.raises(jobgate.CursorExpired) as raised:
            async for _ in client.watch(after=before):
                pass
        error = raised.value
        oldest = error.oldest_cursor
        assert oldest is not None and int(oldest) > int(before)
        assert_error(
            error,
            jobgate.CursorExpired,
            "CURSOR_EXPIRED",
            f"events after cursor {before} were deleted by retention (--retention-days); "
            f"the oldest cursor to resume after is {oldest}",
        )
        assert "jobStats" in error.extensions["recovery"]

        # Resumed after the oldest cursor, nothing is missing: a new job's events come.
        later = await client.submit(name="later", command=["true"])

        async def first_event_of_later() -> jobgate.StatusEvent:
            async with contextlib.aclosing(client.watch(after=oldest)) as events:
                async for event in events:
                    if event.job.id == later.id:
                        return event
            raise AssertionError("the stream ended")

        event = await asyncio.wait_for(first_event_of_later(), PATIENCE)
        assert event.phase == JobPhase.PENDING


# -- UNAVAILABLE, DEADLINE_EXCEEDED, DATA_LOSS --------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
async def test_unavailable_template_on_this_executor(server: Server, kind: str) -> None:
    # UNAVAILABLE is transient: with retries the client would try again; without, it surfaces.
    async with Api(kind, server.url, retries=0) as api:
        with pytest.raises(jobgate.Unavailable) as raised:
            await api.submit(
                template="argo-workflow", image="busybox:1.36", command=["true"], namespace=namespace()
            )
    assert_error(
        raised.value,
        jobgate.Unavailable,
        "UNAVAILABLE",
        "template argo-workflow is not available: template argo-workflow creates Kubernetes objects; "
        "this server runs jobs with the local executor",
    )


class WriteLock:
    """Holds the SQLite store's write lock from outside jobgate, as another process might."""

    def __init__(self, server: Server) -> None:
        self.db = sqlite3.connect(server.data_dir / "jobgate.db", isolation_level=None, timeout=30)

    def __enter__(self) -> WriteLock:
        self.db.execute("BEGIN IMMEDIATE")
        return self

    def __exit__(self, *exc: object) -> None:
        self.db.execute("ROLLBACK")
        self.db.close()


async def test_unavailable_while_the_store_cannot_write(start_server: StartServer) -> None:
    server = start_server()
    ns = namespace()
    database = server.data_dir / "jobgate.db"
    async with jobgate.AsyncClient(server.url, retries=0) as client:
        first = await client.submit(name="before", namespace=ns, command=["true"])
        # The database file gone from the data directory (deleted, a volume unmounted):
        # jobgate refuses to write rather than commit into a file nobody will read again.
        database.rename(database.with_name("moved-away.db"))
        try:
            with pytest.raises(jobgate.Unavailable) as raised:
                await client.submit(name="held", namespace=ns, command=["true"])
        finally:
            database.with_name("moved-away.db").rename(database)
    assert_error(
        raised.value,
        jobgate.Unavailable,
        "UNAVAILABLE",
        "jobgate could not use its store and changed nothing; retry shortly",
    )
    async with jobgate.AsyncClient(server.url) as client:
        after = await client.submit(name="after", namespace=ns, command=["true"])
        listed = await _all(client.list(namespace=ns))
    assert [job.name for job in listed] == ["after", "before"], "the refused submission changed nothing"
    assert [job.id for job in listed] == [after.id, first.id]


async def _all(jobs: Any) -> list[jobgate.Job]:
    return [job async for job in jobs]


async def test_deadline_exceeded_when_a_request_outlives_its_limit(start_server: StartServer) -> None:
    server = start_server("--request-timeout-ms", "300")
    async with jobgate.AsyncClient(server.url, retries=0) as client:
        with WriteLock(server):
            # The submission waits for the lock well past the request's limit.
            with pytest.raises(jobgate.DeadlineExceeded) as raised:
                await client.submit(command=["true"], idempotency_key="stopped-by-the-deadline")
    assert_error(
        raised.value,
        jobgate.DeadlineExceeded,
        "DEADLINE_EXCEEDED",
        "the request ran longer than 300 ms and was stopped",
    )
    assert raised.value.transient


async def test_data_loss_for_a_row_that_cannot_be_read(start_server: StartServer) -> None:
    server = start_server()
    async with jobgate.AsyncClient(server.url) as client:
        job = await client.submit(name="damaged", command=["true"])
        assert (await client.wait(job.id, timeout=PATIENCE)).phase == JobPhase.SUCCEEDED
    # Damaged in the store while jobgate is stopped, as a hand edit or a bad disk would.
    server.stop()
    with sqlite3.connect(server.data_dir / "jobgate.db") as db:
        changed = db.execute('UPDATE jobs SET body = \'{"not": "a job"}\' WHERE id = ?', (job.id,)).rowcount
    assert changed == 1
    server.start()
    async with jobgate.AsyncClient(server.url) as client:
        for call in (client.get, client.cancel):
            with pytest.raises(jobgate.DataLoss) as raised:
                await call(job.id)
            error = raised.value
            assert type(error) is jobgate.DataLoss and error.code == "DATA_LOSS"
            # The server says which job and why (the decoder's words, kept as they are).
            assert error.message.startswith(f'job "{job.id}" is stored but cannot be read (')
            assert error.message.endswith("); every other job is served")
        fresh = await client.submit(name="fresh", command=["true"])
        assert (await client.wait(fresh.id, timeout=PATIENCE)).phase == JobPhase.SUCCEEDED


# -- below GraphQL: ConnectionFailed ------------------------------------------------------


def a_port_nothing_listens_on() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


@pytest.mark.parametrize("kind", KINDS)
async def test_connection_failed_when_nothing_listens(kind: str) -> None:
    url = f"http://127.0.0.1:{a_port_nothing_listens_on()}"
    async with Api(kind, url, retries=0) as api:
        with pytest.raises(jobgate.ConnectionFailed) as raised:
            await api.submit(command=["true"])
    error = raised.value
    assert type(error) is jobgate.ConnectionFailed and error.code is None and error.transient
    assert error.message.startswith(f"cannot reach {url}/graphql: ")

    async with jobgate.AsyncClient(url, reconnect_timeout=0.5) as client:
        with pytest.raises(jobgate.ConnectionFailed) as watched:
            async for _ in client.watch(after="1"):
                pass
    assert watched.value.message.startswith(f"cannot reach ws://127.0.0.1:{url.rsplit(':', 1)[1]}/graphql: ")


# -- submit retried safely ----------------------------------------------------------------


def once(action: Action, operation: str) -> Callable[[Request], Action]:
    """``action`` for the first request of ``operation``; every other request is forwarded."""
    done: list[Request] = []

    def decide(request: Request) -> Action:
        if request.operation == operation and not done:
            done.append(request)
            return action
        return "forward"

    return decide


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("action", ["drop_answer", "answer_503"])
async def test_submit_retried_after_a_lost_answer_creates_one_job(
    server: Server, kind: str, action: Action
) -> None:
    ns = namespace()
    async with Relay(server.address or "", decide=once(action, "SubmitJob")) as relay:
        async with Api(kind, relay.url, retries=2) as api:
            job = await api.submit(name="exactly-once", namespace=ns, command=["true"])
            listed = await api.list(namespace=ns)
    sent = [r for r in relay.requests if r.operation == "SubmitJob"]
    assert [r.action for r in sent] == [action, "forward"]
    keys = {r.json["variables"]["input"]["idempotencyKey"] for r in sent}
    assert keys == {job.spec.idempotency_key}, "the retry carries the first try's key"
    # When the answer was dropped jobgate had accepted the job: the retry found it.
    assert [j.id for j in listed] == [job.id]


async def test_submit_many_retried_after_a_lost_answer_creates_each_job_once(server: Server) -> None:
    ns = namespace()
    async with Relay(server.address or "", decide=once("drop_answer", "SubmitJobs")) as relay:
        async with jobgate.AsyncClient(relay.url, retries=2) as client:
            jobs = await client.submit_many(
                [{"name": f"many-{i}", "namespace": ns, "command": ["true"]} for i in range(3)]
            )
            listed = await _all(client.list(namespace=ns))
    assert [r.action for r in relay.requests if r.operation == "SubmitJobs"] == ["drop_answer", "forward"]
    assert sorted(j.id for j in listed) == sorted(j.id for j in jobs)
    assert len(listed) == 3


async def test_a_503_without_retries_is_connection_failed(server: Server) -> None:
    async with Relay(server.address or "", decide=once("answer_503", "SubmitJob")) as relay:
        async with jobgate.AsyncClient(relay.url, retries=0) as client:
            with pytest.raises(jobgate.ConnectionFailed) as raised:
                await client.submit(command=["true"], namespace=namespace())
    assert raised.value.message == f"{relay.url}/graphql answered HTTP 503 without a GraphQL answer"
    assert raised.value.transient
