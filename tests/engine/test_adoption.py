"""Adopt mode's pure core: what admission stores, what the controller builds and decides."""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch
import pytest

from tests.builders import context, pod, policy, spec_of, volcano_job
from webhook.core import adoption, engine, release
from webhook.model import names, objects

GATE = {"name": names.ADMISSION_GATE}


def _prepared(obj: dict[str, Any], *, user: str = "alice", ns: str = "ml") -> dict[str, Any]:
    obj = copy.deepcopy(obj)
    obj.setdefault("metadata", {})["namespace"] = ns
    outcome = engine.admit(obj, context(ns=ns, uid="uid-1", user=user))
    assert outcome.action is engine.Action.WRAP, outcome.reason
    return adoption.prepare(obj, outcome, user=user)


def _stored(prepared: dict[str, Any], uid: str = "job-uid") -> dict[str, Any]:
    """What the apiserver stores: server fields and Volcano's defaults added."""
    stored = copy.deepcopy(prepared)
    stored["metadata"].update(
        uid=uid, resourceVersion="7", creationTimestamp="2026-11-23T00:00:00Z"
    )
    stored["spec"].setdefault("queue", "default")
    stored["spec"].setdefault("maxRetry", 3)
    for task in stored["spec"].get("tasks", []):
        task.setdefault("minAvailable", task.get("replicas", 1))
    stored["spec"].setdefault("minAvailable", sum(t["replicas"] for t in stored["spec"]["tasks"]))
    return stored


def _job() -> dict[str, Any]:
    return (
        volcano_job("train")
        .queue("gpu-queue")
        .task("master", replicas=1, gpus=8)
        .task("worker", replicas=3, gpus=8)
        .build()
    )


# --- admission: CREATE ----------------------------------------------------------------------


def test_every_pod_template_is_gated_labelled_and_indexed() -> None:
    prepared = _prepared(_job())

    for index, task in enumerate(prepared["spec"]["tasks"]):
        template = task["template"]
        assert GATE in template["spec"]["schedulingGates"]
        assert template["metadata"]["labels"][names.APPWRAPPER_LABEL] == "train"
        assert template["metadata"]["annotations"][adoption.PODSET_ANNOTATION] == str(index)
        assert names.QUEUE_LABEL not in template["metadata"]["labels"]
        env = {e["name"] for e in template["spec"]["containers"][0]["env"]}
        assert {"MASTER_ADDR", "WORLD_SIZE", "NNODES", "RANK"} <= env


def test_the_object_is_marked_pending_with_a_finalizer_and_its_queue_and_user() -> None:
    prepared = _prepared(_job(), user="alice")

    metadata = prepared["metadata"]
    assert metadata["labels"][names.ADOPTION_LABEL] == names.ADOPTION_PENDING
    assert metadata["finalizers"] == [names.ADOPTION_FINALIZER]
    assert metadata["annotations"][names.QUEUE_ANNOTATION] == "gpu-queue"
    assert metadata["annotations"][names.REQUESTED_BY_ANNOTATION] == "alice"
    # A Volcano Job keeps its own queue label: Kueue never reads Volcano Jobs.
    assert metadata["labels"][names.QUEUE_LABEL] == "gpu-queue"


def test_a_pod_loses_its_queue_label_so_kueue_does_not_queue_it_twice() -> None:
    prepared = _prepared(pod("solo").queue("q").wrap().build())

    assert names.QUEUE_LABEL not in prepared["metadata"]["labels"]
    assert prepared["metadata"]["annotations"][names.QUEUE_ANNOTATION] == "q"
    assert GATE in prepared["spec"]["schedulingGates"]
    assert prepared["metadata"]["labels"][names.APPWRAPPER_LABEL] == "solo"
    assert prepared["spec"]["hostname"] == "solo"


def test_a_generate_name_object_is_named_at_admission() -> None:
    job = volcano_job("x").generate_name("train-").build()

    prepared = _prepared(job)

    name = prepared["metadata"]["name"]
    assert name.startswith("train-") and "generateName" not in prepared["metadata"]
    labels = prepared["spec"]["tasks"][0]["template"]["metadata"]["labels"]
    assert labels[names.APPWRAPPER_LABEL] == name


