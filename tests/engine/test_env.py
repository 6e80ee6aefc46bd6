"""SPEC section 4, env table: every pod sees exact values, checked pod by pod.

The strongest claims simulate the pods Volcano creates from the rendered templates, apply
autowrap's pod mutation, resolve each env entry as kubelet would, and compare with values
written out by hand for each case.
"""

from __future__ import annotations

from collections import Counter

import pytest

from tests.builders import policy, volcano_job
from tests.engine.helpers import component, outcome_of, render
from tests.engine.simulate import pods_of

RANK_NAMES = ("RANK", "NODE_RANK", "PET_NODE_RANK")
INJECTED = (
    "MASTER_ADDR",
    "MASTER_PORT",
    "NNODES",
    "NPROC_PER_NODE",
    "WORLD_SIZE",
    "RANK",
    "NODE_RANK",
    "LOCAL_WORLD_SIZE",
    "PET_NNODES",
    "PET_NPROC_PER_NODE",
    "PET_NODE_RANK",
    "PET_MASTER_ADDR",
    "PET_MASTER_PORT",
)

CASES = [
    pytest.param(
        volcano_job("train").task("worker", replicas=4, gpus=8),
        "train-worker-0.train",
        {"train-worker-0": 0, "train-worker-1": 1, "train-worker-2": 2, "train-worker-3": 3},
        {"worker": 8},
        id="one task of four 8-GPU replicas ranks its pods by task index",
    ),
    pytest.param(
        volcano_job("solo").task("worker", replicas=1, gpus=2),
        "solo-worker-0.solo",
        {"solo-worker-0": 0},
        {"worker": 2},
        id="a single-replica job gets the complete env with rank 0",
    ),
    pytest.param(
        volcano_job("mw").task("master", replicas=1).task("worker", replicas=3, gpus=8),
        "mw-master-0.mw",
        {"mw-master-0": 0, "mw-worker-0": 1, "mw-worker-1": 2, "mw-worker-2": 3},
        {"master": 1, "worker": 8},
        id="master then three workers: workers follow the master",
    ),
    pytest.param(
        volcano_job("mw").task("worker", replicas=3, gpus=8).task("master", replicas=1),
        "mw-master-0.mw",
        {"mw-master-0": 0, "mw-worker-0": 1, "mw-worker-1": 2, "mw-worker-2": 3},
        {"master": 1, "worker": 8},
        id="a task named master that comes second in spec order still holds node 0",
    ),
    pytest.param(
        volcano_job("job")
        .task("worker", replicas=2)
        .task("launcher", replicas=1)
        .task("ps", replicas=2)
        .master("launcher"),
        "job-launcher-0.job",
        {"job-launcher-0": 0, "job-worker-0": 1, "job-worker-1": 2, "job-ps-0": 3, "job-ps-1": 4},
        {"worker": 1, "launcher": 1, "ps": 1},
        id="the annotated master task goes first and the others keep spec order",
    ),
    pytest.param(
        volcano_job("job").task("a", replicas=2).task("b", replicas=3).master("b"),
        "job-b-0.job",
        {"job-b-0": 0, "job-b-1": 1, "job-b-2": 2, "job-a-0": 3, "job-a-1": 4},
        {"a": 1, "b": 1},
        id="an annotated multi-replica master task takes ranks 0..2, the first task follows",
    ),
    pytest.param(
        volcano_job("j")
        .task("a", replicas=2, gpus=4)
        .task("b", replicas=3, gpus=2)
        .task("c", replicas=2, gpus=1),
        "j-a-0.j",
        {"j-a-0": 0, "j-a-1": 1, "j-b-0": 2, "j-b-1": 3, "j-b-2": 4, "j-c-0": 5, "j-c-1": 6},
        {"a": 4, "b": 2, "c": 1},
        id="three multi-replica tasks get consecutive offsets",
    ),
    pytest.param(
        volcano_job("j").task("a", replicas=2).task("idle", replicas=0).task("c", replicas=1),
        "j-a-0.j",
        {"j-a-0": 0, "j-a-1": 1, "j-c-0": 2},
        {"a": 1, "idle": 1, "c": 1},
        id="a task of zero replicas takes no ranks",
    ),
]


