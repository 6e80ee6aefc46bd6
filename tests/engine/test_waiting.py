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
ADMITTED = {"type": "Admitted", "status": "True", "reason": "Admitted"}
QUEUED = adoption.Status("Queued in LocalQueue 'q' (AppWrapper train); pods wait", "Queued")


def test_the_pending_reason_is_kueues_message_on_the_queued_status() -> None:
    said = waiting.kueue_says(AW, [workload(PENDING)])
    assert said == waiting.Said(reason=REASON)
    status = waiting.with_kueue(QUEUED, AW, said)
    assert status.text.endswith(f"pods wait. Kueue: {REASON}") and status.reason == "Queued"


def test_admitted_and_not_yet_started_says_admitted_not_queued() -> None:
    said = waiting.kueue_says(AW, [workload(PENDING, ADMITTED)])
    assert said == waiting.Said(admitted=True)
    status = waiting.with_kueue(QUEUED, AW, said)
    assert (status.reason, status.text) == (
        "Admitted",
        "Admitted by Kueue; AppWrapper train is starting",
    )


def test_nothing_is_said_for_another_appwrapper_or_in_another_state() -> None:
    reserved = {**PENDING, "status": "True"}
    assert waiting.kueue_says(AW, [workload(reserved)]) == waiting.Said()
    assert waiting.kueue_says(AW, [workload(PENDING, owner="other")]) == waiting.Said()
    assert waiting.kueue_says(None, [workload(PENDING)]) == waiting.Said()
    running = adoption.Status("Admitted by Kueue; AppWrapper train is Running", "Running")
    assert waiting.with_kueue(running, AW, waiting.Said()) == running
    assert waiting.with_kueue(running, AW, waiting.Said(admitted=True)) == running
    assert waiting.with_kueue(QUEUED, AW, waiting.Said()) == QUEUED


def test_an_appwrapper_unsuspended_by_its_editor_is_not_said_admitted() -> None:
    """spec.suspend is the AppWrapper's, which its editors can write; whether Kueue admitted is
    its Workload's, which only Kueue writes."""
    for claimed in ("Running", "Admitted"):
        status = adoption.Status(f"Admitted by Kueue; AppWrapper train is {claimed}", claimed)
        said = waiting.with_kueue(status, AW, waiting.Said(reason=REASON))
        assert said.reason == "Queued", said
        assert said.text == (
            f"Not admitted by Kueue (AppWrapper train); pods wait, gated. Kueue: {REASON}"
        )


def test_a_long_reason_is_cut_to_the_limit() -> None:
    long = {**PENDING, "message": "couldn't assign flavors: " + "flavor x lacks gpu, " * 200}
    reason = waiting.kueue_says(AW, [workload(long)]).reason
    assert len(reason) == waiting.REASON_LIMIT and reason.endswith("…")


def test_a_workload_is_kept_only_while_it_says_something_and_then_only_that() -> None:
    kept = waiting.workload_view(workload(PENDING, {"type": "PodsReady", "status": "False"}))
    assert kept is not None
    assert kept["status"]["conditions"] == [
        {"type": "QuotaReserved", "status": "False", "message": REASON}
    ]
    assert "spec" not in kept and kept["metadata"]["resourceVersion"] == "7"
    assert waiting.appwrapper_of(kept) == "train"
    assert waiting.kueue_says(AW, [kept]) == waiting.Said(reason=REASON)
    assert waiting.workload_view(workload()) is None  # just created: nothing said yet
    assert waiting.workload_view(workload(PENDING, kind="Job")) is None


def test_only_a_reason_said_now_or_before_wakes_the_appwrapper() -> None:
    pending = waiting.workload_view(workload(PENDING))
    admitted = waiting.workload_view(workload(ADMITTED))
    assert waiting.wakes(None, pending) and waiting.wakes(pending, admitted)
    assert waiting.wakes(pending, None)
    assert not waiting.wakes(None, admitted) and not waiting.wakes(admitted, None)


def test_kueues_words_about_autowraps_own_hold_are_not_mirrored() -> None:
    gated = {
        "type": "QuotaReserved",
        "status": "False",
        "reason": "AdmissionGated",
        "message": "Admission is gated by: autowrap.io/adoption",
    }
    cleared = {"type": "QuotaReserved", "status": "False", "reason": "Pending",
               "message": "AdmissionGatedBy cleared, waiting for quota reservation"}  # fmt: skip
    assert waiting.kueue_says(AW, [workload(gated)]) == waiting.Said()
    assert waiting.kueue_says(AW, [workload(cleared)]) == waiting.Said()
    assert waiting.workload_view(workload(cleared)) is None
