"""The controller's side of adopt mode's pure core, one decision at a time, on plain dicts:
which Workload says an AppWrapper is admitted and for how many pods, which pods an admission
releases and which it counts, who deleted an object, what becomes of an AppWrapper whose object
is gone, when a running AppWrapper may stand for a new object, what the object's status says,
and what the caches keep.

Every case here states what the controller, or the user reading the status, acts on."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.builders import pod, volcano_job
from tests.engine.test_adoption import _prepared, _stored
from tests.engine.test_release_guard import PLACEMENT, _admitted_appwrapper, _job, _volcano_pod
from webhook.core import adoption, release
from webhook.model import names

Obj = dict[str, Any]

# --- which Workload admits, and how many pods (admission) --------------------------------------


def _workload(
    *conditions: str,
    owner: str | None = "aw-uid",
    declared: tuple[Any, ...] = (4,),
    assigned: tuple[Any, ...] | None = None,
) -> Obj:
    """A Workload as Kueue writes it for an AppWrapper: its controller reference names the
    AppWrapper, its spec declares a count per podSet, its status says what was admitted."""
    ref: Obj = {"kind": "AppWrapper", "name": "train", "controller": True}
    if owner is not None:
        ref["uid"] = owner
    podsets: list[Obj] = []
    for i, count in enumerate(declared):
        podset: Obj = {"name": f"train-{i}"}
        if count is not None:
            podset["count"] = count
        podsets.append(podset)
    assignments: list[Obj] = []
    for i, count in enumerate(declared if assigned is None else assigned):
        assignment: Obj = {"name": f"train-{i}"}
        if count is not None:
            assignment["count"] = count
        assignments.append(assignment)
    return {
        "metadata": {"name": "appwrapper-train-1", "ownerReferences": [ref]},
        "spec": {"podSets": podsets},
        "status": {
            "conditions": [{"type": c, "status": "True"} for c in conditions],
            "admission": {"podSetAssignments": assignments},
        },
    }


AW = {"metadata": {"name": "train", "uid": "aw-uid"}}
ADMITTED = ("QuotaReserved", "Admitted")


def test_the_admission_is_that_of_the_appwrappers_own_workload_wherever_it_is_listed() -> None:
    other = _workload(*ADMITTED, owner="another-aw-uid", declared=(9,))
    own = _workload(*ADMITTED, declared=(4,))

    assert release.admission(AW, [other, own]) == release.Admission((4,))
    assert release.admission(AW, [other]) is None


def test_a_workload_whose_owner_names_no_uid_admits_no_appwrapper_without_one() -> None:
    """Workloads are matched by uid alone: an AppWrapper not stored yet (no uid) has none."""
    assert (
        release.admission({"metadata": {"name": "train"}}, [_workload(*ADMITTED, owner=None)])
        is None
    )


def test_a_finished_workload_is_no_admission() -> None:
    assert release.admission(AW, [_workload(*ADMITTED, "Finished")]) is None


def test_an_evicted_workload_listed_first_does_not_hide_an_admitted_one() -> None:
    """Kueue may hold two Workloads for one AppWrapper while it replaces one."""
    evicted = _workload(*ADMITTED, "Evicted", declared=(8,))
    admitted = _workload(*ADMITTED, declared=(2,))

    assert release.admission(AW, [evicted, admitted]) == release.Admission((2,))


def test_the_admitted_count_is_kueues_assignment_not_the_declared_count() -> None:
    """Partial admission: Kueue admits fewer pods than the podSet declares and says so in the
    assignment; only those may run."""
    partial = _workload(*ADMITTED, declared=(4, 2), assigned=(3, 2))

    assert release.admission(AW, [partial]) == release.Admission((3, 2))


def test_a_podset_kueue_assigned_no_count_for_falls_back_to_its_declared_count() -> None:
    """As Kueue reads it (apis/kueue/v1beta1/workload_types.go, PodSetAssignment.count: "Value
    could be missing for Workloads created before this field was added, in that case
    spec.podSets[*].count value will be used")."""
    no_count = _workload(*ADMITTED, declared=(4, 2), assigned=(3, None))
    fewer = _workload(*ADMITTED, declared=(4, 2), assigned=(3,))

    assert release.admission(AW, [no_count]) == release.Admission((3, 2))
    assert release.admission(AW, [fewer]) == release.Admission((3, 2))


@pytest.mark.parametrize("count", [None, -1, "4", 2.0])
def test_a_podset_with_no_usable_count_admits_no_pod(count: Any) -> None:
    broken = _workload(*ADMITTED, declared=(count, 2), assigned=(count, 2))

    assert release.admission(AW, [broken]) == release.Admission((0, 2))


# --- whether the controller releases at all (is_admitted) --------------------------------------


def _aw(
    phase: str = "",
    *,
    suspend: Any = True,
    deleting: bool = False,
    conditions: list[Obj] | None = None,
    queue: str = "gpu-queue",
) -> Obj:
    metadata: Obj = {
        "name": "train",
        "uid": "aw-uid",
        "labels": {names.QUEUE_LABEL: queue},
        "annotations": {names.ORIGIN_UID_ANNOTATION: "job-uid"},
    }
    if deleting:
        metadata["deletionTimestamp"] = "2026-11-27T00:00:00Z"
    appwrapper: Obj = {"metadata": metadata, "spec": {}, "status": {}}
    if suspend is not None:
        appwrapper["spec"]["suspend"] = suspend
    if phase:
        appwrapper["status"]["phase"] = phase
    if conditions is not None:
        appwrapper["status"]["conditions"] = conditions
    return appwrapper


def test_an_appwrapper_is_released_only_when_unsuspended_and_not_being_deleted() -> None:
    assert adoption.is_admitted(_aw(suspend=False))
    # What kube-apiserver stores once Kueue admits it: `suspend,omitempty` drops false.
    assert adoption.is_admitted(_aw(suspend=None))
    assert not adoption.is_admitted(_aw(suspend=True))
    assert not adoption.is_admitted(_aw(suspend=False, deleting=True))


# --- the adoption finalizer ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("phase", "done"),
    [("", False), ("Suspended", False), ("Resuming", False), ("Running", True),
     ("Succeeded", True), ("Failed", True)],
)  # fmt: skip
def test_the_finalizer_goes_once_the_appwrapper_ran_or_finished(phase: str, done: bool) -> None:
    assert adoption.finalizer_done(_aw(phase, suspend=False)) is done


