"""Adopt mode from admission to release (``webhook.core.adoption``, ``prepare`` through
``release``): what admission stores, what an update keeps, the AppWrapper and the reference the
controller writes, and how a gated pod is released. Plain dicts in, decisions out.

Each test names what a user or the controller relies on; the cases are the edges the main
adoption tests (``test_adoption.py``) leave out: what the user wrote besides autowrap's part,
objects that skipped a webhook, and fields anyone with edit rights can set on a pod.
"""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch

from tests.builders import context, policy, spec_of, volcano_job
from tests.builders import pod as pod_manifest
from tests.engine.test_adoption import GATE, INFO, _gated_pod, _job, _prepared, _reapplied, _stored
from webhook.core import adoption, audit, engine, release
from webhook.model import names

Obj = dict[str, Any]
USER_GATE = {"name": "example.com/wait-for-data"}
USER_FINALIZER = "example.com/keep"


def _templates(obj: Obj) -> list[Obj]:
    return [task.get("template") or {} for task in obj["spec"]["tasks"]]


def _component(plan: adoption.Plan) -> Obj:
    assert plan.appwrapper is not None, plan.errors
    template: Obj = plan.appwrapper["spec"]["components"][0]["template"]
    return template


def _master_without_accelerators() -> Obj:
    """A master without accelerators beside accelerator workers: a warning, not an error."""
    return (
        volcano_job("train")
        .queue("gpu-queue")
        .task("master", replicas=1, gpus=0)
        .task("worker", replicas=2, gpus=1)
        .build()
    )


def _helper_without_template() -> Obj:
    """A Job whose first task has no pod template: validation refuses it (under Enforce)."""
    job = _master_without_accelerators()
    del job["spec"]["tasks"][0]["template"]
    return job


# --- admission: CREATE ----------------------------------------------------------------------------


def test_a_users_own_finalizers_and_scheduling_gates_are_kept_beside_autowraps() -> None:
    job = _job()
    job["metadata"]["finalizers"] = [USER_FINALIZER]
    job["spec"]["tasks"][1]["template"]["spec"]["schedulingGates"] = [USER_GATE]

    prepared = _prepared(job)

    assert prepared["metadata"]["finalizers"] == [USER_FINALIZER, names.ADOPTION_FINALIZER]
    gates = [t["spec"]["schedulingGates"] for t in _templates(prepared)]
    assert gates == [[GATE], [USER_GATE, GATE]]


def test_no_template_is_left_ungated_behind_a_task_without_one() -> None:
    # Whatever validation then decides (Audit enforcement lets its findings through), admission
    # never stores a template of the object without the gate.
    prepared = _prepared(_helper_without_template())

    assert "template" not in prepared["spec"]["tasks"][0]
    assert GATE in prepared["spec"]["tasks"][1]["template"]["spec"]["schedulingGates"]


def test_an_object_with_neither_name_nor_generate_name_is_named_not_crashed() -> None:
    job = _job()
    del job["metadata"]["name"]
    job["metadata"]["namespace"] = "ml"
    ctx = context(ns="ml", uid="request-uid", user="alice")
    candidate = engine.wrap_candidate(job, ctx)
    assert candidate is not None

    prepared = adoption.prepare(job, candidate, user="alice")

    assert prepared["metadata"]["name"] == candidate.appwrapper_name
    assert adoption.appwrapper_name_of(prepared) == candidate.appwrapper_name


def test_an_object_with_no_queue_at_all_gets_no_queue_annotation() -> None:
    # Audit enforcement lets "no Kueue queue" through as a warning: nothing invents a queue.
    job = volcano_job("train").task("worker", replicas=2, gpus=1).build()
    ctx = context(policy().audit().queues(), ns="ml", user="alice")
    outcome = engine.admit(job, ctx)
    assert outcome.action is engine.Action.WRAP and not outcome.verdict().denied

    prepared = adoption.prepare(job, outcome, user="alice")

    assert names.QUEUE_ANNOTATION not in prepared["metadata"]["annotations"]
    assert names.QUEUE_LABEL not in prepared["metadata"].get("labels", {})


# --- admission: UPDATE ------------------------------------------------------------------------------


