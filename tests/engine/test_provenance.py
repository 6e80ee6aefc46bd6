"""Who made an AppWrapper: the AppWrapper operator's user labels where present, else the
create's field manager in managedFields; never an annotation anyone could copy."""

from __future__ import annotations

from typing import Any

import pytest

from webhook.core import provenance
from webhook.model import names

ME = provenance.Me("system:serviceaccount:autowrap-system:autowrap", "3b9c7d1e-uid")


def _appwrapper(labels: dict[str, str] | None = None, managed: list[Any] | None = None) -> Any:
    metadata: dict[str, Any] = {"name": "train", "namespace": "ml", "labels": labels or {}}
    metadata["annotations"] = {names.SPEC_HASH_ANNOTATION: "copied",
                               names.REQUESTED_BY_ANNOTATION: "alice"}  # fmt: skip
    if managed is not None:
        metadata["managedFields"] = managed
    return {"apiVersion": names.APPWRAPPER_API_VERSION, "kind": "AppWrapper",
            "metadata": metadata, "spec": {"components": []}}  # fmt: skip


@pytest.mark.parametrize(
    ("value", "label"),
    [
        ("system:serviceaccount:autowrap-system:autowrap",
         "system_serviceaccount_autowrap-system_autowrap"),
        ("alice@example.com", "alice_example.com"),
        (":leading and trailing:", "leading_and_trailing"),
        ("a" * 70, "a" * 63),
        ("x" * 62 + ":y", "x" * 62),  # cut to 63 first, then the trailing "_" is trimmed
        ("", ""),
    ],
)  # fmt: skip
def test_labels_are_sanitized_as_the_appwrapper_operator_does(value: str, label: str) -> None:
    assert provenance.sanitize_label(value) == label


def test_the_operator_user_labels_naming_autowrap_make_it_ours() -> None:
    labels = {names.APPWRAPPER_USER_LABEL: "system_serviceaccount_autowrap-system_autowrap",
              names.APPWRAPPER_USERID_LABEL: "3b9c7d1e-uid"}  # fmt: skip
    assert provenance.stranger(_appwrapper(labels), ME) is None


def test_the_user_labels_decide_even_when_managed_fields_name_autowrap() -> None:
    labels = {names.APPWRAPPER_USER_LABEL: "bob", names.APPWRAPPER_USERID_LABEL: "bob-uid"}
    forged_manager = [{"manager": names.FIELD_MANAGER, "operation": "Update"}]
    assert provenance.stranger(_appwrapper(labels, forged_manager), ME) == "was created by bob"


def test_another_identity_of_the_same_name_is_not_autowrap() -> None:
    labels = {names.APPWRAPPER_USER_LABEL: "system_serviceaccount_autowrap-system_autowrap",
              names.APPWRAPPER_USERID_LABEL: "some-other-uid"}  # fmt: skip
    assert provenance.stranger(_appwrapper(labels), ME) is not None


def test_without_user_labels_the_create_field_manager_decides() -> None:
    ours = [{"manager": "kubectl-client-side-apply", "operation": "Update"},
            {"manager": names.FIELD_MANAGER, "operation": "Update"}]  # fmt: skip
    assert provenance.stranger(_appwrapper(managed=ours), ME) is None
    theirs = [{"manager": "kubectl-create", "operation": "Update"}]
    assert provenance.stranger(_appwrapper(managed=theirs), ME) == "was not created by autowrap"
    status_only = [{"manager": names.FIELD_MANAGER, "operation": "Update",
                    "subresource": "status"}]  # fmt: skip
    assert provenance.stranger(_appwrapper(managed=status_only), ME) is not None
    assert provenance.stranger(_appwrapper(), ME) is not None


def test_the_same_work_is_compared_whole() -> None:
    job = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
           "spec": {"tasks": [{"name": "w", "replicas": 2}]}}  # fmt: skip
    wanted = _appwrapper()
    wanted["spec"]["components"] = [{"template": job}]
    same = _appwrapper()
    same["spec"]["components"] = [{"template": {**job, "spec": {"tasks": [{"replicas": 2,
                                                                           "name": "w"}]}}}]  # fmt: skip
    other = _appwrapper()
    other["spec"]["components"] = [{"template": {**job, "spec": {"tasks": []}}}]
    assert provenance.same_work(same, wanted)
    assert not provenance.same_work(other, wanted)
    assert not provenance.same_work(_appwrapper(), wanted)
