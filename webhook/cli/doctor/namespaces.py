"""Doctor's third section: the policies against the cluster. Every namespace (or ``-n NS``) is
matched as admission matches it, and judged for its label, its LocalQueues and their
ClusterQueues, and whether autowrap's webhooks reach it at all."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from webhook.cli.doctor.facts import (
    POLICIES_CONFIGMAP,
    WRAP_WEBHOOKS,
    Facts,
    Obj,
    cannot_read,
    fix_read,
    hooks_of,
    unread_reason,
)
from webhook.cli.doctor.findings import FAIL, OK, WARN, Finding
from webhook.core import queues
from webhook.core.policy import LabelSelector, Match, WrapMode
from webhook.model import names, objects
from webhook.model.objects import as_list, as_map


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
    return [as_map(h).get("namespaceSelector") for name, h in hooks_of(mutating).items()
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
                        unread_reason(facts, "policies", f"ConfigMap {facts.install_namespace}/"
                                f"{POLICIES_CONFIGMAP}") or f"no ConfigMap {facts.install_namespace}/"
                        f"{POLICIES_CONFIGMAP}: the policies are unknown",
                        "apply the release file again, or your policy ConfigMap")]  # fmt: skip
    out = [Finding("policies", "policy-set", OK,
                   f"{len(facts.policies.policies)} policies: "
                   + ", ".join(p.name for p in facts.policies.policies))]  # fmt: skip
    for key, what in (("namespaces", "Namespaces"), ("local_queues", "LocalQueues")):
        if cannot := cannot_read(facts, "policies", key.replace("_", "-"), key, what, what):
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
        unread = unread_reason(facts, f"clusterqueue/{cq_name}", f"ClusterQueue {cq_name!r}")
        return Finding("policies", "cluster-queue", WARN if unread else FAIL,
                       unread or f"{label} points at ClusterQueue {cq_name!r}, which does not "
                       "exist: its jobs are never admitted",
                       fix_read("ClusterQueues") if unread else f"create ClusterQueue "
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
