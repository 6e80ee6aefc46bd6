"""What an install leaves in a real cluster beyond autowrap's running process, for the fake one.

A real cluster that runs autowrap also holds what ``kubectl apply`` of the release stored (the
webhook configurations with their caBundle, the ValidatingAdmissionPolicies and their bindings,
the Service and its EndpointSlice, the policies ConfigMap, the ServiceAccount's RBAC) and what
the other components installed: Kueue's ``kueue-manager-config`` and Deployment, the AppWrapper
controller's Deployment and ``appwrapper-operator-config``, Volcano's Job CRD and webhook
configurations, the controllers' Deployments with the RBAC their installs bind to them, a
ClusterQueue and its ResourceFlavor. ``autowrap doctor`` reads all of them;
:func:`install` stores them in a :class:`FakeCluster` the way those installs would, and
:func:`grant_rbac` holds autowrap's ServiceAccount to what the stored ClusterRoles, Roles and
bindings grant (RBAC: allowed when a rule allows, denied otherwise; k8s.io/kubernetes
plugin/pkg/auth/authorizer/rbac/rbac.go RulesAllow, over the stored objects as the authorizer's
listers read them), so its requests and its SubjectAccessReviews get what a real cluster would
answer, and :func:`revoke` or an operator's edit of the stored ClusterRole changes both.

Kueue's manager config is its release's (kueue config/components/manager/
controller_manager_config.yaml, integrations.frameworks with workload.codeflare.dev/appwrapper);
the AppWrapper config is its defaults (appwrapper.md §4: userRBACAdmissionCheck true,
schedulerName empty); the Volcano names are its Helm chart's (volcano.md §2).
"""

from __future__ import annotations

import base64
import copy
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from testbed.cluster import rbac as authz
from testbed.cluster.cluster import FakeCluster
from testbed.cluster.resources import (
    CLUSTERQUEUES,
    RESOURCEFLAVORS,
    WEBHOOK_CONFIGURATIONS,
    Resource,
    find,
)
from testbed.schemas import CRD_DIR

Obj = dict[str, Any]
ADMISSION = "admissionregistration.k8s.io"
DEPLOYMENTS = Resource("apps", "v1", "deployments", "Deployment", status_subresource=True,
                       singular="deployment", short_names=("deploy",))  # fmt: skip
ENDPOINT_SLICES = Resource("discovery.k8s.io", "v1", "endpointslices", "EndpointSlice",
                           singular="endpointslice")  # fmt: skip
CRDS = Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions",
                "CustomResourceDefinition", namespaced=False, status_subresource=True,
                singular="customresourcedefinition", short_names=("crd", "crds"))  # fmt: skip
ADMISSION_POLICIES = Resource(ADMISSION, "v1", "validatingadmissionpolicies",
                              "ValidatingAdmissionPolicy", namespaced=False,
                              status_subresource=True,
                              singular="validatingadmissionpolicy")  # fmt: skip
ADMISSION_POLICY_BINDINGS = Resource(ADMISSION, "v1", "validatingadmissionpolicybindings",
                                     "ValidatingAdmissionPolicyBinding", namespaced=False,
                                     singular="validatingadmissionpolicybinding")  # fmt: skip
STATEFULSETS = Resource("apps", "v1", "statefulsets", "StatefulSet", status_subresource=True,
                        singular="statefulset", short_names=("sts",))  # fmt: skip
RBAC = authz.RBAC_GROUP
CLUSTER_ROLES, ROLES, CLUSTER_ROLE_BINDINGS, ROLE_BINDINGS = authz.RESOURCES
EXTRA = (DEPLOYMENTS, STATEFULSETS, ENDPOINT_SLICES, CRDS, ADMISSION_POLICIES,
         ADMISSION_POLICY_BINDINGS, CLUSTER_ROLES, ROLES, CLUSTER_ROLE_BINDINGS, ROLE_BINDINGS)  # fmt: skip
# What `kubectl apply` of autowrap's release stores that doctor reads.
RELEASE_KINDS = frozenset({
    "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration", "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding", "Service", "Deployment", "ClusterRole", "Role",
    "ClusterRoleBinding", "RoleBinding",
})  # fmt: skip

