"""Doctor's first section: what autowrap needs of the cluster before it can work at all
(Kubernetes, Kueue and its configuration, the AppWrapper controller, Volcano, cert-manager)."""

from __future__ import annotations

from typing import Any

from webhook.cli.doctor.facts import (
    ADMISSION_GATED_BY,
    APPWRAPPER_CONFIGMAP,
    APPWRAPPER_DEPLOYMENT,
    APPWRAPPER_FRAMEWORK,
    APPWRAPPER_NAMESPACE,
    CERT_MANAGER_INJECT,
    KUEUE_CONFIG_KEY,
    KUEUE_CONFIGMAP,
    KUEUE_DEPLOYMENT,
    KUEUE_NAMESPACE,
    MIN_APPWRAPPER,
    MIN_KUBERNETES_ADOPT,
    MIN_KUBERNETES_MANIFESTS,
    MIN_KUEUE,
    MIN_KUEUE_WITH_GATE,
    MIN_VOLCANO,
    MIN_VOLCANO_PARTITIONS,
    VOLCANO_SCHEDULER,
    VOLCANO_SCHEDULER_IMAGE,
    Facts,
    Version,
    cannot_read,
    config_yaml,
    container_args,
    fix_read,
    image_version,
    parse_version,
    shown,
    unread_or_missing,
    unread_reason,
)
from webhook.cli.doctor.findings import FAIL, OK, WARN, Finding
from webhook.model import names
from webhook.model.objects import as_list, as_map


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
    if absent := unread_or_missing(
        facts, check, "kueue_deployment", facts.kueue_deployment,
        f"Deployment {KUEUE_NAMESPACE}/{KUEUE_DEPLOYMENT}", f"Deployments in {KUEUE_NAMESPACE}",
        missing="Kueue's version is unknown (installed elsewhere, or not at all)",
        fix=f"make sure Kueue {shown(MIN_KUEUE)} or later runs",
    ):  # fmt: skip
        return absent, None
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
    if absent := unread_or_missing(
        facts, check, "kueue_config", facts.kueue_config, where, f"ConfigMaps in {KUEUE_NAMESPACE}",
        missing="whether Kueue manages AppWrappers cannot be read",
        fix=f"make sure Kueue's configuration lists {APPWRAPPER_FRAMEWORK} in "
        "integrations.frameworks",
    ):  # fmt: skip
        return absent
    config, why = config_yaml(facts.kueue_config, KUEUE_CONFIG_KEY)
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
    config, _ = config_yaml(facts.kueue_config, KUEUE_CONFIG_KEY)
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
                       fix_read(f"ConfigMaps and Deployments in {KUEUE_NAMESPACE}"))  # fmt: skip
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
    if absent := unread_or_missing(
        facts, check, "appwrapper_deployment", facts.appwrapper_deployment, where,
        f"Deployments in {APPWRAPPER_NAMESPACE}",
        missing="autowrap's manifests bind the Volcano Job ClusterRole and the webhooks' "
        f"matchConditions to the ServiceAccount {APPWRAPPER_NAMESPACE}/{APPWRAPPER_DEPLOYMENT}",
        fix="if the controller runs elsewhere, change the ClusterRoleBinding "
        "autowrap-appwrapper-volcano-jobs and the username in deploy/base/webhooks.yaml "
        "(docs/install.md, Prerequisites)",
    ):  # fmt: skip
        return absent
    assert facts.appwrapper_deployment is not None
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
    if cannot := cannot_read(
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
        config, why = config_yaml(facts.appwrapper_config, "config.yaml")
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
                           "is not installed", f"install Volcano {shown(MIN_VOLCANO)} or later "
                           f"({shown(MIN_VOLCANO_PARTITIONS)} for partitionPolicy)"))  # fmt: skip
    else:
        served = f"batch.volcano.sh {', '.join(batch)}; scheduling.volcano.sh " + (
            ", ".join(scheduling) if scheduling else "none"
        )
        level = OK if scheduling else WARN
        out.append(Finding("prerequisites", "volcano-api", level, served,
                           "" if scheduling else "install Volcano's PodGroup CRD (its scheduler "
                           "needs it)"))  # fmt: skip
    missing = [n for n, hook in facts.volcano_webhooks.items() if hook is None]
    cannot = cannot_read(facts, "prerequisites", "volcano-webhooks", "volcano_webhooks",
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
    out.append(volcano_version(facts))
    out.append(partition_policy(facts))
    return out


def volcano_version(facts: Facts) -> Finding:
    """Volcano's version, from its scheduler's image tag (the scheduler honours the gates)."""
    check = "volcano-version"
    unread = unread_reason(facts, "workloads", "Deployments")
    scheduler = next((w for w in facts.workloads if w.get("kind", "Deployment") == "Deployment"
                      and _is_volcano_scheduler(w)), None)  # fmt: skip
    if unread or scheduler is None:
        return Finding("prerequisites", check, WARN,
                       unread or f"no Deployment {VOLCANO_SCHEDULER} (or running the image "
                       f"{VOLCANO_SCHEDULER_IMAGE}) found: Volcano's version is unknown",
                       f"make sure Volcano {shown(MIN_VOLCANO)} or later schedules the wrapped "
                       "jobs")  # fmt: skip
    where = as_map(scheduler.get("metadata"))
    at = f"{where.get('namespace')}/{where.get('name')}"
    version = image_version(scheduler)
    if version is None:
        return Finding("prerequisites", check, WARN,
                       f"{at}'s image carries no version tag (a digest?): Volcano's version is "
                       "unknown", f"make sure Volcano is {shown(MIN_VOLCANO)} or later")  # fmt: skip
    if version < MIN_VOLCANO:
        return Finding("prerequisites", check, FAIL,
                       f"Volcano {shown(version)} ({at}): its scheduler does not skip gated tasks, "
                       "so adopt mode's pods could be placed before Kueue admits them",
                       f"upgrade Volcano to {shown(MIN_VOLCANO)} or later, or set mode: Redirect "
                       "in every policy until then")  # fmt: skip
    partitions = "" if version >= MIN_VOLCANO_PARTITIONS else (
        f"; tasks[].partitionPolicy needs {shown(MIN_VOLCANO_PARTITIONS)}"
    )  # fmt: skip
    return Finding("prerequisites", check, OK, f"Volcano {shown(version)} ({at}){partitions}")


def _is_volcano_scheduler(workload: Any) -> bool:
    if as_map(workload.get("metadata")).get("name") == VOLCANO_SCHEDULER:
        return True
    containers = as_list(as_map(as_map(as_map(workload.get("spec")).get("template"))
                                .get("spec")).get("containers"))  # fmt: skip
    return any(VOLCANO_SCHEDULER_IMAGE in str(as_map(c).get("image") or "") for c in containers)


def partition_policy(facts: Facts) -> Finding:
    check = "volcano-partition-policy"
    wants = sorted(p.name for p in (facts.policies.policies if facts.policies else ())
                   if p.spec.topology.partition_default is not None)  # fmt: skip
    unread = unread_reason(facts, "volcano_job_crd", "CRD jobs.batch.volcano.sh")
    if unread or facts.volcano_job_crd is None:
        level = WARN if wants else OK
        text = unread or "CRD jobs.batch.volcano.sh not found"
        return Finding("prerequisites", check, level,
                       f"{text}: partitionPolicy support unknown",
                       fix_read("CustomResourceDefinitions") if wants else "")  # fmt: skip
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
    if cannot := cannot_read(facts, "prerequisites", "cert-manager", "certificate", what,
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
