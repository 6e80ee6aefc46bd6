"""autowrap's own annotations on a workload: nproc, master task, master port."""

from __future__ import annotations

import pytest

from tests.builders import volcano_job
from tests.engine.helpers import outcome_of, rendered_paths
from webhook.model import names

JOB = volcano_job("j").task("master", replicas=1).task("w", replicas=2)


def _path(key):
    return f"metadata.annotations[{key}]"


@pytest.mark.parametrize(
    ("key", "value", "want"),
    [
        pytest.param(names.NPROC_ANNOTATION, "8", [], id="nproc 8"),
        pytest.param(
            names.NPROC_ANNOTATION, "0", [(_path(names.NPROC_ANNOTATION), "error")], id="nproc 0"
        ),
        pytest.param(
            names.NPROC_ANNOTATION,
            "auto",
            [(_path(names.NPROC_ANNOTATION), "error")],
            id="nproc auto is not a positive integer",
        ),
        pytest.param(
            names.NPROC_ANNOTATION, "-2", [(_path(names.NPROC_ANNOTATION), "error")], id="negative"
        ),
        pytest.param(names.MASTER_TASK_ANNOTATION, "w", [], id="a known master task"),
        pytest.param(
            names.MASTER_TASK_ANNOTATION,
            "launcher",
            [(_path(names.MASTER_TASK_ANNOTATION), "error")],
            id="an unknown master task",
        ),
        pytest.param(names.MASTER_PORT_ANNOTATION, "29500", [], id="port 29500"),
        pytest.param(names.MASTER_PORT_ANNOTATION, "65535", [], id="port 65535"),
        pytest.param(
            names.MASTER_PORT_ANNOTATION,
            "65536",
            [(_path(names.MASTER_PORT_ANNOTATION), "error")],
            id="port 65536",
        ),
        pytest.param(
            names.MASTER_PORT_ANNOTATION,
            "0",
            [(_path(names.MASTER_PORT_ANNOTATION), "error")],
            id="port 0",
        ),
        pytest.param(
            names.MASTER_PORT_ANNOTATION,
            "http",
            [(_path(names.MASTER_PORT_ANNOTATION), "error")],
            id="a port name",
        ),
    ],
)
def test_annotation(key, value, want):
    assert rendered_paths(outcome_of(JOB.clone().annotate(key, value))) == want


def test_all_bad_annotations_are_reported_at_once():
    job = (
        JOB.clone()
        .annotate(names.NPROC_ANNOTATION, "x")
        .annotate(names.MASTER_TASK_ANNOTATION, "nope")
        .annotate(names.MASTER_PORT_ANNOTATION, "99999")
    )
    assert rendered_paths(outcome_of(job)) == [
        (_path(names.NPROC_ANNOTATION), "error"),
        (_path(names.MASTER_TASK_ANNOTATION), "error"),
        (_path(names.MASTER_PORT_ANNOTATION), "error"),
    ]


def test_unknown_master_task_lists_the_tasks():
    outcome = outcome_of(JOB.clone().annotate(names.MASTER_TASK_ANNOTATION, "nope"))
    assert "master, w" in outcome.errors[0].detail
