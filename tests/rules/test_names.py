"""Names Volcano or the apiserver would refuse once the job could no longer be fixed."""

from __future__ import annotations

import pytest

from tests.builders import pod, volcano_job
from tests.engine.helpers import outcome_of, rendered_paths


@pytest.mark.parametrize(
    ("job", "want"),
    [
        pytest.param(
            volcano_job("j" * 50).task("worker", replicas=10),
            [],
            id="a last pod name of exactly 59 characters is fine",
        ),
        pytest.param(
            volcano_job("j" * 55).task("worker", replicas=10),
            [("spec.tasks[0]", "error")],
            id="a last pod name over 63 characters",
        ),
        pytest.param(
            volcano_job("j" * 54).task("worker", replicas=1),
            [],
            id="63 characters exactly is fine",
        ),
        pytest.param(
            volcano_job("j" * 55).task("worker", replicas=1),
            [("spec.tasks[0]", "error")],
            id="one character more is not",
        ),
        pytest.param(
            volcano_job("j" * 55)
            .task("idle", replicas=0)
            .task("worker", replicas=10)
            .master("worker"),
            [("spec.tasks[1]", "error")],
            id="a task without pods has no last pod, and the tasks after it are checked",
        ),
        pytest.param(
            volcano_job("Train").task("w", replicas=1),
            [("metadata.name", "error")],
            id="a job name with upper case",
        ),
        pytest.param(
            volcano_job("1train").task("w", replicas=1),
            [("metadata.name", "error")],
            id="a job name that starts with a digit is no DNS-1035 label",
        ),
        pytest.param(
            volcano_job("my.train").task("w", replicas=1),
            [("metadata.name", "error")],
            id="a job name with a dot",
        ),
        pytest.param(
            volcano_job("j").task("Worker", replicas=1),
            [("spec.tasks[0].name", "error")],
            id="a task name with upper case",
        ),
        pytest.param(
            volcano_job("j").task("w_1", replicas=1),
            [("spec.tasks[0].name", "error")],
            id="a task name with an underscore",
        ),
        pytest.param(
            volcano_job("j").task("w", replicas=1).task("w", replicas=2),
            [("spec.tasks[1].name", "error")],
            id="a duplicate task name",
        ),
        pytest.param(
            volcano_job("j").task("a", replicas=1).task("b", replicas=1).task("a", replicas=1),
            [("spec.tasks[2].name", "error")],
            id="the duplicate is reported where it repeats",
        ),
        pytest.param(
            volcano_job("j").task(None, replicas=2),
            [],
            id="an unnamed task is named default0 by Volcano",
        ),
    ],
)
def test_names(job, want):
    assert sorted(rendered_paths(outcome_of(job))) == sorted(want)


@pytest.mark.parametrize(
    "job",
    [
        pytest.param(volcano_job("Train").task("w", replicas=1), id="upper-case job name"),
        pytest.param(volcano_job("j").task("w_1", replicas=1), id="task name with underscore"),
    ],
)
def test_a_short_pod_name_is_never_told_to_get_shorter(job):
    details = [v.detail for v in outcome_of(job).errors]
    assert details and not any("shorten" in d for d in details), details


def test_the_pod_name_message_names_the_pod_and_its_length():
    outcome = outcome_of(volcano_job("j" * 55).task("worker", replicas=10))
    assert f"'{'j' * 55}-worker-9'" in outcome.errors[0].detail
    assert "has 64 characters" in outcome.errors[0].detail


def test_a_candidate_without_name_or_generate_name_is_refused():
    for builder in (volcano_job("x").task("w", replicas=1), pod("x").wrap()):
        obj = builder.build()
        del obj["metadata"]["name"]
        paths = [str(v.path) for v in outcome_of(obj).errors]
        assert paths == ["metadata.name"]
        obj["metadata"]["generateName"] = "x-"
        assert outcome_of(obj).errors == ()
