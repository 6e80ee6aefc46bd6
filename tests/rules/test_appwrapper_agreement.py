"""What AppWrapper's own webhook refuses, refused first by autowrap with a field path.

Cases follow project-codeflare/appwrapper v1.2.1 ``internal/webhook/appwrapper_webhook_test.go``
("Structural Invariants") and ``internal/webhook/appwrapper_fixtures_test.go``, and the rules of
``appwrapper_webhook.go`` :150-237 and ``pkg/utils/utils.go`` :52-66, :239-296 and :475-583.
"""

from __future__ import annotations

import copy

import pytest

from tests.builders import appwrapper, context, pod, policy, volcano_job
from webhook.core import engine

POLICY = policy().queues(default="q")


def _container():
    """A fresh container each time: a test that breaks one must not break the next test's."""
    return {"name": "c", "image": "busybox", "command": ["sh", "-c", "sleep 10"]}


def _admit(aw):
    outcome = engine.admit(aw.build(), context(POLICY))
    assert outcome.action is engine.Action.COMPLETE, outcome.reason
    return outcome


def _errors(aw):
    return [(str(v.path), v.detail) for v in _admit(aw).errors]


def _pod_yaml(name="p"):
    """appwrapper_fixtures_test.go podYAML"""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{**_container(), "resources": {"requests": {"cpu": "100m"}}}],
        },
    }


def _deployment(replicas=4):
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "d"}},
            "template": {
                "metadata": {"labels": {"app": "d"}},
                "spec": {"containers": [_container()]},
            },
        },
    }


def _jobset(jobs=2):
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "js"},
        "spec": {
            "replicatedJobs": [
                {
                    "name": f"r{i}",
                    "replicas": 1,
                    "template": {
                        "spec": {
                            "parallelism": 2,
                            "template": {"spec": {"containers": [_container()]}},
                        }
                    },
                }
                for i in range(jobs)
            ]
        },
    }


def _service():
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "s"},
        "spec": {"ports": [{"port": 80}]},
    }


# --- podSets of Pods --------------------------------------------------------------------------


def test_a_pod_component_declaring_the_template_podset_is_accepted():
    """AppWrapper's own fixture: pod() declares DeclaredPodSets [{Path: "template"}]."""
    aw = appwrapper("aw", ns="ml").component(_pod_yaml(), [{"path": "template"}])
    assert _errors(aw) == []


def test_a_pod_component_with_a_podset_path_elsewhere_is_refused():
    aw = appwrapper("aw", ns="ml").component(_pod_yaml(), [{"path": "template.spec"}])
    ((path, detail),) = _errors(aw)
    assert path == "spec.components[0].podSets[0].path"
    assert "use one of: template" in detail


# --- counting podSets --------------------------------------------------------------------------


def test_there_must_be_no_more_than_8_podspecs():
    """There must be no more than 8 podspecs: nine pods"""
    aw = appwrapper("aw", ns="ml")
    for i in range(9):
        aw = aw.component(_pod_yaml(f"p{i}"), [{"path": "template"}])
    assert [p for p, _ in _errors(aw)] == ["spec.components"]


def test_podsets_appwrapper_infers_for_other_components_count_too():
    """Five Volcano tasks plus a JobSet of four replicated jobs: AppWrapper counts nine."""
    job = volcano_job("j")
    for i in range(5):
        job = job.task(f"t{i}", replicas=1)
    aw = appwrapper("aw", ns="ml").component(job.build()).component(_jobset(4))
    ((path, detail),) = _errors(aw)
    assert path == "spec.components"
    assert detail.startswith("9 pod sets")


@pytest.mark.parametrize(
    "components",
    [
        pytest.param([], id="There must be at least one podspec (a)"),
        pytest.param([_service()], id="There must be at least one podspec (b)"),
    ],
)
def test_there_must_be_at_least_one_podspec(components):
    aw = appwrapper("aw", ns="ml")
    for c in components:
        aw = aw.component(c)
    assert [p for p, _ in _errors(aw)] == ["spec.components"]


def test_well_formed_inferred_components_are_accepted():
    """PodSets are inferred for common kinds"""
    aw = (
        appwrapper("aw", ns="ml")
        .component(_deployment())
        .component(_jobset(2))
        .component(_pod_yaml())
    )
    assert _errors(aw) == []


# --- declared podSet paths ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        pytest.param("template.spec.missing", id="Non-existent PodSpec paths are rejected"),
        pytest.param("", id="an empty path"),
        pytest.param(
            "template.spec.template.metadata", id="PodSpec paths must refer to a PodSpecTemplate"
        ),
    ],
)
def test_declared_paths_of_a_deployment(path):
    aw = appwrapper("aw", ns="ml").component(_deployment(), [{"path": path, "replicas": 4}])
    paths = [p for p, _ in _errors(aw)]
    assert paths and all(p.startswith("spec.components[0]") for p in paths)


