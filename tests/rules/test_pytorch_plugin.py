"""A Job that keeps Volcano's pytorch plugin: what the plugin appends, and what autowrap says.

The plugin's env comes after autowrap's in every container and kubelet keeps the last entry of
a name, so where the two differ the pod runs with the plugin's. Expected values are written out
from pytorch.go (volcano ed72c7c :91-146), not computed with the code under test.
"""

from __future__ import annotations

import pytest

from tests.builders import policy, volcano_job
from tests.engine.helpers import outcome_of, rendered_paths
from webhook.cli import podview
from webhook.core import kinds, workload
from webhook.core.kinds import volcano_pytorch
from webhook.core.plumbing import env as env_plumbing
from webhook.core.rules import env as env_rules
from webhook.model.fields import SPEC

PLUGIN = "spec.plugins[pytorch]"


def _gpu_job(*args: str, master_replicas: int = 1):
    return (
        volcano_job("j")
        .task("master", replicas=master_replicas, gpus=8)
        .task("worker", replicas=3, gpus=8)
        .spec(plugins={"pytorch": list(args)})
    )


def _cpu_job(*args: str):
    return (
        volcano_job("j")
        .task("master", replicas=1)
        .task("worker", replicas=2)
        .spec(plugins={"pytorch": list(args)})
    )


@pytest.mark.parametrize(
    ("args", "want"),
    [
        pytest.param([], volcano_pytorch.Flags(), id="defaults"),
        pytest.param(["--port=5000"], volcano_pytorch.Flags(port=5000), id="--port=v"),
        pytest.param(["-port", "5000"], volcano_pytorch.Flags(port=5000), id="-port v"),
        pytest.param(["--port=0x10"], volcano_pytorch.Flags(port=16), id="Go base prefix"),
        pytest.param(["--port=010"], volcano_pytorch.Flags(port=8), id="Go octal"),
        pytest.param(["--port= 5"], volcano_pytorch.Flags(port=0), id="no spaces in Go"),
        pytest.param(
            ["--master=chief", "--nope", "--port=5000"],
            volcano_pytorch.Flags(master="chief"),
            id="an unknown flag stops the parse",
        ),
        pytest.param(
            ["--port=abc", "--master=chief"],
            volcano_pytorch.Flags(port=0),
            id="a bad number is stored as 0 and stops the parse",
        ),
        pytest.param(
            ["--wait-master-enabled", "--port=7"],
            volcano_pytorch.Flags(wait_master=True, port=7),
            id="a bool flag alone is true",
        ),
        pytest.param(
            ["--wait-master-enabled", "false", "--port=7"],
            volcano_pytorch.Flags(wait_master=True),
            id="a bool flag takes no separate value: the parse stops at it",
        ),
        pytest.param(["train", "--port=7"], volcano_pytorch.Flags(), id="stops at a non-flag"),
    ],
)
def test_flags_are_parsed_as_go_s_flag_package_does(args, want):
    assert volcano_pytorch.flags(args) == want


def test_a_different_port_and_a_pod_count_world_size_are_refused_with_the_fix():
    outcome = outcome_of(_gpu_job("--port=5000"))
    assert rendered_paths(outcome) == [(PLUGIN, "error")]
    detail = outcome.errors[0].detail
    assert "MASTER_PORT=5000 in every pod (autowrap's: 23456)" in detail
    assert "WORLD_SIZE=4 in every pod (autowrap's: 32)" in detail
    assert "RANK" not in detail.split("so the pods would run with")[1].split(";")[0]
    assert 'autowrap.io/master-port: "5000"' in detail
    assert "remove spec.plugins[pytorch]" in detail


def test_under_audit_the_job_is_wrapped_with_the_finding_as_a_warning():
    verdict = outcome_of(_gpu_job("--port=5000"), policy("p").audit()).verdict()
    assert not verdict.denied
    assert any(w.startswith(f"(audit) {PLUGIN}: ") for w in verdict.warnings)


