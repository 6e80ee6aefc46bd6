"""Adopt mode end to end: the user's create succeeds and the job runs under Kueue, with every
upstream party simulated and autowrap's webhooks and controller real."""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed.cluster.resources import VCJOBS
from testbed.pki import ServingPki
from testbed.sim import resolved_env
from tests.adopt.cluster import ALICE, NAMESPACE, QUEUE, running_cluster, vcjob
from webhook.model import names

# A hang, not a speed bound: how long the adoption of many Jobs may make no progress at all.
STALLED = 60.0


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
    from testbed.cluster.store import ApiError

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


def _manifest_tasks() -> list[dict]:
    return vcjob()["spec"]["tasks"]


async def test_reapplying_the_unchanged_manifest_succeeds_both_ways_and_a_real_change_reaches_volcano(
    webhook_pki: ServingPki, tmp_path: Path
) -> None:
    from testbed.cluster.patches import MERGE_PATCH
    from testbed.cluster.store import ApiError

    async with running_cluster(webhook_pki, tmp_path, auto_admit=False) as cluster:
        await cluster.api.apply(VCJOBS, vcjob(), field_manager="kubectl", user=ALICE)
        await cluster.settle()
        stored = cluster.job()
        assert stored is not None

        # Client-side kubectl apply: a JSON merge patch that carries the whole spec.tasks.
        await cluster.api.patch(VCJOBS, NAMESPACE, "train", {"spec": {"tasks": _manifest_tasks()}},
                                MERGE_PATCH, user=ALICE)  # fmt: skip
        # Server-side apply (kubectl apply --server-side, a GitOps sync) of the same manifest.
        await cluster.api.apply(VCJOBS, vcjob(), field_manager="kubectl", user=ALICE)
        await cluster.settle()

        assert cluster.job()["spec"] == stored["spec"]  # type: ignore[index]
        changed = vcjob()
        changed["spec"]["tasks"][1]["template"]["spec"]["containers"][0]["image"] = "torch:2.5"
        with pytest.raises(ApiError) as refused:
            await cluster.api.apply(VCJOBS, changed, field_manager="kubectl", user=ALICE)
        assert "validatejob.volcano.sh" in refused.value.message


async def test_a_reapply_that_removes_a_field_is_refused_not_silently_kept(
    webhook_pki: ServingPki, tmp_path: Path
) -> None:
    from testbed.cluster.store import ApiError

    manifest = vcjob()
    manifest["spec"]["tasks"][1]["template"]["spec"]["nodeSelector"] = {"pool": "a100"}
    async with running_cluster(webhook_pki, tmp_path, auto_admit=False) as cluster:
        await cluster.api.apply(VCJOBS, manifest, field_manager="kubectl", user=ALICE)
        await cluster.settle()

        # The user drops the nodeSelector from the manifest and applies it again.
        with pytest.raises(ApiError) as refused:
            await cluster.api.apply(VCJOBS, vcjob(), field_manager="kubectl", user=ALICE)
        assert "validatejob.volcano.sh" in refused.value.message
        stored = cluster.job()
        assert stored["spec"]["tasks"][1]["template"]["spec"]["nodeSelector"] == {"pool": "a100"}  # type: ignore[index]


async def test_a_forged_review_puts_nothing_in_the_cluster(
    webhook_pki: ServingPki, tmp_path: Path
) -> None:
    import aiohttp

    from testbed.pki import client_ssl_context

    async with running_cluster(webhook_pki, tmp_path) as cluster:
        job = vcjob("forged")
        job["metadata"]["labels"][names.ADOPTION_LABEL] = names.ADOPTION_PENDING
        review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
            "uid": "forged-1", "operation": "CREATE", "namespace": NAMESPACE, "name": "forged",
            "kind": {"group": "batch.volcano.sh", "version": "v1alpha1", "kind": "Job"},
            "resource": {"group": "batch.volcano.sh", "version": "v1alpha1", "resource": "jobs"},
            "userInfo": {"username": "mallory", "groups": ["system:masters"]}, "object": job}}  # fmt: skip
        port = cluster.running.port
        async with aiohttp.ClientSession() as session:
            for path in ("/mutate", "/validate"):
                async with session.post(
                    f"https://127.0.0.1:{port}{path}", json=review,
                    ssl=client_ssl_context(webhook_pki.ca_pem),
                    server_hostname="autowrap.autowrap-system.svc",
                ) as answer:  # fmt: skip
                    assert answer.status == 200
        await cluster.settle()

        assert cluster.appwrappers() == []
        assert cluster.job("forged") is None


