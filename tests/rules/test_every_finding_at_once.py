"""One answer reports every problem of a workload: a finding never hides the next one (in a later
task, container, resource or env entry), so a user fixes everything in one round."""

from __future__ import annotations

from tests.builders import volcano_job
from tests.engine.helpers import outcome_of, rendered_paths

T0 = "spec.tasks[0].template"
C0 = f"{T0}.spec.containers[0]"


def _two_tasks():
    return volcano_job("j").task("a", replicas=1).task("b", replicas=1)


def _container(builder, task="a", index=0):
    return builder._task(task)["template"]["spec"]["containers"][index]


def test_a_bad_template_is_reported_though_a_later_task_is_fine():
    job = _two_tasks()
    _container(job)["resources"] = {"requests": {"memory": "-1Gi"}}
    assert rendered_paths(outcome_of(job)) == [(f"{C0}.resources.requests[memory]", "error")]


def test_a_task_without_a_template_is_named():
    job = _two_tasks()
    del job._task("a")["template"]
    outcome = outcome_of(job)
    assert rendered_paths(outcome) == [(T0, "error")]
    assert outcome.errors[0].detail.startswith("'a' has no pod template; add one")


def test_a_bad_container_is_reported_though_a_later_container_is_fine():
    job = volcano_job("j").task("a", replicas=1, containers=2)
    _container(job)["resources"] = {"requests": {"cpu": "-1"}}
    assert rendered_paths(outcome_of(job)) == [(f"{C0}.resources.requests[cpu]", "error")]


def test_a_bad_container_is_reported_beside_pod_level_resources():
    job = volcano_job("j").task("a", replicas=1)
    _container(job)["resources"] = {"requests": {"cpu": "-1"}}
    job._task("a")["template"]["spec"]["resources"] = {"limits": {"cpu": "4", "memory": "8Gi"}}
    assert rendered_paths(outcome_of(job)) == [(f"{C0}.resources.requests[cpu]", "error")]


def test_every_bad_quantity_of_a_container_is_reported():
    job = volcano_job("j").task("a", replicas=1)
    _container(job)["resources"] = {
        "requests": {"cpu": "lots", "memory": "-1Gi", "nvidia.com/gpu": 2}
    }
    assert rendered_paths(outcome_of(job)) == [
        (f"{C0}.resources.requests[cpu]", "error"),  # not a quantity
        (f"{C0}.resources.requests[memory]", "error"),  # negative
        (f"{C0}.resources.limits[nvidia.com/gpu]", "error"),  # an extended resource needs a limit
    ]


def test_an_env_entry_whose_name_is_no_string_does_not_hide_a_conflict_after_it():
    job = volcano_job("j").task("a", replicas=1)
    _container(job)["env"] = [{"name": 7, "value": "x"}, {"name": "WORLD_SIZE", "value": "3"}]
    outcome = outcome_of(job)
    assert sorted(rendered_paths(outcome)) == [
        (f"{C0}.env[0].name", "error"),  # the schema: 7 is not a string
        (f"{C0}.env[1]", "error"),
    ]
    assert any(v.detail.startswith("WORLD_SIZE is set by autowrap to '1'") for v in outcome.errors)


def test_a_request_after_an_extended_resource_is_still_compared_with_its_limit():
    job = volcano_job("j").task("a", replicas=1)
    _container(job)["resources"] = {
        "requests": {"nvidia.com/gpu": 2, "cpu": "4"},
        "limits": {"nvidia.com/gpu": 2, "cpu": "2"},
    }
    outcome = outcome_of(job)
    assert rendered_paths(outcome) == [(f"{C0}.resources.requests[cpu]", "error")]
    assert outcome.errors[0].detail.startswith("the request 4 is more than the limit 2")


def test_a_refused_resource_name_does_not_hide_the_quantities_after_it():
    job = volcano_job("j").task("a", replicas=1)
    _container(job)["resources"] = {"requests": {"requests.nvidia.com/gpu": 1, "memory": "-1Gi"}}
    assert rendered_paths(outcome_of(job)) == [
        (f"{C0}.resources.requests[requests.nvidia.com/gpu]", "error"),
        (f"{C0}.resources.requests[memory]", "error"),
    ]