def test_an_update_that_leaves_the_spec_as_stored_is_let_through_untouched() -> None:
    stored = _stored(_prepared(_job()))
    relabelled = copy.deepcopy(stored)
    relabelled["metadata"]["labels"]["team"] = "vision"

    assert adoption.normalize_update(relabelled, stored, spec_of()) is None


def test_only_an_object_labelled_for_adoption_is_normalized() -> None:
    manifest = _job()
    stored = _stored(_prepared(manifest))
    del stored["metadata"]["labels"][names.ADOPTION_LABEL]

    assert adoption.normalize_update(_reapplied(manifest, stored), stored, spec_of()) is None
    # A kind autowrap does not wrap, whatever labels it carries, goes to its own webhooks.
    other: Obj = {"apiVersion": "apps/v1", "kind": "Deployment",
                  "metadata": {"name": "web", "labels": {names.ADOPTION_LABEL: "adopted"}},
                  "spec": {"replicas": 1}}  # fmt: skip
    scaled = copy.deepcopy(other)
    scaled["spec"]["replicas"] = 2
    assert adoption.normalize_update(scaled, other, spec_of()) is None


def test_the_appwrapper_an_object_belongs_to_is_the_one_its_pod_templates_name() -> None:
    assert adoption.appwrapper_name_of(_prepared(_job())) == "train"
    assert adoption.appwrapper_name_of(_job()) == ""
    deployment: Obj = {"apiVersion": "apps/v1", "kind": "Deployment",
                       "metadata": {"name": "web"},
                       "spec": {"template": {"metadata": {"labels": {
                           names.APPWRAPPER_LABEL: "web"}}}}}  # fmt: skip
    assert adoption.appwrapper_name_of(deployment) == ""


# --- the controller: the AppWrapper -----------------------------------------------------------------


def test_the_component_keeps_the_users_finalizers_and_drops_autowraps_bookkeeping() -> None:
    stored = _stored(_prepared(_job()))
    stored["metadata"]["finalizers"].insert(0, USER_FINALIZER)
    # Adopted once already: the controller reference is set (a re-adoption plans it again).
    stored["metadata"]["ownerReferences"] = [
        adoption.owner_reference({"metadata": {"name": "train", "uid": "aw-uid"}})
    ]

    component = _component(adoption.plan(stored, context(ns="ml")))

    assert component["metadata"]["finalizers"] == [USER_FINALIZER]
    assert "ownerReferences" not in component["metadata"]
    for template in _templates(component):
        # The AppWrapper controller writes its label again on the pods of what it creates.
        assert names.APPWRAPPER_LABEL not in template["metadata"].get("labels", {})


def test_an_object_whose_finalizer_is_gone_is_planned_all_the_same() -> None:
    stored = _stored(_prepared(_job()))
    del stored["metadata"]["finalizers"]  # removed once its AppWrapper first ran

    component = _component(adoption.plan(stored, context(ns="ml")))

    assert "finalizers" not in component["metadata"]


def test_an_object_that_skipped_the_mutating_webhook_is_judged_not_crashed() -> None:
    stored = _stored(_prepared(_job()))
    for template in _templates(stored):
        del template["spec"]["schedulingGates"]

    component = _component(adoption.plan(stored, context(ns="ml")))

    assert all("schedulingGates" not in t["spec"] for t in _templates(component))


def test_the_component_is_ungated_behind_a_task_without_a_template() -> None:
    stored = _stored(_prepared(_helper_without_template()))

    plan = adoption.plan(stored, context(policy().audit(), ns="ml"))

    # Audit enforcement builds it; a Job re-created from it after preemption runs ungated.
    worker = _templates(_component(plan))[1]
    assert "schedulingGates" not in worker["spec"]


def test_an_object_that_skipped_the_webhooks_without_a_queue_takes_the_policys_default() -> None:
    stored = _stored(_prepared(_job()))
    del stored["metadata"]["annotations"][names.QUEUE_ANNOTATION]
    del stored["metadata"]["labels"][names.QUEUE_LABEL]

    plan = adoption.plan(stored, context(ns="ml"))

    assert plan.appwrapper is not None, plan.errors
    assert plan.appwrapper["metadata"]["labels"][names.QUEUE_LABEL] == "q"
    assert names.QUEUE_LABEL not in _component(plan)["metadata"].get("labels", {})


