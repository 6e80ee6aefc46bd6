"""What the cluster does with a document around autowrap's admission, said offline.

``engine.admit`` judges what reaches the webhooks. Before that, kubectl and the API server
refuse what cannot be decoded (a label YAML read as a boolean, a field the CRD does not name);
and the webhooks' selectors decide what reaches autowrap at all (``deploy/base/webhooks.yaml``:
unlabelled objects only from namespaces labelled ``autowrap.io/wrap=Always``; only Volcano Jobs,
Pods and AppWrappers). ``autowrap check``/``render``/``explain``/``test`` say both, so that an
offline verdict is the cluster's. Pure.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from typing import Any

from webhook.cli.summary import Finding
from webhook.core import engine, kinds
from webhook.core.policy import WrapMode
from webhook.model import crdschema, names, objects, podschema
from webhook.model.fields import LABELS, ROOT, Severity, Violation

# The namespace label the "*-always" webhook entries select (deploy/base/webhooks.yaml,
# namespaceSelector autowrap.io/wrap In [Always]): without it, unlabelled objects never reach
# autowrap, whatever the policy says.
ALWAYS_VALUE = "Always"
NAMESPACE_ALWAYS = f"{names.WRAP_LABEL}={ALWAYS_VALUE}"

# Kinds with no namespace (kubectl api-resources --namespaced=false), as manifests carry them.
CLUSTER_SCOPED = frozenset(
    {
        "Namespace", "Node", "PersistentVolume", "ClusterRole", "ClusterRoleBinding",
        "CustomResourceDefinition", "StorageClass", "PriorityClass", "IngressClass",
        "RuntimeClass", "CSIDriver", "CSINode", "VolumeAttachment", "APIService",
        "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration",
        "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",
        "MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding", "ComponentStatus",
        "CertificateSigningRequest", "FlowSchema", "PriorityLevelConfiguration",
        "ClusterIssuer", "ClusterQueue", "ResourceFlavor", "Cohort", "Topology",
        "WorkloadPriorityClass", "HyperNode", "Queue",
    }
)  # fmt: skip

# The label and annotation keys a user writes for autowrap or Kueue; a key close to one of
# these (and not one of them) is almost always a typo of it.
USER_LABELS = (names.WRAP_LABEL, names.QUEUE_LABEL, names.PRIORITY_LABEL)
USER_ANNOTATIONS = (
    names.MASTER_TASK_ANNOTATION,
    names.MASTER_PORT_ANNOTATION,
    names.NPROC_ANNOTATION,
    names.EXCLUDE_TASKS_ANNOTATION,
)
# Kueue's other keys users write on jobs and pods (kueue pkg/controller/constants and the
# pod-group, topology and elastic-job docs): never taken for a typo of the queue label.
KUEUE_KEYS = tuple(
    f"kueue.x-k8s.io/{name}"
    for name in (
        "pod-group-name", "pod-group-total-count", "pod-group-fast-admission",
        "pod-group-serving", "retriable-in-group", "prebuilt-workload-name",
        "max-exec-time-seconds", "job-min-parallelism", "job-completions-equal-parallelism",
        "podset-required-topology", "podset-preferred-topology",
        "podset-unconstrained-topology", "podset-slice-required-topology",
        "podset-slice-size", "podset-group-name", "elastic-job", "workload-slicing-enabled",
        "safe-to-forcefully-terminate", "multikueue-origin", "queue-name", "priority-class",
    )
)  # fmt: skip
_KNOWN_KEYS = frozenset(
    [
        *KUEUE_KEYS,
        *(
            value
            for value in vars(names).values()
            if isinstance(value, str) and value.startswith((names.PREFIX, "kueue.x-k8s.io/"))
        ),
    ]
)


def is_cluster_scoped(obj: Mapping[str, Any]) -> bool:
    return obj.get("kind") in CLUSTER_SCOPED


def refusals(obj: Mapping[str, Any]) -> list[Violation]:
    """What kubectl or the API server refuses before any webhook sees the object: label and
    annotation values that are not strings, fields its CRD (or ObjectMeta) does not name, and
    with them the unknown or mistyped fields of its pod templates, which the same strict
    decoding refuses in the same answer (every error at once, not in rounds). A pod template's
    fields alone are left to autowrap's own rule (``rules.pod_templates``), which says them
    beside everything else autowrap finds."""
    found = crdschema.unknown_fields(obj)
    if found:
        found += _template_refusals(obj)
    return found


def _template_refusals(obj: Mapping[str, Any]) -> list[Violation]:
    adapter = kinds.find(obj.get("apiVersion"), obj.get("kind"))
    if adapter is None:
        return []
    found: list[Violation] = []
    for group in adapter.pod_groups(dict(obj)):
        spec = objects.as_map(group.template).get("spec")
        if isinstance(spec, Mapping):
            found += [
                v
                for v in podschema.check_spec(spec, group.template_path.child("spec"))
                if v.severity is Severity.ERROR
            ]
    return found


def namespace_labels(documents: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, str]]:
    """The labels of every Namespace the input itself defines (kustomize output often carries
    the team's Namespace with its jobs), by name, with the name label the API server adds."""
    found: dict[str, dict[str, str]] = {}
    for obj in documents:
        if obj.get("apiVersion") == "v1" and obj.get("kind") == "Namespace":
            name = objects.name_of(obj)
            if name:
                labels = {k: v for k, v in objects.labels_of(obj).items() if isinstance(v, str)}
                found[name] = {**labels, "kubernetes.io/metadata.name": name}
    return found


def wrapped_kinds() -> str:
    """``batch.volcano.sh/v1alpha1 Job, v1 Pod``: what autowrap wraps, as users write it."""
    return ", ".join(f"{a.api_version} {a.kind}" for a in kinds.KINDS)


def hints(
    obj: Mapping[str, Any], outcome: engine.Outcome, labels_of_namespace: Mapping[str, str]
) -> list[Finding]:
    """Warnings about what the cluster will do that autowrap's admission cannot see."""
    if obj.get("apiVersion") == "v1" and obj.get("kind") == "Namespace":
        return _namespace_label(obj)
    return [
        *_needs_namespace_label(obj, outcome, labels_of_namespace),
        *_not_wrappable(obj),
        *_near_misses(obj),
    ]


def _needs_namespace_label(
    obj: Mapping[str, Any], outcome: engine.Outcome, labels_of_namespace: Mapping[str, str]
) -> list[Finding]:
    match = outcome.match
    if (
        match is None
        or match.policy.spec.wrap is not WrapMode.ALWAYS
        or outcome.action is not engine.Action.WRAP
        or labels_of_namespace.get(names.WRAP_LABEL) == ALWAYS_VALUE
    ):
        return []
    adapter = kinds.find(obj.get("apiVersion"), obj.get("kind"))
    labels = objects.labels_of(obj)
    if labels.get(names.WRAP_LABEL) == "true" or (
        adapter is not None and adapter.queue_label_requests_wrap and names.QUEUE_LABEL in labels
    ):
        return []  # opted in itself: the opt-in webhooks send it from any namespace
    namespace = labels_of_namespace.get("kubernetes.io/metadata.name", "NAMESPACE")
    return [
        Finding(
            str(ROOT.child("metadata", "namespace")),
            f"policy {match.named_for('wrap')!r} says wrap: Always, but the webhooks send unlabelled "
            f"objects to autowrap only from namespaces labelled {NAMESPACE_ALWAYS}; in a "
            f"namespace without it this {obj.get('kind')} is created as is and runs outside "
            f"Kueue's quota. Label the namespace (kubectl label namespace {namespace} "
            f"{NAMESPACE_ALWAYS}) and give the label here (-l {NAMESPACE_ALWAYS}; "
            f'namespaceLabels in a policy test), or label the object {names.WRAP_LABEL}: "true"',
        )
    ]


def _namespace_label(namespace: Mapping[str, Any]) -> list[Finding]:
    """On a Namespace, ``autowrap.io/wrap`` means something only as ``Always``."""
    value = objects.labels_of(namespace).get(names.WRAP_LABEL)
    if value is None or value == ALWAYS_VALUE:
        return []
    return [
        Finding(
            str(LABELS.key(names.WRAP_LABEL)),
            f"{value!r} on a Namespace means nothing to the webhooks, which select namespaces "
            f"labelled {NAMESPACE_ALWAYS} (for policies with wrap: Always); did you mean "
            f"{names.WRAP_LABEL}: {ALWAYS_VALUE}?",
        )
    ]


def _not_wrappable(obj: Mapping[str, Any]) -> list[Finding]:
    """A labelled object autowrap never sees: a kind it does not wrap, or a wrapped kind at an
    apiVersion the CRD does not serve."""
    api_version, kind = obj.get("apiVersion"), obj.get("kind")
    if kinds.find(api_version, kind) is not None or objects.is_appwrapper(obj):
        return []
    if not isinstance(api_version, str) or not isinstance(kind, str):
        return []
    group, _, version = api_version.rpartition("/")
    served = crdschema.served_versions(group, kind)
    if served and version not in served:
        use = f"{group}/{served[0]}"
        return [
            Finding(
                "apiVersion",
                f"{group} serves {kind} only as {', '.join(served)}: kubectl answers no matches "
                f'for kind "{kind}" in version "{api_version}", and autowrap wraps only '
                f"{wrapped_kinds()}; use apiVersion: {use}",
            )
        ]
    wrap = objects.labels_of(obj).get(names.WRAP_LABEL)
    if wrap is None or wrap == "false":
        return []
    return [
        Finding(
            str(LABELS.key(names.WRAP_LABEL)),
            f"asks to be wrapped, but autowrap wraps only {wrapped_kinds()} (and completes "
            f"{names.APPWRAPPER_API_VERSION} AppWrappers), not {api_version} {kind}: the "
            "cluster creates it as it is, outside autowrap and its AppWrapper; wrap its "
            "workload in an AppWrapper yourself, or remove the label",
        )
    ]


def _near_misses(obj: Mapping[str, Any]) -> list[Finding]:
    found: list[Finding] = []
    for key in objects.labels_of(obj):
        found += _near_miss(str(LABELS.key(key)), key, USER_LABELS, "label")
    for key in objects.annotations_of(obj):
        path = str(ROOT.child("metadata", "annotations").key(key))
        found += _near_miss(path, key, USER_ANNOTATIONS, "annotation")
    wrap = objects.labels_of(obj).get(names.WRAP_LABEL)
    if isinstance(wrap, str) and wrap not in ("true", "false"):
        meant = {"true": "true", "yes": "true", "y": "true", "on": "true", "1": "true"}.get(
            wrap.strip().lower(),
            "false" if wrap.strip().lower() in ("false", "no", "n", "off", "0") else "",
        )
        hint = f'did you mean {names.WRAP_LABEL}: "{meant}"?' if meant else 'use "true" or "false"'
        found.append(
            Finding(
                str(LABELS.key(names.WRAP_LABEL)),
                f'{wrap!r} means nothing to autowrap, which reads only "true" (wrap it) and '
                f'"false" (leave it out), lower case; {hint}',
            )
        )
    return found


def _near_miss(path: str, key: str, known: Sequence[str], what: str) -> list[Finding]:
    """A key with a known prefix and a name close to a known one (``autowrap.io/wrapp``,
    ``kueue.x-k8s.io/queue``), or a known name under a prefix close to its own
    (``autowrap/wrap``)."""
    if key in _KNOWN_KEYS:
        return []
    prefix, _, name = key.rpartition("/")
    near: list[tuple[float, int, str]] = []  # (closeness, -position, candidate): the closest
    for position, candidate in enumerate(known):
        known_prefix, _, known_name = candidate.rpartition("/")
        if prefix == known_prefix:
            score = _ratio(name, known_name)
            if score >= 0.6 or _cut(name, known_name):
                near.append((max(score, 0.6), -position, candidate))
        elif name == known_name and _ratio(prefix, known_prefix) >= 0.8:
            near.append((_ratio(prefix, known_prefix), -position, candidate))
    if not near:
        return []
    candidate = max(near)[2]
    return [
        Finding(
            path,
            f"{key!r} is no {what} autowrap or Kueue reads, so it does nothing here; "
            f"did you mean {candidate}?",
        )
    ]


def _ratio(a: str, b: str) -> float:
    return difflib.SequenceMatcher(None, a, b).ratio()


def _cut(name: str, known: str) -> bool:
    """``nproc`` for ``nproc-per-node``: a known name cut short at a word."""
    return len(name) >= 4 and known.startswith(name + "-")


def unchanged_reason(obj: Mapping[str, Any], outcome: engine.Outcome) -> str | None:
    """The reason an unchanged object is given, where the engine's leaves out what the user
    needs: the group and version of a kind autowrap does not wrap; for a Pod with only the
    queue label, who takes it instead."""
    if outcome.action is not engine.Action.PASS or outcome.result is None:
        return None
    api_version, kind = obj.get("apiVersion"), obj.get("kind")
    adapter = kinds.find(api_version, kind)
    if adapter is None and not objects.is_appwrapper(obj):
        return f"autowrap does not wrap {api_version} {kind}"
    labels = objects.labels_of(obj)
    kind = str(kind)
    if (
        adapter is not None
        and not adapter.queue_label_requests_wrap
        and names.QUEUE_LABEL in labels
        and names.WRAP_LABEL not in labels
        and outcome.reason.startswith("no label")
    ):
        return (
            f"{outcome.reason}; {names.QUEUE_LABEL} alone leaves a {kind} to Kueue's own "
            f"{kind.lower()} integration, without autowrap's env or AppWrapper: add "
            f'{names.WRAP_LABEL}: "true" for those'
        )
    return None


def always_needs_label(policy: str, namespace: str, labels: Mapping[str, str]) -> str:
    """What ``explain -n NS`` adds under a ``wrap: Always`` policy: the namespace label the
    webhooks need, and whether -l gave it."""
    if labels.get(names.WRAP_LABEL) == ALWAYS_VALUE:
        return (
            f"wrap: Always: the namespace label {NAMESPACE_ALWAYS} is given, so the webhooks "
            "send autowrap every Volcano Job and Pod created here"
        )
    return (
        f"wrap: Always takes effect only where the namespace is labelled {NAMESPACE_ALWAYS}: the "
        "webhooks send unlabelled objects to autowrap only from such namespaces, and elsewhere "
        f"they run outside Kueue's quota; kubectl label namespace {namespace} {NAMESPACE_ALWAYS} "
        f"(and pass -l {NAMESPACE_ALWAYS} here once it is)"
    )
