"""Which pods an admission releases and which it counts (SPEC section 11: "a pod released on an
admission was made by its object's own controller from the admitted template, and every
running pod that claims the object counts"), and when a Workload says admitted at all.

The AppWrapper is the one the controller builds from the stored Job (``adoption.plan``), and
each pod is made as Volcano's createJobPod makes it (job_controller_util.go: the template copied,
named ``{job}-{task}-{i}``, the job-name and task-spec annotations, the job's priority class
where the template has none, a controller reference to the Job).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.builders import context, volcano_job
from tests.engine.test_adoption import _prepared, _stored
from webhook.core import adoption, release
from webhook.model import names

Obj = dict[str, Any]
PLACEMENT = {"labels": {"kueue.x-k8s.io/podset": "train-0"}}


def _job(*, workers: int = 3, priority: str = "") -> Obj:
    job = volcano_job("train").queue("gpu-queue").task("worker", replicas=workers, gpus=1).build()
    if priority:
        job["spec"]["priorityClassName"] = priority
    return job


def _admitted_appwrapper(stored: Obj) -> Obj:
    """The AppWrapper as Kueue leaves it once admitted: its podSet's placement written."""
    built = adoption.plan(stored, context(ns="ml")).appwrapper
    assert built is not None
    appwrapper = copy.deepcopy(built)
    appwrapper["metadata"]["uid"] = "aw-uid"
    appwrapper["spec"]["suspend"] = False
    appwrapper["spec"]["components"][0]["podSetInfos"] = [PLACEMENT]
    return appwrapper


def _volcano_pod(stored: Obj, index: int, *, uid: str = "", running: bool = False) -> Obj:
    task = stored["spec"]["tasks"][0]
    template = copy.deepcopy(task["template"])
    name = f"train-{task['name']}-{index}"
    metadata = template["metadata"]
    metadata.update(name=name, namespace="ml", uid=uid or f"pod-{index}", resourceVersion="3")
    written = {names.VOLCANO_JOB_NAME: "train", names.VOLCANO_TASK_SPEC: task["name"],
               names.VOLCANO_TASK_INDEX: str(index)}  # fmt: skip
    metadata["annotations"].update(written)
    metadata["labels"].update(written)
    metadata["ownerReferences"] = [{"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
                                    "name": "train", "uid": stored["metadata"]["uid"],
                                    "controller": True}]  # fmt: skip
    spec = template["spec"]
    if stored["spec"].get("priorityClassName") and not spec.get("priorityClassName"):
        spec["priorityClassName"] = stored["spec"]["priorityClassName"]
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}
    if running:
        adoption.ungate_spec(spec)
        pod["status"] = {"phase": "Running"}
    return pod


def _released(appwrapper: Obj, pods: list[Obj], admitted: int = 4) -> list[str]:
    plan = release.release_plan(appwrapper, pods, release.Admission((admitted,)))
    return sorted(str(pod["metadata"]["name"]) for pod, _ in plan.released)


def _problems(appwrapper: Obj, pods: list[Obj]) -> dict[str, str]:
    plan = release.release_plan(appwrapper, pods, release.Admission((4,)))
    return {str(pod["metadata"]["name"]): why for pod, why in plan.problems}


# --- T-01: only the object's own pods are released, with room to spare ------------------------


def test_a_gated_pod_controlled_by_another_object_is_never_released_even_with_room() -> None:
    stored = _stored(_prepared(_job(workers=4)))
    appwrapper = _admitted_appwrapper(stored)
    own = _volcano_pod(stored, 0)
    forged = _volcano_pod(stored, 1, uid="forged")
    forged["metadata"]["name"] = "aa-borrow"  # first by name, as in the review
    forged["metadata"]["ownerReferences"][0]["uid"] = "another-job-uid"

    assert _released(appwrapper, [forged, own], admitted=4) == ["train-worker-0"]