@pytest.mark.parametrize(("job", "master_addr", "ranks", "nproc"), CASES)
def test_every_pod_sees_its_exact_rank_and_the_shared_values(job, master_addr, ranks, nproc):
    appwrapper = render(job)
    pods = pods_of(appwrapper)
    assert sorted(p.name for p in pods) == sorted(ranks)
    tasks = {t["name"]: t["replicas"] for t in job.build()["spec"]["tasks"]}
    nnodes = sum(tasks.values())
    world = sum(r * nproc[name] for name, r in tasks.items())
    for p in pods:
        env = p.env()
        want_rank = str(ranks[p.name])
        assert {k: env[k] for k in RANK_NAMES} == dict.fromkeys(RANK_NAMES, want_rank), p.name
        assert env["MASTER_ADDR"] == env["PET_MASTER_ADDR"] == master_addr
        assert env["MASTER_PORT"] == env["PET_MASTER_PORT"] == "23456"
        assert env["NNODES"] == env["PET_NNODES"] == str(nnodes)
        assert env["WORLD_SIZE"] == str(world)
        want_nproc = str(nproc[p.task])
        assert env["NPROC_PER_NODE"] == env["LOCAL_WORLD_SIZE"] == env["PET_NPROC_PER_NODE"]
        assert env["NPROC_PER_NODE"] == want_nproc


@pytest.mark.parametrize(("job", "master_addr", "ranks", "nproc"), CASES)
def test_master_addr_names_the_pod_of_rank_zero(job, master_addr, ranks, nproc):
    pods = pods_of(render(job))
    rank_zero = [p for p in pods if p.env()["RANK"] == "0"]
    assert len(rank_zero) == 1
    assert rank_zero[0].fqdn == master_addr


def test_mixed_accelerators_give_world_size_as_the_sum_of_replicas_times_nproc():
    job = (
        volcano_job("mix")
        .task("master", replicas=1)
        .task("gpu", replicas=2, gpus=8)
        .task("npu", replicas=3, gpus=16, resource="huawei.com/Ascend910C")
    )
    pods = pods_of(render(job))
    by_task = {p.task: p.env() for p in pods}
    assert {t: e["NPROC_PER_NODE"] for t, e in by_task.items()} == {
        "master": "1",
        "gpu": "8",
        "npu": "16",
    }
    assert {e["WORLD_SIZE"] for e in by_task.values()} == {str(1 + 2 * 8 + 3 * 16)}


@pytest.mark.parametrize(
    ("resource", "count", "want"),
    [
        pytest.param("nvidia.com/gpu", 8, "8", id="nvidia GPUs count as processes"),
        pytest.param("amd.com/gpu", 4, "4", id="AMD GPUs count as processes"),
        pytest.param("huawei.com/Ascend910C", 16, "16", id="Ascend NPUs match the glob"),
        pytest.param("habana.ai/gaudi", 8, "8", id="Gaudi accelerators count as processes"),
        pytest.param("example.com/fpga", 2, "1", id="an unknown resource falls back to 1"),
    ],
)
def test_nproc_comes_from_the_accelerator_limits(resource, count, want):
    job = volcano_job("acc").task("worker", replicas=2, gpus=count, resource=resource)
    env = pods_of(render(job))[0].env()
    assert env["NPROC_PER_NODE"] == env["LOCAL_WORLD_SIZE"] == want
    assert env["WORLD_SIZE"] == str(2 * int(want))


def test_nproc_without_any_accelerator_is_one():
    env = pods_of(render(volcano_job("cpu").task("worker", replicas=3)))[0].env()
    assert (env["NPROC_PER_NODE"], env["WORLD_SIZE"]) == ("1", "3")


def test_nproc_annotation_overrides_the_accelerator_count_in_every_task():
    job = (
        volcano_job("ann").task("master", replicas=1).task("worker", replicas=3, gpus=8).nproc("4")
    )
    pods = pods_of(render(job))
    assert {p.env()["NPROC_PER_NODE"] for p in pods} == {"4"}
    assert {p.env()["WORLD_SIZE"] for p in pods} == {str(4 * 4)}


def test_policy_accelerator_list_decides_what_counts():
    only_fpga = policy().accelerators("example.com/fpga")
    job = volcano_job("fpga").task("worker", replicas=2, gpus=3, resource="example.com/fpga")
    gpu_job = volcano_job("gpu").task("worker", replicas=2, gpus=8)
    assert pods_of(render(job, only_fpga))[0].env()["NPROC_PER_NODE"] == "3"
    assert pods_of(render(gpu_job, only_fpga))[0].env()["NPROC_PER_NODE"] == "1"