@pytest.mark.parametrize(
    "path",
    [
        "template.spec.replicatedJobs.template.spec.template",
        "template.spec.replicatedJobs",
        "template.spec.replicatedJobs[0].template[0].spec.template",
        "template.spec.replicatedJobs[10].template.spec.template",
        "template.spec.replicatedJobs[-1].template.spec.template",
        "template.spec.replicatedJobs[a10].template.spec.template",
        "template.spec.replicatedJobs[1",
        "template.spec.replicatedJobs[1]].template.spec.template",
    ],
)
def test_validation_of_array_and_map_path_elements(path):
    """Validation of Array and Map path elements (each path of the upstream test)"""
    aw = appwrapper("aw", ns="ml").component(_jobset(2), [{"path": path, "replicas": 2}])
    assert _errors(aw), path


def test_a_valid_declared_path_of_a_jobset():
    aw = appwrapper("aw", ns="ml").component(
        _jobset(1), [{"path": "template.spec.replicatedJobs[0].template.spec.template"}]
    )
    assert _errors(aw) == []


# --- templates and their spec ------------------------------------------------------------------


def test_a_volcano_task_without_a_template_is_refused():
    job = volcano_job("j").task("w", replicas=2).build()
    del job["spec"]["tasks"][0]["template"]
    aw = appwrapper("aw", ns="ml").component(job)
    assert [p for p, _ in _errors(aw)] == ["spec.components[0].template.spec.tasks[0].template"]


def test_a_volcano_template_without_a_spec_is_refused_when_wrapped_too():
    job = volcano_job("j").task("w", replicas=2).build()
    job["spec"]["tasks"][0]["template"] = {"metadata": {"labels": {"a": "b"}}}
    outcome = engine.admit(job, context(POLICY))
    assert [str(v.path) for v in outcome.errors] == ["spec.tasks[0].template.spec"]


def test_pod_templates_of_inferred_components_are_checked_against_the_pod_schema():
    deployment = _deployment()
    deployment["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"] = 1
    deployment["spec"]["template"]["spec"]["restartPolicyy"] = "Always"
    aw = appwrapper("aw", ns="ml").component(deployment)
    assert sorted(_errors(aw)) == sorted(
        [
            (
                "spec.components[0].template.spec.template.spec.containers[0].imagePullPolicy",
                "1 is not a string; write it as a string",
            ),
            (
                "spec.components[0].template.spec.template.spec.restartPolicyy",
                "unknown field 'restartPolicyy' in PodSpec; AppWrapper and the API server refuse "
                "unknown pod fields, so did you mean 'restartPolicy'? Otherwise remove it",
            ),
        ]
    )


def test_an_unknown_field_in_a_wrapped_volcano_task_is_refused_before_it_is_queued():
    job = volcano_job("j").task("w", replicas=2).build()
    job["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["resource"] = {}
    outcome = engine.admit(job, context(POLICY))
    ((v,),) = [outcome.errors]
    assert str(v.path) == "spec.tasks[0].template.spec.containers[0].resource"
    assert "did you mean 'resources'?" in v.detail


def test_a_field_newer_than_appwrapper_is_a_warning():
    built = pod("p").wrap().spec(hostnameOverride="node-a").build()
    outcome = engine.admit(built, context(POLICY))
    assert outcome.errors == ()
    assert [str(v.path) for v in outcome.warnings] == ["spec.hostnameOverride"]
    assert "1.34" in outcome.warnings[0].detail


def test_a_submitted_appwrapper_and_its_wrapped_twin_agree():
    """Redirect, adopt and the CLI all call engine.admit: the same object, the same verdict."""
    job = volcano_job("j").task("w", replicas=2).build()
    job["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["ports"] = [
        {"containerPort": "8080"}
    ]
    wrapped = engine.admit(copy.deepcopy(job), context(POLICY))
    submitted = _admit(appwrapper("aw", ns="ml").component(job))
    assert [v.detail for v in wrapped.errors] == [v.detail for v in submitted.errors]
    assert len(wrapped.errors) == 1


# --- declared and inferred podSets of a kind autowrap does not wrap itself ----------------------

C0 = "spec.components[0]"


def _deployment_errors(podsets, deployment=None):
    aw = appwrapper("aw", ns="ml").component(deployment or _deployment(), podsets)
    return _errors(aw)


def test_every_bad_declared_podset_is_named_by_its_own_path():
    found = _deployment_errors([{}, {"path": 5}, {"path": "template.spec.nope"}])
    assert [path for path, _ in found] == [
        f"{C0}.podSets[0].path",
        f"{C0}.podSets[1].path",
        f"{C0}.podSets[2].path",
    ]
    assert found[0][1].startswith("missing; set the path of the pod template")
    assert "'template.spec.nope' does not reach a pod template" in found[2][1]


def test_a_declared_podset_that_is_also_inferred_is_checked_once():
    deployment = _deployment()
    del deployment["spec"]["template"]["spec"]
    found = _deployment_errors([{"path": "template.spec.template"}], deployment)
    assert found == [
        (
            f"{C0}.template.spec.template.spec",
            "the pod template of pod set 'template.spec.template' has no spec; add "
            "spec.containers (AppWrapper refuses a pod set whose template has no spec)",
        )
    ]


def test_an_inferred_podset_that_reaches_no_template_is_blamed_on_the_component_template():
    jobset = _jobset(1)
    del jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    aw = appwrapper("aw", ns="ml").component(jobset)
    ((path, detail),) = _errors(aw)
    assert path == f"{C0}.template"
    assert detail.startswith(
        "'template.spec.replicatedJobs[0].template.spec.template' does not reach a pod template"
    )
