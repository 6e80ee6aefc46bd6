"""The admission decision, as one pure function: ``admit(obj, context) -> Outcome``.

Three outcomes: a wrap candidate becomes an AppWrapper; an AppWrapper is completed; anything
else passes unchanged. The server, ``autowrap render``/``check`` and the tests all call
``admit``; there is no second implementation. Findings are data (``Violation``); whether they
deny or only warn is decided by the policy's enforcement in ``Outcome.verdict``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from webhook.core import builder, kinds, workload
from webhook.core.plumbing import env as env_plumbing
from webhook.core.plumbing import topology as topology_plumbing
from webhook.core.policy import Enforcement, Match, PolicySet, PolicySpec, WrapMode
from webhook.core.rules import accelerators as accelerator_rules
from webhook.core.rules import annotations as annotation_rules
from webhook.core.rules import env as env_rules
from webhook.core.rules import (
    fault_tolerance,
    partitions,
    pod_templates,
    podsets,
    queue,
    rendezvous,
)
from webhook.core.rules import launcher as launcher_rules
from webhook.core.rules import names as name_rules
from webhook.core.rules import size as size_rules
from webhook.core.rules import topology as topology_rules
from webhook.core.workload import KindAdapter, PodGroup
from webhook.model import names, objects
from webhook.model.fields import (
    ANNOTATIONS,
    LABELS,
    METADATA,
    SPEC,
    FieldPath,
    Severity,
    Violation,
    error,
)
from webhook.model.objects import Obj, as_list, as_map, int_or_none

COMPONENTS = SPEC.child("components")


class Action(StrEnum):
    PASS = "pass"
    WRAP = "wrap"
    COMPLETE = "complete"


@dataclass(frozen=True)
class Context:
    """What the engine knows about a submission besides the object itself."""

    policies: PolicySet
    namespace: str = "default"
    namespace_labels: Mapping[str, str] = field(default_factory=dict)
    user: str = ""
    uid: str = ""


@dataclass(frozen=True)
class Verdict:
    denied: bool
    errors: tuple[str, ...]
    warnings: tuple[str, ...]


@dataclass(frozen=True)
class Outcome:
    action: Action
    result: Obj | None
    findings: tuple[Violation, ...] = ()
    match: Match | None = None
    reason: str = ""

    @property
    def errors(self) -> tuple[Violation, ...]:
        return tuple(v for v in self.findings if v.severity is Severity.ERROR)

    @property
    def warnings(self) -> tuple[Violation, ...]:
        return tuple(v for v in self.findings if v.severity is Severity.WARNING)

    @property
    def audit(self) -> bool:
        return self.match is not None and self.match.policy.spec.enforcement is Enforcement.AUDIT

    def verdict(self) -> Verdict:
        """Audit enforcement turns every rejection into a warning, here and nowhere else."""
        errors = tuple(v.render() for v in self.errors)
        warnings = tuple(v.render() for v in self.warnings)
        # An object too large to build has no result to let through, whatever the enforcement.
        if self.audit and errors and self.result is not None:
            return Verdict(False, (), tuple(f"(audit) {e}" for e in errors) + warnings)
        return Verdict(bool(errors), errors, warnings)


# --- the entry point ---------------------------------------------------------------------------


def admit(obj: object, context: Context, *, check: bool = True) -> Outcome:
    """The outcome for one submitted object; ``check=False`` skips the findings, for callers
    that only want the result (the mutating webhook: validation reports them)."""
    if not isinstance(obj, Mapping):
        return Outcome(Action.PASS, None, reason="not an object")
    api_version, kind = obj.get("apiVersion"), obj.get("kind")
    match = context.policies.match(context.namespace, context.namespace_labels)
    if objects.is_appwrapper(obj):
        if match is None:
            return Outcome(Action.PASS, dict(obj), reason=_uncovered(context.namespace))
        return _complete_submitted(dict(obj), match, check=check)
    adapter = kinds.find(api_version, kind)
    if adapter is None:
        return Outcome(Action.PASS, dict(obj), match=match, reason=f"autowrap does not wrap {kind}")
    why_not = _not_a_candidate(obj, adapter, match, context)
    if why_not or match is None:
        return Outcome(Action.PASS, dict(obj), match=match, reason=why_not)
    return wrap(dict(obj), adapter, match, context, check=check)


def _uncovered(namespace: str) -> str:
    return f"namespace {namespace!r} is not covered by any autowrap policy"


def _not_a_candidate(
    obj: Mapping[str, Any], adapter: KindAdapter, match: Match | None, context: Context
) -> str:
    if match is None:
        return _uncovered(context.namespace)
    spec = match.policy.spec
    always = spec.wrap is WrapMode.ALWAYS
    owner = _controller_owner(obj, adapter)
    if owner is not None and not (always and context.user):
        return f"it is created by its controller ({owner}): such objects are never wrapped"
    # Under wrap: Always, what a user can write on an object (an ownerReference, the AppWrapper
    # label, wrap=false) does not exempt it: the object stays a candidate and
    # ``bypass_findings`` refuses it. Under OptIn, not asking is enough to stay out.
    if not always and as_list(as_map(obj.get("metadata")).get("ownerReferences")):
        return "it has ownerReferences: objects created by controllers are never wrapped"
    labels = objects.labels_of(obj)
    if labels.get(names.ADOPTION_LABEL) == names.ADOPTION_PENDING:
        return ""  # prepared for adoption by the mutating webhook (its pod label is its own)
    if names.APPWRAPPER_LABEL in labels and (
        not always or context.user == names.APPWRAPPER_CONTROLLER_USER
    ):
        return f"it already belongs to AppWrapper {labels[names.APPWRAPPER_LABEL]!r}"
    wrap = labels.get(names.WRAP_LABEL)
    if wrap == "false" and (not always or spec.allow_opt_out):
        return f"label {names.WRAP_LABEL}=false opts it out"
    if wrap == "true":
        return ""
    if adapter.queue_label_requests_wrap and names.QUEUE_LABEL in labels:
        return ""
    if always:
        return ""
    triggers = f"label {names.WRAP_LABEL}=true"
    if adapter.queue_label_requests_wrap:
        triggers += f" or {names.QUEUE_LABEL}"
    return f"no {triggers}, and policy {match.named_for('wrap')!r} wraps only on request"


def _owner_group(ref: Mapping[str, Any]) -> str:
    api_version = ref.get("apiVersion")
    return api_version.rpartition("/")[0] if isinstance(api_version, str) else ""


def _controller_owner(obj: Mapping[str, Any], adapter: KindAdapter) -> str | None:
    """The controller ownerReference (``controller: true``) naming a kind that really creates
    objects of this kind (``adapter.owner_kinds``), as "Kind name"; None without one."""
    for ref in as_list(as_map(obj.get("metadata")).get("ownerReferences")):
        ref = as_map(ref)
        if ref.get("controller") is True and (_owner_group(ref), ref.get("kind")) in (
            adapter.owner_kinds
        ):
            return f"{ref.get('kind')} {ref.get('name')}"
    return None


def bypass_findings(
    obj: Mapping[str, Any], adapter: KindAdapter, match: Match, context: Context
) -> list[Violation]:
    """Under ``wrap: Always``, what a user wrote to keep a candidate out of its AppWrapper (and
    so out of Kueue's quota): each is refused, with its field."""
    spec = match.policy.spec
    if spec.wrap is not WrapMode.ALWAYS:
        return []
    policy = f"policy {match.named_for('wrap')!r} wraps every {adapter.kind} in this namespace"
    found: list[Violation] = []
    borrowed = _controller_owner(obj, adapter)
    if borrowed is not None and context.user:
        # The *-always webhook entries send no request of a controller's own identity
        # (deploy/base/controller-identities.yaml): a request that reaches autowrap with a
        # controller reference was made by someone else, who wrote the reference (any user may
        # name any object they can read; OwnerReferencesPermissionEnforcement asks only for
        # delete on the object created, gc_admission.go).
        found.append(Violation(
            METADATA.child("ownerReferences"),
            f"names {borrowed} as its controller, but user {context.user!r} created it, not "
            f"that {borrowed.split(' ', 1)[0]}'s controller; {policy} (wrap: Always), and only "
            "objects their controller creates are left out. Remove the ownerReference to have "
            "it wrapped (if that user is a controller of this cluster running under another "
            "name, its administrator adds it to deploy/base/controller-identities.yaml)",
            rule="opt-out",
        ))  # fmt: skip
    elif borrowed is None:
        refs = as_list(as_map(obj.get("metadata")).get("ownerReferences"))
        known = ", ".join(sorted(f"{k} ({g or 'core'})" for g, k in adapter.owner_kinds))
        for i, ref in enumerate(refs):
            ref = as_map(ref)
            found.append(Violation(
                METADATA.child("ownerReferences").index(i),
                f"names {ref.get('kind')!r} ({ref.get('apiVersion')}), which is not a controller "
                f"that creates {adapter.kind}s; {policy} (wrap: Always), and only a controller "
                f"ownerReference of {known} exempts one; remove the ownerReference",
                rule="opt-out",
            ))  # fmt: skip
    labels = objects.labels_of(obj)
    pending = labels.get(names.ADOPTION_LABEL) == names.ADOPTION_PENDING
    if (
        not pending
        and names.APPWRAPPER_LABEL in labels
        and context.user != names.APPWRAPPER_CONTROLLER_USER
    ):
        found.append(Violation(
            LABELS.key(names.APPWRAPPER_LABEL),
            f"only the AppWrapper controller ({names.APPWRAPPER_CONTROLLER_USER}) may create "
            f"objects with this label; {policy} (wrap: Always); remove the label",
            rule="opt-out",
        ))  # fmt: skip
    if labels.get(names.WRAP_LABEL) == "false" and not spec.allow_opt_out:
        found.append(Violation(
            LABELS.key(names.WRAP_LABEL),
            f"{policy} (wrap: Always) and does not allow opting out (allowOptOut is not set); "
            "remove the label, or ask your platform team for allowOptOut",
            rule="opt-out",
        ))  # fmt: skip
    return found


# --- one workload: findings and plumbing ---------------------------------------------------------


@dataclass(frozen=True)
class _Prepared:
    groups: list[PodGroup]
    master: PodGroup | None
    plan: env_plumbing.Plan | None
    dns_patched: Obj
    extra: tuple[Obj, ...]


def _prepare(obj: Obj, adapter: KindAdapter, policy: PolicySpec) -> _Prepared:
    groups = adapter.pod_groups(obj)
    master = adapter.master_group(obj, groups)
    if master is None:
        return _Prepared(groups, None, None, obj, ())
    obj_annotations = objects.annotations_of(obj)
    port = env_plumbing.master_port(obj_annotations, policy.master_port)
    dns = adapter.dns(obj, groups, master, port=port)
    plan = env_plumbing.plan(
        groups,
        master,
        master_addr=dns.master_addr,
        port=port,
        nproc_override=env_plumbing.parse_positive(obj_annotations.get(names.NPROC_ANNOTATION)),
        accelerators=policy.accelerators,
        excluded=env_plumbing.excluded_tasks(obj_annotations.get(names.EXCLUDE_TASKS_ANNOTATION)),
    )
    return _Prepared(groups, master, plan, dns.patched, dns.extra)


def workload_findings(obj: Obj, adapter: KindAdapter, policy: PolicySpec) -> list[Violation]:
    prepared = _prepare(obj, adapter, policy)
    found: list[Violation] = []
    if prepared.plan is not None:
        found += env_rules.check(prepared.plan, extra_reserved=policy.reserved_env)
        found += accelerator_rules.check(prepared.plan)
        found += launcher_rules.check(prepared.plan)
        found += _appended_env_findings(obj, adapter, prepared.groups, prepared.plan)
    found += pod_templates.check(obj, prepared.groups)
    found += partitions.check(prepared.groups)
    found += rendezvous.check(prepared.groups, prepared.master)
    found += name_rules.check(obj, prepared.groups, adapter)
    found += annotation_rules.check(
        objects.annotations_of(obj),
        [g.name for g in prepared.groups],
        master_group=prepared.master.name if prepared.master else None,
    )
    if workload.has_topology(adapter):
        found += topology_rules.check(
            adapter.topology_slots(obj, prepared.groups), max_tier=policy.topology.max_tier
        )
    if workload.has_kind_rules(adapter):
        found += adapter.check(obj)
    return found


def _appended_env_findings(
    obj: Obj, adapter: KindAdapter, groups: list[PodGroup], plan: env_plumbing.Plan
) -> list[Violation]:
    """The env the workload's controller appends to each pod, against autowrap's (nothing for
    kinds whose controller adds none)."""
    additions = workload.pod_additions(adapter, obj, groups)
    if additions is None:
        return []
    return env_rules.check_appended(
        plan, additions, lambda group, index: adapter.pod_name(obj, group, index)
    )


@dataclass(frozen=True)
class Plumbed:
    """A plumbed workload, the objects it needs beside it, and its pod groups (plumbing adds
    env, DNS and topology; it never changes which groups there are or their replicas)."""

    result: Obj
    extra: tuple[Obj, ...]
    groups: list[PodGroup]


def plumb(obj: Obj, adapter: KindAdapter, policy: PolicySpec) -> Plumbed:
    """The workload with env, DNS and topology applied."""
    prepared = _prepare(obj, adapter, policy)
    result = prepared.dns_patched
    if prepared.plan is not None:
        for group_plan in prepared.plan.groups:
            path = group_plan.group.template_path
            template = objects.get(result, path)
            if not isinstance(template, dict):
                continue  # nothing to put env into; the schema rejects such a task anyway
            applied = env_plumbing.apply(template, group_plan)
            if path.parts:
                objects.put(result, path, applied)
            else:
                result = applied
    if workload.has_topology(adapter):
        result = topology_plumbing.apply_defaults(
            result, adapter.topology_slots(result, prepared.groups), policy.topology
        )
    return Plumbed(result, prepared.extra, prepared.groups)


def declared_podsets(groups: Sequence[PodGroup]) -> list[dict[str, Any]]:
    return [
        {"path": g.podset_path, "replicas": g.replicas} for g in groups if g.podset_path is not None
    ]


# --- wrapping a candidate ----------------------------------------------------------------------


def _chosen_queue(obj: Mapping[str, Any], policy: PolicySpec) -> str:
    return (
        objects.labels_of(obj).get(names.QUEUE_LABEL)
        or objects.annotations_of(obj).get(names.QUEUE_ANNOTATION)
        or policy.queue.default
        or ""
    )


def _appwrapper_name(obj: Mapping[str, Any], context: Context, spec_hash: str) -> str:
    # A named object's AppWrapper name depends on its namespace and name only, so a retried
    # request (the apiserver gives every attempt a new uid) finds the same AppWrapper.
    seed = context.namespace if objects.name_of(obj) else (context.uid or spec_hash)
    return builder.appwrapper_name(obj, seed=seed)


@dataclass(frozen=True)
class Candidate:
    """A wrap candidate and what naming and queueing it take, known before (and without)
    building its AppWrapper: all that adopt-mode admission needs to prepare the object."""

    adapter: KindAdapter
    match: Match
    appwrapper_name: str
    queue: str


def wrap_candidate(obj: object, context: Context) -> Candidate | None:
    """The candidate's naming and queueing, or None when ``admit`` would not wrap ``obj`` (or
    when naming needs the AppWrapper's spec hash: an unnamed object without a request uid)."""
    if not isinstance(obj, Mapping):
        return None
    adapter = kinds.find(obj.get("apiVersion"), obj.get("kind"))
    if adapter is None:
        return None
    match = context.policies.match(context.namespace, context.namespace_labels)
    if match is None or _not_a_candidate(obj, adapter, match, context):
        return None
    if match.policy.spec.enforcement is not Enforcement.AUDIT and bypass_findings(
        obj, adapter, match, context
    ):
        return None  # left unprepared: validation refuses it with the findings
    if not objects.name_of(obj) and not context.uid:
        return None
    if too_large_to_build(obj, [(obj, adapter)], match.policy.spec, what="") is not None:
        return None  # left unprepared: validation refuses it, saying how large it would be
    name = _appwrapper_name(obj, context, "")
    return Candidate(adapter, match, name, _chosen_queue(obj, match.policy.spec))


# Below this size (compact JSON) an object is built before it is weighed; above it, what
# plumbing would add is counted first (``too_large_to_build``). Typical submissions weigh a few KiB.
WEIGH_FIRST_BYTES = 64 * 1024


def too_large_to_build(
    obj: Mapping[str, Any],
    workloads: Iterable[tuple[Mapping[str, Any], KindAdapter]],
    policy: PolicySpec,
    *,
    what: str,
) -> Violation | None:
    """Whether ``obj`` plus the env plumbing adds to the containers of its ``workloads`` (``obj``
    itself, or the components of an AppWrapper) is already over etcd's limit: then nothing is
    built, copied or patched for it. The count is a lower bound (DNS, labels and the AppWrapper
    around a workload come on top), so what passes is weighed again, whole, once built."""
    size = size_rules.json_size(obj)
    if size < WEIGH_FIRST_BYTES:
        return None
    plans = [pair for w, adapter in workloads for pair in env_plans(w, adapter, policy)]
    if size + sum(env_plumbing.most_growth(t, plan) for t, plan in plans) <= size_rules.ETCD_LIMIT:
        return None  # fits even if every container gained every entry: no need to count
    added = sum(env_plumbing.growth(t, plan) for t, plan in plans)
    return size_rules.over_limit(size + added, submitted=size, what=what)


def _component_workloads(
    appwrapper: Mapping[str, Any],
) -> list[tuple[Mapping[str, Any], KindAdapter]]:
    found: list[tuple[Mapping[str, Any], KindAdapter]] = []
    for component in as_list(as_map(appwrapper.get("spec")).get("components")):
        template = as_map(as_map(component).get("template"))
        adapter = kinds.find(template.get("apiVersion"), template.get("kind"))
        if adapter is not None:
            found.append((template, adapter))
    return found


def env_plans(
    obj: Mapping[str, Any], adapter: KindAdapter, policy: PolicySpec
) -> list[tuple[Mapping[str, Any], env_plumbing.GroupPlan]]:
    """Each pod template of ``obj`` with the env plan its containers get."""
    prepared = _prepare(dict(obj), adapter, policy)
    if prepared.plan is None:
        return []
    found: list[tuple[Mapping[str, Any], env_plumbing.GroupPlan]] = []
    for group_plan in prepared.plan.groups:
        template = objects.get(obj, group_plan.group.template_path)
        if isinstance(template, Mapping):
            found.append((template, group_plan))
    return found


def wrap(
    obj: Obj, adapter: KindAdapter, match: Match, context: Context, *, check: bool = True
) -> Outcome:
    """The AppWrapper for a wrap candidate under the matched policy, with its findings."""
    policy = match.policy.spec
    what = f"the AppWrapper for this {adapter.kind}"
    too_large = too_large_to_build(obj, [(obj, adapter)], policy, what=what)
    if too_large is not None:
        return Outcome(Action.WRAP, None, (too_large,), match, "too large to store")
    labels = objects.labels_of(obj)
    chosen_queue = _chosen_queue(obj, policy)
    groups = adapter.pod_groups(obj)
    component = builder.clean(obj, [g.template_path for g in groups])
    spec_hash = objects.canonical_hash({"component": component, "queue": chosen_queue})
    name = _appwrapper_name(obj, context, spec_hash)
    if not objects.name_of(component):
        metadata = objects.own_map(component, "metadata")
        metadata["name"] = name
        metadata.pop("generateName", None)

    origin = {
        names.ORIGIN_KIND_ANNOTATION: _origin_kind(adapter),
        names.ORIGIN_NAME_ANNOTATION: objects.name_of(obj) or name,
        names.SPEC_HASH_ANNOTATION: spec_hash,
    }
    if context.user:
        origin[names.REQUESTED_BY_ANNOTATION] = context.user
    appwrapper = builder.enclose(
        component,
        name=name,
        namespace=context.namespace or None,
        queue=chosen_queue,
        priority=labels.get(names.PRIORITY_LABEL),
        fault_tolerance=builder.fault_tolerance(obj),
        origin=origin,
    )
    completed = complete(appwrapper, policy)
    findings: list[Violation] = []
    if check:
        # Too large to store is the one finding that matters, and the rules' walk over a huge
        # object is the most expensive part of a review: measured first, reported alone.
        findings += size_rules.check(completed, what="the AppWrapper")
    if check and not findings:
        findings += bypass_findings(obj, adapter, match, context)
        findings += name_rules.check_named(obj)
        findings += workload_findings(component, adapter, policy)
        findings += queue.check(chosen_queue, policy.queue)
        findings += fault_tolerance.check(objects.annotations_of(obj), policy.fault_tolerance)
        findings += podsets.check(len(groups), path=SPEC)
    return Outcome(Action.WRAP, completed, tuple(findings), match, f"wrapped: {match.reason}")


def _origin_kind(adapter: KindAdapter) -> str:
    group = adapter.api_version.rpartition("/")[0]
    return f"{adapter.kind}.{group}" if group else adapter.kind


# --- completing an AppWrapper --------------------------------------------------------------------


def complete(appwrapper: Obj, policy: PolicySpec) -> Obj:
    """Queue and fault-tolerance defaults, suspend, plumbing and podSets; a fixed point."""
    result = dict(appwrapper)
    metadata = objects.own_map(result, "metadata")
    if policy.queue.default:
        aw_labels = objects.own_map(metadata, "labels")
        aw_labels.setdefault(names.QUEUE_LABEL, policy.queue.default)
    if policy.fault_tolerance.defaults:
        aw_annotations = objects.own_map(metadata, "annotations")
        for key, value in policy.fault_tolerance.defaults.items():
            aw_annotations.setdefault(names.FAULT_TOLERANCE_PREFIX + key, value)
    if not isinstance(result.get("spec"), dict):
        return result
    spec = objects.own_map(result, "spec")
    spec.setdefault("suspend", True)
    if not isinstance(spec.get("components"), list):
        return result
    components: list[Any] = list(spec["components"])
    spec["components"] = components
    extras: list[Obj] = []
    for i, component in enumerate(components):
        if not isinstance(component, dict) or not isinstance(component.get("template"), dict):
            continue
        template = component["template"]
        adapter = kinds.find(template.get("apiVersion"), template.get("kind"))
        if adapter is None:
            continue
        plumbed = plumb(template, adapter, policy)
        completed_component = {**component, "template": plumbed.result}
        wanted = declared_podsets(plumbed.groups)
        if wanted:
            have = as_list(component.get("podSets"))
            have_paths = {as_map(p).get("path") for p in have}
            missing = [p for p in wanted if p["path"] not in have_paths]
            if missing:
                completed_component["podSets"] = [*have, *missing]
        components[i] = completed_component
        extras.extend(plumbed.extra)
    present = {
        (
            as_map(c).get("template", {}).get("kind"),
            objects.name_of(as_map(as_map(c).get("template"))),
        )
        for c in components
        if isinstance(c, dict)
    }
    for extra in extras:
        if (extra.get("kind"), objects.name_of(extra)) not in present:
            components.append({"template": extra})
            present.add((extra.get("kind"), objects.name_of(extra)))
    return result


def _complete_submitted(appwrapper: Obj, match: Match, *, check: bool) -> Outcome:
    policy = match.policy.spec
    workloads = _component_workloads(appwrapper)
    too_large = too_large_to_build(appwrapper, workloads, policy, what="the AppWrapper")
    if too_large is not None:
        return Outcome(Action.COMPLETE, None, (too_large,), match, "too large to store")
    completed = complete(appwrapper, policy)
    findings = check_appwrapper(completed, policy) if check else []
    return Outcome(Action.COMPLETE, completed, tuple(findings), match, f"completed: {match.reason}")


def check_appwrapper(appwrapper: Mapping[str, Any], policy: PolicySpec) -> list[Violation]:
    found: list[Violation] = size_rules.check(appwrapper, what="the AppWrapper")
    if found:
        return found  # reported alone: see ``wrap``
    found += queue.check(
        objects.labels_of(appwrapper).get(names.QUEUE_LABEL),
        policy.queue,
        path=LABELS.key(names.QUEUE_LABEL),
    )
    found += fault_tolerance.check(
        objects.annotations_of(appwrapper), policy.fault_tolerance, base=ANNOTATIONS
    )
    components = as_map(appwrapper.get("spec")).get("components")
    if not isinstance(components, list) or not components:
        return [*found, error(COMPONENTS, "an AppWrapper needs at least one component")]
    namespace = as_map(appwrapper.get("metadata")).get("namespace")
    total_podsets = 0
    for i, component in enumerate(components):
        path = COMPONENTS.index(i)
        template = as_map(as_map(component).get("template"))
        if not template:
            found.append(error(path.child("template"), "every component needs a template object"))
            continue
        found += _check_component(template, as_map(component), path, namespace, policy)
        total_podsets += _podset_count(template, as_map(component))
    found += podsets.check(total_podsets, path=COMPONENTS, at_least_one=True)
    return found


def _check_component(
    template: Mapping[str, Any],
    component: Mapping[str, Any],
    path: FieldPath,
    namespace: object,
    policy: PolicySpec,
) -> list[Violation]:
    found: list[Violation] = []
    template_path = path.child("template")
    if template.get("kind") == "AppWrapper":
        found.append(error(template_path, "AppWrappers cannot be nested; wrap the workload itself"))
    own_ns = as_map(template.get("metadata")).get("namespace")
    if own_ns and namespace and own_ns != namespace:
        found.append(
            error(
                template_path.child("metadata", "namespace"),
                f"{own_ns!r} differs from the AppWrapper's namespace {namespace!r}; AppWrappers cannot "
                "create objects in other namespaces, so remove it",
            )
        )
    adapter = kinds.find(template.get("apiVersion"), template.get("kind"))
    if adapter is None:
        return found + pod_templates.check_podsets(template, component.get("podSets"), path)
    found += [v.under(template_path) for v in workload_findings(dict(template), adapter, policy)]
    groups = {podsets.appwrapper_path(g.template_path): g for g in adapter.pod_groups(template)}
    for j, podset in enumerate(as_list(component.get("podSets"))):
        podset_path = path.child("podSets").index(j)
        declared = as_map(podset).get("path")
        group = groups.get(declared) if isinstance(declared, str) else None
        if group is None:
            found.append(
                error(
                    podset_path.child("path"),
                    f"{declared!r} does not name a pod template of this {adapter.kind}; use one of: "
                    f"{', '.join(str(p) for p in groups) or '(none)'}",
                )
            )
            continue
        replicas = as_map(podset).get("replicas", 1)
        if int_or_none(replicas) != group.replicas:
            found.append(
                error(
                    podset_path.child("replicas"),
                    f"{replicas} differs from the {group.replicas} replicas of {group.name!r}; Kueue "
                    f"would reserve quota for the wrong number of pods, so set it to {group.replicas}",
                )
            )
    return found


def _podset_count(template: Mapping[str, Any], component: Mapping[str, Any]) -> int:
    declared = len(as_list(component.get("podSets")))
    adapter = kinds.find(template.get("apiVersion"), template.get("kind"))
    inferred = len(adapter.pod_groups(template)) if adapter is not None else 0
    return max(declared, inferred, len(podsets.inferred(template)))