async def test_a_bare_pod_is_adopted_with_its_headless_service(
    webhook_pki: ServingPki, tmp_path: Path
) -> None:
    from testbed.cluster.resources import PODS, SERVICES
    from tests.adopt.cluster import bare_pod

    async with running_cluster(webhook_pki, tmp_path) as cluster:
        created = await cluster.api.create(PODS, bare_pod(), user=ALICE)
        assert names.QUEUE_LABEL not in created["metadata"]["labels"]
        await cluster.settle()

        pod = cluster.get(PODS, "notebook")
        aw = cluster.appwrapper("notebook")
        assert pod is not None and aw is not None
        assert [c["template"]["kind"] for c in aw["spec"]["components"]] == ["Pod", "Service"]
        assert pod["metadata"]["ownerReferences"][0]["uid"] == aw["metadata"]["uid"]
        assert not pod["spec"].get("schedulingGates") and pod["status"]["phase"] == "Running"
        assert pod["spec"]["nodeSelector"]["cloud.example/pool"] == "a100"
        service = cluster.get(SERVICES, pod["spec"]["subdomain"])
        assert service is not None and service["spec"]["clusterIP"] == "None"
        env = resolved_env(pod, store=cluster.api.store)
        assert env["RANK"] == "0" and env["NNODES"] == "1" and env["WORLD_SIZE"] == "2"
        assert env["MASTER_ADDR"] == f"{pod['spec']['hostname']}.{pod['spec']['subdomain']}"


async def test_the_controller_restarted_between_every_two_steps_still_gets_there(
    webhook_pki: ServingPki, tmp_path: Path
) -> None:
    async with running_cluster(webhook_pki, tmp_path, auto_admit=False) as cluster:
        await cluster.api.create(VCJOBS, vcjob(workers=2), user=ALICE)
        await cluster.restart_controller()
        await cluster.settle()
        assert cluster.job()["metadata"]["labels"][names.ADOPTION_LABEL] == "adopted"  # type: ignore[index]
        await cluster.restart_controller()
        await cluster.sims.kueue.admit(NAMESPACE, "train")
        await cluster.restart_controller()
        await cluster.settle()

        pods = cluster.pods()
        assert len(pods) == 3 and all(p["status"]["phase"] == "Running" for p in pods)
        await cluster.restart_controller()
        await cluster.api.delete(VCJOBS, NAMESPACE, "train", user=ALICE)
        await cluster.restart_controller()
        await cluster.settle()
        assert cluster.job() is None and cluster.pods() == []
        assert cluster.appwrappers() == [], [
            (a.get("status"), a["metadata"].get("deletionTimestamp")) for a in cluster.appwrappers()
        ]


async def test_five_hundred_jobs_created_at_once_are_each_adopted_once(
    webhook_pki: ServingPki, tmp_path: Path
) -> None:
    import asyncio

    async with running_cluster(webhook_pki, tmp_path, upstream=False) as cluster:
        gate = asyncio.Semaphore(25)

        async def create(i: int) -> None:
            async with gate:
                await cluster.api.create(VCJOBS, vcjob(f"job-{i}", workers=1), user=ALICE)

        await asyncio.gather(*(create(i) for i in range(500)))

        def done() -> bool:
            if cluster.controller.stats().adopted < 500 or not cluster.controller.idle():
                return False
            return cluster.caught_up()

        # However long the machine takes, as long as the controller gets on with it: the test
        # fails only when nothing moved (no reconcile, no write) for a whole STALLED span.
        loop = asyncio.get_running_loop()
        progress, moved = None, loop.time()
        while not done():
            now = (cluster.controller.stats().adopted, cluster.controller.reconciles,
                   cluster.api.store.resource_version)  # fmt: skip
            if now != progress:
                progress, moved = now, loop.time()
            assert loop.time() - moved < STALLED, f"stalled: {progress} (adopted, reconciles, rv)"
            await asyncio.sleep(0.2)

        jobs = cluster.api.store.list(VCJOBS, NAMESPACE)
        appwrappers = cluster.appwrappers()
        assert len(jobs) == 500 and len(appwrappers) == 500
        assert all(j["metadata"]["labels"][names.ADOPTION_LABEL] == "adopted" for j in jobs)
        owners = {a["metadata"]["annotations"][names.ORIGIN_UID_ANNOTATION] for a in appwrappers}
        assert owners == {j["metadata"]["uid"] for j in jobs}
        assert all(names.ADMISSION_GATED_BY_ANNOTATION not in a["metadata"]["annotations"]
                   for a in appwrappers)  # fmt: skip
        stats = cluster.controller.stats()
        assert stats.adopted == 500 and stats.queue_depth == 0


async def test_the_controllers_work_is_in_the_metrics_beside_the_webhooks(
    webhook_pki: ServingPki, tmp_path: Path
) -> None:
    import aiohttp

    async with running_cluster(webhook_pki, tmp_path) as cluster:
        await cluster.api.create(VCJOBS, vcjob(workers=1), user=ALICE)
        await cluster.settle()

        url = f"http://127.0.0.1:{cluster.running.metrics_port}/metrics"
        async with aiohttp.ClientSession() as session, session.get(url) as answer:
            text = await answer.text()

        from prometheus_client.parser import text_string_to_metric_families

        samples = [s for f in text_string_to_metric_families(text) for s in f.samples]
        values = {s.name: s.value for s in samples if not s.labels}
        assert values["autowrap_controller_leading"] == 1
        assert values["autowrap_adoptions_total"] == 1
        assert values["autowrap_pod_releases_total"] == 2
        assert values["autowrap_controller_queue_depth"] == 0
        assert values["autowrap_controller_reconcile_duration_seconds_count"] >= 1
        answered = [s.labels for s in samples if s.name == "autowrap_admission_requests_total"]
        assert any(labels.get("decision") == "prepared" for labels in answered)
