"""What Volcano would refuse later, and Volcano settings that fight AppWrapper (warnings)."""

from __future__ import annotations

import pytest

from tests.builders import volcano_job
from tests.engine.helpers import outcome_of, rendered_paths

W = volcano_job("j").task("w", replicas=2)


@pytest.mark.parametrize(
    ("job", "want"),
    [
        pytest.param(volcano_job("j").no_tasks(), [("spec.tasks", "error")], id="no tasks"),
        pytest.param(
            volcano_job("j").task("w", replicas=2, min_available=3),
            [("spec.tasks[0].minAvailable", "error")],
            id="task minAvailable above replicas",
        ),
        pytest.param(
            volcano_job("j").task("a", replicas=2).task("b", replicas=1).spec(minAvailable=4),
            [("spec.minAvailable", "error")],
            id="job minAvailable above the sum of replicas",
        ),
        pytest.param(
            volcano_job("j").task("a", replicas=2).task("b", replicas=1).spec(minAvailable=3),
            [],
            id="job minAvailable equal to the sum is fine",
        ),
        pytest.param(
            W.clone().spec(ttlSecondsAfterFinished=60),
            [("spec.ttlSecondsAfterFinished", "warning")],
            id="ttlSecondsAfterFinished",
        ),
        pytest.param(
            W.clone().spec(minSuccess=1), [("spec.minSuccess", "warning")], id="minSuccess"
        ),
        pytest.param(
            W.clone().spec(policies=[{"event": "TaskCompleted", "action": "CompleteJob"}]),
            [("spec.policies[0].action", "warning")],
            id="a job-level CompleteJob policy",
        ),
        pytest.param(
            volcano_job("j").task(
                "w",
                replicas=2,
                policies=[
                    {"event": "PodEvicted", "action": "RestartJob"},
                    {"event": "TaskCompleted", "action": "CompleteJob"},
                ],
            ),
            [("spec.tasks[0].policies[1].action", "warning")],
            id="a task-level CompleteJob policy",
        ),
        pytest.param(
            volcano_job("j")
            .task("w", replicas=2, env=[{"name": "A", "value": "1"}])
            .container_field("w", "envFrom", [{"configMapRef": {"name": "cfg"}}]),
            [("spec.tasks[0].template.spec.containers[0].envFrom[0]", "warning")],
            id="envFrom may carry reserved names",
        ),
        pytest.param(
            W.clone().topology("hard"),
            [("spec.networkTopology", "warning")],
            id="hard topology without a tier",
        ),
        pytest.param(
            W.clone().spec(plugins={"pytorch": ["--master=master"]}),
            [("spec.plugins[pytorch]", "warning")],
            id="the pytorch plugin without its master task adds nothing",
        ),
    ],
)
def test_volcano_rules(job, want):
    assert rendered_paths(outcome_of(job)) == want


def test_warnings_do_not_deny():
    outcome = outcome_of(W.clone().spec(minSuccess=1, ttlSecondsAfterFinished=10))
    verdict = outcome.verdict()
    assert not verdict.denied
    assert len(verdict.warnings) == 2 and verdict.errors == ()


def test_all_violations_of_one_job_come_at_once():
    job = (
        volcano_job("Bad.Name")
        .task("w", replicas=2, min_available=3)
        .env("w", "RANK", "5")
        .task("w", replicas=1)
        .spec(minAvailable=10, ttlSecondsAfterFinished=5)
        .topology("fast", tier=1)
        .annotate("autowrap.io/nproc-per-node", "0")
    )
    assert sorted(rendered_paths(outcome_of(job))) == sorted(
        [
            ("spec.tasks[0].template.spec.containers[0].env[0]", "error"),
            ("metadata.annotations[autowrap.io/nproc-per-node]", "error"),
            ("spec.networkTopology.mode", "error"),
            ("metadata.name", "error"),
            ("spec.tasks[0].minAvailable", "error"),
            ("spec.tasks[1].name", "error"),
            ("spec.minAvailable", "error"),
            ("spec.ttlSecondsAfterFinished", "warning"),
        ]
    )
