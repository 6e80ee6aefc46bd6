"""Every way users write a GPU job's resources is released once Kueue admits it (review 0.4,
i02): the pod kube-apiserver stores is not the template as written (requests defaulted from
limits, canonical quantities, the pytorch plugin's init container), and the release compares
what Kubernetes computes, not JSON. The same scenarios run on the real control plane
(tests/real)."""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed.cluster.resources import VCJOBS
from testbed.jobs import RESOURCE_SPELLINGS, with_init_container, with_resources
from testbed.pki import ServingPki
from tests.adopt.cluster import ALICE, running_cluster, vcjob
from webhook.model import names


def _released_and_running(pods: list[dict[str, object]]) -> list[str]:
    """The names of the pods that are not Running ungated."""
    return [
        p["metadata"]["name"]  # type: ignore[index]
        for p in pods
        if p["spec"].get("schedulingGates") or p["status"]["phase"] != "Running"  # type: ignore[attr-defined,index]
    ]


@pytest.mark.parametrize("spelling", sorted(RESOURCE_SPELLINGS))
async def test_each_spelling_of_a_jobs_resources_runs_once_admitted(
    webhook_pki: ServingPki, tmp_path: Path, spelling: str
) -> None:
    job = with_resources(vcjob(workers=1), RESOURCE_SPELLINGS[spelling])
    async with running_cluster(webhook_pki, tmp_path) as cluster:
        await cluster.api.create(VCJOBS, job, user=ALICE)
        await cluster.settle()

        pods = cluster.pods()
        assert len(pods) == 2
        assert _released_and_running(pods) == [], cluster.events()
        stored = cluster.job()
        assert stored is not None
        assert "Running" in stored["metadata"]["annotations"][names.STATUS_ANNOTATION]


async def test_an_init_container_with_limits_only_runs(
    webhook_pki: ServingPki, tmp_path: Path
) -> None:
    job = with_init_container(vcjob(workers=1), {"limits": {"cpu": "0.5", "memory": "64Mi"}})
    async with running_cluster(webhook_pki, tmp_path) as cluster:
        await cluster.api.create(VCJOBS, job, user=ALICE)
        await cluster.settle()
        assert _released_and_running(cluster.pods()) == [], cluster.events()


async def test_a_job_that_keeps_the_pytorch_plugins_wait_for_master_runs(
    webhook_pki: ServingPki, tmp_path: Path
) -> None:
    job = vcjob(workers=2)
    job["spec"]["plugins"] = {"pytorch": ["--master=master", "--worker=worker",
                                          "--wait-master-enabled=true"]}  # fmt: skip
    research = {"autowrap.io/tier": "research"}
    async with running_cluster(webhook_pki, tmp_path, namespace_labels=research) as cluster:
        await cluster.api.create(VCJOBS, job, user=ALICE)
        await cluster.settle()

        pods = cluster.pods()
        workers = [p for p in pods if "-worker-" in p["metadata"]["name"]]
        assert [c["name"] for p in workers for c in p["spec"]["initContainers"]] == [
            "wait-for-master", "wait-for-master"
        ]  # fmt: skip
        assert _released_and_running(pods) == [], cluster.events()
