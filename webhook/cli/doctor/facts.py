"""What ``webhook.cli.diagnose`` read for doctor (:class:`Facts`), the names it reads them by,
and the helpers every check shares to look into them: versions from image tags, a component's
YAML configuration, and the warning for an object that could not be read or is not there."""

from __future__ import annotations

import datetime
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

from webhook.cli.doctor.findings import WARN, Finding
from webhook.core.policy import PolicySet
from webhook.model import names
from webhook.model.objects import as_list, as_map

Obj = Mapping[str, Any]

# What the manifests in deploy/ install (tests/adopt/test_doctor.py holds these equal to the
# rendered release).
MUTATING = "autowrap-mutating"
VALIDATING = "autowrap-validating"
MUTATING_WEBHOOKS = (
    "appwrappers.mutate.autowrap.io", "pods.mutate.autowrap.io", "vcjobs.adopt.autowrap.io",
    "vcjobs.adopt-always.autowrap.io", "pods.adopt.autowrap.io", "pods.adopt-always.autowrap.io",
    "vcjobs.reapply.autowrap.io", "appwrappers.reapply.autowrap.io",
    "vcjobs.redirected.autowrap.io",
)  # fmt: skip
VALIDATING_WEBHOOKS = (
    "appwrappers.validate.autowrap.io", "vcjobs.wrap.autowrap.io",
    "vcjobs.wrap-always.autowrap.io", "pods.wrap.autowrap.io", "pods.wrap-always.autowrap.io",
    "policies.validate.autowrap.io",
)  # fmt: skip
ADMISSION_POLICIES = (
    "autowrap-admission-gate", "autowrap-adopted-job-size", "autowrap-requested-by",
    "autowrap-own-writes", "autowrap-wrapped-pods", "autowrap-install-namespace",
)  # fmt: skip
POLICIES_CONFIGMAP = "autowrap-policies"
# The webhooks whose namespaceSelectors decide which namespaces autowrap hears from.
WRAP_WEBHOOKS = ("vcjobs.adopt.autowrap.io", "vcjobs.adopt-always.autowrap.io",
                 "pods.adopt.autowrap.io", "pods.adopt-always.autowrap.io")  # fmt: skip
CERT_MANAGER_INJECT = "cert-manager.io/inject-ca-from"
SELF_MANAGED_FLAG = "--self-managed-certs"
SERVING_SECRET = "autowrap-serving-cert"
# What --self-managed-certs calls, each on one object by name (webhook/shell/kube.py
# CertificateStore; granted by deploy/overlays/self-managed/rbac.yaml).
SELF_MANAGED_CALLS = (
    ("", "secrets", "get"), ("", "secrets", "update"),
    ("admissionregistration.k8s.io", "mutatingwebhookconfigurations", "get"),
    ("admissionregistration.k8s.io", "mutatingwebhookconfigurations", "patch"),
    ("admissionregistration.k8s.io", "validatingwebhookconfigurations", "get"),
    ("admissionregistration.k8s.io", "validatingwebhookconfigurations", "patch"),
)  # fmt: skip
# The one object a verb on these resources is granted for (RBAC resourceNames).
NAMED = {"secrets": SERVING_SECRET, "mutatingwebhookconfigurations": MUTATING,
         "validatingwebhookconfigurations": VALIDATING, "leases": names.CONTROLLER_LEASE}  # fmt: skip
CERT_EXPIRY_WARN_DAYS = 14

# Upstream names. Kueue's release is config/default (namespace kueue-system, namePrefix kueue-)
# over config/components/manager/kustomization.yaml, whose configMapGenerator makes
# manager-config from controller_manager_config.yaml.
KUEUE_NAMESPACE = "kueue-system"
KUEUE_CONFIGMAP = "kueue-manager-config"
KUEUE_CONFIG_KEY = "controller_manager_config.yaml"
KUEUE_DEPLOYMENT = "kueue-controller-manager"
# apis/config/v1beta1/configuration_types.go Integrations.Frameworks; the default when the list
# is empty is batch/job alone (apis/config/v1beta1/defaults.go), so it must be listed.
APPWRAPPER_FRAMEWORK = "workload.codeflare.dev/appwrapper"
ADMISSION_GATED_BY = "AdmissionGatedBy"  # pkg/features/kube_features.go: beta (on) from v0.19
APPWRAPPER_NAMESPACE = "appwrapper-system"
# shared/reference/appwrapper.md §4: key config.yaml, section appwrapper.
APPWRAPPER_CONFIGMAP = "appwrapper-operator-config"
APPWRAPPER_DEPLOYMENT = "appwrapper-controller-manager"
# volcano installer/helm/chart/volcano/templates/webhooks.yaml (volcano.md §2).
VOLCANO_WEBHOOKS = ("volcano-admission-service-jobs-mutate",
                    "volcano-admission-service-jobs-validate")  # fmt: skip

