"""Pod-level resources against what the containers request together, case by case.

Kubernetes (pkg/apis/core/validation/validation.go, ``validatePodResourceConsistency``) sums
regular containers and sidecars (init containers with ``restartPolicy: Always``) side by side,
takes each other init container alone on top of the sidecars started before it, reads requests
with limits standing in where a request is unset, and checks only cpu, memory and hugepages.
"""

from __future__ import annotations

import pytest

from tests.builders import volcano_job
from tests.engine.helpers import outcome_of

SPEC = "spec.tasks[0].template.spec"


def _job(pod, containers=(), init=()):
    builder = volcano_job("j").task("w", replicas=1)
    spec = builder._task("w")["template"]["spec"]
    spec["resources"] = pod
    spec["containers"] = [
        {"name": f"c{i}", "image": "busybox", **({"resources": r} if r else {})}
        for i, r in enumerate(containers)
    ]
    if init:
        spec["initContainers"] = [
            {"name": f"i{i}", "image": "busybox", **extra} for i, extra in enumerate(init)
        ]
    return builder


def _paths(builder):
    return [str(v.path) for v in outcome_of(builder).errors]


def _cpu(amount, *, kind="requests"):
    return {kind: {"cpu": amount}}


SIDECAR = {"restartPolicy": "Always", "resources": _cpu("1")}


@pytest.mark.parametrize(
    ("pod", "containers", "init", "want"),
    [
        pytest.param(_cpu("500m"), [_cpu("500m")], (), [], id="an exact fit in millicores"),
        pytest.param(
            _cpu("500m"),
            [_cpu("500m")],
            [{}],
            [],
            id="an init container asking nothing adds nothing",
        ),
        pytest.param(
            _cpu("1", kind="limits"),
            [_cpu("2")],
            (),
            [f"{SPEC}.resources.limits[cpu]"],
            id="pod limits stand in for unset requests, and the error names limits",
        ),
        pytest.param(
            {"requests": {"cpu": "0"}, "limits": {"cpu": "4"}},
            [_cpu("1")],
            (),
            [f"{SPEC}.resources.requests[cpu]"],
            id="a request of 0 is a request, not unset",
        ),
        pytest.param(
            _cpu("2"),
            [_cpu("1")],
            [SIDECAR, {"resources": _cpu("1")}],
            [],
            id="an init container runs beside the sidecars started before it: 1 + 1 fits 2",
        ),
        pytest.param(
            _cpu("2"),
            [_cpu("1")],
            [SIDECAR, {"resources": _cpu("2")}],
            [f"{SPEC}.resources.requests[cpu]"],
            id="an init container on top of a sidecar: 1 + 2 exceeds 2",
        ),
        pytest.param(
            _cpu("2"),
            [_cpu("1")],
            [{"resources": _cpu("2")}, SIDECAR],
            [],
            id="a sidecar started after an init container does not add to it",
        ),
        pytest.param(
            _cpu("2"),
            [_cpu("1")],
            [SIDECAR, SIDECAR],
            [f"{SPEC}.resources.requests[cpu]"],
            id="sidecars run beside the regular containers: 1 + 1 + 1 exceeds 2",
        ),
        pytest.param(
            {"requests": {"hugepages-2Mi": "2Mi"}, "limits": {"hugepages-2Mi": "2Mi"}},
            [{"requests": {"hugepages-2Mi": "4Mi"}, "limits": {"hugepages-2Mi": "4Mi"}}],
            (),
            [f"{SPEC}.resources.requests[hugepages-2Mi]"],
            id="hugepages are checked at pod level",
        ),
        pytest.param(
            {"requests": {"ephemeral-storage": "1Gi", "cpu": "1"}},
            [_cpu("2")],
            (),
            [f"{SPEC}.resources.requests[cpu]"],
            id="a resource not compared is skipped, not the end of the comparison",
        ),
        pytest.param(
            _cpu("500m"),
            [_cpu("500m"), None],
            (),
            [],
            id="a container asking nothing adds nothing",
        ),
        pytest.param(
            {"requests": {"ephemeral-storage": "1Gi"}},
            [{"requests": {"ephemeral-storage": "2Gi"}}],
            (),
            [],
            id="only cpu, memory and hugepages are compared",
        ),
    ],
)
def test_pod_level_resources_cover_the_containers(pod, containers, init, want):
    assert _paths(_job(pod, containers, init)) == want


def test_a_pod_level_quantity_that_does_not_parse_is_named_once_and_compared_never():
    paths = _paths(_job({"requests": {"cpu": "lots"}}, [_cpu("1")]))
    assert paths == [f"{SPEC}.resources.requests[cpu]"]
