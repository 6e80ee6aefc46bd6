"""The fake refuses the pod updates kube-apiserver refuses (testbed/cluster/podupdate.py,
ValidatePodUpdate in kubernetes pkg/apis/core/validation/validation.go), one rule per test,
and lets through what it lets through; the store and the HTTP API answer 422 Invalid."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes.aio import client
from kubernetes.aio.client.exceptions import ApiException

from testbed.cluster import resources as r
from testbed.cluster.cluster import FakeCluster
from testbed.cluster.podupdate import pod_update_errors
from testbed.cluster.store import ApiError, Store

Obj = dict[str, Any]
GATE = "autowrap.io/admission"
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"


def gated_pod(**spec: Any) -> Obj:
    base: Obj = {
        "containers": [{"name": "main", "image": "torch:2.4", "command": ["train"]}],
        "initContainers": [{"name": "init", "image": "busybox"}],
        "restartPolicy": "Never",
        "schedulingGates": [{"name": GATE}, {"name": "other.example/gate"}],
        "nodeSelector": {"pool": "a100"},
        "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "affinity": {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}]}]}}},
    }  # fmt: skip
    base.update(spec)
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "default"}, "spec": base}  # fmt: skip


def ungated_pod() -> Obj:
    pod = gated_pod()
    del pod["spec"]["schedulingGates"]
    return pod


def changed(pod: Obj, change: Callable[[Obj], None]) -> Obj:
    new = copy.deepcopy(pod)
    change(new["spec"])
    return new


def errors(old: Obj, change: Callable[[Obj], None]) -> list[tuple[str, str, str]]:
    return [(e.type, e.field, e.detail.split("\n")[0])
            for e in pod_update_errors(changed(old, change), old)]  # fmt: skip


FROZEN = "pod updates may not change fields other than `spec.containers[*].image`"


def frozen(errs: list[tuple[str, str, str]]) -> bool:
    return ("FieldValueForbidden", "spec") in [(t, f) for t, f, _ in errs] and any(
        d.startswith(FROZEN) for *_, d in errs
    )


# -- what stays free -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(lambda s: s["containers"][0].update(image="torch:2.5"), id="image"),
        pytest.param(lambda s: s["initContainers"][0].update(image="busybox:2"), id="init-image"),
        pytest.param(lambda s: s.update(activeDeadlineSeconds=600), id="set-deadline"),
        pytest.param(
            lambda s: s["tolerations"].append({"key": "spot", "operator": "Exists"}),
            id="toleration-added",
        ),  # fmt: skip
        pytest.param(
            lambda s: s["tolerations"][0].update(tolerationSeconds=30), id="toleration-seconds"
        ),  # fmt: skip
        pytest.param(lambda s: s["schedulingGates"].pop(0), id="gate-removed"),
        pytest.param(lambda s: s.pop("schedulingGates"), id="every-gate-removed"),
        pytest.param(lambda s: s["nodeSelector"].update(rack="r1"), id="gated-selector-added"),
        pytest.param(
            lambda s: s["affinity"]["nodeAffinity"][REQUIRED]["nodeSelectorTerms"][0][
                "matchExpressions"
            ].append({"key": "rack", "operator": "Exists"}),
            id="gated-affinity-narrowed",
        ),  # fmt: skip
        pytest.param(
            lambda s: s["affinity"]["nodeAffinity"].update(
                preferredDuringSchedulingIgnoredDuringExecution=[
                    {
                        "weight": 1,
                        "preference": {"matchExpressions": [{"key": "x", "operator": "Exists"}]},
                    }
                ]
            ),
            id="gated-preference-added",
        ),  # fmt: skip
        pytest.param(
            lambda s: s.update(tolerations=s["tolerations"], hostNetwork=False),
            id="a-false-is-absence",
        ),  # fmt: skip
    ],
)
def test_what_kube_apiserver_lets_an_update_change(change: Callable[[Obj], None]) -> None:
    assert errors(gated_pod(), change) == []


def test_an_ungated_pod_may_set_its_first_required_affinity_only_while_gated() -> None:
    old = gated_pod(affinity=None)
    affinity = {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}}}  # fmt: skip
    assert errors(old, lambda s: s.update(affinity=affinity)) == []
    running = ungated_pod()
    running["spec"].pop("affinity")
    assert frozen(errors(running, lambda s: s.update(affinity=affinity)))


# -- one rule each -------------------------------------------------------------------------------


def test_containers_may_not_be_added_or_removed() -> None:
    added = errors(gated_pod(), lambda s: s["containers"].append({"name": "x", "image": "y"}))
    assert added == [("FieldValueForbidden", "spec.containers",
                      "pod updates may not add or remove containers")]  # fmt: skip
    removed = errors(gated_pod(), lambda s: s["initContainers"].clear())
    assert removed == [("FieldValueForbidden", "spec.initContainers",
                        "pod updates may not add or remove containers")]  # fmt: skip


def test_an_image_must_stay_set_and_trimmed() -> None:
    assert errors(gated_pod(), lambda s: s["containers"][0].update(image="")) == [
        ("FieldValueRequired", "spec.containers[0].image", "")
    ]
    assert errors(gated_pod(), lambda s: s["containers"][0].update(image=" torch ")) == [
        ("FieldValueInvalid", "spec.containers[0].image",
         "must not have leading or trailing whitespace")]  # fmt: skip


def test_the_active_deadline_may_only_be_set_or_lowered() -> None:
    with_deadline = gated_pod(activeDeadlineSeconds=600)
    assert errors(with_deadline, lambda s: s.update(activeDeadlineSeconds=300)) == []
    assert errors(with_deadline, lambda s: s.update(activeDeadlineSeconds=900)) == [
        ("FieldValueInvalid", "spec.activeDeadlineSeconds",
         "must be less than or equal to previous value")]  # fmt: skip
    assert errors(with_deadline, lambda s: s.pop("activeDeadlineSeconds")) == [
        ("FieldValueInvalid", "spec.activeDeadlineSeconds",
         "must not update from a positive integer to nil value")]  # fmt: skip
    assert errors(gated_pod(), lambda s: s.update(activeDeadlineSeconds=-1)) == [
        ("FieldValueInvalid", "spec.activeDeadlineSeconds",
         "must be between 0 and 2147483647, inclusive")]  # fmt: skip


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(lambda s: s["tolerations"].clear(), id="removed"),
        pytest.param(lambda s: s["tolerations"][0].update(effect="NoExecute"), id="modified"),
    ],
)
def test_existing_tolerations_stay(change: Callable[[Obj], None]) -> None:
    found = errors(gated_pod(), change)
    assert found[0] == ("FieldValueForbidden", "spec.tolerations",
                        "existing toleration can not be modified except its tolerationSeconds")  # fmt: skip


def test_a_scheduling_gate_may_only_be_removed() -> None:
    added = errors(gated_pod(), lambda s: s["schedulingGates"].append({"name": "new"}))
    assert added == [("FieldValueForbidden", "spec.schedulingGates[2].name",
                      "only deletion is allowed, but found new scheduling gate 'new'")]  # fmt: skip
    regated = errors(ungated_pod(), lambda s: s.update(schedulingGates=[{"name": GATE}]))
    assert regated == [("FieldValueForbidden", "spec.schedulingGates[0].name",
                        f"only deletion is allowed, but found new scheduling gate '{GATE}'")]  # fmt: skip


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(lambda s: s["nodeSelector"].update(pool="h100"), id="changed"),
        pytest.param(lambda s: s["nodeSelector"].clear(), id="removed"),
    ],
)
def test_a_gated_pods_node_selector_may_only_gain_keys(change: Callable[[Obj], None]) -> None:
    found = errors(gated_pod(), change)
    assert [(t, f) for t, f, _ in found] == [("FieldValueInvalid", "spec.nodeSelector")]
    assert found[0][2] == ("only additions to spec.nodeSelector are allowed (no mutations or "
                           "deletions)")  # fmt: skip


def test_a_running_pods_node_selector_is_frozen() -> None:
    assert frozen(errors(ungated_pod(), lambda s: s["nodeSelector"].update(rack="r1")))


def test_a_gated_pods_required_node_affinity_may_only_narrow() -> None:
    terms = f"spec.affinity.nodeAffinity.{REQUIRED}.nodeSelectorTerms"
    widened = errors(gated_pod(), lambda s: s["affinity"]["nodeAffinity"][REQUIRED]
                     ["nodeSelectorTerms"].append({"matchExpressions": []}))  # fmt: skip
    assert widened == [("FieldValueInvalid", terms,
                        "no additions/deletions to non-empty NodeSelectorTerms list are allowed")]  # fmt: skip
    mutated = errors(gated_pod(), lambda s: s["affinity"]["nodeAffinity"][REQUIRED]
                     ["nodeSelectorTerms"][0]["matchExpressions"][0].update(values=["c"]))  # fmt: skip
    assert mutated == [("FieldValueInvalid", f"{terms}[0]",
                        "only additions are allowed (no mutations or deletions)")]  # fmt: skip


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(lambda s: s["containers"][0].update(command=["other"]), id="command"),
        pytest.param(lambda s: s.update(restartPolicy="Always"), id="restartPolicy"),
        pytest.param(lambda s: s.update(nodeName="node-1"), id="nodeName"),
        pytest.param(
            lambda s: s["containers"][0].update(env=[{"name": "A", "value": "1"}]), id="env"
        ),  # fmt: skip
    ],
)
def test_everything_else_is_frozen(change: Callable[[Obj], None]) -> None:
    assert frozen(errors(gated_pod(), change))


def test_a_gated_pod_may_not_be_created_on_a_node() -> None:
    store = Store()
    with pytest.raises(ApiError) as err:
        store.create(r.PODS, gated_pod(nodeName="node-1"))
    assert (err.value.status, err.value.reason) == (422, "Invalid")
    assert err.value.message == ('Pod "p" is invalid: spec.nodeName: Forbidden: cannot be set '
                                 "until all schedulingGates have been cleared")  # fmt: skip


# -- where the store and the API apply it --------------------------------------------------------


def test_the_store_answers_a_refused_update_with_422_and_one_cause_per_error() -> None:
    store = Store()
    store.create(r.PODS, gated_pod())
    patch = [{"op": "add", "path": "/spec/schedulingGates/-", "value": {"name": "x"}},
             {"op": "replace", "path": "/spec/nodeSelector/pool", "value": "h100"}]  # fmt: skip
    with pytest.raises(ApiError) as err:
        store.patch(r.PODS, "default", "p", patch, "application/json-patch+json")
    status = err.value.status_json()
    assert (status["code"], status["reason"]) == (422, "Invalid")
    assert [(c["reason"], c["field"]) for c in status["details"]["causes"]] == [
        ("FieldValueForbidden", "spec.schedulingGates[2].name"),
        ("FieldValueInvalid", "spec.nodeSelector"),
    ]
    assert status["message"].startswith('Pod "p" is invalid: [spec.schedulingGates[2].name: '
                                        "Forbidden: only deletion is allowed, but found new "
                                        "scheduling gate 'x', spec.nodeSelector: Invalid value: ")  # fmt: skip
    stored = store.get(r.PODS, "default", "p")
    assert stored is not None and stored["spec"]["nodeSelector"] == {"pool": "a100"}


def test_status_and_binding_writes_are_not_spec_updates() -> None:
    store = Store()
    store.create(r.PODS, ungated_pod())
    current = store.get(r.PODS, "default", "p")
    assert current is not None
    store.update(r.PODS, {**current, "status": {"phase": "Running"}}, subresource="status")
    bound = store.bind("default", "p", "node-1")
    assert bound["spec"]["nodeName"] == "node-1"


def test_binding_a_gated_pod_is_refused() -> None:
    store = Store()
    store.create(r.PODS, gated_pod())
    with pytest.raises(ApiError) as err:
        store.bind("default", "p", "node-1")
    assert err.value.status == 409
    assert "has non-empty .spec.schedulingGates" in err.value.message


async def test_the_api_refuses_a_release_that_changes_an_existing_selector_value(
    tmp_path: Any,
) -> None:
    from kubernetes.aio.config.kube_config import new_client_from_config

    async with FakeCluster() as fake:
        fake.store.create(r.PODS, gated_pod())
        kubeconfig = fake.write_kubeconfig(tmp_path / "kubeconfig")
        async with await new_client_from_config(
            config_file=str(kubeconfig), persist_config=False
        ) as api:
            core = client.CoreV1Api(api)
            with pytest.raises(ApiException) as err:
                await core.patch_namespaced_pod("p", "default", [
                    {"op": "replace", "path": "/spec/nodeSelector/pool", "value": "h100"},
                    {"op": "remove", "path": "/spec/schedulingGates/0"}])  # fmt: skip
            assert err.value.status == 422
            released = await core.patch_namespaced_pod("p", "default", [
                {"op": "add", "path": "/spec/nodeSelector/rack", "value": "r1"},
                {"op": "remove", "path": "/spec/schedulingGates/0"}])  # fmt: skip
            assert released.spec.node_selector == {"pool": "a100", "rack": "r1"}
            assert [g.name for g in released.spec.scheduling_gates] == ["other.example/gate"]
