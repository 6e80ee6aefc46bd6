"""SIGTERM to ``python -m webhook serve``: requests in flight are answered in full, new
connections are refused, and the process exits 0 within the drain timeout."""

from __future__ import annotations

import asyncio
import signal
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
    # The API holds every request's access review until the test lets them go: they are in
    # flight for as long as it takes to see the listener close.
    hold = asyncio.Event()
    fake_kube.inject("POST", r"/subjectaccessreviews$", status=None, hold=hold, times=None)
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
        async with asyncio.timeout(server.Options.drain_timeout):  # a hang, not a speed bound
            await _refuses_connections(served.port)
        still_in_flight = not any(a.done() for a in answers)
        hold.set()
        done = await asyncio.gather(*answers)
    code = await asyncio.to_thread(served.process.wait, server.Options.drain_timeout + 5)

    assert [a.error for a in done] == [""] * IN_FLIGHT
    assert [a.status for a in done] == [200] * IN_FLIGHT
    for request, answer in zip(requests, done, strict=True):
        assert answer.body["response"]["uid"] == request["uid"]
        assert "was wrapped into AppWrapper" in answer.body["response"]["status"]["message"]
    assert len(fake_kube.appwrappers()) == IN_FLIGHT
    assert code == 0, served.log.read_text()
    assert still_in_flight, "the listener closed only once the requests were answered"
    assert '"msg":"draining"' in served.log.read_text()
    # The drain ended because the requests were done, not because its timeout ran out.
    assert '"msg":"stopped","in_flight":0,"drained":true' in served.log.read_text()


async def _refuses_connections(port: int) -> None:
    """Returns once a new connection is refused (the requests in flight are held meanwhile)."""
    while True:
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            return
        writer.close()
        await writer.wait_closed()
        await asyncio.sleep(0.02)


async def test_sigterm_with_nothing_in_flight_exits_0_promptly(served: Served) -> None:
    served.process.send_signal(signal.SIGTERM)
    code = await asyncio.to_thread(served.process.wait, server.Options.drain_timeout + 5)

    assert code == 0
    assert '"msg":"stopped"' in served.log.read_text()
