"""Partition math (Volcano's rules plus the one it misses), with exact field paths."""

from __future__ import annotations

import pytest

from tests.builders import volcano_job
from tests.engine.helpers import outcome_of, rendered_paths

PP = "spec.tasks[0].partitionPolicy"
TASK1 = "spec.tasks[1].partitionPolicy"


def _job(replicas, min_available=None, **partition):
    return volcano_job("j").task(
        "w", replicas=replicas, min_available=min_available, partition=partition
    )


@pytest.mark.parametrize(
    ("job", "want"),
    [
        pytest.param(_job(4, totalPartitions=2, partitionSize=2), [], id="4 = 2 x 2 is valid"),
        pytest.param(
            _job(4, min_available=2, totalPartitions=2, partitionSize=2, minPartitions=1),
            [],
            id="minAvailable = minPartitions x partitionSize is valid",
        ),
        pytest.param(
            _job(4, min_available=4, totalPartitions=2, partitionSize=2, minPartitions=2),
            [],
            id="minPartitions = totalPartitions (the whole gang) is valid",
        ),
        pytest.param(
            _job(3, totalPartitions=3, partitionSize=1),
            [],
            id="partitions of one pod each are valid (the CRD's minimum is 1)",
        ),
        pytest.param(
            _job(0, totalPartitions=0, partitionSize=2),
            # replicas 0 = 0 x 2; a job without pods is worth a warning of its own
            [(f"{PP}.totalPartitions", "error"), ("spec.tasks", "warning")],
            id="totalPartitions 0",
        ),
        pytest.param(
            _job(4, totalPartitions=2, partitionSize=0),
            [(f"{PP}.partitionSize", "error")],
            id="partitionSize 0",
        ),
        pytest.param(
            _job(4, partitionSize=2),
            [(f"{PP}.totalPartitions", "error")],
            id="totalPartitions missing",
        ),
        pytest.param(
            _job(5, totalPartitions=2, partitionSize=2),
            [("spec.tasks[0].replicas", "error")],
            id="replicas differ from total x size",
        ),
        pytest.param(
            _job(4, totalPartitions=2, partitionSize=2, minPartitions=3),
            [(f"{PP}.minPartitions", "error")],
            id="minPartitions above totalPartitions",
        ),
        pytest.param(
            _job(4, min_available=3, totalPartitions=2, partitionSize=2, minPartitions=1),
            [("spec.tasks[0].minAvailable", "error")],
            id="minAvailable differs from minPartitions x partitionSize",
        ),
        pytest.param(
            _job(4, min_available=3, totalPartitions=2, partitionSize=2),
            [],
            id="without minPartitions minAvailable is not tied to partitions",
        ),
        pytest.param(
            _job(6, min_available=7, totalPartitions=2, partitionSize=2, minPartitions=3),
            [
                ("spec.tasks[0].replicas", "error"),
                (f"{PP}.minPartitions", "error"),
                ("spec.tasks[0].minAvailable", "error"),
                ("spec.tasks[0].minAvailable", "error"),
            ],
            id="every partition problem of a task at once",
        ),
    ],
)
def test_partition_math(job, want):
    assert sorted(rendered_paths(outcome_of(job))) == sorted(want)


MISCOUNTED = {"totalPartitions": 2, "partitionSize": 2}  # with 3 replicas
NO_PARTITIONS = {"totalPartitions": 0, "partitionSize": 2}  # with 2 replicas


@pytest.mark.parametrize(
    ("first", "second", "want"),
    [
        pytest.param(
            (3, MISCOUNTED),
            (2, NO_PARTITIONS),
            [("spec.tasks[0].replicas", "error"), (f"{TASK1}.totalPartitions", "error")],
            id="replicas first",
        ),
        pytest.param(
            (2, NO_PARTITIONS),
            (3, MISCOUNTED),
            [(f"{PP}.totalPartitions", "error"), ("spec.tasks[1].replicas", "error")],
            id="a bad partition policy first: the task after it is checked too",
        ),
    ],
)
def test_problems_in_two_tasks_are_reported_together(first, second, want):
    job = (
        volcano_job("j")
        .task("a", replicas=first[0], partition=first[1])
        .task("b", replicas=second[0], partition=second[1])
    )
    assert rendered_paths(outcome_of(job)) == want


def test_the_message_shows_the_arithmetic():
    outcome = outcome_of(_job(5, totalPartitions=2, partitionSize=2))
    assert "2 × 2 = 4" in outcome.errors[0].detail