def test_preparing_twice_changes_nothing_and_validation_accepts_the_prepared_object() -> None:
    prepared = _prepared(_job())

    outcome = engine.admit(copy.deepcopy(prepared), context(ns="ml", uid="uid-2", user="alice"))

    assert outcome.action is engine.Action.WRAP
    assert not outcome.verdict().denied, outcome.verdict().errors
    assert adoption.prepare(prepared, outcome, user="alice") == prepared


def test_validation_of_a_prepared_pod_is_not_skipped_for_its_appwrapper_label() -> None:
    bad = pod("solo").wrap().env("MASTER_PORT", "1").build()
    bad["metadata"]["namespace"] = "ml"
    outcome = engine.admit(bad, context(ns="ml"))
    prepared = adoption.prepare(bad, outcome, user="")

    again = engine.admit(prepared, context(ns="ml"))

    assert again.action is engine.Action.WRAP
    assert any("MASTER_PORT" in e for e in again.verdict().errors)


# --- admission: UPDATE -----------------------------------------------------------------------


def _reapplied(manifest: dict[str, Any], stored: dict[str, Any]) -> dict[str, Any]:
    """What a client-side ``kubectl apply`` of the manifest asks the apiserver to store: the
    stored object with the manifest's atomic ``spec.tasks`` (a JSON merge patch)."""
    new = copy.deepcopy(stored)
    new["spec"]["tasks"] = copy.deepcopy(manifest["spec"]["tasks"])
    return new


def test_reapplying_the_unchanged_manifest_gets_the_stored_spec_back() -> None:
    manifest = _job()
    stored = _stored(_prepared(manifest))

    normalized = adoption.normalize_update(_reapplied(manifest, stored), stored, spec_of())

    assert normalized is not None
    assert normalized["spec"] == stored["spec"]


def test_server_side_apply_of_the_unchanged_manifest_is_normalized_too() -> None:
    manifest = _job()
    stored = _stored(_prepared(manifest))
    applied = copy.deepcopy(stored)
    applied["spec"] = {**stored["spec"], **copy.deepcopy(manifest["spec"])}

    normalized = adoption.normalize_update(applied, stored, spec_of())

    assert normalized is not None and normalized["spec"] == stored["spec"]


def test_reapplying_a_manifest_whose_quantities_were_stored_canonical_is_normalized() -> None:
    """Volcano's webhook writes the typed Job back: ``nvidia.com/gpu: 1`` is stored as "1",
    ``cpu: 0.5`` as "500m", ``1024Mi`` as "1Gi"; the manifest re-applied is still no change."""
    manifest = _job()
    for task in manifest["spec"]["tasks"]:
        task["template"]["spec"]["containers"][0]["resources"] = {
            "requests": {"cpu": "0.5", "memory": "1024Mi"},
            "limits": {"cpu": 0.5, "memory": "1024Mi", "nvidia.com/gpu": 1},
        }
    stored = _stored(_prepared(manifest))
    for task in stored["spec"]["tasks"]:
        task["template"]["spec"]["containers"][0]["resources"] = {
            "requests": {"cpu": "500m", "memory": "1Gi"},
            "limits": {"cpu": "500m", "memory": "1Gi", "nvidia.com/gpu": "1"},
        }

    normalized = adoption.normalize_update(_reapplied(manifest, stored), stored, spec_of())

    assert normalized is not None and normalized["spec"] == stored["spec"]
    # More GPUs is still a change, however it is spelled.
    manifest["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["resources"]["limits"][
        "nvidia.com/gpu"
    ] = "2"
    assert adoption.normalize_update(_reapplied(manifest, stored), stored, spec_of()) is None


