"""AppWrapper's limit of 8 podSets over all components."""

from __future__ import annotations

import pytest

from tests.builders import appwrapper, pod, volcano_job
from tests.engine.helpers import outcome_of, rendered_paths


def _tasks(count):
    job = volcano_job("j")
    for i in range(count):
        job.task(f"t{i}", replicas=1)
    return job


@pytest.mark.parametrize(
    ("count", "want"),
    [
        pytest.param(8, [], id="eight tasks fit"),
        pytest.param(9, [("spec", "error")], id="nine tasks do not"),
    ],
)
def test_a_job_has_at_most_eight_tasks(count, want):
    assert rendered_paths(outcome_of(_tasks(count))) == want


def test_podsets_are_counted_over_all_components_of_an_appwrapper():
    aw = appwrapper("aw", ns="ml").component(_tasks(7).build()).component(pod("a").build())
    assert rendered_paths(outcome_of(aw)) == []
    aw.component(pod("b").build())
    assert rendered_paths(outcome_of(aw)) == [("spec.components", "error")]


def test_the_message_names_the_count_and_the_limit():
    outcome = outcome_of(_tasks(9))
    assert "9 pod sets" in outcome.errors[0].detail and "at most 8" in outcome.errors[0].detail
