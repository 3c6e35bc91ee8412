"""The request/response calls against a real jobgate: ``list`` read lazily a page at a time,
with its filters; ``get``; ``cancel``; ``submit_many`` (order, refusals, batches of 1,000);
``submit`` with every field of SubmitJobInput read back. Each runs with the blocking and the
asyncio client where their code differs (iteration, threads).

Each test keeps to namespaces of its own, so the shared server's other jobs never show.
Jobs that need not run depend on a job that sleeps until the test cancels it: they stay
PENDING and then fail without a process ever starting.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

import jobgate
from clients import KINDS, Api, wait_phase
from jobgate import JobPhase
from relay import Action, Relay, Request
from server import Server


def namespace() -> str:
    return f"t-{uuid.uuid4().hex[:12]}"


async def sleeper(api: Api, ns: str) -> jobgate.Job:
    return await api.submit(name="sleeper", namespace=ns, command=["sleep", "600"])


@pytest.mark.parametrize("kind", KINDS)
async def test_list_reads_only_the_pages_it_needs_newest_first(server: Server, kind: str) -> None:
    ns = namespace()
    async with Relay(server.address or "") as relay, Api(kind, relay.url) as api:
        submitted = await api.submit_many(
            [{"name": f"job-{i:02}", "namespace": ns, "command": ["true"]} for i in range(25)]
        )
        newest_first = [job.id for job in reversed(submitted)]

        relay.requests.clear()
        listed = await api.list(namespace=ns, page_size=7)
        assert [job.id for job in listed] == newest_first
        assert len({job.id for job in listed}) == 25
        # 7 + 7 + 7 + 4: the fourth page says there is no next one.
        assert relay.operations() == ["ListJobs"] * 4
        pages = [r.json["variables"] for r in relay.requests]
        assert [p["first"] for p in pages] == [7] * 4
        assert pages[0]["after"] is None and all(p["after"] for p in pages[1:])

        # Stopped early, it reads no page past the one holding the last job taken.
        for taken, pages_read in [(3, 1), (7, 1), (8, 2), (15, 3)]:
            relay.requests.clear()
            first = await api.list(limit=taken, namespace=ns, page_size=7)
            assert [job.id for job in first] == newest_first[:taken]
            assert relay.operations() == ["ListJobs"] * pages_read, taken


@pytest.mark.parametrize("kind", KINDS)
async def test_list_filters_by_phase_namespace_and_name(server: Server, kind: str) -> None:
    ns, other_ns = namespace(), namespace()
    async with Api(kind, server.url) as api:
        alpha1 = await api.submit(name="alpha-one", namespace=ns, command=["true"])
        beta = await api.submit(name="beta", namespace=ns, command=["true"])
        alpha2 = await api.submit(name="xalphax", namespace=ns, command=["true"])
        elsewhere = await api.submit(name="alpha-elsewhere", namespace=other_ns, command=["true"])
        running = await sleeper(api, ns)
        try:
            for job in (alpha1, beta, alpha2, elsewhere):
                assert (await api.wait(job.id)).phase == JobPhase.SUCCEEDED
            await wait_phase(server.url, running.id, JobPhase.RUNNING)

            def ids(jobs: list[jobgate.Job]) -> list[str]:
                return [job.id for job in jobs]

            assert ids(await api.list(namespace=ns)) == [running.id, alpha2.id, beta.id, alpha1.id]
            assert ids(await api.list(namespace=other_ns)) == [elsewhere.id]
            assert ids(await api.list(namespace=ns, name_contains="alpha")) == [alpha2.id, alpha1.id]
            assert ids(await api.list(namespace=ns, phases=["RUNNING"])) == [running.id]
            assert ids(await api.list(namespace=ns, phases=[JobPhase.SUCCEEDED, JobPhase.FAILED])) == [
                alpha2.id,
                beta.id,
                alpha1.id,
            ]
            assert ids(await api.list(namespace=ns, phases=["SUCCEEDED"], name_contains="beta")) == [beta.id]
            assert await api.list(namespace=ns, name_contains="nothing-has-this") == []
            # Whole filter and paging together: one job a page.
            assert ids(await api.list(namespace=ns, name_contains="alpha", page_size=1)) == [
                alpha2.id,
                alpha1.id,
            ]
        finally:
            await api.cancel(running.id)


@pytest.mark.parametrize("kind", KINDS)
async def test_get_returns_the_job_and_cancel_stops_a_running_one(server: Server, kind: str) -> None:
    ns = namespace()
    async with Api(kind, server.url) as api:
        job = await sleeper(api, ns)
        got = await api.get(job.id)
        assert (got.id, got.name, got.namespace, got.spec.command) == (
            job.id,
            "sleeper",
            ns,
            ["sleep", "600"],
        )
        assert got.submitted_at == job.submitted_at

        await wait_phase(server.url, job.id, JobPhase.RUNNING)
        cancelled = await api.cancel(job.id)
        assert cancelled.id == job.id
        assert cancelled.phase == JobPhase.CANCELLED
        done = await api.wait(job.id)
        assert done.phase == JobPhase.CANCELLED
        assert (await api.get(job.id)).phase == JobPhase.CANCELLED


@pytest.mark.parametrize("kind", KINDS)
async def test_submit_many_keeps_input_order(server: Server, kind: str) -> None:
    ns = namespace()
    async with Api(kind, server.url) as api:
        blocker = await sleeper(api, ns)
        try:
            inputs: list[Any] = [
                {"name": f"many-{i}", "namespace": ns, "command": ["true"], "depends_on": [blocker.id]}
                for i in range(5)
            ]
            # A model is taken as well as a mapping.
            inputs.append(
                jobgate.SubmitJobInput(name="many-5", namespace=ns, command=["true"], depends_on=[blocker.id])
            )
            jobs = await api.submit_many(inputs)
            assert [job.name for job in jobs] == [f"many-{i}" for i in range(6)]
            assert len({job.id for job in jobs}) == 6
            assert all(job.phase == JobPhase.PENDING for job in jobs)
            # Each has an idempotency key of its own, made by the client.
            keys = [job.spec.idempotency_key for job in jobs]
            assert all(keys) and len(set(keys)) == 6
            assert {job.id for job in await api.list(namespace=ns)} == {blocker.id, *(job.id for job in jobs)}
        finally:
            await api.cancel(blocker.id)


@pytest.mark.parametrize("kind", KINDS)
async def test_submit_many_accepts_the_others_when_one_is_refused(server: Server, kind: str) -> None:
    ns = namespace()
    async with Api(kind, server.url) as api:
        blocker = await sleeper(api, ns)
        try:
            inputs: list[dict[str, Any]] = [
                {"name": f"part-{i}", "namespace": ns, "command": ["true"], "depends_on": [blocker.id]}
                for i in range(3)
            ]
            inputs[1]["parallelism"] = 1_000_000
            with pytest.raises(jobgate.SubmitManyError) as raised:
                await api.submit_many(inputs)
            error = raised.value
            assert list(error.refused) == [1]
            refused = error.refused[1]
            assert type(refused) is jobgate.BadUserInput
            assert refused.code == "BAD_USER_INPUT"
            assert refused.field == "inputs[1].parallelism"
            assert refused.message.startswith("inputs[1].parallelism: ")
            assert "64" in refused.message  # the server's --max-parallelism
            assert error.jobs[1] is None
            accepted = [job for job in error.jobs if job is not None]
            assert [job.name for job in accepted] == ["part-0", "part-2"]
            for job in accepted:
                assert (await api.get(job.id)).phase == JobPhase.PENDING
            assert {job.id for job in await api.list(namespace=ns)} == {blocker.id, *(j.id for j in accepted)}
        finally:
            await api.cancel(blocker.id)


async def test_submit_many_splits_more_than_a_thousand_over_calls(server: Server) -> None:
    ns = namespace()
    async with Relay(server.address or "") as relay, Api("async", relay.url) as api:
        blocker = await sleeper(api, ns)
        try:
            relay.requests.clear()
            inputs: list[dict[str, Any]] = [
                {"name": f"bulk-{i}", "namespace": ns, "command": ["true"], "depends_on": [blocker.id]}
                for i in range(1002)
            ]
            # One refused in the second call: its index is the input's, not the call's.
            inputs[1001]["parallelism"] = 0
            with pytest.raises(jobgate.SubmitManyError) as raised:
                await api.submit_many(iter(inputs))
            assert relay.operations() == ["SubmitJobs", "SubmitJobs"]
            sizes = [len(r.json["variables"]["inputs"]) for r in relay.requests]
            assert sizes == [1000, 2]
            refused = raised.value.refused
            assert list(refused) == [1001]
            # Named by its place in the caller's list, not in the second call's.
            assert isinstance(refused[1001], jobgate.BadUserInput)
            assert refused[1001].field == "inputs[1001].parallelism"
            assert refused[1001].message == "inputs[1001].parallelism: must be at least 1, got 0"
            jobs = raised.value.jobs
            assert len(jobs) == 1002 and jobs[1001] is None
            accepted = [job for job in jobs if job is not None]
            assert [job.name for job in accepted] == [f"bulk-{i}" for i in range(1001)]
            assert len({job.id for job in accepted}) == 1001
            listed = await api.list(namespace=ns, page_size=500)
            assert {job.id for job in listed} == {blocker.id, *(job.id for job in accepted)}
        finally:
            await api.cancel(blocker.id)


async def test_submit_many_says_which_jobs_earlier_calls_accepted_when_a_later_call_fails(server: Server) -> None:
    ns = namespace()
    calls = 0

    def second_call_unavailable(request: Request) -> Action:
        nonlocal calls
        if request.operation != "SubmitJobs":
            return "forward"
        calls += 1
        return "answer_503" if calls > 1 else "forward"

    async with Relay(server.address or "", decide=second_call_unavailable) as relay:
        async with jobgate.AsyncClient(relay.url, token="", retries=1) as client:
            async with jobgate.AsyncClient(server.url, token="") as direct:
                blocker = await direct.submit(namespace=ns, command=["sleep", "600"])
                try:
                    inputs = [
                        {"name": f"part-{i}", "namespace": ns, "command": ["true"], "depends_on": [blocker.id]}
                        for i in range(1003)
                    ]
                    with pytest.raises(jobgate.SubmitManyError) as raised:
                        await client.submit_many(inputs)
                    # The second call was tried twice (one retry), then given up.
                    assert calls == 3
                    jobs = raised.value.jobs
                    assert len(jobs) == 1003
                    accepted = [job for job in jobs[:1000] if job is not None]
                    assert [job.name for job in accepted] == [f"part-{i}" for i in range(1000)]
                    assert jobs[1000:] == [None, None, None]
                    assert sorted(raised.value.refused) == [1000, 1001, 1002]
                    assert all(isinstance(e, jobgate.ConnectionFailed) for e in raised.value.refused.values())
                    listed = [job async for job in direct.list(namespace=ns, page_size=500)]
                    assert {job.id for job in listed} == {blocker.id, *(job.id for job in accepted)}
                finally:
                    await direct.cancel(blocker.id)


@pytest.mark.parametrize(("kind", "env"), [("sync", "mapping"), ("async", "list")])
async def test_submit_sends_every_field_and_reads_it_back(start_server: Any, kind: str, env: str) -> None:
    server: Server = start_server("--service-accounts", "runner,builder")
    ns = namespace()
    async with Api(kind, server.url) as api:
        blocker = await sleeper(api, ns)
        env_given: Any = (
            {"GREETING": "hi", "EMPTY": ""}
            if env == "mapping"
            else [{"name": "GREETING", "value": "hi"}, {"name": "EMPTY", "value": ""}]
        )
        fields: dict[str, Any] = dict(
            name="every-field",
            namespace=ns,
            template="container",
            image="busybox:1.36",
            command=["sh", "-c"],
            args=["echo $GREETING"],
            env=env_given,
            parallelism=2,
            completions=3,
            backoff_limit=4,
            active_deadline_seconds=600,
            parameters={"nested": [1, {"deep": "value"}], "flag": True},
            idempotency_key="every-field-key",
            resources={
                "requests": {"cpu": "100m", "memory": "64Mi"},
                "limits": {"cpu": "1", "memory": "128Mi"},
            },
            service_account_name="runner",
            ttl_seconds_after_finished=120,
            depends_on=[blocker.id],
            retry_policy={
                "rules": [
                    {"action": "FAIL_JOB", "exit_codes": {"operator": "IN", "values": [42, 43]}},
                    {"action": "IGNORE", "causes": ["OOM_KILLED"]},
                ],
                "backoff": {"initial_seconds": 0.5, "max_seconds": 5.0, "factor": 3.0, "jitter": 0.25},
                "backoff_limit_per_index": 2,
                "max_failed_indexes": 1,
            },
        )
        job = await api.submit(**fields)
        try:
            for read in (job, await api.get(job.id)):
                spec = read.spec
                assert (read.name, read.namespace, read.template) == ("every-field", ns, "container")
                assert spec.image == "busybox:1.36"
                assert (spec.command, spec.args) == (["sh", "-c"], ["echo $GREETING"])
                assert [(e.name, e.value) for e in spec.env] == [("GREETING", "hi"), ("EMPTY", "")]
                assert (spec.parallelism, spec.completions, spec.backoff_limit) == (2, 3, 4)
                assert spec.active_deadline_seconds == 600
                assert spec.parameters == {"nested": [1, {"deep": "value"}], "flag": True}
                assert spec.idempotency_key == "every-field-key"
                assert spec.resources is not None
                assert (spec.resources.requests.cpu, spec.resources.requests.memory) == ("100m", "64Mi")
                assert (spec.resources.limits.cpu, spec.resources.limits.memory) == ("1", "128Mi")
                assert spec.service_account_name == "runner"
                assert spec.ttl_seconds_after_finished == 120
                assert spec.depends_on == [blocker.id] and read.depends_on == [blocker.id]
                policy = spec.retry_policy
                assert policy is not None
                assert [rule.action.value for rule in policy.rules] == ["FAIL_JOB", "IGNORE"]
                first, second = policy.rules
                assert first.exit_codes is not None
                assert (first.exit_codes.operator.value, first.exit_codes.values) == ("IN", [42, 43])
                assert first.causes is None and second.exit_codes is None
                assert second.causes == [jobgate.FailureCause.OOM_KILLED]
                assert policy.backoff is not None
                backoff = policy.backoff
                assert (backoff.initial_seconds, backoff.max_seconds, backoff.factor, backoff.jitter) == (
                    0.5,
                    5.0,
                    3.0,
                    0.25,
                )
                assert (policy.backoff_limit_per_index, policy.max_failed_indexes) == (2, 1)

            # The same key and input again: the same job, not a second one.
            again = await api.submit(**fields)
            assert again.id == job.id

            # queueName needs a Kubernetes server with Kueue: this one refuses it by its name,
            # which shows the client sent it as the server calls it.
            with pytest.raises(jobgate.BadUserInput) as refused:
                await api.submit(namespace=ns, command=["true"], queue_name="batch")
            assert refused.value.field == "input.queueName"
            assert "without --kueue" in refused.value.message
        finally:
            await api.cancel(blocker.id)


@pytest.mark.parametrize("kind", KINDS)
async def test_submit_refuses_a_field_it_does_not_know_before_sending(server: Server, kind: str) -> None:
    async with Relay(server.address or "") as relay, Api(kind, relay.url) as api:
        with pytest.raises(jobgate.BadUserInput) as unknown:
            await api.submit(command=["true"], paralelism=2)
        assert unknown.value.code == "BAD_USER_INPUT"
        assert unknown.value.field == "paralelism"
        assert "submit takes no field paralelism" in unknown.value.message
        # Misspelt inside a nested input too, where pydantic alone would drop it silently.
        with pytest.raises(jobgate.BadUserInput) as nested:
            await api.submit(command=["true"], resources={"request": {"cpu": "1"}})
        assert nested.value.field == "resources.request"
        with pytest.raises(jobgate.BadUserInput) as deeper:
            await api.submit(
                command=["true"],
                retry_policy={"rules": [{"action": "COUNT", "exit_code": {"operator": "IN", "values": [1]}}]},
            )
        assert deeper.value.field == "retry_policy.rules[0].exit_code"
        # A value of the wrong type, in submit_many too.
        with pytest.raises(jobgate.BadUserInput):
            await api.submit_many([{"command": ["true"]}, {"command": "not a list"}])
        assert relay.requests == [], "nothing was sent"
