"""Volcano's job admission webhook and CRD schema, case by case.

The cases follow volcano-sh/volcano ed72c7c ``pkg/webhooks/admission/jobs/validate/
admit_job_test.go`` (``TestValidateJobCreate``, ``TestValidateTaskTopoPolicy``) and the rules in
``validate/util.go``; each names the upstream case it mirrors. Volcano answers with one
message for the whole job; autowrap names the field.
"""

from __future__ import annotations

import pytest

from tests.builders import volcano_job
from tests.engine.helpers import outcome_of, render, rendered_paths


def job():
    return volcano_job("j").task("task-1", replicas=1)


def errors(builder):
    return [(str(v.path), v.detail) for v in outcome_of(builder).errors]


def error_paths(builder):
    return [p for p, _ in errors(builder)]


# --- lifecycle policies (util.go validatePolicies) ---------------------------------------------


@pytest.mark.parametrize(
    ("policies", "want"),
    [
        pytest.param(
            [{"event": "PodEvicted", "action": "RestartJob"}], [], id="simple-valid-job-with-policy"
        ),
        pytest.param(
            [
                {"event": "PodFailed", "action": "AbortJob"},
                {"event": "PodFailed", "action": "RestartJob"},
            ],
            ["spec.policies[1].event"],
            id="job-policy-duplicated",
        ),
        pytest.param(
            [{"event": "PodFailed", "exitCode": -1, "action": "AbortJob"}],
            ["spec.policies[0]"],
            id="job-policy-withExitCode (event and exitCode)",
        ),
        pytest.param([{"action": "AbortJob"}], ["spec.policies[0]"], id="policy-noEvent-noExCode"),
        pytest.param(
            [{"event": "fakeEvent", "action": "AbortJob"}],
            ["spec.policies[0].event"],
            id="invalid-policy-event",
        ),
        pytest.param(
            [{"event": "PodRunning", "action": "AbortJob"}],
            ["spec.policies[0].event"],
            id="an internal event (PodRunning) is refused",
        ),
        pytest.param(
            [{"event": "PodEvicted", "action": "fakeAction"}],
            ["spec.policies[0].action"],
            id="invalid-policy-action",
        ),
        pytest.param(
            [{"event": "PodEvicted", "action": "SyncJob"}],
            ["spec.policies[0].action"],
            id="an internal action (SyncJob) is refused",
        ),
        pytest.param(
            [{"exitCode": 0, "action": "AbortJob"}],
            ["spec.policies[0].exitCode"],
            id="policy-extcode-zero",
        ),
        pytest.param(
            [{"exitCode": 1, "action": "AbortJob"}, {"exitCode": 1, "action": "RestartJob"}],
            ["spec.policies[1].exitCode"],
            id="duplicate-exitcode",
        ),
        pytest.param(
            [{"event": "*", "action": "AbortJob"}, {"event": "PodFailed", "action": "RestartJob"}],
            ["spec.policies[0].event"],
            id="job-policy with * and another event",
        ),
        pytest.param(
            [{"events": ["PodFailed", "PodEvicted"], "event": "PodFailed", "action": "AbortJob"}],
            [],
            id="event repeated in events of one policy is one event",
        ),
        pytest.param(
            [{"events": ["*", "PodEvicted"], "action": "AbortJob"}],
            ["spec.policies[0].events[0]"],
            id="* with another event in one policy",
        ),
    ],
)
def test_job_level_policies(policies, want):
    assert error_paths(job().spec(policies=policies)) == want


def test_task_level_policies_follow_the_same_rules():
    """taskpolicy-withAnyandOthrEvent"""
    builder = volcano_job("j").task(
        "task-1",
        replicas=1,
        policies=[
            {"event": "*", "action": "AbortJob"},
            {"event": "PodFailed", "action": "RestartJob"},
        ],
    )
    ((path, detail),) = errors(builder)
    assert path == "spec.tasks[0].policies[0].event"
    assert "'*' covers every event" in detail and "'PodFailed'" in detail


def test_a_policy_message_lists_what_is_allowed():
    ((_, detail),) = errors(job().spec(policies=[{"event": "PodRunning", "action": "AbortJob"}]))
    assert "'PodRunning' is not an event" in detail and "TaskCompleted" in detail


# --- volumes (util.go validateIO) --------------------------------------------------------------


