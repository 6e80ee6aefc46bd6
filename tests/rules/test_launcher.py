"""Commands that read WORLD_SIZE as a pod count (Volcano's pytorch plugin's, Arena's) hang under
autowrap, whose WORLD_SIZE counts processes: ``--nnodes=$WORLD_SIZE`` waits for nodes that never
come, and a multi-accelerator pod without a launcher for ranks nobody starts. Both are warned
about at the command; a refused plugin names what changes in the command."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.builders import pod, volcano_job
from tests.engine.helpers import outcome_of
from webhook.cli import main as cli
from webhook.model import names

C = "spec.tasks[{t}].template.spec.containers[0]"


def _job(*command: str, gpus: int | None = 8, field: str = "command", **annotations: str) -> Any:
    job = volcano_job("j").label(names.WRAP_LABEL, "true").queue("gpu-queue")
    for key, value in annotations.items():
        job = job.annotate(key, value)
    job = job.task("master", replicas=1, gpus=gpus).task("worker", replicas=3, gpus=gpus)
    for task in ("master", "worker"):
        job = job.container_field(task, field, list(command))
        if field == "args":
            job = job.container_field(task, "command", ["/bin/entrypoint"])
    return job


def _warnings(obj: Any) -> dict[str, str]:
    outcome = outcome_of(obj)
    assert outcome.errors == (), [v.render() for v in outcome.errors]
    return {str(v.path): v.detail for v in outcome.warnings}


@pytest.mark.parametrize(
    ("command", "field", "where"),
    [
        pytest.param(
            ("torchrun", "--nnodes=$WORLD_SIZE", "train.py"),
            "command",
            "command[1]",
            id="--nnodes=$WORLD_SIZE",
        ),  # fmt: skip
        pytest.param(
            ("--nnodes", "$(WORLD_SIZE)", "train.py"),
            "args",
            "args[1]",
            id="--nnodes $(WORLD_SIZE) in args, as kubelet expands it",
        ),  # fmt: skip
        pytest.param(
            ("bash", "-c", "torchrun --nnodes=${WORLD_SIZE} --node_rank=$RANK train.py"),
            "command",
            "command[2]",
            id="a shell line",
        ),  # fmt: skip
        pytest.param(
            ("deepspeed", "--num_nodes=$WORLD_SIZE", "train.py"),
            "command",
            "command[1]",
            id="DeepSpeed's --num_nodes",
        ),  # fmt: skip
    ],
)
def test_world_size_as_the_node_count_is_warned_about_at_the_command(command, field, where):
    found = _warnings(_job(*command, field=field))
    for t in (0, 1):
        detail = found[f"{C.format(t=t)}.{where}"]
        assert detail.startswith(
            "passes WORLD_SIZE as the number of nodes, but autowrap's WORLD_SIZE counts "
            "processes (32 here: 4 pods x their NPROC_PER_NODE), not pods"
        )
        assert "use $NNODES" in detail


@pytest.mark.parametrize(
    "command",
    [
        pytest.param(("torchrun", "--nnodes=$NNODES", "train.py"), id="--nnodes=$NNODES"),
        pytest.param(("torchrun", "train.py"), id="no flag: PET_NNODES"),
        pytest.param(("python", "-m", "torch.distributed.run", "train.py"), id="the module"),
        pytest.param(("bash", "-c", "echo $WORLD_SIZE; torchrun train.py"), id="only printed"),
    ],
)
def test_a_command_that_reads_the_node_count_right_is_left_alone(command):
    assert _warnings(_job(*command)) == {}


def test_a_multi_gpu_pod_without_a_launcher_is_warned_about():
    found = _warnings(_job("python", "train.py"))
    detail = found[f"{C.format(t=0)}.command"]
    assert detail == (
        "starts no launcher (torchrun, python -m torch.distributed.run, deepspeed, accelerate "
        "launch, mpirun), so one process runs in each pod, but WORLD_SIZE is 32: it counts "
        "NPROC_PER_NODE=8 processes per pod of 'master', and a script that reads it waits for "
        "ranks nobody starts. Start it with torchrun (it reads autowrap's PET_* and starts 8 "
        'processes), or set the annotation autowrap.io/nproc-per-node: "1" on the job so that '
        "WORLD_SIZE counts pods"
    )
    assert f"{C.format(t=1)}.command" in found


def test_a_bare_pod_without_a_launcher_is_warned_about_too():
    solo = pod("solo").label(names.WRAP_LABEL, "true").gpus(4)
    solo._obj["spec"]["containers"][0]["command"] = ["python", "train.py"]
    found = _warnings(solo)
    assert list(found) == ["spec.containers[0].command"]
    assert "WORLD_SIZE is 4" in found["spec.containers[0].command"]


@pytest.mark.parametrize(
    ("job", "why"),
    [
        (_job("python", "train.py", **{names.NPROC_ANNOTATION: "1"}), "one process per pod said"),
        (_job("python", "train.py", gpus=None), "CPU pods: one process each"),
        (_job("python", "train.py", gpus=1), "one GPU"),
        (_job("deepspeed", "train.py"), "a launcher"),
        (_job("accelerate", "launch", "train.py"), "accelerate launch"),
        (_job("bash", "-c", "cd /work && exec torchrun train.py"), "a launcher in a shell line"),
    ],
    ids=lambda x: x if isinstance(x, str) else "",
)
def test_no_launcher_warning_where_the_processes_are_right(job, why):
    assert _warnings(job) == {}, why


def test_an_image_entrypoint_is_not_judged():
    job = volcano_job("j").label(names.WRAP_LABEL, "true").task("w", replicas=2, gpus=8)
    obj = job.build()
    obj["spec"]["tasks"][0]["template"]["spec"]["containers"][0].pop("command")
    assert _warnings(obj) == {}


def test_a_helper_task_outside_the_world_is_not_judged():
    job = (
        volcano_job("j")
        .label(names.WRAP_LABEL, "true")
        .annotate(names.EXCLUDE_TASKS_ANNOTATION, "evaluator")
        .task("master", replicas=1, gpus=8)
        .task("evaluator", replicas=1, gpus=8)
        .container_field("evaluator", "command", ["python", "eval.py"])
    )
    assert _warnings(job) == {}


# --- the migration the refusal leads to ----------------------------------------------------


PLUGIN = {"pytorch": ["--master=master", "--worker=worker", "--port=23456"]}


def _check(tmp_path: Path, capsys: pytest.CaptureFixture[str], obj: Any) -> tuple[int, str]:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(obj.build() if hasattr(obj, "build") else obj))
    capsys.readouterr()
    code = cli.main(["check", str(path), "-n", "default", "--policy", str(_policies())])
    return code, capsys.readouterr().err


def _policies() -> Path:
    return Path(__file__).resolve().parents[2] / "deploy" / "base" / "policies"


def test_following_the_plugin_refusal_leads_to_a_job_that_runs(tmp_path, capsys):
    """The refusal names the plugin and what changes in the command; removing only the
    plugin leaves a warning at --nnodes=$WORLD_SIZE; the command the warning gives is clean."""
    before = _job("torchrun", "--nnodes=$WORLD_SIZE", "--node_rank=$RANK", "train.py")
    before._obj["spec"]["plugins"] = PLUGIN
    code, err = _check(tmp_path, capsys, before)
    assert code == 1
    (refusal,) = [line for line in err.splitlines() if line.startswith("error:")]
    assert "spec.plugins[pytorch]" in refusal
    assert "torchrun --nnodes=$WORLD_SIZE becomes --nnodes=$NNODES" in refusal
    assert 'the annotation autowrap.io/nproc-per-node: "1" on the job' in refusal

    plugin_removed = _job("torchrun", "--nnodes=$WORLD_SIZE", "--node_rank=$RANK", "train.py")
    code, err = _check(tmp_path, capsys, plugin_removed)
    assert code == 0
    assert f"{C.format(t=0)}.command[1]: passes WORLD_SIZE as the number of nodes" in err

    fixed = _job("torchrun", "--nnodes=$NNODES", "--node_rank=$NODE_RANK", "train.py")
    code, err = _check(tmp_path, capsys, fixed)
    assert code == 0 and "warning" not in err


def test_a_launcherless_script_migrated_without_the_annotation_is_warned_about(tmp_path, capsys):
    code, err = _check(tmp_path, capsys, _job("python", "train.py"))
    assert code == 0 and "starts no launcher" in err
    code, err = _check(tmp_path, capsys, _job("python", "train.py",
                                               **{names.NPROC_ANNOTATION: "1"}))  # fmt: skip
    assert code == 0 and "warning" not in err
