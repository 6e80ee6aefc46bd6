"""Redirect mode's re-applies (``webhook.core.reapply``): what an update keeps, what it is told."""

from __future__ import annotations

import copy
from typing import Any

from webhook.core import reapply
from webhook.model import names

Obj = dict[str, Any]
INFOS = [{"labels": {"kueue.x-k8s.io/podset": "train-0"}, "nodeSelector": {"pool": "a100"}}]


def appwrapper(*, suspend: bool | None = True, infos: list[Obj] | None = None) -> Obj:
    component: Obj = {
        "template": {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
                     "metadata": {"name": "train"}, "spec": {"tasks": []}},
        "podSets": [{"path": "template.spec.tasks[0].template", "replicas": 2}],
    }  # fmt: skip
    if infos is not None:
        component["podSetInfos"] = infos
    spec: Obj = {"components": [component]}
    if suspend is not None:
        spec["suspend"] = suspend
    return {"apiVersion": "workload.codeflare.dev/v1beta2", "kind": "AppWrapper",
            "metadata": {"name": "train", "namespace": "ml"}, "spec": spec}  # fmt: skip


def test_render_prints_no_suspend_and_leaves_other_kinds_alone() -> None:
    assert "suspend" not in reapply.for_apply(appwrapper())["spec"]
    job = {"apiVersion": "batch/v1", "kind": "Job", "spec": {"suspend": True}}
    assert reapply.for_apply(job) == job


def test_a_reapply_that_drops_kueues_placement_gets_it_back() -> None:
    stored = appwrapper(suspend=False, infos=INFOS)
    kept = reapply.kept_kueue_state(appwrapper(suspend=False), stored)
    assert kept is not None and kept["spec"] == stored["spec"]


def test_kueues_own_updates_and_real_changes_pass_unchanged() -> None:
    # Admission (suspend false, podSetInfos written) and preemption (suspend true, cleared).
    assert reapply.kept_kueue_state(appwrapper(suspend=False, infos=INFOS), appwrapper()) is None
    preempted = reapply.kept_kueue_state(appwrapper(), appwrapper(suspend=False, infos=INFOS))
    assert preempted is None
    # Another template: the AppWrapper's own webhook judges it (components are immutable).
    changed = appwrapper(suspend=False)
    changed["spec"]["components"][0]["template"]["spec"]["tasks"] = [{"name": "x"}]
    assert reapply.kept_kueue_state(changed, appwrapper(suspend=False, infos=INFOS)) is None
    # Nothing to keep.
    same = appwrapper(suspend=False, infos=INFOS)
    assert reapply.kept_kueue_state(copy.deepcopy(same), same) is None


def _job(*, owner: str = "AppWrapper", adopted: bool = False, image: str = "a") -> Obj:
    labels = {names.APPWRAPPER_LABEL: "train"}
    if adopted:
        labels[names.ADOPTION_LABEL] = "adopted"
    return {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
            "metadata": {"name": "train", "namespace": "ml", "labels": labels,
                         "ownerReferences": [{"apiVersion": "workload.codeflare.dev/v1beta2",
                                              "kind": owner, "name": "train", "uid": "u",
                                              "controller": True}]},
            "spec": {"tasks": [{"name": "w", "template": {"spec": {"containers": [
                {"name": "c", "image": image}]}}}]}}  # fmt: skip


def test_a_spec_update_of_a_job_its_appwrapper_created_is_answered_with_the_appwrapper() -> None:
    said = reapply.component_update(_job(image="b"), _job(), "ml")
    assert said is not None
    assert said.startswith("Job ml/train was wrapped into AppWrapper ml/train;")
    assert "kubectl get appwrapper train -n ml" in said
    assert "kubectl delete appwrapper train -n ml" in said


def test_metadata_updates_adopted_jobs_and_other_owners_are_not_its_business() -> None:
    relabelled = _job()
    relabelled["metadata"]["labels"]["team"] = "a"
    assert reapply.component_update(relabelled, _job(), "ml") is None
    assert reapply.component_update(_job(adopted=True, image="b"), _job(adopted=True), "ml") is None
    assert reapply.component_update(_job(owner="Deployment", image="b"),
                                    _job(owner="Deployment"), "ml") is None  # fmt: skip


def test_a_stop_of_the_same_work_is_recognised_and_undone_whole() -> None:
    running = appwrapper(suspend=False, infos=INFOS)
    stop = appwrapper(suspend=True)
    assert reapply.stops_the_same_work(stop, running)
    assert reapply.undone_stop(stop, running)["spec"] == running["spec"]
    # Not a stop: already suspended, or un-suspended (Kueue's admission), or other work.
    assert not reapply.stops_the_same_work(stop, appwrapper(suspend=True))
    assert not reapply.stops_the_same_work(running, appwrapper())
    other = appwrapper(suspend=True)
    other["spec"]["components"][0]["podSets"][0]["replicas"] = 3
    assert not reapply.stops_the_same_work(other, running)
    assert "kubectl delete appwrapper train -n ml" in reapply.stop_warning("ml", "train")
