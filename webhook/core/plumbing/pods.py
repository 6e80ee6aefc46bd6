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


def _metadata_map(pod: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    return objects.as_map(objects.as_map(pod.get("metadata")).get(key))


def _text(values: Mapping[str, Any], key: str) -> str | None:
    """``values[key]`` when it is a string, as ``objects.labels_of`` and ``annotations_of`` keep
    it; read where it is rather than by copying every label and annotation of the pod, since
    this runs once for every pod of every wrapped workload."""
    value = values.get(key)
    return value if isinstance(value, str) else None


def needs_rank(pod: Mapping[str, Any]) -> bool:
    return _text(_metadata_map(pod, "labels"), names.NODE_RANK_OFFSET_LABEL) is not None


def mutate(pod: Mapping[str, Any]) -> PodMutation:
    pod_labels = _metadata_map(pod, "labels")
    pod_annotations = _metadata_map(pod, "annotations")
    raw_offset = _text(pod_labels, names.NODE_RANK_OFFSET_LABEL)
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
    index_key = _text(pod_annotations, names.POD_INDEX_KEY_ANNOTATION)
    if index_key is None:
        index_key = names.VOLCANO_TASK_INDEX
    raw_index = _text(pod_annotations, index_key)
    if raw_index is None:
        raw_index = _text(pod_labels, index_key)
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
    if _text(pod_annotations, names.NODE_RANK_ANNOTATION) == rank:
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
