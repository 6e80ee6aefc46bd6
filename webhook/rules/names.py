"""Pod names: the last pod of every group must have a name that can be its DNS host label.

Volcano's own check formats the pod name with the task's *position*, not the highest replica
index, so ``{job}-{task}-{replicas-1}`` over 63 characters slips through it and fails later.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from webhook.fields import Violation, error
from webhook.workload import KindAdapter, PodGroup


def check(
    obj: Mapping[str, Any], groups: Iterable[PodGroup], adapter: KindAdapter
) -> list[Violation]:
    found: list[Violation] = []
    for group in groups:
        if group.replicas < 1:
            continue
        last = adapter.pod_name(obj, group, group.replicas - 1)
        # Only the length is this rule's: a bad character is reported at the name that has it.
        if len(last) > 63:
            found.append(
                error(
                    group.path,
                    f"the last pod's name {last!r} has {len(last)} characters, more than the 63 "
                    "a DNS label (the pod's hostname) allows; shorten the job or task name",
                )
            )
    return found
