"""Reserved env: what autowrap injects must not be overridden with a different value.

Kubelet keeps the *last* duplicate env entry, so a user's entry and autowrap's can never both
be right; autowrap refuses the conflict instead of picking a winner silently (Kubeflow's
training operator and arena both let one side win without a word).
"""

from __future__ import annotations

from collections.abc import Iterable

from webhook.fields import FieldPath, Violation, error, warning
from webhook.objects import as_list, as_map
from webhook.plumbing.env import CONTAINER_LISTS, Plan, same_entry


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
                found += _check_container(as_map(container), path, desired, extra)
    return found


def _check_container(
    container: dict[str, object] | object,
    path: FieldPath,
    desired: dict[str, dict[str, object]],
    extra: set[str],
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
                    f"{name} is set by autowrap to {_show(desired[name])}; remove this entry "
                    f"(or set it to exactly that value)",
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
