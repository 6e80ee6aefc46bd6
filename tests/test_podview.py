"""The per-pod view: every pod a produced object makes the cluster run, resolved as kubelet does."""

from __future__ import annotations

import pytest

from tests.builders import appwrapper, pod, policy, volcano_job
from tests.engine.helpers import outcome_of, render
from tests.engine.simulate import pods_of
from webhook.cli import podview
from webhook.model import names


def _rows(obj):
    return {r.pod: r for r in podview.pods(obj)}


@pytest.mark.parametrize(
    "job",
    [
        pytest.param(volcano_job("a").task("w", replicas=3, gpus=2), id="one task"),
        pytest.param(
            volcano_job("b").task("m", replicas=1).task("w", replicas=3, gpus=8).master("w"),
            id="the master task second",
        ),
        pytest.param(
            volcano_job("c").task("x", replicas=2).task("y", replicas=2).task("z", replicas=1),
            id="three tasks",
        ),
    ],
)
def test_the_view_agrees_with_the_test_suite_s_own_pod_simulation(job):
    rendered = render(job)
    rows = _rows(rendered)
    for sim in pods_of(rendered):
        env = sim.env()
        row = rows[sim.name]
        assert (row.node_rank, row.master_addr, row.master_port) == (
            env["NODE_RANK"],
            env["MASTER_ADDR"],
            env["MASTER_PORT"],
        )
        assert (row.nnodes, row.nproc, row.world_size) == (
            env["NNODES"],
            env["NPROC_PER_NODE"],
            env["WORLD_SIZE"],
        )
    assert len(rows) == len(pods_of(rendered))


def test_a_later_task_s_rank_comes_from_the_pod_webhook():
    rows = _rows(render(volcano_job("j").task("a", replicas=2).task("b", replicas=3)))
    assert [rows[f"j-b-{i}"].node_rank for i in range(3)] == ["2", "3", "4"]
    assert rows["j-b-2"].notes == ()


def test_a_wrapped_pod_and_its_service_give_one_row():
    rows = podview.pods(render(pod("solo").wrap().gpus(2)))
    assert [(r.pod, r.node_rank, r.nnodes, r.nproc, r.world_size) for r in rows] == [
        ("solo", "0", "1", "2", "2")
    ]


def test_gates_come_from_the_pod_templates():
    gated = (
        volcano_job("g")
        .task("w", replicas=2)
        .template_spec("w", schedulingGates=[{"name": names.ADMISSION_GATE}])
    )
    rows = podview.pods(gated.build(), "ml")
    assert [r.gates for r in rows] == [(names.ADMISSION_GATE,)] * 2


def test_an_object_that_was_not_plumbed_shows_no_values():
    (row,) = podview.pods(volcano_job("raw").build(), "ml")
    assert (row.pod, row.node_rank, row.master, row.world_size) == ("raw-worker-0", "-", "-", "-")


def test_objects_without_pods_give_no_rows():
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}
    assert podview.pods(cm) == []


def test_a_submitted_appwrapper_shows_its_components_pods():
    submitted = appwrapper("aw").component(volcano_job("inner").task("w", replicas=2).build())
    completed = outcome_of(submitted, policy()).result
    rows = _rows(completed)
    assert sorted(rows) == ["inner-w-0", "inner-w-1"]
    assert rows["inner-w-1"].node_rank == "1" and rows["inner-w-1"].nnodes == "2"


def test_kubelet_expansion_and_downward_api():
    pod_obj = {
        "metadata": {"name": "p", "namespace": "ml", "labels": {"l": "L"}, "annotations": {}},
    }
    container = {
        "env": [
            {"name": "A", "value": "x"},
            {"name": "B", "value": "$(A)-$(C)-$$(A)"},
            {"name": "C", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['l']"}}},
            {"name": "N", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
            {"name": "R", "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['r']"}}},
            {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "A", "value": "last wins"},
        ]
    }
    env, notes = podview.resolve_env(pod_obj, container)
    assert env == {"A": "last wins", "B": "x-$(C)-$(A)", "C": "L", "N": "ml", "R": "", "IP": ""}
    assert notes == [
        "B: $(C) stays as written: kubelet expands only variables defined above it in env; "
        "move the entry below them",
        "R: the pod has no annotation r, so kubelet gives an empty value",
        "IP: the pod's IP (status.podIP) is known only once the pod runs",
    ]


def test_entries_that_refer_to_injected_variables_are_shown_expanded():
    job = (
        volcano_job("ref")
        .task("master", replicas=1)
        .task("worker", replicas=2)
        .env("master", "DIST_URL", "tcp://$(MASTER_ADDR):$(MASTER_PORT)")
        .env("worker", "DIST_URL", "tcp://$(MASTER_ADDR):$(MASTER_PORT)")
    )
    rows = _rows(render(job))
    assert {name: row.expanded for name, row in rows.items()} == {
        pod: (("DIST_URL", "tcp://ref-master-0.ref:23456"),)
        for pod in ("ref-master-0", "ref-worker-0", "ref-worker-1")
    }


def test_a_reference_to_a_later_entry_is_shown_literal_with_the_fix():
    job = (
        volcano_job("late")
        .task("w", replicas=1)
        .env("w", "URL", "$(HOST):80")
        .env("w", "HOST", "h")
        .env("w", "COST", "$$(HOST)")
    )
    (row,) = podview.pods(render(job))
    assert row.expanded == (("URL", "$(HOST):80"),)
    assert any("URL: $(HOST) stays as written" in n and "below" in n for n in row.notes)