# --- which object an AppWrapper stands for ------------------------------------------------------


def test_an_appwrapper_stands_for_its_object_or_the_copy_its_controller_made_again() -> None:
    appwrapper = _aw("Running", suspend=False)
    created_for = {"metadata": {"name": "train", "uid": "job-uid"}}
    made_again: Obj = {"metadata": {"name": "train", "uid": "new-uid", "ownerReferences": [
        {"kind": "AppWrapper", "name": "train", "uid": "aw-uid", "controller": True}]}}  # fmt: skip
    not_controlled = copy.deepcopy(made_again)
    not_controlled["metadata"]["ownerReferences"][0]["controller"] = False
    another = {"metadata": {"name": "train", "uid": "other-uid", "ownerReferences": [
        {"kind": "AppWrapper", "name": "train", "uid": "other-aw", "controller": True}]}}  # fmt: skip

    assert adoption.stands_for(appwrapper, created_for)
    assert adoption.stands_for(appwrapper, made_again)
    assert not adoption.stands_for(appwrapper, not_controlled)
    assert not adoption.stands_for(appwrapper, another)
    assert not adoption.stands_for(appwrapper, {"metadata": {"name": "train", "uid": "new-uid"}})


def test_an_appwrapper_without_a_uid_stands_for_no_object_that_names_none() -> None:
    appwrapper = _aw("Running", suspend=False)
    del appwrapper["metadata"]["uid"]
    anonymous = {"metadata": {"name": "train", "uid": "new-uid",
                              "ownerReferences": [{"kind": "AppWrapper", "controller": True}]}}  # fmt: skip

    assert not adoption.stands_for(appwrapper, anonymous)


# --- a running AppWrapper taken over by the same work, created again ----------------------------

TEMPLATE = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
            "metadata": {"name": "train"}, "spec": {"tasks": [{"name": "worker", "replicas": 2}]}}  # fmt: skip


def _wrapping(appwrapper: Obj, template: Obj = TEMPLATE) -> Obj:
    appwrapper = copy.deepcopy(appwrapper)
    appwrapper["spec"]["components"] = [{"template": copy.deepcopy(template)}]
    return appwrapper


def _wanted(*, queue: str = "gpu-queue", template: Obj = TEMPLATE) -> Obj:
    """The AppWrapper the controller would build for the new object."""
    return _wrapping({"metadata": {"name": "train", "labels": {names.QUEUE_LABEL: queue}},
                      "spec": {}}, template)  # fmt: skip


@pytest.mark.parametrize("suspend", [False, None], ids=["false", "omitted"])
@pytest.mark.parametrize("phase", ["Resuming", "Running"])
def test_a_running_appwrapper_stands_for_the_same_work_created_again(
    phase: str, suspend: bool | None
) -> None:
    assert adoption.may_take_over(_wrapping(_aw(phase, suspend=suspend)), _wanted())


@pytest.mark.parametrize(
    ("appwrapper", "wanted", "why"),
    [
        (_wrapping(_aw("Running", suspend=False)), _wanted(queue="cpu-queue"), "another queue"),
        (_wrapping(_aw("Running", suspend=False)),
         _wanted(template={**TEMPLATE, "spec": {"tasks": [{"name": "worker", "replicas": 8}]}}),
         "other work"),
        (_wrapping(_aw("Running", suspend=False, deleting=True)), _wanted(), "being deleted"),
        (_wrapping(_aw("Running", suspend=True)), _wanted(), "suspending: Kueue took it back"),
        (_wrapping(_aw("Suspended", suspend=False)), _wanted(), "queued"),
        (_wrapping(_aw("Succeeded", suspend=False)), _wanted(), "finished"),
        (_wrapping(_aw("Resetting", suspend=False)), _wanted(), "resetting"),
        (_aw("Running", suspend=False), _wanted(), "wraps nothing"),
    ],
)  # fmt: skip
def test_a_running_appwrapper_is_not_taken_over_otherwise(
    appwrapper: Obj, wanted: Obj, why: str
) -> None:
    assert not adoption.may_take_over(appwrapper, wanted), why


def test_a_running_appwrapper_is_taken_over_only_by_a_wanted_one_in_no_queue_if_it_has_none() -> (
    None
):
    unqueued = _wrapping(_aw("Running", suspend=False))
    del unqueued["metadata"]["labels"]

    assert not adoption.may_take_over(unqueued, _wanted())
    wanted = _wanted()
    del wanted["metadata"]["labels"]
    assert adoption.may_take_over(unqueued, wanted)


def test_the_component_name_is_the_wrapped_objects_name() -> None:
    assert adoption.component_name(_wrapping(_aw())) == "train"
    assert adoption.component_name(_aw()) == ""


# --- what becomes of an AppWrapper whose object is gone (collect) --------------------------------

