"""Policies: the defaults and limits platform teams set, and which namespace gets which.

A policy file is YAML, one or more documents of ``kind: Policy``. Loading and matching are
pure: the shell reads the files and the namespace labels and hands them in as data. Matching
returns the chosen policy *and* the reason, so ``autowrap explain``, ``render --explain`` and
the server's log line tell the same story.
"""

from __future__ import annotations

import fnmatch
import functools
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from webhook.core import policyerrors
from webhook.model import durations, yamltext

# Matched case-insensitively, earliest pattern first; a glob never matches a share of a
# device (``*-memory``, ``*cores``; see plumbing/env.py), a name spelled out always counts.
DEFAULT_ACCELERATORS = (
    "nvidia.com/gpu",
    "nvidia.com/mig-*",
    "amd.com/gpu",
    "huawei.com/Ascend*",
    "habana.ai/gaudi",
    "intel.com/gpu",
    "gpu.intel.com/i915",
    "gpu.intel.com/xe",
    "aws.amazon.com/neuroncore",
    "volcano.sh/vgpu-number",
    "*gpu*",
    "*npu*",
)

FAULT_TOLERANCE_DURATIONS = (
    "admissionGracePeriodDuration",
    "warmupGracePeriodDuration",
    "failureGracePeriodDuration",
    "retryPausePeriodDuration",
    "forcefulDeletionGracePeriodDuration",
    "deletionOnFailureGracePeriodDuration",
    "successTTLDuration",
)
FAULT_TOLERANCE_INTS = ("retryLimit",)
FAULT_TOLERANCE_CODES = ("terminalExitCodes", "retryableExitCodes")
FAULT_TOLERANCE_KEYS = FAULT_TOLERANCE_DURATIONS + FAULT_TOLERANCE_INTS + FAULT_TOLERANCE_CODES


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class WrapMode(StrEnum):
    OPT_IN = "OptIn"
    ALWAYS = "Always"


class Mode(StrEnum):
    """How a wrap candidate reaches its AppWrapper (SPEC section 11)."""

    ADOPT = "Adopt"  # the create succeeds; the controller creates the AppWrapper
    REDIRECT = "Redirect"  # the create is denied; admission creates the AppWrapper


class Enforcement(StrEnum):
    ENFORCE = "Enforce"
    AUDIT = "Audit"


class LabelRequirement(_Model):
    key: str
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _values_fit_operator(self) -> LabelRequirement:
        if self.operator in ("In", "NotIn") and not self.values:
            raise ValueError(f"operator {self.operator} needs at least one value")
        if self.operator in ("Exists", "DoesNotExist") and self.values:
            raise ValueError(f"operator {self.operator} takes no values")
        return self

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        if self.operator == "Exists":
            return present
        if self.operator == "DoesNotExist":
            return not present
        if self.operator == "In":
            return present and labels[self.key] in self.values
        return not present or labels[self.key] not in self.values


class LabelSelector(_Model):
    match_labels: dict[str, str] = Field(default_factory=dict, alias="matchLabels")
    match_expressions: tuple[LabelRequirement, ...] = Field(default=(), alias="matchExpressions")

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(labels.get(k) == v for k, v in self.match_labels.items()) and all(
            r.matches(labels) for r in self.match_expressions
        )

    @property
    def size(self) -> int:
        return len(self.match_labels) + len(self.match_expressions)


class NamespaceSelection(_Model):
    """Names and globs (``team-*``), and/or a label selector; both must match when both given."""

    names: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    selector: LabelSelector | None = None

    @field_validator("names", "exclude")
    @classmethod
    def _can_match_a_namespace(cls, patterns: tuple[str, ...]) -> tuple[str, ...]:
        for i, pattern in enumerate(patterns):
            problem = _unmatchable(pattern)
            if problem:
                raise ValueError(f"[{i}] {pattern!r} can never match a namespace: {problem}")
        return patterns

    @model_validator(mode="after")
    def _selects_something(self) -> NamespaceSelection:
        if not self.names and self.selector is None:
            raise ValueError('select namespaces with "names" (use ["*"] for all) or "selector"')
        return self


# What a namespace name can hold (a DNS-1123 label), and the glob syntax around it.
_NAMESPACE_CHARS = re.compile(r"[a-z0-9-]*")
_GLOB_CLASS = re.compile(r"\[!?[^\]]+\]")


