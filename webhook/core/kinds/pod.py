"""A bare ``v1`` Pod: one pod group of one replica, whose template is the Pod itself.

A Pod has no controller to name it on the network, so autowrap gives it ``hostname`` and
``subdomain`` and a headless Service of that subdomain, as a component of the same
AppWrapper: Kueue gates the Service with the Pod, and deleting the AppWrapper deletes both.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from webhook.core.workload import Dns, PodGroup
from webhook.model import dnsnames, names, objects
from webhook.model.fields import ROOT
from webhook.model.objects import Obj, as_map

SERVICE_LABEL = names.PREFIX + "service"


class PodKind:
    api_version = "v1"
    kind = "Pod"
    resource = "pods"
    queue_label_requests_wrap = False  # Kueue's own pod integration already reads it
    # Each sets a controller ownerReference (controller: true) on the Pods it creates:
    # ReplicaSet, StatefulSet, DaemonSet, Job: metav1.NewControllerRef in kubernetes
    #   pkg/controller/{replicaset/replica_set.go, statefulset/stateful_set_utils.go (newVersionedStatefulSetPod),
    #   daemon/daemon_controller.go, job/job_controller.go} via controller.PodControlInterface;
    # Node: the kubelet's mirror Pods (pkg/kubelet/pod/mirror_client.go, CreateMirrorPod);
    # Volcano Job: volcano pkg/controllers/job/job_controller_util.go (createJobPod,
    #   metav1.NewControllerRef);
    # AppWrapper: project-codeflare/appwrapper internal/controller/appwrapper/resource_management.go
    #   (controllerutil.SetControllerReference on each component);
    # Kueue-integrated kinds that create Pods themselves: Kubeflow training-operator
    #   (PyTorchJob, TFJob, MPIJob, XGBoostJob, PaddleJob, JAXJob: pkg/controller.v1/common/pod.go,
    #   NewControllerRef), KubeRay (RayCluster: ray-operator/controllers/ray/raycluster_controller.go,
    #   SetControllerReference), MPI operator v2beta1 (mpi-operator pkg/controller/mpi_job_controller.go).
    owner_kinds = frozenset({
        ("apps", "ReplicaSet"),
        ("apps", "StatefulSet"),
        ("apps", "DaemonSet"),
        ("batch", "Job"),
        ("", "Node"),
        ("batch.volcano.sh", "Job"),
        ("workload.codeflare.dev", "AppWrapper"),
        ("kubeflow.org", "PyTorchJob"),
        ("kubeflow.org", "TFJob"),
        ("kubeflow.org", "MPIJob"),
        ("kubeflow.org", "XGBoostJob"),
        ("kubeflow.org", "PaddleJob"),
        ("kubeflow.org", "JAXJob"),
        ("ray.io", "RayCluster"),
    })  # fmt: skip

    def pod_groups(self, obj: Mapping[str, Any]) -> list[PodGroup]:
        return [
            PodGroup(
                name=objects.name_of(obj) or "pod",
                replicas=1,
                path=ROOT,
                template_path=ROOT,
                template=obj,
                podset_path=None,
                pod_index_key=None,
            )
        ]

    def master_group(self, obj: Mapping[str, Any], groups: Sequence[PodGroup]) -> PodGroup | None:
        return groups[0] if groups else None

    def pod_name(self, obj: Mapping[str, Any], group: PodGroup, index: int) -> str:
        return _hostname(obj)

    def dns(self, obj: Obj, groups: Sequence[PodGroup], master: PodGroup, *, port: int) -> Dns:
        patched = dict(obj)
        spec = objects.own_map(patched, "spec")
        hostname = _hostname(obj)
        subdomain = spec.get("subdomain") or _service_name(hostname)
        spec.setdefault("hostname", hostname)
        spec.setdefault("subdomain", subdomain)
        pod_labels = objects.own_map(objects.own_map(patched, "metadata"), "labels")
        pod_labels.setdefault(SERVICE_LABEL, subdomain)
        service = {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": subdomain},
            "spec": {
                "clusterIP": "None",
                "publishNotReadyAddresses": True,
                "selector": {SERVICE_LABEL: pod_labels[SERVICE_LABEL]},
                "ports": [{"name": "master", "port": port, "targetPort": port, "protocol": "TCP"}],
            },
        }
        return Dns(master_addr=f"{spec['hostname']}.{subdomain}", patched=patched, extra=(service,))


def _hostname(obj: Mapping[str, Any]) -> str:
    spec = as_map(obj.get("spec"))
    given = spec.get("hostname")
    if isinstance(given, str) and given:
        return given
    metadata = as_map(obj.get("metadata"))
    base = objects.name_of(obj) or str(metadata.get("generateName") or "pod")
    return dnsnames.to_label(base, fallback="pod")


def _service_name(hostname: str) -> str:
    """A Service name must be a DNS-1035 label: it may not start with a digit."""
    return hostname if dnsnames.is_dns1035_label(hostname) else dnsnames.to_label(f"svc-{hostname}")
