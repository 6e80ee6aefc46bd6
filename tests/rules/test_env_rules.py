"""Reserved env: what autowrap injects, or the policy reserves, must not be set differently."""

from __future__ import annotations

import pytest

from tests.builders import policy, volcano_job
from tests.engine.helpers import outcome_of, rendered_paths

C0 = "spec.tasks[{t}].template.spec.containers[{c}].env[{e}]"


@pytest.mark.parametrize(
    ("job", "policies", "want"),
    [
        pytest.param(
            volcano_job("j").task("w", replicas=2).env("w", "RANK", "0"),
            (),
            [(C0.format(t=0, c=0, e=0), "error")],
            id="a literal RANK in a multi-replica task",
        ),
        pytest.param(
            volcano_job("j").task("w", replicas=2).env("w", "MASTER_ADDR", "localhost"),
            (),
            [(C0.format(t=0, c=0, e=0), "error")],
            id="a MASTER_ADDR that is not node 0",
        ),
        pytest.param(
            volcano_job("j").task("w", replicas=1, gpus=8).env("w", "PET_NPROC_PER_NODE", "4"),
            (),
            [(C0.format(t=0, c=0, e=0), "error")],
            id="a PET_ mirror with another value",
        ),
        pytest.param(
            volcano_job("j").task("w", replicas=1, init_containers=1).init_env("w", "NNODES", "3"),
            (),
            [("spec.tasks[0].template.spec.initContainers[0].env[0]", "error")],
            id="an init container's env is checked too",
        ),
        pytest.param(
            volcano_job("j")
            .task("master", replicas=1)
            .task("w", replicas=2, containers=2)
            .env("w", "HF_HOME", "/hf", container_index=1)
            .env("w", "WORLD_SIZE", "99", container_index=1),
            (),
            [(C0.format(t=1, c=1, e=1), "error")],
            id="the path names task, container and entry",
        ),
        pytest.param(
            volcano_job("j").task("w", replicas=2).env("w", "NCCL_IB_HCA", "mlx5"),
            (policy().reserved_env("NCCL_IB_HCA"),),
            [(C0.format(t=0, c=0, e=0), "error")],
            id="a name the policy reserves",
        ),
        pytest.param(
            volcano_job("j").task("w", replicas=2).env("w", "NCCL_IB_HCA", "mlx5"),
            (),
            [],
            id="the same name is fine where the policy does not reserve it",
        ),
        pytest.param(
            volcano_job("j").task("w", replicas=2).env("w", "MASTER_PORT", "23456"),
            (),
            [],
            id="an equal value is no conflict",
        ),
    ],
)
def test_reserved_env(job, policies, want):
    assert rendered_paths(outcome_of(job, *policies)) == want


def test_every_conflict_in_every_task_is_reported_at_once():
    job = (
        volcano_job("j")
        .task("a", replicas=2)
        .env("a", "RANK", "1")
        .env("a", "NNODES", "9")
        .task("b", replicas=2)
        .env("b", "LOCAL_WORLD_SIZE", "9")
    )
    assert rendered_paths(outcome_of(job)) == [
        (C0.format(t=0, c=0, e=0), "error"),
        (C0.format(t=0, c=0, e=1), "error"),
        (C0.format(t=1, c=0, e=0), "error"),
    ]


def test_the_message_says_what_autowrap_sets():
    outcome = outcome_of(volcano_job("j").task("w", replicas=2).env("w", "NNODES", "9"))
    assert "'2'" in outcome.errors[0].detail
    assert outcome.errors[0].render().startswith(C0.format(t=0, c=0, e=0) + ": NNODES")


def test_a_rejected_job_is_still_rendered_for_inspection():
    outcome = outcome_of(volcano_job("j").task("w", replicas=2).env("w", "RANK", "1"))
    assert outcome.verdict().denied
    assert outcome.result is not None


def test_a_wrong_world_size_says_how_each_task_counts():
    job = (
        volcano_job("j")
        .task("master", replicas=1, gpus=8)
        .task("worker", replicas=2, gpus=4)
        .env("master", "WORLD_SIZE", "3")
    )
    (violation,) = outcome_of(job).errors
    assert str(violation.path) == "spec.tasks[0].template.spec.containers[0].env[0]"
    assert "(task 'master': 1 pod(s) × 8 from" in violation.detail
    assert "; task 'worker': 2 pod(s) × 4 from" in violation.detail