def test_values_equal_to_autowrap_s_are_only_a_warning():
    outcome = outcome_of(_cpu_job("--master=master", "--worker=worker"))
    assert rendered_paths(outcome) == [(PLUGIN, "warning")]
    assert "equal autowrap's in every pod" in outcome.warnings[0].detail


def test_every_master_pod_gets_rank_0_from_the_plugin():
    outcome = outcome_of(_gpu_job(master_replicas=2))
    detail = outcome.errors[0].detail
    # The second master pod, and each worker (i+1 from the plugin, i+2 from autowrap).
    assert "RANK=0 in j-master-1 (autowrap's: 1), and 3 more pod(s)" in detail


@pytest.mark.parametrize(
    ("workers", "want"),
    [
        pytest.param(0, "RANK=0 in j-master-1 (autowrap's: 1), while", id="one pod differs"),
        pytest.param(
            1, "RANK=0 in j-master-1 (autowrap's: 1), and 1 more pod(s), while", id="two differ"
        ),
    ],
)
def test_pods_that_differ_beside_one_that_agrees_are_named_not_every_pod(workers, want):
    """Master pod 0 gets RANK 0 from both; master pod 1 differs (the plugin gives every master
    pod 0), and so does a worker (i+1 from the plugin, i+2 from autowrap): the message names the
    first and counts the rest, and must not say every pod runs with RANK=0."""
    job = volcano_job("j").task("master", replicas=2, gpus=8).spec(plugins={"pytorch": []})
    if workers:
        job = job.task("worker", replicas=workers, gpus=8)
    detail = outcome_of(job).errors[0].detail
    assert want in detail
    assert "RANK=0 in every pod" not in detail


def test_each_feature_that_appends_env_is_judged_on_its_own_and_every_name_it_appends():
    """The rule serves any kind's controller: each feature is reported at its own field, and a
    name autowrap does not set (NCCL_DEBUG) does not hide the ones after it."""
    job = volcano_job("j").task("master", replicas=1).task("worker", replicas=2).build()
    adapter = kinds.find(job["apiVersion"], job["kind"])
    groups = adapter.pod_groups(job)
    plan = env_plumbing.plan(
        groups, groups[0], master_addr="j-master-0.j", port=23456, nproc_override=None,
        accelerators=(),
    )  # fmt: skip
    first_path, second_path = SPEC.child("first"), SPEC.child("second")
    first = workload.PodAdditions(
        "the first feature", first_path, (("NCCL_DEBUG", "INFO"), ("MASTER_PORT", "5000"))
    )
    second = workload.PodAdditions("the second feature", second_path, (("MASTER_PORT", "23456"),))
    found = env_rules.check_appended(
        plan, lambda group, index: (first, second), lambda group, index: f"j-{group.name}-{index}"
    )
    assert [(str(v.path), v.severity.value) for v in found] == [
        ("spec.first", "error"), ("spec.second", "warning")
    ]  # fmt: skip
    assert found[0].detail.startswith(
        "the first feature appends its own MASTER_PORT after autowrap's entries"
    )
    assert "MASTER_PORT=5000 in every pod (autowrap's: 23456)" in found[0].detail
    assert found[1].detail.startswith("the second feature appends MASTER_PORT after")


def test_a_task_other_than_master_and_worker_gets_the_plugin_s_world_size():
    job = _cpu_job().task("evaluator", replicas=1)
    detail = outcome_of(job).errors[0].detail
    # The plugin counts master and worker pods (3); autowrap's world holds the evaluator too.
    assert "WORLD_SIZE=3 in every pod (autowrap's: 4)" in detail


def test_a_helper_task_left_out_of_the_world_is_no_conflict():
    job = (
        _cpu_job().task("evaluator", replicas=1).annotate("autowrap.io/exclude-tasks", "evaluator")
    )
    outcome = outcome_of(job)
    assert rendered_paths(outcome) == [(PLUGIN, "warning")]


def test_without_its_master_task_the_plugin_adds_nothing_and_says_so():
    job = volcano_job("j").task("w", replicas=2).spec(plugins={"pytorch": []})
    outcome = outcome_of(job)
    assert rendered_paths(outcome) == [(PLUGIN, "warning")]
    assert "looks for a task named 'master'" in outcome.warnings[0].detail


