"""Every accelerator counts: NPROC_PER_NODE from the devices users really request, and a
warning naming autowrap.io/nproc-per-node where autowrap cannot count them."""

from __future__ import annotations

import pytest

from tests.builders import policy, volcano_job
from tests.engine.helpers import outcome_of, render
from tests.engine.simulate import pods_of
from webhook.model import names


def _env(job, *policies):
    return pods_of(render(job, *policies))[0].env()


@pytest.mark.parametrize(
    ("resource", "count"),
    [
        pytest.param("huawei.com/ascend-1980", 16, id="Arena's sample spelling, any case"),
        pytest.param("huawei.com/Ascend910B", 8, id="Ascend 910B"),
        pytest.param("NVIDIA.COM/GPU", 4, id="upper case"),
        pytest.param("gpu.intel.com/i915", 2, id="Intel i915"),
        pytest.param("gpu.intel.com/xe", 4, id="Intel Xe"),
        pytest.param("volcano.sh/vgpu-number", 2, id="Volcano vGPU"),
        pytest.param("nvidia.com/mig-1g.5gb", 1, id="an NVIDIA MIG slice"),
        pytest.param("example.com/gpu", 4, id="any extended resource with gpu in its name"),
        pytest.param("vendor.example/npu-v2", 8, id="any extended resource with npu in its name"),
    ],
)
def test_nproc_counts_the_accelerator(resource, count):
    job = volcano_job("acc").task("worker", replicas=16, gpus=count, resource=resource)
    outcome = outcome_of(job)
    assert outcome.warnings == ()
    env = _env(job)
    assert env["NPROC_PER_NODE"] == str(count)
    assert env["WORLD_SIZE"] == str(16 * count)


def test_a_share_of_a_device_next_to_the_device_count_is_not_counted():
    job = volcano_job("acc").task("worker", replicas=2)
    obj = job.build()
    obj["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["resources"] = {
        "limits": {"huawei.com/Ascend910B-memory": 32768, "huawei.com/Ascend910B": 4}
    }
    assert _env(obj)["NPROC_PER_NODE"] == "4"


@pytest.mark.parametrize(
    "resource",
    ["volcano.sh/vgpu-memory", "gpu.intel.com/millicores", "nvidia.com/gpumem"],
)
def test_an_accelerator_autowrap_cannot_count_is_warned(resource):
    job = volcano_job("acc").task("worker", replicas=2, gpus=3000, resource=resource)
    outcome = outcome_of(job)
    assert outcome.errors == ()
    ((v,),) = [outcome.warnings]
    assert str(v.path) == "spec.tasks[0].template.spec.containers[0].resources"
    assert resource in v.detail and names.NPROC_ANNOTATION in v.detail
    assert _env(job)["NPROC_PER_NODE"] == "1"


def test_the_annotation_answers_the_warning():
    job = (
        volcano_job("acc")
        .task("worker", replicas=16, gpus=3000, resource="volcano.sh/vgpu-memory")
        .nproc("8")
    )
    assert outcome_of(job).warnings == ()
    assert _env(job)["WORLD_SIZE"] == "128"


def test_a_policy_that_does_not_count_gpus_warns_about_them():
    only_fpga = policy().accelerators("example.com/fpga")
    job = volcano_job("gpu").task("worker", replicas=2, gpus=8)
    outcome = outcome_of(job, only_fpga)
    assert [str(v.path) for v in outcome.warnings] == [
        "spec.tasks[0].template.spec.containers[0].resources"
    ]


def test_a_resource_that_is_no_accelerator_is_not_warned():
    job = volcano_job("cpu").task("worker", replicas=2, gpus=2, resource="example.com/fpga")
    assert outcome_of(job).warnings == ()
