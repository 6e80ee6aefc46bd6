"""Network-topology defaults from policy: added at job and partition level only where absent."""

from __future__ import annotations

import pytest

from tests.builders import policy, volcano_job
from tests.engine.helpers import component, render

FABRIC = policy().topology(
    default={"mode": "hard", "highestTierAllowed": 2},
    partitionDefault={"mode": "soft", "highestTierAllowed": 1},
    maxTier=3,
)
PARTITIONED = volcano_job("j").task(
    "w", replicas=4, partition={"totalPartitions": 2, "partitionSize": 2}
)


def test_job_without_topology_gets_the_policy_default():
    spec = component(render(volcano_job("j").task("w", replicas=2), FABRIC))["spec"]
    assert spec["networkTopology"] == {"mode": "hard", "highestTierAllowed": 2}


def test_partition_without_topology_gets_the_partition_default():
    spec = component(render(PARTITIONED.clone(), FABRIC))["spec"]
    assert spec["tasks"][0]["partitionPolicy"] == {
        "totalPartitions": 2,
        "partitionSize": 2,
        "networkTopology": {"mode": "soft", "highestTierAllowed": 1},
    }


def test_a_task_without_partition_policy_gets_no_partition_default():
    spec = component(render(volcano_job("j").task("w", replicas=2), FABRIC))["spec"]
    assert "partitionPolicy" not in spec["tasks"][0]


@pytest.mark.parametrize(
    "topology",
    [
        pytest.param({"mode": "soft"}, id="a soft job topology without tier"),
        pytest.param({"mode": "hard", "highestTierAllowed": 1}, id="a lower tier"),
        pytest.param({"mode": "hard", "highestTierName": "spine"}, id="a tier by name"),
    ],
)
def test_the_users_job_topology_is_kept_as_written(topology):
    job = PARTITIONED.clone().spec(networkTopology=dict(topology))
    spec = component(render(job, FABRIC))["spec"]
    assert spec["networkTopology"] == topology
    assert spec["tasks"][0]["partitionPolicy"]["networkTopology"] == {
        "mode": "soft",
        "highestTierAllowed": 1,
    }


def test_the_users_partition_topology_is_kept_and_the_job_default_still_added():
    job = PARTITIONED.clone().partition_topology("w", "hard", tier=0)
    spec = component(render(job, FABRIC))["spec"]
    assert spec["tasks"][0]["partitionPolicy"]["networkTopology"] == {
        "mode": "hard",
        "highestTierAllowed": 0,
    }
    assert spec["networkTopology"] == {"mode": "hard", "highestTierAllowed": 2}


def test_a_policy_without_topology_defaults_adds_nothing():
    spec = component(render(PARTITIONED.clone()))["spec"]
    assert "networkTopology" not in spec
    assert "networkTopology" not in spec["tasks"][0]["partitionPolicy"]


def test_a_default_by_tier_name_is_added_as_written():
    named = policy().topology(default={"mode": "soft", "highestTierName": "rack"})
    spec = component(render(volcano_job("j").task("w", replicas=2), named))["spec"]
    assert spec["networkTopology"] == {"mode": "soft", "highestTierName": "rack"}


def test_every_partitioned_task_gets_the_default():
    job = (
        volcano_job("j")
        .task("a", replicas=2, partition={"totalPartitions": 1, "partitionSize": 2})
        .task("b", replicas=6, partition={"totalPartitions": 3, "partitionSize": 2})
    )
    tasks = component(render(job, FABRIC))["spec"]["tasks"]
    assert [t["partitionPolicy"]["networkTopology"] for t in tasks] == [
        {"mode": "soft", "highestTierAllowed": 1}
    ] * 2
