"""When a user's env entry already says what autowrap would set (``plumbing.env.same_entry``):
the same value, or a reference to the same field however it is quoted, is no conflict."""

from __future__ import annotations

import pytest

from webhook.core.plumbing.env import same_entry


def _ref(path: str) -> dict:
    return {"valueFrom": {"fieldRef": {"fieldPath": path}}}


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [
        pytest.param({"value": "8"}, {"value": "8"}, True, id="equal values"),
        pytest.param({"value": "8"}, {"value": "4"}, False, id="different values"),
        pytest.param({"value": 8}, {"value": "8"}, True, id="a number and its string"),
        pytest.param({}, {"value": ""}, True, id="no value is the empty value"),
        pytest.param(
            _ref("metadata.annotations['volcano.sh/task-index']"),
            _ref('metadata.annotations["volcano.sh/task-index"]'),
            True,
            id="the same field, quoted either way",
        ),
        pytest.param(
            _ref("metadata.annotations['volcano.sh/task-index']"),
            _ref("metadata.annotations['volcano.sh/task-spec']"),
            False,
            id="another field",
        ),
        pytest.param(
            _ref("metadata.name"), {"value": "metadata.name"}, False, id="a ref and a value"
        ),
        pytest.param(_ref("metadata.name"), {}, False, id="a ref and nothing"),
        pytest.param(
            {"valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
            {"valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
            True,
            id="the same secret key",
        ),
        pytest.param(
            {"valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
            {"valueFrom": {"secretKeyRef": {"name": "s", "key": "other"}}},
            False,
            id="another secret key",
        ),
    ],
)
def test_same_entry(a, b, same):
    assert same_entry(a, b) is same
    assert same_entry(b, a) is same
