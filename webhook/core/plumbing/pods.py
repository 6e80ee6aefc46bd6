"""The pod-level mutation: the exact node rank of a pod its template cannot know.

A pod of a wrapped workload whose group is not first in rank order carries the label
``autowrap.io/node-rank-offset`` (the replicas of the groups before it) and the annotation
``autowrap.io/pod-index-key`` (which annotation its controller fills with the pod's index in
the group, e.g. Volcano's ``volcano.sh/task-index``). The mutation writes
``autowrap.io/node-rank`` = offset + index, which the pod's env reads via the downward API.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from webhook.model import names, objects
from webhook.model.fields import ANNOTATIONS, LABELS, Violation, error
from webhook.model.objects import Obj


@dataclass(frozen=True)
class PodMutation:
    pod: Obj | None  # None: nothing to change
    violations: tuple[Violation, ...] = ()


def needs_rank(pod: Mapping[str, Any]) -> bool:
    return names.NODE_RANK_OFFSET_LABEL in objects.labels_of(pod)


def mutate(pod: Mapping[str, Any]) -> PodMutation:
    pod_labels = objects.labels_of(pod)
    pod_annotations = objects.annotations_of(pod)
    raw_offset = pod_labels.get(names.NODE_RANK_OFFSET_LABEL)
    if raw_offset is None:
        return PodMutation(None)
    if not raw_offset.isdigit():
        return PodMutation(
            None,
            (
                error(
                    LABELS.key(names.NODE_RANK_OFFSET_LABEL),
                    f"{raw_offset!r} is not a non-negative integer; this label is autowrap's and must "
                    "not be edited",
                ),
            ),
        )
    index_key = pod_annotations.get(names.POD_INDEX_KEY_ANNOTATION, names.VOLCANO_TASK_INDEX)
    raw_index = pod_annotations.get(index_key, pod_labels.get(index_key))
    if raw_index is None or not raw_index.isdigit():
        return PodMutation(
            None,
            (
                error(
                    ANNOTATIONS.key(index_key),
                    f"the pod has no integer {index_key} to compute its node rank from; it must be "
                    "created by its workload's controller, which sets it",
                ),
            ),
        )
    rank = str(int(raw_offset) + int(raw_index))
    if pod_annotations.get(names.NODE_RANK_ANNOTATION) == rank:
        return PodMutation(None)
    # Copy only the maps on the way to the one annotation written: the rest of the pod is shared
    # with the input (never mutated), which keeps this and the patch diff independent of the
    # pod's size.
    result = dict(pod)
    metadata = dict(objects.as_map(pod.get("metadata")))
    annotations = dict(objects.as_map(metadata.get("annotations")))
    annotations[names.NODE_RANK_ANNOTATION] = rank
    metadata["annotations"] = annotations
    result["metadata"] = metadata
    return PodMutation(result)
