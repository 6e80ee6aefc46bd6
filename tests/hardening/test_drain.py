"""SIGTERM to ``python -m webhook serve``: requests in flight are answered in full, new
connections are refused, and the process exits 0 within the drain timeout."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from testbed.cluster.cluster import FakeCluster
from testbed.pki import ServingPki
from testbed.scenarios import (
    Served,
    admission_request,
    encode,
    labelled_vcjob,
    post,
    review,
    start_serve,
)
from webhook.model import names
from webhook.shell import server

IN_FLIGHT = 6
SLOW_API = 2.0


@pytest.fixture
async def served(
    webhook_pki: ServingPki, fake_kube: FakeCluster, tmp_path: Path
) -> AsyncIterator[Served]:
    started = await start_serve(webhook_pki, fake_kube, tmp_path)
    try:
        yield started
    finally:
        if started.process.poll() is None:
            started.process.kill()
            started.process.wait()


async def test_sigterm_answers_every_request_in_flight_refuses_new_ones_and_exits_0(
    served: Served, fake_kube: FakeCluster
) -> None:
    fake_kube.inject("POST", r"/subjectaccessreviews$", status=None, delay=SLOW_API, times=None)
    tls = served.pki.client_context()
    requests = [admission_request(labelled_vcjob(f"drain-{i}")) for i in range(IN_FLIGHT)]

    async with aiohttp.ClientSession() as session:
        answers = [
            asyncio.create_task(
                post(session, served.port, names.VALIDATE_PATH, encode(review(r)), tls)
            )  # fmt: skip
            for r in requests
        ]
        while len(fake_kube.requests_to("POST", r"/subjectaccessreviews$")) < IN_FLIGHT:
            await asyncio.sleep(0.02)
        served.process.send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        await asyncio.sleep(0.3)
        with pytest.raises(OSError):
            await asyncio.open_connection("127.0.0.1", served.port)
        done = await asyncio.gather(*answers)
    code = await asyncio.to_thread(served.process.wait, server.Options.drain_timeout + 5)
    stopped_after = time.monotonic() - signalled

    assert [a.error for a in done] == [""] * IN_FLIGHT
    assert [a.status for a in done] == [200] * IN_FLIGHT
    for request, answer in zip(requests, done, strict=True):
        assert answer.body["response"]["uid"] == request["uid"]
        assert "was wrapped into AppWrapper" in answer.body["response"]["status"]["message"]
    assert len(fake_kube.appwrappers()) == IN_FLIGHT
    assert code == 0, served.log.read_text()
    assert stopped_after < server.Options.drain_timeout
    assert '"msg":"draining"' in served.log.read_text()


async def test_sigterm_with_nothing_in_flight_exits_0_promptly(served: Served) -> None:
    served.process.send_signal(signal.SIGTERM)
    code = await asyncio.to_thread(served.process.wait, server.Options.drain_timeout + 5)

    assert code == 0
    assert '"msg":"stopped"' in served.log.read_text()