def test_the_appwrapper_has_the_name_admission_gave_the_templates_even_when_derived() -> None:
    # A Pod's name may hold dots, an AppWrapper's may not: the name is derived (from the
    # namespace too) at admission, and the controller must derive the same one.
    stored = _prepared(pod_manifest("train.v2").queue("q").wrap().build())
    stored["metadata"]["uid"] = "pod-uid"
    aw_name = adoption.appwrapper_name_of(stored)
    assert aw_name and aw_name != "train.v2"

    plan = adoption.plan(stored, context(ns="ml"))

    assert plan.appwrapper is not None, plan.errors
    assert plan.appwrapper["metadata"]["name"] == aw_name


def test_a_kind_autowrap_does_not_wrap_is_reported_by_kind() -> None:
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train"}}

    plan = adoption.plan(job, context(ns="ml"))

    assert plan == adoption.Plan(None, ("autowrap does not wrap Job",))


def test_the_warnings_of_a_plan_are_kept_whether_it_is_built_or_refused() -> None:
    built = adoption.plan(_stored(_prepared(_master_without_accelerators())), context(ns="ml"))
    assert built.appwrapper is not None and built.errors == ()
    assert any("asks for no accelerator" in w for w in built.warnings)

    forged = _stored(_prepared(_master_without_accelerators()))
    forged["spec"]["tasks"][1]["template"]["spec"]["containers"][0]["env"].append(
        {"name": "NCCL_SECRET", "value": "x"}
    )
    refused = adoption.plan(forged, context(policy().reserved_env("NCCL_SECRET"), ns="ml"))
    assert refused.appwrapper is None
    assert any("NCCL_SECRET" in e for e in refused.errors)
    assert refused.warnings == built.warnings


def test_under_audit_the_appwrapper_records_what_it_let_through() -> None:
    forged = _stored(_prepared(_job()))
    env = forged["spec"]["tasks"][1]["template"]["spec"]["containers"][0]["env"]
    env.append({"name": "NCCL_SECRET", "value": "x"})

    plan = adoption.plan(forged, context(policy().audit().reserved_env("NCCL_SECRET"), ns="ml"))

    assert plan.appwrapper is not None and plan.errors == ()
    assert any(w.startswith("(audit)") and "NCCL_SECRET" in w for w in plan.warnings)
    recorded = audit.recorded(plan.appwrapper)
    field = f"spec.tasks[1].template.spec.containers[0].env[{len(env) - 1}]"
    assert [f.field for f in recorded] == [field]


def test_render_shows_the_object_in_its_namespace_with_the_user_who_creates_it() -> None:
    job = _job()  # no namespace in the manifest: render puts it where it is applied
    ctx = context(ns="ml", user="alice")

    stored, appwrapper = adoption.preview(job, engine.admit(job, ctx), ctx)

    assert stored["metadata"]["namespace"] == "ml"
    assert stored["metadata"]["annotations"][names.REQUESTED_BY_ANNOTATION] == "alice"
    assert appwrapper["metadata"]["annotations"][names.REQUESTED_BY_ANNOTATION] == "alice"


def test_render_shows_no_appwrapper_the_controller_would_refuse() -> None:
    job = _job()
    job["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["env"] = [
        {"name": "NCCL_SECRET", "value": "x"}
    ]
    ctx = context(policy().reserved_env("NCCL_SECRET"), ns="ml")

    shown = adoption.preview(job, engine.admit(job, ctx), ctx)

    assert [obj["kind"] for obj in shown] == ["Job"]


def test_the_object_gets_a_controller_reference_the_appwrapper_controller_accepts() -> None:
    appwrapper = {"apiVersion": names.APPWRAPPER_API_VERSION, "kind": "AppWrapper",
                  "metadata": {"name": "train", "namespace": "ml", "uid": "aw-uid"}}  # fmt: skip

    reference = adoption.owner_reference(appwrapper)

    # metav1.IsControlledBy: the controller reference with the AppWrapper's uid.
    assert reference == {"apiVersion": "workload.codeflare.dev/v1beta2", "kind": "AppWrapper",
                         "name": "train", "uid": "aw-uid", "controller": True}  # fmt: skip
    job = {"metadata": {"name": "train", "ownerReferences": [reference]}}
    assert adoption.controller_of(job) == reference


