"""Reserved env: what autowrap injects must not be overridden with a different value.

Kubelet keeps the *last* duplicate env entry, so a user's entry and autowrap's can never both
be right; autowrap refuses the conflict instead of picking a winner silently (Kubeflow's
training operator and arena both let one side win without a word).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from webhook.core.plumbing.env import (
    CONTAINER_LISTS,
    GroupPlan,
    Plan,
    accelerator_count,
    nproc_source,
    same_entry,
)
from webhook.core.workload import PodAdditions, PodGroup
from webhook.model import names
from webhook.model.fields import FieldPath, Violation, error, warning
from webhook.model.objects import as_list, as_map

_PORT_NAMES = ("MASTER_PORT", "PET_MASTER_PORT")
_NPROC_NAMES = ("NPROC_PER_NODE", "PET_NPROC_PER_NODE", "LOCAL_WORLD_SIZE")


def check(plan: Plan, *, extra_reserved: Iterable[str]) -> list[Violation]:
    extra = set(extra_reserved)
    found: list[Violation] = []
    for group_plan in plan.groups:
        desired = {e["name"]: e for e in group_plan.env}
        spec_path = group_plan.group.template_path.child("spec")
        spec = as_map(group_plan.group.template.get("spec"))
        for list_name in CONTAINER_LISTS:
            for ci, container in enumerate(as_list(spec.get(list_name))):
                path = spec_path.child(list_name).index(ci)
                found += _check_container(as_map(container), path, desired, extra, plan, group_plan)
    found += _check_master_accelerators(plan)
    return found


def _check_container(
    container: dict[str, object] | object,
    path: FieldPath,
    desired: dict[str, dict[str, object]],
    extra: set[str],
    plan: Plan,
    group_plan: GroupPlan,
) -> list[Violation]:
    found: list[Violation] = []
    c = as_map(container)
    for ei, entry in enumerate(as_list(c.get("env"))):
        entry = as_map(entry)
        name = entry.get("name")
        if not isinstance(name, str):
            continue
        where = path.child("env").index(ei)
        if name in desired and not same_entry(entry, desired[name]):
            found.append(
                error(
                    where,
                    f"{name} is set by autowrap to {_show(desired[name])}"
                    f"{_origin(name, plan, group_plan)}; remove this entry{_fix(name)}",
                )
            )
        elif name in extra:
            found.append(
                error(where, f"{name} is reserved by the platform's policy; remove this entry")
            )
    for fi, _source in enumerate(as_list(c.get("envFrom"))):
        found.append(
            warning(
                path.child("envFrom").index(fi),
                "envFrom may carry names autowrap injects (MASTER_ADDR, RANK, ...); Kubernetes "
                "lets explicit env win, so autowrap's values apply",
            )
        )
    return found


def _show(entry: dict[str, object]) -> str:
    if "value" in entry:
        return repr(entry["value"])
    ref = as_map(as_map(entry.get("valueFrom")).get("fieldRef")).get("fieldPath")
    return f"the pod's {ref} (per pod)"


def _origin(name: str, plan: Plan, group_plan: GroupPlan) -> str:
    """Where autowrap's value comes from, for the names a user sets to change it."""
    if name in _NPROC_NAMES:
        source = nproc_source(group_plan.group.template, plan.accelerators, plan.nproc_override)
        return f", from {source}"
    if name == "WORLD_SIZE":
        terms = "; ".join(
            f"task {g.group.name!r}: {g.group.replicas} pod(s) × {g.nproc} from "
            + nproc_source(g.group.template, plan.accelerators, plan.nproc_override)
            for g in plan.groups
            if g.in_world
        )
        return f" = the sum of pods × processes per pod ({terms})"
    return ""


def _fix(name: str) -> str:
    if name in _PORT_NAMES:
        return (
            f"; to choose the port, use the annotation {names.MASTER_PORT_ANNOTATION} on the "
            'workload (e.g. "29500")'
        )
    if name in _NPROC_NAMES or name == "WORLD_SIZE":
        return (
            "; to choose the processes per pod, use the annotation "
            f'{names.NPROC_ANNOTATION} on the workload (e.g. "8")'
        )
    return " (or set it to exactly that value)"


def _check_master_accelerators(plan: Plan) -> list[Violation]:
    """An NCCL world cannot hold a rank without an accelerator: a CPU-only master (node 0)
    beside accelerator tasks is almost always a helper task put in the master's place."""
    in_world = [g for g in plan.groups if g.in_world]
    if len(in_world) < 2 or not plan.accelerators:
        return []
    master, others = in_world[0], in_world[1:]
    if accelerator_count(master.group.template, plan.accelerators):
        return []
    with_accelerators = [
        g.group.name for g in others if accelerator_count(g.group.template, plan.accelerators)
    ]
    if not with_accelerators:
        return []
    return [
        warning(
            master.group.template_path.child("spec", "containers"),
            f"the master task {master.group.name!r} holds node 0 (RANK 0) but asks for no "
            f"accelerator, while {', '.join(repr(t) for t in with_accelerators)} do; a "
            "collective world (NCCL) cannot hold a rank without one: give it the same "
            f"accelerators, or make an accelerator task the master ({names.MASTER_TASK_ANNOTATION})"
            f" and leave this one out of the world ({names.EXCLUDE_TASKS_ANNOTATION})",
        )
    ]


