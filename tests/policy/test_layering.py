"""Policies layer: what a more specific policy leaves unset comes from the less specific ones
that also select the namespace, caps only tighten unless ``loosen`` says otherwise, and
``autowrap explain -n NS`` shows every value with the policy it came from."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.builders import volcano_job
from webhook.cli import main as cli
from webhook.core import engine
from webhook.core.policy import (
    PolicyError,
    PolicySet,
    build,
    effective_values,
    layer,
    match,
    parse,
)
from webhook.model import names

REPO = Path(__file__).resolve().parents[2]
FT = names.FAULT_TOLERANCE_PREFIX


def _doc(name: str, names_: list[str] | None = None, **spec: Any) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "autowrap.io/v1alpha1",
            "kind": "Policy",
            "metadata": {"name": name},
            "spec": {"namespaces": {"names": names_ or [name]}, **spec},
        },
        sort_keys=False,
    )


SHIPPED_DEFAULT = (REPO / "deploy" / "base" / "policies" / "default.yaml").read_text()
# A team policy written to tighten one cap (the retry limit) and wrap everything.
VISION = _doc(
    "vision",
    wrap="Always",
    queue={"default": "vision-queue"},
    faultTolerance={"defaults": {"retryLimit": "1"}, "caps": {"retryLimit": "2"}},
)


def _set(*files: tuple[str, str]) -> PolicySet:
    return build(list(files))


def _values(found: Any) -> dict[str, Any]:
    return dict(effective_values(found.policy.spec))


def _long_grace_job() -> dict[str, Any]:
    return (
        volcano_job("plain", ns="vision")
        .annotate(f"{FT}warmupGracePeriodDuration", "1000h")
        .annotate(f"{FT}successTTLDuration", "10000h")
        .task("w", replicas=2)
        .build()
    )


def test_a_team_policy_keeps_every_cap_and_default_it_does_not_set():
    policies = _set(("default.yaml", SHIPPED_DEFAULT), ("vision.yaml", VISION))
    found = policies.match("vision", {})
    assert found is not None and found.policy.name == "vision"
    ft = found.policy.spec.fault_tolerance
    assert ft.caps["retryLimit"] == "2" and ft.defaults["retryLimit"] == "1"
    assert ft.caps["warmupGracePeriodDuration"] == "24h"
    assert ft.caps["successTTLDuration"] == "168h"
    assert ft.defaults["warmupGracePeriodDuration"] == "5m"
    assert found.origin("faultTolerance.caps.successTTLDuration") == "default"
    assert found.origin("faultTolerance.caps.retryLimit") == "vision"
    assert found.origin("queue.default") == "vision"


def test_the_inherited_caps_refuse_what_the_catch_all_refuses():
    policies = _set(("default.yaml", SHIPPED_DEFAULT), ("vision.yaml", VISION))
    context = engine.Context(
        policies=policies, namespace="vision", namespace_labels={"autowrap.io/wrap": "Always"}
    )
    outcome = engine.admit(_long_grace_job(), context)
    errors = {str(v.path): v.detail for v in outcome.errors}
    assert errors == {
        f"metadata.annotations[{FT}warmupGracePeriodDuration]": (
            "1000h exceeds this namespace's cap of 24h; use at most 24h"
        ),
        f"metadata.annotations[{FT}successTTLDuration]": (
            "10000h exceeds this namespace's cap of 168h; use at most 168h"
        ),
    }


def test_the_inherited_defaults_reach_the_appwrapper():
    policies = _set(("default.yaml", SHIPPED_DEFAULT), ("vision.yaml", VISION))
    context = engine.Context(policies=policies, namespace="vision")
    job = volcano_job("ok", ns="vision").wrap().task("w", replicas=1).build()
    outcome = engine.admit(job, context)
    annotations = outcome.result["metadata"]["annotations"]
    assert annotations[f"{FT}retryLimit"] == "1"
    assert annotations[f"{FT}warmupGracePeriodDuration"] == "5m"
    assert annotations[f"{FT}retryPausePeriodDuration"] == "90s"


EXAMPLES = sorted(p for p in (REPO / "policies").glob("*.yaml") if p.name != "default.yaml")


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_an_example_policy_keeps_every_value_it_sets(path):
    """Layered over the shipped default, each example keeps every value it sets; what it
    leaves unset comes from the default."""
    alone = parse(path.read_text(), source=path.name)[0]
    policies = _set(("base.yaml", SHIPPED_DEFAULT.replace("name: default", "name: base")),
                    (path.name, path.read_text()))  # fmt: skip
    names_ = alone.spec.namespaces.names
    namespace = names_[0].replace("*", "x") if names_ else "lab"
    labels = (
        dict(alone.spec.namespaces.selector.match_labels) if alone.spec.namespaces.selector else {}
    )
    found = policies.match(namespace, labels)
    assert found is not None and found.policy.name == alone.name
    own = {k: v for k, v in effective_values(alone.spec) if found.origin(k) == alone.name}
    assert own and all(_values(found)[k] == v for k, v in own.items())


def test_a_fully_set_policy_gets_nothing_from_below():
    full = _doc(
        "full",
        wrap="OptIn",
        mode="Redirect",
        enforcement="Audit",
        queue={"default": "q", "allowed": ["q"]},
        masterPort=1234,
        accelerators=["nvidia.com/gpu"],
        reservedEnv=["X"],
        faultTolerance={"defaults": {"retryLimit": "1"}, "caps": {"retryLimit": "1"}},
        topology={"default": {"mode": "soft"}, "partitionDefault": None, "maxTier": 1},
    )
    below = _doc("all", ["*"], mode="Adopt", reservedEnv=["Y"], masterPort=99,
                 queue={"default": "other"})  # fmt: skip
    alone = _set(("full.yaml", full)).match("full", {})
    layered = _set(("full.yaml", full), ("all.yaml", below)).match("full", {})
    assert alone is not None and layered is not None
    assert _values(layered) == _values(alone)
    assert layered.policy.spec.reserved_env == ("X",)  # a list replaces, it does not add up


def test_a_looser_cap_is_refused_naming_the_file_the_field_and_loosen():
    loose = _doc("loose", ["loose-*"], faultTolerance={"caps": {"successTTLDuration": "720h"}})
    with pytest.raises(PolicyError) as info:
        _set(("default.yaml", SHIPPED_DEFAULT), ("loose.yaml", loose))
    assert str(info.value) == (
        "loose.yaml: spec.faultTolerance.caps.successTTLDuration: 720h is looser than the cap "
        "168h of policy 'default' (default.yaml), which also selects these namespaces; a more "
        "specific policy only tightens a cap: use at most 168h, or list "
        "'faultTolerance.caps.successTTLDuration' under spec.loosen to raise it for these "
        "namespaces (namespace 'loose-x', for one)"
    )


def test_loosen_raises_a_cap_for_the_namespaces_of_that_policy_only():
    loose = _doc(
        "loose",
        ["loose-*"],
        faultTolerance={"caps": {"successTTLDuration": "720h"}},
        loosen=["faultTolerance.caps.successTTLDuration"],
    )
    policies = _set(("default.yaml", SHIPPED_DEFAULT), ("loose.yaml", loose))
    here, elsewhere = policies.match("loose-1", {}), policies.match("ml", {})
    assert here is not None and elsewhere is not None
    assert here.policy.spec.fault_tolerance.caps["successTTLDuration"] == "720h"
    assert elsewhere.policy.spec.fault_tolerance.caps["successTTLDuration"] == "168h"


def test_a_looser_max_tier_needs_loosen_too():
    base = _doc("all", ["*"], topology={"maxTier": 1})
    wide = _doc("wide", topology={"maxTier": 3})
    with pytest.raises(PolicyError, match=r"wide\.yaml: spec\.topology\.maxTier: 3 is looser"):
        _set(("all.yaml", base), ("wide.yaml", wide))
    allowed = yaml.safe_load(wide)
    allowed["spec"]["loosen"] = ["topology.maxTier"]
    found = _set(("all.yaml", base), ("wide.yaml", yaml.safe_dump(allowed))).match("wide", {})
    assert found is not None and found.policy.spec.topology.max_tier == 3


@pytest.mark.parametrize(
    ("loosen", "says"),
    [
        pytest.param(
            ["faultTolerance.caps.succesTTLDuration"],
            "spec.loosen: [0] 'faultTolerance.caps.succesTTLDuration' is not a cap a policy can "
            "loosen; did you mean 'faultTolerance.caps.successTTLDuration'?",
            id="a misspelt cap",
        ),
        pytest.param(
            ["faultTolerance.caps.retryLimit"],
            "spec: loosen lists 'faultTolerance.caps.retryLimit', which this policy does not set",
            id="a cap the policy does not set",
        ),
    ],
)
def test_a_loosen_mistake_is_said_at_its_field(loosen, says):
    text = _doc("p", faultTolerance={"caps": {"successTTLDuration": "1h"}}, loosen=loosen)
    with pytest.raises(PolicyError) as info:
        build([("p.yaml", text)])
    assert says in str(info.value)


def test_a_tighter_cap_brings_an_inherited_default_within_it():
    tight = _doc("tight", faultTolerance={"caps": {"retryLimit": "1"}})
    found = _set(("default.yaml", SHIPPED_DEFAULT), ("tight.yaml", tight)).match("tight", {})
    assert found is not None
    assert found.policy.spec.fault_tolerance.defaults["retryLimit"] == "1"
    assert found.notes == (
        "faultTolerance.defaults.retryLimit: 3 of policy 'default' is above the cap 1 of "
        "policy 'tight', so the default is 1",
    )


def test_a_default_above_an_inherited_cap_is_refused():
    eager = _doc("eager", faultTolerance={"defaults": {"warmupGracePeriodDuration": "48h"}})
    with pytest.raises(PolicyError) as info:
        _set(("default.yaml", SHIPPED_DEFAULT), ("eager.yaml", eager))
    assert str(info.value).startswith(
        "eager.yaml: spec.faultTolerance.defaults.warmupGracePeriodDuration: 48h exceeds the cap "
        "24h of policy 'default' (default.yaml), which also selects these namespaces; use at "
        "most 24h, or set faultTolerance.caps.warmupGracePeriodDuration in this policy too"
    )


def test_an_inherited_default_queue_outside_a_team_s_allowed_list_is_dropped():
    base = _doc("all", ["*"], queue={"default": "shared"})
    team = _doc("team", queue={"allowed": ["team-q"]})
    found = _set(("all.yaml", base), ("team.yaml", team)).match("team", {})
    assert found is not None and found.policy.spec.queue.default is None
    assert "there is no default queue" in found.notes[0]


def test_null_drops_an_inherited_value():
    base = _doc("all", ["*"], queue={"default": "shared"})
    team = _doc("team", queue={"default": None})
    found = _set(("all.yaml", base), ("team.yaml", team)).match("team", {})
    assert found is not None and found.policy.spec.queue.default is None
    assert found.origin("queue.default") == "team"


def test_allow_opt_out_may_rely_on_an_inherited_wrap_always():
    base = _doc("all", ["*"], wrap="Always", queue={"default": "q"})
    team = _doc("team", allowOptOut=True)
    found = _set(("all.yaml", base), ("team.yaml", team)).match("team", {})
    assert found is not None and found.policy.spec.allow_opt_out is True


def test_allow_opt_out_under_an_inherited_opt_in_is_refused():
    with pytest.raises(PolicyError, match=r"team\.yaml: spec\.allowOptOut: allowOptOut applies"):
        _set(("all.yaml", _doc("all", ["*"])), ("team.yaml", _doc("team", allowOptOut=True)))


def test_a_conflict_outside_the_namespaces_the_set_names_applies_the_stricter_value():
    """Loading refuses what it can find for the namespaces the policies name; for any other,
    matching applies the stricter value and says so."""
    base = parse(SHIPPED_DEFAULT, source="default.yaml")[0]
    loose = parse(_doc("loose", faultTolerance={"caps": {"retryLimit": "50"}}),
                  source="loose.yaml")[0]  # fmt: skip
    layered = layer((loose, base))
    assert layered.spec.fault_tolerance.caps["retryLimit"] == "10"
    assert [c.path for c in layered.conflicts] == ["faultTolerance.caps.retryLimit"]
    found = match(PolicySet((base, loose)), "loose", {})
    assert found is not None and found.policy.spec.fault_tolerance.caps["retryLimit"] == "10"
    assert found.notes[0].startswith(
        "faultTolerance.caps.retryLimit: 'loose' sets a value its less specific policies do not "
        "allow, so the stricter one applies here: 50 is looser than the cap 10"
    )


def test_a_label_selected_policy_layers_under_a_named_one():
    research = _doc("research", ["*"], enforcement="Audit", queue={"default": "research"})
    research = research.replace("names:\n    - '*'", "selector: {matchLabels: {tier: research}}")
    team = _doc("team", queue={"default": "team-q"})
    policies = _set(("research.yaml", research), ("team.yaml", team))
    found = policies.match("team", {"tier": "research"})
    assert found is not None and found.policy.name == "team"
    assert found.policy.spec.enforcement.value == "Audit" and found.origin("enforcement") == (
        "research"
    )
    assert found.policy.spec.queue.default == "team-q"


# --- explain ---------------------------------------------------------------------------------


def test_explain_shows_each_value_with_its_policy_the_mode_and_the_enforcement(tmp_path, capsys):
    (tmp_path / "default.yaml").write_text(SHIPPED_DEFAULT)
    (tmp_path / "vision.yaml").write_text(VISION)
    capsys.readouterr()
    code = cli.main(["explain", "-n", "vision", "--policy", str(tmp_path)])
    out = capsys.readouterr().out.splitlines()
    assert code == 0
    assert out[0].startswith("policy 'vision'") and "less specific: 'default'" in out[0]
    assert out[1].startswith("mode: Adopt (autowrap's default): the create succeeds")
    assert out[2].startswith("enforcement: Enforce (policy 'default'): a violation refuses")
    rows = {line.split()[0]: line.split(None, 2)[1:] for line in out[4:] if line.startswith("  ")}
    assert rows["wrap"] == ["vision", "Always"]
    assert rows["queue.default"] == ["vision", "vision-queue"]
    assert rows["faultTolerance.caps.retryLimit"] == ["vision", "2"]
    assert rows["faultTolerance.caps.successTTLDuration"] == ["default", "168h"]
    assert rows["faultTolerance.defaults.warmupGracePeriodDuration"] == ["default", "5m"]
    assert rows["masterPort"] == ["default", "23456"]
    assert rows["allowOptOut"] == ["autowrap's", "default  false"]


def test_explain_says_redirect_and_audit_where_a_policy_sets_them(tmp_path, capsys):
    (tmp_path / "redir.yaml").write_text(_doc("redir", mode="Redirect", enforcement="Audit"))
    capsys.readouterr()
    assert cli.main(["explain", "-n", "redir", "--policy", str(tmp_path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1].startswith("mode: Redirect (policy 'redir'): the create is denied")
    assert out[2] == (
        "enforcement: Audit (policy 'redir'): violations are only warnings, and the object is "
        "wrapped as it is"
    )
