"""AppWrapper fault-tolerance annotations: they parse as the controller parses, within caps."""

from __future__ import annotations

import pytest

from tests.builders import appwrapper, pod, policy, volcano_job
from tests.engine.helpers import outcome_of, rendered_paths
from webhook.model import names

FT = names.FAULT_TOLERANCE_PREFIX
CAPPED = policy().ft_caps(retryLimit="5", warmupGracePeriodDuration="1h")


def _path(key):
    return f"metadata.annotations[{FT}{key}]"


@pytest.mark.parametrize(
    ("key", "value", "want"),
    [
        pytest.param("retryLimit", "3", [], id="a retry limit within the cap"),
        pytest.param("retryLimit", "5", [], id="a retry limit at the cap"),
        pytest.param("warmupGracePeriodDuration", "60m", [], id="a duration at the cap"),
        pytest.param("retryLimit", "6", [(_path("retryLimit"), "error")], id="over the cap"),
        pytest.param("retryLimit", "three", [(_path("retryLimit"), "error")], id="not a number"),
        pytest.param("warmupGracePeriodDuration", "45m", [], id="a duration within the cap"),
        pytest.param(
            "warmupGracePeriodDuration",
            "2h",
            [(_path("warmupGracePeriodDuration"), "error")],
            id="a duration over the cap",
        ),
        pytest.param(
            "warmupGracePeriodDuration",
            "1d",
            [(_path("warmupGracePeriodDuration"), "error")],
            id="a duration with a day unit does not parse",
        ),
        pytest.param(
            "successTTLDuration", "5", [(_path("successTTLDuration"), "error")], id="no unit"
        ),
        pytest.param("successTTLDuration", "1h30m", [], id="a compound duration"),
        pytest.param(
            "admissionGracePeriodDuration",
            "-1m",
            [(_path("admissionGracePeriodDuration"), "error")],
            id="a negative duration",
        ),
        pytest.param("terminalExitCodes", "42,43", [], id="exit codes"),
        pytest.param("admissionGracePeriodDuration", "0s", [], id="a duration of 0 is valid"),
        pytest.param("retryableExitCodes", "1, 255", [], id="exit codes 1 and 255 are the ends"),
        pytest.param(
            "retryableExitCodes", "0", [(_path("retryableExitCodes"), "error")], id="exit code 0"
        ),
        pytest.param(
            "retryableExitCodes", "256", [(_path("retryableExitCodes"), "error")], id="code 256"
        ),
        pytest.param(
            "terminalExitCodes", "0,300", [(_path("terminalExitCodes"), "error")], id="bad codes"
        ),
        pytest.param(
            "deletionGracePeriodDuration",
            "1m",
            [(_path("deletionGracePeriodDuration"), "error")],
            id="an annotation the controller does not know",
        ),
    ],
)
def test_fault_tolerance_annotation(key, value, want):
    job = volcano_job("j").annotate(FT + key, value)
    assert rendered_paths(outcome_of(job, CAPPED)) == want


def test_every_bad_annotation_is_reported_at_once():
    p = pod("p").annotate(FT + "retryLimit", "9").annotate(FT + "failureGracePeriodDuration", "x")
    assert sorted(rendered_paths(outcome_of(p, CAPPED))) == [
        (_path("failureGracePeriodDuration"), "error"),
        (_path("retryLimit"), "error"),
    ]


def test_neither_another_annotation_nor_a_malformed_one_hides_the_ones_after_it():
    p = (
        pod("p")
        .annotate("example.com/team", "vision")
        .annotate(FT + "failureGracePeriodDuration", "x")
        .annotate(FT + "retryLimit", "9")
    )
    assert rendered_paths(outcome_of(p, CAPPED)) == [
        (_path("failureGracePeriodDuration"), "error"),
        (_path("retryLimit"), "error"),
    ]


def test_a_submitted_appwrapper_is_checked_too():
    aw = appwrapper("aw", ns="ml").fault_tolerance("retryLimit", "8").component(pod("p").build())
    assert rendered_paths(outcome_of(aw, CAPPED)) == [(_path("retryLimit"), "error")]


def test_the_message_names_the_cap():
    outcome = outcome_of(volcano_job("j").annotate(FT + "retryLimit", "6"), CAPPED)
    assert "cap of 5" in outcome.errors[0].detail


def test_an_unknown_annotation_names_every_known_one():
    outcome = outcome_of(volcano_job("j").annotate(FT + "retrylimit", "3"), CAPPED)
    (violation,) = outcome.errors
    assert str(violation.path) == _path("retrylimit")
    assert violation.detail.endswith(
        "Known: admissionGracePeriodDuration, warmupGracePeriodDuration, "
        "failureGracePeriodDuration, retryPausePeriodDuration, forcefulDeletionGracePeriodDuration, "
        "deletionOnFailureGracePeriodDuration, successTTLDuration, retryLimit, terminalExitCodes, "
        "retryableExitCodes"
    )
