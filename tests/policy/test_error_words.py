"""Policy and policy-test file mistakes are said in YAML's words: values as YAML writes them
(true, null, [a, b], {a: 1}), never Python's (True, None, {'a': 1}) or pydantic's wording, and a
list is not called too short because its items failed."""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml

from webhook.cli import policytests
from webhook.core.policy import PolicyError, build

# What Python or pydantic would say that a YAML author never wrote.
LEAKS = re.compile(
    r"Input should|after validation|Value error|Field required|pydantic|Tuple|\bdict\b|"
    r"\bTrue\b|\bFalse\b|\bNone\b|\{'|\['|errors\.pydantic|type="
)


def _policy(**spec: Any) -> str:
    return yaml.safe_dump({
        "apiVersion": "autowrap.io/v1alpha1", "kind": "Policy", "metadata": {"name": "p"},
        "spec": {"namespaces": {"names": ["*"]}, **spec},
    })  # fmt: skip


@pytest.mark.parametrize(
    ("text", "says"),
    [
        (_policy(wrap=True), "spec.wrap: true (YAML reads an unquoted true, false, yes or no as "
                             "a boolean; quote a word) is not allowed; use 'OptIn' or 'Always'"),
        (_policy(enforcement=None), "spec.enforcement: null is not allowed"),
        (_policy(queue={"allowed": {"a": 1}}), "spec.queue.allowed: {a: 1} is not a list"),
        (_policy(reservedEnv=[1, {"x": 2}]), "spec.reservedEnv[1]: {x: 2} is not a string"),
        (_policy(masterPort=70000), "spec.masterPort: 70000 must be at most 65535"),
        (_policy(masterPort=1.5), "spec.masterPort: 1.5 is not a whole number"),
        (_policy(topology={"maxTier": -1}), "spec.topology.maxTier: -1 must be at least 0"),
        (_policy(allowOptOut="maybe"), "spec.allowOptOut: 'maybe' is not true or false"),
        (_policy(namespaces={"names": "team-a"}), "spec.namespaces.names: 'team-a' is not a list"),
        (yaml.safe_dump({"apiVersion": "autowrap.io/v1alpha1", "kind": "Policy",
                         "metadata": {"name": ""}, "spec": {"namespaces": {"names": ["*"]}}}),
         "metadata.name: is empty; write it"),
    ],
)  # fmt: skip
def test_a_policy_mistake_is_said_in_yaml_s_words(text, says):
    with pytest.raises(PolicyError) as info:
        build([("p.yaml", text)])
    message = str(info.value)
    assert says in message, message
    assert not LEAKS.search(message), message


def _test_file(expect: Any) -> str:
    return yaml.safe_dump({
        "apiVersion": "autowrap.io/v1alpha1", "kind": "PolicyTest", "name": "t",
        "policies": "../policies",
        "cases": [{"name": "one", "manifest": "m.yaml", "expect": expect}],
    })  # fmt: skip


@pytest.mark.parametrize(
    ("expect", "says"),
    [
        ([{"object": "Job/plain", "results": "wrapped"}],
         "cases[0].expect[0].results: unknown field 'results' in cases[0].expect[0]; did you "
         "mean 'result'?"),
        ([], "cases[0].expect: is empty; give at least one"),
        ([{"result": "Wrapped"}], "cases[0].expect[0].result: 'Wrapped' is not allowed"),
        ({"result": "wrapped"}, "cases[0].expect: {result: wrapped} is not a list"),
    ],
)  # fmt: skip
def test_a_policy_test_file_mistake_is_said_in_yaml_s_words(expect, says):
    with pytest.raises(policytests.TestFileError) as info:
        policytests.parse(_test_file(expect), source="autowrap-test.yaml")
    message = str(info.value)
    assert says in message, message
    assert not LEAKS.search(message), message
    assert "at least 1 item" not in message or expect == []
