"""The rendezvous host must exist: node 0 is pod 0 of the master group, the host behind
MASTER_ADDR, so a master group without pods leaves every other pod waiting for nobody."""

from __future__ import annotations

from collections.abc import Sequence

from webhook.core.workload import PodGroup
from webhook.model import names
from webhook.model.fields import Violation, error


def check(groups: Sequence[PodGroup], master: PodGroup | None) -> list[Violation]:
    if master is None or master.replicas >= 1 or not any(g.replicas for g in groups):
        return []
    return [
        error(
            master.path.child("replicas"),
            f"task {master.name!r} holds node 0, the host behind MASTER_ADDR, but has no "
            f"replicas; give it at least 1, or name another task in the annotation "
            f"{names.MASTER_TASK_ANNOTATION}",
        )
    ]