def test_a_pod_that_names_the_job_but_not_its_template_is_held_and_says_why() -> None:
    stored = _stored(_prepared(_job(workers=4)))
    appwrapper = _admitted_appwrapper(stored)
    image = _volcano_pod(stored, 1)
    image["spec"]["containers"][0]["image"] = "mallory/miner"
    gpus = _volcano_pod(stored, 2)
    gpus["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = 8
    named = _volcano_pod(stored, 3)
    named["metadata"]["name"] = "aa-borrow"
    unannotated = _volcano_pod(stored, 0)
    del unannotated["metadata"]["annotations"][names.VOLCANO_JOB_NAME]

    problems = _problems(appwrapper, [image, gpus, named, unannotated])

    assert set(problems) == {"train-worker-1", "train-worker-2", "aa-borrow", "train-worker-0"}
    assert "mallory/miner" in problems["train-worker-1"]
    assert "resources.limits" in problems["train-worker-2"]
    assert "train-worker-<i>" in problems["aa-borrow"]
    assert names.VOLCANO_JOB_NAME in problems["train-worker-0"]
    assert _released(appwrapper, [image, gpus, named, unannotated]) == []


def test_a_pod_whose_priority_class_is_not_the_admitted_one_is_held() -> None:
    stored = _stored(_prepared(_job(workers=2)))
    appwrapper = _admitted_appwrapper(stored)
    # The Job's class was changed after admission; Volcano gives it to the pod it re-creates.
    changed = copy.deepcopy(stored)
    changed["spec"]["priorityClassName"] = "cluster-critical-training"
    pod = _volcano_pod(changed, 0)

    assert _released(appwrapper, [pod]) == []
    assert "cluster-critical-training" in _problems(appwrapper, [pod])["train-worker-0"]


def test_the_jobs_own_priority_class_as_adopted_is_the_effective_one() -> None:
    stored = _stored(_prepared(_job(workers=2, priority="research")))
    appwrapper = _admitted_appwrapper(stored)

    assert _released(appwrapper, [_volcano_pod(stored, 0)]) == ["train-worker-0"]


def test_a_limit_range_default_for_cpu_does_not_hold_a_pod_but_an_extra_gpu_does() -> None:
    stored = _stored(_prepared(_job(workers=2)))
    appwrapper = _admitted_appwrapper(stored)
    defaulted = _volcano_pod(stored, 0)
    defaulted["spec"]["containers"][0]["resources"].setdefault("requests", {})["cpu"] = "500m"
    extra = _volcano_pod(stored, 1)
    extra["spec"]["containers"][0]["resources"].setdefault("requests", {})["example.com/fpga"] = 1

    assert _released(appwrapper, [defaulted, extra]) == ["train-worker-0"]


# --- every running pod that claims the object counts -------------------------------------------


@pytest.mark.parametrize(
    "keep",
    ["controller", "appwrapper-label", "job-name-annotation"],
)
def test_a_running_pod_counts_by_any_claim_whatever_labels_it_lost(keep: str) -> None:
    stored = _stored(_prepared(_job(workers=1)))
    appwrapper = _admitted_appwrapper(stored)
    running = _volcano_pod(stored, 0, uid="stray", running=True)
    running["metadata"]["name"] = "aa-borrow"
    metadata = running["metadata"]
    if keep != "controller":
        metadata["ownerReferences"] = []
    if keep != "appwrapper-label":
        del metadata["labels"][names.APPWRAPPER_LABEL]
    if keep != "job-name-annotation":
        del metadata["annotations"][names.VOLCANO_JOB_NAME]
        del metadata["labels"][names.VOLCANO_JOB_NAME]
    own = _volcano_pod(stored, 0)

    plan = release.release_plan(appwrapper, [running, own], release.Admission((1,)))

    assert plan.released == ()
    assert plan.held and "aa-borrow" in plan.held[0], plan.held


def test_a_running_pod_that_names_no_podset_counts_in_every_podset() -> None:
    stored = _stored(_prepared(_job(workers=1)))
    appwrapper = _admitted_appwrapper(stored)
    stray = _volcano_pod(stored, 0, uid="stray", running=True)
    stray["metadata"]["annotations"][adoption.PODSET_ANNOTATION] = "7"

    assert _released(appwrapper, [stray, _volcano_pod(stored, 0)], admitted=1) == []


def test_the_selectors_find_pods_by_the_appwrapper_label_and_volcanos_job_name() -> None:
    appwrapper = _admitted_appwrapper(_stored(_prepared(_job())))
    assert release.claim_selectors(appwrapper) == [
        f"{names.APPWRAPPER_LABEL}=train",
        f"{names.VOLCANO_JOB_NAME}=train",
    ]


# --- T-02: an evicted Workload is not an admission -------------------------------------------


def _workload(*conditions: str) -> Obj:
    return {
        "metadata": {"ownerReferences": [{"uid": "aw-uid", "controller": True}]},
        "spec": {"podSets": [{"name": "train-0", "count": 4}]},
        "status": {
            "conditions": [{"type": c, "status": "True"} for c in conditions],
            "admission": {"podSetAssignments": [{"name": "train-0", "count": 4}]},
        },
    }


def test_a_workload_admitted_and_evicted_is_no_admission() -> None:
    appwrapper = {"metadata": {"uid": "aw-uid"}}
    assert release.admission(appwrapper, [_workload("QuotaReserved", "Admitted")]) == (
        release.Admission((4,))
    )
    # Kueue's first phase of an eviction: Evicted=True while Admitted and status.admission
    # remain until the job is stopped (jobframework reconciler.go, "handle eviction").
    evicted = _workload("QuotaReserved", "Admitted", "Evicted")
    assert release.admission(appwrapper, [evicted]) is None