MISSING = {"type": "Unhealthy", "status": "True", "reason": "MissingComponent",
           "message": "component train is gone"}  # fmt: skip
QUOTA_RESERVED = {"type": "QuotaReserved", "status": "True"}


@pytest.mark.parametrize(
    ("appwrapper", "verdict"),
    [
        (_aw("", conditions=[]), adoption.Collect.LATER),
        (_aw("Suspended", conditions=[]), adoption.Collect.LATER),
        (_aw("Suspended", suspend=None), adoption.Collect.KEEP),  # suspend unset: Kueue's to say
        (_aw("Suspended", suspend=False), adoption.Collect.KEEP),  # admitted, starting
        (_aw("Resuming", suspend=True), adoption.Collect.KEEP),  # preempted while resuming
        (_aw("Suspended", conditions=[{"type": "QuotaReserved", "status": "False"}]),
         adoption.Collect.KEEP),  # preempted: its controller re-creates the object
        (_aw("Running", suspend=False), adoption.Collect.NOW),
        (_aw("Running", suspend=True), adoption.Collect.KEEP),  # suspending
        (_aw("Running", suspend=False, deleting=True), adoption.Collect.KEEP),
        (_aw("", conditions=[], deleting=True), adoption.Collect.KEEP),
        (_aw("Failed", suspend=False, conditions=[QUOTA_RESERVED, MISSING]), adoption.Collect.NOW),
        (_aw("Failed", suspend=False, conditions=[QUOTA_RESERVED]), adoption.Collect.KEEP),
        (_aw("Succeeded", suspend=False, conditions=[QUOTA_RESERVED, MISSING]),
         adoption.Collect.KEEP),
        (_aw("Resetting", suspend=False, conditions=[MISSING]), adoption.Collect.KEEP),
    ],
)  # fmt: skip
def test_an_appwrapper_whose_object_is_gone_goes_at_once_later_or_never(
    appwrapper: Obj, verdict: adoption.Collect
) -> None:
    assert adoption.collect(appwrapper) is verdict


@pytest.mark.parametrize(
    "condition",
    [
        {"type": "Unhealthy", "status": "True", "reason": "MissingComponent"},
        {"type": "Failed", "status": "True", "reason": "FailedComponent",
         "message": "MissingComponent"},
    ],
)  # fmt: skip
def test_a_failure_on_a_missing_component_is_read_in_its_reason_or_its_message(
    condition: Obj,
) -> None:
    failed = _aw("Failed", suspend=False, conditions=[{"type": "PodsReady", "status": "False"},
                                                      condition])  # fmt: skip

    assert adoption.collect(failed) is adoption.Collect.NOW


# --- the status annotation -------------------------------------------------------------------------


def test_a_status_within_the_limit_is_kept_whole() -> None:
    text = "x" * adoption.STATUS_LIMIT

    assert adoption.bounded(text) == text


def test_a_long_status_is_cut_and_says_where_the_full_list_is() -> None:
    """The text is kept up to 80 characters short of the limit, which leaves room for the note,
    and without the blank where it was cut."""
    note = " … (cut; `autowrap check` on the manifest lists all)"
    text = "a" * 5000

    cut = adoption.bounded(text)

    assert len(cut) <= adoption.STATUS_LIMIT
    assert cut == "a" * (adoption.STATUS_LIMIT - 80) + note
    at_a_blank = "a" * (adoption.STATUS_LIMIT - 82) + "; " + "b" * 5000
    assert adoption.bounded(at_a_blank) == "a" * (adoption.STATUS_LIMIT - 82) + ";" + note


def test_the_pods_of_an_appwrapper_are_those_its_label_names() -> None:
    mine = {"metadata": {"name": "a", "labels": {names.APPWRAPPER_LABEL: "train"}}}
    theirs = {"metadata": {"name": "b", "labels": {names.APPWRAPPER_LABEL: "other"}}}
    unlabelled = {"metadata": {"name": "c"}}

    assert adoption.pods_of([mine, theirs, unlabelled], "train") == [mine]


def _status(appwrapper: Obj | None, *, pending: bool = False, escaped: int = 0) -> tuple[str, ...]:
    said = adoption.status(appwrapper, pending=pending, escaped_pods=escaped)
    return said.text, said.reason, said.type


STARTING = ("Admitted by Kueue; AppWrapper train is starting", "Admitted", "Normal")
PREEMPTED = (
    "Preempted: AppWrapper train is suspending; the object is deleted and re-created when Kueue "
    "admits it again",
    "Preempted",
    "Warning",
)


@pytest.mark.parametrize(
    ("appwrapper", "said"),
    [
        (_aw("", queue=""), ("Queued in LocalQueue '' (AppWrapper train); pods wait, gated, until "
                             "Kueue admits it", "Queued", "Normal")),
        (_aw("Suspended"), ("Queued in LocalQueue 'gpu-queue' (AppWrapper train); pods wait, "
                            "gated, until Kueue admits it", "Queued", "Normal")),
        (_aw("", suspend=False), STARTING),
        (_aw("Suspended", suspend=False), STARTING),
        (_aw("Resuming", suspend=False), STARTING),
        (_aw("Running", suspend=False),
         ("Admitted by Kueue; AppWrapper train is Running", "Running", "Normal")),
        (_aw("Suspending"), PREEMPTED),
        (_aw("Suspending", suspend=False), PREEMPTED),
        (_aw("Resuming", suspend=True), PREEMPTED),
        (_aw("Running", suspend=True), PREEMPTED),
        (_aw("Resetting", suspend=False),
         ("AppWrapper train is resetting after a failure", "Resetting", "Warning")),
        (_aw("Resetting", suspend=True),
         ("AppWrapper train is resetting after a failure", "Resetting", "Warning")),
        (_aw("Succeeded", suspend=False), ("AppWrapper train succeeded", "Succeeded", "Normal")),
        (_aw("Failed", suspend=True),
         ("AppWrapper train failed: see kubectl describe appwrapper train", "Failed", "Warning")),
        (_aw("Terminating", suspend=False), ("AppWrapper train is Terminating", "Terminating",
                                             "Normal")),
    ],
)  # fmt: skip
def test_the_status_follows_the_appwrapper_through_its_phases(
    appwrapper: Obj, said: tuple[str, ...]
) -> None:
    assert _status(appwrapper) == said


