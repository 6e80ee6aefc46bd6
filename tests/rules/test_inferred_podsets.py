"""The podSets AppWrapper infers per kind, and its path walk, against AppWrapper's own rules.

project-codeflare/appwrapper v1.2.1 ``pkg/utils/utils.go``: ``InferPodSets`` :475-583 (one
podSet per pod template it knows, with the replicas it will create) and ``getValueAtPath``
:239-296. The counts decide whether an AppWrapper stays within 8 podSets and what Kueue quotas.
"""

from __future__ import annotations

import pytest

from webhook.core.rules.podsets import Inferred, inferred, resolve

POD_TEMPLATE = {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}


def _job(**spec):
    return {"apiVersion": "batch/v1", "kind": "Job",
            "spec": {**spec, "template": POD_TEMPLATE}}  # fmt: skip


def _ray(kind, workers):
    cluster = {"headGroupSpec": {"template": POD_TEMPLATE}, "workerGroupSpecs": workers}
    spec = {"rayClusterSpec": cluster} if kind == "RayJob" else cluster
    return {"apiVersion": "ray.io/v1", "kind": kind, "spec": spec}


@pytest.mark.parametrize(
    ("template", "want"),
    [
        pytest.param({"apiVersion": "v1", "kind": "Pod", "spec": {}}, [("template", 1)], id="Pod"),
        pytest.param(
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "spec": {"replicas": 3, "template": POD_TEMPLATE},
            },
            [("template.spec.template", 3)],
            id="Deployment",
        ),  # fmt: skip
        pytest.param(
            {"apiVersion": "apps/v1", "kind": "StatefulSet", "spec": {"template": POD_TEMPLATE}},
            [("template.spec.template", 1)],
            id="StatefulSet without replicas: 1",
        ),
        pytest.param(
            {"apiVersion": "apps/v1", "kind": "Deployment", "spec": {"replicas": 2}},
            [],
            id="Deployment without a template: none",
        ),
        pytest.param(_job(), [("template.spec.template", 1)], id="Job without parallelism: 1"),
        pytest.param(_job(parallelism=4), [("template.spec.template", 4)], id="Job parallelism"),
        pytest.param(
            _job(parallelism=4, completions=2),
            [("template.spec.template", 2)],
            id="Job completions below parallelism",
        ),
        pytest.param(
            _job(parallelism=2, completions=5),
            [("template.spec.template", 2)],
            id="Job completions above parallelism",
        ),
        pytest.param(
            {
                "apiVersion": "jobset.x-k8s.io/v1alpha2",
                "kind": "JobSet",
                "spec": {
                    "replicatedJobs": [
                        {
                            "replicas": 2,
                            "template": {"spec": {"parallelism": 3, "template": POD_TEMPLATE}},
                        },
                        {"replicas": 5},
                        {"template": {"spec": {"template": POD_TEMPLATE}}},
                    ]
                },
            },
            [
                ("template.spec.replicatedJobs[0].template.spec.template", 6),
                ("template.spec.replicatedJobs[2].template.spec.template", 1),
            ],
            id="JobSet: replicas x parallelism, jobs without a template skipped",
        ),  # fmt: skip
        pytest.param(
            {
                "apiVersion": "kubeflow.org/v1",
                "kind": "PyTorchJob",
                "spec": {
                    "pytorchReplicaSpecs": {
                        "Master": {"replicas": 1, "template": POD_TEMPLATE},
                        "Worker": {"replicas": 4, "template": POD_TEMPLATE},
                    }
                },
            },
            [
                ("template.spec.pytorchReplicaSpecs.Master.template", 1),
                ("template.spec.pytorchReplicaSpecs.Worker.template", 4),
            ],
            id="PyTorchJob",
        ),  # fmt: skip
        pytest.param(
            {
                "apiVersion": "kubeflow.org/v1",
                "kind": "PyTorchJob",
                "spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 4}}},
            },
            [],
            id="PyTorchJob role without a template",
        ),  # fmt: skip
        pytest.param(
            _ray("RayCluster", [{"replicas": 2, "template": POD_TEMPLATE}, {"replicas": 7}]),
            [
                ("template.spec.headGroupSpec.template", 1),
                ("template.spec.workerGroupSpecs[0].template", 2),
            ],
            id="RayCluster: the head and each worker group with a template",
        ),  # fmt: skip
        pytest.param(
            _ray("RayJob", [{"template": POD_TEMPLATE}]),
            [
                ("template.spec.rayClusterSpec.headGroupSpec.template", 1),
                ("template.spec.rayClusterSpec.workerGroupSpecs[0].template", 1),
            ],
            id="RayJob",
        ),  # fmt: skip
        pytest.param(
            {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "spec": {"tasks": []}},
            [],
            id="a kind AppWrapper does not know: declared only",
        ),
    ],
)
def test_inferred_podsets(template, want):
    assert inferred(template) == [Inferred(path, replicas) for path, replicas in want]


TASKS = {"spec": {"tasks": [{"template": POD_TEMPLATE}]}}


@pytest.mark.parametrize(
    ("path", "want"),
    [
        ("template.spec.tasks[0].template", "template.spec.tasks[0].template"),
        ("spec.tasks[0]", "the first element of the path must be 'template'"),
        ("template.spec.tasks[1]", "template.spec.tasks has no item [1]"),
        ("template.spec.tasks[x]", "'x' at template.spec.tasks is not an array index"),
        ("template.spec.jobs", "template.spec has no field 'jobs'"),
        ("template.spec..tasks", "'..tasks' at template.spec is neither .field nor [index]"),
    ],
)
def test_paths_resolve_as_appwrapper_walks_them(path, want):
    resolved = resolve(TASKS, path)
    if isinstance(resolved, tuple):
        node, where = resolved
        assert node == POD_TEMPLATE
        resolved = str(where)
    assert resolved == want
