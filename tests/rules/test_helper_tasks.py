"""Helper tasks (annotation autowrap.io/exclude-tasks) and a master without an accelerator."""

from __future__ import annotations

import pytest

from tests.builders import volcano_job
from tests.engine.helpers import outcome_of, render, rendered_paths
from tests.engine.simulate import pods_of
from webhook.model import names

EXCLUDE = names.EXCLUDE_TASKS_ANNOTATION
ANNOTATION_PATH = f"metadata.annotations[{EXCLUDE}]"


def _job():
    return (
        volcano_job("tf")
        .task("master", replicas=1, gpus=8)
        .task("worker", replicas=2, gpus=8)
        .task("ps", replicas=2)
        .task("evaluator", replicas=1)
    )


def test_excluded_tasks_leave_the_world_but_keep_the_rendezvous_address():
    pods = {p.name: p.env() for p in pods_of(render(_job().annotate(EXCLUDE, "ps, evaluator")))}

    world = ["tf-master-0", "tf-worker-0", "tf-worker-1"]
    assert [pods[n]["NODE_RANK"] for n in world] == ["0", "1", "2"]
    for name in world:
        assert (pods[name]["NNODES"], pods[name]["WORLD_SIZE"]) == ("3", "24")
    for helper in ("tf-ps-0", "tf-ps-1", "tf-evaluator-0"):
        assert pods[helper] == {"MASTER_ADDR": "tf-master-0.tf", "MASTER_PORT": "23456"}


def test_a_helper_task_may_set_what_autowrap_no_longer_injects_there():
    job = _job().annotate(EXCLUDE, "ps,evaluator").env("ps", "WORLD_SIZE", "2")
    assert rendered_paths(outcome_of(job)) == []


def test_without_the_annotation_every_task_is_in_the_world():
    pods = {p.name: p.env() for p in pods_of(render(_job()))}
    assert pods["tf-evaluator-0"]["NNODES"] == "6"
    assert pods["tf-evaluator-0"]["WORLD_SIZE"] == str(3 * 8 + 3)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        pytest.param("ps,chief", "no task is named 'chief'", id="an unknown task"),
        pytest.param("master", "'master' is the master task", id="the master task"),
    ],
)
def test_a_bad_exclude_list_is_a_violation_at_the_annotation(value, message):
    outcome = outcome_of(_job().annotate(EXCLUDE, value))
    errors = [v for v in outcome.errors if str(v.path) == ANNOTATION_PATH]
    assert len(errors) == 1 and message in errors[0].detail


MASTER_CONTAINERS = "spec.tasks[0].template.spec.containers"


@pytest.mark.parametrize(
    ("job", "warned"),
    [
        pytest.param(
            volcano_job("mw").task("master", replicas=1).task("worker", replicas=3, gpus=8),
            True,
            id="a CPU master beside GPU workers",
        ),
        pytest.param(
            volcano_job("mw").task("master", replicas=1, gpus=8).task("worker", replicas=3, gpus=8),
            False,
            id="GPUs everywhere",
        ),
        pytest.param(
            volcano_job("mw").task("master", replicas=1).task("worker", replicas=3),
            False,
            id="a CPU-only job",
        ),
        pytest.param(
            volcano_job("mw")
            .task("launcher", replicas=1)
            .task("worker", replicas=3, gpus=8)
            .master("worker")
            .annotate(EXCLUDE, "launcher"),
            False,
            id="the CPU task left out of the world and a GPU task as master",
        ),
    ],
)
def test_a_master_without_an_accelerator_beside_accelerator_tasks_is_warned(job, warned):
    outcome = outcome_of(job)
    warnings = [v for v in outcome.warnings if str(v.path) == MASTER_CONTAINERS]
    assert outcome.errors == ()
    assert len(warnings) == int(warned)
    if warned:
        assert "cannot hold a rank without one" in warnings[0].detail
        assert EXCLUDE in warnings[0].detail


@pytest.mark.parametrize(
    ("job", "name", "says"),
    [
        pytest.param(
            volcano_job("j").task("w", replicas=2).env("w", "MASTER_PORT", "29500"),
            "MASTER_PORT",
            [f"use the annotation {names.MASTER_PORT_ANNOTATION}"],
            id="MASTER_PORT names the port annotation",
        ),
        pytest.param(
            volcano_job("j").task("w", replicas=2, gpus=8).env("w", "NPROC_PER_NODE", "4"),
            "NPROC_PER_NODE",
            ["'8'", "nvidia.com/gpu: 8", f"use the annotation {names.NPROC_ANNOTATION}"],
            id="NPROC_PER_NODE names the resource it counted",
        ),
        pytest.param(
            volcano_job("j").task("w", replicas=2).env("w", "LOCAL_WORLD_SIZE", "4"),
            "LOCAL_WORLD_SIZE",
            ["'1'", "no accelerator in the containers' resources", names.NPROC_ANNOTATION],
            id="LOCAL_WORLD_SIZE says no accelerator was found",
        ),
        pytest.param(
            volcano_job("j").task("w", replicas=2, gpus=4).env("w", "WORLD_SIZE", "2"),
            "WORLD_SIZE",
            ["'8'", "task 'w': 2 pod(s) × 4", "nvidia.com/gpu: 4", names.NPROC_ANNOTATION],
            id="WORLD_SIZE shows its sum",
        ),
        pytest.param(
            volcano_job("j").task("w", replicas=2).nproc("2").env("w", "NPROC_PER_NODE", "4"),
            "NPROC_PER_NODE",
            [f"from the annotation {names.NPROC_ANNOTATION}"],
            id="NPROC_PER_NODE from the annotation says so",
        ),
    ],
)
def test_reserved_env_messages_give_the_real_fix(job, name, says):
    (violation,) = outcome_of(job).errors
    assert violation.detail.startswith(f"{name} is set by autowrap to ")
    for text in says:
        assert text in violation.detail, violation.detail


def test_an_uncounted_accelerator_is_warned_in_the_world_only_not_on_a_helper_before_it():
    """A helper runs no ranks, so its NPROC_PER_NODE means nothing; a world task after it in
    the job still gets the warning."""
    vgpu = "volcano.sh/vgpu-memory"
    job = (
        volcano_job("tf")
        .task("master", replicas=1, gpus=8)
        .task("ps", replicas=1, gpus=8, resource=vgpu)
        .task("worker", replicas=2, gpus=8, resource=vgpu)
        .annotate(EXCLUDE, "ps")
    )
    outcome = outcome_of(job)
    assert rendered_paths(outcome) == [
        ("spec.tasks[2].template.spec.containers[0].resources", "warning")
    ]
    assert "so NPROC_PER_NODE of 'worker' is 1" in outcome.warnings[0].detail
