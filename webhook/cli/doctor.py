"""``autowrap doctor``: what a live cluster must hold for autowrap to work, judged from what was read.

Every real cluster differs from the one autowrap is tested against somewhere: an older Kueue,
the AppWrapper integration left out of Kueue's configuration, ``AdmissionGatedBy`` off, a
caBundle that drifted, a namespace without its LocalQueue. Each check here turns one such
assumption into a line: ``ok``, ``warn`` or ``fail``, what was found, and the fix (with the
command that applies it, where one command does). Pure: ``webhook.cli.diagnose`` reads the
cluster into :class:`Facts` with the user's kubeconfig; this module only judges them. What could
not be read is said, never assumed.
"""

from __future__ import annotations

import base64
import datetime
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml
from cryptography import x509
from cryptography.x509 import verification

from webhook import __version__
from webhook.core import queues
from webhook.core.policy import LabelSelector, Match, PolicySet, WrapMode
from webhook.model import names, objects
from webhook.model.objects import as_list, as_map

Obj = Mapping[str, Any]

OK, WARN, FAIL = "ok", "warn", "fail"
LEVELS = (OK, WARN, FAIL)

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
    "autowrap-own-writes", "autowrap-wrapped-pods",
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


@dataclass(frozen=True)
class Finding:
    section: str  # prerequisites, autowrap, policies, smoke
    check: str
    level: str
    found: str
    fix: str = ""
    # One command that applies the fix, where one does (``kubectl ...`` as argv).
    command: tuple[str, ...] = ()

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"section": self.section, "check": self.check,
                               "level": self.level, "found": self.found}  # fmt: skip
        if self.fix:
            out["fix"] = self.fix
        if self.command:
            out["command"] = list(self.command)
        return out


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
    policies: PolicySet | None = None
    policy_error: str = ""
    namespaces: Sequence[Obj] = ()
    local_queues: Sequence[Obj] = ()
    cluster_queues: Mapping[str, Obj | None] = field(default_factory=dict)
    flavors: Mapping[str, Obj | None] = field(default_factory=dict)
    only_namespace: str = ""
    unreadable: Mapping[str, str] = field(default_factory=dict)


# --- helpers -------------------------------------------------------------------------------------


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


def _config_yaml(configmap: Obj | None, key: str) -> tuple[dict[str, Any] | None, str]:
    """The YAML document under ``key`` of a ConfigMap, or why there is none."""
    text = as_map(as_map(configmap).get("data")).get(key)
    if not isinstance(text, str):
        return None, f"it has no {key!r} entry"
    try:
        loaded = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        return None, f"its {key!r} is not YAML ({exc})"
    return (loaded if isinstance(loaded, dict) else {}), ""


def _unread(facts: Facts, key: str, what: str) -> str:
    why = facts.unreadable.get(key)
    return f"{what} could not be read ({why})" if why else ""


def _fix_read(what: str) -> str:
    return f"run doctor with credentials that may read {what} (a cluster-admin kubeconfig)"


def _unreadable(
    facts: Facts, section: str, check: str, key: str, what: str, rights: str
) -> Finding | None:
    """The warning for a fact that could not be read (refused, or no answer), or None."""
    problem = _unread(facts, key, what)
    return Finding(section, check, WARN, problem, _fix_read(rights)) if problem else None


# --- prerequisites -------------------------------------------------------------------------------


def kubernetes_version(facts: Facts) -> Finding:
    check = "kubernetes-version"
    info = as_map(facts.version)
    numbers = f"{info.get('major', '')}.{str(info.get('minor', '')).rstrip('+')}"
    text = str(info.get("gitVersion") or numbers)
    found = parse_version(text) or parse_version(numbers)
    if found is None:
        return Finding("prerequisites", check, WARN, f"the server's version is unreadable ({text!r})",
                       "check `kubectl version`")  # fmt: skip
    where = f"Kubernetes {text}"
    if found < MIN_KUBERNETES_ADOPT:
        return Finding("prerequisites", check, FAIL,
                       f"{where}: below {shown(MIN_KUBERNETES_ADOPT)}, adopt mode's minimum "
                       "(scheduling gates and a gated pod's nodeSelector changes)",
                       f"upgrade the control plane to {shown(MIN_KUBERNETES_MANIFESTS)} or later")  # fmt: skip
    if found < MIN_KUBERNETES_MANIFESTS:
        return Finding("prerequisites", check, WARN,
                       f"{where}: adopt mode works (≥ {shown(MIN_KUBERNETES_ADOPT)}), but the "
                       f"manifests need {shown(MIN_KUBERNETES_MANIFESTS)} (webhook matchConditions "
                       "and admissionregistration.k8s.io/v1 ValidatingAdmissionPolicies)",
                       f"upgrade the control plane to {shown(MIN_KUBERNETES_MANIFESTS)} or later")  # fmt: skip
    return Finding("prerequisites", check, OK, f"{where} (≥ {shown(MIN_KUBERNETES_MANIFESTS)})")


def kueue_api(facts: Facts) -> Finding:
    served = facts.groups.get("kueue.x-k8s.io")
    if not served:
        return Finding("prerequisites", "kueue-api", FAIL,
                       "the cluster serves no kueue.x-k8s.io API: Kueue is not installed",
                       "install Kueue (https://kueue.sigs.k8s.io/docs/installation/) "
                       f"{shown(MIN_KUEUE)} or later")  # fmt: skip
    if "v1beta1" not in served:
        return Finding("prerequisites", "kueue-api", WARN,
                       f"kueue.x-k8s.io serves {', '.join(served)}, not v1beta1, which "
                       "`autowrap status` and the smoke test read Workloads with",
                       "install a Kueue release that still serves v1beta1")  # fmt: skip
    return Finding("prerequisites", "kueue-api", OK, f"kueue.x-k8s.io serves {', '.join(served)}")


def kueue_version(facts: Facts) -> tuple[Finding, Version | None]:
    check = "kueue-version"
    if cannot := _unreadable(
        facts,
        "prerequisites",
        check,
        "kueue_deployment",
        f"Deployment {KUEUE_NAMESPACE}/{KUEUE_DEPLOYMENT}",
        f"Deployments in {KUEUE_NAMESPACE}",
    ):
        return cannot, None
    if facts.kueue_deployment is None:
        return Finding("prerequisites", check, WARN,
                       f"no Deployment {KUEUE_NAMESPACE}/{KUEUE_DEPLOYMENT}: Kueue's version is "
                       "unknown (installed elsewhere, or not at all)",
                       f"make sure Kueue {shown(MIN_KUEUE)} or later runs"), None  # fmt: skip
    version = image_version(facts.kueue_deployment)
    if version is None:
        return Finding("prerequisites", check, WARN,
                       "Kueue's image carries no version tag (a digest?): its version is unknown",
                       f"make sure Kueue is {shown(MIN_KUEUE)} or later"), None  # fmt: skip
    if version < MIN_KUEUE_WITH_GATE:
        return Finding("prerequisites", check, FAIL,
                       f"Kueue {shown(version)}: it has no AdmissionGatedBy, which adopt mode "
                       "holds AppWrappers with",
                       f"upgrade Kueue to {shown(MIN_KUEUE)} or later, or set mode: Redirect in "
                       "every policy until then"), version  # fmt: skip
    return Finding("prerequisites", check, OK, f"Kueue {shown(version)}"), version