@pytest.mark.parametrize(
    "change",
    [
        lambda t: t[1].update(replicas=5),
        lambda t: t[0]["template"]["spec"]["containers"][0].update(image="other:2"),
        lambda t: t.append(
            {"name": "extra", "replicas": 1, "template": copy.deepcopy(t[0]["template"])}
        ),
    ],
    ids=["replicas", "image", "new task"],
)
def test_a_real_change_reaches_volcano_unchanged(change: Any) -> None:
    manifest = _job()
    stored = _stored(_prepared(manifest))
    edited = copy.deepcopy(manifest)
    change(edited["spec"]["tasks"])

    assert adoption.normalize_update(_reapplied(edited, stored), stored, spec_of()) is None


def test_objects_autowrap_did_not_prepare_are_left_to_their_own_webhooks() -> None:
    manifest = _job()
    stored = _stored(manifest)

    assert adoption.normalize_update(_reapplied(manifest, stored), stored, spec_of()) is None


# --- the controller: the AppWrapper ------------------------------------------------------------


def test_the_appwrapper_is_built_from_the_stored_object_without_adoption_bookkeeping() -> None:
    stored = _stored(_prepared(_job()))

    plan = adoption.plan(stored, context(ns="ml"))

    assert plan.errors == ()
    appwrapper = plan.appwrapper
    assert appwrapper is not None
    annotations = appwrapper["metadata"]["annotations"]
    assert annotations[names.ADMISSION_GATED_BY_ANNOTATION] == names.ADOPTION_FINALIZER
    assert annotations[names.ORIGIN_UID_ANNOTATION] == "job-uid"
    assert annotations[names.REQUESTED_BY_ANNOTATION] == "alice"
    assert appwrapper["metadata"]["labels"][names.QUEUE_LABEL] == "gpu-queue"
    assert appwrapper["metadata"]["labels"][names.ADOPTED_LABEL] == "true"
    assert appwrapper["spec"]["suspend"] is True
    component = appwrapper["spec"]["components"][0]
    assert [p["replicas"] for p in component["podSets"]] == [1, 3]
    job = component["template"]
    assert names.ADOPTION_LABEL not in job["metadata"].get("labels", {})
    assert "finalizers" not in job["metadata"] and "uid" not in job["metadata"]
    for task in job["spec"]["tasks"]:
        assert "schedulingGates" not in task["template"]["spec"]
        assert adoption.PODSET_ANNOTATION not in task["template"]["metadata"].get("annotations", {})


def test_the_same_manifest_created_again_has_the_same_spec_hash() -> None:
    first = adoption.plan(_stored(_prepared(_job()), uid="a"), context(ns="ml"))
    second = adoption.plan(_stored(_prepared(_job()), uid="b"), context(ns="ml"))

    assert first.appwrapper is not None and second.appwrapper is not None
    hash_key = names.SPEC_HASH_ANNOTATION
    assert (
        first.appwrapper["metadata"]["annotations"][hash_key]
        == second.appwrapper["metadata"]["annotations"][hash_key]
    )


def test_an_object_that_skipped_the_webhooks_is_judged_all_the_same() -> None:
    forged = _stored(_prepared(_job()))
    forged["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["env"].append(
        {"name": "NCCL_SECRET", "value": "x"}
    )

    plan = adoption.plan(forged, context(policy().reserved_env("NCCL_SECRET"), ns="ml"))

    assert plan.appwrapper is None
    assert any("NCCL_SECRET" in e for e in plan.errors)


def test_an_uncovered_namespace_is_not_adopted() -> None:
    stored = _stored(_prepared(_job()))

    plan = adoption.plan(stored, context(policy().names("other"), ns="ml"))

    assert plan.appwrapper is None and "not covered" in plan.errors[0]


def test_readoption_needs_a_suspended_appwrapper_with_the_same_spec() -> None:
    plan = adoption.plan(_stored(_prepared(_job())), context(ns="ml"))
    assert plan.appwrapper is not None
    earlier = copy.deepcopy(plan.appwrapper)
    earlier["status"] = {"phase": "Suspended"}

    assert adoption.may_readopt(earlier, plan.appwrapper)
    running = copy.deepcopy(earlier)
    running["status"]["phase"] = "Succeeded"
    assert not adoption.may_readopt(running, plan.appwrapper)
    other = copy.deepcopy(earlier)
    other["spec"]["components"][0]["template"]["spec"]["tasks"][1]["replicas"] = 5
    assert not adoption.may_readopt(other, plan.appwrapper)
    requeued = copy.deepcopy(earlier)
    requeued["metadata"]["labels"][names.QUEUE_LABEL] = "elsewhere"
    assert not adoption.may_readopt(requeued, plan.appwrapper)