def test_an_appwrapper_without_a_status_yet_is_queued() -> None:
    fresh = {"metadata": {"name": "train", "annotations": {names.ORIGIN_UID_ANNOTATION: "job-uid"}},
             "spec": {"suspend": True}}  # fmt: skip

    assert adoption.phase_of(fresh) == ""
    assert adoption.phase_of({"status": {"phase": 3}}) == ""
    # Deleting the object now is the user's doing: nothing of it runs yet.
    job = {"metadata": {"name": "train", "uid": "job-uid"}}
    assert adoption.deletion(fresh, job) is adoption.Deletion.BY_USER


# --- the controller: releasing pods ----------------------------------------------------------------


def test_the_release_adds_only_the_tolerations_the_pod_lacks_and_keeps_its_own() -> None:
    own = {"key": "team", "operator": "Equal", "value": "vision", "effect": "NoSchedule"}
    pod = _gated_pod(tolerations=[own, INFO["tolerations"][0]])
    extra = {"key": "zone", "operator": "Exists", "effect": "NoExecute"}
    info = {**INFO, "tolerations": [INFO["tolerations"][0], extra]}

    released = release.ungate(pod, info)

    assert released.pod is not None
    assert released.pod["spec"]["tolerations"] == [own, INFO["tolerations"][0], extra]
    assert released.patch[0]["path"] == "/metadata/resourceVersion"
    assert jsonpatch.apply_patch(pod, list(released.patch)) == released.pod


def test_kueues_labels_on_a_pod_without_labels_survive_the_released_mark() -> None:
    pod = _gated_pod()
    del pod["metadata"]["labels"]

    released = release.ungate(pod, INFO)

    assert released.pod is not None
    assert released.pod["metadata"]["labels"] == {"kueue.x-k8s.io/podset": "train-1",
                                                  names.RELEASED_LABEL: "true"}  # fmt: skip
    assert jsonpatch.apply_patch(pod, list(released.patch)) == released.pod


def test_every_reason_a_pod_stays_gated_is_told() -> None:
    pod = _gated_pod(nodeSelector={"cloud.example/pool": "h100"})
    pod["metadata"]["labels"]["kueue.x-k8s.io/podset"] = "train-0"
    topology = {"name": "kueue.x-k8s.io/topology"}

    released = release.ungate(pod, {**INFO, "schedulingGates": [topology]})

    assert released.pod is None
    problems = released.problem.split("; ")
    assert problems[:2] == [
        "labels 'kueue.x-k8s.io/podset' is 'train-0' on the pod, Kueue assigns 'train-1'",
        "nodeSelector 'cloud.example/pool' is 'h100' on the pod, Kueue assigns 'a100'",
    ]
    assert problems[2].startswith("Kueue asks for the scheduling gate 'kueue.x-k8s.io/topology'")


def test_a_pod_without_the_podset_annotation_is_placed_in_the_first_podset() -> None:
    appwrapper = {"spec": {"components": [{"podSetInfos": [{"labels": {"i": "0"}},
                                                           {"labels": {"i": "1"}}]}]}}  # fmt: skip
    pod = _gated_pod()
    del pod["metadata"]["annotations"][adoption.PODSET_ANNOTATION]

    assert release.podset_index(pod) == 0
    assert release.podset_info(appwrapper, pod) == {"labels": {"i": "0"}}


def test_a_podset_annotation_naming_no_podset_places_the_pod_nowhere() -> None:
    # Anyone who may edit the pod may write the annotation: nothing they write raises.
    appwrapper = {"spec": {"components": [{"podSetInfos": [{"labels": {"i": "0"}},
                                                           {"labels": {"i": "1"}}]}]}}  # fmt: skip
    for written in ("2", "-1", "one", ""):
        pod = _gated_pod()
        pod["metadata"]["annotations"][adoption.PODSET_ANNOTATION] = written
        assert release.podset_info(appwrapper, pod) is None, written
    assert release.podset_info({"spec": {"components": []}}, _gated_pod()) is None
    assert release.podset_info({}, _gated_pod()) is None