def kueue_integration(facts: Facts) -> Finding:
    check = "kueue-appwrapper-integration"
    where = f"ConfigMap {KUEUE_NAMESPACE}/{KUEUE_CONFIGMAP}"
    rights = f"ConfigMaps in {KUEUE_NAMESPACE}"
    if cannot := _unreadable(facts, "prerequisites", check, "kueue_config", where, rights):
        return cannot
    if facts.kueue_config is None:
        return Finding("prerequisites", check, WARN,
                       f"no {where}: whether Kueue manages AppWrappers cannot be read",
                       f"make sure Kueue's configuration lists {APPWRAPPER_FRAMEWORK} in "
                       "integrations.frameworks")  # fmt: skip
    config, why = _config_yaml(facts.kueue_config, KUEUE_CONFIG_KEY)
    if config is None:
        return Finding("prerequisites", check, FAIL, f"{where}: {why}",
                       f"restore {KUEUE_CONFIG_KEY} from Kueue's release manifests")  # fmt: skip
    frameworks = [str(f) for f in as_list(as_map(config.get("integrations")).get("frameworks"))]
    if APPWRAPPER_FRAMEWORK in frameworks:
        return Finding("prerequisites", check, OK,
                       f"{where} lists {APPWRAPPER_FRAMEWORK} in integrations.frameworks")  # fmt: skip
    listed = ", ".join(frameworks) if frameworks else "nothing (Kueue then manages batch/job only)"
    return Finding(
        "prerequisites", check, FAIL,
        f"{where}: integrations.frameworks lists {listed}; without {APPWRAPPER_FRAMEWORK} Kueue "
        "never queues or admits an AppWrapper, so every wrapped job waits forever",
        f"add \"{APPWRAPPER_FRAMEWORK}\" to integrations.frameworks in {KUEUE_CONFIG_KEY} "
        f"(kubectl -n {KUEUE_NAMESPACE} edit configmap {KUEUE_CONFIGMAP}), then restart Kueue",
        ("kubectl", "-n", KUEUE_NAMESPACE, "rollout", "restart", f"deployment/{KUEUE_DEPLOYMENT}"),
    )  # fmt: skip


def _gate_setting(facts: Facts) -> tuple[bool | None, str]:
    """AdmissionGatedBy as Kueue's configuration or its --feature-gates flag sets it."""
    config, _ = _config_yaml(facts.kueue_config, KUEUE_CONFIG_KEY)
    gates = as_map((config or {}).get("featureGates"))
    if ADMISSION_GATED_BY in gates:
        return bool(gates[ADMISSION_GATED_BY]), f"featureGates in {KUEUE_CONFIGMAP}"
    for arg in container_args(facts.kueue_deployment):
        if arg.startswith("--feature-gates="):
            for pair in arg.split("=", 1)[1].split(","):
                key, _, value = pair.partition("=")
                if key.strip() == ADMISSION_GATED_BY:
                    return value.strip().lower() == "true", f"--feature-gates of {KUEUE_DEPLOYMENT}"
    return None, ""


def admission_gated_by(facts: Facts, version: Version | None) -> Finding:
    check = "kueue-admission-gated-by"
    explicit, where = _gate_setting(facts)
    fix_on = (f"set featureGates: {{{ADMISSION_GATED_BY}: true}} in {KUEUE_CONFIG_KEY} "
              f"(kubectl -n {KUEUE_NAMESPACE} edit configmap {KUEUE_CONFIGMAP}; or "
              f"--feature-gates={ADMISSION_GATED_BY}=true on the manager), then restart Kueue; "
              "or set mode: Redirect in every policy")  # fmt: skip
    restart = (
        "kubectl",
        "-n",
        KUEUE_NAMESPACE,
        "rollout",
        "restart",
        f"deployment/{KUEUE_DEPLOYMENT}",
    )
    if explicit is False:
        return Finding("prerequisites", check, FAIL,
                       f"{ADMISSION_GATED_BY} is switched off ({where}): Kueue would admit "
                       "AppWrappers while autowrap still holds them", fix_on, restart)  # fmt: skip
    if explicit is True:
        if version is not None and version < MIN_KUEUE_WITH_GATE:
            return Finding("prerequisites", check, FAIL,
                           f"{ADMISSION_GATED_BY} is set ({where}) but Kueue {shown(version)} "
                           "does not have it", f"upgrade Kueue to {shown(MIN_KUEUE)} or later")  # fmt: skip
        return Finding("prerequisites", check, OK, f"{ADMISSION_GATED_BY} is on ({where})")
    if version is None:
        return Finding("prerequisites", check, WARN,
                       f"{ADMISSION_GATED_BY} is not set explicitly and Kueue's version is "
                       f"unknown: on by default only from {shown(MIN_KUEUE)}",
                       f"make sure Kueue is {shown(MIN_KUEUE)} or later, or set the gate")  # fmt: skip
    unseen = [f"{what} ({facts.unreadable[key]})" for key, what in
              (("kueue_config", KUEUE_CONFIGMAP), ("kueue_deployment", KUEUE_DEPLOYMENT))
              if key in facts.unreadable]  # fmt: skip
    if unseen and version >= MIN_KUEUE:
        return Finding("prerequisites", check, WARN,
                       f"{ADMISSION_GATED_BY} is on by default in Kueue {shown(version)}, but "
                       f"whether it is switched off cannot be read: {'; '.join(unseen)}",
                       _fix_read(f"ConfigMaps and Deployments in {KUEUE_NAMESPACE}"))  # fmt: skip
    if version >= MIN_KUEUE:
        return Finding("prerequisites", check, OK,
                       f"{ADMISSION_GATED_BY} is on by default in Kueue {shown(version)}")  # fmt: skip
    return Finding("prerequisites", check, FAIL,
                   f"Kueue {shown(version)} has {ADMISSION_GATED_BY} off by default (beta and on "
                   f"from {shown(MIN_KUEUE)}) and nothing switches it on", fix_on, restart)  # fmt: skip


