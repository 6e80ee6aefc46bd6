"""Reserved env: what autowrap injects must not be overridden with a different value.

Kubelet keeps the *last* duplicate env entry, so a user's entry and autowrap's can never both
be right; autowrap refuses the conflict instead of picking a winner silently (Kubeflow's
training operator and arena both let one side win without a word).
"""

from __future__ import annotations

from collections.abc import Iterable

from webhook.core.plumbing.env import (
    CONTAINER_LISTS,
    GroupPlan,
    Plan,
    accelerator_count,
    nproc_source,
    same_entry,
)
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