def _unmatchable(pattern: str) -> str:
    """Why a name or glob can never match a namespace name, or "" when it can."""
    if not pattern:
        return 'it is empty; use "*" for every namespace'
    literal = _GLOB_CLASS.sub("", pattern).replace("*", "").replace("?", "")
    if literal != literal.lower() and _NAMESPACE_CHARS.fullmatch(literal.lower()):
        return f"namespace names are lower case; write {pattern.lower()!r}"
    if not _NAMESPACE_CHARS.fullmatch(literal):
        bad = sorted({c for c in literal if not _NAMESPACE_CHARS.fullmatch(c)})
        return (
            f"namespace names hold only lower case letters, digits and '-', not "
            f"{' '.join(repr(c) for c in bad)}"
        )
    if "*" not in pattern and len(pattern.replace("?", "x")) > 63 and "[" not in pattern:
        return "namespace names have at most 63 characters"
    return ""


class QueuePolicy(_Model):
    default: str | None = None
    allowed: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _default_is_allowed(self) -> QueuePolicy:
        if self.default and self.allowed and self.default not in self.allowed:
            raise ValueError(f'default queue "{self.default}" is not in the allowed list')
        return self


FaultToleranceValue = Annotated[str | int, Field()]


def _check_fault_tolerance_map(values: Mapping[str, Any], *, caps: bool) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, raw in values.items():
        if key not in FAULT_TOLERANCE_KEYS:
            raise ValueError(policyerrors.unknown_key(str(key), FAULT_TOLERANCE_KEYS))
        value = str(raw)
        if key in FAULT_TOLERANCE_DURATIONS:
            try:
                durations.parse_seconds(value)
            except ValueError as exc:
                raise policyerrors.AtKey(
                    key, f"{exc}; use a Go duration such as 90s, 5m or 168h (there is no 'd' unit)"
                ) from None
        elif key in FAULT_TOLERANCE_INTS:
            if not value.isdigit():
                raise policyerrors.AtKey(key, f"must be a non-negative integer, got {value!r}")
        elif caps:
            raise ValueError(f"{key} takes no cap")
        out[key] = value
    return out


class FaultTolerance(_Model):
    """Defaults for ``workload.codeflare.dev.appwrapper/*`` annotations, and caps on them."""

    defaults: dict[str, str] = Field(default_factory=dict)
    caps: dict[str, str] = Field(default_factory=dict)

    @field_validator("defaults", mode="before")
    @classmethod
    def _defaults(cls, value: Any) -> dict[str, str]:
        return _check_fault_tolerance_map(value or {}, caps=False)

    @field_validator("caps", mode="before")
    @classmethod
    def _caps(cls, value: Any) -> dict[str, str]:
        return _check_fault_tolerance_map(value or {}, caps=True)

    @model_validator(mode="after")
    def _defaults_within_caps(self) -> FaultTolerance:
        for key, cap in self.caps.items():
            default = self.defaults.get(key)
            if default is not None and cap_exceeded(key, default, cap):
                raise ValueError(f"default {key}={default} exceeds the cap {cap}")
        return self


def cap_exceeded(key: str, value: str, cap: str) -> bool:
    if key in FAULT_TOLERANCE_INTS:
        return int(value) > int(cap)
    return durations.parse_seconds(value) > durations.parse_seconds(cap)


class Topology(_Model):
    mode: Literal["hard", "soft"] = "hard"
    highest_tier_allowed: int | None = Field(default=None, alias="highestTierAllowed", ge=0)
    highest_tier_name: str | None = Field(default=None, alias="highestTierName")

    @model_validator(mode="after")
    def _one_tier(self) -> Topology:
        if self.highest_tier_allowed is not None and self.highest_tier_name is not None:
            raise ValueError("set highestTierAllowed or highestTierName, not both")
        return self

    def as_spec(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, exclude_none=True)


class TopologyPolicy(_Model):
    default: Topology | None = None
    partition_default: Topology | None = Field(default=None, alias="partitionDefault")
    max_tier: int | None = Field(default=None, alias="maxTier", ge=0)

    @model_validator(mode="after")
    def _defaults_within_max(self) -> TopologyPolicy:
        for label, topo in (
            ("default", self.default),
            ("partitionDefault", self.partition_default),
        ):
            tier = topo.highest_tier_allowed if topo else None
            if tier is not None and self.max_tier is not None and tier > self.max_tier:
                raise ValueError(
                    f"{label}.highestTierAllowed {tier} exceeds maxTier {self.max_tier}"
                )
        return self


