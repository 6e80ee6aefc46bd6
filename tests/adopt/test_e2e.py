"""Adopt mode end to end: the user's create succeeds and the job runs under Kueue, with every
upstream party simulated and autowrap's webhooks and controller real."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.adopt.cluster import ALICE, NAMESPACE, QUEUE, running_cluster, vcjob
from tests.support.cluster.resources import VCJOBS
from tests.support.pki import ServingPki
from tests.support.sim import resolved_env
from webhook import names


async def test_a_created_job_is_adopted_admitted_and_every_pod_runs_with_its_own_rank(
    webhook_pki: ServingPki, tmp_path: Path
) -> None:
    async with running_cluster(webhook_pki, tmp_path) as cluster:
        created = await cluster.api.create(VCJOBS, vcjob(), user=ALICE)

        # kubectl create exits 0: the Job is stored under its own name, prepared.
        assert created["metadata"]["name"] == "train"
        await cluster.settle()

        job = cluster.job()
        aw = cluster.appwrapper()
        assert job is not None and aw is not None
        assert job["metadata"]["labels"][names.ADOPTION_LABEL] == "adopted"
        assert aw["metadata"]["labels"][names.QUEUE_LABEL] == QUEUE
        assert aw["status"]["phase"] == "Running"
        pods = cluster.pods()
        assert [p["metadata"]["name"] for p in pods] == [
            "train-master-0", "train-worker-0", "train-worker-1", "train-worker-2"
        ]  # fmt: skip
        for pod in pods:
            assert not pod["spec"].get("schedulingGates"), pod["metadata"]["name"]
            assert pod["spec"]["nodeSelector"]["cloud.example/pool"] == "a100"
            assert any(t.get("key") == "nvidia.com/gpu" for t in pod["spec"]["tolerations"])
            assert pod["status"]["phase"] == "Running"
        envs = [resolved_env(p, store=cluster.api.store) for p in pods]
        assert sorted(int(e["RANK"]) for e in envs) == [0, 1, 2, 3]
        assert envs[0]["RANK"] == "0"  # the master's pod 0 is node 0, behind MASTER_ADDR
        for env in envs:
            assert env["MASTER_ADDR"] == "train-master-0.train"
            assert env["NNODES"] == "4" and env["WORLD_SIZE"] == "32"
            assert env["NPROC_PER_NODE"] == "8" and env["PET_NODE_RANK"] == env["NODE_RANK"]
        # kubectl describe says what happened.
        assert {"Adopted", "Running"} <= set(cluster.events())


async def test_preemption_deletes_the_job_and_readmission_brings_it_back_ungated(
    webhook_pki: ServingPki, tmp_path: Path
) -> None:
    async with running_cluster(webhook_pki, tmp_path) as cluster:
        await cluster.api.create(VCJOBS, vcjob(workers=1), user=ALICE)
        await cluster.settle()
        first_uid = cluster.job()["metadata"]["uid"]  # type: ignore[index]

        await cluster.sims.kueue.preempt(NAMESPACE, "train")
        await cluster.settle()
        assert cluster.job() is None and cluster.pods() == []
        assert cluster.appwrapper()["status"]["phase"] == "Suspended"  # type: ignore[index]

        await cluster.sims.kueue.admit(NAMESPACE, "train")
        await cluster.settle()

        job = cluster.job()
        assert job is not None and job["metadata"]["uid"] != first_uid
        pods = cluster.pods()
        assert len(pods) == 2 and all(p["status"]["phase"] == "Running" for p in pods)
        assert len(cluster.appwrappers()) == 1


@pytest.mark.parametrize("when", ["queued", "running"])
async def test_a_users_delete_leaves_nothing_behind(
    webhook_pki: ServingPki, tmp_path: Path, when: str
) -> None:
    async with running_cluster(webhook_pki, tmp_path, auto_admit=when == "running") as cluster:
        await cluster.api.create(VCJOBS, vcjob(workers=1), user=ALICE)
        await cluster.settle()
        assert cluster.appwrapper() is not None

        await cluster.api.delete(VCJOBS, NAMESPACE, "train", user=ALICE)
        await cluster.settle()

        assert cluster.job() is None
        assert cluster.appwrappers() == []
        assert cluster.pods() == []
        if when == "queued":
            # Nothing is resurrected when Kueue would now admit.
            cluster.sims.kueue.auto_admit = True
            await cluster.settle()
            assert cluster.job() is None and cluster.appwrappers() == []


async def test_when_another_webhook_denies_the_create_no_appwrapper_ever_exists(
    webhook_pki: ServingPki, tmp_path: Path
) -> None:
    from tests.support.cluster.store import ApiError

    async with running_cluster(webhook_pki, tmp_path) as cluster:
        cluster.api.add_validating_webhook(
            "kyverno.example", lambda request: "images must come from registry.example"
            if request.get("operation") == "CREATE" and request["kind"]["kind"] == "Job" else None,
        )  # fmt: skip

        with pytest.raises(ApiError) as denied:
            await cluster.api.create(VCJOBS, vcjob(), user=ALICE)
        await cluster.settle()

        assert "images must come from registry.example" in denied.value.message
        assert cluster.job() is None
        assert cluster.appwrappers() == []
