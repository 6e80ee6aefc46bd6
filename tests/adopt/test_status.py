"""``autowrap status``: the chain of a real adopted and admitted job, read from the fake API with a
kubeconfig as the CLI does, in text and in ``-o json``."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson

from testbed.cluster.resources import VCJOBS
from testbed.pki import ServingPki
from tests.adopt.cluster import ALICE, NAMESPACE, QUEUE, running_cluster, vcjob
from tests.support.cli import run as _run
from webhook.cli import follow, status
from webhook.cli import main as cli
from webhook.shell.kube import APPWRAPPERS, PODS, Api

POD_NAMES = ["train-master-0", "train-worker-0", "train-worker-1", "train-worker-2"]


async def test_status_follows_an_adopted_admitted_job_to_its_pods_and_events(
    webhook_pki: ServingPki, tmp_path: Path
) -> None:
    async with running_cluster(webhook_pki, tmp_path) as cluster:
        await cluster.api.create(VCJOBS, vcjob(), user=ALICE)
        await cluster.settle()
        kubeconfig = str(cluster.api.write_kubeconfig(tmp_path / "user-kubeconfig"))
        argv = ["status", "vcjob/train", "-n", NAMESPACE, "--kubeconfig", kubeconfig]

        # The CLI runs its own event loop: off this one, which serves the fake API.
        code, text, _ = await asyncio.to_thread(_run, [*argv, "-o", "json"])
        assert code == cli.EXIT_OK
        report: dict[str, Any] = orjson.loads(text)
        assert set(report) == {"object", "appWrapper", "workload", "pods", "events"}
        assert report["object"]["kind"] == "Job" and report["object"]["adoption"] == "adopted"
        assert report["object"]["status"]
        aw = report["appWrapper"]
        assert aw["name"] == "train" and aw["phase"] == "Running" and not aw["suspended"]
        assert aw["queue"] == QUEUE and aw["retries"] == 0
        wl = report["workload"]
        assert wl["localQueue"] == QUEUE and wl["admitted"] is True
        assert wl["clusterQueue"] == "cq" and wl["flavors"] == ["a100"]
        assert wl["whyNotAdmitted"] is None
        assert {"type": "Admitted", "status": "True"}.items() <= next(
            c for c in wl["conditions"] if c["type"] == "Admitted"
        ).items()
        assert report["pods"]["counts"]["running"] == 4
        assert report["pods"]["byState"] == {"running": POD_NAMES}
        reasons = {(e["object"], e["reason"]) for e in report["events"]}
        assert ("Job/train", "Adopted") in reasons

        code, text, _ = await asyncio.to_thread(_run, argv)
        assert code == cli.EXIT_OK
        assert "AppWrapper train: Running" in text
        assert "admitted to ClusterQueue 'cq', flavor(s) a100" in text
        assert "Pods: 4 running" in text and "Adopted" in text

        # The AppWrapper and a pod lead to the same chain.
        api = await Api.connect(kubeconfig)
        try:
            by_aw = await follow.fetch(api, APPWRAPPERS, NAMESPACE, "train")
            by_pod = await follow.fetch(api, PODS, NAMESPACE, "train-worker-1")
        finally:
            await api.close()
        for fetched in (by_aw, by_pod):
            assert status.report(fetched)["workload"]["clusterQueue"] == "cq"
            assert status.report(fetched)["pods"]["counts"]["running"] == 4

        code, _, err = await asyncio.to_thread(
            _run, ["status", "vcjob/absent", "-n", NAMESPACE, "--kubeconfig", kubeconfig]
        )
        assert code == cli.EXIT_REJECTED and "not found" in err


def test_a_queued_workload_says_why_it_is_not_admitted() -> None:
    job = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
           "metadata": {"name": "j", "namespace": "ml", "uid": "j1"}}  # fmt: skip
    aw = {"apiVersion": "workload.codeflare.dev/v1beta2", "kind": "AppWrapper",
          "metadata": {"name": "j", "namespace": "ml", "uid": "a1"},
          "spec": {"suspend": True}, "status": {"phase": "Suspended"}}  # fmt: skip
    wl = {"metadata": {"name": "appwrapper-j-1", "ownerReferences": [{"uid": "a1"}]},
          "spec": {"queueName": "q"},
          "status": {"conditions": [{"type": "QuotaReserved", "status": "False",
                                     "reason": "Pending", "message": "insufficient quota"}]}}  # fmt: skip
    other = {"metadata": {"name": "appwrapper-k-1", "ownerReferences": [{"uid": "zz"}]}}
    gated = {"metadata": {"name": "j-0", "labels": {"workload.codeflare.dev/appwrapper": "j"}},
             "spec": {"schedulingGates": [{"name": "g"}]}, "status": {"phase": "Pending"}}  # fmt: skip
    stale = {"involvedObject": {"kind": "Job", "name": "j", "uid": "old"}, "reason": "Old"}
    rep = status.report(status.Fetched(job, aw, [other, wl], [gated], [stale]))
    assert rep["workload"]["admitted"] is False
    assert rep["workload"]["whyNotAdmitted"] == "QuotaReserved: insufficient quota"
    assert rep["pods"]["byState"] == {"gated": ["j-0"]}
    assert rep["events"] == []
    assert "not admitted: QuotaReserved: insufficient quota" in status.render(rep)
