"""The Kueue queue: present, well formed and allowed by the namespace's policy."""

from __future__ import annotations

import pytest

from tests.builders import policy, volcano_job
from tests.engine.helpers import outcome_of, rendered_paths

QUEUE_PATH = "metadata.labels[kueue.x-k8s.io/queue-name]"
TEAM = policy().queues(default="team-q", allowed=["team-q", "batch"])
NO_DEFAULT = policy().queues()


@pytest.mark.parametrize(
    ("job", "policies", "want"),
    [
        pytest.param(volcano_job("j").queue("batch"), (TEAM,), [], id="an allowed queue"),
        pytest.param(volcano_job("j"), (TEAM,), [], id="the policy default"),
        pytest.param(
            volcano_job("j").queue("Bad_Queue"),
            (NO_DEFAULT,),
            [(QUEUE_PATH, "error")],
            id="a malformed queue name",
        ),
        pytest.param(
            volcano_job("j").queue("other"),
            (TEAM,),
            [(QUEUE_PATH, "error")],
            id="a queue the policy does not allow",
        ),
        pytest.param(
            volcano_job("j"), (NO_DEFAULT,), [(QUEUE_PATH, "error")], id="no queue at all"
        ),
        pytest.param(
            volcano_job("j").queue("a.b-c"), (NO_DEFAULT,), [], id="a DNS subdomain is fine"
        ),
    ],
)
def test_queue(job, policies, want):
    assert rendered_paths(outcome_of(job, *policies)) == want


def test_no_queue_says_how_to_name_one():
    outcome = outcome_of(volcano_job("j"), NO_DEFAULT)
    assert "kueue.x-k8s.io/queue-name" in outcome.errors[0].detail
    assert "default queue" in outcome.errors[0].detail


def test_not_allowed_lists_the_allowed_queues():
    outcome = outcome_of(volcano_job("j").queue("other"), TEAM)
    assert "team-q, batch" in outcome.errors[0].detail