def test_a_queued_appwrapper_that_names_no_queue_says_so() -> None:
    unqueued = _aw("Suspended")
    del unqueued["metadata"]["labels"]

    assert _status(unqueued)[0].startswith("Queued in LocalQueue '' (AppWrapper train)")


def test_without_an_appwrapper_the_status_says_whether_one_is_coming() -> None:
    assert _status(None, pending=True) == (
        "waiting for its AppWrapper to be created", "Pending", "Normal")  # fmt: skip
    assert _status(None) == ("its AppWrapper is gone", "AppWrapperGone", "Warning")
    # Pods counted as escaped mean nothing without an AppWrapper to have escaped from.
    assert _status(None, pending=True, escaped=2)[1] == "Pending"


def test_pods_running_without_admission_come_first_in_the_status() -> None:
    text, reason, kind = _status(_aw("Suspended"), escaped=2)

    assert (reason, kind) == ("GateRemoved", "Warning")
    assert text.startswith(f"2 pod(s) run without Kueue's admission: their scheduling gate "
                           f"{names.ADMISSION_GATE} was removed")  # fmt: skip
    assert "AppWrapper train is queued" in text
    assert _status(_aw("Suspended"), escaped=0)[1] == "Queued"


@pytest.mark.parametrize(
    ("conditions", "why"),
    [
        ([{"type": "Failed", "status": "True", "reason": "Deadline", "message": "took too long"}],
         "took too long"),
        ([{"type": "Unhealthy", "status": "True", "reason": "FailedComponent"}],
         "FailedComponent"),
        ([{"type": "Failed", "status": "True"}], "see the AppWrapper"),
        ([{"type": "Failed", "status": "False", "message": "old news"},
          {"type": "QuotaReserved", "status": "True", "message": "quota"},
          {"type": "Unhealthy", "status": "True", "message": "pods failed"}], "pods failed"),
        ([], "see kubectl describe appwrapper train"),
    ],
)  # fmt: skip
def test_a_failed_status_says_why_as_the_appwrapper_says_it(
    conditions: list[Obj], why: str
) -> None:
    failed = _aw("Failed", suspend=False, conditions=conditions)

    assert _status(failed) == (f"AppWrapper train failed: {why}", "Failed", "Warning")


# --- what the AppWrapper cache keeps (appwrapper_view) ------------------------------------------

WORKER = {"name": "w", "image": "trainer:1", "resources": {"limits": {"nvidia.com/gpu": 1}}}


def _stored_appwrapper() -> Obj:
    """An AppWrapper as stored: other writers' managedFields entries, the whole wrapped Job,
    Kueue's placement, and every condition the AppWrapper controller writes."""
    return {
        "apiVersion": "workload.codeflare.dev/v1beta2",
        "kind": "AppWrapper",
        "metadata": {
            "name": "train", "namespace": "ml", "uid": "aw-uid", "resourceVersion": "9",
            "labels": {names.QUEUE_LABEL: "gpu-queue"},
            "annotations": {names.ORIGIN_UID_ANNOTATION: "job-uid"},
            "managedFields": [
                {"manager": names.FIELD_MANAGER, "operation": "Update", "subresource": "status"},
                {"manager": "kueue", "operation": "Update", "time": "t"},
                {"manager": names.FIELD_MANAGER, "operation": "Apply", "time": "t",
                 "fieldsV1": {"f:spec": {}}},
                {"manager": names.FIELD_MANAGER, "operation": "Update", "time": "t"},
            ],
        },
        "spec": {
            "suspend": False,
            "components": [
                {
                    "podSets": [{"replicas": 2, "path": "template.spec.tasks[0].template"}],
                    "podSetInfos": [{"nodeSelector": {"pool": "a100"}}],
                    "template": {
                        "apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
                        "metadata": {"name": "train", "labels": {"app": "x"}},
                        "spec": {"tasks": [{"name": "w", "replicas": 2, "template": {
                            "spec": {"containers": [WORKER]}}}]},
                    },
                },
                {"template": {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}}},
            ],
        },
        "status": {
            "phase": "Failed",
            "conditions": [
                {"type": "QuotaReserved", "status": "True", "reason": "Admitted",
                 "message": "quota reserved"},
                {"type": "ResourcesDeployed", "status": "True", "reason": "Resuming",
                 "message": "deployed"},
                {"type": "PodsReady", "status": "False", "reason": "InsufficientPodsReady"},
                {"type": "Unhealthy", "status": "True", "reason": "FoundFailedPods",
                 "message": "pod w-0 failed"},
                {"type": "DeletingResources", "status": "True", "reason": "MissingComponent",
                 "message": "component train is gone"},
                {"type": "Failed", "status": "True"},
            ],
        },
    }  # fmt: skip


