"""docs/migration.md: every example it names renders, pod by pod, with the values it states.

Each example under examples/migration/ (and the invalid one that keeps Volcano's pytorch plugin)
goes through ``autowrap render --pods -o json`` with the repository's policies, as a reader would
run it; the expected rows are the page's, written out here.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from webhook.cli import main as cli

REPO = Path(__file__).resolve().parents[1]
PAGE = REPO / "docs" / "migration.md"
MIGRATION = REPO / "examples" / "migration"

# (pod, task, node rank, MASTER_ADDR:MASTER_PORT, NNODES, NPROC, WORLD_SIZE) per example.
EXPECTED: dict[str, list[tuple[str, str, str, str, str, str, str]]] = {
    "volcano-plugin-torchrun": [
        ("plugin-torchrun-master-0", "master", "0", "plugin-torchrun-master-0.plugin-torchrun:23456", "4", "8", "32"),
        ("plugin-torchrun-worker-0", "worker", "1", "plugin-torchrun-master-0.plugin-torchrun:23456", "4", "8", "32"),
        ("plugin-torchrun-worker-1", "worker", "2", "plugin-torchrun-master-0.plugin-torchrun:23456", "4", "8", "32"),
        ("plugin-torchrun-worker-2", "worker", "3", "plugin-torchrun-master-0.plugin-torchrun:23456", "4", "8", "32"),
    ],
    "volcano-plugin-launcherless": [
        ("plugin-script-master-0", "master", "0", "plugin-script-master-0.plugin-script:23456", "4", "1", "4"),
        ("plugin-script-worker-0", "worker", "1", "plugin-script-master-0.plugin-script:23456", "4", "1", "4"),
        ("plugin-script-worker-1", "worker", "2", "plugin-script-master-0.plugin-script:23456", "4", "1", "4"),
        ("plugin-script-worker-2", "worker", "3", "plugin-script-master-0.plugin-script:23456", "4", "1", "4"),
    ],
    "volcano-plugin-helper-task": [
        ("plugin-eval-master-0", "master", "0", "plugin-eval-master-0.plugin-eval:23456", "3", "8", "24"),
        ("plugin-eval-worker-0", "worker", "1", "plugin-eval-master-0.plugin-eval:23456", "3", "8", "24"),
        ("plugin-eval-worker-1", "worker", "2", "plugin-eval-master-0.plugin-eval:23456", "3", "8", "24"),
        ("plugin-eval-evaluator-0", "evaluator", "-", "plugin-eval-master-0.plugin-eval:23456", "-", "-", "-"),
    ],
    "volcano-plugin-no-master-task": [
        ("plugin-chief-worker-0", "worker", "1", "plugin-chief-chief-0.plugin-chief:23456", "4", "8", "32"),
        ("plugin-chief-worker-1", "worker", "2", "plugin-chief-chief-0.plugin-chief:23456", "4", "8", "32"),
        ("plugin-chief-worker-2", "worker", "3", "plugin-chief-chief-0.plugin-chief:23456", "4", "8", "32"),
        ("plugin-chief-chief-0", "chief", "0", "plugin-chief-chief-0.plugin-chief:23456", "4", "8", "32"),
    ],
    "pytorchjob-conventions": [
        ("pj-train-master-0", "master", "0", "pj-train-master-0.pj-train:23456", "4", "4", "16"),
        ("pj-train-worker-0", "worker", "1", "pj-train-master-0.pj-train:23456", "4", "4", "16"),
        ("pj-train-worker-1", "worker", "2", "pj-train-master-0.pj-train:23456", "4", "4", "16"),
        ("pj-train-worker-2", "worker", "3", "pj-train-master-0.pj-train:23456", "4", "4", "16"),
    ],
    "arena-appwrapperjob": [
        ("sft-worker-0", "worker", "0", "sft-worker-0.sft:29500", "2", "8", "16"),
        ("sft-worker-1", "worker", "1", "sft-worker-0.sft:29500", "2", "8", "16"),
    ],
}  # fmt: skip


@pytest.fixture
def autowrap(capsys: pytest.CaptureFixture[str]) -> Callable[..., tuple[int, str, str]]:
    """``autowrap <args> --policy policies/`` as a reader of the page runs it: its exit code,
    stdout and stderr."""

    def run(*args: str) -> tuple[int, str, str]:
        capsys.readouterr()
        code = cli.main([*args, "--policy", str(REPO / "policies")])
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return run


@pytest.fixture
def render(autowrap: Callable[..., tuple[int, str, str]]) -> Callable[..., tuple[Any, str]]:
    """``autowrap render <file> <args> -o json``, which must succeed: its JSON and stderr."""

    def run(path: Path, *args: str) -> tuple[Any, str]:
        code, out, err = autowrap("render", str(path), *args, "-o", "json")
        assert code == 0, err
        return json.loads(out), err

    return run


def _example(name: str) -> Path:
    return MIGRATION / f"{name}.yaml"


def _only(stored: Any, kind: str) -> Any:
    """The one document of ``kind`` that ``render`` printed."""
    (found,) = [d for d in stored["items"] if d["kind"] == kind]
    return found


def _rows(report: Any) -> list[tuple[str, ...]]:
    (workload,) = report["workloads"]
    return [
        (
            p["name"],
            p["task"],
            p["nodeRank"],
            f"{p['masterAddr']}:{p['masterPort']}",
            p["nnodes"],
            p["nprocPerNode"],
            p["worldSize"],
        )
        for p in workload["pods"]
    ]


def test_every_migration_example_is_on_the_page_and_checked_here():
    files = {p.stem for p in MIGRATION.glob("*.yaml")}
    assert files == set(EXPECTED)
    page = PAGE.read_text()
    for name in files:
        assert f"(../examples/migration/{name}.yaml)" in page, name


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_render_pods_shows_the_values_the_page_states(name, render):
    report, err = render(_example(name), "--pods")
    assert "warning" not in err and "error" not in err
    assert _rows(report) == EXPECTED[name]
    for pod in report["workloads"][0]["pods"]:
        # Wrapped in adopt mode: each pod waits for Kueue, with no note on its values.
        assert pod["schedulingGates"] == ["autowrap.io/admission"] and pod["notes"] == []


@pytest.mark.parametrize("name", ["volcano-plugin-launcherless", "pytorchjob-conventions"])
def test_rank_is_each_pod_s_node_rank(name, render):
    """The page says RANK equals the node rank (as the plugin's and the operator's did for a
    single master): both entries are the same per-pod value in every container."""
    stored, _ = render(_example(name))
    job = _only(stored, "Job")
    for task in job["spec"]["tasks"]:
        for container in task["template"]["spec"]["containers"]:
            env = {e["name"]: {k: v for k, v in e.items() if k != "name"} for e in container["env"]}
            assert env["RANK"] == env["NODE_RANK"]


def test_the_arena_flags_land_where_the_page_says(render):
    stored, _ = render(_example("arena-appwrapperjob"))
    aw = _only(stored, "AppWrapper")
    assert aw["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "gpu-queue"
    assert aw["metadata"]["annotations"]["workload.codeflare.dev.appwrapper/retryLimit"] == "5"
    job = aw["spec"]["components"][0]["template"]
    env = {
        e["name"]: e.get("value")
        for e in job["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["env"]
    }
    assert (env["workers"], env["gpus"]) == ("2", "8")  # the user's own, not injected
    assert (env["MASTER_PORT"], env["LOCAL_WORLD_SIZE"]) == ("29500", "8")


PLUGIN_KEPT = REPO / "examples" / "invalid" / "pytorch-plugin-port.yaml"


def test_keeping_the_plugin_is_refused_with_the_message_on_the_page(autowrap):
    code, _, err = autowrap("check", str(PLUGIN_KEPT))
    assert code == 1
    (line,) = [x for x in err.splitlines() if x.startswith("error:")]
    assert line in PAGE.read_text()


def test_under_audit_render_pods_shows_the_plugin_s_values(render):
    report, err = render(PLUGIN_KEPT, "--pods", "-l", "autowrap.io/tier=research")
    assert "(audit) spec.plugins[pytorch]" in err
    rows = {r[0]: r for r in _rows(report)}
    # The plugin's MASTER_PORT and WORLD_SIZE (pods); autowrap's NNODES and NPROC stay.
    assert rows["plugin-kept-worker-0"] == (
        "plugin-kept-worker-0", "worker", "1", "plugin-kept-master-0.plugin-kept:5000", "4", "8", "4"
    )  # fmt: skip
    (note,) = report["workloads"][0]["pods"][0]["notes"]
    assert note in PAGE.read_text()