# --- env a workload's controller appends ---------------------------------------------------------


@dataclass
class _Appended:
    """What one controller feature appends over all pods, and where it disagrees with autowrap."""

    source: str
    path: FieldPath
    names: dict[str, None] = field(default_factory=dict)  # in the order it appends them
    # name -> (pod, its value, autowrap's value) for every pod where the two differ (the pod is
    # named for the first only)
    differ: dict[str, list[tuple[str, str, str]]] = field(default_factory=dict)
    # name -> how many pods get it from both
    shared: dict[str, int] = field(default_factory=dict)


def check_appended(
    plan: Plan,
    additions: Callable[[PodGroup, int], Sequence[PodAdditions]],
    pod_name: Callable[[PodGroup, int], str],
) -> list[Violation]:
    """Env a workload's controller appends after autowrap's (Volcano's pytorch plugin): kubelet
    keeps the last entry of a name, so where it differs from autowrap's the pod runs with it,
    beside autowrap's PET_* that torchrun reads. Refused like a user's different value; the same
    values are only warned about, since nothing keeps them the same."""
    found: dict[str, _Appended] = {}  # by source: one per pod would hash a FieldPath per pod
    for group_plan in plan.groups:
        group = group_plan.group
        desired = {e["name"]: e for e in group_plan.env}
        for index in range(group.replicas):
            for added in additions(group, index):
                seen = found.get(added.source) or found.setdefault(
                    added.source, _Appended(added.source, added.path)
                )
                for name, value in added.env:
                    if name not in desired:
                        continue
                    seen.names[name] = None
                    ours = _pod_value(desired[name], group_plan, index)
                    if value == ours:
                        seen.shared[name] = seen.shared.get(name, 0) + 1
                    else:
                        differing = seen.differ.setdefault(name, [])
                        # Only the first is named in the message.
                        pod = "" if differing else pod_name(group, index)
                        differing.append((pod, value, ours))
    return [_appended_finding(seen.path, seen) for seen in found.values() if seen.names]


def _pod_value(entry: Mapping[str, object], group_plan: GroupPlan, index: int) -> str:
    """autowrap's value of one entry in the ``index``-th pod of a group: its literal, else the
    pod's node rank (every per-pod entry autowrap injects, RANK, NODE_RANK and PET_NODE_RANK,
    reads it)."""
    if "value" in entry:
        return str(entry["value"])
    return str(group_plan.offset + index)


# What changes in the command once the plugin goes: its WORLD_SIZE counted pods, autowrap's
# counts processes (pods x NPROC_PER_NODE).
WORLD_SIZE_FOLLOW_UP = (
    "then, in the command, its WORLD_SIZE counted pods and autowrap's counts processes: "
    "torchrun --nnodes=$WORLD_SIZE becomes --nnodes=$NNODES (or no flag: torchrun reads "
    "PET_NNODES), and a script without a launcher, one process per pod, needs the annotation "
    f'{names.NPROC_ANNOTATION}: "1" on the job so that WORLD_SIZE counts pods again'
)


def _appended_finding(path: FieldPath, seen: _Appended) -> Violation:
    listed = _words(list(seen.names))
    follow_up = f"; {WORLD_SIZE_FOLLOW_UP}" if "WORLD_SIZE" in seen.names else ""
    if not seen.differ:
        return warning(
            path,
            f"{seen.source} appends {listed} after autowrap's entries; they equal autowrap's in "
            "every pod today, but kubelet keeps the last entry of a name, so once they differ "
            "(its WORLD_SIZE counts pods, not processes: a GPU more per pod is enough) the pods "
            f"silently run with its values; remove {path}{follow_up}",
        )
    parts = []
    for name, pods in seen.differ.items():
        pod, value, ours = pods[0]
        pairs = {(v, o) for _, v, o in pods}
        if len(pairs) == 1 and not seen.shared.get(name):
            parts.append(f"{name}={value} in every pod (autowrap's: {ours})")
        else:
            more = f", and {len(pods) - 1} more pod(s)" if len(pods) > 1 else ""
            parts.append(f"{name}={value} in {pod} (autowrap's: {ours}){more}")
    fixes = [f"remove {path} (autowrap sets {listed} itself, with torchrun's PET_* mirrors)"]
    port = seen.differ.get("MASTER_PORT")
    if port:
        fixes.append(
            f"to keep port {port[0][1]}, set the annotation {names.MASTER_PORT_ANNOTATION}: "
            f'"{port[0][1]}" on the job'
        )
    return error(
        path,
        f"{seen.source} appends its own {_words(list(seen.differ))} after autowrap's entries, "
        "and kubelet keeps the last entry of a name, so the pods would run with "
        + _words(parts)
        + ", while torchrun reads autowrap's PET_*; "
        + "; ".join(fixes)
        + follow_up
        + "; see docs/migration.md",
    )


def _words(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]
