"""The reads behind ``autowrap doctor``: with the user's own kubeconfig, as ``autowrap status``.

Everything :class:`webhook.cli.doctor.Facts` holds is read here, through ``webhook.shell.kube``
(``DOCTOR_CALLS`` lists the calls) and, for the certificate each replica presents and its
``/readyz``, ``webhook.shell.probe``. A read that is refused (403) or fails is recorded as
unreadable with the reason, so the checks say what they could not see; only a cluster that
does not answer at all stops the run (:class:`Unreachable`, exit code 2).
"""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

from webhook.cli import doctor
from webhook.core import policy, ports
from webhook.model import names, objects
from webhook.model.objects import as_list, as_map
from webhook.shell import kube, policyfiles, probe
from webhook.shell.kube import Api, Kind

Obj = Mapping[str, Any]

TIMEOUT = 15.0
PROBE_TIMEOUT = 5.0
T = TypeVar("T")


class Unreachable(Exception):
    """The API server did not answer, or refused the credentials."""


RBAC_GROUP = "rbac.authorization.k8s.io"
STATEFULSETS = Kind("apps", "v1", "statefulsets", "StatefulSet")
CLUSTER_ROLES = Kind(RBAC_GROUP, "v1", "clusterroles", "ClusterRole", namespaced=False)
ROLES = Kind(RBAC_GROUP, "v1", "roles", "Role")
CLUSTER_ROLE_BINDINGS = Kind(RBAC_GROUP, "v1", "clusterrolebindings", "ClusterRoleBinding",
                             namespaced=False)  # fmt: skip
ROLE_BINDINGS = Kind(RBAC_GROUP, "v1", "rolebindings", "RoleBinding")
NETWORK_POLICIES = Kind("networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy")


def service_account(namespace: str) -> tuple[str, tuple[str, ...]]:
    """autowrap's ServiceAccount as the authorizer sees it: the user and its groups."""
    return (
        f"system:serviceaccount:{namespace}:{names.SERVICE_NAME}",
        ("system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"),
    )


def needed_calls(namespace: str, *, self_managed: bool) -> list[tuple[str, str, str, str]]:
    """Every (group, resource, verb, namespace) autowrap's code calls; the Lease and the
    self-managed certificate's Secret only in its own namespace (a Role there), everything else
    cluster-wide ("")."""
    calls = [*kube.RBAC, *(doctor.SELF_MANAGED_CALLS if self_managed else ())]
    return [
        (g, r, v, namespace if r in ("leases", "secrets") else "")
        for g, r, v in dict.fromkeys(calls)
    ]


class Reader:
    """Reads one fact at a time, keeping why a read failed instead of failing the run."""

    def __init__(self, api: Api) -> None:
        self.api = api
        self.unreadable: dict[str, str] = {}

    async def attempt(self, key: str, read: Callable[[], Awaitable[T]], default: T) -> T:
        try:
            return await read()
        except ports.ApiFailure as exc:
            code = f"HTTP {exc.status}" if exc.status else "no answer"
            self.unreadable[key] = f"{code}: {exc.message}".rstrip(": ")
            return default

    async def get(self, key: str, kind: Kind, namespace: str | None, name: str) -> Obj | None:
        return await self.attempt(
            key, lambda: self.api.get(kind, namespace, name, timeout=TIMEOUT), None
        )

    async def items(
        self, key: str, kind: Kind, namespace: str | None = None, labels: str = ""
    ) -> list[Obj]:
        async def read() -> list[Obj]:
            listed = await self.api.list(kind, namespace, timeout=TIMEOUT, labels=labels)
            return [as_map(i) for i in as_list(listed.get("items"))]

        return await self.attempt(key, read, [])


