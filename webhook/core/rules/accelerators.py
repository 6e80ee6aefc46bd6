"""An accelerator autowrap cannot count: NPROC_PER_NODE would silently be 1.

A pod that asks for ``volcano.sh/vgpu-memory`` or a vendor's device the policy does not list
still runs one process per device it gets; autowrap would plan one process per pod, and a
WORLD_SIZE of 8 where the job expects 128. The annotation says how many there are.
"""

from __future__ import annotations

from webhook.core.plumbing.env import Plan, uncounted_accelerators
from webhook.model import names
from webhook.model.fields import Violation, warning


def check(plan: Plan) -> list[Violation]:
    if plan.nproc_override is not None:
        return []
    found: list[Violation] = []
    for group_plan in plan.groups:
        if not group_plan.in_world:
            continue
        group = group_plan.group
        containers = group.template_path.child("spec", "containers")
        for ci, resource in uncounted_accelerators(group.template, plan.accelerators):
            found.append(
                warning(
                    containers.index(ci).child("resources"),
                    f"{resource} looks like an accelerator, but autowrap cannot count processes "
                    "from it (the policy's accelerators do not name it, or it is a share of a "
                    f"device), so NPROC_PER_NODE of {group.name!r} is {group_plan.nproc}; set the "
                    f"annotation {names.NPROC_ANNOTATION} to the processes each pod runs",
                )
            )
    return found