def test_the_appwrapper_cache_keeps_exactly_what_decisions_read() -> None:
    stored = _stored_appwrapper()
    view = adoption.appwrapper_view(stored)

    assert view == {
        "apiVersion": stored["apiVersion"],
        "kind": stored["kind"],
        # Whether autowrap wrote the object itself: its first such entry, not the status.
        "metadata": {**stored["metadata"],
                     "managedFields": [{"manager": names.FIELD_MANAGER, "operation": "Apply"}]},
        "spec": {
            "suspend": False,
            "components": [
                {
                    "podSets": [{"replicas": 2, "path": "template.spec.tasks[0].template"}],
                    "podSetInfos": [{"nodeSelector": {"pool": "a100"}}],
                    "template": {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
                                 "metadata": {"name": "train"}},
                },
            ],
        },
        "status": {
            "phase": "Failed",
            "conditions": [
                {"type": "QuotaReserved", "status": "True", "reason": "Admitted"},
                {"type": "Unhealthy", "status": "True", "reason": "FoundFailedPods",
                 "message": "pod w-0 failed"},
                {"type": "DeletingResources", "status": "True", "reason": "MissingComponent"},
                {"type": "Failed", "status": "True"},
            ],
        },
    }  # fmt: skip


def test_decisions_on_the_cached_appwrapper_are_those_on_the_stored_one() -> None:
    stored = _stored_appwrapper()
    view = adoption.appwrapper_view(stored)

    assert adoption.collect(view) is adoption.collect(stored) is adoption.Collect.NOW
    assert adoption.status(view, pending=False) == adoption.status(stored, pending=False)
    assert adoption.component_name(view) == adoption.component_name(stored) == "train"
    assert adoption.was_admitted(view) and adoption.is_admitted(view)


def test_an_appwrapper_kueue_has_not_looked_at_is_cached_with_an_empty_status() -> None:
    new = {"metadata": {"name": "train", "uid": "aw-uid"}, "spec": {"suspend": True}}

    assert adoption.appwrapper_view(new) == {
        "metadata": {"name": "train", "uid": "aw-uid"}, "spec": {"suspend": True}, "status": {}}  # fmt: skip
    assert adoption.collect(adoption.appwrapper_view(new)) is adoption.Collect.LATER


def test_an_appwrapper_nobody_wrote_through_autowrap_is_cached_without_managed_fields() -> None:
    stored = _stored_appwrapper()
    stored["metadata"]["managedFields"] = [{"manager": "kubectl", "operation": "Apply"}]

    assert adoption.appwrapper_view(stored)["metadata"]["managedFields"] == []


# --- what the object cache keeps (object_view) ------------------------------------------------------


def _adopted_job(*template_labels: dict[str, str]) -> Obj:
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
        "metadata": {"name": "train", "namespace": "ml", "uid": "job-uid",
                     "labels": {names.ADOPTION_LABEL: names.ADOPTION_ADOPTED},
                     "annotations": {names.LAST_APPLIED_ANNOTATION: "{...}", "team": "vision"}},
        "spec": {"queue": "default", "tasks": [
            {"name": f"t{i}", "replicas": 1,
             "template": {"metadata": {"labels": labels}, "spec": {"containers": [WORKER]}}}
            for i, labels in enumerate(template_labels)]},
    }  # fmt: skip


def test_an_adopted_objects_view_drops_kubectls_copy_and_keeps_its_other_annotations() -> None:
    job = _adopted_job({names.APPWRAPPER_LABEL: "train", "app": "x"})

    view = adoption.object_view(job)

    assert view["metadata"]["annotations"] == {"team": "vision"}
    assert view["spec"] == {"queue": "default", "tasks": [
        {"name": "t0", "replicas": 1,
         "template": {"metadata": {"labels": {names.APPWRAPPER_LABEL: "train"}}}}]}  # fmt: skip
    assert adoption.appwrapper_name_of(view) == "train"
    assert job["metadata"]["annotations"][names.LAST_APPLIED_ANNOTATION] == "{...}"  # not changed


def test_a_template_without_the_appwrapper_label_is_cut_to_nothing() -> None:
    view = adoption.object_view(_adopted_job({"app": "x"}, {names.APPWRAPPER_LABEL: "train"}))

    assert [t["template"] for t in view["spec"]["tasks"]] == [
        {}, {"metadata": {"labels": {names.APPWRAPPER_LABEL: "train"}}}]  # fmt: skip
    assert adoption.appwrapper_name_of(view) == "train"


def test_an_adopted_pod_is_cached_without_its_spec_and_keeps_its_labels() -> None:
    adopted = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "uid": "pod-uid", "labels": {
            names.ADOPTION_LABEL: names.ADOPTION_ADOPTED, names.APPWRAPPER_LABEL: "p"}},
        "spec": {"containers": [WORKER]},
    }  # fmt: skip

    view = adoption.object_view(adopted)

    assert view == {"apiVersion": "v1", "kind": "Pod", "metadata": adopted["metadata"]}
    assert adoption.appwrapper_name_of(view) == "p"


# --- how many pods the AppWrapper declares (podset_replicas) -------------------------------------


def _with_component(component: Obj) -> Obj:
    return {"metadata": {"name": "train"}, "spec": {"components": [component]}}


POD_TEMPLATE = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}
JOB_TEMPLATE = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": "j"}}