def appwrapper_crd(facts: Facts) -> Finding:
    served = facts.groups.get(names.APPWRAPPER_GROUP)
    if not served:
        return Finding("prerequisites", "appwrapper-api", FAIL,
                       f"the cluster serves no {names.APPWRAPPER_GROUP} API: the AppWrapper "
                       "controller is not installed",
                       "install project-codeflare/appwrapper "
                       f"{shown(MIN_APPWRAPPER)} or later")  # fmt: skip
    if names.APPWRAPPER_VERSION not in served:
        return Finding("prerequisites", "appwrapper-api", FAIL,
                       f"{names.APPWRAPPER_GROUP} serves {', '.join(served)}, not "
                       f"{names.APPWRAPPER_VERSION}",
                       f"upgrade the AppWrapper controller to {shown(MIN_APPWRAPPER)} or later")  # fmt: skip
    return Finding("prerequisites", "appwrapper-api", OK,
                   f"{names.APPWRAPPER_GROUP} serves {', '.join(served)}")  # fmt: skip


def appwrapper_controller(facts: Facts) -> Finding:
    check = "appwrapper-controller"
    where = f"Deployment {APPWRAPPER_NAMESPACE}/{APPWRAPPER_DEPLOYMENT}"
    rights = f"Deployments in {APPWRAPPER_NAMESPACE}"
    if cannot := _unreadable(facts, "prerequisites", check, "appwrapper_deployment", where, rights):
        return cannot
    if facts.appwrapper_deployment is None:
        return Finding("prerequisites", check, WARN,
                       f"no {where}: autowrap's manifests bind the Volcano Job ClusterRole and "
                       "the webhooks' matchConditions to the ServiceAccount "
                       f"{APPWRAPPER_NAMESPACE}/{APPWRAPPER_DEPLOYMENT}",
                       "if the controller runs elsewhere, change the ClusterRoleBinding "
                       "autowrap-appwrapper-volcano-jobs and the username in "
                       "deploy/base/webhooks.yaml (docs/install.md, Prerequisites)")  # fmt: skip
    version = image_version(facts.appwrapper_deployment)
    status = as_map(facts.appwrapper_deployment.get("status"))
    ready = int(status.get("readyReplicas") or 0)
    text = (
        f"{where}, {'version ' + shown(version) if version else 'version unknown'}, {ready} ready"
    )
    if version is not None and version < MIN_APPWRAPPER:
        return Finding("prerequisites", check, FAIL, f"{text}: below {shown(MIN_APPWRAPPER)}",
                       f"upgrade the AppWrapper controller to {shown(MIN_APPWRAPPER)} or later")  # fmt: skip
    if not ready:
        return Finding("prerequisites", check, FAIL, f"{text}: no replica is ready",
                       f"kubectl -n {APPWRAPPER_NAMESPACE} describe deployment "
                       f"{APPWRAPPER_DEPLOYMENT}")  # fmt: skip
    return Finding("prerequisites", check, OK, text)


def appwrapper_settings(facts: Facts) -> list[Finding]:
    check = "appwrapper-settings"
    where = f"ConfigMap {APPWRAPPER_NAMESPACE}/{APPWRAPPER_CONFIGMAP}"
    if cannot := _unreadable(
        facts,
        "prerequisites",
        check,
        "appwrapper_config",
        where,
        f"ConfigMaps in {APPWRAPPER_NAMESPACE}",
    ):
        return [cannot]
    component_create = _component_create_granted(facts)
    if facts.appwrapper_config is None:
        settings: dict[str, Any] = {}
        origin = f"no {where}: the controller's defaults apply"
    else:
        config, why = _config_yaml(facts.appwrapper_config, "config.yaml")
        if config is None:
            return [Finding("prerequisites", check, FAIL, f"{where}: {why}",
                            "restore config.yaml from the AppWrapper release manifests")]  # fmt: skip
        settings = dict(as_map(config.get("appwrapper")))
        origin = where
    out = []
    scheduler = str(settings.get("schedulerName") or "")
    if scheduler:
        out.append(Finding(
            "prerequisites", "appwrapper-scheduler-name", FAIL,
            f"{origin}: appwrapper.schedulerName is {scheduler!r}: the controller writes it into "
            "every task template without one, taking Volcano's pods away from the Volcano "
            "scheduler",
            f"set appwrapper.schedulerName to \"\" in config.yaml (kubectl -n "
            f"{APPWRAPPER_NAMESPACE} edit configmap {APPWRAPPER_CONFIGMAP}), then restart the "
            "controller",
            ("kubectl", "-n", APPWRAPPER_NAMESPACE, "rollout", "restart",
             f"deployment/{APPWRAPPER_DEPLOYMENT}"),
        ))  # fmt: skip
    else:
        out.append(Finding("prerequisites", "appwrapper-scheduler-name", OK,
                           f"{origin}: schedulerName empty, Volcano pods keep their scheduler"))  # fmt: skip
    rbac_check = settings.get("userRBACAdmissionCheck", True) is not False
    if rbac_check and component_create is False:
        out.append(Finding(
            "prerequisites", check, FAIL,
            f"{origin}: userRBACAdmissionCheck is on, and autowrap's ServiceAccount may not "
            "create Volcano Jobs, Pods and Services (the without-component-create variant): the "
            "AppWrapper operator refuses every AppWrapper autowrap creates",
            "install the base, self-managed or cert-manager variant (its ClusterRole grants the "
            "creates, used only for dry runs), or set userRBACAdmissionCheck: false",
        ))  # fmt: skip
    else:
        state = "on" if rbac_check else "off"
        out.append(Finding("prerequisites", check, OK,
                           f"{origin}: userRBACAdmissionCheck {state}, consistent with "
                           "autowrap's component create grants"))  # fmt: skip
    return out


def _component_create_granted(facts: Facts) -> bool | None:
    wanted = [("batch.volcano.sh", "jobs", "create"), ("", "pods", "create"),
              ("", "services", "create")]  # fmt: skip
    seen = [facts.access.get((g, r, v, "")) for g, r, v in wanted]
    if any(s is None for s in seen):
        return None
    return all(seen)


