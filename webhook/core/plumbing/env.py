"""The env table of SPEC section 4, computed once per workload and applied per template.

Per-pod values cannot live in a template shared by all replicas, so RANK and NODE_RANK come
from the downward API: a group of one pod gets a literal, the first group in rank order
reads its controller's pod-index annotation directly, and any later group of several pods
reads ``autowrap.io/node-rank``, which the pod-level mutation (``plumbing.pods``) writes as
offset + index when the controller creates the pod. The template carries what that mutation
needs: the offset label and the name of the pod-index annotation.
"""

from __future__ import annotations

import fnmatch
import functools
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from webhook.core.workload import PodGroup
from webhook.model import names, objects
from webhook.model.objects import Obj, as_list, as_map

CONTAINER_LISTS = ("initContainers", "containers")


@dataclass(frozen=True)
class GroupPlan:
    group: PodGroup
    offset: int
    nproc: int
    env: tuple[dict[str, Any], ...]
    template_labels: Mapping[str, str]
    template_annotations: Mapping[str, str]
    # False for a helper task left out of the world (annotation autowrap.io/exclude-tasks): it
    # gets MASTER_ADDR and MASTER_PORT only, and no rank.
    in_world: bool = True


@dataclass(frozen=True)
class Plan:
    master_addr: str
    master_port: int
    nnodes: int
    world_size: int
    groups: tuple[GroupPlan, ...]
    # What nproc was computed from, for messages that say where a value comes from.
    accelerators: tuple[str, ...] = ()
    nproc_override: int | None = None

    def for_group(self, name: str) -> GroupPlan | None:
        return next((g for g in self.groups if g.group.name == name), None)


def accelerator_count(template: Mapping[str, Any], accelerators: Iterable[str]) -> int:
    """Accelerators the pod asks for: the first resource name that matches the policy's list,
    summed over the containers' limits (requests where a container sets no limit)."""
    choose = _chooser(tuple(accelerators))
    total = 0
    for container in as_list(as_map(template.get("spec")).get("containers")):
        chosen = choose(_amounts(container))
        if chosen is not None:
            total += _whole(chosen[1])
    return total


def _amounts(container: object) -> Mapping[str, Any]:
    resources = as_map(as_map(container).get("resources"))
    return as_map(resources.get("limits")) or as_map(resources.get("requests"))


# Names that give a share of a device (memory, cores, a percentage, tiles), not a number of
# devices: HAMi's ``huawei.com/Ascend910B-memory``, Volcano's ``volcano.sh/vgpu-memory`` and
# ``vgpu-cores``, Intel's ``gpu.intel.com/millicores``. A glob never counts them; a name the
# policy spells out exactly (``aws.amazon.com/neuroncore``) always counts.
_SHARE = re.compile(r"mem|core|percent|ratio|tile", re.IGNORECASE)
# An extended resource that looks like an accelerator whatever the policy counts.
_ACCELERATOR_LIKE = re.compile(r"gpu|npu|ascend|gaudi|neuron|mig-", re.IGNORECASE)


@functools.lru_cache(maxsize=64)
def _chooser(
    patterns: tuple[str, ...],
) -> Callable[[Mapping[str, Any]], tuple[str, Any] | None]:
    """The counted accelerator of one container's resources: the resource matched by the
    earliest of the policy's patterns (shell-style, case-insensitive, as Arena's samples
    spell ``huawei.com/ascend-1980``), and its amount."""
    compiled = [
        (re.compile(fnmatch.translate(p), re.IGNORECASE).match, any(c in p for c in "*?["))
        for p in patterns
    ]

    def choose(amounts: Mapping[str, Any]) -> tuple[str, Any] | None:
        best: tuple[int, str, Any] | None = None
        for resource, amount in amounts.items():
            name = str(resource)
            for rank, (match, is_glob) in enumerate(compiled):
                if best is not None and rank >= best[0]:
                    break
                if match(name) and not (is_glob and _SHARE.search(name)):
                    best = (rank, name, amount)
                    break
        return None if best is None else (best[1], best[2])

    return choose


def uncounted_accelerators(
    template: Mapping[str, Any], accelerators: Iterable[str]
) -> list[tuple[int, str]]:
    """(container index, resource) of every container that asks for something that looks
    like an accelerator (a name with gpu, npu, ... in it) while the policy counts none of
    what it asks for: its processes per pod cannot be inferred."""
    choose = _chooser(tuple(accelerators))
    found: list[tuple[int, str]] = []
    for ci, container in enumerate(as_list(as_map(template.get("spec")).get("containers"))):
        amounts = _amounts(container)
        if not amounts or choose(amounts) is not None:
            continue
        for resource in amounts:
            name = str(resource)
            if "/" in name and _ACCELERATOR_LIKE.search(name):
                found.append((ci, name))
                break
    return found


def _whole(amount: object) -> int:
    if isinstance(amount, int) and not isinstance(amount, bool):
        return max(amount, 0)
    if isinstance(amount, str) and amount.isdigit():
        return int(amount)
    return 0