@pytest.mark.parametrize(
    ("component", "replicas"),
    [
        ({"template": POD_TEMPLATE}, (1,)),  # inferred by the AppWrapper controller
        ({"template": POD_TEMPLATE, "podSets": [{"replicas": 1}]}, (1,)),
        ({"template": JOB_TEMPLATE}, ()),  # declares no pod: none may be released
        ({"template": JOB_TEMPLATE, "podSets": [{"replicas": 3}, {}]}, (3, 1)),  # default 1
        ({"template": JOB_TEMPLATE, "podSets": [{"replicas": -2}, {"replicas": "4"}]}, (0, 0)),
        ({"template": JOB_TEMPLATE, "podSets": [{"replicas": 0}, {"replicas": 2}]}, (0, 2)),
    ],
)  # fmt: skip
def test_the_pods_an_appwrapper_declares_per_podset(component: Obj, replicas: tuple[int]) -> None:
    assert release.podset_replicas(_with_component(component)) == replicas


def test_an_appwrapper_without_components_declares_no_pod() -> None:
    assert release.podset_replicas({"spec": {"components": []}}) == ()
    assert release.podset_replicas({"spec": {}}) == ()


# --- which pods an admission covers (made_by_controller) --------------------------------------------


def _adopted_pod() -> tuple[Obj, Obj]:
    """A bare Pod as stored after admission, and its AppWrapper once Kueue admitted it."""
    stored = _prepared(pod("solo").queue("q").wrap().build())
    stored["metadata"].update(uid="pod-uid", resourceVersion="3")
    return stored, _admitted_appwrapper(stored)


def test_the_adopted_pod_itself_is_released_on_its_admission() -> None:
    stored, appwrapper = _adopted_pod()

    assert release.made_by_controller(stored, appwrapper) == ""
    plan = release.release_plan(appwrapper, [stored], release.Admission((1,)))
    assert [p["metadata"]["uid"] for p, _ in plan.released] == ["pod-uid"]
    assert plan.problems == () and plan.held == ()


def test_a_pod_controlled_by_the_adopted_pod_is_not_what_its_admission_covers() -> None:
    """A bare Pod makes no pods: one that names it as its controller is not the admitted one."""
    stored, appwrapper = _adopted_pod()
    child = copy.deepcopy(stored)
    child["metadata"].update(name="solo-child", uid="child-uid", ownerReferences=[
        {"apiVersion": "v1", "kind": "Pod", "name": "solo", "uid": "pod-uid", "controller": True}])  # fmt: skip

    assert release.made_by_controller(child, appwrapper) == (
        "autowrap does not know how Pod makes its pods"
    )


def _volcano() -> tuple[Obj, Obj]:
    stored = _stored(_prepared(_job(workers=2)))
    return stored, _admitted_appwrapper(stored)


def test_why_a_pod_is_not_covered_names_what_is_missing() -> None:
    stored, appwrapper = _volcano()
    unwritten = copy.deepcopy(appwrapper)
    del unwritten["metadata"]["annotations"][names.ORIGIN_UID_ANNOTATION]
    foreign = _volcano_pod(stored, 0)
    foreign["metadata"]["ownerReferences"][0]["uid"] = "another-job-uid"
    unknown = copy.deepcopy(appwrapper)
    unknown["spec"]["components"][0]["template"]["apiVersion"] = "example.com/v1"
    past = _volcano_pod(stored, 0)
    past["metadata"]["annotations"][adoption.PODSET_ANNOTATION] = "1"  # the Job has one task

    assert release.made_by_controller(_volcano_pod(stored, 0), appwrapper) == ""
    assert release.made_by_controller(_volcano_pod(stored, 0), unwritten) == (
        "its AppWrapper names no origin")  # fmt: skip
    assert release.made_by_controller(foreign, appwrapper) == (
        "its controller is not the adopted object")  # fmt: skip
    assert release.made_by_controller(_volcano_pod(stored, 0), unknown) == (
        "autowrap does not know how Job makes its pods")  # fmt: skip
    assert release.made_by_controller(past, appwrapper) == (
        f"its annotation {adoption.PODSET_ANNOTATION} names no podSet of the AppWrapper")  # fmt: skip


def test_an_init_container_not_the_templates_is_not_covered() -> None:
    job = volcano_job("train").queue("gpu-queue").task("worker", replicas=1, init_containers=1)
    stored = _stored(_prepared(job.build()))
    appwrapper = _admitted_appwrapper(stored)
    swapped = _volcano_pod(stored, 0)
    swapped["spec"]["initContainers"][0]["image"] = "mallory/miner"

    assert release.made_by_controller(_volcano_pod(stored, 0), appwrapper) == ""
    assert release.made_by_controller(swapped, appwrapper).startswith(
        "spec.initContainers[init0].image is 'mallory/miner', the template's "
    )


def test_a_container_not_the_templates_is_named_in_the_problem() -> None:
    stored, appwrapper = _volcano()
    swapped = _volcano_pod(stored, 0)
    container = swapped["spec"]["containers"][0]
    template_image = container["image"]
    container["image"] = "mallory/miner"

    assert release.made_by_controller(swapped, appwrapper) == (
        f"spec.containers[{container['name']}].image is 'mallory/miner', the template's "
        f"{template_image!r}"
    )


# --- how many pods an admission releases (release_plan) ---------------------------------------------


def _two_tasks(*, master: int = 1, workers: int = 2) -> tuple[Obj, Obj]:
    job = (
        volcano_job("train")
        .queue("gpu-queue")
        .task("master", replicas=master, gpus=1)
        .task("worker", replicas=workers, gpus=1)
    )
    stored = _stored(_prepared(job.build()))
    appwrapper = _admitted_appwrapper(stored)
    appwrapper["spec"]["components"][0]["podSetInfos"] = [PLACEMENT, PLACEMENT]
    return stored, appwrapper