def volcano(facts: Facts) -> list[Finding]:
    out = []
    batch, scheduling = (
        facts.groups.get("batch.volcano.sh"),
        facts.groups.get("scheduling.volcano.sh"),
    )
    if not batch or "v1alpha1" not in batch:
        out.append(Finding("prerequisites", "volcano-api", FAIL,
                           "the cluster does not serve batch.volcano.sh/v1alpha1 Jobs: Volcano "
                           "is not installed", "install Volcano 1.10 or later (1.14 for "
                           "partitionPolicy)"))  # fmt: skip
    else:
        served = f"batch.volcano.sh {', '.join(batch)}; scheduling.volcano.sh " + (
            ", ".join(scheduling) if scheduling else "none"
        )
        level = OK if scheduling else WARN
        out.append(Finding("prerequisites", "volcano-api", level, served,
                           "" if scheduling else "install Volcano's PodGroup CRD (its scheduler "
                           "needs it)"))  # fmt: skip
    missing = [n for n, hook in facts.volcano_webhooks.items() if hook is None]
    cannot = _unreadable(facts, "prerequisites", "volcano-webhooks", "volcano_webhooks",
                         "Volcano's webhook configurations", "webhook configurations")  # fmt: skip
    if cannot:
        out.append(cannot)
    elif missing:
        out.append(Finding("prerequisites", "volcano-webhooks", WARN,
                           f"missing: {', '.join(missing)}: Volcano's defaults and checks are not "
                           "applied to Jobs (autowrap validates what it can itself)",
                           "install Volcano's admission (volcano-admission Deployment and its "
                           "webhook configurations)"))  # fmt: skip
    elif facts.volcano_webhooks:
        out.append(Finding("prerequisites", "volcano-webhooks", OK,
                           f"present: {', '.join(facts.volcano_webhooks)}"))  # fmt: skip
    out.append(_partition_policy(facts))
    return out


def _partition_policy(facts: Facts) -> Finding:
    check = "volcano-partition-policy"
    wants = sorted(p.name for p in (facts.policies.policies if facts.policies else ())
                   if p.spec.topology.partition_default is not None)  # fmt: skip
    unread = _unread(facts, "volcano_job_crd", "CRD jobs.batch.volcano.sh")
    if unread or facts.volcano_job_crd is None:
        level = WARN if wants else OK
        text = unread or "CRD jobs.batch.volcano.sh not found"
        return Finding("prerequisites", check, level,
                       f"{text}: partitionPolicy support unknown",
                       _fix_read("CustomResourceDefinitions") if wants else "")  # fmt: skip
    supported = "partitionPolicy" in str(facts.volcano_job_crd)
    if supported:
        return Finding("prerequisites", check, OK, "Volcano's Job CRD has tasks[].partitionPolicy")
    if wants:
        return Finding("prerequisites", check, FAIL,
                       f"policies {', '.join(wants)} set topology.partitionDefault, but Volcano's "
                       "Job CRD has no tasks[].partitionPolicy (Volcano < 1.14): the field is "
                       "pruned and the partitions are lost",
                       "upgrade Volcano to 1.14 or later, or remove partitionDefault")  # fmt: skip
    return Finding("prerequisites", check, OK,
                   "Volcano's Job CRD has no partitionPolicy (Volcano < 1.14) and no policy "
                   "sets partitionDefault; jobs that use partitionPolicy need Volcano 1.14")  # fmt: skip


def cert_manager(facts: Facts) -> Finding | None:
    """Only for the cert-manager variant: its configurations ask cert-manager to inject."""
    injected = {as_map(as_map(c).get("metadata")).get("annotations", {}).get(CERT_MANAGER_INJECT)
                for c in (facts.mutating, facts.validating) if c}  # fmt: skip
    injected.discard(None)
    if not injected:
        return None
    source = str(sorted(str(i) for i in injected)[0])
    if not facts.groups.get("cert-manager.io"):
        return Finding("prerequisites", "cert-manager", FAIL,
                       f"the webhook configurations ask cert-manager to inject {source}, but "
                       "the cluster serves no cert-manager.io API",
                       "install cert-manager with its CA injector, or install the self-managed "
                       "variant")  # fmt: skip
    what = f"Certificate {source}"
    if cannot := _unreadable(facts, "prerequisites", "cert-manager", "certificate", what,
                             "cert-manager Certificates"):  # fmt: skip
        return cannot
    if facts.certificate is None:
        return Finding("prerequisites", "cert-manager", FAIL,
                       f"no Certificate {source}",
                       "kubectl apply -k deploy/overlays/cert-manager")  # fmt: skip
    conditions = as_list(as_map(facts.certificate.get("status")).get("conditions"))
    ready = any(as_map(c).get("type") == "Ready" and as_map(c).get("status") == "True"
                for c in conditions)  # fmt: skip
    if not ready:
        return Finding("prerequisites", "cert-manager", FAIL,
                       f"Certificate {source} is not Ready",
                       f"kubectl -n {source.split('/')[0]} describe certificate "
                       f"{source.split('/')[-1]}")  # fmt: skip
    return Finding("prerequisites", "cert-manager", OK, f"Certificate {source} is Ready")


# --- autowrap itself -----------------------------------------------------------------------------


def self_managed(facts: Facts) -> bool:
    return SELF_MANAGED_FLAG in container_args(facts.deployment)


def running(facts: Facts) -> Finding:
    """autowrap's Deployment: which version runs, how many replicas are ready, and whether
    this command's checks are the ones for that version."""
    ns = facts.install_namespace
    where = f"Deployment {ns}/{names.SERVICE_NAME}"
    if cannot := _unreadable(facts, "autowrap", "deployment", "deployment", where,
                             f"Deployments in {ns}"):  # fmt: skip
        return cannot
    if facts.deployment is None:
        return Finding("autowrap", "deployment", FAIL, f"no {where}: autowrap is not installed "
                       f"in {ns}", "install it (docs/install.md), or pass --install-namespace")  # fmt: skip
    version = image_version(facts.deployment)
    status = as_map(facts.deployment.get("status"))
    wanted = int(as_map(facts.deployment.get("spec")).get("replicas") or 1)
    ready = int(status.get("readyReplicas") or 0)
    runs = f"autowrap {shown(version)}" if version else "autowrap (image without a version tag)"
    certificates = (
        "self-managed certificates" if self_managed(facts) else "certificates from a Secret"
    )
    text = f"{where}: {runs}, {ready}/{wanted} ready, {certificates}"
    if version is not None and shown(version) != __version__:
        return Finding("autowrap", "deployment", WARN,
                       f"{text}; this command is autowrap {__version__}, whose checks may not "
                       "match that release", f"run the doctor of autowrap {shown(version)}")  # fmt: skip
    return Finding("autowrap", "deployment", OK, text)


def _hooks(configuration: Obj | None) -> dict[str, Obj]:
    return {str(as_map(h).get("name")): as_map(h) for h in
            as_list(as_map(configuration).get("webhooks"))}  # fmt: skip


