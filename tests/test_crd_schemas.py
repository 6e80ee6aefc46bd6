"""Everything autowrap produces satisfies the real AppWrapper and Volcano Job CRD schemas."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from testbed import schemas
from tests.builders import appwrapper, context, pod, policy, volcano_job
from webhook.core import engine
from webhook.shell import policyfiles

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((REPO / "examples").glob("*.yaml"))
SHIPPED = policyfiles.load(REPO / "policies") if (REPO / "policies").is_dir() else None


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_every_valid_example_renders_to_a_schema_valid_appwrapper(example):
    for doc in yaml.safe_load_all(example.read_text()):
        ns = doc["metadata"].get("namespace", "default")
        outcome = engine.admit(doc, engine.Context(policies=SHIPPED, namespace=ns))
        assert outcome.errors == ()
        schemas.assert_valid_appwrapper(outcome.result)


BUILT = [
    pytest.param(volcano_job("one"), id="the default one-task job"),
    pytest.param(
        volcano_job("mw").task("master", replicas=1).task("worker", replicas=3, gpus=8),
        id="master and workers",
    ),
    pytest.param(
        volcano_job("part")
        .task("w", replicas=4, gpus=8, partition={"totalPartitions": 2, "partitionSize": 2})
        .topology("hard", tier=2),
        id="partitions and topology",
    ),
    pytest.param(
        volcano_job("init").task("w", replicas=2, init_containers=1, containers=2),
        id="init and side containers",
    ),
    pytest.param(pod("solo").gpus(1), id="a pod"),
    pytest.param(
        appwrapper("aw", ns="ml").component(volcano_job("inner").task("w", replicas=2).build()),
        id="a user AppWrapper",
    ),
]
FABRIC = policy().topology(
    default={"mode": "hard", "highestTierAllowed": 2},
    partitionDefault={"mode": "soft", "highestTierAllowed": 1},
)


@pytest.mark.parametrize("obj", BUILT)
def test_builder_outputs_render_to_schema_valid_appwrappers(obj):
    outcome = engine.admit(obj.build(), context(FABRIC))
    assert outcome.errors == ()
    schemas.assert_valid_appwrapper(outcome.result)


@pytest.mark.parametrize("obj", [p for p in BUILT if "pod" not in p.id])
def test_every_wrapped_volcano_job_satisfies_the_volcano_crd(obj):
    outcome = engine.admit(obj.build(), context(FABRIC))
    for comp in outcome.result["spec"]["components"]:
        if comp["template"]["kind"] == "Job":
            schemas.assert_valid_volcano_job(comp["template"])


def test_the_schema_check_catches_a_broken_appwrapper():
    outcome = engine.admit(volcano_job("j").build(), context())
    broken = outcome.result
    broken["spec"]["components"][0]["podSets"][0]["replicas"] = "three"
    with pytest.raises(AssertionError, match="podSets"):
        schemas.assert_valid_appwrapper(broken)


def test_the_schema_check_looks_inside_the_embedded_volcano_job():
    outcome = engine.admit(volcano_job("j").build(), context())
    broken = outcome.result
    broken["spec"]["components"][0]["template"]["spec"]["tasks"][0]["replicas"] = "two"
    with pytest.raises(AssertionError, match="replicas"):
        schemas.assert_valid_appwrapper(broken)


def test_the_volcano_schema_check_catches_an_unknown_topology_mode():
    job = volcano_job("j").topology("strict", tier=1).build()
    with pytest.raises(AssertionError, match="networkTopology"):
        schemas.assert_valid_volcano_job(job)


def test_the_crd_field_digest_autowrap_ships_is_what_the_crds_give():
    """webhook/model/crdschema_data.py (unknown-field checks of ``autowrap check``) is generated
    from ../shared/crds; the product carries the digest, never the CRDs."""
    if not schemas.CRD_DIR.is_dir():
        pytest.skip(f"upstream CRDs not found at {schemas.CRD_DIR}; the digest is checked there")
    from tools import crd_schema

    assert crd_schema.generate(schemas.CRD_DIR) == crd_schema.DATA.read_text(encoding="utf-8"), (
        "webhook/model/crdschema_data.py is stale: run python -m tools.crd_schema"
    )
