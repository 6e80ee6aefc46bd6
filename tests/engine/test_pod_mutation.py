"""The pod-level mutation: ``autowrap.io/node-rank`` = offset + the controller's pod index."""

from __future__ import annotations

import pytest

from tests.builders import pod, volcano_job
from tests.engine.helpers import render
from tests.engine.simulate import pods_of
from webhook.core.plumbing import pods
from webhook.model import names


def _pod(labels=None, annotations=None):
    built = pod("j-w-3").build()
    built["metadata"]["labels"] = dict(labels or {})
    built["metadata"]["annotations"] = dict(annotations or {})
    return built


OFFSET = names.NODE_RANK_OFFSET_LABEL
KEY = names.POD_INDEX_KEY_ANNOTATION
INDEX = names.VOLCANO_TASK_INDEX
RANK = names.NODE_RANK_ANNOTATION


@pytest.mark.parametrize(
    ("labels", "annotations", "want"),
    [
        pytest.param({OFFSET: "4"}, {KEY: INDEX, INDEX: "3"}, "7", id="offset plus index"),
        pytest.param(
            {OFFSET: "1"}, {KEY: INDEX, INDEX: "0"}, "1", id="index zero gives the offset"
        ),
        pytest.param(
            {OFFSET: "2", INDEX: "5"}, {KEY: INDEX}, "7", id="the index may come from a label"
        ),
        pytest.param(
            {OFFSET: "10"}, {INDEX: "2"}, "12", id="without an index key Volcano's is assumed"
        ),
        pytest.param(
            {OFFSET: "3"},
            {KEY: "example.com/index", "example.com/index": "4", INDEX: "9"},
            "7",
            id="the index key names which annotation to read",
        ),
    ],
)
def test_mutation_writes_offset_plus_index(labels, annotations, want):
    before = _pod(labels, annotations)
    result = pods.mutate(before)
    assert result.violations == ()
    assert result.pod is not None
    assert result.pod["metadata"]["annotations"][RANK] == want
    expected = _pod(labels, {**annotations, RANK: want})
    assert result.pod == expected


def test_pod_without_the_offset_label_is_left_alone():
    assert pods.mutate(_pod({}, {INDEX: "1"})) == pods.PodMutation(None)


def test_mutation_is_a_fixed_point():
    first = pods.mutate(_pod({OFFSET: "2"}, {KEY: INDEX, INDEX: "1"})).pod
    assert first is not None
    assert pods.mutate(first) == pods.PodMutation(None)


def test_a_stale_rank_is_corrected():
    result = pods.mutate(_pod({OFFSET: "2"}, {KEY: INDEX, INDEX: "1", RANK: "0"}))
    assert result.pod is not None and result.pod["metadata"]["annotations"][RANK] == "3"


def test_mutation_does_not_change_its_input():
    before = _pod({OFFSET: "2"}, {KEY: INDEX, INDEX: "1"})
    snapshot = _pod({OFFSET: "2"}, {KEY: INDEX, INDEX: "1"})
    pods.mutate(before)
    assert before == snapshot


@pytest.mark.parametrize(
    ("labels", "annotations", "path"),
    [
        pytest.param(
            {OFFSET: "x"},
            {KEY: INDEX, INDEX: "1"},
            f"metadata.labels[{OFFSET}]",
            id="an offset that is not a number is refused at the label",
        ),
        pytest.param(
            {OFFSET: "-1"},
            {KEY: INDEX, INDEX: "1"},
            f"metadata.labels[{OFFSET}]",
            id="a negative offset is refused",
        ),
        pytest.param(
            {OFFSET: "1"},
            {KEY: INDEX},
            f"metadata.annotations[{INDEX}]",
            id="a pod without its index is refused at the index annotation",
        ),
        pytest.param(
            {OFFSET: "1"},
            {KEY: INDEX, INDEX: "one"},
            f"metadata.annotations[{INDEX}]",
            id="an index that is not a number is refused",
        ),
    ],
)
def test_mutation_refuses_pods_it_cannot_rank(labels, annotations, path):
    result = pods.mutate(_pod(labels, annotations))
    assert result.pod is None
    assert [(str(v.path), v.severity.value) for v in result.violations] == [(path, "error")]


def test_needs_rank_is_true_exactly_for_templates_of_later_multi_pod_groups():
    job = volcano_job("j").task("master", replicas=1).task("w", replicas=3).task("x", replicas=2)
    by_task: dict[str, set[bool]] = {}
    for p in pods_of(render(job)):
        template_pod = {"metadata": {"labels": p.pod["metadata"].get("labels", {})}}
        by_task.setdefault(p.task, set()).add(pods.needs_rank(template_pod))
    assert by_task == {"master": {False}, "w": {True}, "x": {True}}


def test_pods_created_from_wrapped_templates_get_distinct_ranks():
    job = volcano_job("j").task("a", replicas=2).task("b", replicas=3).task("c", replicas=2)
    ranks = {
        p.name: p.pod["metadata"].get("annotations", {}).get(RANK) for p in pods_of(render(job))
    }
    assert ranks == {
        "j-a-0": None,
        "j-a-1": None,
        "j-b-0": "2",
        "j-b-1": "3",
        "j-b-2": "4",
        "j-c-0": "5",
        "j-c-1": "6",
    }
