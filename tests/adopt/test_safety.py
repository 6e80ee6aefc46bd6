"""Adopt mode on a shared cluster: no queue escape, no lost or stranded job.

Each scenario runs on the simulated cluster (autowrap's webhooks and controller real; Kueue, the
AppWrapper controller, Volcano and a kubelet simulated) with an ordinary namespace user.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.adopt.cluster import ALICE, NAMESPACE, QUEUE, bare_pod, running_cluster, vcjob
from tests.support.cluster.resources import PODS, VCJOBS
from tests.support.cluster.store import ApiError
from tests.support.pki import ServingPki
from webhook import names

ALWAYS = f"""\
apiVersion: autowrap.io/v1alpha1
kind: Policy
metadata:
  name: always-here
spec:
  namespaces:
    names: ["{NAMESPACE}"]
  wrap: Always
  enforcement: Enforce
  queue:
    default: {QUEUE}
"""


def _unlabelled(obj: dict) -> dict:
    labels = obj["metadata"]["labels"]
    labels.pop(names.WRAP_LABEL, None)
    labels.pop(names.QUEUE_LABEL, None)
    return obj


@pytest.mark.parametrize("mode", ["Adopt", "Redirect"])
async def test_an_always_namespace_wraps_and_runs_unlabelled_jobs_and_pods(
    webhook_pki: ServingPki, tmp_path: Path, mode: str
) -> None:
    async with running_cluster(
        webhook_pki, tmp_path, extra_policies=ALWAYS, mode=mode,
        namespace_labels={names.WRAP_LABEL: "Always"},
    ) as cluster:  # fmt: skip
        for res, obj in ((VCJOBS, vcjob(workers=1)), (PODS, bare_pod())):
            try:
                await cluster.api.create(res, _unlabelled(obj), user=ALICE)
            except ApiError as exc:  # redirect: the create is answered with the AppWrapper
                assert mode == "Redirect" and "wrapped into AppWrapper" in exc.message, exc
        await cluster.settle()

        for name in ("train", "notebook"):
            aw = cluster.appwrapper(name)
            assert aw is not None, name
            assert aw["status"]["phase"] == "Running", name
            assert aw["metadata"]["labels"][names.QUEUE_LABEL] == QUEUE
        pods = [*cluster.pods(), cluster.get(PODS, "notebook")]
        assert len(pods) == 3
        for pod in pods:
            assert pod is not None and pod["status"]["phase"] == "Running"
            assert not pod["spec"].get("schedulingGates")