def test_gpus_requested_without_a_limit_are_refused_not_counted():
    # Kubernetes refuses such a pod (an extended resource needs a limit equal to its request),
    # so no process count is derived from it.
    job = volcano_job("req").task("worker", replicas=2)
    obj = job.build()
    obj["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["resources"] = {
        "requests": {"nvidia.com/gpu": "2"}
    }
    outcome = outcome_of(obj)
    assert [str(v.path) for v in outcome.errors] == [
        "spec.tasks[0].template.spec.containers[0].resources.limits[nvidia.com/gpu]"
    ]


@pytest.mark.parametrize(
    ("job", "policies", "want"),
    [
        pytest.param(volcano_job("p"), (), "23456", id="the default port is 23456"),
        pytest.param(
            volcano_job("p"), (policy().master_port(29500),), "29500", id="the policy sets it"
        ),
        pytest.param(
            volcano_job("p").port("31000"),
            (policy().master_port(29500),),
            "31000",
            id="the annotation beats the policy",
        ),
    ],
)
def test_master_port(job, policies, want):
    env = pods_of(render(job, *policies))[0].env()
    assert env["MASTER_PORT"] == env["PET_MASTER_PORT"] == want


def test_env_goes_into_init_containers_and_every_container():
    job = volcano_job("init").task("worker", replicas=2, init_containers=2, containers=3)
    for p in pods_of(render(job)):
        spec = p.pod["spec"]
        envs = [p.env(i) for i in range(3)] + [p.env(i, init=True) for i in range(2)]
        assert len(spec["containers"]) == 3 and len(spec["initContainers"]) == 2
        for env in envs:
            assert set(INJECTED) <= set(env)
            assert env["RANK"] == str(p.index)


def test_a_user_value_equal_to_the_injected_one_is_no_conflict_and_not_duplicated():
    job = (
        volcano_job("same")
        .task("worker", replicas=2, gpus=8)
        .env("worker", "NNODES", "2")
        .env("worker", "MASTER_ADDR", "same-worker-0.same")
    )
    outcome = outcome_of(job)
    assert outcome.findings == ()
    container = component(outcome.result)["spec"]["tasks"][0]["template"]["spec"]["containers"][0]
    counts = Counter(e["name"] for e in container["env"])
    assert counts["NNODES"] == 1 and counts["MASTER_ADDR"] == 1
    assert [e["name"] for e in container["env"][:2]] == ["NNODES", "MASTER_ADDR"]


def test_a_user_rank_field_ref_equal_to_the_injected_one_is_no_conflict():
    ref = {"fieldRef": {"fieldPath": 'metadata.annotations["volcano.sh/task-index"]'}}
    job = volcano_job("ref").task("worker", replicas=3, env=[{"name": "RANK", "valueFrom": ref}])
    outcome = outcome_of(job)
    assert outcome.errors == ()
    assert [p.env()["RANK"] for p in pods_of(outcome.result)] == ["0", "1", "2"]


def test_user_env_is_kept_in_place_before_the_injected_entries():
    job = volcano_job("keep").task("worker", replicas=2, env={"HF_HOME": "/data/hf", "A": "1"})
    container = component(render(job))["spec"]["tasks"][0]["template"]["spec"]["containers"][0]
    assert container["env"][:2] == [
        {"name": "HF_HOME", "value": "/data/hf"},
        {"name": "A", "value": "1"},
    ]
    assert [e["name"] for e in container["env"][2:]] == list(INJECTED)


def test_injected_values_are_strings():
    env_lists = [
        c["env"]
        for t in component(render(volcano_job("s").task("w", replicas=3, gpus=8)))["spec"]["tasks"]
        for c in t["template"]["spec"]["containers"]
    ]
    for env in env_lists:
        for entry in env:
            assert "valueFrom" in entry or isinstance(entry["value"], str), entry