def webhook_configurations(facts: Facts) -> list[Finding]:
    out = []
    for name, configuration, expected in ((MUTATING, facts.mutating, MUTATING_WEBHOOKS),
                                          (VALIDATING, facts.validating, VALIDATING_WEBHOOKS)):  # fmt: skip
        cannot = _unreadable(facts, "autowrap", "webhook-configurations", name, name,
                             "webhook configurations")  # fmt: skip
        if cannot:
            out.append(cannot)
            continue
        if configuration is None:
            out.append(Finding("autowrap", "webhook-configurations", FAIL,
                               f"{name} does not exist: nothing reaches autowrap",
                               "apply the release file again (kubectl apply -f "
                               "deploy/release/autowrap-<variant>.yaml)"))  # fmt: skip
            continue
        hooks = _hooks(configuration)
        missing = [h for h in expected if h not in hooks]
        elsewhere = sorted(
            h for h, hook in hooks.items()
            if as_map(as_map(hook.get("clientConfig")).get("service")).get("namespace")
            not in (None, facts.install_namespace)
        )  # fmt: skip
        if missing:
            out.append(Finding("autowrap", "webhook-configurations", FAIL,
                               f"{name} lacks {', '.join(missing)}",
                               "apply the release file of the installed version again"))  # fmt: skip
        elif elsewhere:
            out.append(Finding("autowrap", "webhook-configurations", FAIL,
                               f"{name}: {', '.join(elsewhere)} call a Service outside "
                               f"{facts.install_namespace}",
                               "render the release for your namespace (python -m "
                               "tools.render_release --namespace NS) and apply it"))  # fmt: skip
        else:
            out.append(Finding("autowrap", "webhook-configurations", OK,
                               f"{name}: {len(hooks)} webhooks, all present"))  # fmt: skip
    return out


def admission_policies(facts: Facts) -> list[Finding]:
    if cannot := _unreadable(
        facts,
        "autowrap",
        "admission-policies",
        "admission_policies",
        "ValidatingAdmissionPolicies",
        "ValidatingAdmissionPolicies and their bindings",
    ):
        return [cannot]
    bound = {str(as_map(b.get("spec")).get("policyName")): b for b in facts.policy_bindings}
    missing = [n for n in ADMISSION_POLICIES if facts.admission_policies.get(n) is None]
    unbound = [n for n in ADMISSION_POLICIES if n not in missing and n not in bound]
    not_denying = [n for n in ADMISSION_POLICIES if n in bound and "Deny" not in
                   as_list(as_map(bound[n].get("spec")).get("validationActions"))]  # fmt: skip
    if missing or unbound or not_denying:
        parts = ([f"missing: {', '.join(missing)}"] if missing else []) + (
            [f"not bound: {', '.join(unbound)}"] if unbound else []) + (
            [f"bound without Deny: {', '.join(not_denying)}"] if not_denying else [])  # fmt: skip
        return [Finding("autowrap", "admission-policies", FAIL,
                        "; ".join(parts) + ": gated pods could be released, or autowrap's writes "
                        "go unchecked, by anyone",
                        "apply the release file of the installed version again")]  # fmt: skip
    return [Finding("autowrap", "admission-policies", OK,
                    f"{len(ADMISSION_POLICIES)} ValidatingAdmissionPolicies present and bound "
                    "with Deny")]  # fmt: skip


def _bundle(hook: Obj) -> list[x509.Certificate] | str:
    raw = as_map(hook.get("clientConfig")).get("caBundle")
    if not raw:
        return "caBundle is empty"
    try:
        return x509.load_pem_x509_certificates(base64.b64decode(str(raw)))
    except ValueError as exc:
        return f"caBundle is not base64 PEM certificates ({exc})"


def verify(
    bundle: Sequence[x509.Certificate], presented: bytes, host: str, now: datetime.datetime
) -> str:
    """Why ``bundle`` does not verify the presented certificate for ``host``, or "" when it
    does: the chain to a certificate of the bundle, validity at ``now`` and the subjectAltName,
    as kube-apiserver checks a webhook (Go's crypto/x509 Verify). The web PKI's extension rules
    (an authority key identifier, ...) are not the apiserver's, so any extensions pass."""
    permissive = verification.ExtensionPolicy.permit_all()
    # The CA must be one (basicConstraints cA), as Go requires of every issuer in the chain.
    ca_policy = permissive.require_present(
        x509.BasicConstraints, verification.Criticality.AGNOSTIC, None
    )
    # Go matches the host against the subjectAltName only (no common-name fallback).
    ee_policy = permissive.require_present(
        x509.SubjectAlternativeName, verification.Criticality.AGNOSTIC, None
    )
    try:
        leaf = x509.load_der_x509_certificate(presented)
        verifier = (
            verification.PolicyBuilder()
            .store(verification.Store(list(bundle)))
            .time(now)
            .extension_policies(ca_policy=ca_policy, ee_policy=ee_policy)
            .build_server_verifier(x509.DNSName(host))
        )
        verifier.verify(leaf, [])
    except (ValueError, verification.VerificationError) as exc:
        return str(exc) or type(exc).__name__
    return ""


def ca_bundles(facts: Facts) -> list[Finding]:
    host = f"{names.SERVICE_NAME}.{facts.install_namespace}.svc"
    presented = [r for r in facts.replicas if r.certificate]
    hooks = {f"{cname}/{n}": h for cname, conf in ((MUTATING, facts.mutating),
                                                  (VALIDATING, facts.validating))
             for n, h in _hooks(conf).items()}  # fmt: skip
    if not hooks:
        return []
    fix_cmd = ("kubectl", "-n", facts.install_namespace, "rollout", "restart",
               f"deployment/{names.SERVICE_NAME}")  # fmt: skip
    fix = ("the self-managed variant rewrites caBundle when a replica starts (restart it); "
           "cert-manager's CA injector rewrites it from the Certificate's CA; with your own "
           "certificate, patch every webhook's clientConfig.caBundle with the base64 CA")  # fmt: skip
    if not presented:
        errors = "; ".join(f"{r.address}:{r.port}: {r.error}" for r in facts.replicas if r.error)
        return [Finding("autowrap", "ca-bundle", WARN,
                        "no serving certificate could be fetched from the Service's endpoints"
                        + (f" ({errors})" if errors else ""),
                        "run doctor where pod IPs are reachable (inside the cluster), or check "
                        "the endpoints below")]  # fmt: skip
    bad: list[str] = []
    for label, hook in hooks.items():
        bundle = _bundle(hook)
        if isinstance(bundle, str):
            bad.append(f"{label}: {bundle}")
            continue
        for replica in presented:
            assert replica.certificate is not None
            why = verify(bundle, replica.certificate, host, facts.now)
            if why:
                bad.append(f"{label}: does not verify the certificate of "
                           f"{replica.pod or replica.address} ({why})")  # fmt: skip
    out = []
    if bad:
        shown_bad = "; ".join(bad[:3]) + (f"; and {len(bad) - 3} more" if len(bad) > 3 else "")
        out.append(Finding("autowrap", "ca-bundle", FAIL,
                           f"{shown_bad}: the apiserver refuses to call these webhooks, and every "
                           "wrapped submission fails closed", fix, fix_cmd))  # fmt: skip
    else:
        out.append(Finding("autowrap", "ca-bundle", OK,
                           f"all {len(hooks)} caBundles verify the certificate each of "
                           f"{len(presented)} replica(s) presents for {host}"))  # fmt: skip
    for replica in presented:
        assert replica.certificate is not None
        try:
            expires = x509.load_der_x509_certificate(replica.certificate).not_valid_after_utc
        except ValueError:
            continue
        left = expires - facts.now
        who = replica.pod or replica.address
        when = expires.strftime("%Y-%m-%d %H:%M UTC")
        if left <= datetime.timedelta(0):
            out.append(Finding("autowrap", "certificate-expiry", FAIL,
                               f"{who}: the serving certificate expired {when}",
                               "renew it (self-managed: restart; cert-manager: kubectl cert-manager "
                               "renew; your own: replace the Secret)", fix_cmd))  # fmt: skip
        elif left < datetime.timedelta(days=CERT_EXPIRY_WARN_DAYS):
            out.append(Finding("autowrap", "certificate-expiry", WARN,
                               f"{who}: the serving certificate expires {when} "
                               f"(in {left.days} days)",
                               "check that renewal works (autowrap_certificate_reloads_total)"))  # fmt: skip
        else:
            out.append(Finding("autowrap", "certificate-expiry", OK,
                               f"{who}: the serving certificate expires {when} "
                               f"(in {left.days} days)"))  # fmt: skip
    return out


