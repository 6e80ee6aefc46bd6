"""Large reviews run on a few lanes off the serving loop: the probes, small reviews and the
API client keep going while they compute, and no more than the lanes compute at once."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import aiohttp
import pytest

from testbed.redirect import ALICE, NAMESPACE, Cluster
from testbed.scenarios import SNI, admission_request, encode, post, review
from tests.server.test_e2e import vcjob
from tests.support.waiting import eventually
from webhook.core import engine
from webhook.core.rules import size
from webhook.model import names
from webhook.shell import lanes

Obj = dict[str, Any]


class Blocked:
    """Work for a lane that holds its thread until released, counting who got in."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.entered = 0
        self._lock = threading.Lock()

    async def __call__(self, cluster: Any) -> str:
        with self._lock:
            self.entered += 1
        await asyncio.to_thread(self.release.wait, 30)  # holds the lane, not its own loop
        return "done"


async def test_no_more_reviews_compute_at_once_than_there_are_lanes() -> None:
    lane_set = lanes.Lanes(2)
    work = Blocked()
    runs = [asyncio.create_task(lane_set.run(work, None, wait=30)) for _ in range(4)]
    await eventually(lambda: work.entered == 2, what="two lanes busy")
    await asyncio.sleep(0.1)
    assert work.entered == 2 and lane_set.busy == 2
    work.release.set()
    assert await asyncio.gather(*runs) == ["done"] * 4
    lane_set.close()


async def test_a_review_that_finds_no_free_lane_within_its_wait_gets_none() -> None:
    lane_set = lanes.Lanes(1)
    work = Blocked()
    holder = asyncio.create_task(lane_set.run(work, None, wait=30))
    await eventually(lambda: work.entered == 1, what="the lane busy")
    assert await lane_set.run(work, None, wait=0.05) is None
    work.release.set()
    assert await holder == "done"
    lane_set.close()


async def test_api_calls_from_a_lane_run_on_the_serving_loop() -> None:
    serving = threading.get_ident()

    class Client:
        async def whoami(self, *, timeout: float) -> int:
            await asyncio.sleep(0)
            return threading.get_ident()

    async def work(cluster: Any) -> tuple[int, int]:
        return threading.get_ident(), await cluster.whoami(timeout=1.0)

    lane_set = lanes.Lanes(1)
    lane_thread, call_thread = await lane_set.run(work, Client(), wait=1)
    assert lane_thread != serving
    assert call_thread == serving
    lane_set.close()


def _heavy_job(name: str) -> Obj:
    """A job whose review is over the lanes' threshold yet small enough to store."""
    job = vcjob(name)
    job["metadata"]["annotations"] = {"example.com/notes": "n" * (lanes.HEAVY_BODY_BYTES + 1024)}
    return job


async def test_a_large_job_is_wrapped_through_a_lane_with_its_api_calls(cluster: Cluster) -> None:
    result = await cluster.create(_heavy_job("big"))

    assert f"Job {NAMESPACE}/big was wrapped into AppWrapper {NAMESPACE}/big" in result.message
    assert (NAMESPACE, "big") in cluster.appwrappers()


async def test_with_every_lane_busy_probes_and_small_reviews_are_answered_and_large_ones_told(
    cluster: Cluster,
) -> None:
    state = cluster.state
    work = Blocked()
    holders = [
        asyncio.create_task(state.heavy.run(work, None, wait=30)) for _ in range(lanes.LANES)
    ]
    await eventually(lambda: work.entered == lanes.LANES, what="every lane busy")
    tls = cluster.pki.client_context()
    try:
        async with aiohttp.ClientSession() as session:
            async with session.get(
                f"https://127.0.0.1:{cluster.running.port}{names.HEALTHZ_PATH}",
                ssl=tls, server_hostname=SNI,
            ) as probe:  # fmt: skip
                assert probe.status == 200
            small = await post(session, cluster.running.port, names.VALIDATE_PATH,
                               encode(review(admission_request(vcjob("small"), user=ALICE))),
                               tls)  # fmt: skip
            large = await post(session, cluster.running.port, names.VALIDATE_PATH,
                               encode(review(admission_request(_heavy_job("large"), user=ALICE))),
                               tls, timeout_param="1s")  # fmt: skip
    finally:
        work.release.set()
        await asyncio.gather(*holders)

    assert "was wrapped into AppWrapper" in small.body["response"]["status"]["message"]
    answer = large.body["response"]
    assert answer["allowed"] is False and answer["status"]["code"] == 503
    assert "every lane for large requests" in answer["status"]["message"]
    assert "apply it again" in answer["status"]["message"]
    assert (NAMESPACE, "large") not in cluster.appwrappers()


@pytest.mark.parametrize("webhook", [names.MUTATE_PATH, names.VALIDATE_PATH])
async def test_a_job_of_thousands_of_containers_is_refused_with_its_least_size(
    cluster: Cluster, webhook: str
) -> None:
    job = vcjob("wide")
    for task in job["spec"]["tasks"]:
        task["template"]["spec"]["containers"] = [
            {"name": f"c{i}", "image": "x"} for i in range(12_000)
        ]
    async with aiohttp.ClientSession() as session:
        answer = await post(session, cluster.running.port, webhook,
                            encode(review(admission_request(job, user=ALICE))),
                            cluster.pki.client_context())  # fmt: skip

    response = answer.body["response"]
    assert "patch" not in response
    if webhook == names.VALIDATE_PATH:
        assert response["allowed"] is False
        assert "would be at least" in response["status"]["message"]
        assert "use fewer containers per pod template" in response["status"]["message"]
    else:  # left unprepared: /validate refuses it
        assert response["allowed"] is True
    assert (NAMESPACE, "wide") not in cluster.appwrappers()


async def test_a_completion_that_would_not_fit_is_refused_rather_than_answered_with_its_patch(
    cluster: Cluster,
) -> None:
    # Under the size where the engine counts first, yet the env makes it too large: weighed
    # whole once built.
    job = vcjob("n" * 40)
    for task in job["spec"]["tasks"]:
        task["name"] = task["name"] + "-" + "t" * 20
        task["template"]["spec"]["containers"] = [
            {"name": f"c{i}", "image": "x"} for i in range(1_050)
        ]
    job["metadata"].pop("namespace")
    aw = {"apiVersion": names.APPWRAPPER_API_VERSION, "kind": "AppWrapper",
          "metadata": {"name": "wide", "namespace": NAMESPACE,
                       "labels": {names.QUEUE_LABEL: "team-queue"}},
          "spec": {"components": [{"template": job}]}}  # fmt: skip
    body = encode(review(admission_request(aw, user=ALICE)))
    assert size.json_size(aw) < engine.WEIGH_FIRST_BYTES
    async with aiohttp.ClientSession() as session:
        answer = await post(session, cluster.running.port, names.MUTATE_PATH, body,
                            cluster.pki.client_context())  # fmt: skip

    response = answer.body["response"]
    assert response["allowed"] is False and "patch" not in response
    message = response["status"]["message"]
    assert "the AppWrapper with the env, DNS and gates autowrap adds" in message
    assert "1,572,864 (1.5 MiB)" in message
