"""Names: the object has one (or asks for one), and the last pod of every group can have a name
that is its DNS host label.

The API server refuses an object with neither ``metadata.name`` nor ``metadata.generateName``
("name or generateName is required": k8s.io/apimachinery pkg/api/validation/objectmeta.go,
``ValidateObjectMetaAccessor``), so autowrap does not promise to wrap one. Volcano's own check
formats the pod name with the task's *position*, not the highest replica index, so
``{job}-{task}-{replicas-1}`` over 63 characters slips through it and fails later.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from webhook.core.workload import KindAdapter, PodGroup
from webhook.model.fields import METADATA, Violation, error
from webhook.model.objects import as_map


def check_named(obj: Mapping[str, Any]) -> list[Violation]:
    """A submitted object names itself, or asks the API server for a name."""
    metadata = as_map(obj.get("metadata"))
    if metadata.get("name") or metadata.get("generateName"):
        return []
    return [
        error(
            METADATA.child("name"),
            "required: the object has neither metadata.name nor metadata.generateName, and "
            "Kubernetes refuses it (name or generateName is required); set metadata.name, or "
            "metadata.generateName for a generated one",
        )
    ]


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
