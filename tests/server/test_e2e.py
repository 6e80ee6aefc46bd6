"""End to end: a user's create goes through the apiserver emulator, configured with the
webhook configurations rendered from deploy/, to the real autowrap server over TLS; autowrap
calls the fake Kubernetes API, whose AppWrapper creates pass through the emulator again."""

from __future__ import annotations

import copy
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from testbed.apiserver import AdmissionResult, UserInfo
from testbed.cluster.resources import APPWRAPPERS
from testbed.redirect import ALICE, MALLORY, NAMESPACE, QUEUE, Cluster, pod, vcjob
from testbed.schemas import assert_valid_appwrapper
from webhook.model import names

Obj = dict[str, Any]


def wrapped(result: AdmissionResult) -> None:
    """A successful wrap: also a denial, told from a refusal by its status (403 Forbidden, the
    AppWrapper named in the details), never by its wording."""
    assert not result.allowed
    assert (result.status_code, result.reason) == (403, "Forbidden"), result.message
    assert result.status is not None
    assert result.status.get("details", {}).get("kind") == names.APPWRAPPER_PLURAL, result.status


def refused(result: AdmissionResult, code: int, reason: str) -> None:
    """A refusal with the status a client acts on: 409 AlreadyExists for a name taken (a GitOps
    tool renames or waits), 403 for rights, 422 for the object itself."""
    assert not result.allowed
    assert (result.status_code, result.reason) == (code, reason), result.message
    details = (result.status or {}).get("details") or {}
    assert details.get("kind") != names.APPWRAPPER_PLURAL, "a refusal names no AppWrapper made"


async def test_a_labeled_vcjob_is_wrapped_and_the_user_is_told_where_it_went(
    cluster: Cluster,
) -> None:
    result = await cluster.create(vcjob())

    # Not 409: client-go's RetryOnConflict would retry it, and a retry only repeats the answer.
    wrapped(result)
    assert f"Job {NAMESPACE}/train was wrapped into AppWrapper {NAMESPACE}/train" in result.message
    assert f"kubectl get appwrapper train -n {NAMESPACE}" in result.message
    assert list(cluster.appwrappers()) == [(NAMESPACE, "train")]
    stored = cluster.appwrappers()[(NAMESPACE, "train")]
    assert stored["metadata"]["labels"][names.QUEUE_LABEL] == QUEUE
    assert stored["spec"]["suspend"] is True
    component = stored["spec"]["components"][0]
    assert [p["replicas"] for p in component["podSets"]] == [1, 3]
    assert names.QUEUE_LABEL not in component["template"]["metadata"].get("labels", {})
    assert ("train",) not in [k[2:] for k in cluster.emulator.stored], "the original is not stored"
    assert_valid_appwrapper(stored)
    assert cluster.emulator.contract_violations == []


async def test_the_appwrapper_a_wrap_creates_skips_autowraps_own_webhooks_and_would_pass_them(
    cluster: Cluster,
) -> None:
    """autowrap's own create does not come back to its AppWrapper webhooks (matchCondition
    not-autowrap): the same engine built and judged it a moment before. The same AppWrapper
    sent by a user passes them unchanged, so skipping them skips nothing."""
    await cluster.create(vcjob())

    assert not [c for c in cluster.emulator.calls if c.name.startswith("appwrappers.")]
    [stored] = cluster.appwrappers().values()
    again = copy.deepcopy(stored)
    metadata = again["metadata"]
    for field in ("uid", "resourceVersion", "creationTimestamp", "generation", "managedFields"):
        metadata.pop(field, None)
    metadata["name"] = "same-work"
    await cluster.create(again, dry_run=True)
    aw_calls = [c for c in cluster.emulator.calls if c.name.startswith("appwrappers.")]
    assert {c.name for c in aw_calls} == {
        "appwrappers.mutate.autowrap.io",
        "appwrappers.validate.autowrap.io",
    }
    assert all(c.allowed for c in aw_calls)
    mutate = next(c for c in aw_calls if c.name == "appwrappers.mutate.autowrap.io")
    assert not mutate.patched, "completing an AppWrapper autowrap produced changes nothing"


