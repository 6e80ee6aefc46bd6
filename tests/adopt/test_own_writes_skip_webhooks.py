"""autowrap's own writes do not come back to its webhooks (their matchCondition
``not-autowrap``): the updates of an adopted Volcano Job (its owner reference, its status
annotation), 2-3 per Job, and the AppWrapper it creates, which the same engine built and judged
under the same policies a moment before. A user's re-apply and a user's AppWrapper still come."""

from __future__ import annotations

from pathlib import Path

from testbed.cluster.patches import MERGE_PATCH
from testbed.cluster.resources import APPWRAPPERS, VCJOBS
from testbed.pki import ServingPki
from tests.adopt.cluster import ALICE, NAMESPACE, QUEUE, Cluster, running_cluster, vcjob
from webhook.model import names


def _reviewed(cluster: Cluster, webhook: str, kind: str, operation: str) -> float:
    """Requests that reached autowrap's ``webhook`` (mutate or validate), by its own count."""
    total = 0.0
    for metric in cluster.running.state.metrics.requests.collect():
        for sample in metric.samples:
            labels = sample.labels
            if sample.name.endswith("_total") and (labels.get("webhook"), labels.get("kind"),
                                                   labels.get("operation")) == (webhook, kind, operation):  # fmt: skip
                total += sample.value
    return total


def _job_updates_reviewed(cluster: Cluster) -> float:
    return _reviewed(cluster, "mutate", "Job", "UPDATE")


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
        assert cluster.appwrapper() is not None
        assert _reviewed(cluster, "mutate", "AppWrapper", "CREATE") == 0
        assert _reviewed(cluster, "validate", "AppWrapper", "CREATE") == 0

        tasks = job["spec"]["tasks"]
        await cluster.api.patch(VCJOBS, NAMESPACE, "train", {"spec": {"tasks": tasks}},
                                MERGE_PATCH, user=ALICE)  # fmt: skip
        assert _job_updates_reviewed(cluster) == 1


async def test_a_users_appwrapper_still_reaches_autowraps_webhooks(
    webhook_pki: ServingPki, tmp_path: Path
) -> None:
    async with running_cluster(webhook_pki, tmp_path) as cluster:
        job = vcjob("handmade", workers=1)
        del job["metadata"]["namespace"]
        handmade = {
            "apiVersion": "workload.codeflare.dev/v1beta2", "kind": "AppWrapper",
            "metadata": {"name": "handmade", "namespace": NAMESPACE,
                         "labels": {"kueue.x-k8s.io/queue-name": QUEUE}},
            "spec": {"components": [{"template": job}]},
        }  # fmt: skip
        await cluster.api.create(APPWRAPPERS, handmade, user=ALICE)
        assert _reviewed(cluster, "mutate", "AppWrapper", "CREATE") == 1
        assert _reviewed(cluster, "validate", "AppWrapper", "CREATE") == 1