def _task_pod(stored: Obj, task: int, index: int, *, uid: str = "", phase: str = "") -> Obj:
    """A pod as Volcano makes it from the task's template; gated, or running (``phase``)."""
    rotated = copy.deepcopy(stored)
    tasks = rotated["spec"]["tasks"]
    rotated["spec"]["tasks"] = [tasks[task]]
    made = _volcano_pod(rotated, index, uid=uid or f"{tasks[task]['name']}-{index}",
                        running=bool(phase))  # fmt: skip
    if phase:
        made["status"] = {"phase": phase}
    return made


def _names(plan: release.ReleasePlan) -> list[str]:
    return sorted(str(p["metadata"]["name"]) for p, _ in plan.released)


def test_exactly_as_many_pods_as_kueue_admitted_are_released() -> None:
    stored, appwrapper = _volcano()
    gated = [_volcano_pod(stored, 0), _volcano_pod(stored, 1)]

    plan = release.release_plan(appwrapper, gated, release.Admission((2,)))

    assert _names(plan) == ["train-worker-0", "train-worker-1"]
    assert plan.held == () and plan.problems == () and not plan.waiting


def test_each_running_pod_takes_one_place_and_the_rest_stay_gated_with_the_reason() -> None:
    stored, appwrapper = _two_tasks(workers=4)
    running = [_task_pod(stored, 1, i, phase="Running") for i in (0, 1)]
    gated = [_task_pod(stored, 1, i) for i in (2, 3)] + [_task_pod(stored, 0, 0)]

    plan = release.release_plan(appwrapper, running + gated, release.Admission((1, 3)))

    assert _names(plan) == ["train-master-0", "train-worker-2"]
    assert plan.held == (
        "1 pod(s) of podSet 1 stay gated: Kueue admitted 3 for it and 2 pod(s) that claim the "
        "object already run; a podSet's replicas cannot grow after its AppWrapper was created "
        "(delete the object and create it again with the new size)",
    )


def test_a_finished_pod_takes_no_place() -> None:
    stored, appwrapper = _volcano()
    done = [_volcano_pod(stored, 0, uid="done-0", running=True),
            _volcano_pod(stored, 1, uid="done-1", running=True)]  # fmt: skip
    done[0]["status"]["phase"] = "Succeeded"
    done[1]["status"]["phase"] = "Failed"

    plan = release.release_plan(
        appwrapper, [*done, _volcano_pod(stored, 0)], release.Admission((1,))
    )

    assert _names(plan) == ["train-worker-0"]


@pytest.mark.parametrize("podset", ["7", "not-a-number"])
def test_running_pods_that_name_no_podset_take_a_place_in_every_podset(podset: str) -> None:
    stored, appwrapper = _two_tasks(master=3, workers=3)
    strays = [_task_pod(stored, 1, i, uid=f"stray-{i}", phase="Running") for i in (0, 1)]
    for stray in strays:
        stray["metadata"]["annotations"][adoption.PODSET_ANNOTATION] = podset
    gated = [_task_pod(stored, t, i) for t in (0, 1) for i in range(3)]

    plan = release.release_plan(appwrapper, strays + gated, release.Admission((3, 3)))

    assert _names(plan) == ["train-master-0", "train-worker-0"]
    assert [h.split(":")[0] for h in plan.held] == [
        "2 pod(s) of podSet 0 stay gated", "2 pod(s) of podSet 1 stay gated"]  # fmt: skip


def test_a_pod_read_twice_counts_once() -> None:
    """Pods are read by several selectors (``claim_selectors``): one pod may come twice."""
    stored, appwrapper = _volcano()
    running = _volcano_pod(stored, 0, uid="run-0", running=True)
    gated = _volcano_pod(stored, 1)

    plan = release.release_plan(appwrapper, [running, running, gated, gated],
                                 release.Admission((2,)))  # fmt: skip

    assert _names(plan) == ["train-worker-1"] and plan.held == ()


def test_a_pod_created_again_under_its_name_between_two_reads_is_another_pod() -> None:
    stored, appwrapper = _volcano()
    before = _volcano_pod(stored, 0, uid="first", running=True)
    again = _volcano_pod(stored, 0, uid="second")

    plan = release.release_plan(appwrapper, [before, again], release.Admission((2,)))

    assert _names(plan) == ["train-worker-0"]
    assert [p["metadata"]["uid"] for p, _ in plan.released] == ["second"]


def test_pods_read_without_a_uid_are_told_apart_by_name() -> None:
    stored, appwrapper = _volcano()
    pods = [_volcano_pod(stored, 0), _volcano_pod(stored, 1)]
    for made in pods:
        del made["metadata"]["uid"]

    plan = release.release_plan(appwrapper, [*pods, pods[0]], release.Admission((2,)))

    assert _names(plan) == ["train-worker-0", "train-worker-1"]


def test_the_appwrappers_declared_size_caps_what_kueue_admits() -> None:
    stored, appwrapper = _volcano()
    gated = [_volcano_pod(stored, 0), _volcano_pod(stored, 1)]

    plan = release.release_plan(appwrapper, gated, release.Admission((5,)))

    assert _names(plan) == ["train-worker-0", "train-worker-1"]


def test_a_podset_kueue_admitted_nothing_for_releases_nothing() -> None:
    stored, appwrapper = _two_tasks()
    gated = [_task_pod(stored, 0, 0), _task_pod(stored, 1, 0)]

    plan = release.release_plan(appwrapper, gated, release.Admission((1,)))

    assert _names(plan) == ["train-master-0"]
    assert plan.held[0].startswith("1 pod(s) of podSet 1 stay gated: Kueue admitted 0 for it")


