"""Subscriptions that resume: through a proxy that cuts or freezes the connection, and across
a kill -9 of jobgate, what the client yields equals the server's record, in order, with no
gap and no repeat; and a subscription ends, raises or closes when it should.

The record is read independently of the client under test: each job's ``events`` and
``logLines`` over plain HTTP, and a second ``jobEvents`` subscription straight to the server.
Jobs that must not move on until the test says so wait for a gate file the test creates.
"""

from __future__ import annotations

import asyncio
import gc
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Optional

import httpx
import pytest

import jobgate
from jobgate import JobPhase, StatusEvent
from proxy import Proxy
from server import Server

#: Generous bounds on waits for conditions: they only matter when something is broken.
PATIENCE = 180.0

#: A job's command that waits for the file named by its first argument to exist.
GATED = 'while [ ! -e "$0" ]; do sleep 0.05; done; echo "passed $0"'


def gated(gate: Path) -> list[str]:
    return ["sh", "-c", GATED, str(gate)]


def graphql(server: Server, query: str, variables: Optional[dict[str, Any]] = None) -> Any:
    """A query's data, sent straight to the server over HTTP (not through the client)."""
    response = httpx.post(
        server.url + "/graphql", json={"query": query, "variables": variables or {}}, timeout=30
    )
    body = response.json()
    assert not body.get("errors"), body
    return body["data"]


def event_head(server: Server) -> str:
    cursor = graphql(server, "{ jobStats(windowMinutes: 1, bucketSeconds: 60) { cursor } }")
    return str(cursor["jobStats"]["cursor"])


def recorded_events(server: Server, job_ids: list[str], after: str) -> list[str]:
    """The cursors of the jobs' recorded events after ``after``, in cursor order."""
    cursors: list[int] = []
    for id in job_ids:
        data = graphql(
            server, "query($id: ID!) { job(id: $id) { events(last: 1000) { cursor } } }", {"id": id}
        )
        cursors += [int(e["cursor"]) for e in data["job"]["events"] if int(e["cursor"]) > int(after)]
    return [str(c) for c in sorted(cursors)]


def recorded_lines(server: Server, job_id: str) -> list[tuple[str, str]]:
    """The job's archived output as (cursor, text), every page of ``logLines``."""
    lines: list[tuple[str, str]] = []
    after: Optional[str] = None
    while True:
        data = graphql(
            server,
            """query($id: ID!, $after: String) { job(id: $id) { logLines(first: 500, after: $after) {
                 edges { node { cursor text } } pageInfo { hasNextPage endCursor } } } }""",
            {"id": job_id, "after": after},
        )
        page = data["job"]["logLines"]
        lines += [(e["node"]["cursor"], e["node"]["text"]) for e in page["edges"]]
        if not page["pageInfo"]["hasNextPage"]:
            return lines
        after = page["pageInfo"]["endCursor"]


def cursors(events: list[StatusEvent]) -> list[str]:
    return [e.cursor for e in events]


def assert_once_in_order(yielded: list[str]) -> None:
    as_ints = [int(c) for c in yielded]
    assert len(set(as_ints)) == len(as_ints), f"repeated cursors in {yielded}"
    assert as_ints == sorted(as_ints), f"cursors out of order: {yielded}"


async def until(condition: Callable[[], bool], what: str, timeout: float = PATIENCE) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


def wait_until(condition: Callable[[], bool], what: str, timeout: float = PATIENCE) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


