"""The real cluster itself: what every other test of this tier stands on.

Four KWOK nodes offer GPUs; the upstream webhooks (Volcano's, Kueue's, the AppWrapper
controller's) answer a server-side dry run with their own defaults; a plain pod is scheduled
and runs; autowrap answers, through the Service stand-in, with the certificate its
configurations' caBundle trusts for ``autowrap.autowrap-system.svc``.
"""

from __future__ import annotations

import base64
import http.client
import json
import ssl
import time
from typing import Any

import pytest
import yaml

from testbed.real.cluster import NAMESPACE, QUEUE, RealCluster, https_status

pytestmark = pytest.mark.real

Obj = dict[str, Any]


def output(done: Any) -> Obj:
    assert done.returncode == 0, done.stderr
    loaded: Obj = json.loads(done.stdout)
    return loaded


def test_four_kwok_nodes_are_ready_with_gpus(real_cluster: RealCluster) -> None:
    nodes = output(real_cluster.kubectl("get", "nodes", "-o", "json"))["items"]
    assert len(nodes) == 4
    for node in nodes:
        conditions = {c["type"]: c["status"] for c in node["status"]["conditions"]}
        assert conditions["Ready"] == "True"
        taints = [t["key"] for t in node["spec"].get("taints") or []]
        assert "node.kubernetes.io/not-ready" not in taints
        assert node["status"]["allocatable"]["nvidia.com/gpu"] == "8"


def test_volcano_defaults_a_job_in_a_server_dry_run(real_cluster: RealCluster) -> None:
    job = {
        "apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
        "metadata": {"name": "smoke", "namespace": NAMESPACE},
        "spec": {"minAvailable": 1, "schedulerName": "volcano", "tasks": [{
            "name": "worker", "replicas": 1,
            "template": {"spec": {"restartPolicy": "Never",
                                  "containers": [{"name": "main", "image": "busybox"}]}}}]},
    }  # fmt: skip
    created = output(real_cluster.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-",
                                          input=yaml.safe_dump(job)))  # fmt: skip
    # Volcano's mutating webhook puts a job without a queue into the default queue.
    assert created["spec"]["queue"] == "default"


def test_kueue_and_the_appwrapper_controller_admit_an_appwrapper_dry_run(
    real_cluster: RealCluster,
) -> None:
    pod = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "smoke"},
           "spec": {"template": {"spec": {"restartPolicy": "Never",
                                          "containers": [{"name": "main", "image": "busybox"}]}}}}  # fmt: skip
    wrapper = {
        "apiVersion": "workload.codeflare.dev/v1beta2", "kind": "AppWrapper",
        "metadata": {"name": "smoke", "namespace": NAMESPACE,
                     "labels": {"kueue.x-k8s.io/queue-name": QUEUE}},
        "spec": {"components": [{"template": pod}]},
    }  # fmt: skip
    created = output(real_cluster.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-",
                                          input=yaml.safe_dump(wrapper)))  # fmt: skip
    # Kueue's webhook suspends a queued AppWrapper; the AppWrapper webhook records its creator.
    assert created["spec"]["suspend"] is True
    assert created["metadata"]["labels"]["workload.codeflare.dev/user"] == "kubernetes-admin"


def test_a_plain_pod_is_scheduled_and_runs(real_cluster: RealCluster) -> None:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "plain", "namespace": NAMESPACE},
           "spec": {"containers": [{"name": "main", "image": "busybox"}]}}  # fmt: skip
    created = real_cluster.kubectl("create", "-f", "-", input=yaml.safe_dump(pod))
    assert created.returncode == 0, created.stderr
    try:
        deadline = time.monotonic() + 30.0
        phase = ""
        while time.monotonic() < deadline:
            found = output(
                real_cluster.kubectl("get", "pod", "plain", "-n", NAMESPACE, "-o", "json")
            )
            phase = found["status"].get("phase", "")
            if phase == "Running":
                break
            time.sleep(0.2)
        assert phase == "Running", real_cluster.log_tail("kube-scheduler")
        assert found["spec"]["nodeName"].startswith("kwok-node-")
    finally:
        real_cluster.kubectl("delete", "pod", "plain", "-n", NAMESPACE, "--wait=false")


def test_autowrap_answers_with_the_certificate_its_configurations_trust(
    real_cluster: RealCluster,
) -> None:
    for replica in real_cluster.running_replicas():
        assert https_status(replica.port, "/healthz") == 200
    configuration = output(real_cluster.kubectl(
        "get", "mutatingwebhookconfiguration", "autowrap-mutating", "-o", "json"))  # fmt: skip
    bundle = base64.b64decode(configuration["webhooks"][0]["clientConfig"]["caBundle"])
    context = ssl.create_default_context(cadata=bundle.decode())
    connection = http.client.HTTPSConnection(
        "autowrap.autowrap-system.svc", real_cluster.webhook_port, timeout=5.0, context=context
    )
    try:
        connection.request("GET", "/healthz")
        assert connection.getresponse().status == 200
    finally:
        connection.close()