def nproc_source(
    template: Mapping[str, Any], accelerators: Iterable[str], override: int | None
) -> str:
    """Where a group's NPROC_PER_NODE comes from, in words (for messages, never per request)."""
    if override is not None:
        return f"the annotation {names.NPROC_ANNOTATION}"
    accelerators = tuple(accelerators)
    choose = _chooser(accelerators)
    found: dict[str, int] = {}
    for container in as_list(as_map(template.get("spec")).get("containers")):
        chosen = choose(_amounts(container))
        if chosen is not None:
            found[chosen[0]] = found.get(chosen[0], 0) + _whole(chosen[1])
    if found:
        counted = ", ".join(f"{r}: {n}" for r, n in found.items())
        return f"the accelerators counted in the containers' resources ({counted})"
    return (
        "no accelerator in the containers' resources (the policy counts "
        + ", ".join(accelerators)
        + "), so 1"
    )


def excluded_tasks(value: str | None) -> tuple[str, ...]:
    """The task names of the annotation ``autowrap.io/exclude-tasks`` (comma-separated)."""
    if not value:
        return ()
    return tuple(part.strip() for part in value.split(",") if part.strip())


def parse_positive(value: str | None) -> int | None:
    if value is None or not value.strip().isdigit():
        return None
    number = int(value.strip())
    return number if number >= 1 else None


def master_port(annotations: Mapping[str, str], default: int) -> int:
    port = parse_positive(annotations.get(names.MASTER_PORT_ANNOTATION))
    return port if port is not None and port <= 65535 else default


def rank_order(groups: Sequence[PodGroup], master: PodGroup) -> list[PodGroup]:
    """Master group first (its pod 0 is node 0), then the others in spec order."""
    return [master] + [g for g in groups if g is not master]


def plan(
    groups: Sequence[PodGroup],
    master: PodGroup,
    *,
    master_addr: str,
    port: int,
    nproc_override: int | None,
    accelerators: Iterable[str],
    excluded: Iterable[str] = (),
) -> Plan:
    accelerators = tuple(accelerators)
    left_out = set(excluded) - {master.name}  # node 0 is always in the world
    world_groups = [g for g in groups if g.name not in left_out]
    nprocs = {
        g.name: nproc_override or accelerator_count(g.template, accelerators) or 1
        for g in world_groups
    }
    nnodes = sum(g.replicas for g in world_groups)
    world = sum(g.replicas * nprocs[g.name] for g in world_groups)
    plans = []
    offset = 0
    for group in rank_order(groups, master):
        if group.name in left_out:
            plans.append(_helper_plan(group, master_addr, port))
            continue
        plans.append(
            _group_plan(group, offset, nprocs[group.name], master_addr, port, nnodes, world)
        )
        offset += group.replicas
    return Plan(master_addr, port, nnodes, world, tuple(plans), accelerators, nproc_override)


def _helper_plan(group: PodGroup, addr: str, port: int) -> GroupPlan:
    env = ({"name": "MASTER_ADDR", "value": addr}, {"name": "MASTER_PORT", "value": str(port)})
    return GroupPlan(group, 0, 0, env, {}, {}, in_world=False)


def _group_plan(
    group: PodGroup, offset: int, nproc: int, addr: str, port: int, nnodes: int, world: int
) -> GroupPlan:
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    if group.replicas <= 1 or group.pod_index_key is None:
        rank: dict[str, Any] = {"value": str(offset)}
    elif offset == 0:
        rank = _field_ref(group.pod_index_key)
    else:
        rank = _field_ref(names.NODE_RANK_ANNOTATION)
        labels[names.NODE_RANK_OFFSET_LABEL] = str(offset)
        annotations[names.POD_INDEX_KEY_ANNOTATION] = group.pod_index_key
    port_text, nodes, procs = str(port), str(nnodes), str(nproc)
    env = (
        {"name": "MASTER_ADDR", "value": addr},
        {"name": "MASTER_PORT", "value": port_text},
        {"name": "NNODES", "value": nodes},
        {"name": "NPROC_PER_NODE", "value": procs},
        {"name": "WORLD_SIZE", "value": str(world)},
        {"name": "RANK", **rank},
        {"name": "NODE_RANK", **rank},
        {"name": "LOCAL_WORLD_SIZE", "value": procs},
        {"name": "PET_NNODES", "value": nodes},
        {"name": "PET_NPROC_PER_NODE", "value": procs},
        {"name": "PET_NODE_RANK", **rank},
        {"name": "PET_MASTER_ADDR", "value": addr},
        {"name": "PET_MASTER_PORT", "value": port_text},
    )
    return GroupPlan(group, offset, nproc, env, labels, annotations)


def _field_ref(annotation: str) -> dict[str, Any]:
    return {"valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{annotation}']"}}}


