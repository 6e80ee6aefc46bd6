"""Doctor's second section: autowrap itself as installed (its Deployment, webhook
configurations, ValidatingAdmissionPolicies, Service and endpoints, Lease and RBAC). The
serving certificate is judged in ``certificates``, the controllers' identities in
``identities``."""

from __future__ import annotations

import datetime

from webhook import __version__
from webhook.cli.doctor.facts import (
    ADMISSION_POLICIES,
    MUTATING,
    MUTATING_WEBHOOKS,
    SELF_MANAGED_FLAG,
    VALIDATING,
    VALIDATING_WEBHOOKS,
    Facts,
    cannot_read,
    container_args,
    hooks_of,
    image_version,
    shown,
    unread_or_missing,
    user_rbac_check_off,
)
from webhook.cli.doctor.findings import FAIL, OK, WARN, Finding
from webhook.model import names
from webhook.model.objects import as_list, as_map


def self_managed(facts: Facts) -> bool:
    return SELF_MANAGED_FLAG in container_args(facts.deployment)


def running(facts: Facts) -> Finding:
    """autowrap's Deployment: which version runs, how many replicas are ready, and whether
    this command's checks are the ones for that version."""
    ns = facts.install_namespace
    where = f"Deployment {ns}/{names.SERVICE_NAME}"
    if absent := unread_or_missing(
        facts, "deployment", "deployment", facts.deployment, where, f"Deployments in {ns}",
        missing=f"autowrap is not installed in {ns}",
        fix="install it (docs/install.md), or pass --install-namespace",
        level=FAIL, section="autowrap",
    ):  # fmt: skip
        return absent
    assert facts.deployment is not None
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


def webhook_configurations(facts: Facts) -> list[Finding]:
    out = []
    for name, configuration, expected in ((MUTATING, facts.mutating, MUTATING_WEBHOOKS),
                                          (VALIDATING, facts.validating, VALIDATING_WEBHOOKS)):  # fmt: skip
        cannot = cannot_read(facts, "autowrap", "webhook-configurations", name, name,
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
        hooks = hooks_of(configuration)
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
    if cannot := cannot_read(
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


def endpoints(facts: Facts) -> list[Finding]:
    ns = facts.install_namespace
    service = f"Service {ns}/{names.SERVICE_NAME}"
    if absent := unread_or_missing(
        facts, "service", "service", facts.service, service, f"Services in {ns}",
        missing="the webhooks call nothing", fix="apply the release file again",
        level=FAIL, section="autowrap",
    ):  # fmt: skip
        return [absent]
    if cannot := cannot_read(facts, "autowrap", "endpoints", "endpoints",
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
    if absent := unread_or_missing(
        facts, "lease", "lease", facts.lease, where, f"Leases in {facts.install_namespace}",
        missing="no controller replica ever led, so nothing is adopted and no gated pod is "
        "released",
        fix=f"kubectl -n {facts.install_namespace} logs deployment/{names.SERVICE_NAME}",
        level=FAIL, section="autowrap",
    ):  # fmt: skip
        return absent
    assert facts.lease is not None
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
    if cannot := cannot_read(
        facts, "autowrap", "rbac", "access", "SubjectAccessReviews", "(create) SubjectAccessReviews"
    ):
        return [cannot]
    missing, optional_missing = [], []
    rbac_check_off = user_rbac_check_off(facts)
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


def owner_references(facts: Facts) -> Finding | None:
    """Whether adoption's controller reference will be accepted: where the cluster enforces
    OwnerReferencesPermissionEnforcement, autowrap needs the component's delete grant, and
    without it every adoption stops there (docs/install.md, Prerequisites)."""
    state = facts.owner_references
    component = "deploy/components/owner-references-enforcement"
    if not state:
        return None
    if state == "granted":
        return Finding("autowrap", "owner-references", OK,
                       f"autowrap may set the owner references adoption sets ({component} "
                       "is installed)")  # fmt: skip
    if state == "not enforced":
        return Finding("autowrap", "owner-references", OK,
                       "this cluster does not enforce OwnerReferencesPermissionEnforcement: "
                       f"{component} is not needed")  # fmt: skip
    if state == "enforced":
        return Finding("autowrap", "owner-references", FAIL,
                       "this cluster enforces OwnerReferencesPermissionEnforcement and "
                       "autowrap may not delete Volcano Jobs and Pods, so it cannot record an "
                       "AppWrapper as the owner of what it adopts: every adopted job would "
                       "stay queued",
                       f"kubectl apply -f {component}/rbac.yaml (or add {component} to your "
                       "kustomization's components:)")  # fmt: skip
    return Finding("autowrap", "owner-references", WARN,
                   "could not tell whether the cluster enforces "
                   f"OwnerReferencesPermissionEnforcement ({state.removeprefix('unknown: ')})",
                   "run autowrap doctor as a user who may impersonate ServiceAccounts (a "
                   f"cluster administrator), or install {component} where the plugin is on")  # fmt: skip
