"""A ``/status`` write in the fake cluster, as kube-apiserver serves and admits it.

* What it stores: for a pod, podStatusStrategy.PrepareForUpdate (kubernetes
  pkg/registry/core/pod/strategy.go:216-233 at 008b3652) keeps the old spec and
  ownerReferences and takes the rest from the request, labels and annotations included; for a
  custom resource, apiextensions' status strategy keeps everything but ``status``.
* Who sees it: admission runs as for any write, with ``subResource: status`` in the request;
  a rule ``pods`` does not match it, ``pods/status`` and ``pods/*`` do (k8s.io/apiserver
  pkg/admission/plugin/webhook/predicates/rules/rules.go:106-117 at 7fc9c57d), for webhooks
  and ValidatingAdmissionPolicies alike; ``object`` and ``oldObject`` are the whole Pod.
"""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator
from typing import Any

import pytest

from testbed.apiserver import ApiserverEmulator, UserInfo, resource_info, rule_matches
from testbed.cluster.cluster import FakeCluster
from testbed.cluster.resources import PODS, VCJOBS
from testbed.cluster.store import ApiError
from tests.builders import VolcanoJobBuilder

Obj = dict[str, Any]
KUBELET = UserInfo(username="system:node:node-0", groups=("system:nodes",))


async def _pod(cluster: FakeCluster, name: str = "p") -> Obj:
    """A pod of the Volcano Job ``train`` (created first, or the garbage collector would take
    the pod), labelled ``claim=train``."""
    job = cluster.store.get(VCJOBS, "default", "train")
    if job is None:
        job = await cluster.create(
            VCJOBS, VolcanoJobBuilder("train").meta(namespace="default").build()
        )
    owner = {"apiVersion": VCJOBS.api_version, "kind": "Job", "name": "train",
             "uid": job["metadata"]["uid"], "controller": True}  # fmt: skip
    return await cluster.create(PODS, {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"claim": "train"},
                     "annotations": {"note": "a"}, "ownerReferences": [owner]},
        "spec": {"containers": [{"name": "main", "image": "busybox"}]},
    })  # fmt: skip


def _seen_by(resources: list[str]) -> list[Obj]:
    """A policy matching UPDATE of ``resources`` that denies every request it sees, saying
    which subresource it saw and the label and owners of ``object``."""
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": "seen"},
        "spec": {
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                    "resources": resources,
                                                    "operations": ["UPDATE"]}]},
            "validations": [{
                "expression": "false",
                "reason": "Forbidden",
                "messageExpression": (
                    "'seen ' + (has(request.subResource) ? request.subResource : 'main') + "
                    "' claim=' + object.metadata.labels['claim'] + "
                    "' was=' + oldObject.metadata.labels['claim'] + "
                    "' owner=' + object.metadata.ownerReferences[0].name"
                ),
            }],
        },
    }  # fmt: skip
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": "seen"},
        "spec": {"policyName": "seen", "validationActions": ["Deny"]},
    }
    return [policy, binding]


@pytest.fixture
async def cluster() -> AsyncIterator[FakeCluster]:
    async with FakeCluster() as fake:
        yield fake


async def test_a_pod_status_write_keeps_spec_and_owners_and_takes_labels(
    cluster: FakeCluster,
) -> None:
    created = await _pod(cluster)
    owners = created["metadata"]["ownerReferences"]
    sent = copy.deepcopy(created)
    sent["metadata"]["labels"] = {"claim": "other"}
    sent["metadata"]["annotations"]["note"] = "b"
    sent["metadata"]["ownerReferences"] = []
    sent["spec"]["containers"][0]["image"] = "evil"
    sent["status"] = {"phase": "Running"}
    stored = await cluster.update(PODS, sent, user=KUBELET, subresource="status")
    assert stored["metadata"]["labels"] == {"claim": "other"}
    assert stored["metadata"]["annotations"] == {"note": "b"}
    assert stored["status"] == {"phase": "Running"}
    assert stored["metadata"]["ownerReferences"] == owners
    assert stored["spec"]["containers"][0]["image"] == "busybox"


async def test_a_custom_resource_status_write_changes_its_status_only(
    cluster: FakeCluster,
) -> None:
    await cluster.create(
        VCJOBS, VolcanoJobBuilder("j").meta(namespace="default", labels={"q": "1"}).build()
    )
    sent = copy.deepcopy(cluster.store.get(VCJOBS, "default", "j"))
    assert sent is not None
    sent["metadata"]["labels"] = {"q": "2"}
    sent["status"] = {"state": {"phase": "Running"}}
    stored = await cluster.update(VCJOBS, sent, subresource="status")
    assert stored["metadata"]["labels"] == {"q": "1"}
    assert stored["status"] == {"state": {"phase": "Running"}}


@pytest.mark.parametrize(
    ("resources", "main", "status"),
    [
        (["pods"], True, False),
        (["pods/status"], False, True),
        (["pods/*"], True, True),  # sub "*" matches "" too (rules.go:111)
        (["pods", "pods/status"], True, True),
        (["*"], True, False),
        (["*/*"], True, True),
    ],
)
async def test_a_policy_sees_a_status_write_only_through_a_rule_that_names_it(
    resources: list[str], main: bool, status: bool
) -> None:
    emulator = ApiserverEmulator("127.0.0.1", 9, admission_policies=_seen_by(resources))
    async with FakeCluster(emulator=emulator) as cluster:
        for subresource, expected in (("", main), ("status", status)):
            name = subresource or "main"
            sent = await _pod(cluster, name)
            sent["metadata"]["labels"]["claim"] = "other"
            sent["metadata"]["ownerReferences"][0]["name"] = "forged"
            if not expected:
                stored = await cluster.update(PODS, sent, subresource=subresource)
                assert stored["metadata"]["labels"]["claim"] == "other"
                continue
            with pytest.raises(ApiError) as denied:
                await cluster.update(PODS, sent, subresource=subresource)
            assert denied.value.status == 403
            # The whole Pod, as the strategy prepared it: the status write's label is there,
            # its ownerReference is not (kept from the stored pod).
            owner = "train" if subresource else "forged"
            seen = f"seen {name} claim=other was=train owner={owner}"
            assert denied.value.message.endswith(seen), denied.value.message


def test_rule_matching_names_the_subresource() -> None:
    info = resource_info({"apiVersion": "v1", "kind": "Pod"})
    rule = {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"]}
    assert rule_matches({**rule, "resources": ["pods"]}, "UPDATE", info, "default")
    assert not rule_matches({**rule, "resources": ["pods"]}, "UPDATE", info, "default", "status")
    assert rule_matches({**rule, "resources": ["pods/status"]}, "UPDATE", info, "default",
                        "status")  # fmt: skip
    assert not rule_matches({**rule, "resources": ["pods/status"]}, "UPDATE", info, "default")
    assert rule_matches({**rule, "resources": ["*/status"]}, "UPDATE", info, "default", "status")
