"""What the live read keeps of each pod (``podmeta.decision_view``): exactly what the release
decisions read, so that a release decided on the kept views is the release decided on the pods
as stored, and a pod someone filled up costs the read a few fields."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from tests.engine.test_adoption import _prepared, _stored
from tests.engine.test_release_guard import _admitted_appwrapper, _job, _volcano_pod
from webhook.core import adoption, podmeta, release
from webhook.model import names

Obj = dict[str, Any]
GPU = {"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}
PLACEMENT = {
    "labels": {"kueue.x-k8s.io/podset": "train-0", "team": "vision"},
    "annotations": {"kueue.x-k8s.io/workload": "train-abc"},
    "nodeSelector": {"pool": "a100"},
    "tolerations": [GPU],
}
PAD = "x" * 50_000


def _padded(pod: Obj) -> Obj:
    """The pod with what its owner may add that no decision reads."""
    pod = copy.deepcopy(pod)
    pod["metadata"]["labels"].update({f"l{i}": "v" * 60 for i in range(100)})
    pod["metadata"]["annotations"]["notes"] = PAD
    pod["metadata"]["managedFields"] = [{"manager": "kubectl", "fieldsV1": {"f:pad": PAD}}]
    spec = pod["spec"]
    spec["containers"][0]["env"] = [{"name": "PAD", "value": PAD}]
    spec["containers"][0]["command"] = ["sleep", PAD]
    spec.setdefault("tolerations", []).append({"key": "mine", "value": PAD})
    spec.setdefault("nodeSelector", {})["zone"] = "z" * 60
    spec["volumes"] = [{"name": "v", "emptyDir": {}}]
    pod["status"] = {**pod.get("status", {}), "message": PAD, "conditions": [{"type": "X"}]}
    return pod


def _stranger(stored: Obj, name: str, *, running: bool, podset: str = "0") -> Obj:
    """A pod a namespace user labels with the AppWrapper's name and fills up."""
    pod = _padded(_volcano_pod(stored, 0, uid=f"uid-{name}", running=running))
    pod["metadata"].update(name=name, ownerReferences=[])
    pod["metadata"]["annotations"][adoption.PODSET_ANNOTATION] = podset
    pod["spec"]["containers"][0]["image"] = "mallory/miner"
    return pod


def _pods(stored: Obj) -> list[Obj]:
    own = [_padded(_volcano_pod(stored, i)) for i in range(4)]
    # One of them with none of the labels a decision reads (its release must add to them).
    for key in (names.APPWRAPPER_LABEL, names.VOLCANO_JOB_NAME):
        own[1]["metadata"]["labels"].pop(key, None)
    # One on a node pool Kueue does not assign (stays gated), one without tolerations.
    own[2]["spec"]["nodeSelector"]["pool"] = "v100"
    own[3]["spec"].pop("tolerations")
    forged = _padded(_volcano_pod(stored, 5, uid="forged"))  # names the Job, not Volcano's
    forged["spec"]["containers"][0]["image"] = "mallory/miner"
    finished = _padded(_volcano_pod(stored, 6, uid="done", running=True))
    finished["status"]["phase"] = "Succeeded"
    leaving = _padded(_volcano_pod(stored, 7, uid="leaving", running=True))
    leaving["metadata"]["deletionTimestamp"] = "2026-11-27T00:00:00Z"
    return [
        *own,
        forged,
        finished,
        leaving,
        _stranger(stored, "aa-running", running=True),
        _stranger(stored, "aa-huge-podset", running=True, podset="0" * 5000 + "1"),
        _stranger(stored, "aa-gated", running=False),
    ]


def _readable(pods: list[Obj]) -> list[Obj]:
    """The pods with the podSet number past what ``int`` reads cut to one it reads that names
    no podSet either: the stored pods as a decision on them would read them."""
    readable = copy.deepcopy(pods)
    for pod in readable:
        annotations = pod["metadata"]["annotations"]
        if len(annotations[adoption.PODSET_ANNOTATION]) > 4000:
            annotations[adoption.PODSET_ANNOTATION] = "1" + "0" * 8
    return readable


def _decided(plan: release.ReleasePlan) -> tuple[Any, ...]:
    return (
        sorted((str(pod["metadata"]["name"]), r.patch) for pod, r in plan.released),
        sorted((str(pod["metadata"]["name"]), why) for pod, why in plan.problems),
        plan.waiting,
        plan.held,
    )


def _views(pods: list[Obj], appwrapper: Obj) -> list[Obj]:
    return [v for p in pods if (v := podmeta.decision_view(p, appwrapper)) is not None]


@pytest.mark.parametrize("placement", [PLACEMENT, {"nodeSelector": {"pool": "a100"}}])
def test_a_release_decided_on_the_kept_views_is_the_release_decided_on_the_pods(
    placement: Obj,
) -> None:
    stored = _stored(_prepared(_job(workers=8)))
    appwrapper = _admitted_appwrapper(stored)
    appwrapper["spec"]["components"][0]["podSetInfos"] = [placement]
    pods = _pods(stored)

    for admitted in (2, 4, 8):
        kept = release.release_plan(appwrapper, _views(pods, appwrapper),
                                     release.Admission((admitted,)))  # fmt: skip
        whole = release.release_plan(appwrapper, _readable(pods),
                                      release.Admission((admitted,)))  # fmt: skip
        assert _decided(kept) == _decided(whole)
    plan = release.release_plan(appwrapper, _views(pods, appwrapper), release.Admission((8,)))
    released = dict((str(p["metadata"]["name"]), r.patch) for p, r in plan.released)
    assert sorted(released) == ["train-worker-0", "train-worker-1", "train-worker-3"]
    # added to the labels it has, never written over them
    assert {"op": "add", "path": "/metadata/labels/autowrap.io~1released", "value": "true"} in (
        released["train-worker-1"]
    )
    if placement is PLACEMENT:
        assert {"op": "add", "path": "/spec/tolerations", "value": [GPU]} in (
            released["train-worker-3"]
        )
    problems = {str(p["metadata"]["name"]): why for p, why in plan.problems}
    assert "'v100' on the pod" in problems["train-worker-2"]
    assert "train-worker-5" in problems


def test_pods_that_run_without_admission_are_counted_the_same_on_the_kept_views() -> None:
    stored = _stored(_prepared(_job(workers=8)))
    appwrapper = _admitted_appwrapper(stored)
    appwrapper["spec"]["suspend"] = True
    pods = _pods(stored)
    pods[0] = _padded(_volcano_pod(stored, 0, running=True))  # its gate taken off

    assert release.escaped(appwrapper, _views(pods, appwrapper)) == 1
    assert release.escaped(appwrapper, _readable(pods)) == 1


def test_a_pod_filled_up_by_someone_else_is_kept_in_a_few_fields() -> None:
    stored = _stored(_prepared(_job(workers=8)))
    appwrapper = _admitted_appwrapper(stored)
    for pod in _pods(stored):
        view = podmeta.decision_view(pod, appwrapper)
        if view is None:
            assert pod["metadata"]["name"] in ("train-worker-6", "train-worker-7")
            continue
        # The object's own pods keep their containers' names, images and resources too.
        bound = 600 if not release.belongs(pod, appwrapper) else 2_000
        assert len(json.dumps(view)) < bound, view