def same_entry(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Whether two env entries set the same thing (a user's exact value is no conflict)."""
    if "valueFrom" in a or "valueFrom" in b:
        return _normal_ref(a.get("valueFrom")) == _normal_ref(b.get("valueFrom"))
    return str(a.get("value", "")) == str(b.get("value", ""))


def _normal_ref(value: object) -> object:
    ref = as_map(as_map(value).get("fieldRef"))
    if ref:
        return ("fieldRef", str(ref.get("fieldPath", "")).replace('"', "'"))
    return value


def apply(template: Mapping[str, Any], group_plan: GroupPlan) -> Obj:
    """The template with the plan's env in every container and init container.

    An entry the user already has is left exactly as it is (equal values are no conflict, and
    a different value is the reserved-env rule's to report), so applying twice changes nothing.
    Only what changes is copied; a container that already has every entry is shared as is.
    """
    result = dict(template)
    for key, extra in (
        ("labels", group_plan.template_labels),
        ("annotations", group_plan.template_annotations),
    ):
        if extra:
            objects.own_map(objects.own_map(result, "metadata"), key).update(extra)
    if not isinstance(result.get("spec"), dict):
        return result
    spec = objects.own_map(result, "spec")
    for list_name in CONTAINER_LISTS:
        containers = spec.get(list_name)
        if isinstance(containers, list):
            spec[list_name] = [
                _with_env(c, group_plan.env) if isinstance(c, dict) else c for c in containers
            ]
    return result


def _containers(template: Mapping[str, Any]) -> list[dict[str, Any]]:
    spec = as_map(template.get("spec"))
    return [c for name in CONTAINER_LISTS for c in as_list(spec.get(name)) if isinstance(c, dict)]


def most_growth(template: Mapping[str, Any], group_plan: GroupPlan) -> int:
    """What ``growth`` can come to at most: every entry added to every container. Counting the
    containers is all it takes, so a caller learns cheaply when the exact count cannot matter."""
    entries = sum(len(orjson.dumps(e)) + 1 for e in group_plan.env)
    return entries * len(_containers(template))


def growth(template: Mapping[str, Any], group_plan: GroupPlan) -> int:
    """The bytes of JSON ``apply`` adds to the template's containers, counted without applying
    it: a container of thousands weighs a few dozen bytes and gains hundreds, so this is how an
    object too large to store is told before it is built."""
    entries = [(e["name"], len(orjson.dumps(e)) + 1) for e in group_plan.env]
    added = 0
    for container in _containers(template):
        env = container.get("env")
        have = {e.get("name") for e in env if isinstance(e, dict)} if isinstance(env, list) else ()
        added += sum(size for name, size in entries if name not in have)
    return added


def _with_env(container: dict[str, Any], desired: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    env = container.get("env")
    have = env if isinstance(env, list) else []
    present = {e.get("name") for e in have if isinstance(e, dict)}
    missing = [entry for entry in desired if entry["name"] not in present]
    if not missing and isinstance(env, list):
        return container
    # Fresh entries per container: the plan's are shared by every container of the group, and
    # RANK, NODE_RANK and PET_NODE_RANK share one ``valueFrom`` map. A JSON round trip copies
    # them exactly (strings in plain maps) and, unlike ``objects.deep_copy`` (marshal keeps
    # shared references), unshared: every entry of the result is a map of its own, as if the
    # user had written it.
    added = orjson.loads(orjson.dumps(missing))
    at = first_reference(have, {entry["name"] for entry in missing})
    return {**container, "env": [*have[:at], *added, *have[at:]]}


# ``$(NAME)`` as kubelet reads it (third_party/forked/golang/expansion/expand.go:81-95): ``$$``
# is an escaped ``$`` and never starts a reference.
REFERENCE = re.compile(r"\$\$|\$\(([^)]*)\)")


def references(value: object) -> set[str]:
    """The variable names a literal env value refers to as ``$(NAME)``."""
    if not isinstance(value, str) or "$(" not in value:
        return set()
    return {m.group(1) for m in REFERENCE.finditer(value) if m.group(1) is not None}


def first_reference(env: Sequence[Any], injected: set[str]) -> int:
    """Where autowrap's entries go in a container's ``env``: before the first entry whose value
    refers to one of them, else at the end.

    Kubelet expands ``$(NAME)`` in a value only from the entries listed before it
    (pkg/kubelet/kubelet_pods.go, makeEnvironmentVariables, expands each ``container.Env``
    value with ``expansion.MappingFuncFor`` over the variables defined so far) and leaves an
    unknown reference as written (expand.go:22-33), so ``DIST_URL=tcp://$(MASTER_ADDR):...``
    works only with ``MASTER_ADDR`` above it. Entries that refer to none stay first, so a
    template without references keeps its order (and its stored form) unchanged.
    """
    for i, entry in enumerate(env):
        literal = isinstance(entry, dict) and "valueFrom" not in entry
        if literal and references(entry.get("value")) & injected:
            return i
    return len(env)