class PolicySpec(_Model):
    namespaces: NamespaceSelection
    wrap: WrapMode = WrapMode.OPT_IN
    # Whether, under wrap: Always, a user may keep an object out with autowrap.io/wrap=false.
    allow_opt_out: bool = Field(default=False, alias="allowOptOut")
    mode: Mode = Mode.ADOPT
    enforcement: Enforcement = Enforcement.ENFORCE
    queue: QueuePolicy = QueuePolicy()
    fault_tolerance: FaultTolerance = Field(default=FaultTolerance(), alias="faultTolerance")
    master_port: int = Field(default=23456, alias="masterPort", ge=1, le=65535)
    accelerators: tuple[str, ...] = DEFAULT_ACCELERATORS
    reserved_env: tuple[str, ...] = Field(default=(), alias="reservedEnv")
    topology: TopologyPolicy = TopologyPolicy()

    @field_validator("accelerators")
    @classmethod
    def _some_accelerator(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if not value:
            raise ValueError(
                "an empty list counts no accelerator, so every pod would get NPROC_PER_NODE=1; "
                "remove the field for the default list, or list your resource names "
                '(e.g. ["nvidia.com/gpu"])'
            )
        return value

    @model_validator(mode="after")
    def _opt_out_needs_always(self) -> PolicySpec:
        # Refused rather than ignored: under OptIn nothing is wrapped unless asked, so the field
        # would do nothing, and whoever wrote it most likely meant wrap: Always.
        if self.allow_opt_out and self.wrap is not WrapMode.ALWAYS:
            raise ValueError(
                "allowOptOut applies only to wrap: Always (under OptIn an object is wrapped only "
                "when it asks, so there is nothing to opt out of); remove it, or set wrap: Always"
            )
        return self


class PolicyMeta(_Model):
    name: str = Field(min_length=1)


class Policy(_Model):
    api_version: Literal["autowrap.io/v1alpha1"] = Field(alias="apiVersion")
    kind: Literal["Policy"]
    metadata: PolicyMeta
    spec: PolicySpec
    source: str = Field(default="", exclude=True)

    @property
    def name(self) -> str:
        return self.metadata.name


BUILTIN = Policy.model_validate(
    {
        "apiVersion": "autowrap.io/v1alpha1",
        "kind": "Policy",
        "metadata": {"name": "builtin"},
        "spec": {"namespaces": {"names": ["*"]}},
        "source": "<built-in>",
    }
)


class PolicyError(Exception):
    """A policy file that cannot be used; the message names the file and the field."""


# Namespaces (with their label sets) remembered per policy set: a cluster has a bounded number,
# and the memo starts over whenever it reaches this size.
MATCH_MEMO_SIZE = 4096


@dataclass(frozen=True)
class PolicySet:
    policies: tuple[Policy, ...]
    # The answer is a pure function of the (immutable) set and its arguments, and every
    # admission request asks it: it is computed once per namespace and label set.
    _memo: dict[tuple[str, frozenset[tuple[str, str]]], Match | None] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    @functools.cached_property
    def selects_by_labels(self) -> bool:
        """Whether any policy selects namespaces by label (so matching needs their labels)."""
        return any(p.spec.namespaces.selector is not None for p in self.policies)

    def match(self, namespace: str, namespace_labels: Mapping[str, str]) -> Match | None:
        key = (namespace, frozenset(namespace_labels.items()))
        try:
            return self._memo[key]
        except KeyError:
            pass
        found = match(self, namespace, namespace_labels)
        if len(self._memo) >= MATCH_MEMO_SIZE:
            self._memo.clear()
        self._memo[key] = found
        return found


@dataclass(frozen=True)
class Match:
    policy: Policy
    reason: str


def parse(text: str, *, source: str) -> list[Policy]:
    """Policies in one YAML file; raises PolicyError naming the file, document and field."""
    try:
        documents = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        raise PolicyError(yamltext.yaml_error(source, exc, text)) from None
    policies = []
    for i, doc in enumerate(documents):
        where = source if len(documents) == 1 else f"{source} (document {i + 1})"
        if not isinstance(doc, dict):
            raise PolicyError(f"{where}: expected a mapping with kind: Policy")
        try:
            policies.append(Policy.model_validate({**doc, "source": source}))
        except ValidationError as exc:
            problems = "; ".join(policyerrors.describe(Policy, e) for e in exc.errors())
            raise PolicyError(f"{where}: {problems}") from None
    return policies


def build(files: Iterable[tuple[str, str]]) -> PolicySet:
    """A policy set from (source, text) pairs; duplicate names are an error."""
    seen: dict[str, str] = {}
    policies: list[Policy] = []
    for source, text in files:
        for policy in parse(text, source=source):
            if policy.name in seen:
                raise PolicyError(
                    f"{source}: policy name {policy.name!r} is already used in {seen[policy.name]}"
                )
            seen[policy.name] = source
            policies.append(policy)
    for i, first in enumerate(policies):
        for second in policies[i + 1 :]:
            tie = _tie(first, second)
            if tie:
                raise PolicyError(
                    f"{second.source}: policies {first.name!r} ({first.source}) and "
                    f"{second.name!r} both select {tie} equally specifically, so which one "
                    "applies would depend only on their names; make one more specific (an exact "
                    "name, a longer glob, more selector requirements) or exclude those "
                    "namespaces from one of them"
                )
    return PolicySet(tuple(policies))


def _tie(a: Policy, b: Policy) -> str:
    """What two policies both select with the same specificity, or "" when nothing is sure to.

    Sure ties only: the same name or glob in both (not excluded by either) with equal label
    selectors, or equal selectors alone. Other overlaps depend on the namespace; ``match``
    names them when they happen."""
    sa, sb = a.spec.namespaces, b.spec.namespaces
    if sa.selector != sb.selector:
        return ""
    if not sa.names and not sb.names:
        return "the namespaces their (identical) label selectors match"
    for pattern in sa.names:
        if pattern in sb.names and not any(
            fnmatch.fnmatchcase(pattern, ex) for ex in (*sa.exclude, *sb.exclude)
        ):
            return f"the namespace name {pattern!r}" if _is_literal(pattern) else f"{pattern!r}"
    return ""


def _is_literal(pattern: str) -> bool:
    return not any(c in pattern for c in "*?[")


def _specificity(
    policy: Policy, namespace: str, labels: Mapping[str, str]
) -> tuple[int, int] | None:
    """How specifically a policy selects a namespace, or None when it does not select it."""
    sel = policy.spec.namespaces
    if any(fnmatch.fnmatchcase(namespace, pattern) for pattern in sel.exclude):
        return None
    name_score = 0
    if sel.names:
        if namespace in sel.names:
            name_score = 3000
        else:
            globs = [p for p in sel.names if fnmatch.fnmatchcase(namespace, p)]
            if not globs:
                return None
            literal = max(len(p.replace("*", "").replace("?", "")) for p in globs)
            name_score = 1000 + literal if literal else 0
    selector_score = 0
    if sel.selector is not None:
        if not sel.selector.matches(labels):
            return None
        selector_score = sel.selector.size
    return (name_score, selector_score)


def _describe(policy: Policy, namespace: str, score: tuple[int, int]) -> str:
    sel = policy.spec.namespaces
    parts = []
    if score[0] >= 3000:
        parts.append(f"names {namespace!r} explicitly")
    elif score[0] >= 1000:
        parts.append("matches it by name pattern")
    elif sel.names:
        parts.append("matches every namespace by name")
    if sel.selector is not None:
        parts.append(f"its label selector ({sel.selector.size} requirement(s)) matches")
    return " and ".join(parts)


def match(policies: PolicySet, namespace: str, labels: Mapping[str, str]) -> Match | None:
    """The most specific policy: exact name > name glob (longer literal first) > label selector
    (more requirements first) > catch-all; ties go to the alphabetically first policy name."""
    labels = {"kubernetes.io/metadata.name": namespace, **labels}
    scored = []
    for policy in policies.policies:
        score = _specificity(policy, namespace, labels)
        if score is not None:
            scored.append((score, policy))
    if not scored:
        return None
    scored.sort(key=lambda item: (-item[0][0], -item[0][1], item[1].name))
    (best_score, best), others = scored[0], scored[1:]
    reason = f"policy {best.name!r} ({best.source}) {_describe(best, namespace, best_score)}"
    tied = [p for score, p in others if score == best_score]
    lower = [p for score, p in others if score != best_score]
    if tied:
        reason += (
            "; equally specific: "
            + ", ".join(repr(p.name) for p in tied)
            + f" (chosen by name order only; make {best.name!r} or "
            + ("it" if len(tied) == 1 else "them")
            + " more specific)"
        )
    if lower:
        reason += "; less specific: " + ", ".join(repr(p.name) for p in lower)
    return Match(best, reason)