def test_the_adapter_adds_the_port_and_with_wait_master_the_init_container():
    job = _gpu_job("--port=5000", "--wait-master-enabled=true").build()
    adapter = kinds.find(job["apiVersion"], job["kind"])
    groups = adapter.pod_groups(job)
    master, worker = groups
    added = adapter.pod_additions(job, groups)
    on_master, on_worker = added(master, 0), added(worker, 2)
    assert on_master[0].env == (
        ("MASTER_ADDR", "j-master-0.j"),
        ("MASTER_PORT", "5000"),
        ("WORLD_SIZE", "4"),
        ("RANK", "0"),
    )
    assert on_worker[0].env[-1] == ("RANK", "3")
    assert on_master[0].ports == ({"name": "pytorchjob-port", "containerPort": 5000},)
    assert on_master[0].init_containers == ()
    assert [c["name"] for c in on_worker[0].init_containers] == ["wait-for-master"]


def test_render_pods_shows_the_values_the_pod_runs_with():
    wrapped = outcome_of(_gpu_job("--port=5000"), policy("p").audit()).result
    assert wrapped is not None
    rows = {r.pod: r for r in podview.pods(wrapped)}
    worker = rows["j-worker-1"]
    assert (worker.master_port, worker.world_size, worker.nnodes) == ("5000", "4", "4")
    (note,) = worker.notes
    assert "MASTER_PORT=5000 (autowrap's: 23456), WORLD_SIZE=4 (autowrap's: 32)" in note
    assert "torchrun still reads PET_MASTER_PORT=23456" in note


def test_an_entry_that_refers_to_the_port_sees_autowrap_s_value():
    """Kubelet expands $(MASTER_PORT) from the entries above it: autowrap's come before the
    user's entry, the plugin's after it."""
    job = _gpu_job("--port=5000").env("worker", "DIST_URL", "tcp://$(MASTER_ADDR):$(MASTER_PORT)")
    wrapped = outcome_of(job, policy("p").audit()).result
    assert wrapped is not None
    rows = {r.pod: r for r in podview.pods(wrapped)}
    assert dict(rows["j-worker-0"].expanded) == {"DIST_URL": "tcp://j-master-0.j:23456"}
    assert rows["j-worker-0"].master_port == "5000"


def test_a_port_or_init_container_already_there_is_not_added_again():
    """openContainerPort (:189-206) skips a container that has the port number; the init
    container is added once (:213-217). The env is appended whatever is there."""
    job = _gpu_job("--port=5000", "--wait-master-enabled").build()
    adapter = kinds.find(job["apiVersion"], job["kind"])
    groups = adapter.pod_groups(job)
    added = adapter.pod_additions(job, groups)(groups[1], 0)
    pod = {
        "spec": {
            "initContainers": [{"name": "wait-for-master", "image": "mine"}],
            "containers": [
                {"name": "a", "ports": [{"name": "mine", "containerPort": 5000}]},
                {"name": "b", "env": [{"name": "MASTER_PORT", "value": "23456"}]},
            ],
        }
    }
    created = workload.with_additions(pod, added)
    a, b = created["spec"]["containers"]
    assert a["ports"] == [{"name": "mine", "containerPort": 5000}]
    assert b["ports"] == [{"name": "pytorchjob-port", "containerPort": 5000}]
    assert [e["name"] for e in b["env"]] == [
        "MASTER_PORT", "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK"
    ]  # fmt: skip
    assert created["spec"]["initContainers"] == [{"name": "wait-for-master", "image": "mine"}]
    assert "ports" not in pod["spec"]["containers"][1]  # the input is left as it was


def test_a_kind_whose_controller_adds_nothing_gives_none():
    obj = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {}}
    adapter = kinds.find("v1", "Pod")
    assert workload.pod_additions(adapter, obj, adapter.pod_groups(obj)) is None
    job = _cpu_job().build()
    del job["spec"]["plugins"]
    volcano = kinds.find(job["apiVersion"], job["kind"])
    assert volcano.pod_additions(job, volcano.pod_groups(job)) is None
