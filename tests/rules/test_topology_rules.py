"""Network topology: Volcano's enum and exclusivity, and the policy's maximum tier."""

from __future__ import annotations

import pytest

from tests.builders import policy, volcano_job
from tests.engine.helpers import outcome_of, rendered_paths

MAX2 = policy().topology(maxTier=2)
PARTITIONED = volcano_job("j").task(
    "w", replicas=4, partition={"totalPartitions": 2, "partitionSize": 2}
)
NT = "spec.networkTopology"
PNT = "spec.tasks[0].partitionPolicy.networkTopology"


@pytest.mark.parametrize(
    ("job", "want"),
    [
        pytest.param(volcano_job("j").topology("hard", tier=2), [], id="hard with tier 2 is valid"),
        pytest.param(volcano_job("j").topology("soft"), [], id="soft without tier is valid"),
        pytest.param(
            volcano_job("j").topology("hard", tier_name="spine"), [], id="a tier name is valid"
        ),
        pytest.param(
            volcano_job("j").topology("strict", tier=1),
            [(f"{NT}.mode", "error")],
            id="an unknown mode",
        ),
        pytest.param(
            volcano_job("j").topology("hard", tier=-1),
            [(f"{NT}.highestTierAllowed", "error")],
            id="a negative tier",
        ),
        pytest.param(
            volcano_job("j").topology("hard", tier=3),
            [(f"{NT}.highestTierAllowed", "error")],
            id="a tier above the policy maximum",
        ),
        pytest.param(
            volcano_job("j").topology("hard", tier=1, tier_name="spine"),
            [(NT, "error")],
            id="both highestTierAllowed and highestTierName",
        ),
        pytest.param(
            volcano_job("j").topology("hard"),
            [(NT, "warning")],
            id="hard without a tier is only a warning",
        ),
        pytest.param(
            PARTITIONED.clone().partition_topology("w", "hard", tier=5),
            [(f"{PNT}.highestTierAllowed", "error")],
            id="the partition's tier is checked against the maximum too",
        ),
        pytest.param(
            PARTITIONED.clone().partition_topology("w", "loose", tier=1, tier_name="leaf"),
            [(f"{PNT}.mode", "error"), (PNT, "error")],
            id="every problem of a partition topology at once",
        ),
        pytest.param(
            PARTITIONED.clone()
            .topology("hard", tier=9)
            .partition_topology("w", "soft", tier=1, tier_name="leaf"),
            [(f"{NT}.highestTierAllowed", "error"), (PNT, "error")],
            id="job and partition problems are reported together",
        ),
    ],
)
def test_topology_rules(job, want):
    assert rendered_paths(outcome_of(job, MAX2)) == want


def test_without_a_maximum_any_tier_is_allowed():
    assert rendered_paths(outcome_of(volcano_job("j").topology("hard", tier=9))) == []


def test_a_topology_that_is_not_a_map_is_rejected():
    job = volcano_job("j").spec(networkTopology="hard")
    assert rendered_paths(outcome_of(job)) == [(NT, "error")]


def test_the_policy_default_itself_is_not_reported():
    pol = policy().topology(default={"mode": "hard", "highestTierAllowed": 2}, maxTier=2)
    assert rendered_paths(outcome_of(volcano_job("j"), pol)) == []


def test_a_topology_without_mode_is_hard_as_volcanos_crd_defaults_it():
    # batch.volcano.sh_jobs.yaml: networkTopology.mode has `default: hard`.
    assert rendered_paths(outcome_of(volcano_job("j").topology(None, tier=1), MAX2)) == []
    outcome = outcome_of(volcano_job("j").topology(None), MAX2)
    assert rendered_paths(outcome) == [(NT, "warning")]
    assert "hard mode without highestTierAllowed" in outcome.warnings[0].detail


def test_a_topology_that_is_not_a_map_says_what_it_must_be_and_the_next_one_is_checked_too():
    job = PARTITIONED.clone().spec(networkTopology="hard").partition_topology("w", "loose", tier=1)
    outcome = outcome_of(job, MAX2)
    assert rendered_paths(outcome) == [(NT, "error"), (f"{PNT}.mode", "error")]
    assert outcome.errors[0].render() == f"{NT}: must be a map with mode and highestTierAllowed"


def test_a_negative_tier_says_what_a_tier_is():
    outcome = outcome_of(volcano_job("j").topology("hard", tier=-1), MAX2)
    assert outcome.errors[0].render() == (
        f"{NT}.highestTierAllowed: -1 is not a tier; use an integer ≥ 0"
    )