def test_readoption_compares_the_wrapped_work_not_a_copyable_spec_hash() -> None:
    plan = adoption.plan(_stored(_prepared(_job())), context(ns="ml"))
    assert plan.appwrapper is not None
    forged = copy.deepcopy(plan.appwrapper)
    forged["status"] = {"phase": "Suspended"}
    task = forged["spec"]["components"][0]["template"]["spec"]["tasks"][0]
    task["template"]["spec"]["containers"][0]["image"] = "someone-else:1"

    assert (
        forged["metadata"]["annotations"][names.SPEC_HASH_ANNOTATION]
        == plan.appwrapper["metadata"]["annotations"][names.SPEC_HASH_ANNOTATION]
    )
    assert not adoption.may_readopt(forged, plan.appwrapper)


# --- the controller: releasing pods ---------------------------------------------------------------


def _gated_pod(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "train-worker-0",
            "resourceVersion": "7",
            "labels": {"app": "x"},
            "annotations": {adoption.PODSET_ANNOTATION: "1"},
        },  # fmt: skip
        "spec": {"schedulingGates": [GATE, {"name": "other.io/gate"}], **spec},
    }


INFO = {
    "labels": {"kueue.x-k8s.io/podset": "train-1"},
    "annotations": {"a": "b"},
    "nodeSelector": {"cloud.example/pool": "a100"},
    "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
}


def test_release_applies_kueues_placement_and_removes_only_autowraps_gate() -> None:
    released = release.ungate(_gated_pod(), INFO)

    pod_ = released.pod
    assert pod_ is not None and released.problem == ""
    # Marked released, which takes it out of the controller's watch of pods still to release.
    assert pod_["metadata"]["labels"] == {"app": "x", "kueue.x-k8s.io/podset": "train-1",
                                          names.RELEASED_LABEL: "true"}  # fmt: skip
    assert pod_["metadata"]["annotations"]["a"] == "b"
    assert pod_["spec"]["nodeSelector"] == {"cloud.example/pool": "a100"}
    assert pod_["spec"]["tolerations"] == INFO["tolerations"]
    assert pod_["spec"]["schedulingGates"] == [{"name": "other.io/gate"}]
    # The write is a JSON patch that makes exactly that pod of the stored one.
    assert jsonpatch.apply_patch(_gated_pod(), list(released.patch)) == pod_


def test_the_release_patch_is_guarded_by_resource_version_and_the_gates_position() -> None:
    pod_ = _gated_pod()
    released = release.ungate(pod_, INFO)

    assert released.patch[0] == {"op": "test", "path": "/metadata/resourceVersion", "value": "7"}
    moved = copy.deepcopy(pod_)
    moved["spec"]["schedulingGates"].reverse()
    with pytest.raises(jsonpatch.JsonPatchTestFailed):
        jsonpatch.apply_patch(moved, list(released.patch))
    changed = copy.deepcopy(pod_)
    changed["metadata"]["resourceVersion"] = "8"
    with pytest.raises(jsonpatch.JsonPatchTestFailed):
        jsonpatch.apply_patch(changed, list(released.patch))


def test_a_conflicting_node_selector_leaves_the_pod_gated_and_says_why() -> None:
    released = release.ungate(_gated_pod(nodeSelector={"cloud.example/pool": "h100"}), INFO)

    assert released.pod is None
    assert "'cloud.example/pool' is 'h100' on the pod, Kueue assigns 'a100'" in released.problem


def test_a_topology_gate_cannot_be_added_and_redirect_is_advised() -> None:
    released = release.ungate(
        _gated_pod(), {"schedulingGates": [{"name": "kueue.x-k8s.io/topology"}]}
    )

    assert released.pod is None and "mode: Redirect" in released.problem