@pytest.mark.parametrize(
    ("volumes", "want"),
    [
        pytest.param(
            [{"mountPath": "/var", "volumeClaimName": "pvc1"}], [], id="a volume with a PVC name"
        ),
        pytest.param(
            [{"mountPath": "", "volumeClaimName": "pvc1"}],
            ["spec.volumes[0].mountPath"],
            id="invalid-mount-volume",
        ),
        pytest.param(
            [
                {"mountPath": "/var", "volumeClaimName": "pvc1"},
                {"mountPath": "/var", "volumeClaimName": "pvc2"},
            ],
            ["spec.volumes[1].mountPath"],
            id="duplicate-mount-volume",
        ),
        pytest.param(
            [{"mountPath": "/var"}],
            ["spec.volumes[0]"],
            id="volume without VolumeClaimName and VolumeClaim",
        ),
        pytest.param(
            [
                {
                    "mountPath": "/var",
                    "volumeClaimName": "pvc1",
                    "volumeClaim": {"accessModes": ["ReadWriteOnce"]},
                }
            ],
            ["spec.volumes[0].volumeClaimName"],
            id="both volumeClaim and volumeClaimName",
        ),
        pytest.param(
            [{"mountPath": "/var", "volumeClaimName": "PVC_1"}],
            ["spec.volumes[0].volumeClaimName"],
            id="a claim name that is no PVC name",
        ),
        pytest.param(
            [{"mountPath": "/a:b", "volumeClaimName": "pvc1"}],
            ["spec.volumes[0].mountPath"],
            id="the CRD's mountPath pattern (no ':')",
        ),
    ],
)
def test_volumes(volumes, want):
    assert error_paths(job().spec(volumes=volumes)) == want


# --- plugins -----------------------------------------------------------------------------------


def test_an_unknown_plugin_is_named():
    """Job Plugin illegal"""
    ((path, detail),) = errors(job().spec(plugins={"big_plugin": []}))
    assert path == "spec.plugins[big_plugin]"
    assert "no job plugin 'big_plugin'" in detail and "svc" in detail


@pytest.mark.parametrize(
    ("tasks", "args", "want"),
    [
        pytest.param(["launcher", "worker"], ["--master=launcher"], [], id="valid master"),
        pytest.param(["launcher"], ["--master=launcher"], [], id="valid master without worker"),
        pytest.param(["launcher"], ["--master", "launcher"], [], id="flag value as next item"),
        pytest.param(["master", "worker"], [], [], id="the default master task"),
        pytest.param(["worker"], ["--master=launcher"], ["spec.plugins[mpi]"], id="invalid master"),
        pytest.param(["worker"], [], ["spec.plugins[mpi]"], id="no task named master"),
    ],
)
def test_the_mpi_plugins_master_task_must_exist(tasks, args, want):
    builder = volcano_job("j")
    for name in tasks:
        builder = builder.task(name, replicas=1)
    builder = builder.spec(plugins={"mpi": args})
    assert error_paths(builder) == want


# --- task dependencies -------------------------------------------------------------------------


def test_a_valid_dependency():
    """job with valid task depends on"""
    builder = (
        volcano_job("j").task("t1", replicas=1, dependsOn={"name": ["t2"]}).task("t2", replicas=1)
    )
    assert errors(builder) == []


def test_a_dependency_on_a_task_that_does_not_exist():
    """job with invalid task depends on"""
    builder = (
        volcano_job("j").task("t1", replicas=1, dependsOn={"name": ["t3"]}).task("t2", replicas=1)
    )
    ((path, detail),) = errors(builder)
    assert path == "spec.tasks[0].dependsOn.name[0]"
    assert "no task is named 't3'" in detail


def test_tasks_that_wait_for_each_other():
    builder = (
        volcano_job("j")
        .task("t1", replicas=1, dependsOn={"name": ["t2"]})
        .task("t2", replicas=1, dependsOn={"name": ["t3"]})
        .task("t3", replicas=1, dependsOn={"name": ["t1"]})
    )
    ((path, detail),) = errors(builder)
    assert path == "spec.tasks[0].dependsOn"
    assert "t1 → t2 → t3 → t1" in detail


