"""Issue 14 item 3: under ``wrap: Always``, what a user writes on an object does not keep it
out of its AppWrapper (and Kueue's quota); only the policy (allowOptOut), a real controller
owner, or the AppWrapper controller itself does."""

from __future__ import annotations

from typing import Any

import pytest

from tests.builders import context, pod, policy, volcano_job
from webhook.core import engine, kinds
from webhook.core import policy as policy_mod
from webhook.model import names

ALWAYS = policy()
CONTROLLER = names.APPWRAPPER_CONTROLLER_USER


def _owned(builder: Any, api_version: str, kind: str, *, controller: bool = True) -> Any:
    builder._meta()["ownerReferences"] = [
        {"apiVersion": api_version, "kind": kind, "name": "o", "uid": "u", "controller": controller}
    ]
    return builder


def _errors(outcome: engine.Outcome) -> list[str]:
    return [v.render() for v in outcome.errors]


def test_wrap_false_is_refused_under_always_without_allow_opt_out():
    outcome = engine.admit(pod("p").wrap("false").build(), context(ALWAYS, user="alice"))
    assert outcome.action is engine.Action.WRAP
    assert outcome.verdict().denied
    (error,) = [e for e in _errors(outcome) if "opting out" in e]
    assert error.startswith("metadata.labels[autowrap.io/wrap]: ")
    assert "does not allow opting out" in error


def test_wrap_false_opts_out_with_allow_opt_out():
    ctx = context(policy().set(allowOptOut=True), user="alice")
    outcome = engine.admit(pod("p").wrap("false").build(), ctx)
    assert outcome.action is engine.Action.PASS
    assert "opts it out" in outcome.reason


def test_allow_opt_out_under_opt_in_is_refused_at_load():
    with pytest.raises(policy_mod.PolicyError, match="allowOptOut applies only to wrap: Always"):
        policy_mod.build([("p.yaml", policy().opt_in().set(allowOptOut=True).yaml())])


@pytest.mark.parametrize(
    ("builder", "api_version", "kind"),
    [
        (pod("p"), "apps/v1", "ReplicaSet"),
        (pod("p"), "apps/v1", "StatefulSet"),
        (pod("p"), "batch/v1", "Job"),
        (pod("p"), "batch.volcano.sh/v1alpha1", "Job"),
        (pod("p"), "workload.codeflare.dev/v1beta2", "AppWrapper"),
        (volcano_job("j"), "workload.codeflare.dev/v1beta2", "AppWrapper"),
        (volcano_job("j"), "flow.volcano.sh/v1alpha1", "JobFlow"),
    ],
)
def test_a_real_controller_owner_exempts(builder, api_version, kind):
    outcome = engine.admit(_owned(builder, api_version, kind).build(), context(ALWAYS))
    assert outcome.action is engine.Action.PASS
    assert "created by its controller" in outcome.reason


@pytest.mark.parametrize(
    ("builder", "api_version", "kind", "controller"),
    [
        (pod("p"), "v1", "ConfigMap", True),
        (pod("p"), "apps/v1", "ReplicaSet", False),
        (pod("p"), "example.com/v1", "ReplicaSet", True),
        (volcano_job("j"), "apps/v1", "ReplicaSet", True),
    ],
)
def test_a_made_up_owner_is_refused_with_its_path(builder, api_version, kind, controller):
    obj = _owned(builder, api_version, kind, controller=controller).build()
    outcome = engine.admit(obj, context(ALWAYS, user="alice"))
    assert outcome.action is engine.Action.WRAP
    assert outcome.verdict().denied
    assert any(
        e.startswith("metadata.ownerReferences[0]: ") and "not a controller" in e
        for e in _errors(outcome)
    ), _errors(outcome)
    assert engine.wrap_candidate(obj, context(ALWAYS, user="alice", uid="u")) is None


def test_the_appwrapper_label_from_another_user_is_refused():
    obj = pod("p").label(names.APPWRAPPER_LABEL, "aw").build()
    outcome = engine.admit(obj, context(ALWAYS, user="alice"))
    assert outcome.verdict().denied
    assert any(
        e.startswith("metadata.labels[workload.codeflare.dev/appwrapper]: ") and CONTROLLER in e
        for e in _errors(outcome)
    ), _errors(outcome)
    assert engine.wrap_candidate(obj, context(ALWAYS, user="alice", uid="u")) is None


def test_the_appwrapper_label_from_the_controller_exempts():
    obj = pod("p").label(names.APPWRAPPER_LABEL, "aw").build()
    outcome = engine.admit(obj, context(ALWAYS, user=CONTROLLER))
    assert outcome.action is engine.Action.PASS
    assert "already belongs" in outcome.reason


def test_a_pod_prepared_for_adoption_keeps_its_own_appwrapper_label():
    obj = (
        pod("p")
        .label(names.APPWRAPPER_LABEL, "aw")
        .label(names.ADOPTION_LABEL, names.ADOPTION_PENDING)
        .build()
    )
    outcome = engine.admit(obj, context(ALWAYS, user="alice"))
    assert outcome.action is engine.Action.WRAP
    assert not [e for e in _errors(outcome) if "AppWrapper controller" in e]


def test_audit_prepares_and_warns():
    obj = pod("p").wrap("false").build()
    ctx = context(policy().audit(), user="alice", uid="u")
    assert engine.wrap_candidate(obj, ctx) is not None
    verdict = engine.admit(obj, ctx).verdict()
    assert not verdict.denied
    assert any("does not allow opting out" in w for w in verdict.warnings)


def test_every_kind_names_its_controller_owners():
    for adapter in kinds.KINDS:
        assert adapter.owner_kinds
