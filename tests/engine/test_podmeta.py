"""What the controller's cache keeps of a waiting pod: a few bounded fields of its metadata."""

from __future__ import annotations

import json
from typing import Any

from webhook.core import adoption, podmeta, release
from webhook.model import names


def _metadata(**extra: Any) -> dict[str, Any]:
    return {
        "name": "p", "namespace": "ml", "uid": "u", "resourceVersion": "7", "generation": 1,
        "labels": {names.APPWRAPPER_LABEL: "aw", "app": "x"},
        "annotations": {adoption.PODSET_ANNOTATION: "1", "other": "y"},
        "ownerReferences": [{"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
                             "name": "j", "uid": "job-uid", "controller": True,
                             "blockOwnerDeletion": True}],
        "managedFields": [{"manager": "kubelet"}],
        **extra,
    }  # fmt: skip


def test_a_waiting_pod_keeps_whose_it_is_and_nothing_a_user_can_fill() -> None:
    pod = {"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata", "metadata": _metadata()}
    view = podmeta.waiting_pod(pod)
    assert view == {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "p", "namespace": "ml", "uid": "u", "resourceVersion": "7", "generation": 1,
        "labels": {names.APPWRAPPER_LABEL: "aw"},
        "annotations": {adoption.PODSET_ANNOTATION: "1"},
        "ownerReferences": [{"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
                             "name": "j", "uid": "job-uid", "controller": True}]}}  # fmt: skip
    # What belongs to it and what names its podSet read the same as on the whole pod.
    appwrapper = {"metadata": {"annotations": {names.ORIGIN_UID_ANNOTATION: "job-uid"}}}
    assert release.belongs(view, appwrapper) and release.podset_index(view) == 1

    padded = _metadata(labels={names.APPWRAPPER_LABEL: "aw", **{f"l{i}": "v" * 60 for i in range(9000)}},
                       annotations={adoption.PODSET_ANNOTATION: "9" * 500_000, "pad": "x" * 900_000},
                       ownerReferences=[{"uid": f"o{i}", "name": "n" * 200} for i in range(900)])  # fmt: skip
    kept = podmeta.waiting_pod({"metadata": padded})
    assert kept is not None and len(json.dumps(kept)) < 300


def test_a_pod_no_admission_prepared_is_not_kept() -> None:
    metadata = _metadata(annotations={"other": "y"})
    assert podmeta.waiting_pod({"metadata": metadata}) is None


def test_a_spec_changed_since_creation_is_told_by_generation() -> None:
    assert not podmeta.spec_changed({"metadata": {"generation": 1}})
    assert podmeta.spec_changed({"metadata": {"generation": 2}})
    # A cluster that does not count (before Kubernetes 1.33) is read live.
    assert podmeta.spec_changed({"metadata": {}})
