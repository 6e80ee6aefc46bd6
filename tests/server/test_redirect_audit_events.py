"""Redirect mode leaves the same record of an audited finding as adopt mode: a ``PolicyAudit``
Warning Event per finding, here on the AppWrapper autowrap creates (the object itself is never
stored), besides the annotation, the metric and the request line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from testbed.cluster.resources import EVENTS, VCJOBS
from testbed.pki import ServingPki
from testbed.policies import in_mode
from testbed.redirect import REPO
from tests.adopt.cluster import ALICE, NAMESPACE, running_cluster, vcjob
from tests.support.waiting import eventually
from webhook.shell import server

MASTER_ADDR = "spec.tasks[0].template.spec.containers[0].env[0]"


def _job(env_value: str) -> dict[str, Any]:
    job = vcjob(workers=1)
    job["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["env"] = [
        {"name": "MASTER_ADDR", "value": env_value}
    ]
    return job


async def _redirected(cluster: Any, job: dict[str, Any], *, dry_run: bool = False) -> None:
    with pytest.raises(Exception, match="was wrapped into AppWrapper"):
        await cluster.api.create(VCJOBS, job, user=ALICE, dry_run=dry_run)
    # The Events are started before the answer is sent, and never waited for: wait for them.
    sink = cluster.running.state.audit_events
    assert sink is not None
    await sink.flush()


@pytest.mark.parametrize("labels", [{"autowrap.io/tier": "research"}, {}], ids=["audit", "enforce"])
async def test_an_audited_finding_raises_an_event_on_the_appwrapper_in_redirect_mode(
    webhook_pki: ServingPki, tmp_path: Path, labels: dict[str, str]
) -> None:
    async with running_cluster(webhook_pki, tmp_path, upstream=False, controller=False) as cluster:
        state = cluster.running.state
        assert state.policy_path is not None
        in_mode(REPO / "policies", state.policy_path, "Redirect")
        server.reload_policies(state)
        cluster.api.add_namespace(NAMESPACE, labels)
        await eventually(lambda: cluster.sees_namespace(NAMESPACE, labels), what="namespace labels")
        if not labels:  # under Enforce the same job is refused, and nothing is raised
            with pytest.raises(Exception, match="MASTER_ADDR"):
                await cluster.api.create(VCJOBS, _job("elsewhere"), user=ALICE)
            assert cluster.appwrappers() == []
            assert cluster.api.store.list(EVENTS, NAMESPACE) == []
            return
        await _redirected(cluster, _job("elsewhere"))
        [aw] = cluster.appwrappers()
        events = [
            e for e in cluster.api.store.list(EVENTS, NAMESPACE) if e["reason"] == "PolicyAudit"
        ]
        assert len(events) == 1
        [event] = events
        assert event["type"] == "Warning"
        involved = event["involvedObject"]
        assert (involved["kind"], involved["name"], involved["uid"]) == (
            "AppWrapper", aw["metadata"]["name"], aw["metadata"]["uid"]
        )  # fmt: skip
        assert event["message"].startswith(
            f"policy research-audit (Audit), rule env, field {MASTER_ADDR}: MASTER_ADDR"
        )
        # A dry run creates nothing, and raises nothing.
        dry = _job("elsewhere-too")
        dry["metadata"]["name"] = "dry"
        await _redirected(cluster, dry, dry_run=True)
        assert [e["reason"] for e in cluster.api.store.list(EVENTS, NAMESPACE)] == ["PolicyAudit"]