async def _replicas(slices: list[Obj], server_name: str) -> list[doctor.Replica]:
    """Probe every ready endpoint of the Service's EndpointSlices, on the serving port."""
    targets = []
    for endpoint_slice in slices:
        ports_ = [as_map(p) for p in as_list(endpoint_slice.get("ports"))]
        port = next((p for p in ports_ if p.get("name") == "https"), ports_[0] if ports_ else {})
        number = int(port.get("port") or names.SERVING_PORT)
        for endpoint in as_list(endpoint_slice.get("endpoints")):
            endpoint = as_map(endpoint)
            if as_map(endpoint.get("conditions")).get("ready") is False:
                continue
            pod = str(as_map(endpoint.get("targetRef")).get("name") or "")
            for address in as_list(endpoint.get("addresses"))[:1]:
                targets.append((str(address), number, pod))
    probed = await asyncio.gather(
        *(probe.replica(a, p, server_name, timeout=PROBE_TIMEOUT) for a, p, _ in targets)
    )
    return [
        doctor.Replica(a, p, pod, r.certificate, r.status, r.body, r.error)
        for (a, p, pod), r in zip(targets, probed, strict=True)
    ]


async def _access(
    reader: Reader, namespace: str, needed: list[tuple[str, str, str, str]]
) -> dict[tuple[str, str, str, str], bool]:
    user, groups = service_account(namespace)
    wanted = list(dict.fromkeys([*needed, *doctor.FORBIDDEN]))

    async def ask(group: str, resource: str, verb: str, ns: str) -> bool:
        attributes = {"group": group, "resource": resource.split("/")[0], "verb": verb}
        if "/" in resource:
            attributes["subresource"] = resource.split("/", 1)[1]
        if ns:
            attributes["namespace"] = ns
        if resource in doctor.NAMED and verb in ("get", "update", "patch"):
            attributes["name"] = doctor.NAMED[resource]
        return await reader.api.may(user, groups, attributes, timeout=TIMEOUT)

    async def all_of() -> dict[tuple[str, str, str, str], bool]:
        answers = await asyncio.gather(*(ask(*w) for w in wanted))
        return dict(zip(wanted, answers, strict=True))

    return await reader.attempt("access", all_of, {})


async def _owner_references(
    reader: Reader, namespace: str, access: Mapping[tuple[str, str, str, str], bool]
) -> str:
    """Whether the cluster would refuse the controller reference autowrap sets on what it
    adopts: "granted" (autowrap may delete Volcano Jobs and Pods, the component's grant),
    "enforced" or "not enforced" (OwnerReferencesPermissionEnforcement), or why it could not
    be told. The plugin is recognised by what it asks of a create (gc_admission.go Validate):
    a create may name any owner, but ``blockOwnerDeletion`` needs ``update`` on the owner's
    finalizers, which autowrap's ServiceAccount has on nothing. So a server-side dry run of an
    Event blocking its owner's deletion, made as autowrap, is refused exactly where the plugin
    is on; nothing is stored either way."""
    if all(
        access.get((g, r, "delete", "")) for g, r in (("batch.volcano.sh", "jobs"), ("", "pods"))
    ):
        return "granted"
    user, _ = service_account(namespace)
    event = {"apiVersion": "v1", "kind": "Event",
             "metadata": {"generateName": "autowrap-doctor-", "namespace": namespace,
                          "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment",
                                               "name": names.SERVICE_NAME,
                                               "uid": "00000000-0000-0000-0000-000000000000",
                                               "blockOwnerDeletion": True}]},
             "involvedObject": {"kind": "Deployment", "namespace": namespace,
                                "name": names.SERVICE_NAME},
             "reason": "DoctorProbe", "message": "autowrap doctor: a dry run, never stored",
             "type": "Normal"}  # fmt: skip
    try:
        await reader.api.impersonating(user).create(
            kube.EVENTS, namespace, event, timeout=TIMEOUT, dry_run=True
        )
    except ports.ApiFailure as exc:
        if exc.status == 403 and "cannot set blockOwnerDeletion" in exc.message:
            return "enforced"
        code = f"HTTP {exc.status}" if exc.status else "no answer"
        return f"unknown: {code}: {exc.message}"
    return "not enforced"


async def _all_of(reader: Reader, key: str, *kinds: Kind) -> list[Obj]:
    """Every object of ``kinds`` in every namespace, each stamped with its kind (the items of
    a LIST carry none)."""
    return [{**item, "kind": kind.kind}
            for kind in kinds for item in await reader.items(key, kind)]  # fmt: skip