async def test_applying_the_same_job_again_answers_the_same_and_creates_nothing_more(
    cluster: Cluster,
) -> None:
    first = await cluster.create(vcjob())
    second = await cluster.create(vcjob())

    assert second.message == first.message
    assert second.status_code == first.status_code
    assert len(cluster.appwrappers()) == 1
    assert cluster.emulator.contract_violations == []


async def test_a_different_spec_under_an_existing_appwrapper_name_is_rejected(
    cluster: Cluster,
) -> None:
    await cluster.create(vcjob(workers=3))
    result = await cluster.create(vcjob(workers=5))

    refused(result, 409, "AlreadyExists")
    assert "already exists with a different spec" in result.message
    stored = cluster.appwrappers()[(NAMESPACE, "train")]
    assert stored["spec"]["components"][0]["podSets"][1]["replicas"] == 3


async def test_an_appwrapper_with_a_copied_spec_hash_but_other_work_is_not_taken_for_ours(
    cluster: Cluster,
) -> None:
    await cluster.create(vcjob())
    forged = cluster.appwrappers()[(NAMESPACE, "train")]
    template = forged["spec"]["components"][0]["template"]
    template["spec"]["tasks"][1]["template"]["spec"]["containers"][0]["image"] = "evil:1"
    cluster.kube.store.update(APPWRAPPERS, forged)

    result = await cluster.create(vcjob())

    refused(result, 409, "AlreadyExists")
    assert "already exists with a different spec" in result.message


async def test_an_identical_appwrapper_made_by_a_teammate_is_not_reported_as_the_users_wrap(
    cluster: Cluster,
) -> None:
    await cluster.create(vcjob())
    copied = cluster.appwrappers()[(NAMESPACE, "train")]
    cluster.kube.store.delete(APPWRAPPERS, NAMESPACE, "train")
    # Bob creates the very same AppWrapper, spec hash and requested-by included: the AppWrapper
    # operator's webhook labels it with his name, whatever the copy said.
    copied["metadata"] = {k: v for k, v in copied["metadata"].items()
                          if k in ("name", "namespace", "labels", "annotations")}  # fmt: skip
    created = await cluster.create_appwrapper_as("bob", copied)
    assert created["metadata"]["labels"][names.APPWRAPPER_USER_LABEL] == "bob"

    result = await cluster.create(vcjob())

    refused(result, 409, "AlreadyExists")
    assert f"AppWrapper {NAMESPACE}/train already exists and was created by bob" in result.message
    assert "kubectl delete" not in result.message


async def test_without_the_appwrapper_operator_webhook_autowrap_knows_its_own_by_field_manager(
    cluster: Cluster,
) -> None:
    cluster.kube.appwrapper_operator_webhook = False
    first = await cluster.create(vcjob())
    stored = cluster.appwrappers()[(NAMESPACE, "train")]
    assert names.APPWRAPPER_USER_LABEL not in stored["metadata"]["labels"]
    assert [f["manager"] for f in stored["metadata"]["managedFields"]] == [names.FIELD_MANAGER]

    again = await cluster.create(vcjob())
    assert again.message == first.message

    # Written by a client that sets managedFields itself (an update may: fieldmanager.go).
    stored["metadata"]["managedFields"][0]["manager"] = "kubectl-create"
    cluster.kube.store.update(APPWRAPPERS, stored)
    third = await cluster.create(vcjob())
    refused(third, 409, "AlreadyExists")
    assert "already exists and was not created by autowrap" in third.message


async def test_a_rerun_over_a_finished_appwrapper_says_so_instead_of_claiming_it_queued(
    cluster: Cluster,
) -> None:
    await cluster.create(vcjob())
    finished = cluster.appwrappers()[(NAMESPACE, "train")]
    finished["status"] = {"phase": "Succeeded"}
    cluster.kube.store.update(APPWRAPPERS, finished, subresource="status")

    result = await cluster.create(vcjob())

    refused(result, 409, "AlreadyExists")
    assert "has already run and is Succeeded" in result.message


