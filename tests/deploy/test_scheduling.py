"""How the Deployment's pods are scheduled: priority, the quota that permits it, spreading."""

from __future__ import annotations

from typing import Any

import pytest

from tests.deploy.test_manifests import VARIANTS, _render

Obj = dict[str, Any]
PRIORITY_CLASS = "system-cluster-critical"


def _one(variant: str, kind: str) -> Obj:
    found = [d for d in _render(variant) if d["kind"] == kind]
    assert len(found) == 1, f"{variant}: {len(found)} {kind}"
    return found[0]


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_pods_run_at_system_cluster_critical_priority(variant: str) -> None:
    spec = _one(variant, "Deployment")["spec"]["template"]["spec"]
    assert spec["priorityClassName"] == PRIORITY_CLASS


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_a_quota_in_the_pods_namespace_admits_the_priority_class(variant: str) -> None:
    deployment = _one(variant, "Deployment")
    quota = _one(variant, "ResourceQuota")
    assert quota["metadata"]["namespace"] == deployment["metadata"]["namespace"]
    # The limitedResources check needs a quota that selects the class and covers pods.
    assert quota["spec"]["scopeSelector"]["matchExpressions"] == [
        {"scopeName": "PriorityClass", "operator": "In", "values": [PRIORITY_CLASS]}
    ]
    assert "scopes" not in quota["spec"]
    # Never the binding constraint: every replica, the surge pod and as many terminating
    # replicas fit.
    strategy = deployment["spec"]["strategy"]["rollingUpdate"]
    replicas = deployment["spec"]["replicas"]
    assert int(quota["spec"]["hard"]["pods"]) >= 2 * (replicas + strategy["maxSurge"])
    assert set(quota["spec"]["hard"]) == {"pods"}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_replicas_spread_across_zones_and_nodes_without_blocking(variant: str) -> None:
    deployment = _one(variant, "Deployment")
    template = deployment["spec"]["template"]
    constraints = template["spec"]["topologySpreadConstraints"]
    assert [c["topologyKey"] for c in constraints] == [
        "topology.kubernetes.io/zone",
        "kubernetes.io/hostname",
    ]
    for c in constraints:
        assert c["whenUnsatisfiable"] == "ScheduleAnyway"
        assert c["maxSkew"] == 1
        assert c["labelSelector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]
        labels = template["metadata"]["labels"]
        assert all(labels.get(k) == v for k, v in c["labelSelector"]["matchLabels"].items())
        assert c["matchLabelKeys"] == ["pod-template-hash"]


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_pdb_keeps_one_replica_and_still_lets_a_node_drain(variant: str) -> None:
    deployment = _one(variant, "Deployment")
    pdb = _one(variant, "PodDisruptionBudget")
    replicas = deployment["spec"]["replicas"]
    assert replicas == 2
    assert 1 <= pdb["spec"]["minAvailable"] < replicas
    assert pdb["spec"]["selector"] == deployment["spec"]["selector"]