Version = tuple[int, int, int]
MIN_KUBERNETES_ADOPT: Version = (1, 27, 0)
MIN_KUBERNETES_MANIFESTS: Version = (1, 30, 0)
MIN_KUEUE: Version = (0, 19, 0)
MIN_KUEUE_WITH_GATE: Version = (0, 17, 0)
MIN_APPWRAPPER: Version = (1, 1, 0)
# Gated tasks are skipped by allocation, backfill, preemption and reclaim from Volcano 1.10;
# tasks[].partitionPolicy from 1.14.
MIN_VOLCANO: Version = (1, 10, 0)
MIN_VOLCANO_PARTITIONS: Version = (1, 14, 0)
# Volcano's Helm chart (installer/helm/chart/volcano/templates/scheduler.yaml): the scheduler is
# what honours the scheduling gates, and its image tag is Volcano's version.
VOLCANO_SCHEDULER = "volcano-scheduler"
VOLCANO_SCHEDULER_IMAGE = "vc-scheduler"
NETWORK_POLICY = "autowrap-webhook"
WEBHOOK_PORT = 9443


@dataclass(frozen=True)
class Replica:
    """One ready endpoint of autowrap's Service, as probed: the certificate it presents (DER)
    and its ``/readyz`` answer, or why it could not be reached."""

    address: str
    port: int
    pod: str = ""
    certificate: bytes | None = None
    readyz: int | None = None
    readyz_body: str = ""
    error: str = ""


@dataclass(frozen=True)
class Facts:
    """What ``diagnose`` read. An object that does not exist is None; one that could not be
    read is named in ``unreadable`` (key: the fact, value: why)."""

    install_namespace: str = names.SERVICE_NAMESPACE
    # When they were read (the Lease's age and the certificate's validity are judged at it).
    now: datetime.datetime = datetime.datetime(2000, 1, 1, tzinfo=datetime.UTC)
    version: Obj | None = None
    groups: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    kueue_config: Obj | None = None
    kueue_deployment: Obj | None = None
    appwrapper_config: Obj | None = None
    appwrapper_deployment: Obj | None = None
    volcano_job_crd: Obj | None = None
    volcano_webhooks: Mapping[str, Obj | None] = field(default_factory=dict)
    network_policy: Obj | None = None  # autowrap-webhook in autowrap's namespace
    mutating: Obj | None = None
    validating: Obj | None = None
    admission_policies: Mapping[str, Obj | None] = field(default_factory=dict)
    policy_bindings: Sequence[Obj] = ()
    service: Obj | None = None
    endpoint_slices: Sequence[Obj] = ()
    replicas: Sequence[Replica] = ()
    lease: Obj | None = None
    certificate: Obj | None = None  # cert-manager's Certificate, where the variant uses it
    deployment: Obj | None = None  # autowrap's own Deployment
    # Every (group, resource, verb, namespace) autowrap's ServiceAccount needs (diagnose
    # .needed_calls: the code's calls, and the self-managed certificate's where it runs so).
    needed: Sequence[tuple[str, str, str, str]] = ()
    # (group, resource, verb, namespace) -> allowed, for autowrap's ServiceAccount.
    access: Mapping[tuple[str, str, str, str], bool] = field(default_factory=dict)
    # Whether the cluster lets autowrap set the owner references adoption sets
    # (diagnose._owner_references): "granted", "enforced", "not enforced", "unknown: why".
    owner_references: str = ""
    # Every Deployment and StatefulSet, and the RBAC that says which of them may create pods
    # (the controllers the installed identities list must name: doctor.identities).
    workloads: Sequence[Obj] = ()
    rbac_roles: Sequence[Obj] = ()  # ClusterRoles and Roles
    rbac_bindings: Sequence[Obj] = ()  # ClusterRoleBindings and RoleBindings
    policies: PolicySet | None = None
    policy_error: str = ""
    namespaces: Sequence[Obj] = ()
    local_queues: Sequence[Obj] = ()
    cluster_queues: Mapping[str, Obj | None] = field(default_factory=dict)
    flavors: Mapping[str, Obj | None] = field(default_factory=dict)
    only_namespace: str = ""
    unreadable: Mapping[str, str] = field(default_factory=dict)