def _policies(configmap: Obj | None) -> tuple[policy.PolicySet | None, str]:
    if configmap is None:
        return None, ""
    data = {str(k): str(v) for k, v in as_map(configmap.get("data")).items()}
    try:
        return policy.build(policyfiles.from_config_map(data)), ""
    except policy.PolicyError as exc:
        return None, f"ConfigMap {doctor.POLICIES_CONFIGMAP}: {exc}"


async def read(api: Api, *, install_namespace: str, only_namespace: str = "") -> doctor.Facts:
    """Everything the checks judge. Raises :class:`Unreachable` when the API does not answer."""
    reader = Reader(api)
    try:
        version = await api.server_version(timeout=TIMEOUT)
        groups = await api.served_groups(timeout=TIMEOUT)
    except ports.ApiFailure as exc:
        if exc.status in (None, 401):
            raise Unreachable(f"{exc.call}: {exc.message}") from None
        raise Unreachable(f"{exc.call}: HTTP {exc.status} {exc.message}") from None
    ns = install_namespace
    kueue_version = (groups.get(kube.KUEUE_GROUP) or ("v1beta1",))[0]
    local_queues_kind = Kind(kube.KUEUE_GROUP, kueue_version, "localqueues", "LocalQueue")
    cluster_queues_kind = Kind(kube.KUEUE_GROUP, kueue_version, "clusterqueues", "ClusterQueue",
                               namespaced=False)  # fmt: skip
    flavors_kind = Kind(kube.KUEUE_GROUP, kueue_version, "resourceflavors", "ResourceFlavor",
                        namespaced=False)  # fmt: skip
    mutating = await reader.get(doctor.MUTATING, kube.MUTATING_CONFIGURATIONS, None,
                                doctor.MUTATING)  # fmt: skip
    validating = await reader.get(doctor.VALIDATING, kube.VALIDATING_CONFIGURATIONS, None,
                                  doctor.VALIDATING)  # fmt: skip
    volcano_hooks: dict[str, Obj | None] = {}
    for hook_name, kind in zip(doctor.VOLCANO_WEBHOOKS, (kube.MUTATING_CONFIGURATIONS,
                                                         kube.VALIDATING_CONFIGURATIONS),
                               strict=True):  # fmt: skip
        volcano_hooks[hook_name] = await reader.get("volcano_webhooks", kind, None, hook_name)
    admission_policies = {
        n: await reader.get("admission_policies", kube.ADMISSION_POLICIES, None, n)
        for n in doctor.ADMISSION_POLICIES
    }
    bindings = await reader.items("admission_policies", kube.ADMISSION_POLICY_BINDINGS)
    certificate = None
    injected = [
        objects.annotations_of(c).get(doctor.CERT_MANAGER_INJECT)
        for c in (mutating, validating)
        if c
    ]
    source = next((i for i in injected if i and "/" in i), None)
    if source:
        cert_ns, cert_name = source.split("/", 1)
        certificate = await reader.get("certificate", kube.CERTIFICATES, cert_ns, cert_name)
    deployment = await reader.get("deployment", kube.DEPLOYMENTS, ns, names.SERVICE_NAME)
    self_managed = doctor.SELF_MANAGED_FLAG in doctor.container_args(deployment)
    needed = needed_calls(ns, self_managed=self_managed)
    service = await reader.get("service", kube.SERVICES, ns, names.SERVICE_NAME)
    slices = await reader.items("endpoints", kube.ENDPOINT_SLICES, ns,
                                labels=f"kubernetes.io/service-name={names.SERVICE_NAME}")  # fmt: skip
    replicas = await _replicas(slices, f"{names.SERVICE_NAME}.{ns}.svc")
    policies_map = await reader.get("policies", kube.CONFIGMAPS, ns, doctor.POLICIES_CONFIGMAP)
    policy_set, policy_error = _policies(policies_map)
    namespaces = await reader.items("namespaces", kube.NAMESPACES)
    local_queues = (
        await reader.items("local_queues", local_queues_kind) if kube.KUEUE_GROUP in groups else []
    )
    cluster_queues: dict[str, Obj | None] = {}
    flavors: dict[str, Obj | None] = {}
    for lq in local_queues:
        cq_name = str(as_map(lq.get("spec")).get("clusterQueue") or "")
        if cq_name and cq_name not in cluster_queues:
            cq = await reader.get(f"clusterqueue/{cq_name}", cluster_queues_kind, None, cq_name)
            cluster_queues[cq_name] = cq
            for group in as_list(as_map(as_map(cq).get("spec")).get("resourceGroups")):
                for flavor in as_list(as_map(group).get("flavors")):
                    fname = str(as_map(flavor).get("name") or "")
                    if fname and fname not in flavors:
                        flavors[fname] = await reader.get("flavors", flavors_kind, None, fname)
    access = await _access(reader, ns, needed)
    return doctor.Facts(
        install_namespace=ns,
        now=datetime.datetime.now(datetime.UTC),
        version=version,
        groups=groups,
        kueue_config=await reader.get(
            "kueue_config", kube.CONFIGMAPS, doctor.KUEUE_NAMESPACE, doctor.KUEUE_CONFIGMAP
        ),  # fmt: skip
        kueue_deployment=await reader.get(
            "kueue_deployment", kube.DEPLOYMENTS, doctor.KUEUE_NAMESPACE, doctor.KUEUE_DEPLOYMENT
        ),  # fmt: skip
        appwrapper_config=await reader.get(
            "appwrapper_config",
            kube.CONFIGMAPS,
            doctor.APPWRAPPER_NAMESPACE,
            doctor.APPWRAPPER_CONFIGMAP,
        ),  # fmt: skip
        appwrapper_deployment=await reader.get(
            "appwrapper_deployment",
            kube.DEPLOYMENTS,
            doctor.APPWRAPPER_NAMESPACE,
            doctor.APPWRAPPER_DEPLOYMENT,
        ),  # fmt: skip
        volcano_job_crd=await reader.get(
            "volcano_job_crd", kube.CRDS, None, "jobs.batch.volcano.sh"
        ),  # fmt: skip
        volcano_webhooks=volcano_hooks,
        network_policy=await reader.get(
            "network_policy", NETWORK_POLICIES, ns, doctor.NETWORK_POLICY
        ),  # fmt: skip
        mutating=mutating,
        validating=validating,
        admission_policies=admission_policies,
        policy_bindings=bindings,
        service=service,
        endpoint_slices=slices,
        replicas=replicas,
        lease=await reader.get("lease", kube.LEASES, ns, names.CONTROLLER_LEASE),
        certificate=certificate,
        deployment=deployment,
        needed=needed,
        access=access,
        owner_references=await _owner_references(reader, ns, access),
        workloads=await _all_of(reader, "workloads", kube.DEPLOYMENTS, STATEFULSETS),
        rbac_roles=await _all_of(reader, "rbac_objects", CLUSTER_ROLES, ROLES),
        rbac_bindings=await _all_of(reader, "rbac_objects", CLUSTER_ROLE_BINDINGS, ROLE_BINDINGS),
        policies=policy_set,
        policy_error=policy_error,
        namespaces=namespaces,
        local_queues=local_queues,
        cluster_queues=cluster_queues,
        flavors=flavors,
        only_namespace=only_namespace,
        unreadable=dict(reader.unreadable),
    )


def summary_of(facts: doctor.Facts) -> dict[str, Any]:
    """What was read, in brief, for ``-o json`` (the findings carry the judgement)."""
    return {
        "kubernetes": as_map(facts.version).get("gitVersion"),
        "groups": {
            g: list(v)
            for g, v in sorted(facts.groups.items())
            if g
            in (
                "kueue.x-k8s.io",
                names.APPWRAPPER_GROUP,
                "batch.volcano.sh",
                "scheduling.volcano.sh",
                "cert-manager.io",
            )
        },  # fmt: skip
        "unreadable": dict(facts.unreadable),
    }