async def test_a_rerun_while_the_appwrapper_is_being_deleted_is_told_to_wait(
    cluster: Cluster,
) -> None:
    await cluster.create(vcjob())
    # The AppWrapper operator's finalizer holds it while it is torn down.
    held = cluster.appwrappers()[(NAMESPACE, "train")]
    held["metadata"]["finalizers"] = ["workload.codeflare.dev/finalizer"]
    cluster.kube.store.update(APPWRAPPERS, held)
    cluster.kube.store.delete(APPWRAPPERS, NAMESPACE, "train")
    assert cluster.appwrappers()[(NAMESPACE, "train")]["metadata"]["deletionTimestamp"]

    result = await cluster.create(vcjob())

    refused(result, 409, "AlreadyExists")
    assert "is being deleted" in result.message


async def test_other_settings_from_an_earlier_policy_are_no_reason_to_refuse_or_delete(
    cluster: Cluster,
) -> None:
    first = await cluster.create(vcjob())
    stored = cluster.appwrappers()[(NAMESPACE, "train")]
    stored["metadata"]["annotations"][names.FAULT_TOLERANCE_PREFIX + "retryLimit"] = "9"
    cluster.kube.store.update(APPWRAPPERS, stored)

    again = await cluster.create(vcjob())

    assert again.message == first.message
    assert "delete" not in " ".join(again.warnings)
    assert any("other settings" in w and "retryLimit" in w for w in again.warnings)


async def test_what_the_cluster_would_refuse_later_is_refused_now_word_for_word(
    cluster: Cluster,
) -> None:
    refusal = "spec.queue: queue team-queue is Closed, cannot submit jobs"
    cluster.kube.add_validating_webhook(
        "validatejob.volcano.sh",
        lambda request: refusal if request["kind"]["kind"] == "Job" else None,
    )

    result = await cluster.create(vcjob())

    refused(result, 422, "Invalid")
    assert refusal in result.message and "the AppWrapper would create" in result.message
    assert cluster.appwrappers() == {}
    (dry_run_request,) = cluster.kube.requests_to("POST", "/namespaces/ml/jobs$")
    assert dry_run_request.query.get("dryRun") == "All"
    dry_run = dry_run_request.body
    # Judged exactly as the AppWrapper controller will create it, labelled so that autowrap's
    # own webhooks leave it alone.
    assert dry_run["metadata"]["labels"][names.APPWRAPPER_LABEL] == "train"
    for task in dry_run["spec"]["tasks"]:
        assert task["template"]["metadata"]["labels"][names.APPWRAPPER_LABEL] == "train"


async def test_a_dry_run_answers_like_the_real_thing_and_creates_nothing(cluster: Cluster) -> None:
    result = await cluster.create(vcjob(), dry_run=True)

    wrapped(result)
    assert "was wrapped into AppWrapper" in result.message
    assert "dry run" in result.message
    assert cluster.appwrappers() == {}
    creates = cluster.kube.requests_to("POST", "/appwrappers$")
    assert creates and all("dryRun" in r.query for r in creates)


async def test_a_labeled_pod_is_wrapped_with_its_headless_service(cluster: Cluster) -> None:
    result = await cluster.create(pod())

    wrapped(result)
    assert "Pod ml/notebook was wrapped into AppWrapper ml/notebook" in result.message
    stored = cluster.appwrappers()[(NAMESPACE, "notebook")]
    kinds = [c["template"]["kind"] for c in stored["spec"]["components"]]
    assert kinds == ["Pod", "Service"]
    wrapped_pod = stored["spec"]["components"][0]["template"]
    env = {e["name"]: e.get("value") for e in wrapped_pod["spec"]["containers"][0]["env"]}
    assert env["MASTER_ADDR"] == "notebook.notebook"
    assert env["NNODES"] == "1" and env["RANK"] == "0"