KUEUE_IMAGE = "registry.k8s.io/kueue/kueue:v0.19.0"
APPWRAPPER_IMAGE = "quay.io/ibm/appwrapper:v1.2.1"
KUEUE_CONFIG: Obj = {
    "apiVersion": "config.kueue.x-k8s.io/v1beta1",
    "kind": "Configuration",
    "health": {"healthProbeBindAddress": ":8081"},
    "webhook": {"port": 9443},
    "leaderElection": {"leaderElect": True, "resourceName": "c1f6bfd2.kueue.x-k8s.io"},
    "integrations": {
        "frameworks": [
            "batch/job",
            "kubeflow.org/mpijob",
            "ray.io/rayjob",
            "jobset.x-k8s.io/jobset",
            "kubeflow.org/pytorchjob",
            "workload.codeflare.dev/appwrapper",
        ]
    },  # fmt: skip
}
APPWRAPPER_CONFIG: Obj = {"appwrapper": {"userRBACAdmissionCheck": True, "schedulerName": "",
                                         "defaultQueueName": ""}}  # fmt: skip


def deployment(
    namespace: str, name: str, image: str, *, ready: int = 1, service_account: str = ""
) -> Obj:
    """A Deployment whose pods run as ``service_account`` (by default one named like it).
    Both fields name it, as the apiserver returns a pod spec (pkg/apis/core/v1/conversion.go
    Convert_core_PodSpec_To_v1_PodSpec writes the deprecated serviceAccount too)."""
    account = service_account or name
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"replicas": ready or 1, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}},
                              "spec": {"serviceAccountName": account, "serviceAccount": account,
                                       "containers": [{"name": "manager", "image": image,
                                                       "args": ["--zap-log-level=2"]}]}}},
        "status": {"replicas": ready, "readyReplicas": ready},
    }  # fmt: skip


def cluster_role(name: str, rules: list[Obj]) -> Obj:
    return {"apiVersion": f"{RBAC}/v1", "kind": "ClusterRole", "metadata": {"name": name},
            "rules": rules}  # fmt: skip


def cluster_role_binding(name: str, role: str, namespace: str, account: str) -> Obj:
    """Binds ClusterRole ``role`` to ServiceAccount ``namespace/account``, cluster-wide."""
    return {"apiVersion": f"{RBAC}/v1", "kind": "ClusterRoleBinding", "metadata": {"name": name},
            "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": account,
                          "namespace": namespace}]}  # fmt: skip


def volcano_release(release: str = "volcano", namespace: str = "volcano-system") -> list[Obj]:
    """What Volcano's Helm chart installs for its job controller and its scheduler
    (installer/helm/chart/volcano/templates/controllers.yaml, scheduler.yaml): for each, a
    Deployment whose pods run as ServiceAccount ``<release>-<component>``, a ClusterRole and
    its ClusterRoleBinding, all named for the Helm release. The controllers may create pods;
    the scheduler only binds them (``pods/binding``)."""
    out = []
    for component, pods, binding in (
        ("controllers", ["create", "get", "list", "watch", "update", "bind", "delete", "patch"],
         []),
        ("scheduler", ["get", "list", "watch", "patch", "delete"],
         [{"apiGroups": [""], "resources": ["pods/binding"], "verbs": ["create"]}]),
    ):  # fmt: skip
        name = f"{release}-{component}"
        image = f"volcanosh/vc-{'controller-manager' if component == 'controllers' else component}"
        out += [deployment(namespace, name, f"{image}:v1.11.0"),
                cluster_role(name, [{"apiGroups": [""], "resources": ["pods"], "verbs": pods},
                                    *binding]),
                cluster_role_binding(f"{name}-role", name, namespace, name)]  # fmt: skip
    return out


def config_map(namespace: str, name: str, data: Mapping[str, str]) -> Obj:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace}, "data": dict(data)}  # fmt: skip


def kueue_config_map(config: Mapping[str, Any] = KUEUE_CONFIG) -> Obj:
    return config_map("kueue-system", "kueue-manager-config",
                      {"controller_manager_config.yaml": yaml.safe_dump(dict(config))})  # fmt: skip


