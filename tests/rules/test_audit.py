"""Audit enforcement: rejections become warnings at the edge, and the object is still rendered."""

from __future__ import annotations

from tests.builders import policy, volcano_job
from tests.engine.helpers import outcome_of
from webhook.core import engine

BAD = volcano_job("j").task("w", replicas=2).env("w", "RANK", "3").spec(minSuccess=1)


def test_audit_turns_errors_into_warnings_and_keeps_the_result():
    outcome = outcome_of(BAD, policy().audit())
    assert outcome.action is engine.Action.WRAP and outcome.result is not None
    verdict = outcome.verdict()
    assert not verdict.denied and verdict.errors == ()
    assert verdict.warnings == (
        "(audit) spec.tasks[0].template.spec.containers[0].env[0]: " + outcome.errors[0].detail,
        "spec.minSuccess: " + outcome.warnings[0].detail,
    )


def test_enforce_denies_the_same_object():
    verdict = outcome_of(BAD).verdict()
    assert verdict.denied
    assert [e.split(":")[0] for e in verdict.errors] == [
        "spec.tasks[0].template.spec.containers[0].env[0]"
    ]


def test_audit_keeps_the_findings_as_errors_in_the_outcome():
    outcome = outcome_of(BAD, policy().audit())
    assert [str(v.path) for v in outcome.errors] == [
        "spec.tasks[0].template.spec.containers[0].env[0]"
    ]


def test_the_audit_result_is_the_same_object_enforce_would_render():
    assert outcome_of(BAD, policy().audit()).result == outcome_of(BAD).result