def endpoints(facts: Facts) -> list[Finding]:
    ns = facts.install_namespace
    service = f"Service {ns}/{names.SERVICE_NAME}"
    if cannot := _unreadable(facts, "autowrap", "service", "service", service,
                             f"Services in {ns}"):  # fmt: skip
        return [cannot]
    if facts.service is None:
        return [Finding("autowrap", "service", FAIL, f"no {service}: the webhooks call nothing",
                        "apply the release file again")]  # fmt: skip
    if cannot := _unreadable(facts, "autowrap", "endpoints", "endpoints",
                             f"the EndpointSlices of {service}", f"EndpointSlices in {ns}"):  # fmt: skip
        return [cannot]
    ready = list(facts.replicas)
    out = []
    if not ready:
        out.append(Finding("autowrap", "endpoints", FAIL,
                           f"Service {ns}/{names.SERVICE_NAME} has no ready endpoint: every "
                           "wrapped submission is refused (fail closed)",
                           f"kubectl -n {ns} get pods -l app.kubernetes.io/name=autowrap; "
                           f"kubectl -n {ns} describe deployment {names.SERVICE_NAME}"))  # fmt: skip
        return out
    level = OK if len(ready) > 1 else WARN
    out.append(Finding("autowrap", "endpoints", level,
                       f"Service {ns}/{names.SERVICE_NAME}: {len(ready)} ready endpoint(s)"
                       + ("" if len(ready) > 1 else ": no second replica to take over"),
                       "" if len(ready) > 1 else f"kubectl -n {ns} describe deployment "
                       f"{names.SERVICE_NAME}"))  # fmt: skip
    for replica in facts.replicas:
        who = replica.pod or f"{replica.address}:{replica.port}"
        if replica.readyz == 200:
            out.append(Finding("autowrap", "readyz", OK, f"{who}: /readyz 200"))
        elif replica.readyz is not None:
            out.append(Finding("autowrap", "readyz", FAIL,
                               f"{who}: /readyz {replica.readyz} {replica.readyz_body.strip()[:300]}",
                               f"kubectl -n {ns} logs {replica.pod or 'deployment/autowrap'}"))  # fmt: skip
        else:
            out.append(Finding("autowrap", "readyz", WARN,
                               f"{who}: not reachable from here ({replica.error})",
                               "run doctor where pod IPs are reachable (inside the cluster)"))  # fmt: skip
    return out


def _rfc3339(text: str) -> datetime.datetime | None:
    try:
        return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def lease(facts: Facts) -> Finding:
    where = f"Lease {facts.install_namespace}/{names.CONTROLLER_LEASE}"
    if cannot := _unreadable(facts, "autowrap", "lease", "lease", where,
                             f"Leases in {facts.install_namespace}"):  # fmt: skip
        return cannot
    if facts.lease is None:
        return Finding("autowrap", "lease", FAIL,
                       f"no {where}: no controller replica ever led, so nothing is adopted and "
                       "no gated pod is released",
                       f"kubectl -n {facts.install_namespace} logs deployment/{names.SERVICE_NAME}")  # fmt: skip
    spec = as_map(facts.lease.get("spec"))
    holder = str(spec.get("holderIdentity") or "")
    renewed = _rfc3339(str(spec.get("renewTime") or ""))
    duration = int(spec.get("leaseDurationSeconds") or 15)
    restart = ("kubectl", "-n", facts.install_namespace, "rollout", "restart",
               f"deployment/{names.SERVICE_NAME}")  # fmt: skip
    fix = (f"kubectl -n {facts.install_namespace} logs deployment/{names.SERVICE_NAME} says why; "
           "restart the Deployment")  # fmt: skip
    if not holder or renewed is None:
        return Finding("autowrap", "lease", FAIL,
                       f"{where} is held by nobody: no replica leads, adoptions and releases "
                       "wait", fix, restart)  # fmt: skip
    age = (facts.now - renewed).total_seconds()
    if age > duration:
        return Finding("autowrap", "lease", FAIL,
                       f"{where}: held by {holder}, last renewed {int(age)}s ago (lease "
                       f"{duration}s): no replica leads, adoptions and releases wait",
                       fix, restart)  # fmt: skip
    return Finding("autowrap", "lease", OK,
                   f"{where}: held by {holder}, renewed {max(int(age), 0)}s ago")  # fmt: skip


# What the docs (security.md) say autowrap's identity must never be able to do.
FORBIDDEN: tuple[tuple[str, str, str, str], ...] = (
    ("", "pods", "update", ""),
    ("", "secrets", "list", ""),
    ("", "secrets", "create", ""),
    ("", "configmaps", "update", ""),
    ("rbac.authorization.k8s.io", "clusterroles", "escalate", ""),
    ("rbac.authorization.k8s.io", "clusterrolebindings", "create", ""),
    ("", "users", "impersonate", ""),
    ("", "serviceaccounts", "impersonate", ""),
    ("", "pods/exec", "create", ""),
)
# Granted only where OwnerReferencesPermissionEnforcement needs them (never called).
OPTIONAL: frozenset[tuple[str, str, str]] = frozenset(
    {("batch.volcano.sh", "jobs", "delete"), ("", "pods", "delete")}
)
COMPONENT_CREATE = frozenset({("batch.volcano.sh", "jobs", "create"), ("", "pods", "create"),
                              ("", "services", "create")})  # fmt: skip


