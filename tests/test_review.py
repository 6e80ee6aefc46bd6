"""``webhook.model.review.parse``: the AdmissionReview envelope read from a request body."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from webhook.model import review

Obj = dict[str, Any]


def body(request: Obj | None = None, **envelope: Any) -> bytes:
    request = request if request is not None else {
        "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
        "kind": {"group": "batch.volcano.sh", "version": "v1alpha1", "kind": "Job"},
        "resource": {"group": "batch.volcano.sh", "version": "v1alpha1", "resource": "jobs"},
        "namespace": "ml",
        "operation": "CREATE",
        "userInfo": {"username": "alice", "groups": ["team-a"], "extra": {"scope": ["x"]}},
        "object": {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
                   "metadata": {"name": "train"}, "spec": {"minAvailable": 2, "flag": True}},
        "dryRun": True,
    }  # fmt: skip
    doc = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    doc.update(envelope)
    return orjson.dumps(doc)


def test_a_review_is_read_with_its_object_intact() -> None:
    parsed = review.parse(body())

    request = parsed.request
    assert (request.uid, request.kind.kind, request.namespace, request.operation) == (
        "705ab4f5-6393-11e8-b7cc-42010a800002", "Job", "ml", "CREATE"
    )  # fmt: skip
    assert request.user_info.username == "alice"
    assert request.user_info.groups == ("team-a",)
    assert request.dry_run is True
    assert orjson.dumps(request.object) == orjson.dumps(orjson.loads(body())["request"]["object"])


@pytest.mark.parametrize(
    "raw",
    [
        body(),
        body({"uid": "u", "kind": {"kind": "Pod"}, "operation": "DELETE"}),
        body({"uid": "u", "kind": {"kind": "Pod"}, "operation": "CREATE", "object": None}),
        body({"uid": "u", "kind": {"kind": "Pod"}, "operation": "CREATE", "oldObject": {"a": 1}}),
    ],
)
def test_the_decoded_envelope_equals_pydantic_reading_the_json_itself(raw: bytes) -> None:
    assert review.parse(raw) == review.AdmissionReview.model_validate_json(raw)


@pytest.mark.parametrize(
    "number", [123456789012345678901234567890, -(2**63) - 1, 2**64, 2**63 - 1, 10**18]
)
def test_integers_of_any_size_are_read_exactly(number: int) -> None:
    raw = body().replace(b'"minAvailable":2', b'"minAvailable":' + str(number).encode())

    parsed = review.parse(raw)

    assert parsed.request.object is not None
    read = parsed.request.object["spec"]["minAvailable"]
    assert type(read) is int and read == number


@pytest.mark.parametrize(
    ("raw", "wanted"),
    [
        (b"", "empty body"),
        (b"{nope", "body is not JSON"),
        (b"[]", "not an admission.k8s.io/v1 AdmissionReview: body"),
        (body(apiVersion="admission.k8s.io/v1beta1"), "apiVersion"),
        (body({"kind": {"kind": "Pod"}, "operation": "CREATE"}), "request.uid"),
        (body({"uid": "u", "kind": {"kind": "Pod"}, "operation": "PATCH"}), "request.operation"),
        (body({"uid": "u", "kind": {"kind": "Pod"}, "operation": "CREATE", "object": [1]}),
         "request.object"),
    ],
)  # fmt: skip
def test_a_body_that_is_not_a_review_says_where(raw: bytes, wanted: str) -> None:
    with pytest.raises(review.BadReview) as caught:
        review.parse(raw)

    assert caught.value.status == 400
    assert wanted in caught.value.reason


def test_the_budget_allows_for_the_apiservers_rounding_up_and_keeps_a_margin() -> None:
    from webhook.admission import ANSWER_MARGIN, usable_budget

    # kube-apiserver sends ?timeout=10s when 9.01 s may be left: count on 9 s, less the margin.
    assert usable_budget(10.0) == 9.0 - ANSWER_MARGIN
    assert usable_budget(1.0) == 0.5 - ANSWER_MARGIN
    assert usable_budget(None) == usable_budget(10.0)
    assert all(usable_budget(t) < t - 0.5 for t in (1.0, 2.0, 5.0, 15.0, 30.0))