async def test_a_user_submitted_appwrapper_is_completed_and_fits_the_crd_schema(
    cluster: Cluster,
) -> None:
    job = vcjob("byhand", labels={})
    aw = {
        "apiVersion": names.APPWRAPPER_API_VERSION,
        "kind": "AppWrapper",
        "metadata": {"name": "byhand", "namespace": NAMESPACE,
                     "labels": {names.QUEUE_LABEL: QUEUE}},
        "spec": {"components": [{"template": job}]},
    }  # fmt: skip
    result = await cluster.create(aw)

    assert result.allowed, result.message
    stored = result.object
    component = stored["spec"]["components"][0]
    assert [p["path"] for p in component["podSets"]] == [
        "template.spec.tasks[0].template",
        "template.spec.tasks[1].template",
    ]
    assert stored["spec"]["suspend"] is True
    env = component["template"]["spec"]["tasks"][1]["template"]["spec"]["containers"][0]["env"]
    assert {"name": "WORLD_SIZE", "value": "32"} in env
    assert_valid_appwrapper(stored)
    assert cluster.emulator.contract_violations == []


async def test_a_user_who_may_not_create_appwrappers_is_refused_and_nothing_is_created(
    cluster: Cluster,
) -> None:
    result = await cluster.create(vcjob(), user=MALLORY)

    refused(result, 403, "Forbidden")
    assert "'mallory' may not create appwrappers" in result.message
    assert cluster.appwrappers() == {}


async def test_a_queue_that_does_not_exist_is_rejected_before_anything_is_created(
    cluster: Cluster,
) -> None:
    result = await cluster.create(vcjob(labels={names.QUEUE_LABEL: "no-such-queue"}))

    refused(result, 422, "Invalid")
    assert "LocalQueue 'no-such-queue' does not exist" in result.message
    assert cluster.appwrappers() == {}


async def test_when_the_api_is_down_the_user_gets_a_clear_denial_and_nothing_is_left(
    cluster: Cluster,
) -> None:
    cluster.kube.inject("POST", r"/appwrappers$", status=503, times=None)
    result = await cluster.create(vcjob())

    refused(result, 503, "ServiceUnavailable")
    assert "Kubernetes API answered 503" in result.message
    assert cluster.appwrappers() == {}
    assert cluster.emulator.contract_violations == []