@pytest.fixture
def gates() -> Iterator[Path]:
    """A directory for gate files that jobs can see: local jobs run as another user
    (``nobody``), who cannot enter pytest's private ``tmp_path``."""
    path = Path(tempfile.mkdtemp(prefix="jobgate-gates-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def own_server(start_server: Callable[..., Server]) -> Server:
    """A jobgate of the test's own: its every event is the test's."""
    return start_server()


@pytest.fixture
def proxy(own_server: Server) -> Iterator[Proxy]:
    assert own_server.address is not None
    with Proxy(own_server.address) as started:
        yield started


# -- 1. watch() of every job, through cuts ------------------------------------------------


async def test_watch_of_every_job_yields_the_servers_record_through_repeated_cuts(
    own_server: Server, proxy: Proxy
) -> None:
    """Six jobs' events flow while the proxy resets the subscription's connection: before
    any event, at fixed points of the stream, and again right as the client reconnects."""
    start = event_head(own_server)
    jobs_count = 6
    cut_at = {1, 6, 17, 25, 38, 47}
    seen: list[StatusEvent] = []
    # Connections reset before the second batch was submitted: each needs a reconnect.
    reset_before_second_batch = 0

    def finished(events: list[StatusEvent]) -> bool:
        return sum(1 for e in events if e.phase in jobgate.TERMINAL) == jobs_count

    async def cut() -> int:
        return await asyncio.to_thread(proxy.cut)

    async def proxy_reaches(condition: Callable[[Proxy], bool]) -> None:
        await asyncio.to_thread(proxy.wait_for, condition, PATIENCE)

    def job(i: int) -> dict[str, Any]:
        return {
            "name": f"resume-{i}",
            "command": ["sh", "-c", "sleep 0.2; echo ok"],
            "completions": 3,
            "parallelism": 2,
        }

    async with jobgate.AsyncClient(own_server.url) as direct, jobgate.AsyncClient(proxy.url) as client:

        async def consume() -> None:
            async for event in client.watch(after=start):
                seen.append(event)
                if len(seen) in cut_at:
                    await cut()
                if finished(seen):
                    return

        consumer = asyncio.create_task(consume())
        # Before any event: the subscription idles when it is reset.
        await proxy_reaches(lambda p: p.open_websockets >= 1)
        reset_before_second_batch += await cut()

        first = await direct.submit_many([job(i) for i in range(3)])
        await until(lambda: len(seen) >= 12, "a dozen events")
        # Twice in a row: the second reset hits the connection the client has just opened.
        await proxy_reaches(lambda p: p.open_websockets >= 1)
        before = proxy.websocket_connections
        reset_before_second_batch += await cut()
        await proxy_reaches(lambda p: p.websocket_connections > before)
        reset_before_second_batch += await cut()
        second = await direct.submit_many([job(i) for i in range(3, 6)])
        await asyncio.wait_for(consumer, PATIENCE)

        # The same replay, straight to the server.
        reference: list[StatusEvent] = []

        async def replay() -> None:
            async for event in direct.watch(after=start):
                reference.append(event)
                if finished(reference):
                    return

        await asyncio.wait_for(replay(), PATIENCE)

    ids = [j.id for j in first + second]
    assert reset_before_second_batch >= 2
    assert proxy.websocket_connections >= reset_before_second_batch + 1
    assert_once_in_order(cursors(seen))
    assert cursors(seen) == cursors(reference)
    assert cursors(seen) == recorded_events(own_server, ids, start)
    assert {e.job.id for e in seen} == set(ids)
    assert all(e.job.phase == JobPhase.SUCCEEDED for e in seen if e.phase in jobgate.TERMINAL)


# -- 2. watch(id) and wait(id) across a kill -9 of the server ------------------------------


@pytest.mark.parametrize("kill", [True, False], ids=["kill-9", "sigterm"])
def test_watch_of_one_job_resumes_across_a_restart_of_the_server_and_ends_after_its_terminal_event(
    own_server: Server, gates: Path, kill: bool
) -> None:
    """Killed, the server drops the socket unannounced; stopped, it closes it with 1001."""
    gate = gates / "gate"
    with jobgate.Client(own_server.url) as client:
        job = client.submit(
            name="across-restart", command=gated(gate), completions=2, parallelism=1, backoff_limit=6
        )
        start = job.last_event_cursor
        seen: list[StatusEvent] = []
        ended = threading.Event()
        failure: list[BaseException] = []

        def consume() -> None:
            try:
                for event in client.watch(job.id, after=start):
                    seen.append(event)
            except BaseException as e:  # reported by the test's thread below
                failure.append(e)
            finally:
                ended.set()

        threading.Thread(target=consume, daemon=True).start()
        # The job runs and waits at its gate: its events so far are delivered.
        wait_until(lambda: any(e.phase == JobPhase.RUNNING for e in seen), "the job's RUNNING event")
        before_restart = len(seen)
        own_server.restart(kill=kill)
        gate.touch()
        assert ended.wait(PATIENCE), "the watch did not end after the job's terminal event"
        assert not failure, failure

        assert len(seen) > before_restart, "no event arrived after the restart"
        assert seen[-1].phase == JobPhase.SUCCEEDED
        assert all(e.phase not in jobgate.TERMINAL for e in seen[:-1])
        assert_once_in_order(cursors(seen))
        assert cursors(seen) == recorded_events(own_server, [job.id], start)
        # The run the kill interrupted counts as lost, and was run again.
        progress = client.get(job.id).progress
        assert progress is not None and progress.succeeded == 2


async def test_wait_returns_the_finished_job_across_a_kill_of_the_server(
    own_server: Server, proxy: Proxy, gates: Path
) -> None:
    gate = gates / "gate"
    async with jobgate.AsyncClient(proxy.url) as client:
        job = await client.submit(name="wait-restart", command=gated(gate), backoff_limit=6)
        waiting = asyncio.create_task(client.wait(job.id, timeout=PATIENCE))
        # wait() follows the job on a subscription: once it is open, kill the server.
        await asyncio.to_thread(proxy.wait_for, lambda p: p.open_websockets >= 1, PATIENCE)
        await asyncio.to_thread(own_server.restart, True)
        gate.touch()
        done = await waiting
    assert done.id == job.id
    assert done.phase == JobPhase.SUCCEEDED
    assert proxy.websocket_connections >= 2


async def test_a_wait_started_while_the_server_is_down_waits_for_it_to_come_back(
    own_server: Server, proxy: Proxy, gates: Path
) -> None:
    gate = gates / "gate"
    async with jobgate.AsyncClient(own_server.url) as direct:
        job = await direct.submit(name="wait-down", command=gated(gate))
    own_server.stop()
    # No retries for ordinary calls: only the subscription's patience can carry it through.
    async with jobgate.AsyncClient(proxy.url, retries=0, reconnect_timeout=PATIENCE) as client:
        waiting = asyncio.create_task(client.wait(job.id, timeout=PATIENCE))
        # Its first reads failed (the proxy found nothing behind it) before the server is back.
        await asyncio.to_thread(proxy.wait_for, lambda p: p.connections >= 3, PATIENCE)
        assert not waiting.done()
        await asyncio.to_thread(own_server.start)
        await asyncio.to_thread(proxy.wait_for, lambda p: p.open_websockets >= 1, PATIENCE)
        gate.touch()
        done = await waiting
    assert done.id == job.id
    assert done.phase == JobPhase.SUCCEEDED


# -- 3. logs(follow=True) through cuts ----------------------------------------------------


def test_followed_logs_yield_every_line_once_in_order_through_cuts(
    own_server: Server, proxy: Proxy, gates: Path
) -> None:
    """Three bursts of 400 lines, each behind a gate; the proxy resets the connection at
    fixed lines, while lines flow and while the job waits at a gate."""
    script = (
        'gate() { while [ ! -e "$1" ]; do sleep 0.05; done; }; i=1; '
        'for n in 400 800 1200; do gate "$0/g$n"; '
        'while [ $i -le $n ]; do echo "line $i"; i=$((i+1)); done; done'
    )
    job_dir = gates
    cut_at = {1, 150, 400, 401, 650, 800, 801, 1000, 1150}
    with jobgate.Client(own_server.url) as direct, jobgate.Client(proxy.url) as client:
        job = direct.submit(name="logs", command=["sh", "-c", script, str(job_dir)])
        (job_dir / "g400").touch()
        got: list[jobgate.LogLine] = []
        for line in client.logs(job.id, follow=True):
            got.append(line)
            if len(got) in cut_at:
                proxy.cut()
            if len(got) in (400, 800):
                (job_dir / f"g{len(got) + 400}").touch()
        assert direct.get(job.id).phase == JobPhase.SUCCEEDED
    assert [line.text for line in got] == [f"line {i}" for i in range(1, 1201)]
    assert [(line.cursor, line.text) for line in got] == recorded_lines(own_server, job.id)
    assert proxy.websocket_connections >= 2


# -- 4. a frozen connection, found by keepalive --------------------------------------------


async def test_a_frozen_connection_is_found_by_keepalive_and_the_watch_resumes_with_no_gap(
    own_server: Server, proxy: Proxy, gates: Path
) -> None:
    """The proxy stops every byte (and every close) both ways while the job's later events
    are produced: only the client's keepalive can tell it the connection is dead."""
    gate = gates / "gate"
    async with jobgate.AsyncClient(own_server.url) as direct, jobgate.AsyncClient(
        proxy.url, keepalive=1
    ) as client:
        job = await direct.submit(name="frozen", command=gated(gate), completions=2, parallelism=1)
        start = job.last_event_cursor
        seen: list[StatusEvent] = []

        async def consume() -> None:
            async for event in client.watch(job.id, after=start):
                seen.append(event)

        consumer = asyncio.create_task(consume())
        await until(lambda: any(e.phase == JobPhase.RUNNING for e in seen), "the RUNNING event")
        connections_before = proxy.websocket_connections

        proxy.freeze()
        frozen_at = (await direct.get(job.id)).last_event_cursor
        gate.touch()
        done = await direct.wait(job.id, timeout=PATIENCE)
        assert done.phase == JobPhase.SUCCEEDED
        produced_while_frozen = recorded_events(own_server, [job.id], frozen_at)
        assert produced_while_frozen, "the job made no event while the connection was frozen"
        # Nothing crosses a frozen proxy: none of them has reached the client yet.
        assert max(int(c) for c in cursors(seen)) <= int(frozen_at)

        # The server's side of the frozen connection looks alive (its closes are held too):
        # the client gives up on it only because its pings go unanswered.
        await asyncio.to_thread(
            proxy.wait_for, lambda p: p.websockets_closed_by_client >= 1, PATIENCE
        )
        proxy.thaw()
        await asyncio.wait_for(consumer, PATIENCE)

    assert proxy.websocket_connections > connections_before, "the client did not reconnect"
    assert_once_in_order(cursors(seen))
    assert cursors(seen) == recorded_events(own_server, [job.id], start)
    for cursor in produced_while_frozen:
        assert cursors(seen).count(cursor) == 1
    assert seen[-1].phase == JobPhase.SUCCEEDED


# -- when a subscription ends, raises, or closes -------------------------------------------


async def test_watch_of_a_job_that_finished_before_the_cursor_ends_at_once(server: Server) -> None:
    async with jobgate.AsyncClient(server.url) as client:
        job = await client.submit(name="done-before", command=["true"])
        done = await client.wait(job.id, timeout=PATIENCE)
        first_cursor = job.last_event_cursor

        async def watched(after: Optional[str]) -> list[str]:
            return [e.cursor async for e in client.watch(job.id, after=after)]

        # From now (the job's last event): nothing is left to come.
        assert await asyncio.wait_for(watched(None), PATIENCE) == []
        assert await asyncio.wait_for(watched(done.last_event_cursor), PATIENCE) == []
        # From its submission: the rest of its events, then the end.
        rest = await asyncio.wait_for(watched(first_cursor), PATIENCE)
        assert rest == recorded_events(server, [job.id], first_cursor)
        assert rest[-1] == done.last_event_cursor


async def test_a_cursor_no_event_reached_is_refused_at_once_without_reconnecting(
    own_server: Server, proxy: Proxy
) -> None:
    async with jobgate.AsyncClient(proxy.url) as client:

        async def drain() -> None:
            async for _ in client.watch(after=str(10**12)):
                pass

        with pytest.raises(jobgate.BadUserInput):
            await asyncio.wait_for(drain(), PATIENCE)
    assert proxy.websocket_connections == 1


async def test_a_watch_gives_up_once_the_server_stays_away_for_reconnect_timeout(
    own_server: Server, proxy: Proxy
) -> None:
    start = event_head(own_server)
    async with jobgate.AsyncClient(own_server.url) as direct, jobgate.AsyncClient(
        proxy.url, reconnect_timeout=2
    ) as client:
        await direct.submit(name="before-stop", command=["true"])
        events = client.watch(after=start)
        first = await asyncio.wait_for(events.__anext__(), PATIENCE)
        assert first.job.name == "before-stop"
        own_server.stop(kill=True)

        async def drain() -> None:
            async for _ in events:
                pass

        with pytest.raises(jobgate.ConnectionFailed):
            await asyncio.wait_for(drain(), PATIENCE)
    # It did try again before giving up.
    assert proxy.connections >= 2


def test_the_sync_iterator_closes_its_subscription_when_the_loop_stops_early(
    server: Server
) -> None:
    assert server.address is not None
    start = event_head(server)
    with Proxy(server.address) as proxy, jobgate.Client(proxy.url) as client:
        job = client.submit(name="break-early", command=["true"])
        client.wait(job.id, timeout=PATIENCE)
        # Every job's events from before the submission: a stream that never ends by itself.
        for event in client.watch(after=start):
            assert event.cursor
            break
        proxy.wait_for(lambda p: p.websocket_connections >= 1 and p.open_websockets == 0, PATIENCE)

        opened = proxy.websocket_connections

        class Stop(Exception):
            pass

        with pytest.raises(Stop):
            for _ in client.watch(after=start):
                assert proxy.open_websockets == 1
                raise Stop
        assert proxy.websocket_connections == opened + 1
        proxy.wait_for(lambda p: p.open_websockets == 0, PATIENCE)


@pytest.fixture
def no_cyclic_gc() -> Iterator[None]:
    """Objects are freed only when their last reference goes, as a test can rely on: the
    cyclic collector must not close for the client what the client left open."""
    gc.collect()
    gc.disable()
    yield
    gc.enable()


def test_closing_the_sync_client_closes_a_subscription_its_loop_stopped_early(
    server: Server, no_cyclic_gc: None
) -> None:
    """The stream is still closing (its close frame unanswered: the path is frozen) when
    the client is closed: closing the client must not leave its socket open."""
    assert server.address is not None
    start = event_head(server)
    with Proxy(server.address) as proxy:
        with jobgate.Client(proxy.url, keepalive=1) as client:
            job = client.submit(name="close-after-break", command=["true"])
            client.wait(job.id, timeout=PATIENCE)
            for _ in client.watch(after=start):
                proxy.freeze()
                break
        assert proxy.websocket_connections >= 1
        proxy.wait_for(lambda p: p.open_websockets == 0, 60)


async def test_closing_the_async_client_ends_its_subscriptions_without_reconnecting(
    server: Server,
) -> None:
    assert server.address is not None
    start = event_head(server)
    with Proxy(server.address) as proxy:
        client = jobgate.AsyncClient(proxy.url)
        await client.submit(name="close-while-read", command=["true"])
        events = client.watch(after=start)
        await asyncio.wait_for(events.__anext__(), PATIENCE)
        before = proxy.websocket_connections

        async def drain() -> None:
            async for _ in events:
                pass

        draining = asyncio.create_task(drain())
        await client.aclose()
        with pytest.raises(jobgate.JobgateError) as raised:
            await asyncio.wait_for(draining, PATIENCE)
        assert not raised.value.transient
        await asyncio.to_thread(proxy.wait_for, lambda p: p.open_websockets == 0, PATIENCE)
        assert proxy.websocket_connections == before
