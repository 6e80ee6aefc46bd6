"""Policies: loading with errors that name file and field, and which namespace gets which."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.builders import policy, policy_set
from webhook.core.policy import PolicyError, build, parse
from webhook.core.policy import match as best_match
from webhook.shell import policyfiles

REPO = Path(__file__).resolve().parents[2]


def _load_error(doc_or_text, source="team.yaml"):
    text = doc_or_text if isinstance(doc_or_text, str) else yaml.safe_dump(doc_or_text)
    with pytest.raises(PolicyError) as info:
        build([(source, text)])
    return str(info.value)


@pytest.mark.parametrize(
    ("doc", "field"),
    [
        pytest.param(
            policy().set(wrap="Sometimes").build(), "spec.wrap", id="an unknown wrap mode"
        ),
        pytest.param(
            policy().set(enforcement="Warn").build(), "spec.enforcement", id="unknown enforcement"
        ),
        pytest.param(
            policy().master_port(70000).build(), "spec.masterPort", id="a port over 65535"
        ),
        pytest.param(policy().set(colour="red").build(), "spec.colour", id="an unknown field"),
        pytest.param(
            policy().queues(default="x", allowed=["a", "b"]).build(),
            "spec.queue",
            id="a default queue outside the allowed list",
        ),
        pytest.param(
            policy().ft_defaults(retryLimit="many").build(),
            "spec.faultTolerance.defaults",
            id="a default retry limit that is not a number",
        ),
        pytest.param(
            policy().ft_defaults(warmupGracePeriodDuration="2d").build(),
            "spec.faultTolerance.defaults",
            id="a default duration that does not parse",
        ),
        pytest.param(
            policy().ft_defaults(bogus="1").build(),
            "spec.faultTolerance.defaults",
            id="an unknown fault-tolerance key",
        ),
        pytest.param(
            policy().ft_caps(terminalExitCodes="1").build(),
            "spec.faultTolerance.caps",
            id="a cap on exit codes",
        ),
        pytest.param(
            policy().ft_defaults(retryLimit="9").ft_caps(retryLimit="5").build(),
            "spec.faultTolerance",
            id="a default above its cap",
        ),
        pytest.param(
            policy().topology(default={"mode": "hard", "highestTierAllowed": 4}, maxTier=3).build(),
            "spec.topology",
            id="a topology default above maxTier",
        ),
        pytest.param(
            policy().topology(default={"mode": "tight"}).build(),
            "spec.topology.default.mode",
            id="an unknown topology mode",
        ),
        pytest.param(
            policy().topology(default={"highestTierAllowed": 1, "highestTierName": "leaf"}).build(),
            "spec.topology.default",
            id="both tier fields in a default",
        ),
        pytest.param(policy().names().build(), "spec.namespaces", id="no namespace selection"),
        pytest.param(
            policy().selector(matchExpressions=[{"key": "a", "operator": "In"}]).build(),
            "spec.namespaces.selector.matchExpressions[0]",
            id="an In requirement without values",
        ),
        pytest.param(
            {**policy().build(), "apiVersion": "autowrap.io/v2"},
            "apiVersion",
            id="wrong apiVersion",
        ),
        pytest.param(
            {**policy().build(), "metadata": {"name": ""}}, "metadata.name", id="an empty name"
        ),
    ],
)
def test_loading_errors_name_the_file_and_the_field(doc, field):
    message = _load_error(doc)
    assert message.startswith("team.yaml: ")
    assert f" {field}" in message or f": {field}" in message, message


@pytest.mark.parametrize(
    ("doc", "says"),
    [
        pytest.param(
            policy().ft_defaults(retryLimit="many").build(),
            "retryLimit: must be a non-negative integer, got 'many'",
            id="a default retry limit that is not a number",
        ),
        pytest.param(
            policy().ft_caps(retryableExitCodes="1").build(),
            "retryableExitCodes takes no cap",
            id="a cap on exit codes",
        ),
    ],
)
def test_a_fault_tolerance_mistake_says_what_is_wrong(doc, says):
    assert says in _load_error(doc)


def test_a_document_in_a_multi_document_file_is_named():
    text = policy("a").yaml() + "---\n" + policy("b").set(wrap="Never").yaml()
    assert _load_error(text).startswith("team.yaml (document 2): spec.wrap")


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("a: [1,\n", id="invalid YAML"),
        pytest.param("- just\n- a list\n", id="a document that is not a mapping"),
    ],
)
def test_unreadable_policy_files_are_named(text):
    assert _load_error(text, source="bad.yaml").startswith("bad.yaml:")


def test_duplicate_policy_names_across_files_are_an_error():
    with pytest.raises(
        PolicyError, match=r"b\.yaml: policy name 'same' is already used in a\.yaml"
    ):
        build([("a.yaml", policy("same").yaml()), ("b.yaml", policy("same").yaml())])


def test_an_empty_policy_directory_is_an_error(tmp_path):
    with pytest.raises(PolicyError, match="no \\*.yaml policy files"):
        policyfiles.load(tmp_path)


def test_a_missing_policy_path_is_an_error(tmp_path):
    with pytest.raises(PolicyError, match="cannot read"):
        policyfiles.load(tmp_path / "nope.yaml")


def test_without_a_path_the_builtin_opt_in_policy_covers_everything():
    match = policyfiles.load(None).match("anything", {})
    assert match is not None and match.policy.name == "builtin"
    assert match.policy.spec.wrap.value == "OptIn"


@pytest.mark.parametrize("path", sorted((REPO / "policies").glob("*.yaml")), ids=lambda p: p.name)
def test_every_shipped_policy_file_loads(path):
    assert parse(path.read_text(), source=str(path))


def test_the_shipped_policies_load_together():
    names = {p.name for p in policyfiles.load(REPO / "policies").policies}
    assert {"default", "team-a", "research-audit"} <= names


# Named so that the alphabetical tie-break of ``match`` always picks a policy other than the
# one expected: a case passes only if specificity, not name order, decided it. The cases call
# ``match`` itself (``best_match``), not the set's memoised ``SET.match``: a memo filled by an earlier test
# would answer for the code under test.
SET = policy_set(
    policy("a-all").names("*").exclude("kube-*"),
    policy("b-gpu").names().selector({"hardware": "gpu"}),
    policy("c-teams").names("team-*"),
    policy("d-team-a-glob").names("team-a-*"),
    policy("e-team-a").names("team-a"),
    policy("f-gpu-research").names().selector({"hardware": "gpu", "tier": "research"}),
)


@pytest.mark.parametrize(
    ("ns", "labels", "want"),
    [
        pytest.param("team-a", {}, "e-team-a", id="an exact name beats every glob"),
        pytest.param("team-a-dev", {}, "d-team-a-glob", id="a longer glob beats a shorter one"),
        pytest.param("team-b", {}, "c-teams", id="a glob beats the catch-all"),
        pytest.param("ml", {}, "a-all", id="the catch-all takes the rest"),
        pytest.param("ml", {"hardware": "gpu"}, "b-gpu", id="a label selector beats the catch-all"),
        pytest.param("team-b", {"hardware": "gpu"}, "c-teams", id="a name glob beats a selector"),
        pytest.param(
            "lab",
            {"hardware": "gpu", "tier": "research"},
            "f-gpu-research",
            id="the selector with more requirements wins",
        ),
        pytest.param("kube-system", {}, None, id="an excluded namespace matches nothing"),
        pytest.param("kube-system", {"hardware": "gpu"}, "b-gpu", id="a selector still covers it"),
    ],
)
def test_most_specific_policy_wins(ns, labels, want):
    match = best_match(SET, ns, labels)
    assert (match.policy.name if match else None) == want
    assert match is None or "equally specific" not in match.reason


def test_more_selector_requirements_win():
    only_selectors = policy_set(
        policy("gpu").names().selector({"hardware": "gpu"}),
        policy("gpu-research").names().selector({"hardware": "gpu", "tier": "research"}),
    )
    match = only_selectors.match("x", {"hardware": "gpu", "tier": "research"})
    assert match is not None and match.policy.name == "gpu-research"
    assert "label selector" in match.reason


def test_the_namespace_name_label_is_always_known_to_selectors():
    pols = policy_set(
        policy("by-name-label")
        .names()
        .selector(
            matchExpressions=[
                {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["ml"]}
            ]
        )
    )
    assert pols.match("ml", {}) is not None
    assert pols.match("other", {}) is None


@pytest.mark.parametrize(
    ("operator", "values", "labels", "matched"),
    [
        pytest.param("In", ["a"], {"k": "a"}, True, id="In matches a listed value"),
        pytest.param("In", ["a"], {}, False, id="In needs the key"),
        pytest.param("NotIn", ["a"], {}, True, id="NotIn matches a missing key"),
        pytest.param("NotIn", ["a"], {"k": "a"}, False, id="NotIn refuses a listed value"),
        pytest.param("Exists", [], {"k": ""}, True, id="Exists matches an empty value"),
        pytest.param("Exists", [], {}, False, id="Exists needs the key"),
        pytest.param("DoesNotExist", [], {}, True, id="DoesNotExist matches a missing key"),
        pytest.param("DoesNotExist", [], {"k": "x"}, False, id="DoesNotExist refuses the key"),
    ],
)
def test_label_selector_operators(operator, values, labels, matched):
    expr = {"key": "k", "operator": operator}
    if values:
        expr["values"] = values
    pols = policy_set(policy("sel").names().selector(matchExpressions=[expr]))
    assert (pols.match("ns", labels) is not None) is matched


def test_names_and_selector_must_both_match():
    pols = policy_set(policy("both").names("team-*").selector({"gpu": "yes"}))
    assert pols.match("team-a", {"gpu": "yes"}) is not None
    assert pols.match("team-a", {}) is None
    assert pols.match("ml", {"gpu": "yes"}) is None


@pytest.mark.parametrize(
    ("first", "second", "what"),
    [
        pytest.param(
            policy("zeta").names("ml"),
            policy("alpha").names("ml"),
            "the namespace name 'ml'",
            id="a name",
        ),
        pytest.param(policy("a").names("*"), policy("b").names("*"), "'*'", id="two catch-alls"),
        pytest.param(
            policy("a").names("team-?").selector({"gpu": "yes"}),
            policy("b").names("team-?").selector({"gpu": "yes"}),
            "'team-?'",
            id="a glob with equal selectors",
        ),
        pytest.param(
            policy("a").names().selector({"gpu": "yes"}),
            policy("b").names().selector({"gpu": "yes"}),
            "the namespaces their (identical) label selectors match",
            id="equal selectors",
        ),
    ],
)
def test_two_policies_equally_specific_for_a_namespace_are_refused_at_load(first, second, what):
    with pytest.raises(PolicyError) as info:
        policy_set(first, second)
    message = str(info.value)
    assert f"both select {what} equally specifically" in message
    assert "make one more specific" in message


def test_a_selector_alone_and_the_same_selector_with_a_name_are_no_tie():
    pols = policy_set(
        policy("a").names().selector({"gpu": "yes"}),
        policy("b").names("ml").selector({"gpu": "yes"}),
    )
    assert pols.match("ml", {"gpu": "yes"}).policy.name == "b"
    assert pols.match("lab", {"gpu": "yes"}).policy.name == "a"


def test_an_excluded_name_is_no_tie():
    pols = policy_set(policy("a").names("*"), policy("b").names("*").exclude("*"))
    assert pols.match("ml", {}).policy.name == "a"


def test_a_tie_only_some_namespaces_hit_is_named_as_one_in_the_reason():
    pols = policy_set(policy("zeta").names("ab-*"), policy("alpha").names("*-ab"))
    match = pols.match("ab-ab", {})
    assert match is not None and match.policy.name == "alpha"
    assert match.reason.startswith("policy 'alpha' (alpha.yaml) matches it by name pattern; ")
    assert "equally specific: 'zeta' (chosen by name order only" in match.reason
    assert "less specific" not in match.reason


@pytest.mark.parametrize(
    ("names", "problem"),
    [
        pytest.param(["Team-A"], "lower case; write 'team-a'", id="upper case"),
        pytest.param(["team_a*"], "not '_'", id="an underscore"),
        pytest.param(["ml", "team.a"], "[1] 'team.a'", id="a dot, second in the list"),
        pytest.param([""], "it is empty", id="an empty name"),
        pytest.param(["x" * 64], "at most 63", id="a name too long"),
    ],
)
def test_a_namespace_name_that_can_never_match_is_refused(names, problem):
    message = _load_error(policy().names(*names).build())
    assert "spec.namespaces.names" in message and "can never match" in message
    assert problem in message


def test_an_unmatchable_exclude_is_refused_too():
    message = _load_error(policy().exclude("Kube-*").build())
    assert "spec.namespaces.exclude" in message and "lower case" in message


def test_globs_with_classes_and_wildcards_load():
    assert policy().names("team-[ab]", "t?am-*", "*").parsed()


def test_an_empty_accelerator_list_is_refused():
    message = _load_error(policy().accelerators().build())
    assert "spec.accelerators" in message and "NPROC_PER_NODE=1" in message


def test_the_reason_says_why_and_where_from():
    match = best_match(SET, "team-a", {})
    assert match is not None
    assert match.reason.startswith("policy 'e-team-a' (e-team-a.yaml) names 'team-a' explicitly")
    by_glob = best_match(SET, "team-a-dev", {})
    assert by_glob is not None
    assert by_glob.reason.startswith(
        "policy 'd-team-a-glob' (d-team-a-glob.yaml) matches it by name"
    )
    assert "less specific" in match.reason and "'a-all'" in match.reason


def test_shipped_policies_pick_team_a_for_team_a_and_research_by_label():
    shipped = policyfiles.load(REPO / "policies")
    assert shipped.match("team-a", {}).policy.name == "team-a"
    assert shipped.match("team-a-dev", {}).policy.name == "team-a"
    assert shipped.match("lab", {"autowrap.io/tier": "research"}).policy.name == "research-audit"
    assert shipped.match("default", {}).policy.name == "default"
    assert shipped.match("kube-system", {}) is None


def test_policy_defaults_are_sensible():
    spec = policy().parsed().spec
    assert spec.master_port == 23456
    assert "nvidia.com/gpu" in spec.accelerators and "huawei.com/Ascend*" in spec.accelerators
    assert spec.enforcement.value == "Enforce"


# --- mistakes said as a manifest's are: the field, what is wrong, the fix ----------------------


@pytest.mark.parametrize(
    ("fields", "wanted"),
    [
        pytest.param(
            {"masterPrt": 1},
            "spec.masterPrt: unknown field 'masterPrt' in spec; did you mean 'masterPort'?",
            id="a typo of a field",
        ),
        pytest.param(
            {"queue": {"deflt": "q"}},
            "spec.queue.deflt: unknown field 'deflt' in spec.queue; did you mean 'default'?",
            id="a typo in a nested section",
        ),
        pytest.param(
            {"mode": "adopt"},
            "spec.mode: 'adopt' is not allowed; use 'Adopt' or 'Redirect' (did you mean 'Adopt'?",
            id="a value in the wrong case",
        ),
        pytest.param(
            {"wrap": "Sometimes"},
            "spec.wrap: 'Sometimes' is not allowed; use 'OptIn' or 'Always'",
            id="a value that is not one of the allowed",
        ),
        pytest.param(
            {"accelerators": "nvidia.com/gpu"},
            "spec.accelerators: 'nvidia.com/gpu' is not a list; write a list here",
            id="one value where a list is wanted",
        ),
        pytest.param(
            {"faultTolerance": {"defaults": {"retryLimitt": "3"}}},
            "spec.faultTolerance.defaults: unknown key 'retryLimitt'; did you mean 'retryLimit'?",
            id="a typo of a fault-tolerance setting",
        ),
        pytest.param(
            {"masterPort": 99999},
            "spec.masterPort: 99999 must be at most 65535; change it",
            id="a number out of range",
        ),
    ],
)
def test_policy_mistakes_are_said_like_manifest_mistakes(fields, wanted):
    message = _load_error(policy("p").set(**fields).yaml())
    assert wanted in message
    for pydantic_words in ("Extra inputs", "Input should", "Field required", "Value error"):
        assert pydantic_words not in message


def test_a_catch_all_glob_with_a_selector_is_as_specific_as_the_selector_alone():
    pols = policy_set(
        policy("a-star").names("*").selector({"gpu": "yes"}),
        policy("b-selector").names().selector({"gpu": "yes"}),
    )
    found = best_match(pols, "ml", {"gpu": "yes"})
    assert found is not None and found.policy.name == "a-star"
    assert "equally specific: 'b-selector'" in found.reason


def test_the_reason_lists_every_less_specific_policy_in_order():
    found = best_match(SET, "team-a", {})
    assert found is not None
    assert found.reason == (
        "policy 'e-team-a' (e-team-a.yaml) names 'team-a' explicitly; "
        "less specific: 'c-teams', 'a-all'"
    )


@pytest.mark.parametrize(
    ("text", "says"),
    [
        pytest.param("a: [", "x.yaml:1:5: not valid YAML", id="YAML that does not parse"),
        pytest.param(
            policy().set(wrap="Sometimes", enforcement="Warn").yaml(),
            "spec.wrap: 'Sometimes' is not allowed; use 'OptIn' or 'Always'; spec.enforcement:",
            id="every problem of a document, one after the other",
        ),
    ],
)
def test_a_policy_that_does_not_load_says_where_and_why(text, says):
    with pytest.raises(PolicyError) as info:
        parse(text, source="x.yaml")
    assert says in str(info.value)


@pytest.mark.parametrize(
    ("pattern", "loads"),
    [
        pytest.param("a" * 63, True, id="a name of 63 characters"),
        pytest.param("a" * 64, False, id="a name of 64 characters"),
        pytest.param("a" * 70 + "*", True, id="a long glob with a star"),
        pytest.param("[ab]" * 20, True, id="a long glob with a character class"),
        pytest.param("", False, id="an empty name"),
    ],
)
def test_a_name_no_namespace_could_have_is_refused_at_load(pattern, loads):
    doc = policy("p").names(pattern).yaml()
    if loads:
        assert parse(doc, source="p.yaml")
        return
    with pytest.raises(PolicyError) as info:
        parse(doc, source="p.yaml")
    assert "spec.namespaces.names: [0]" in str(info.value)
    assert str(info.value).endswith(
        "can never match a namespace: namespace names have at most 63 characters"
        if pattern
        else 'can never match a namespace: it is empty; use "*" for every namespace'
    )


@pytest.mark.parametrize(
    ("policies", "labels", "reason"),
    [
        pytest.param(
            [policy("all").names("*")],
            {},
            "policy 'all' (all.yaml) matches every namespace by name",
            id="the catch-all",
        ),
        pytest.param(
            [policy("both").names("m*").selector({"gpu": "yes"})],
            {"gpu": "yes"},
            "policy 'both' (both.yaml) matches it by name pattern and its label selector "
            "(1 requirement(s)) matches",
            id="a glob and a selector",
        ),
    ],
)
def test_the_reason_says_how_the_policy_selects(policies, labels, reason):
    found = best_match(policy_set(*policies), "ml", labels)
    assert found is not None and found.reason == reason