async def test_a_job_that_cannot_work_is_rejected_with_every_violation_at_once(
    cluster: Cluster,
) -> None:
    job = vcjob()
    job["spec"]["tasks"][1]["replicas"] = 5
    job["spec"]["tasks"][1]["partitionPolicy"] = {"totalPartitions": 2, "partitionSize": 2}
    env = [{"name": "WORLD_SIZE", "value": "7"}]
    job["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["env"] = env

    result = await cluster.create(job)

    refused(result, 422, "Invalid")
    assert "spec.tasks[1].replicas: replicas 5 must equal" in result.message
    assert "spec.tasks[0].template.spec.containers[0].env[0]: WORLD_SIZE" in result.message
    assert cluster.appwrappers() == {}


async def test_an_unlabeled_job_never_reaches_autowrap(cluster: Cluster) -> None:
    job = vcjob(labels={})
    result = await cluster.create(job)

    assert result.allowed
    assert cluster.emulator.calls == [] or all(
        not c.name.startswith("vcjobs.") for c in cluster.emulator.calls
    )
    assert result.object["metadata"]["name"] == "train"


async def test_pods_of_a_wrapped_job_get_their_exact_node_rank(cluster: Cluster) -> None:
    await cluster.create(vcjob(workers=3))
    task = cluster.appwrappers()[(NAMESPACE, "train")]["spec"]["components"][0]["template"]
    worker_template = task["spec"]["tasks"][1]["template"]
    ranks = []
    for index in range(3):
        created = copy.deepcopy(worker_template)
        created["apiVersion"], created["kind"] = "v1", "Pod"
        metadata = created.setdefault("metadata", {})
        metadata["name"] = f"train-worker-{index}"
        metadata["namespace"] = NAMESPACE
        metadata["annotations"] = {**metadata.get("annotations", {}),
                                   names.VOLCANO_TASK_INDEX: str(index)}  # fmt: skip
        metadata["ownerReferences"] = [{"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
                                        "name": "train", "uid": "u", "controller": True}]  # fmt: skip
        result = await cluster.create(created, user=ALICE)
        assert result.allowed, result.message
        ranks.append(result.object["metadata"]["annotations"][names.NODE_RANK_ANNOTATION])

    assert ranks == ["1", "2", "3"]
    assert cluster.emulator.contract_violations == []


# --- every refusal kind and its status, in one table ---------------------------------------------

Setup = Callable[[Cluster], Awaitable[tuple[Obj, UserInfo]]]


async def _nothing_before(cluster: Cluster) -> tuple[Obj, UserInfo]:
    return vcjob(), ALICE


async def _other_spec_under_the_name(cluster: Cluster) -> tuple[Obj, UserInfo]:
    await cluster.create(vcjob(workers=3))
    return vcjob(workers=5), ALICE


async def _made_by_someone_else(cluster: Cluster) -> tuple[Obj, UserInfo]:
    await cluster.create(vcjob())
    theirs = cluster.appwrappers()[(NAMESPACE, "train")]
    theirs["metadata"]["managedFields"][0]["manager"] = "kubectl-create"
    theirs["metadata"]["labels"][names.APPWRAPPER_USER_LABEL] = "bob"
    cluster.kube.store.update(APPWRAPPERS, theirs)
    return vcjob(), ALICE


async def _finished(cluster: Cluster) -> tuple[Obj, UserInfo]:
    await cluster.create(vcjob())
    finished = cluster.appwrappers()[(NAMESPACE, "train")]
    finished["status"] = {"phase": "Failed"}
    cluster.kube.store.update(APPWRAPPERS, finished, subresource="status")
    return vcjob(), ALICE


async def _being_deleted(cluster: Cluster) -> tuple[Obj, UserInfo]:
    await cluster.create(vcjob())
    held = cluster.appwrappers()[(NAMESPACE, "train")]
    held["metadata"]["finalizers"] = ["workload.codeflare.dev/finalizer"]
    cluster.kube.store.update(APPWRAPPERS, held)
    cluster.kube.store.delete(APPWRAPPERS, NAMESPACE, "train")
    return vcjob(), ALICE


async def _no_right_to_appwrappers(cluster: Cluster) -> tuple[Obj, UserInfo]:
    return vcjob(), MALLORY


async def _no_such_queue(cluster: Cluster) -> tuple[Obj, UserInfo]:
    return vcjob(labels={names.QUEUE_LABEL: "no-such-queue"}), ALICE


async def _cannot_work(cluster: Cluster) -> tuple[Obj, UserInfo]:
    job = vcjob()
    job["spec"]["tasks"][1]["replicas"] = -1
    return job, ALICE


async def _api_down(cluster: Cluster) -> tuple[Obj, UserInfo]:
    cluster.kube.inject("POST", r"/appwrappers$", status=503, times=None)
    return vcjob(), ALICE


@pytest.mark.parametrize(
    ("setup", "code", "reason"),
    [
        pytest.param(_nothing_before, 403, "Forbidden", id="wrapped (the success)"),
        pytest.param(_other_spec_under_the_name, 409, "AlreadyExists", id="another spec"),
        pytest.param(_made_by_someone_else, 409, "AlreadyExists", id="someone else's"),
        pytest.param(_finished, 409, "AlreadyExists", id="already ran"),
        pytest.param(_being_deleted, 409, "AlreadyExists", id="being deleted"),
        pytest.param(_no_right_to_appwrappers, 403, "Forbidden", id="no right"),
        pytest.param(_no_such_queue, 422, "Invalid", id="no such queue"),
        pytest.param(_cannot_work, 422, "Invalid", id="cannot work"),
        pytest.param(_api_down, 503, "ServiceUnavailable", id="api down"),
    ],
)
async def test_each_redirect_answer_has_the_status_a_client_acts_on(
    cluster: Cluster, setup: Setup, code: int, reason: str
) -> None:
    obj, user = await setup(cluster)
    before = copy.deepcopy(cluster.appwrappers())

    result = await cluster.create(obj, user=user)

    if setup is _nothing_before:
        wrapped(result)
        assert list(cluster.appwrappers()) == [(NAMESPACE, "train")]
    else:
        refused(result, code, reason)
        assert cluster.appwrappers() == before, "a refusal changes no AppWrapper"