def appwrapper_config_map(config: Mapping[str, Any] = APPWRAPPER_CONFIG) -> Obj:
    return config_map("appwrapper-system", "appwrapper-operator-config",
                      {"config.yaml": yaml.safe_dump(dict(config))})  # fmt: skip


def endpoint_slice(namespace: str, service: str, address: str, port: int, pod: str) -> Obj:
    """The EndpointSlice the endpointslice controller writes for one ready pod."""
    return {
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": f"{service}-abcde", "namespace": namespace,
                     "labels": {"kubernetes.io/service-name": service}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": [address], "conditions": {"ready": True},
                       "targetRef": {"kind": "Pod", "name": pod, "namespace": namespace}}],
        "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
    }  # fmt: skip


def _crd(file: str) -> Obj:
    loaded: Obj = yaml.safe_load((CRD_DIR / file).read_text())
    return loaded


def _resource_for(cluster: FakeCluster, obj: Mapping[str, Any]) -> Resource:
    res = find(cluster.store.resources, str(obj.get("apiVersion")), str(obj.get("kind")))
    if res is None:
        raise ValueError(f"the fake cluster does not serve {obj.get('kind')}")
    return res


def put(cluster: FakeCluster, obj: Mapping[str, Any]) -> Obj:
    """Store ``obj`` as ``kubectl apply`` would leave it (created, or replaced)."""
    res = _resource_for(cluster, obj)
    stored = cluster.store.apply(res, obj)
    if res.status_subresource and "status" in obj:  # what the object's controller writes
        stored = cluster.store.update(res, {**stored, "status": copy.deepcopy(obj["status"])},
                                      subresource="status")  # fmt: skip
    return stored


def remove(cluster: FakeCluster, obj: Mapping[str, Any]) -> None:
    """Delete ``obj`` as ``kubectl delete -f`` would (an uninstall of what :func:`put` stored)."""
    res = _resource_for(cluster, obj)
    meta = obj.get("metadata") or {}
    cluster.store.delete(res, meta.get("namespace") if res.namespaced else None, meta["name"])


def install(
    cluster: FakeCluster,
    rendered: Iterable[Mapping[str, Any]],
    *,
    ca_bundle: str,
    serving_port: int,
    policy_dir: Path,
    flavors: Mapping[str, Mapping[str, Any]],
    cluster_queue: str = "cq",
) -> None:
    """Store what the release (``rendered``) and the other components' installs leave in a
    cluster: autowrap's webhook configurations (with ``ca_bundle``), admission policies, Service,
    its EndpointSlice (the server on 127.0.0.1:``serving_port``), the policies ConfigMap (from
    ``policy_dir``), Kueue's, the AppWrapper controller's and Volcano's objects, and a
    ClusterQueue with ``flavors``."""
    cluster.store.serve(*EXTRA)
    for ns in ("kueue-system", "appwrapper-system", "volcano-system"):
        cluster.add_namespace(ns)
    apply_release(cluster, rendered, ca_bundle=ca_bundle)
    service = next(o for o in rendered if o.get("kind") == "Service")
    ns, name = service["metadata"]["namespace"], service["metadata"]["name"]
    put(cluster, endpoint_slice(ns, name, "127.0.0.1", serving_port, f"{name}-0"))
    policies = {p.name: p.read_text() for p in sorted(policy_dir.iterdir())
                if p.suffix in (".yaml", ".yml")}  # fmt: skip
    put(cluster, config_map(ns, "autowrap-policies", policies))
    put(cluster, kueue_config_map())
    for obj in (deployment("kueue-system", "kueue-controller-manager", KUEUE_IMAGE),
                # kueue config/components/rbac/role.yaml (namePrefix kueue-): pods, but no create.
                cluster_role("kueue-manager-role", [
                    {"apiGroups": [""], "resources": ["pods"],
                     "verbs": ["delete", "get", "list", "patch", "update", "watch"]}]),
                cluster_role_binding("kueue-manager-rolebinding", "kueue-manager-role",
                                     "kueue-system", "kueue-controller-manager"),
                appwrapper_config_map(),
                deployment("appwrapper-system", "appwrapper-controller-manager", APPWRAPPER_IMAGE),
                # appwrapper config/rbac/role.yaml (namePrefix appwrapper-), appwrapper.md §RBAC.
                cluster_role("appwrapper-manager-role", [
                    {"apiGroups": [""], "resources": ["pods", "services"],
                     "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"]}]),
                cluster_role_binding("appwrapper-manager-rolebinding", "appwrapper-manager-role",
                                     "appwrapper-system", "appwrapper-controller-manager"),
                *volcano_release()):  # fmt: skip
        put(cluster, obj)
    put(cluster, _crd("batch.volcano.sh_jobs.yaml"))
    for hook, res in (("volcano-admission-service-jobs-mutate", WEBHOOK_CONFIGURATIONS[0]),
                      ("volcano-admission-service-jobs-validate", WEBHOOK_CONFIGURATIONS[1])):  # fmt: skip
        put(cluster, {"apiVersion": res.api_version, "kind": res.kind,
                      "metadata": {"name": hook}, "webhooks": []})  # fmt: skip
    for flavor, spec in flavors.items():
        put(cluster, {"apiVersion": RESOURCEFLAVORS.api_version, "kind": "ResourceFlavor",
                      "metadata": {"name": flavor}, "spec": dict(spec)})  # fmt: skip
    put(cluster, {"apiVersion": CLUSTERQUEUES.api_version, "kind": "ClusterQueue",
                  "metadata": {"name": cluster_queue},
                  "spec": {"namespaceSelector": {}, "resourceGroups": [
                      {"coveredResources": ["cpu", "memory"],
                       "flavors": [{"name": f, "resources": [
                           {"name": "cpu", "nominalQuota": "100"},
                           {"name": "memory", "nominalQuota": "100Gi"}]} for f in flavors]}]}})  # fmt: skip


