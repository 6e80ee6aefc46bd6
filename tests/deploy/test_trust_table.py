"""docs/security.md's trust table ("What autowrap trusts, and what stops a forgery") stays true:
every name autowrap's adopt, release, count, exempt and delete decisions read has a row; a row a
namespace user can write names what stops a forgery; and each ValidatingAdmissionPolicy a row
names exists in deploy/ and reads the names of that row."""

from __future__ import annotations

import re
from typing import Any

import yaml

from tests.deploy.test_manifests import DEPLOY, REPO
from webhook.core import adoption
from webhook.model import names

HEADING = "## What autowrap trusts, and what stops a forgery"

# What the decisions read (webhook/core/adoption.py, engine.py; webhook/controller/reconcile.py).
READ = (
    names.ADOPTION_LABEL,
    names.REQUESTED_BY_ANNOTATION,
    names.QUEUE_ANNOTATION,
    names.ADMISSION_GATE,
    names.RELEASED_LABEL,
    names.APPWRAPPER_LABEL,
    adoption.PODSET_ANNOTATION,
    names.VOLCANO_JOB_NAME,
    names.VOLCANO_TASK_SPEC,
    names.ORIGIN_UID_ANNOTATION,
    names.KUEUE_JOB_UID_LABEL,
    names.APPWRAPPER_USER_LABEL,
    names.ADOPTION_FINALIZER,
    names.WRAP_LABEL,
    "spec.priorityClassName",
    "request.userInfo.username",
)


def _rows() -> list[list[str]]:
    text = (REPO / "docs" / "security.md").read_text(encoding="utf-8")
    section = text[text.index(HEADING) :]
    section = section[: section.index("\n## ", 1)]
    rows = [
        [cell.strip() for cell in line.strip().strip("|").split("|")]
        for line in section.splitlines()
        if line.startswith("| ") and not line.startswith("| what ")
    ]
    assert rows, "the trust table is missing"
    assert all(len(row) == 4 for row in rows), [r for r in rows if len(r) != 4]
    return rows


def _policies() -> dict[str, str]:
    text = (DEPLOY / "base" / "admission-policies.yaml").read_text(encoding="utf-8")
    found = {}
    for doc in yaml.safe_load_all(text):
        if doc and doc.get("kind") == "ValidatingAdmissionPolicy":
            found[doc["metadata"]["name"]] = yaml.safe_dump(doc["spec"], width=10_000)
    return found


def test_every_name_the_decisions_read_has_a_row() -> None:
    first_cells = " ".join(row[0] for row in _rows())
    missing = [name for name in READ if name not in first_cells]
    assert not missing, f"read by autowrap but not in the trust table: {missing}"


def test_nothing_a_namespace_user_writes_stands_alone() -> None:
    for what, _, writers, stops in _rows():
        if "namespace user" in writers:
            assert stops and stops.lower() not in ("none", "-", "nothing"), what


def test_each_policy_named_exists_and_reads_what_its_row_names() -> None:
    policies = _policies()
    for what, _, _, stops in _rows():
        named = set(re.findall(r"`(autowrap-[a-z-]+)`", stops))
        for policy in named:
            assert policy in policies, f"{what}: no policy {policy} in deploy/base"
        keys = [
            k
            for k in re.findall(r"`([^`]+)`", what)
            if "/" in k or k.startswith(("spec.", "metadata."))
        ]
        if not named:
            continue
        for key in keys:
            field = key.split(".")[-1].split("[")[0]
            assert any(field in policies[p] for p in named), f"{what}: none of {named} reads {key}"


# A pod's labels and annotations are also written through pods/status:
# podStatusStrategy.PrepareForUpdate (kubernetes pkg/registry/core/pod/strategy.go:216-233)
# keeps only spec and ownerReferences from the stored pod. What a policy guards on a pod is
# guarded there too.
THROUGH_POD_STATUS = (
    names.APPWRAPPER_LABEL,
    names.RELEASED_LABEL,
    names.ADOPTION_LABEL,
    names.REQUESTED_BY_ANNOTATION,
)


def _matches_pod_status_updates(spec: Any) -> bool:
    rules = (spec.get("matchConstraints") or {}).get("resourceRules") or []
    return any(
        "" in (rule.get("apiGroups") or [])
        and any(
            r in ("pods/status", "pods/*", "*/status", "*/*") for r in rule.get("resources") or []
        )
        and any(op in ("UPDATE", "*") for op in rule.get("operations") or [])
        for rule in rules
    )


def test_a_claim_written_through_pod_status_is_guarded_there() -> None:
    policies = {name: yaml.safe_load(text) for name, text in _policies().items()}
    rows = [
        row
        for row in _rows()
        if any(row[0].startswith((f"label `{n}`", f"annotation `{n}`")) for n in THROUGH_POD_STATUS)
    ]
    assert len(rows) == len(THROUGH_POD_STATUS), [row[0] for row in rows]
    for what, _, writers, stops in rows:
        assert "`pods/status`" in writers, f"{what}: say that pods/status writes it"
        assert "`pods/status`" in stops, f"{what}: say what stops it through pods/status"
    for what, _, _, stops in _rows():
        if "`pods/status`" not in stops:
            continue
        named = set(re.findall(r"`(autowrap-[a-z-]+)`", stops))
        assert named and all(_matches_pod_status_updates(policies[p]) for p in named), (
            f"{what}: not every one of {sorted(named)} matches pods/status updates"
        )
