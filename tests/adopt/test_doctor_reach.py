"""Doctor's checks of Volcano's version, of the NetworkPolicy in front of the webhook port, and
of whether namespace editors may create AppWrappers, judged on the facts diagnose reads."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.deploy.test_manifests import render
from webhook.cli import doctor
from webhook.cli.doctor.prerequisites import volcano_version
from webhook.cli.doctor.reach import network_policy, submitters


def _scheduler(image: str, name: str = "volcano-scheduler") -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": "volcano-system"},
        "spec": {"template": {"spec": {"containers": [{"name": "s", "image": image}]}}},
    }


@pytest.mark.parametrize(
    ("workloads", "level", "says"),
    [
        ([_scheduler("volcanosh/vc-scheduler:v1.9.0")], doctor.FAIL,
         "Volcano 1.9.0 (volcano-system/volcano-scheduler): its scheduler does not skip gated"),
        ([_scheduler("volcanosh/vc-scheduler:v1.10.0")], doctor.OK,
         "Volcano 1.10.0 (volcano-system/volcano-scheduler); tasks[].partitionPolicy needs 1.14.0"),
        ([_scheduler("volcanosh/vc-scheduler:v1.14.1", name="vc-sched")], doctor.OK,
         "Volcano 1.14.1 (volcano-system/vc-sched)"),
        ([_scheduler("volcanosh/vc-scheduler@sha256:abc")], doctor.WARN,
         "image carries no version tag"),
        ([], doctor.WARN, "Volcano's version is unknown"),
    ],
    ids=["below 1.10", "1.10", "found by its image", "a digest", "not found"],
)  # fmt: skip
def test_volcano_version(workloads, level, says):
    found = volcano_version(doctor.Facts(workloads=workloads))
    assert found.level == level and says in found.found, found
    if level == doctor.FAIL:
        assert "or set mode: Redirect" in found.fix


def _shipped_policy() -> dict[str, Any]:
    return copy.deepcopy(next(o for o in render("base") if o["kind"] == "NetworkPolicy"))


def test_the_shipped_network_policy_is_flagged_open():
    found = network_policy(doctor.Facts(network_policy=_shipped_policy()))
    assert found.level == doctor.WARN
    assert "admits 0.0.0.0/0 on the webhook port 9443: everyone, as shipped" in found.found
    assert "The control plane's range" in found.fix


def test_a_network_policy_with_the_control_plane_s_range_passes():
    policy = _shipped_policy()
    policy["spec"]["ingress"][0]["from"] = [{"ipBlock": {"cidr": "10.0.0.0/24"}}]
    found = network_policy(doctor.Facts(network_policy=policy))
    assert found.level == doctor.OK and "admits 10.0.0.0/24" in found.found


def test_a_rule_without_from_admits_everyone():
    policy = _shipped_policy()
    del policy["spec"]["ingress"][0]["from"]
    assert network_policy(doctor.Facts(network_policy=policy)).level == doctor.WARN


def test_a_missing_network_policy_is_a_warning():
    found = network_policy(doctor.Facts())
    assert found.level == doctor.WARN and "not found" in found.found


def _role(name: str, rules: list[dict[str, Any]], **labels: str) -> dict[str, Any]:
    return {"kind": "ClusterRole", "metadata": {"name": name, "labels": labels}, "rules": rules}


SUBMITTER = next(o for o in render("base") if o["metadata"]["name"] == "autowrap-submitter")
AGGREGATE = {"rbac.authorization.k8s.io/aggregate-to-edit": "true"}
JOBS = {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["create"]}


@pytest.mark.parametrize(
    ("roles", "level"),
    [
        ([_role("edit", [JOBS, *SUBMITTER["rules"]]), SUBMITTER], doctor.OK),
        ([_role("edit", [JOBS]), _role("autowrap-submitter", SUBMITTER["rules"], **AGGREGATE)],
         doctor.WARN),
        ([_role("edit", [JOBS])], doctor.FAIL),
        ([], doctor.WARN),
    ],
    ids=["aggregated into edit", "labelled, not merged yet", "not granted", "no edit role"],
)  # fmt: skip
def test_namespace_editors_may_create_appwrappers(roles, level):
    found = submitters(doctor.Facts(rbac_roles=roles))
    assert found.level == level, found
    if level == doctor.FAIL:
        assert "a namespace editor's labelled job is refused" in found.found
        assert "deploy/base/user-rbac.yaml" in found.fix


def test_the_install_aggregates_the_submitter_role_into_edit_and_admin():
    labels = SUBMITTER["metadata"]["labels"]
    assert labels["rbac.authorization.k8s.io/aggregate-to-edit"] == "true"
    assert labels["rbac.authorization.k8s.io/aggregate-to-admin"] == "true"
    assert {"create", "get", "list", "watch"} <= set(SUBMITTER["rules"][0]["verbs"])
