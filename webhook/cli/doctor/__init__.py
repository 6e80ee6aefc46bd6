"""``autowrap doctor``: what a live cluster must hold for autowrap to work, judged from what was read.

Every real cluster differs from the one autowrap is tested against somewhere: an older Kueue,
the AppWrapper integration left out of Kueue's configuration, ``AdmissionGatedBy`` off, a
caBundle that drifted, a namespace without its LocalQueue. Each check here turns one such
assumption into a line: ``ok``, ``warn`` or ``fail``, what was found, and the fix (with the
command that applies it, where one command does). Pure: ``webhook.cli.diagnose`` reads the
cluster into :class:`Facts` with the user's kubeconfig; this package only judges them. What
could not be read is said, never assumed.

One module per section of the output (``prerequisites``; ``itself``, ``certificates`` and
``identities``; ``namespaces``), over the facts and names they share (``facts``) and the findings and report
they make (``findings``); :func:`judge` runs them all, in the order they are printed.
"""

from __future__ import annotations

from webhook.cli.doctor.certificates import ca_bundles, verify
from webhook.cli.doctor.facts import (
    ADMISSION_GATED_BY,
    ADMISSION_POLICIES,
    APPWRAPPER_CONFIGMAP,
    APPWRAPPER_DEPLOYMENT,
    APPWRAPPER_FRAMEWORK,
    APPWRAPPER_NAMESPACE,
    CERT_EXPIRY_WARN_DAYS,
    CERT_MANAGER_INJECT,
    KUEUE_CONFIG_KEY,
    KUEUE_CONFIGMAP,
    KUEUE_DEPLOYMENT,
    KUEUE_NAMESPACE,
    MUTATING,
    MUTATING_WEBHOOKS,
    NAMED,
    NETWORK_POLICY,
    POLICIES_CONFIGMAP,
    SELF_MANAGED_CALLS,
    SELF_MANAGED_FLAG,
    SERVING_SECRET,
    VALIDATING,
    VALIDATING_WEBHOOKS,
    VOLCANO_WEBHOOKS,
    WRAP_WEBHOOKS,
    Facts,
    Replica,
    Version,
    container_args,
    image_version,
    parse_version,
    shown,
)
from webhook.cli.doctor.findings import FAIL, LEVELS, OK, WARN, Finding, render, report, worst
from webhook.cli.doctor.identities import controller_identities, pod_creators
from webhook.cli.doctor.itself import (
    COMPONENT_CREATE,
    FORBIDDEN,
    OPTIONAL,
    access,
    admission_policies,
    endpoints,
    lease,
    owner_references,
    running,
    self_managed,
    webhook_configurations,
)
from webhook.cli.doctor.namespaces import policies
from webhook.cli.doctor.prerequisites import (
    admission_gated_by,
    appwrapper_controller,
    appwrapper_crd,
    appwrapper_settings,
    cert_manager,
    kubernetes_version,
    kueue_api,
    kueue_integration,
    kueue_version,
    partition_policy,
    volcano,
)
from webhook.cli.doctor.reach import network_policy, submitters


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
    out.append(network_policy(facts))
    out += ca_bundles(facts)
    out.append(lease(facts))
    out += access(facts)
    if (references := owner_references(facts)) is not None:
        out.append(references)
    out += controller_identities(facts)
    out.append(submitters(facts))
    out += policies(facts)
    return out


__all__ = [
    "ADMISSION_GATED_BY",
    "ADMISSION_POLICIES",
    "APPWRAPPER_CONFIGMAP",
    "APPWRAPPER_DEPLOYMENT",
    "APPWRAPPER_FRAMEWORK",
    "APPWRAPPER_NAMESPACE",
    "CERT_EXPIRY_WARN_DAYS",
    "CERT_MANAGER_INJECT",
    "COMPONENT_CREATE",
    "FAIL",
    "FORBIDDEN",
    "Facts",
    "Finding",
    "KUEUE_CONFIGMAP",
    "KUEUE_CONFIG_KEY",
    "KUEUE_DEPLOYMENT",
    "KUEUE_NAMESPACE",
    "LEVELS",
    "MUTATING",
    "MUTATING_WEBHOOKS",
    "NETWORK_POLICY",
    "NAMED",
    "OK",
    "OPTIONAL",
    "POLICIES_CONFIGMAP",
    "Replica",
    "SELF_MANAGED_CALLS",
    "SELF_MANAGED_FLAG",
    "SERVING_SECRET",
    "VALIDATING",
    "VALIDATING_WEBHOOKS",
    "VOLCANO_WEBHOOKS",
    "Version",
    "WARN",
    "WRAP_WEBHOOKS",
    "access",
    "admission_gated_by",
    "admission_policies",
    "appwrapper_controller",
    "appwrapper_crd",
    "appwrapper_settings",
    "ca_bundles",
    "cert_manager",
    "container_args",
    "controller_identities",
    "endpoints",
    "image_version",
    "judge",
    "kubernetes_version",
    "kueue_api",
    "kueue_integration",
    "kueue_version",
    "lease",
    "owner_references",
    "parse_version",
    "partition_policy",
    "pod_creators",
    "policies",
    "render",
    "report",
    "running",
    "self_managed",
    "shown",
    "verify",
    "volcano",
    "webhook_configurations",
    "worst",
]