def apply_release(
    cluster: FakeCluster, rendered: Iterable[Mapping[str, Any]], *, ca_bundle: str
) -> None:
    """Store what ``kubectl apply`` of a rendered release (``deploy/`` or an overlay of it)
    leaves that doctor reads, each webhook with ``ca_bundle``; applied again, it replaces them.
    The RBAC objects are stored as the cluster holds them, and the fake authorizer reads them
    there; whose own requests it holds to RBAC is :func:`grant_rbac`'s."""
    for obj in rendered:
        if obj.get("kind") not in RELEASE_KINDS:
            continue
        body = copy.deepcopy(dict(obj))
        for hook in body.get("webhooks") or []:
            hook.setdefault("clientConfig", {})["caBundle"] = ca_bundle
        if body["kind"] == "Deployment":  # one replica serves in the testbed
            body["spec"]["replicas"] = 1
            body["status"] = {"replicas": 1, "readyReplicas": 1}
        put(cluster, body)


def grant_rbac(cluster: FakeCluster, rendered: Iterable[Mapping[str, Any]], user: str) -> None:
    """Store the rendered ClusterRoles, Roles and their bindings as ``kubectl apply`` does
    (replacing any edited since: the release re-applied), drop the explicit access rules a test
    gave ``user`` (a ServiceAccount's username), and hold its requests to RBAC, which reads
    what is stored. Roles and bindings the release does not name stay, as ``kubectl apply``
    without ``--prune`` leaves them."""
    cluster.access_rules[:] = [r for r in cluster.access_rules if r.user != user]
    cluster.enforce_rbac(authz.Rbac(rendered, bootstrap=False), user)


def revoke(cluster: FakeCluster, user: str, verb: str, group: str, resource: str) -> None:
    """Take ``verb`` on ``group``/``resource`` out of every stored ClusterRole and Role bound
    to ``user``, each edited through the store as ``kubectl edit`` replaces it (read, change,
    write back with its resourceVersion); the next request is judged by the edit."""
    assert user in cluster.under_rbac and cluster.rbac is not None, "grant_rbac first"
    edited = 0
    for role in cluster.rbac.roles_of(user):
        changed = authz.role_without(role, verb, group, resource)
        if changed != role:
            cluster.store.update(_resource_for(cluster, changed), changed)
            edited += 1
    assert edited, f"no role bound to {user} grants {verb} on {resource!r} in group {group!r}"


def ca_bundle_of(pem: bytes) -> str:
    return base64.b64encode(pem).decode()