def test_the_podset_annotation_picks_the_podset_info() -> None:
    appwrapper = {
        "spec": {"components": [{"podSetInfos": [{"labels": {"i": "0"}}, {"labels": {"i": "1"}}]}]}
    }

    assert release.podset_info(appwrapper, _gated_pod()) == {"labels": {"i": "1"}}
    missing = copy.deepcopy(_gated_pod())
    missing["metadata"]["annotations"][adoption.PODSET_ANNOTATION] = "5"
    assert release.podset_info(appwrapper, missing) is None


# --- the controller: deletes and status ------------------------------------------------------------


def _aw(
    phase: str, *, suspend: bool = True, uid: str = "job-uid", deleting: bool = False
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "train", "annotations": {names.ORIGIN_UID_ANNOTATION: uid}}
    if deleting:
        metadata["deletionTimestamp"] = "2026-11-23T00:00:00Z"
    return {"metadata": metadata, "spec": {"suspend": suspend}, "status": {"phase": phase}}


JOB = {"metadata": {"name": "train", "uid": "job-uid"}}


@pytest.mark.parametrize(
    ("appwrapper", "who"),
    [
        (_aw(""), adoption.Deletion.BY_USER),
        (_aw("Suspended"), adoption.Deletion.BY_USER),
        (_aw("Resuming", suspend=False), adoption.Deletion.BY_USER),
        (_aw("Running", suspend=False), adoption.Deletion.BY_USER),
        (_aw("Running", suspend=True), adoption.Deletion.BY_APPWRAPPER),
        (_aw("Suspending"), adoption.Deletion.BY_APPWRAPPER),
        (_aw("Resetting", suspend=False), adoption.Deletion.BY_APPWRAPPER),
        (_aw("Succeeded", suspend=False), adoption.Deletion.BY_APPWRAPPER),
        (_aw("Failed", suspend=False), adoption.Deletion.BY_APPWRAPPER),
        (_aw("Running", suspend=False, deleting=True), adoption.Deletion.BY_APPWRAPPER),
        (_aw("Suspended", uid="someone-else"), adoption.Deletion.BY_APPWRAPPER),
        (None, adoption.Deletion.BY_APPWRAPPER),
    ],
)
def test_who_deletes_the_object_is_told_by_its_appwrappers_phase(
    appwrapper: dict[str, Any] | None, who: adoption.Deletion
) -> None:
    assert adoption.deletion(appwrapper, JOB) is who


def test_the_finalizer_stays_until_the_appwrapper_first_runs() -> None:
    assert not adoption.finalizer_done(_aw("Suspended"))
    assert not adoption.finalizer_done(_aw("Resuming", suspend=False))
    assert adoption.finalizer_done(_aw("Running", suspend=False))
    assert not adoption.finalizer_done(None)


def test_the_status_says_why_pods_wait() -> None:
    queued = _aw("Suspended")
    queued["metadata"]["labels"] = {names.QUEUE_LABEL: "gpu-queue"}

    assert "Queued in LocalQueue 'gpu-queue'" in adoption.status(queued, pending=False).text
    assert adoption.status(_aw("Running", suspend=False), pending=False).reason == "Running"
    preempted = adoption.status(_aw("Running", suspend=True), pending=False)
    assert preempted.reason == "Preempted" and preempted.type == "Warning"
    assert (
        objects.name_of(queued) in adoption.status(_aw("Failed", suspend=False), pending=False).text
    )


def test_the_preview_shows_the_stored_object_and_the_appwrapper_the_controller_creates() -> None:
    job = _job()
    job["metadata"]["namespace"] = "ml"
    ctx = context(ns="ml", user="alice")

    stored, appwrapper = adoption.preview(job, engine.admit(job, ctx), ctx)

    assert stored["metadata"]["labels"][names.ADOPTION_LABEL] == names.ADOPTION_PENDING
    assert appwrapper["kind"] == "AppWrapper" and appwrapper["metadata"]["name"] == "train"
    assert names.ORIGIN_UID_ANNOTATION not in appwrapper["metadata"]["annotations"]


