"""Extended resources and hugepages as Kubernetes' pod validation reads them.

kubernetes/kubernetes pkg/apis/core/validation/validation.go ``ValidateResourceRequirements``:
a resource that ``helper.IsOvercommitAllowed`` refuses (an extended resource such as
``nvidia.com/gpu``, or hugepages) needs a limit when it is requested, and the request must equal
it; ``ValidateResourceQuantityValue`` takes extended resources in whole numbers only. Volcano
runs that validation on every task template and the apiserver on every Pod, so autowrap refuses
the same specs before anything is queued, in both kinds.
"""

from __future__ import annotations

import pytest

from tests.builders import pod, volcano_job
from tests.engine.helpers import outcome_of, render

NPU = "huawei.com/ascend-1980"


def _job(resources):
    builder = volcano_job("npu").task("worker", replicas=2)
    builder._task("worker")["template"]["spec"]["containers"][0]["resources"] = resources
    return builder


def _pod(resources):
    builder = pod("npu").wrap()
    builder._obj["spec"]["containers"][0]["resources"] = resources
    return builder


def _errors(builder):
    return [(str(v.path), v.detail) for v in outcome_of(builder).errors]


JOB = "spec.tasks[0].template.spec.containers[0].resources"
POD = "spec.containers[0].resources"


@pytest.mark.parametrize(("build", "base"), [(_job, JOB), (_pod, POD)], ids=["job", "pod"])
def test_a_request_without_a_limit_is_refused_with_the_fix(build, base):
    ((path, detail),) = _errors(build({"requests": {NPU: 8}}))
    assert path == f"{base}.limits[{NPU}]"
    assert f"{NPU} is an extended resource, which Kubernetes never overcommits" in detail
    assert f"set limits: {{{NPU}: 8}}" in detail


@pytest.mark.parametrize(("build", "base"), [(_job, JOB), (_pod, POD)], ids=["job", "pod"])
def test_a_request_other_than_the_limit_is_refused(build, base):
    ((path, detail),) = _errors(
        build({"requests": {"nvidia.com/gpu": 4}, "limits": {"nvidia.com/gpu": 8}})
    )
    assert path == f"{base}.requests[nvidia.com/gpu]"
    assert "the request 4 differs from the limit 8" in detail
    assert "must equal the limit" in detail


def test_hugepages_are_not_overcommitted_either():
    resources = {"requests": {"hugepages-2Mi": "1Gi", "memory": "2Gi"}, "limits": {"memory": "2Gi"}}
    ((path, detail),) = _errors(_job(resources))
    assert path == f"{JOB}.limits[hugepages-2Mi]"
    assert "hugepages-2Mi is hugepages, which Kubernetes never overcommits" in detail


def test_an_extended_resource_is_counted_in_whole_devices():
    ((path, detail),) = _errors(_job({"limits": {"nvidia.com/gpu": "1500m"}}))
    assert path == f"{JOB}.limits[nvidia.com/gpu]"
    assert "1.5 is not a whole number" in detail


@pytest.mark.parametrize("kind", ["requests", "limits"])
def test_a_quota_name_in_a_container_is_refused_as_kubernetes_refuses_it(kind):
    """validation.go ``validateContainerResourceName``: a name with a domain outside
    kubernetes.io/ must be an extended resource, and ``IsExtendedResourceName`` excludes the
    "requests." prefix of quota names. Neither hugepages nor an extended resource."""
    name = "requests.nvidia.com/gpu"
    ((path, detail),) = _errors(_job({kind: {name: "500m"}}))
    assert path == f"{JOB}.{kind}[{name}]"
    assert detail.startswith(f"{name} is not a resource name Kubernetes accepts in a pod")
    assert "such as nvidia.com/gpu" in detail


@pytest.mark.parametrize(
    "resources",
    [
        pytest.param({"limits": {NPU: 8}}, id="a limit alone (the request defaults to it)"),
        pytest.param({"requests": {NPU: "8"}, "limits": {NPU: 8}}, id="request equal to limit"),
        pytest.param({"requests": {"cpu": "2", "memory": "1Gi"}}, id="native, no limit"),
        pytest.param(
            {"requests": {"cpu": "1"}, "limits": {"cpu": "2", "kubernetes.io/x": 1}},
            id="native resources may be overcommitted",
        ),
        pytest.param(
            {"requests": {"example.kubernetes.io/widget": "500m"}},
            id="a kubernetes.io/ domain is native: a fraction, and no limit",
        ),
    ],
)
def test_what_kubernetes_accepts_is_accepted(resources):
    assert _errors(_job(resources)) == []


def test_an_accepted_limit_counts_the_processes_per_node():
    rendered = render(_job({"limits": {NPU: 8}}))
    env = rendered["spec"]["components"][0]["template"]["spec"]["tasks"][0]["template"]["spec"][
        "containers"
    ][0]["env"]
    assert {"name": "NPROC_PER_NODE", "value": "8"} in env