def test_a_task_that_waits_for_itself():
    builder = volcano_job("j").task("t1", replicas=1, dependsOn={"name": ["t1"]})
    assert error_paths(builder) == ["spec.tasks[0].dependsOn"]


# --- pod templates (ValidatePodTemplate) -------------------------------------------------------


def _with_resources(builder, task, *, pod=None, containers=(), init=()):
    spec = builder._task(task)["template"]["spec"]
    if pod is not None:
        spec["resources"] = pod
    spec["containers"] = [
        {"name": f"c{i}", "image": "busybox", "resources": r} for i, r in enumerate(containers)
    ]
    if init:
        spec["initContainers"] = [
            {"name": f"i{i}", "image": "busybox", "resources": r} for i, r in enumerate(init)
        ]
    return builder


def test_pod_level_requests_below_the_containers_sum():
    """validate invalid-job with pod level resources less than aggregate container resources"""
    builder = _with_resources(
        job(),
        "task-1",
        pod={
            "requests": {"cpu": "2", "hugepages-1Mi": "2Gi"},
            "limits": {"cpu": "2", "hugepages-1Mi": "2Gi"},
        },
        containers=[{"requests": {"cpu": "2"}}, {"requests": {"cpu": "2"}}],
        init=[{"requests": {"cpu": "2"}}],
    )
    ((path, detail),) = errors(builder)
    assert path == "spec.tasks[0].template.spec.resources.requests[cpu]"
    assert "pod-level 2 is less than the 4 its containers request together" in detail


def test_pod_level_requests_above_limits():
    """validate invalid-job with pod level resource requests greater than limits"""
    builder = _with_resources(
        job(),
        "task-1",
        pod={"requests": {"cpu": "6"}, "limits": {"cpu": "4"}},
        containers=[
            {"requests": {"cpu": "2"}, "limits": {"cpu": "2"}},
            {"requests": {"cpu": "2"}, "limits": {"cpu": "2"}},
        ],
    )
    ((path, detail),) = errors(builder)
    assert path == "spec.tasks[0].template.spec.resources.requests[cpu]"
    assert "request 6 is more than the limit 4" in detail


def test_pod_level_resources_that_cover_the_containers():
    """validate valid-job with pod level resources"""
    builder = _with_resources(
        job(),
        "task-1",
        pod={"requests": {"cpu": "4", "memory": "2Gi"}, "limits": {"cpu": "4"}},
        containers=[{"requests": {"cpu": "2"}}, {"requests": {"cpu": "2000m", "memory": "1Gi"}}],
        init=[{"requests": {"cpu": "3"}}],
    )
    assert errors(builder) == []


def test_negative_quantities_and_requests_above_limits_in_a_container():
    builder = _with_resources(
        job(),
        "task-1",
        containers=[{"requests": {"memory": "-1Gi", "cpu": "3"}, "limits": {"cpu": "2"}}],
    )
    assert errors(builder) == [
        (
            "spec.tasks[0].template.spec.containers[0].resources.requests[memory]",
            "-1Gi is negative; a resource quantity must be ≥ 0",
        ),
        (
            "spec.tasks[0].template.spec.containers[0].resources.requests[cpu]",
            "the request 3 is more than the limit 2; lower the request or raise the limit",
        ),
    ]


@pytest.mark.parametrize(
    ("policy", "limits", "want"),
    [
        pytest.param("restricted", {"cpu": 1, "memory": 2000}, [], id="test-1 (1 CPU)"),
        pytest.param(
            "restricted",
            {"cpu": "500m", "memory": 2000},
            ["spec.tasks[0].template.spec.containers[0].resources"],
            id="test-2 (500m)",
        ),
        pytest.param(
            "single-numa-node",
            {"memory": "1Gi"},
            ["spec.tasks[0].template.spec.containers[0].resources"],
            id="no CPU at all is not a whole CPU",
        ),
        pytest.param("none", {"cpu": "500m"}, [], id="none asks for nothing"),
        pytest.param(
            "numa-please",
            {"cpu": 1},
            ["spec.tasks[0].topologyPolicy"],
            id="a value outside the CRD's enum",
        ),
    ],
)
def test_topology_policy_asks_for_whole_cpus(policy, limits, want):
    builder = volcano_job("j").task("task-1", replicas=5, topologyPolicy=policy)
    builder = _with_resources(builder, "task-1", containers=[{"limits": limits}])
    assert error_paths(builder) == want


