"""Audit leaves a record: a finding an Audit policy lets through is counted, logged on the
request line, written on the AppWrapper and raised as an Event on the adopted object."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import orjson
import pytest

from testbed.cluster.cluster import FakeCluster
from testbed.cluster.resources import EVENTS, VCJOBS
from testbed.pki import ServingPki
from testbed.redirect import REPO, start_cluster
from tests.adopt.cluster import ALICE, NAMESPACE, running_cluster, vcjob
from tests.support.waiting import eventually
from webhook.core import audit, engine
from webhook.core.policy import PolicySet
from webhook.model import names
from webhook.model.fields import rule_family
from webhook.shell import policyfiles

MASTER_ADDR = "spec.tasks[0].template.spec.containers[0].env[0]"


def _audited_job() -> dict[str, Any]:
    job = vcjob(workers=1)
    job["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["env"] = [
        {"name": "MASTER_ADDR", "value": "elsewhere"}
    ]
    return job


def _policies() -> PolicySet:
    return policyfiles.load(REPO / "policies")


def test_findings_name_policy_rule_family_and_field() -> None:
    context = engine.Context(policies=_policies(), namespace=NAMESPACE,
                             namespace_labels={"autowrap.io/tier": "research"})  # fmt: skip
    outcome = engine.admit(_audited_job(), context)
    [finding] = audit.audited(outcome)
    assert (finding.policy, finding.rule, finding.enforcement, finding.field) == (
        "research-audit", "env", "Audit", MASTER_ADDR
    )  # fmt: skip
    assert "MASTER_ADDR is set by autowrap" in finding.message
    # Under Enforce the same finding is counted as enforced, and nothing is audited.
    enforced = engine.admit(_audited_job(), engine.Context(policies=_policies(), namespace="ml"))
    assert [(f.policy, f.rule, f.enforcement) for f in audit.findings(enforced)] == [
        ("default", "env", "Enforce")
    ]
    assert audit.audited(enforced) == []
    # The annotation round-trips.
    appwrapper: dict[str, Any] = {"metadata": {}}
    audit.annotate(appwrapper, [finding])
    assert audit.recorded(appwrapper) == [finding]
    assert rule_family("webhook.core.rules.pod_templates") == "pod-templates"
    assert rule_family("webhook.core.kinds.volcano_rules") == "volcano"


async def test_an_audited_job_is_counted_logged_annotated_and_raises_an_event(
    webhook_pki: ServingPki,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="autowrap")
    async with running_cluster(webhook_pki, tmp_path, pods=False) as cluster:
        tier = {"autowrap.io/tier": "research"}
        cluster.api.add_namespace(NAMESPACE, tier)
        await eventually(lambda: cluster.sees_namespace(NAMESPACE, tier), what="namespace labels")
        capsys.readouterr()
        await cluster.api.create(VCJOBS, _audited_job(), user=ALICE)
        await cluster.settle()

        aw = cluster.appwrapper()
        assert aw is not None
        recorded = orjson.loads(aw["metadata"]["annotations"][names.AUDIT_FINDINGS_ANNOTATION])
        assert recorded == [{"policy": "research-audit", "rule": "env", "field": MASTER_ADDR,
                             "message": recorded[0]["message"]}]  # fmt: skip
        assert recorded[0]["message"].startswith("MASTER_ADDR is set by autowrap")

        events = [e for e in cluster.api.store.list(EVENTS, NAMESPACE)
                  if e["involvedObject"]["name"] == "train" and e["reason"] == "PolicyAudit"]  # fmt: skip
        assert len(events) == 1 and events[0]["type"] == "Warning"
        assert events[0]["involvedObject"]["kind"] == "Job"
        assert events[0]["message"].startswith(
            f"policy research-audit (Audit), rule env, field {MASTER_ADDR}: MASTER_ADDR"
        )
        assert "AdmissionWarning" not in cluster.events()  # said once, as PolicyAudit

        lines = [orjson.loads(line) for line in capsys.readouterr().out.splitlines()
                 if line.startswith("{")]  # fmt: skip
        [validated] = [line for line in lines if line.get("msg") == "admission"
                       and line.get("webhook") == "validate" and line.get("kind") == "Job"]  # fmt: skip
        assert validated["findings"] == 1 and validated["finding_rules"] == ["env"]
        assert (validated["policy"], validated["enforcement"]) == ("research-audit", "Audit")

        exposition = cluster.running.state.metrics.exposition().decode()
        assert (
            'autowrap_policy_findings_total{enforcement="Audit",policy="research-audit",'
            'rule="env"} 1.0'
        ) in exposition  # once: the AppWrapper autowrap made is not counted again


async def test_redirect_mode_annotates_the_appwrapper_it_creates(
    webhook_pki: ServingPki, fake_kube: FakeCluster, fake_kubeconfig: Path, tmp_path: Path
) -> None:
    started, stop = await start_cluster(
        webhook_pki, fake_kube, fake_kubeconfig, tmp_path,
        namespaces={NAMESPACE: {"autowrap.io/tier": "research"}},
    )  # fmt: skip
    try:
        result = await started.create(_audited_job())
        assert not result.allowed  # redirect: the AppWrapper stands in for the Job
        [aw] = started.appwrappers().values()
        [recorded] = orjson.loads(aw["metadata"]["annotations"][names.AUDIT_FINDINGS_ANNOTATION])
        assert (recorded["policy"], recorded["rule"], recorded["field"]) == (
            "research-audit", "env", MASTER_ADDR
        )  # fmt: skip
    finally:
        await stop()