def test_only_later_multi_pod_groups_need_the_pod_mutation():
    job = volcano_job("m").task("master", replicas=1).task("w", replicas=2).task("x", replicas=1)
    tasks = component(render(job))["spec"]["tasks"]
    labels = [(t["template"].get("metadata") or {}).get("labels", {}) for t in tasks]
    assert labels == [{}, {"autowrap.io/node-rank-offset": "1"}, {}]
    annotations = [(t["template"].get("metadata") or {}).get("annotations", {}) for t in tasks]
    assert annotations == [{}, {"autowrap.io/pod-index-key": "volcano.sh/task-index"}, {}]
    literal_ranks = [
        next(e for e in t["template"]["spec"]["containers"][0]["env"] if e["name"] == "RANK")
        for t in (tasks[0], tasks[2])
    ]
    assert literal_ranks == [{"name": "RANK", "value": "0"}, {"name": "RANK", "value": "3"}]


@pytest.mark.parametrize(
    ("job", "path"),
    [
        pytest.param(
            volcano_job("j").task("master", replicas=0).task("worker", replicas=3),
            "spec.tasks[0].replicas",
            id="a task named master with zero replicas",
        ),
        pytest.param(
            volcano_job("j").task("a", replicas=2).task("b", replicas=0).master("b"),
            "spec.tasks[1].replicas",
            id="an annotated master task with zero replicas",
        ),
    ],
)
def test_a_master_task_without_replicas_is_rejected_at_its_replicas(job, path):
    outcome = outcome_of(job)
    assert [(str(v.path), v.severity.value) for v in outcome.findings] == [(path, "error")]


def test_a_job_without_any_pods_needs_no_master():
    job = volcano_job("j").task("master", replicas=0).task("worker", replicas=0)
    assert outcome_of(job).errors == ()


# --- references to injected variables (kubelet's $(VAR) expansion) -----------------------------


def test_a_user_entry_that_refers_to_injected_variables_expands_in_every_pod():
    job = (
        volcano_job("ref")
        .task("master", replicas=1)
        .task("worker", replicas=2)
        .env("master", "DIST_URL", "tcp://$(MASTER_ADDR):$(MASTER_PORT)")
        .env("worker", "DIST_URL", "tcp://$(MASTER_ADDR):$(MASTER_PORT)")
        .env("worker", "WHO", "$(RANK)/$(WORLD_SIZE)")
    )
    pods = pods_of(render(job))
    assert {p.name: p.env()["DIST_URL"] for p in pods} == {
        "ref-master-0": "tcp://ref-master-0.ref:23456",
        "ref-worker-0": "tcp://ref-master-0.ref:23456",
        "ref-worker-1": "tcp://ref-master-0.ref:23456",
    }
    assert {p.name: p.env()["WHO"] for p in pods if p.task == "worker"} == {
        "ref-worker-0": "1/3",
        "ref-worker-1": "2/3",
    }


def test_kubelet_s_rules_still_hold_around_the_injected_entries():
    job = (
        volcano_job("esc")
        .task("worker", replicas=1)
        .env("worker", "FIRST", "plain")
        .env("worker", "ESCAPED", "$$(MASTER_ADDR)")
        .env("worker", "UNKNOWN", "$(NOT_DEFINED)-$(MASTER_PORT)")
        .env("worker", "LATER", "$(AFTER)")
        .env("worker", "AFTER", "x")
    )
    rendered = render(job)
    container = component(rendered)["spec"]["tasks"][0]["template"]["spec"]["containers"][0]
    names = [e["name"] for e in container["env"]]
    # Entries that refer to nothing injected keep their place; autowrap's come before the first
    # entry that refers to one of them.
    assert names[:2] == ["FIRST", "ESCAPED"]
    assert names.index("MASTER_PORT") < names.index("UNKNOWN")
    (only,) = pods_of(rendered)
    env = only.env()
    assert env["ESCAPED"] == "$(MASTER_ADDR)"
    assert env["UNKNOWN"] == "$(NOT_DEFINED)-23456"
    assert env["LATER"] == "$(AFTER)"


def test_without_references_the_injected_entries_follow_the_user_s():
    job = volcano_job("plain").task("worker", replicas=1).env("worker", "A", "1")
    env = component(render(job))["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["env"]
    assert env[0] == {"name": "A", "value": "1"}
    assert [e["name"] for e in env[1:]] == list(INJECTED)


def test_placing_the_entries_before_a_reference_is_stable_when_applied_again():
    job = volcano_job("twice").task("worker", replicas=2).env("worker", "U", "$(NNODES)")
    once = render(job)
    again = render(component(once))
    assert component(again) == component(once)