def test_a_task_the_appwrapper_declares_no_podset_for_releases_nothing() -> None:
    stored, appwrapper = _two_tasks()
    del appwrapper["spec"]["components"][0]["podSets"][1]
    gated = [_task_pod(stored, 0, 0), _task_pod(stored, 1, 0)]

    plan = release.release_plan(appwrapper, gated, release.Admission((1, 2)))

    assert _names(plan) == ["train-master-0"]
    assert plan.held[0].startswith("1 pod(s) of podSet 1 stay gated: Kueue admitted 0 for it")


def test_pods_wait_for_kueues_placement_of_their_podset() -> None:
    stored, appwrapper = _two_tasks()
    appwrapper["spec"]["components"][0]["podSetInfos"] = [PLACEMENT]  # podSet 1's not yet
    gated = [_task_pod(stored, 0, 0), _task_pod(stored, 1, 0), _task_pod(stored, 1, 1)]

    plan = release.release_plan(appwrapper, gated, release.Admission((1, 2)))

    assert _names(plan) == ["train-master-0"] and plan.waiting
    assert plan.held == () and plan.problems == ()


def test_pods_of_another_maker_that_hold_the_place_are_named_in_the_reason() -> None:
    stored, appwrapper = _volcano()
    squatters = []
    for name in ("zz-miner", "aa-miner"):
        squatter = _volcano_pod(stored, 0, uid=name, running=True)
        squatter["metadata"]["name"] = name
        squatters.append(squatter)

    plan = release.release_plan(appwrapper, [*squatters, _volcano_pod(stored, 0)],
                                 release.Admission((2,)))  # fmt: skip

    assert plan.released == ()
    assert plan.held == (
        "1 pod(s) of podSet 0 stay gated: Kueue admitted 2 for it and 2 pod(s) that claim the "
        "object already run, among them aa-miner, zz-miner, which the object's controller did "
        "not make from the admitted template (delete them; see who created them in the audit "
        "log)",
    )


# --- whose pods they are (belongs, claims, claim_selectors) and which escaped -------------------------


def test_the_adopted_pod_belongs_to_its_appwrapper_and_claims_it() -> None:
    stored, appwrapper = _adopted_pod()
    other = copy.deepcopy(stored)
    other["metadata"].update(name="solo-2", uid="other-uid")
    del other["metadata"]["labels"][names.APPWRAPPER_LABEL]

    assert release.belongs(stored, appwrapper)
    assert release.claims(stored, appwrapper)
    assert not release.belongs(other, appwrapper)
    assert not release.claims(other, appwrapper)  # a Pod's AppWrapper has no controller's signs
    assert release.claim_selectors(appwrapper) == [f"{names.APPWRAPPER_LABEL}=solo"]


def test_an_appwrapper_that_names_no_origin_has_no_pods() -> None:
    stored, appwrapper = _adopted_pod()
    del appwrapper["metadata"]["annotations"][names.ORIGIN_UID_ANNOTATION]
    unnamed = copy.deepcopy(stored)
    del unnamed["metadata"]["uid"]

    assert not release.belongs(stored, appwrapper)
    assert not release.belongs(unnamed, appwrapper)


def test_pods_count_as_escaped_only_while_the_appwrapper_is_queued_and_they_may_run() -> None:
    stored, appwrapper = _volcano()
    appwrapper["spec"]["suspend"] = True
    ungated = [_volcano_pod(stored, i, running=True) for i in range(4)]
    ungated[2]["status"]["phase"] = "Succeeded"
    ungated[3]["status"]["phase"] = "Failed"
    leaving = _volcano_pod(stored, 5, uid="leaving", running=True)
    leaving["metadata"]["deletionTimestamp"] = "2026-11-27T00:00:00Z"
    pods = [*ungated, leaving, _volcano_pod(stored, 6, uid="gated")]

    assert release.escaped(appwrapper, pods) == 2
    appwrapper["spec"]["suspend"] = False
    assert release.escaped(appwrapper, pods) == 0


def test_a_delete_while_kueue_takes_back_a_resuming_admission_is_the_appwrappers() -> None:
    resuming = _aw("Resuming", suspend=True)

    assert adoption.deletion(resuming, {"metadata": {"uid": "job-uid"}}) is (
        adoption.Deletion.BY_APPWRAPPER)  # fmt: skip


def test_a_workload_with_quota_reserved_but_admission_checks_pending_admits_nothing() -> None:
    """Kueue reserves quota first and writes Admitted only once every admission check (a
    ProvisioningRequest, MultiKueue) is Ready: until then no pod may run."""
    reserved = _workload("QuotaReserved")
    reserved["status"]["admissionChecks"] = [{"name": "provisioning", "state": "Pending"}]

    assert release.admission(AW, [reserved]) is None
    assert release.admission(AW, [_workload("QuotaReserved", "Admitted")]) is not None


def test_a_pod_held_by_another_gate_takes_its_place_as_a_running_one() -> None:
    """A pod of the object that autowrap's gate no longer holds counts as running even while
    another gate (a topology or provisioning controller's) holds it: whoever holds that gate
    lifts it without asking autowrap, so its place is taken (docs/how-it-works.md)."""
    stored, appwrapper = _two_tasks(workers=2)
    other = _task_pod(stored, 1, 0, phase="Pending")
    other["spec"]["schedulingGates"] = [{"name": "example.com/hold"}]
    gated = [_task_pod(stored, 1, 1)]

    plan = release.release_plan(appwrapper, [other, *gated], release.Admission((1, 1)))

    assert _names(plan) == []
    assert [h.split(":")[0] for h in plan.held] == ["1 pod(s) of podSet 1 stay gated"]
