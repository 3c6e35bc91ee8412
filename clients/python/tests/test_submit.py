"""Submitting and waiting, with the blocking and the asyncio client, against a real jobgate."""

from __future__ import annotations

import jobgate
from server import Server


def test_a_submitted_job_is_waited_for_to_its_end_with_the_sync_client(server: Server) -> None:
    with jobgate.Client(server.url) as client:
        job = client.submit(name="hello", command=["sh", "-c", "echo hi"], env={"GREETING": "hi"})
        assert job.phase == jobgate.JobPhase.PENDING
        assert job.spec.env[0].name == "GREETING" and job.spec.env[0].value == "hi"
        done = client.wait(job.id, timeout=60)
        assert done.id == job.id
        assert done.phase == jobgate.JobPhase.SUCCEEDED
        assert [line.text for line in client.logs(job.id)] == ["hi"]


async def test_a_submitted_job_is_waited_for_to_its_end_with_the_async_client(server: Server) -> None:
    async with jobgate.AsyncClient(server.url) as client:
        job = await client.submit(name="fails", command=["sh", "-c", "exit 3"], backoff_limit=0)
        done = await client.wait(job.id, timeout=60)
        assert done.phase == jobgate.JobPhase.FAILED
        assert done.attempts[-1].exit_code == 3
