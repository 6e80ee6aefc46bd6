"""``autowrap serve`` runs the adopt-mode controller in a process of its own: jobs are adopted
and released through it, its numbers reach the one ``/metrics`` endpoint, a controller process
that dies is replaced, a drain gives its Lease up, and one whose serving process is gone stops."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
from collections.abc import Callable
from pathlib import Path

import aiohttp
import pytest

from testbed.cluster.resources import LEASES, VCJOBS
from testbed.pki import ServingPki
from tests.adopt.cluster import ALICE, Cluster, running_cluster, vcjob
from webhook.app import ControllerProcess
from webhook.model import names
from webhook.shell import relay
from webhook.shell.metrics import ControllerStats, Metrics

# A hang, not a speed bound.
STALLED = 60.0


async def _until(what: str, check: Callable[[], bool]) -> None:
    try:
        async with asyncio.timeout(STALLED):
            while not check():
                await asyncio.sleep(0.05)
    except TimeoutError:
        raise AssertionError(f"never: {what}") from None


def _running(cluster: Cluster, job: str) -> bool:
    pods = cluster.pods(job)
    return bool(pods) and all(p["status"].get("phase") == "Running" for p in pods)


def _process(cluster: Cluster) -> ControllerProcess:
    process = cluster.running.state.controller
    assert isinstance(process, ControllerProcess)
    return process


async def _metrics(cluster: Cluster) -> str:
    port = cluster.running.metrics_port
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{port}/metrics") as response,
    ):
        return await response.text()


def _sample(text: str, name: str) -> float | None:
    for line in text.splitlines():
        if line.startswith((name + " ", name + "{")):
            return float(line.rsplit(" ", 1)[1])
    return None


async def test_jobs_run_through_the_controller_process_and_its_numbers_reach_metrics(
    webhook_pki: ServingPki, tmp_path: Path
) -> None:
    async with running_cluster(webhook_pki, tmp_path, controller_apart=True) as cluster:
        await cluster.api.create(VCJOBS, vcjob(workers=1), user=ALICE)
        await _until("the job's pods run", lambda: _running(cluster, "train"))
        receiver = _process(cluster).receiver
        await _until("the controller's report", lambda: receiver.latest.adopted >= 1
                     and receiver.latest.released >= 2)  # fmt: skip

        text = await _metrics(cluster)
        assert _sample(text, "autowrap_controller_leading") == 1
        assert (_sample(text, "autowrap_adoptions_total") or 0) >= 1
        assert (_sample(text, "autowrap_pod_releases_total") or 0) >= 2
        assert (_sample(text, "autowrap_controller_reconcile_duration_seconds_count") or 0) >= 1
        # The controller's own API calls are timed in the same series as admission's.
        assert 'call="create appwrappers"' in text


async def test_a_controller_process_that_dies_is_replaced_and_the_next_job_still_runs(
    webhook_pki: ServingPki, tmp_path: Path
) -> None:
    async with running_cluster(webhook_pki, tmp_path, controller_apart=True) as cluster:
        await cluster.api.create(VCJOBS, vcjob("first", workers=1), user=ALICE)
        await _until("the first job's pods run", lambda: _running(cluster, "first"))
        receiver = _process(cluster).receiver
        pid = _child_pid(cluster)

        os.kill(pid, signal.SIGKILL)
        await _until("a controller process other than the one killed",
                     lambda: _child_pid(cluster) not in (None, pid))  # fmt: skip
        # The killed one kept its Lease; the next holds the same identity (the pod's), so it
        # leads without waiting for the Lease to expire.
        await cluster.api.create(VCJOBS, vcjob("second", workers=1), user=ALICE)
        await _until("the second job's pods run", lambda: _running(cluster, "second"))
        await _until("the new controller process's report", lambda: receiver.latest.leading)
        assert _sample(await _metrics(cluster), "autowrap_controller_process_restarts_total") == 1


async def test_a_drain_stops_the_controller_process_and_gives_its_lease_up(
    webhook_pki: ServingPki, tmp_path: Path
) -> None:
    async with running_cluster(webhook_pki, tmp_path, controller_apart=True) as cluster:
        receiver = _process(cluster).receiver
        await _until("the controller leads", lambda: receiver.latest.leading)
        pid = _child_pid(cluster)
        assert pid is not None

        await cluster.running.drain()

        lease = cluster.api.store.get(LEASES, names.SERVICE_NAMESPACE, names.CONTROLLER_LEASE)
        assert lease is not None and not lease["spec"].get("holderIdentity")
        assert not _alive(pid)
        assert not receiver.latest.leading


def _child_pid(cluster: Cluster) -> int | None:
    return _process(cluster).pid


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is gone for this purpose; the serving process reaps it.
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0] != "Z"


async def test_the_sender_stops_when_the_serving_process_is_gone() -> None:
    ours, theirs = relay.pair()
    sender = relay.Sender(os.dup(theirs.fileno()), interval=0.01)
    theirs.close()
    sending = asyncio.create_task(sender.run())
    ours.setblocking(False)
    async with asyncio.timeout(STALLED):
        assert await asyncio.get_running_loop().sock_recv(ours, 4096)  # a first line arrived
        ours.close()  # the serving process is gone
        await sender.closed.wait()
        await sending


async def test_the_receiver_keeps_what_the_controller_process_reported() -> None:
    metrics = Metrics(in_flight=lambda: 0)
    receiver = relay.Receiver(metrics)
    ours, theirs = socket.socketpair()
    following = asyncio.create_task(receiver.follow(ours))
    stats = ControllerStats(leading=True, queue_depth=3, reconciles=7, adopted=2,
                            failed={"adopt": 1}, watch_events={"Job": (5, 4)})  # fmt: skip
    report = relay.Report(stats, ["jobs.batch.volcano.sh"], [0.01, 0.02],
                          [("get appwrappers", 200, 0.003)])  # fmt: skip
    theirs.sendall(report.encode() + b"not json\n" + report.encode())
    theirs.close()
    async with asyncio.timeout(STALLED):
        await following
    assert receiver.stats() == stats
    assert receiver.absent() == ["jobs.batch.volcano.sh"]
    text = metrics.exposition().decode()
    assert "autowrap_controller_reconcile_duration_seconds_count 4.0" in text
    receiver.gone()
    assert not receiver.stats().leading and receiver.stats().adopted == 2


async def test_a_policy_set_loaded_by_the_serving_process_is_read_by_the_controller_at_once() -> (
    None
):
    receiver = relay.Receiver(Metrics(in_flight=lambda: 0))
    ours, theirs = relay.pair()
    sender = relay.Sender(os.dup(theirs.fileno()), interval=60.0)
    theirs.close()
    reloads = asyncio.Event()
    sender.on_reload = reloads.set
    tasks = [asyncio.create_task(sender.run()), asyncio.create_task(receiver.follow(ours))]
    async with asyncio.timeout(STALLED):
        while not receiver.connected:
            await asyncio.sleep(0.01)
        receiver.nudge()
        await reloads.wait()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def test_a_controller_process_that_cannot_start_is_tried_again_and_the_webhooks_serve(
    webhook_pki: ServingPki, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ControllerProcess, "argv", lambda self, fd: [str(tmp_path / "missing")])
    monkeypatch.setattr("webhook.app.RESTART_PAUSE", 0.01)
    async with running_cluster(webhook_pki, tmp_path, controller_apart=True) as cluster:
        metrics = cluster.running.state.metrics
        await _until("a second attempt", lambda: (_sample(metrics.exposition().decode(),
                     "autowrap_controller_process_restarts_total") or 0) >= 2)  # fmt: skip
        assert all(not t.done() for t in cluster.running.tasks)
        # Admission goes on meanwhile: a labelled Job is prepared for adoption.
        created = await cluster.api.create(VCJOBS, vcjob("waits", workers=1), user=ALICE)
        assert created["metadata"]["labels"][names.ADOPTION_LABEL] == "pending"
