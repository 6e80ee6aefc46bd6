"""Fluent builders for test inputs and expected values (Kueue's ``testing/wrappers`` style).

Every builder starts from a valid default, every method returns the builder, ``build()``
returns a fresh dict (mutating it never affects the builder) and ``clone()`` forks a builder.

    job = volcano_job("train", ns="ml").task("worker", replicas=3, gpus=8).queue("team-a")
    obj = job.build()
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any, Self

import yaml

from testbed.jobs import Builder as _Builder
from testbed.jobs import VolcanoJobBuilder, pod_template
from webhook.core import engine
from webhook.core import policy as policy_mod
from webhook.model import names


class PodBuilder(_Builder):
    def __init__(self, name: str = "solo", ns: str | None = None) -> None:
        metadata: dict[str, Any] = {"name": name}
        if ns is not None:
            metadata["namespace"] = ns
        self._obj = {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, **pod_template()}

    def gpus(self, count: int, resource: str = "nvidia.com/gpu") -> Self:
        c = self._obj["spec"]["containers"][0]
        c["resources"] = {"limits": {resource: count}, "requests": {resource: count}}
        return self

    def env(self, name: str, value: str) -> Self:
        self._obj["spec"]["containers"][0].setdefault("env", []).append(
            {"name": name, "value": value}
        )
        return self

    def spec(self, **fields: Any) -> Self:
        self._obj["spec"].update(fields)
        return self


class AppWrapperBuilder(_Builder):
    def __init__(self, name: str = "aw", ns: str | None = None) -> None:
        metadata: dict[str, Any] = {"name": name}
        if ns is not None:
            metadata["namespace"] = ns
        self._obj = {
            "apiVersion": names.APPWRAPPER_API_VERSION,
            "kind": "AppWrapper",
            "metadata": metadata,
            "spec": {"components": []},
        }

    def component(
        self, template: Mapping[str, Any], podsets: Sequence[Mapping[str, Any]] | None = None
    ) -> Self:
        comp: dict[str, Any] = {"template": copy.deepcopy(dict(template))}
        if podsets is not None:
            comp["podSets"] = [dict(p) for p in podsets]
        self._obj["spec"]["components"].append(comp)
        return self

    def suspend(self, value: bool = True) -> Self:
        self._obj["spec"]["suspend"] = value
        return self

    def fault_tolerance(self, key: str, value: str) -> Self:
        return self.annotate(names.FAULT_TOLERANCE_PREFIX + key, value)


class PolicyBuilder(_Builder):
    """A policy document; defaults to every namespace, wrap Always, default queue ``q``."""

    def __init__(self, name: str = "test") -> None:
        self._obj = {
            "apiVersion": "autowrap.io/v1alpha1",
            "kind": "Policy",
            "metadata": {"name": name},
            "spec": {
                "namespaces": {"names": ["*"]},
                "wrap": "Always",
                "queue": {"default": "q"},
            },
        }

    def _spec(self) -> dict[str, Any]:
        return self._obj["spec"]

    def names(self, *patterns: str) -> Self:
        if patterns:
            self._spec()["namespaces"]["names"] = list(patterns)
        else:
            self._spec()["namespaces"].pop("names", None)
        return self

    def exclude(self, *patterns: str) -> Self:
        self._spec()["namespaces"]["exclude"] = list(patterns)
        return self

    def selector(self, match_labels: Mapping[str, str] | None = None, **extra: Any) -> Self:
        sel: dict[str, Any] = {}
        if match_labels:
            sel["matchLabels"] = dict(match_labels)
        sel.update(extra)
        self._spec()["namespaces"]["selector"] = sel
        return self

    def opt_in(self) -> Self:
        self._spec()["wrap"] = "OptIn"
        return self

    def audit(self) -> Self:
        self._spec()["enforcement"] = "Audit"
        return self

    def queues(self, default: str | None = None, allowed: Sequence[str] = ()) -> Self:
        q: dict[str, Any] = {}
        if default is not None:
            q["default"] = default
        if allowed:
            q["allowed"] = list(allowed)
        self._spec()["queue"] = q
        return self

    def ft_defaults(self, **values: str) -> Self:
        self._spec().setdefault("faultTolerance", {})["defaults"] = dict(values)
        return self

    def ft_caps(self, **values: str) -> Self:
        self._spec().setdefault("faultTolerance", {})["caps"] = dict(values)
        return self

    def master_port(self, port: int) -> Self:
        self._spec()["masterPort"] = port
        return self

    def accelerators(self, *resources: str) -> Self:
        self._spec()["accelerators"] = list(resources)
        return self

    def reserved_env(self, *env_names: str) -> Self:
        self._spec()["reservedEnv"] = list(env_names)
        return self

    def topology(self, **fields: Any) -> Self:
        self._spec()["topology"] = fields
        return self

    def set(self, **fields: Any) -> Self:
        self._spec().update(fields)
        return self

    def yaml(self) -> str:
        return yaml.safe_dump(self.build(), sort_keys=False)

    def parsed(self) -> policy_mod.Policy:
        return policy_mod.parse(self.yaml(), source=f"{self._obj['metadata']['name']}.yaml")[0]


def volcano_job(name: str = "train", ns: str | None = None) -> VolcanoJobBuilder:
    return VolcanoJobBuilder(name, ns)


def pod(name: str = "solo", ns: str | None = None) -> PodBuilder:
    return PodBuilder(name, ns)


def appwrapper(name: str = "aw", ns: str | None = None) -> AppWrapperBuilder:
    return AppWrapperBuilder(name, ns)


def policy(name: str = "test") -> PolicyBuilder:
    return PolicyBuilder(name)


def policy_set(*builders: PolicyBuilder) -> policy_mod.PolicySet:
    chosen = builders or (PolicyBuilder(),)
    return policy_mod.build([(f"{b.build()['metadata']['name']}.yaml", b.yaml()) for b in chosen])


def context(
    *builders: PolicyBuilder,
    ns: str = "ml",
    labels: Mapping[str, str] | None = None,
    user: str = "",
    uid: str = "",
) -> engine.Context:
    return engine.Context(
        policies=policy_set(*builders),
        namespace=ns,
        namespace_labels=dict(labels or {}),
        user=user,
        uid=uid,
    )


def spec_of(policy_builder: PolicyBuilder | None = None) -> policy_mod.PolicySpec:
    return (policy_builder or PolicyBuilder()).parsed().spec
