"""A Volcano Job that an AppWrapper stands for cannot grow past its admission, whoever created
it, and whether autowrap is up or down (review 0.4, i01): the Job autowrap adopted, the Job the
AppWrapper controller re-creates after a preemption, and redirect mode's Job. The rule is a
ValidatingAdmissionPolicy (``autowrap-adopted-job-size``), which holds without autowrap, and
the marks that put a Job under it cannot be taken off by its user."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest

from testbed.cluster.resources import PODS, VCJOBS
from testbed.pki import ServingPki
from tests.adopt.cluster import NAMESPACE, Cluster, running_cluster
from tests.adopt.test_trust import MALLORY, _alices_job, _patch_refused, _running
from webhook.model import names

Obj = dict[str, Any]
POLICY = "autowrap-adopted-job-size"


def _autowrap_down(cluster: Cluster) -> None:
    """The apiserver reaches no autowrap from now on (a rollout, a crash): its webhooks'
    failurePolicy decides, and the ValidatingAdmissionPolicies still hold."""
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        cluster.emulator.port = closed.getsockname()[1]


async def _recreated_by_its_appwrapper(cluster: Cluster) -> Obj:
    """alice's Job, preempted by Kueue and re-created by the AppWrapper controller."""
    first = await _alices_job(cluster)
    await cluster.sims.kueue.preempt(NAMESPACE, "train")
    await cluster.settle()
    await cluster.sims.kueue.admit(NAMESPACE, "train")
    await cluster.settle()
    job = cluster.job()
    assert job is not None and job["metadata"]["uid"] != first["metadata"]["uid"]
    assert names.ADOPTION_LABEL not in job["metadata"].get("labels", {})
    return job


@pytest.mark.parametrize(
    "patch",
    [
        {"metadata": {"labels": {names.APPWRAPPER_LABEL: None}}},
        {"metadata": {"labels": {names.APPWRAPPER_LABEL: "another"}}},
        {"metadata": {"ownerReferences": None}},
    ],
    ids=["label-removed", "label-changed", "owner-removed"],
)
async def test_the_marks_of_a_recreated_job_cannot_be_taken_off_by_its_user(
    webhook_pki: ServingPki, tmp_path: Path, patch: Obj
) -> None:
    async with running_cluster(webhook_pki, tmp_path) as cluster:
        await _recreated_by_its_appwrapper(cluster)
        refused = await _patch_refused(cluster, VCJOBS, "train", patch, user=MALLORY)
        assert refused.status == 403, refused
        assert POLICY in refused.message and "metadata:" in refused.message, refused.message
        job = cluster.job()
        assert job is not None and job["metadata"]["labels"][names.APPWRAPPER_LABEL] == "train"


@pytest.mark.parametrize(
    ("patch", "field"),
    [
        ({"spec": {"tasks": [{"name": "master", "replicas": 1},
                             {"name": "worker", "replicas": 4}]}}, "spec.tasks[*].replicas"),
        ({"spec": {"minAvailable": 1}}, "spec.minAvailable"),
        ({"spec": {"priorityClassName": "cluster-critical-training"}}, "spec.priorityClassName"),
    ],
    ids=["replicas", "min-available", "priority-class"],
)  # fmt: skip
async def test_a_recreated_job_keeps_its_admitted_size_with_autowrap_down(
    webhook_pki: ServingPki, tmp_path: Path, patch: Obj, field: str
) -> None:
    async with running_cluster(webhook_pki, tmp_path) as cluster:
        await _recreated_by_its_appwrapper(cluster)
        _autowrap_down(cluster)
        refused = await _patch_refused(cluster, VCJOBS, "train", patch, user=MALLORY)
        assert refused.status == 403, refused
        assert POLICY in refused.message and field in refused.message, refused.message
        assert [p["metadata"]["name"] for p in cluster.pods()] == [
            "train-master-0",
            "train-worker-0",
        ]


async def test_redirect_modes_job_keeps_its_admitted_size_with_autowrap_down(
    webhook_pki: ServingPki, tmp_path: Path
) -> None:
    async with running_cluster(webhook_pki, tmp_path, mode="Redirect") as cluster:
        from testbed.cluster.store import ApiError
        from tests.adopt.cluster import ALICE, vcjob

        with pytest.raises(ApiError):  # redirected: the create is denied, the AppWrapper stands
            await cluster.api.create(VCJOBS, vcjob(workers=1, gpus=1), user=ALICE)
        await cluster.settle()
        assert _running(cluster.get(PODS, "train-worker-0"))
        _autowrap_down(cluster)
        grow = {"spec": {"tasks": [{"name": "master", "replicas": 1},
                                   {"name": "worker", "replicas": 3}]}}  # fmt: skip
        refused = await _patch_refused(cluster, VCJOBS, "train", grow, user=MALLORY)
        assert refused.status == 403 and POLICY in refused.message, refused
        shed = {"metadata": {"labels": {names.APPWRAPPER_LABEL: None}}}
        refused = await _patch_refused(cluster, VCJOBS, "train", shed, user=MALLORY)
        assert refused.status == 403 and POLICY in refused.message, refused