def access(facts: Facts) -> list[Finding]:
    """autowrap's ServiceAccount against every call the code makes, and against what it must
    never be able to do (SubjectAccessReviews: ``facts.access``)."""
    account = f"system:serviceaccount:{facts.install_namespace}:{names.SERVICE_NAME}"
    if cannot := _unreadable(
        facts, "autowrap", "rbac", "access", "SubjectAccessReviews", "(create) SubjectAccessReviews"
    ):
        return [cannot]
    missing, optional_missing = [], []
    rbac_check_off = _user_rbac_check_off(facts)
    for group, resource, verb, ns in facts.needed:
        allowed = facts.access.get((group, resource, verb, ns))
        if allowed is not False:
            continue
        what = f"{verb} {resource}{'.' + group if group else ''}" + (f" in {ns}" if ns else "")
        if (group, resource, verb) in OPTIONAL or (
            (group, resource, verb) in COMPONENT_CREATE and rbac_check_off
        ):
            optional_missing.append(what)
        else:
            missing.append(what)
    excess = [f"{v} {r}{'.' + g if g else ''}" for g, r, v, ns in FORBIDDEN
              if facts.access.get((g, r, v, ns)) is True]  # fmt: skip
    out = []
    if missing:
        out.append(Finding("autowrap", "rbac", FAIL,
                           f"{account} may not {', '.join(missing)}",
                           "apply the release file of the installed version again (its "
                           "ClusterRole autowrap and Role autowrap-controller-lease grant them)"))  # fmt: skip
    else:
        note = (f" (not granted, not needed here: {', '.join(optional_missing)})"
                if optional_missing else "")  # fmt: skip
        out.append(Finding("autowrap", "rbac", OK,
                           f"{account} may make every call autowrap makes{note}"))  # fmt: skip
    if excess:
        out.append(Finding("autowrap", "rbac-excess", FAIL,
                           f"{account} may also {', '.join(excess)}, which docs/security.md says "
                           "it never has: a leaked token could do that",
                           f"kubectl get clusterrolebindings,rolebindings -A -o wide | grep "
                           f"{names.SERVICE_NAME}; remove the extra grant"))  # fmt: skip
    else:
        out.append(Finding("autowrap", "rbac-excess", OK,
                           f"{account} has none of the grants docs/security.md rules out"))  # fmt: skip
    return out


def _user_rbac_check_off(facts: Facts) -> bool:
    config, _ = _config_yaml(facts.appwrapper_config, "config.yaml")
    return as_map((config or {}).get("appwrapper")).get("userRBACAdmissionCheck") is False


# --- policies against the cluster ----------------------------------------------------------------


def _namespace_labels(ns: Obj) -> dict[str, str]:
    labels = dict(objects.labels_of(ns))
    labels.setdefault("kubernetes.io/metadata.name", objects.name_of(ns))
    return labels


def _reaches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    if not selector:
        return True
    try:
        return LabelSelector.model_validate(dict(selector)).matches(labels)
    except ValueError:
        return True


def _wrap_selectors(mutating: Obj | None) -> list[Mapping[str, Any] | None]:
    """The namespaceSelectors of the webhooks that prepare wrap candidates."""
    return [as_map(h).get("namespaceSelector") for name, h in _hooks(mutating).items()
            if name in WRAP_WEBHOOKS]  # fmt: skip


def _left_out_by_name(selectors: Sequence[Mapping[str, Any] | None]) -> set[str]:
    """Namespaces every wrap webhook leaves out by name: autowrap's own, the control plane's
    and its components' (Kueue, the AppWrapper controller, Volcano, cert-manager), on purpose."""
    sets = []
    for selector in selectors:
        names_out: set[str] = set()
        for expression in as_list(as_map(selector).get("matchExpressions")):
            expression = as_map(expression)
            if (expression.get("key") == "kubernetes.io/metadata.name"
                    and expression.get("operator") == "NotIn"):  # fmt: skip
                names_out |= {str(v) for v in as_list(expression.get("values"))}
        sets.append(names_out)
    return set.intersection(*sets) if sets else set()


def policies(facts: Facts) -> list[Finding]:
    if facts.policy_error:
        return [Finding("policies", "policy-set", FAIL, facts.policy_error,
                        f"fix the ConfigMap {facts.install_namespace}/{POLICIES_CONFIGMAP}: "
                        "`autowrap check --policy DIR` says what is wrong offline")]  # fmt: skip
    if facts.policies is None:
        return [Finding("policies", "policy-set", WARN,
                        _unread(facts, "policies", f"ConfigMap {facts.install_namespace}/"
                                f"{POLICIES_CONFIGMAP}") or f"no ConfigMap {facts.install_namespace}/"
                        f"{POLICIES_CONFIGMAP}: the policies are unknown",
                        "apply the release file again, or your policy ConfigMap")]  # fmt: skip
    out = [Finding("policies", "policy-set", OK,
                   f"{len(facts.policies.policies)} policies: "
                   + ", ".join(p.name for p in facts.policies.policies))]  # fmt: skip
    for key, what in (("namespaces", "Namespaces"), ("local_queues", "LocalQueues")):
        if cannot := _unreadable(facts, "policies", key.replace("_", "-"), key, what, what):
            out.append(cannot)
    queues_known = "local_queues" not in facts.unreadable
    selectors = _wrap_selectors(facts.mutating)
    on_purpose = _left_out_by_name(selectors)
    queues_by_ns: dict[str, dict[str, Obj]] = {}
    for lq in facts.local_queues:
        meta = as_map(lq.get("metadata"))
        queues_by_ns.setdefault(str(meta.get("namespace")), {})[str(meta.get("name"))] = lq
    for ns in facts.namespaces:
        name = objects.name_of(ns)
        if (facts.only_namespace and name != facts.only_namespace) or name in on_purpose:
            continue
        labels = _namespace_labels(ns)
        match = facts.policies.match(name, labels)
        reached = not selectors or any(_reaches(s, labels) for s in selectors)
        always_label = labels.get(names.WRAP_LABEL) == "Always"
        if match is None:
            if always_label and reached:
                out.append(Finding("policies", "wrap-always-label", WARN,
                                   f"{name}: labelled {names.WRAP_LABEL}=Always but no policy "
                                   "covers it: every Volcano Job and Pod created there is sent "
                                   "to autowrap (fail closed) and never wrapped",
                                   "remove the label, or add a policy with wrap: Always for it",
                                   ("kubectl", "label", "namespace", name, f"{names.WRAP_LABEL}-")))  # fmt: skip
            continue
        known = queues_by_ns.get(name, {}) if queues_known else None
        out += _covered(facts, name, labels, match, reached, known)
    return out


