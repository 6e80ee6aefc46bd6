"""The command must read WORLD_SIZE as autowrap means it: processes, not pods.

Volcano's pytorch plugin, Arena and habit set WORLD_SIZE to the number of pods, so commands
written for them pass it where a node count belongs (``torchrun --nnodes=$WORLD_SIZE``), or
run one process per pod without a launcher and read it as their world. Under autowrap
WORLD_SIZE is pods x NPROC_PER_NODE: the first waits for nodes that never come, the second for
ranks nobody starts, and both hang in the rendezvous instead of failing. Warnings: a command
autowrap cannot read (a script behind an entrypoint) may still be right.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from webhook.core.plumbing.env import GroupPlan, Plan, accelerator_count
from webhook.model import names
from webhook.model.fields import FieldPath, Violation, warning
from webhook.model.objects import as_list, as_map

# A node-count flag given WORLD_SIZE: torchrun's and torch.distributed.launch's --nnodes (also
# --nnodes=MIN:MAX), DeepSpeed's --num_nodes; $WORLD_SIZE, ${WORLD_SIZE} in a shell, $(WORLD_SIZE)
# as kubelet expands it in command and args.
_NODE_COUNT = re.compile(
    r"--(?:nnodes|num[_-]nodes)(?:=|\s+)[\"']?\$(?:WORLD_SIZE\b|\{WORLD_SIZE\}|\(WORLD_SIZE\))"
)
# Programs that start the processes of a pod themselves (one per accelerator, or as many as
# told), so that a per-pod count of processes is theirs to keep.
_LAUNCHERS = re.compile(
    r"(?:^|[\s/\"'=;&|(])(?:torchrun|deepspeed|mpirun|mpiexec|horovodrun|srun|"
    r"accelerate\s+launch|torch\.distributed\.(?:run|launch))\b"
)


def check(plan: Plan) -> list[Violation]:
    found: list[Violation] = []
    for group_plan in plan.groups:
        if not group_plan.in_world:
            continue
        containers = group_plan.group.template_path.child("spec", "containers")
        spec = as_map(group_plan.group.template.get("spec"))
        for ci, raw in enumerate(as_list(spec.get("containers"))):
            container = as_map(raw)
            path = containers.index(ci)
            found += _node_count(container, path, plan)
            found += _no_launcher(container, path, plan, group_plan)
    return found


def _words(container: Mapping[str, Any]) -> list[tuple[str, int, str]]:
    """(field, index, text) of every string of the container's command and args."""
    return [
        (name, i, str(word))
        for name in ("command", "args")
        for i, word in enumerate(as_list(container.get(name)))
        if isinstance(word, str | int | float)
    ]


def _node_count(container: Mapping[str, Any], path: FieldPath, plan: Plan) -> list[Violation]:
    words = _words(container)
    for n, (name, i, text) in enumerate(words):
        pair = f"{words[n - 1][2]} {text}" if n else text
        if _NODE_COUNT.search(text) or (n and _NODE_COUNT.search(pair)):
            return [
                warning(
                    path.child(name).index(i),
                    f"passes WORLD_SIZE as the number of nodes, but autowrap's WORLD_SIZE counts "
                    f"processes ({plan.world_size} here: {plan.nnodes} pods x their "
                    "NPROC_PER_NODE), not pods, so the rendezvous would wait for nodes that never "
                    "come; use $NNODES (or $(NNODES) in args), or leave the flag out: torchrun "
                    "reads PET_NNODES",
                )
            ]
    return []


def _no_launcher(
    container: Mapping[str, Any], path: FieldPath, plan: Plan, group_plan: GroupPlan
) -> list[Violation]:
    """A container that asks for several accelerators, in a pod autowrap counts several
    processes for, and names no launcher in a command it gives."""
    if plan.nproc_override is not None or group_plan.nproc <= 1:
        return []
    words = _words(container)
    if not words:
        return []  # the image's entrypoint: what it starts cannot be seen here
    if accelerator_count({"spec": {"containers": [container]}}, plan.accelerators) <= 1:
        return []
    if _LAUNCHERS.search(" ".join(text for _, _, text in words)):
        return []
    field = "command" if container.get("command") else "args"
    return [
        warning(
            path.child(field),
            f"starts no launcher (torchrun, python -m torch.distributed.run, deepspeed, "
            f"accelerate launch, mpirun), so one process runs in each pod, but WORLD_SIZE is "
            f"{plan.world_size}: it counts NPROC_PER_NODE={group_plan.nproc} processes per pod "
            f"of {group_plan.group.name!r}, and a script that reads it waits for ranks nobody "
            f"starts. Start it with torchrun (it reads autowrap's PET_* and starts "
            f"{group_plan.nproc} processes), or set the annotation {names.NPROC_ANNOTATION}: "
            '"1" on the job so that WORLD_SIZE counts pods',
        )
    ]