def test_the_whole_cpu_message_says_what_to_request():
    builder = volcano_job("j").task("task-1", replicas=1, topologyPolicy="restricted")
    builder = _with_resources(builder, "task-1", containers=[{"requests": {"cpu": "1500m"}}])
    ((_, detail),) = errors(builder)
    assert "asks for 1.5 CPUs" in detail and "cpu: 2" in detail


# --- the CRD's bounds --------------------------------------------------------------------------


def test_a_negative_replica_count_is_named_as_such():
    """replica-lessThanZero: Volcano blames the job's minAvailable; autowrap names replicas."""
    builder = volcano_job("j").task("task-1", replicas=-1).spec(minAvailable=1)
    ((path, detail),) = errors(builder)
    assert path == "spec.tasks[0].replicas"
    assert detail.startswith("-1 is negative")


def test_a_negative_replica_count_with_a_task_min_available():
    builder = volcano_job("j").task("task-1", replicas=-2, min_available=1)
    assert error_paths(builder) == ["spec.tasks[0].replicas"]


@pytest.mark.parametrize(
    ("fields", "path"),
    [
        pytest.param({"minAvailable": -1}, "spec.minAvailable", id="job minAvailable"),
        pytest.param({"maxRetry": -1}, "spec.maxRetry", id="maxRetry"),
        pytest.param({"ttlSecondsAfterFinished": -1}, "spec.ttlSecondsAfterFinished", id="ttl"),
        pytest.param({"minSuccess": 0}, "spec.minSuccess", id="minSuccess below 1"),
        pytest.param({"maxRetry": "3"}, "spec.maxRetry", id="a quoted number"),
    ],
)
def test_job_bounds(fields, path):
    assert path in error_paths(job().spec(**fields))


def test_task_bounds():
    builder = volcano_job("j").task("task-1", replicas=2, min_available=-1, maxRetry=-3)
    assert error_paths(builder) == ["spec.tasks[0].minAvailable", "spec.tasks[0].maxRetry"]


@pytest.mark.parametrize(
    ("queue", "want"),
    [
        pytest.param("default", [], id="default"),
        pytest.param("team-a.gpu", [], id="a subdomain"),
        pytest.param("root", ["spec.queue"], id="job-with-rootQueue"),
        pytest.param("Team_A", ["spec.queue"], id="not the CRD's pattern"),
        pytest.param("q" * 254, ["spec.queue"], id="longer than 253"),
    ],
)
def test_the_volcano_queue(queue, want):
    assert error_paths(job().spec(queue=queue)) == want


# --- replicas left out (Volcano's default is 0) ------------------------------------------------


def test_a_task_without_replicas_creates_no_pods_and_says_so():
    builder = volcano_job("j").task("master", replicas=1).task("worker", replicas=None)
    outcome = outcome_of(builder)
    assert outcome.errors == ()
    assert [(str(v.path), v.severity.value) for v in outcome.warnings] == [
        ("spec.tasks[1].replicas", "warning")
    ]
    env = {
        e["name"]: e.get("value")
        for e in render(builder)["spec"]["components"][0]["template"]["spec"]["tasks"][0][
            "template"
        ]["spec"]["containers"][0]["env"]
    }
    assert env["NNODES"] == "1"


def test_no_replicas_anywhere_is_never_silent():
    builder = volcano_job("j").task("worker", replicas=None)
    outcome = outcome_of(builder)
    assert ("spec.tasks", "warning") in rendered_paths(outcome)
    assert any("NNODES is 0" in v.detail for v in outcome.warnings)


def test_every_problem_of_a_job_at_once():
    builder = (
        volcano_job("j")
        .task("t1", replicas=1, dependsOn={"name": ["nope"]})
        .spec(
            queue="root",
            maxRetry=-1,
            plugins={"big_plugin": []},
            volumes=[{"mountPath": "/data"}],
            policies=[{"exitCode": 0, "action": "AbortJob"}],
        )
    )
    assert sorted(error_paths(builder)) == sorted(
        [
            "spec.maxRetry",
            "spec.queue",
            "spec.policies[0].exitCode",
            "spec.volumes[0]",
            "spec.plugins[big_plugin]",
            "spec.tasks[0].dependsOn.name[0]",
        ]
    )