def _covered(facts: Facts, ns: str, labels: Mapping[str, str], match: Match, reached: bool,
             local_queues: Mapping[str, Obj] | None) -> list[Finding]:  # fmt: skip
    """The findings for one namespace a policy covers; ``local_queues`` None when they could
    not be read (then nothing is said about queues but that, above)."""
    spec = match.policy.spec
    who = f"{ns} (policy {match.policy.name})"
    out = []
    if not reached:
        out.append(Finding("policies", "webhook-reach", WARN,
                           f"{who}: the policy covers it, but no autowrap webhook reaches it "
                           "(their namespaceSelector leaves it out): nothing there is wrapped",
                           f"exclude {ns} from the policy, or take it out of the webhooks' "
                           "namespaceSelector in deploy/base/webhooks.yaml"))  # fmt: skip
    always_label = labels.get(names.WRAP_LABEL) == "Always"
    if spec.wrap is WrapMode.ALWAYS and not always_label:
        out.append(Finding("policies", "wrap-always-label", FAIL,
                           f"{who}: wrap: Always, but the namespace lacks the label "
                           f"{names.WRAP_LABEL}=Always that routes unlabelled objects to autowrap: "
                           "they run unwrapped, outside Kueue",
                           f"kubectl label namespace {ns} {names.WRAP_LABEL}=Always",
                           ("kubectl", "label", "namespace", ns, f"{names.WRAP_LABEL}=Always")))  # fmt: skip
    elif spec.wrap is WrapMode.ALWAYS:
        out.append(Finding("policies", "wrap-always-label", OK,
                           f"{who}: wrap: Always, labelled {names.WRAP_LABEL}=Always"))  # fmt: skip
    elif always_label:
        out.append(Finding("policies", "wrap-always-label", WARN,
                           f"{who}: labelled {names.WRAP_LABEL}=Always but the policy is "
                           f"wrap: {spec.wrap.value}: unlabelled objects are sent to autowrap "
                           "(fail closed) and let through unwrapped",
                           f"set wrap: Always in policy {match.policy.name}, or remove the label",
                           ("kubectl", "label", "namespace", ns, f"{names.WRAP_LABEL}-")))  # fmt: skip
    if local_queues is None:
        return out
    queue = spec.queue.default
    if queue and queue not in local_queues:
        out.append(Finding("policies", "local-queue", FAIL,
                           f"{who}: its default queue {queue!r} has no LocalQueue here: jobs that "
                           "name no queue are refused",
                           f"create LocalQueue {ns}/{queue} (spec.clusterQueue: your "
                           "ClusterQueue), or change queue.default"))  # fmt: skip
    elif queue:
        out.append(Finding("policies", "local-queue", OK,
                           f"{who}: its default queue {queue!r} exists"))  # fmt: skip
    elif not local_queues and spec.wrap is WrapMode.ALWAYS:
        out.append(Finding("policies", "local-queue", FAIL,
                           f"{who}: wrap: Always, but no LocalQueue in the namespace: every "
                           "Volcano Job and Pod created there is refused",
                           f"create a LocalQueue in {ns}, and name it in the policy's "
                           "queue.default"))  # fmt: skip
    for name, lq in sorted(local_queues.items()):
        if spec.queue.allowed and name not in spec.queue.allowed:
            continue
        out.append(_cluster_queue(facts, ns, name, lq, spec.mode.value))
    return out


def _cluster_queue(facts: Facts, ns: str, name: str, lq: Obj, mode: str) -> Finding:
    cq_name = str(as_map(lq.get("spec")).get("clusterQueue") or "")
    label = f"LocalQueue {ns}/{name}"
    cq = facts.cluster_queues.get(cq_name)
    if cq is None:
        unread = _unread(facts, f"clusterqueue/{cq_name}", f"ClusterQueue {cq_name!r}")
        return Finding("policies", "cluster-queue", WARN if unread else FAIL,
                       unread or f"{label} points at ClusterQueue {cq_name!r}, which does not "
                       "exist: its jobs are never admitted",
                       _fix_read("ClusterQueues") if unread else f"create ClusterQueue "
                       f"{cq_name!r}, or point the LocalQueue at an existing one")  # fmt: skip
    topology = {f: as_map(as_map(facts.flavors.get(f)).get("spec")).get("topologyName")
                for f in queues.flavor_names(cq)}  # fmt: skip
    reason = queues.redirect_reason(cq_name, cq, lambda flavor: bool(topology.get(flavor)))
    if reason:
        return Finding("policies", "cluster-queue", OK,
                       f"{label} -> ClusterQueue {cq_name}: {reason}, so autowrap redirects "
                       f"(mode {mode} is overridden: the create is denied and the AppWrapper "
                       "stands in its place)")  # fmt: skip
    return Finding(
        "policies", "cluster-queue", OK, f"{label} -> ClusterQueue {cq_name} (mode {mode})"
    )


# --- all of it -----------------------------------------------------------------------------------


def judge(facts: Facts) -> list[Finding]:
    """Every check over what was read, in the order they are printed."""
    kueue_found, version = kueue_version(facts)
    out = [kubernetes_version(facts), kueue_api(facts), kueue_found, kueue_integration(facts),
           admission_gated_by(facts, version), appwrapper_crd(facts),
           appwrapper_controller(facts), *appwrapper_settings(facts), *volcano(facts)]  # fmt: skip
    manager = cert_manager(facts)
    if manager is not None:
        out.append(manager)
    out.append(running(facts))
    out += webhook_configurations(facts)
    out += admission_policies(facts)
    out += endpoints(facts)
    out += ca_bundles(facts)
    out.append(lease(facts))
    out += access(facts)
    out += policies(facts)
    return out


def worst(findings: Iterable[Finding]) -> str:
    levels = {f.level for f in findings}
    return FAIL if FAIL in levels else WARN if WARN in levels else OK


def render(findings: Sequence[Finding]) -> str:
    """One line per finding, its fix (and command) indented below."""
    lines = []
    section = ""
    for f in findings:
        if f.section != section:
            section = f.section
            lines.append(f"{section}:")
        lines.append(f"  {f.level:<4}  {f.check}: {f.found}")
        if f.fix and f.level != OK:
            lines.append(f"        fix: {f.fix}")
        if f.command and f.level != OK:
            lines.append(f"        run: {' '.join(f.command)}")
    counts = {level: sum(1 for f in findings if f.level == level) for level in LEVELS}
    lines.append(", ".join(f"{n} {level}" for level, n in counts.items()))
    return "\n".join(lines) + "\n"


def report(findings: Sequence[Finding]) -> dict[str, Any]:
    return {
        "result": worst(findings),
        "counts": {level: sum(1 for f in findings if f.level == level) for level in LEVELS},
        "findings": [f.as_json() for f in findings],
    }