def test_only_an_object_with_every_template_gated_counts_as_prepared() -> None:
    prepared = _prepared(_job())
    assert adoption.is_prepared(prepared)

    forged = copy.deepcopy(prepared)
    del forged["spec"]["tasks"][1]["template"]["spec"]["schedulingGates"]
    assert not adoption.is_prepared(forged)
    unlabelled = copy.deepcopy(prepared)
    del unlabelled["metadata"]["labels"][names.ADOPTION_LABEL]
    assert not adoption.is_prepared(unlabelled)
    # Pods born marked released would never reach the controller's watch of pods to release.
    marked = copy.deepcopy(prepared)
    marked["spec"]["tasks"][0]["template"]["metadata"]["labels"][names.RELEASED_LABEL] = "true"
    assert not adoption.is_prepared(marked)


def test_a_template_marked_released_is_prepared_without_the_mark() -> None:
    job = _job()
    job["spec"]["tasks"][1]["template"].setdefault("metadata", {}).setdefault("labels", {})[
        names.RELEASED_LABEL
    ] = "true"
    prepared = _prepared(job)

    assert all(names.RELEASED_LABEL not in t["template"]["metadata"]["labels"]
               for t in prepared["spec"]["tasks"])  # fmt: skip
    assert adoption.is_prepared(prepared)


def _appwrapper_for(
    obj: dict[str, Any], phase: str, *, suspend: bool, admitted_before: bool
) -> dict[str, Any]:
    conditions = [{"type": "QuotaReserved", "status": "False"}] if admitted_before else []
    return {
        "metadata": {"name": "train", "uid": "aw-uid",
                     "annotations": {names.ORIGIN_UID_ANNOTATION: obj["metadata"]["uid"]}},
        "spec": {"suspend": suspend},
        "status": {"phase": phase, "conditions": conditions},
    }  # fmt: skip


@pytest.mark.parametrize(
    ("phase", "suspend", "admitted_before", "who"),
    [
        ("Suspended", True, False, adoption.Deletion.BY_USER),  # queued: only the user deletes
        ("Suspended", True, True, adoption.Deletion.BY_APPWRAPPER),  # preempted while resuming
        ("Running", False, True, adoption.Deletion.BY_USER),
        ("Running", True, True, adoption.Deletion.BY_APPWRAPPER),  # suspending
        ("Resetting", False, True, adoption.Deletion.BY_APPWRAPPER),
    ],
)
def test_who_deletes_the_object_follows_the_appwrappers_history(
    phase: str, suspend: bool, admitted_before: bool, who: adoption.Deletion
) -> None:
    obj = {"metadata": {"uid": "job-uid"}}
    appwrapper = _appwrapper_for(obj, phase, suspend=suspend, admitted_before=admitted_before)

    assert adoption.deletion(appwrapper, obj) is who


@pytest.mark.parametrize(
    ("phase", "suspend", "admitted_before", "verdict"),
    [
        ("", True, False, adoption.Collect.LATER),
        ("Suspended", True, False, adoption.Collect.LATER),
        ("Suspended", True, True, adoption.Collect.KEEP),  # preempted: it re-creates the object
        ("Running", False, True, adoption.Collect.NOW),
        ("Resuming", False, True, adoption.Collect.KEEP),
        ("Succeeded", False, True, adoption.Collect.KEEP),
    ],
)
def test_an_appwrapper_whose_object_is_gone_is_collected_only_when_it_holds_nothing_to_come_back(
    phase: str, suspend: bool, admitted_before: bool, verdict: adoption.Collect
) -> None:
    obj = {"metadata": {"uid": "job-uid"}}
    appwrapper = _appwrapper_for(obj, phase, suspend=suspend, admitted_before=admitted_before)

    assert adoption.collect(appwrapper) is verdict


