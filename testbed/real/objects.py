"""What the launcher creates in the cluster beyond the installs: the queue objects the fake
clusters have too (ResourceFlavor ``a100``, ClusterQueue ``cq``), sized to the KWOK nodes, and
the objects whose server-side dry run tells that a component's webhooks answer.
"""

from __future__ import annotations

from typing import Any

from testbed.real import controlplane
from testbed.real.cluster import CLUSTER_QUEUE, FLAVOR

Obj = dict[str, Any]
NODES = 4


def resource_flavor() -> Obj:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
        "metadata": {"name": FLAVOR},
        "spec": {"nodeLabels": {controlplane.POOL_LABEL: controlplane.POOL},
                 "tolerations": [{"key": controlplane.GPU, "operator": "Exists",
                                  "effect": "NoSchedule"}]},
    }  # fmt: skip


def cluster_queue() -> Obj:
    """All of the four nodes' capacity, as quota."""
    node = controlplane.node(0)["status"]["capacity"]
    quota = {"cpu": str(int(node["cpu"]) * NODES),
             "memory": f"{int(node['memory'].removesuffix('Gi')) * NODES}Gi",
             "pods": str(int(node["pods"]) * NODES),
             controlplane.GPU: str(int(node[controlplane.GPU]) * NODES)}  # fmt: skip
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
        "metadata": {"name": CLUSTER_QUEUE},
        "spec": {"namespaceSelector": {}, "resourceGroups": [{
            "coveredResources": list(quota),
            "flavors": [{"name": FLAVOR, "resources": [
                {"name": name, "nominalQuota": value} for name, value in quota.items()]}],
        }]},
    }  # fmt: skip


def probe_appwrapper() -> Obj:
    """An AppWrapper wrapping a batch Job: Kueue's and the AppWrapper controller's webhooks
    judge it, autowrap's (Volcano Jobs and Pods only) do not."""
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "probe"},
           "spec": {"template": {"spec": {"restartPolicy": "Never",
                                          "containers": [{"name": "c", "image": "busybox"}]}}}}  # fmt: skip
    return {"apiVersion": "workload.codeflare.dev/v1beta2", "kind": "AppWrapper",
            "metadata": {"name": "readiness-probe", "namespace": "default"},
            "spec": {"components": [{"template": job}]}}  # fmt: skip


def probe_vcjob() -> Obj:
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
        "metadata": {"name": "readiness-probe", "namespace": "default"},
        "spec": {"minAvailable": 1, "schedulerName": "volcano", "tasks": [{
            "name": "task", "replicas": 1,
            "template": {"spec": {"restartPolicy": "Never",
                                  "containers": [{"name": "c", "image": "busybox"}]}}}]},
    }  # fmt: skip
