"""``release.resources_mismatch``: a pod's container matches its template's when Kubernetes
computes the same requests and limits, and never when the pod asks for more (or other)
resources than Kueue admitted."""

from __future__ import annotations

from typing import Any

import pytest

from testbed.cluster.poddefaults import default_pod
from testbed.jobs import RESOURCE_SPELLINGS
from webhook.core import release


def _as_stored(resources: dict[str, Any]) -> dict[str, Any]:
    """The resources as kube-apiserver stores them on a pod made from the template."""
    pod = {"spec": {"containers": [{"name": "c", "resources": resources}]}}
    default_pod(pod)
    return pod["spec"]["containers"][0]["resources"]  # type: ignore[no-any-return]


@pytest.mark.parametrize("spelling", sorted(RESOURCE_SPELLINGS))
def test_the_pod_kube_apiserver_stores_matches_its_template(spelling: str) -> None:
    template = RESOURCE_SPELLINGS[spelling]
    assert release.resources_mismatch(template, _as_stored(template)) == ""


@pytest.mark.parametrize(
    ("template", "pod"),
    [
        ({"limits": {"nvidia.com/gpu": 1}}, {"limits": {"nvidia.com/gpu": "2"}}),
        ({"limits": {"nvidia.com/gpu": 1}},
         {"limits": {"nvidia.com/gpu": "1"}, "requests": {"nvidia.com/gpu": "2"}}),
        ({"requests": {"cpu": "0.5"}}, {"requests": {"cpu": "501m"}}),
        ({"requests": {"memory": "1Gi"}}, {"requests": {"memory": "1025Mi"}}),
        ({"limits": {"nvidia.com/gpu": 1}},
         {"limits": {"nvidia.com/gpu": "1", "example.com/fpga": "1"}}),
        ({"limits": {"nvidia.com/gpu": 1}}, {}),
        ({"requests": {"cpu": "1"}}, {"requests": {"cpu": "1"}, "limits": {"nvidia.com/gpu": "1"}}),
    ],
    ids=["more-gpus", "requests-above-limits", "more-cpu", "more-memory", "another-resource",
         "none", "a-gpu-limit-added"],
)  # fmt: skip
def test_a_pod_that_asks_for_other_resources_is_not_the_template(
    template: dict[str, Any], pod: dict[str, Any]
) -> None:
    problem = release.resources_mismatch(template, pod)
    assert problem.startswith("resources."), problem
    assert "Kueue admitted the template's" in problem


def test_limitrangers_defaults_are_the_only_additions_allowed() -> None:
    template = {"limits": {"nvidia.com/gpu": 1}}
    defaulted = {"limits": {"nvidia.com/gpu": "1", "cpu": "2", "memory": "4Gi"},
                 "requests": {"nvidia.com/gpu": "1", "cpu": "1", "memory": "4Gi",
                              "ephemeral-storage": "1Gi"}}  # fmt: skip
    assert release.resources_mismatch(template, defaulted) == ""
    # A LimitRange cannot change what the template names: that pod is not the template's.
    changed = {"limits": {"nvidia.com/gpu": "1"}, "requests": {"nvidia.com/gpu": "1", "cpu": "1"}}
    assert release.resources_mismatch({**template, "requests": {"cpu": "2"}}, changed) != ""


def test_the_message_shows_each_side_as_a_reader_compares_them() -> None:
    problem = release.resources_mismatch(
        {"limits": {"nvidia.com/gpu": 1}}, {"limits": {"nvidia.com/gpu": "2"}}
    )
    assert problem == (
        "resources.requests are {nvidia.com/gpu: 2}, and Kueue admitted the template's "
        "{nvidia.com/gpu: 1}"
    )


def test_a_podset_annotation_of_unicode_digits_names_no_podset() -> None:
    for value in ("²", "١", "3²", "-1", "", " 1"):
        pod = {"metadata": {"annotations": {"autowrap.io/podset": value}}}
        assert release.podset_index(pod) is None, value
    assert release.podset_index({"metadata": {"annotations": {"autowrap.io/podset": "2"}}}) == 2


def test_a_sub_milli_quantity_is_the_milli_value_the_apiserver_stores_on_the_pod() -> None:
    """kube-apiserver rounds a Pod's quantities up to milli (SetDefaults_ResourceList); the Job's
    template, a custom resource, keeps ``0.0001``."""
    template = {"limits": {"nvidia.com/gpu": 1, "cpu": "0.0001"}}
    assert _as_stored(template)["limits"]["cpu"] == "1m"
    assert release.resources_mismatch(template, _as_stored(template)) == ""
    assert release.resources_mismatch(template, {"limits": {"nvidia.com/gpu": "1", "cpu": "2m"}})
