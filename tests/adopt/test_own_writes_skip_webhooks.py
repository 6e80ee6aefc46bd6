"""autowrap's own writes to an adopted Volcano Job (its owner reference, its status annotation)
do not come back to autowrap's re-apply webhook (its matchCondition ``not-autowrap``): each
would cost the apiserver a webhook call, 2-3 per adopted Job. A user's re-apply still comes,
and is still normalized."""

from __future__ import annotations

from pathlib import Path

from testbed.cluster.patches import MERGE_PATCH
from testbed.cluster.resources import VCJOBS
from testbed.pki import ServingPki
from tests.adopt.cluster import ALICE, NAMESPACE, Cluster, running_cluster, vcjob
from webhook.model import names


def _job_updates_reviewed(cluster: Cluster) -> float:
    """UPDATEs of Volcano Jobs that reached autowrap's /mutate, by its own count."""
    total = 0.0
    for metric in cluster.running.state.metrics.requests.collect():
        for sample in metric.samples:
            labels = sample.labels
            if (sample.name.endswith("_total") and labels.get("webhook") == "mutate"
                    and labels.get("kind") == "Job" and labels.get("operation") == "UPDATE"):  # fmt: skip
                total += sample.value
    return total


async def test_autowraps_own_writes_skip_the_reapply_webhook_and_a_users_reapply_does_not(
    webhook_pki: ServingPki, tmp_path: Path
) -> None:
    async with running_cluster(webhook_pki, tmp_path) as cluster:
        await cluster.api.create(VCJOBS, vcjob(workers=1), user=ALICE)
        await cluster.settle()
        job = cluster.job()
        assert job is not None
        annotations = job["metadata"].get("annotations") or {}
        # autowrap wrote the Job: its owner and its status, as it stands now.
        assert job["metadata"]["ownerReferences"] and names.STATUS_ANNOTATION in annotations
        assert _job_updates_reviewed(cluster) == 0

        tasks = job["spec"]["tasks"]
        await cluster.api.patch(VCJOBS, NAMESPACE, "train", {"spec": {"tasks": tasks}},
                                MERGE_PATCH, user=ALICE)  # fmt: skip
        assert _job_updates_reviewed(cluster) == 1