def test_a_queued_appwrapper_whose_object_is_gone_is_orphaned_whoever_took_the_name() -> None:
    gone = {"metadata": {"uid": "job-uid"}}
    queued = _appwrapper_for(gone, "Suspended", suspend=True, admitted_before=False)
    new = {"metadata": {"uid": "new-uid"}}
    own_copy = {"metadata": {"uid": "again", "ownerReferences": [{"uid": "aw-uid"}]}}

    assert adoption.orphaned(queued, None)
    assert adoption.orphaned(queued, new)  # the name was taken again, by other work
    assert not adoption.orphaned(queued, gone)  # its object is still there
    assert not adoption.orphaned(queued, own_copy)  # its controller made it again
    running = _appwrapper_for(gone, "Running", suspend=False, admitted_before=True)
    assert not adoption.orphaned(running, new)  # it would delete the new one by name (A7)
    preempted = _appwrapper_for(gone, "Suspended", suspend=True, admitted_before=True)
    assert not adoption.orphaned(preempted, new)


def test_an_adopted_objects_cached_view_keeps_only_what_keys_and_decides() -> None:
    job = _prepared(_job())
    job["status"] = {"state": {"phase": "Pending"}}
    job["metadata"]["managedFields"] = [{"manager": "kubectl"}]
    job["metadata"]["labels"][names.ADOPTION_LABEL] = names.ADOPTION_ADOPTED

    view = adoption.object_view(job)

    assert "status" not in view and "managedFields" not in view["metadata"]
    assert adoption.appwrapper_name_of(view) == adoption.appwrapper_name_of(job)
    assert all("spec" not in t["template"] for t in view["spec"]["tasks"])
    assert view["metadata"]["finalizers"] == job["metadata"]["finalizers"]
    # A pending object is kept whole: its AppWrapper is built from it.
    job["metadata"]["labels"][names.ADOPTION_LABEL] = names.ADOPTION_PENDING
    assert adoption.object_view(job)["spec"] == job["spec"]


def test_the_release_marks_a_pod_without_labels_released() -> None:
    pod_ = _gated_pod()
    del pod_["metadata"]["labels"]
    released = release.ungate(pod_, {})

    assert released.pod is not None
    assert released.pod["metadata"]["labels"] == {names.RELEASED_LABEL: "true"}
    assert jsonpatch.apply_patch(pod_, list(released.patch)) == released.pod


def _appwrapper_status(*conditions: dict, managers: tuple[str, ...] = ()) -> dict:
    return {
        "metadata": {"name": "train", "namespace": "ml", "resourceVersion": "9",
                     "managedFields": [{"manager": m, "operation": "Update", "time": "t"}
                                       for m in managers]},
        "spec": {"suspend": False, "components": []},
        "status": {"phase": "Running", "conditions": list(conditions)},
    }  # fmt: skip


def test_the_appwrapper_cache_ignores_what_no_decision_reads() -> None:
    """Conditions that move as pods come and go, and other writers' managedFields entries,
    leave the cached AppWrapper as it was: their writes wake no reconcile."""
    quota = {"type": "QuotaReserved", "status": "True", "reason": "Resuming"}
    early = adoption.appwrapper_view(_appwrapper_status(
        quota, {"type": "PodsReady", "status": "False", "reason": "InsufficientPodsReady"},
        managers=(names.FIELD_MANAGER,)))  # fmt: skip
    later = adoption.appwrapper_view(_appwrapper_status(
        quota, {"type": "PodsReady", "status": "True", "reason": "SufficientPodsReady"},
        {"type": "ResourcesDeployed", "status": "True", "reason": "Resuming"},
        managers=(names.FIELD_MANAGER, "kueue", "appwrapper-controller")))  # fmt: skip
    assert early == later
    assert adoption.was_admitted(later)

    failed = adoption.appwrapper_view(_appwrapper_status(
        quota, {"type": "Unhealthy", "status": "True", "reason": "MissingComponent",
                "message": "component train is gone"}))  # fmt: skip
    assert failed != later
    assert (
        "component train is gone"
        in adoption.status(
            {**failed, "status": {**failed["status"], "phase": "Failed"}}, pending=False
        ).text
    )