def parse_version(text: str) -> Version | None:
    """``v1.30.2-gke.1``, ``1.30+``, ``v0.19.0`` -> (1, 30, 2); None when no version is in it."""
    m = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", text or "")
    return (int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)) if m else None


def shown(version: Version) -> str:
    return ".".join(str(n) for n in version)


def _pod_spec(deployment: Obj | None) -> Mapping[str, Any]:
    template = as_map(as_map(as_map(deployment).get("spec")).get("template"))
    return as_map(template.get("spec"))


def image_version(deployment: Obj | None) -> Version | None:
    """The version in the tag of the Deployment's first container image that has one."""
    for container in as_list(_pod_spec(deployment).get("containers")):
        image = str(as_map(container).get("image") or "").split("@", 1)[0]
        last = image.rsplit("/", 1)[-1]
        found = parse_version(last.rsplit(":", 1)[1]) if ":" in last else None
        if found:
            return found
    return None


def container_args(deployment: Obj | None) -> list[str]:
    spec = _pod_spec(deployment)
    return [str(a) for c in as_list(spec.get("containers"))
            for a in [*as_list(as_map(c).get("command")), *as_list(as_map(c).get("args"))]]  # fmt: skip


def config_yaml(configmap: Obj | None, key: str) -> tuple[dict[str, Any] | None, str]:
    """The YAML document under ``key`` of a ConfigMap, or why there is none."""
    text = as_map(as_map(configmap).get("data")).get(key)
    if not isinstance(text, str):
        return None, f"it has no {key!r} entry"
    try:
        loaded = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        return None, f"its {key!r} is not YAML ({exc})"
    return (loaded if isinstance(loaded, dict) else {}), ""


def unread_reason(facts: Facts, key: str, what: str) -> str:
    why = facts.unreadable.get(key)
    return f"{what} could not be read ({why})" if why else ""


def fix_read(what: str) -> str:
    return f"run doctor with credentials that may read {what} (a cluster-admin kubeconfig)"


def cannot_read(
    facts: Facts, section: str, check: str, key: str, what: str, rights: str
) -> Finding | None:
    """The warning for a fact that could not be read (refused, or no answer), or None."""
    problem = unread_reason(facts, key, what)
    return Finding(section, check, WARN, problem, fix_read(rights)) if problem else None


def unread_or_missing(
    facts: Facts,
    check: str,
    key: str,
    obj: Obj | None,
    where: str,
    rights: str,
    *,
    missing: str,
    fix: str,
    level: str = WARN,
    section: str = "prerequisites",
) -> Finding | None:
    """The finding for the one object a check judges (``facts.<key>``, named ``where``) when it
    could not be read (a warning naming the ``rights`` that would read it) or is not there (at
    ``level``: ``no <where>: <missing>``, with its ``fix``); None when it was read, and the check
    goes on to judge it."""
    if cannot := cannot_read(facts, section, check, key, where, rights):
        return cannot
    if obj is None:
        return Finding(section, check, level, f"no {where}: {missing}", fix)
    return None


def hooks_of(configuration: Obj | None) -> dict[str, Obj]:
    return {str(as_map(h).get("name")): as_map(h) for h in
            as_list(as_map(configuration).get("webhooks"))}  # fmt: skip


def user_rbac_check_off(facts: Facts) -> bool:
    config, _ = config_yaml(facts.appwrapper_config, "config.yaml")
    return as_map((config or {}).get("appwrapper")).get("userRBACAdmissionCheck") is False
