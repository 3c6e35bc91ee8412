"""The client over TLS: a relay terminating TLS (https and wss) in front of a real jobgate,
with a certificate signed by a throwaway CA made by ``openssl`` for the test. Trusted
through ``verify=<CA file>`` or ``verify=<SSLContext>``, submissions and subscriptions work;
trusting only the system's roots, the client refuses the server at once, saying why.
"""

from __future__ import annotations

import asyncio
import shutil
import ssl
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import jobgate
from clients import KINDS, PATIENCE, Api
from jobgate import JobPhase
from relay import Relay
from server import Server
from skips import skip_or_fail


@dataclass
class Certificates:
    ca: Path
    cert: Path
    key: Path

    def server_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(self.cert, self.key)
        return context


def openssl() -> str:
    """The openssl binary; missing, the test skips loudly, or fails in CI."""
    found = shutil.which("openssl")
    if found is None:
        skip_or_fail("no openssl on PATH to make the test's certificates")
    return found


@pytest.fixture
def certificates(tmp_path: Path) -> Iterator[Certificates]:
    """A CA of the test's own and a certificate it signed for 127.0.0.1."""
    tool = openssl()

    def run(*args: str) -> None:
        subprocess.run([tool, *args], cwd=tmp_path, check=True, capture_output=True)

    ec = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes".split()
    ca_extensions = ["basicConstraints=critical,CA:TRUE", "keyUsage=critical,keyCertSign,cRLSign"]
    run(
        *"req -x509 -keyout ca.key -out ca.pem -days 2".split(),
        *ec,
        *("-subj", "/CN=jobgate test CA"),
        *(arg for extension in ca_extensions for arg in ("-addext", extension)),
    )
    run(*"req -keyout server.key -out server.csr -subj /CN=127.0.0.1".split(), *ec)
    (tmp_path / "server.ext").write_text(
        "subjectAltName = IP:127.0.0.1\n"
        "basicConstraints = critical, CA:FALSE\n"
        "keyUsage = critical, digitalSignature\n"
        "extendedKeyUsage = serverAuth\n"
        "subjectKeyIdentifier = hash\n"
        "authorityKeyIdentifier = keyid\n"
    )
    run(
        *"x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial".split(),
        *"-out server.pem -days 2 -extfile server.ext".split(),
    )
    yield Certificates(tmp_path / "ca.pem", tmp_path / "server.pem", tmp_path / "server.key")


async def submit_and_wait_over_a_subscription(api: Api, relay: Relay) -> None:
    """Submits a job over https and waits for it over wss: the job runs until the test sees
    the wait's WebSocket open, then is cancelled, so the wait learns its end from an event."""
    job = await api.submit(name="over-tls", command=["sleep", "600"])
    assert job.phase == JobPhase.PENDING
    waiting = asyncio.ensure_future(api.wait(job.id))

    async def upgraded() -> None:
        while not any(r.headers.get("upgrade", "").lower() == "websocket" for r in relay.requests):
            await asyncio.sleep(0.02)
            assert not waiting.done(), waiting.result()

    await asyncio.wait_for(upgraded(), PATIENCE)
    await api.cancel(job.id)
    done = await asyncio.wait_for(waiting, PATIENCE)
    assert (done.id, done.phase) == (job.id, JobPhase.CANCELLED)


@pytest.mark.parametrize("kind", KINDS)
async def test_a_ca_file_as_verify_works_for_requests_and_subscriptions(
    server: Server, certificates: Certificates, kind: str
) -> None:
    async with Relay(server.address or "", tls=certificates.server_context()) as relay:
        assert relay.url.startswith("https://")
        async with Api(kind, relay.url, verify=str(certificates.ca)) as api:
            await submit_and_wait_over_a_subscription(api, relay)


async def test_an_ssl_context_as_verify_works_too(server: Server, certificates: Certificates) -> None:
    context = ssl.create_default_context(cafile=certificates.ca)
    async with Relay(server.address or "", tls=certificates.server_context()) as relay:
        async with Api("async", relay.url, verify=context) as api:
            await submit_and_wait_over_a_subscription(api, relay)


@pytest.mark.parametrize("kind", KINDS)
async def test_an_untrusted_certificate_fails_at_once_saying_why(
    server: Server, certificates: Certificates, kind: str
) -> None:
    async with Relay(server.address or "", tls=certificates.server_context()) as relay:
        # The system's roots do not know the test's CA. Retries and reconnection would not
        # change that: the client says so at once instead of trying for minutes.
        async with Api(kind, relay.url) as api:
            with pytest.raises(jobgate.ConnectionFailed) as raised:
                await asyncio.wait_for(api.submit(command=["true"]), PATIENCE)
        assert_certificate_refused(raised.value, f"{relay.url}/graphql")

        async with jobgate.AsyncClient(relay.url) as client:

            async def follow() -> None:
                async for _ in client.watch(after="1"):
                    pass

            with pytest.raises(jobgate.ConnectionFailed) as watched:
                await asyncio.wait_for(follow(), PATIENCE)
        assert_certificate_refused(watched.value, relay.url.replace("https://", "wss://") + "/graphql")
        assert not any(r.method == "POST" for r in relay.requests), (
            "nothing was sent in the clear or otherwise"
        )


def assert_certificate_refused(error: Any, url: str) -> None:
    assert type(error) is jobgate.ConnectionFailed and error.code is None
    assert error.message.startswith(f"cannot reach {url}: certificate verification failed (")
    assert "CERTIFICATE_VERIFY_FAILED" in error.message
    assert "verify=" in error.message
    assert not error.transient
