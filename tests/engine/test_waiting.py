"""Kueue's reason for not admitting yet, as the object's status mirrors it (``webhook.core.waiting``)."""

from __future__ import annotations

from typing import Any

from webhook.core import adoption, waiting

Obj = dict[str, Any]
REASON = ("couldn't assign flavors to pod set train-1: insufficient unused quota for "
          "nvidia.com/gpu in flavor a100, 16 more needed")  # fmt: skip
AW = {"metadata": {"name": "train", "uid": "aw-uid"}}


def workload(*conditions: Obj, owner: str = "aw-uid", kind: str = "AppWrapper") -> Obj:
    return {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "Workload",
            "metadata": {"name": "appwrapper-train-1", "namespace": "ml", "resourceVersion": "7",
                         "labels": {"kueue.x-k8s.io/job-uid": owner},
                         "ownerReferences": [{"apiVersion": "workload.codeflare.dev/v1beta2",
                                              "kind": kind, "name": "train", "uid": owner,
                                              "controller": True}]},
            "spec": {"podSets": [{"name": "train-0", "count": 4}]},
            "status": {"conditions": list(conditions)}}  # fmt: skip


PENDING = {"type": "QuotaReserved", "status": "False", "reason": "Pending", "message": REASON}
QUEUED = adoption.Status("Queued in LocalQueue 'q' (AppWrapper train); pods wait", "Queued")


def test_the_pending_reason_is_kueues_message_on_the_queued_status() -> None:
    reason = waiting.pending_reason(AW, [workload(PENDING)])
    assert reason == REASON
    status = waiting.with_reason(QUEUED, reason)
    assert status.text.endswith(f"pods wait. Kueue: {REASON}") and status.reason == "Queued"


def test_nothing_is_said_once_admitted_for_another_appwrapper_or_in_another_state() -> None:
    admitted = {"type": "Admitted", "status": "True", "reason": "Admitted"}
    reserved = {**PENDING, "status": "True"}
    assert waiting.pending_reason(AW, [workload(PENDING, admitted)]) == ""
    assert waiting.pending_reason(AW, [workload(reserved)]) == ""
    assert waiting.pending_reason(AW, [workload(PENDING, owner="other")]) == ""
    assert waiting.pending_reason(None, [workload(PENDING)]) == ""
    running = adoption.Status("Admitted by Kueue; AppWrapper train is Running", "Running")
    assert waiting.with_reason(running, REASON) == running


def test_a_long_reason_is_cut_to_the_limit() -> None:
    long = {**PENDING, "message": "couldn't assign flavors: " + "flavor x lacks gpu, " * 200}
    reason = waiting.pending_reason(AW, [workload(long)])
    assert len(reason) == waiting.REASON_LIMIT and reason.endswith("…")


def test_the_kept_workload_is_its_owner_and_the_conditions_read() -> None:
    kept = waiting.workload_view(workload(PENDING, {"type": "PodsReady", "status": "False"}))
    assert kept is not None
    assert [c["type"] for c in kept["status"]["conditions"]] == ["QuotaReserved"]
    assert "spec" not in kept and kept["metadata"]["resourceVersion"] == "7"
    assert waiting.appwrapper_of(kept) == "train"
    assert waiting.workload_view(workload(PENDING, kind="Job")) is None
