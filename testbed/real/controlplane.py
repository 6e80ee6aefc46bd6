"""The Kubernetes half of the session: etcd, kube-apiserver, kube-controller-manager,
kube-scheduler and KWOK, their command lines and the nodes KWOK plays.

The apiserver runs as a hardened cluster runs it (Node,RBAC authorization,
OwnerReferencesPermissionEnforcement, ServiceAccount tokens from a signing key), and the
controller-manager with ``--use-service-account-credentials``, so every controller writes as its
own ServiceAccount: the identities autowrap's webhooks and admission policies reason about are
the real ones. The node-lifecycle controller stays on: only it lifts the
``node.kubernetes.io/not-ready`` taint that admission puts on every new Node. KWOK stands in for
the kubelets of nodes annotated ``kwok.x-k8s.io/node: fake``: it initializes them, renews their
Leases and marks scheduled pods Running; it never completes a pod (no ``pod-complete`` stage,
which would end every pod owned by any kind named ``Job``, Volcano's included, at once).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

Obj = dict[str, Any]
SERVICE_CIDR = "10.96.0.0/16"
POD_CIDR = "10.244.0.0/16"
ISSUER = "https://kubernetes.default.svc.cluster.local"
APISERVER_NAMES = ("kubernetes", "kubernetes.default", "kubernetes.default.svc",
                   "kubernetes.default.svc.cluster.local", "localhost")  # fmt: skip
APISERVER_IPS = ("127.0.0.1", "10.96.0.1")
# Cloud and IPAM controllers have nothing to do without a cloud or pod networking.
CONTROLLERS = ("*,-node-ipam-controller,-cloud-node-lifecycle-controller,-service-lb-controller,"
               "-node-route-controller")  # fmt: skip
KWOK_STAGES = (
    "kustomize/stage/node/fast/node-initialize.yaml",
    "kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
    "kustomize/stage/pod/fast/pod-ready.yaml",
    "kustomize/stage/pod/fast/pod-delete.yaml",
)
NODE_ANNOTATION = "kwok.x-k8s.io/node"
# What kwokctl and the kubelet use: renewed every quarter of it.
NODE_LEASE_SECONDS = 40
GPU = "nvidia.com/gpu"
POOL_LABEL = "cloud.example/pool"
POOL = "a100"


@dataclass(frozen=True)
class Pki:
    """Where the apiserver's and the controllers' files are."""

    ca: Path
    ca_key: Path
    serving_cert: Path
    serving_key: Path
    sa_key: Path
    sa_pub: Path


def etcd(binary: Path, data: Path, client: int, peer: int) -> list[str]:
    return [
        str(binary), "--name=testbed", f"--data-dir={data}",
        f"--listen-client-urls=http://127.0.0.1:{client}",
        f"--advertise-client-urls=http://127.0.0.1:{client}",
        f"--listen-peer-urls=http://127.0.0.1:{peer}",
        f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
        f"--initial-cluster=testbed=http://127.0.0.1:{peer}",
        # A test session's data is thrown away: no fsync, and a smaller log.
        "--unsafe-no-fsync", "--log-level=warn",
    ]  # fmt: skip


def apiserver(binary: Path, pki: Pki, etcd_port: int, port: int) -> list[str]:
    return [
        str(binary), f"--etcd-servers=http://127.0.0.1:{etcd_port}",
        "--bind-address=127.0.0.1", f"--secure-port={port}",
        "--advertise-address=127.0.0.1", "--endpoint-reconciler-type=none",
        f"--tls-cert-file={pki.serving_cert}", f"--tls-private-key-file={pki.serving_key}",
        f"--client-ca-file={pki.ca}",
        "--authorization-mode=Node,RBAC",
        "--enable-admission-plugins=OwnerReferencesPermissionEnforcement",
        f"--service-account-issuer={ISSUER}", f"--service-account-key-file={pki.sa_pub}",
        f"--service-account-signing-key-file={pki.sa_key}",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        "--allow-privileged=true", "--profiling=false",
    ]  # fmt: skip


def controller_manager(
    binary: Path, pki: Pki, kubeconfig: Path, port: int, certs: Path
) -> list[str]:
    return [
        str(binary), f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}", f"--authorization-kubeconfig={kubeconfig}",
        "--bind-address=127.0.0.1", f"--secure-port={port}", f"--cert-dir={certs}",
        "--leader-elect=false", "--use-service-account-credentials",
        f"--service-account-private-key-file={pki.sa_key}", f"--root-ca-file={pki.ca}",
        f"--cluster-signing-cert-file={pki.ca}", f"--cluster-signing-key-file={pki.ca_key}",
        f"--controllers={CONTROLLERS}",
    ]  # fmt: skip


def scheduler(binary: Path, kubeconfig: Path, port: int, certs: Path) -> list[str]:
    return [
        str(binary), f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}", f"--authorization-kubeconfig={kubeconfig}",
        "--bind-address=127.0.0.1", f"--secure-port={port}", f"--cert-dir={certs}",
        "--leader-elect=false",
    ]  # fmt: skip


def kwok_stages(source: Path, out: Path) -> Path:
    """The stages the standalone KWOK binary runs (it ships none), from its module tree."""
    out.write_text("\n---\n".join((source / stage).read_text().strip() for stage in KWOK_STAGES)
                   + "\n")  # fmt: skip
    return out


def kwok(binary: Path, kubeconfig: Path, stages: Path) -> list[str]:
    return [
        str(binary), f"--kubeconfig={kubeconfig}", f"--config={stages}",
        "--manage-all-nodes=false",
        f"--manage-nodes-with-annotation-selector={NODE_ANNOTATION}=fake",
        f"--cidr={POD_CIDR}",
        # A kubelet renews its node's Lease in kube-node-lease; the heartbeat-with-lease stage
        # posts node status only every 10 to 20 minutes and counts on that Lease. Without it
        # the node-lifecycle controller finds the nodes silent after its grace period, sets
        # every pod there Ready=False (which nothing sets back: the pod-ready stage only reads
        # Pending pods) and taints the nodes for eviction.
        f"--node-lease-duration-seconds={NODE_LEASE_SECONDS}",
    ]  # fmt: skip


def node(index: int, gpus: int = 8) -> Obj:
    """A KWOK node with ``gpus`` GPUs, in the ResourceFlavor's pool, two nodes per zone."""
    name = f"kwok-node-{index}"
    capacity = {"cpu": "32", "memory": "256Gi", "pods": "140", GPU: str(gpus)}
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {NODE_ANNOTATION: "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {"type": "kwok", "kubernetes.io/hostname": name,
                       "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
                       "topology.kubernetes.io/zone": f"zone-{index // 2}", POOL_LABEL: POOL},
        },
        "status": {"capacity": capacity, "allocatable": dict(capacity)},
    }  # fmt: skip


def node_ready(obj: Obj) -> bool:
    """Ready, and without the taint that keeps pods off a node not yet seen Ready."""
    conditions = (obj.get("status") or {}).get("conditions") or []
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
    taints = (obj.get("spec") or {}).get("taints") or []
    return ready and not any(t.get("key") == "node.kubernetes.io/not-ready" for t in taints)
