"""Completing AppWrappers users submit themselves (SPEC section 3, last paragraph)."""

from __future__ import annotations

import pytest

from tests.builders import appwrapper, context, pod, policy, spec_of, volcano_job
from tests.engine.simulate import pods_of
from webhook.core import engine
from webhook.model import names

FT = names.FAULT_TOLERANCE_PREFIX
JOB = volcano_job("j").task("master", replicas=1).task("w", replicas=3, gpus=8).build()
POLICY = (
    policy().queues(default="team-q").ft_defaults(retryLimit="2", failureGracePeriodDuration="1m")
)


def _complete(aw, *policies):
    outcome = engine.admit(
        aw.build() if hasattr(aw, "build") else aw, context(*policies or (POLICY,))
    )
    assert outcome.action is engine.Action.COMPLETE, outcome.reason
    return outcome


def test_missing_podsets_queue_fault_tolerance_and_suspend_are_added():
    outcome = _complete(appwrapper("aw", ns="ml").component(JOB))
    assert outcome.errors == ()
    result = outcome.result
    assert result["metadata"]["labels"] == {names.QUEUE_LABEL: "team-q"}
    assert result["metadata"]["annotations"] == {
        FT + "retryLimit": "2",
        FT + "failureGracePeriodDuration": "1m",
    }
    assert result["spec"]["suspend"] is True
    assert result["spec"]["components"][0]["podSets"] == [
        {"path": "template.spec.tasks[0].template", "replicas": 1},
        {"path": "template.spec.tasks[1].template", "replicas": 3},
    ]


def test_the_completed_job_gets_the_same_plumbing_as_a_wrapped_one():
    completed = _complete(appwrapper("aw", ns="ml").component(JOB)).result
    wrapped = engine.admit(JOB, context(POLICY)).result
    assert (
        completed["spec"]["components"][0]["template"]
        == wrapped["spec"]["components"][0]["template"]
    )
    ranks = {p.name: p.env()["RANK"] for p in pods_of(completed)}
    assert ranks == {"j-master-0": "0", "j-w-0": "1", "j-w-1": "2", "j-w-2": "3"}


def test_what_the_user_set_is_kept():
    aw = (
        appwrapper("aw", ns="ml")
        .queue("team-q")
        .fault_tolerance("retryLimit", "1")
        .suspend(False)
        .component(JOB, [{"path": "template.spec.tasks[0].template", "replicas": 1}])
    )
    result = _complete(aw).result
    assert result["metadata"]["labels"][names.QUEUE_LABEL] == "team-q"
    assert result["metadata"]["annotations"][FT + "retryLimit"] == "1"
    assert result["spec"]["suspend"] is False
    assert result["spec"]["components"][0]["podSets"] == [
        {"path": "template.spec.tasks[0].template", "replicas": 1},
        {"path": "template.spec.tasks[1].template", "replicas": 3},
    ]


@pytest.mark.parametrize(
    "aw",
    [
        pytest.param(appwrapper("aw", ns="ml").component(JOB), id="a Volcano Job component"),
        pytest.param(appwrapper("aw", ns="ml").component(pod("p").build()), id="a Pod component"),
        pytest.param(
            appwrapper("aw", ns="ml").component(JOB).component(pod("p").build()),
            id="a job and a pod",
        ),
    ],
)
def test_completing_twice_changes_nothing(aw):
    once = _complete(aw).result
    twice = _complete(once).result
    assert twice == once
    assert engine.complete(once, spec_of(POLICY)) == once


def test_a_pod_component_gets_its_service_once():
    once = _complete(appwrapper("aw", ns="ml").component(pod("p").build())).result
    kinds = [c["template"]["kind"] for c in once["spec"]["components"]]
    assert kinds == ["Pod", "Service"]
    assert "podSets" not in once["spec"]["components"][0]


def test_a_podset_with_wrong_replicas_is_rejected_at_its_path():
    aw = appwrapper("aw", ns="ml").component(
        JOB, [{"path": "template.spec.tasks[1].template", "replicas": 2}]
    )
    outcome = _complete(aw)
    assert [(str(v.path), v.severity.value) for v in outcome.errors] == [
        ("spec.components[0].podSets[0].replicas", "error")
    ]


def test_a_podset_path_that_names_no_task_is_rejected():
    aw = appwrapper("aw", ns="ml").component(
        JOB, [{"path": "template.spec.tasks[5].template", "replicas": 1}]
    )
    assert [str(v.path) for v in _complete(aw).errors] == ["spec.components[0].podSets[0].path"]


def test_violations_inside_a_component_are_reported_under_its_path():
    bad = volcano_job("j").task("w", replicas=2).env("w", "RANK", "7").build()
    outcome = _complete(appwrapper("aw", ns="ml").component(bad))
    assert [str(v.path) for v in outcome.errors] == [
        "spec.components[0].template.spec.tasks[0].template.spec.containers[0].env[0]"
    ]


def test_an_appwrapper_without_components_is_rejected():
    outcome = _complete(appwrapper("aw", ns="ml"))
    assert [str(v.path) for v in outcome.errors] == ["spec.components"]


def test_a_component_in_another_namespace_is_rejected():
    other = pod("p", ns="elsewhere").build()
    outcome = _complete(appwrapper("aw", ns="ml").component(other))
    assert [str(v.path) for v in outcome.errors] == [
        "spec.components[0].template.metadata.namespace"
    ]


def test_components_of_unknown_kinds_are_kept_untouched():
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "1"}}
    result = _complete(appwrapper("aw", ns="ml").component(cm).component(JOB)).result
    assert result["spec"]["components"][0] == {"template": cm}


def test_an_appwrapper_in_an_uncovered_namespace_passes_unchanged():
    aw = appwrapper("aw", ns="ml").component(JOB).build()
    outcome = engine.admit(aw, context(policy().names("prod"), ns="ml"))
    assert (outcome.action, outcome.result) == (engine.Action.PASS, aw)


def test_the_submitted_appwrapper_is_not_mutated():
    aw = appwrapper("aw", ns="ml").component(JOB).build()
    snapshot = appwrapper("aw", ns="ml").component(JOB).build()
    _complete(aw)
    assert aw == snapshot
