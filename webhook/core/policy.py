"""Policies: the defaults and limits platform teams set, and which namespace gets which.

A policy file is YAML, one or more documents of ``kind: Policy``. Loading and matching are
pure: the shell reads the files and the namespace labels and hands them in as data. Matching
returns the chosen policy *and* the reason, so ``autowrap explain``, ``render --explain`` and
the server's log line tell the same story.

Policies layer: every policy that selects a namespace contributes, the most specific first. A
field the most specific policy does not set comes from the next one that does, and so on down
to autowrap's own defaults (``layer``). Caps (``faultTolerance.caps.*``, ``topology.maxTier``)
only tighten on the way up, unless the more specific policy lists the field under
``spec.loosen``. A layered result that cannot hold together (a default above an inherited cap,
a looser cap not listed under ``loosen``) is refused when the set is loaded, for the namespaces
the policies name (``build``); for any other namespace the stricter value applies and
``Match.notes`` says so.
"""

from __future__ import annotations

import difflib
import fnmatch
import functools
import re
from collections.abc import Iterable, Mapping, Sequence
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

# The caps a more specific policy may raise above an inherited one, by listing them under
# ``spec.loosen`` (field paths as written under ``spec``).
LOOSENABLE = (
    *(f"faultTolerance.caps.{key}" for key in FAULT_TOLERANCE_DURATIONS + FAULT_TOLERANCE_INTS),
    "topology.maxTier",
)


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


# Fields of a spec that layer, as (attribute, path under ``spec``): a value a policy sets
# replaces the inherited one whole (lists included), each fault-tolerance key on its own.
_LAYERED_FIELDS = (
    ("wrap", "wrap"),
    ("allow_opt_out", "allowOptOut"),
    ("mode", "mode"),
    ("enforcement", "enforcement"),
    ("master_port", "masterPort"),
    ("accelerators", "accelerators"),
    ("reserved_env", "reservedEnv"),
)
_QUEUE_FIELDS = (("default", "default"), ("allowed", "allowed"))
_TOPOLOGY_FIELDS = (
    ("default", "default"),
    ("partition_default", "partitionDefault"),
    ("max_tier", "maxTier"),
)


def own_values(spec: PolicySpec) -> dict[str, Any]:
    """The values a policy's file sets itself, by path under ``spec``, in the file's order
    where it has one; what it leaves out is not here (``null`` written out is)."""
    out: dict[str, Any] = {}
    written = spec.model_fields_set
    for attribute, path in _LAYERED_FIELDS:
        if attribute in written:
            out[path] = getattr(spec, attribute)
    if "queue" in written:
        for attribute, path in _QUEUE_FIELDS:
            if attribute in spec.queue.model_fields_set:
                out[f"queue.{path}"] = getattr(spec.queue, attribute)
    if "fault_tolerance" in written:
        for key, value in spec.fault_tolerance.defaults.items():
            out[f"faultTolerance.defaults.{key}"] = value
        for key, value in spec.fault_tolerance.caps.items():
            out[f"faultTolerance.caps.{key}"] = value
    if "topology" in written:
        for attribute, path in _TOPOLOGY_FIELDS:
            if attribute in spec.topology.model_fields_set:
                out[f"topology.{path}"] = getattr(spec.topology, attribute)
    return out


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
    # Caps this policy sets that may be looser than those of less specific policies.
    loosen: tuple[str, ...] = ()

    @field_validator("loosen")
    @classmethod
    def _loosenable(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for i, path in enumerate(value):
            if path not in LOOSENABLE:
                close = difflib.get_close_matches(path, LOOSENABLE, n=1)
                hint = (
                    f"did you mean {close[0]!r}?"
                    if close
                    else "list caps only: " + ", ".join(LOOSENABLE)
                )
                raise ValueError(f"[{i}] {path!r} is not a cap a policy can loosen; {hint}")
        return value

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
        # would do nothing, and whoever wrote it most likely meant wrap: Always. A policy that
        # leaves wrap unset may inherit Always: ``layer`` judges that.
        written = "wrap" in self.model_fields_set
        if self.allow_opt_out and written and self.wrap is not WrapMode.ALWAYS:
            raise ValueError(OPT_OUT_NEEDS_ALWAYS)
        return self

    @model_validator(mode="after")
    def _loosens_what_it_sets(self) -> PolicySpec:
        if not self.loosen:
            return self
        own = own_values(self)
        for path in self.loosen:
            if path not in own:
                raise ValueError(
                    f"loosen lists {path!r}, which this policy does not set; set {path} to the "
                    "cap these namespaces get, or remove it from loosen"
                )
        return self


OPT_OUT_NEEDS_ALWAYS = (
    "allowOptOut applies only to wrap: Always (under OptIn an object is wrapped only "
    "when it asks, so there is nothing to opt out of); remove it, or set wrap: Always"
)


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
    """What a namespace gets. ``policy`` is the most specific policy that selects it, with its
    spec layered over the less specific ones' (``layer``): whoever reads ``policy.spec`` reads
    the effective values."""

    policy: Policy
    reason: str
    # Where each value of the effective spec comes from: its field path under ``spec``
    # (``faultTolerance.caps.retryLimit``) -> the policy's name, BUILT_IN where none sets it.
    origins: Mapping[str, str] = field(default_factory=dict)
    # Every policy that selects the namespace, the most specific first.
    chain: tuple[Policy, ...] = ()
    # Inherited values changed to fit the more specific policy, and values set against the
    # layering rules that were not applied (a looser cap without ``loosen``).
    notes: tuple[str, ...] = ()

    def origin(self, path: str) -> str:
        """The name of the policy the effective value at ``path`` comes from, BUILT_IN where
        no policy sets it."""
        return self.origins.get(path, BUILT_IN)

    def named_for(self, path: str) -> str:
        """The policy to name when saying the value at ``path``: the one it comes from, or the
        most specific one where it is autowrap's default."""
        return self.origins.get(path, self.policy.name)


# --- layering: one effective spec from every policy that selects a namespace ----------------

# The origin of a value no policy sets.
BUILT_IN = "built-in"


@dataclass(frozen=True)
class Conflict:
    """A value a policy sets that layering does not apply, said at its field."""

    policy: Policy
    path: str  # under spec
    message: str

    def render(self) -> str:
        return f"{self.policy.source}: spec.{self.path}: {self.message}"


@dataclass(frozen=True)
class Layered:
    spec: PolicySpec
    origins: dict[str, str]
    conflicts: tuple[Conflict, ...]
    # Inherited values changed to fit a more specific policy, one sentence each.
    adjusted: tuple[str, ...]


def _is_cap(path: str) -> bool:
    return path.startswith("faultTolerance.caps.") or path == "topology.maxTier"


def _looser(path: str, value: Any, than: Any) -> bool:
    """Whether cap ``value`` allows more than cap ``than`` (None: no cap at all)."""
    if than is None:
        return False
    if value is None:
        return True
    if path == "topology.maxTier":
        return int(value) > int(than)
    return cap_exceeded(path.rsplit(".", 1)[1], str(value), str(than))


def shown(value: Any) -> str:
    """A policy value as its YAML says it."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, StrEnum):
        return value.value
    if isinstance(value, tuple):
        return "[" + ", ".join(value) + "]"
    if isinstance(value, Topology):
        parts = [f"mode {value.mode}"]
        if value.highest_tier_allowed is not None:
            parts.append(f"highestTierAllowed {value.highest_tier_allowed}")
        if value.highest_tier_name is not None:
            parts.append(f"highestTierName {value.highest_tier_name}")
        return "{" + ", ".join(parts) + "}"
    return str(value)


def _of(policy: Policy) -> str:
    return f"policy {policy.name!r} ({policy.source})"


def layer(chain: Sequence[Policy]) -> Layered:
    """The effective spec for a namespace every policy of ``chain`` selects, the most specific
    first: each field from the most specific policy that sets it, else autowrap's default.

    A cap set by a more specific policy applies only where it is tighter, or listed under its
    ``loosen``. Inherited values that no longer fit what a more specific policy sets (a default
    above its cap, a default queue outside its allowed list, a tier above its maxTier) are
    brought within it and said in ``adjusted``; values a policy sets itself that do not fit
    what it inherits are ``conflicts`` (the stricter value applies)."""
    ordered = list(reversed(chain))
    rank = {p.name: i for i, p in enumerate(ordered)}  # higher: more specific
    values: dict[str, tuple[Any, Policy]] = {}
    conflicts: list[Conflict] = []
    adjusted: list[str] = []
    for p in ordered:
        for path, value in own_values(p.spec).items():
            held = values.get(path)
            if (
                held is not None
                and _is_cap(path)
                and path not in p.spec.loosen
                and _looser(path, value, held[0])
            ):
                conflicts.append(Conflict(p, path, (
                    f"{shown(value)} is looser than the cap {shown(held[0])} of "
                    f"{_of(held[1])}, which also selects these namespaces; a more specific "
                    f"policy only tightens a cap: use at most {shown(held[0])}, or list "
                    f"{path!r} under spec.loosen to raise it for these namespaces"
                )))  # fmt: skip
                continue
            values[path] = (value, p)

    def more_specific(a: Policy, b: Policy) -> bool:
        return rank[a.name] > rank[b.name]

    for key in FAULT_TOLERANCE_DURATIONS + FAULT_TOLERANCE_INTS:
        d_path, c_path = f"faultTolerance.defaults.{key}", f"faultTolerance.caps.{key}"
        default, cap = values.get(d_path), values.get(c_path)
        if default is None or cap is None or not cap_exceeded(key, default[0], cap[0]):
            continue
        if more_specific(cap[1], default[1]):
            adjusted.append(
                f"{d_path}: {default[0]} of policy {default[1].name!r} is above the cap "
                f"{cap[0]} of policy {cap[1].name!r}, so the default is {cap[0]}"
            )
        else:
            conflicts.append(Conflict(default[1], d_path, (
                f"{default[0]} exceeds the cap {cap[0]} of {_of(cap[1])}, which also selects "
                f"these namespaces; use at most {cap[0]}, or set {c_path} in this policy "
                "too (listed under spec.loosen)"
            )))  # fmt: skip
        values[d_path] = (cap[0], cap[1])

    max_tier = values.get("topology.maxTier")
    for t_path in ("topology.default", "topology.partitionDefault"):
        topo = values.get(t_path)
        if topo is None or topo[0] is None or max_tier is None or max_tier[0] is None:
            continue
        tier = topo[0].highest_tier_allowed
        if tier is None or tier <= max_tier[0]:
            continue
        if more_specific(max_tier[1], topo[1]):
            adjusted.append(
                f"{t_path}: highestTierAllowed {tier} of policy {topo[1].name!r} is above the "
                f"maxTier {max_tier[0]} of policy {max_tier[1].name!r}, so it is {max_tier[0]}"
            )
        else:
            conflicts.append(Conflict(topo[1], f"{t_path}.highestTierAllowed", (
                f"{tier} exceeds the maxTier {max_tier[0]} of {_of(max_tier[1])}, which also "
                f"selects these namespaces; use at most {max_tier[0]}, or set topology.maxTier "
                "in this policy too (listed under spec.loosen)"
            )))  # fmt: skip
        lowered = topo[0].model_copy(update={"highest_tier_allowed": max_tier[0]})
        values[t_path] = (lowered, max_tier[1])

    queue, allowed = values.get("queue.default"), values.get("queue.allowed")
    if queue and allowed and queue[0] and allowed[0] and queue[0] not in allowed[0]:
        if more_specific(allowed[1], queue[1]):
            adjusted.append(
                f"queue.default: {queue[0]!r} of policy {queue[1].name!r} is not in the allowed "
                f"list of policy {allowed[1].name!r}, so there is no default queue"
            )
            values["queue.default"] = (None, allowed[1])
        else:
            conflicts.append(Conflict(queue[1], "queue.default", (
                f"{queue[0]!r} is not in the allowed list {shown(allowed[0])} of "
                f"{_of(allowed[1])}, which also selects these namespaces; use one of them, or "
                "set queue.allowed in this policy too"
            )))  # fmt: skip

    opt_out, wrap = values.get("allowOptOut"), values.get("wrap")
    if opt_out is not None and opt_out[0] and (wrap is None or wrap[0] is not WrapMode.ALWAYS):
        if wrap is None or more_specific(opt_out[1], wrap[1]):
            conflicts.append(Conflict(opt_out[1], "allowOptOut", OPT_OUT_NEEDS_ALWAYS + (
                f" (these namespaces get wrap: OptIn from policy {wrap[1].name!r})"
                if wrap is not None else ""
            )))  # fmt: skip
        values["allowOptOut"] = (False, wrap[1] if wrap is not None else opt_out[1])

    origins = {path: p.name for path, (_, p) in values.items()}
    if len(chain) == 1 and not conflicts and not adjusted:
        return Layered(chain[0].spec, origins, (), ())
    return Layered(_effective(chain[0], values), origins, tuple(conflicts), tuple(adjusted))


def _effective(best: Policy, values: Mapping[str, tuple[Any, Policy]]) -> PolicySpec:
    """The spec made of ``values`` (autowrap's defaults elsewhere), selecting as ``best``."""
    base = BUILTIN.spec

    def get(path: str, default: Any) -> Any:
        held = values.get(path)
        return default if held is None else held[0]

    def ft(kind: str) -> dict[str, str]:
        prefix = f"faultTolerance.{kind}."
        return {path.removeprefix(prefix): v for path, (v, _) in values.items()
                if path.startswith(prefix)}  # fmt: skip

    return PolicySpec.model_construct(
        namespaces=best.spec.namespaces,
        wrap=get("wrap", base.wrap),
        allow_opt_out=get("allowOptOut", base.allow_opt_out),
        mode=get("mode", base.mode),
        enforcement=get("enforcement", base.enforcement),
        queue=QueuePolicy.model_construct(
            default=get("queue.default", base.queue.default),
            allowed=get("queue.allowed", base.queue.allowed),
        ),
        fault_tolerance=FaultTolerance.model_construct(defaults=ft("defaults"), caps=ft("caps")),
        master_port=get("masterPort", base.master_port),
        accelerators=get("accelerators", base.accelerators),
        reserved_env=get("reservedEnv", base.reserved_env),
        topology=TopologyPolicy.model_construct(
            default=get("topology.default", base.topology.default),
            partition_default=get("topology.partitionDefault", base.topology.partition_default),
            max_tier=get("topology.maxTier", base.topology.max_tier),
        ),
        loosen=best.spec.loosen,
    )


def effective_values(spec: PolicySpec) -> list[tuple[str, Any]]:
    """Every value of an effective spec that decides something, by path under ``spec``, in the
    order docs/policies.md lists them (``explain``'s table)."""
    out: list[tuple[str, Any]] = [
        ("mode", spec.mode),
        ("enforcement", spec.enforcement),
        ("wrap", spec.wrap),
        ("allowOptOut", spec.allow_opt_out),
        ("queue.default", spec.queue.default),
        ("queue.allowed", spec.queue.allowed),
        ("masterPort", spec.master_port),
        ("accelerators", spec.accelerators),
        ("reservedEnv", spec.reserved_env),
    ]
    out += [(f"faultTolerance.defaults.{k}", v) for k, v in spec.fault_tolerance.defaults.items()]
    out += [(f"faultTolerance.caps.{k}", v) for k, v in spec.fault_tolerance.caps.items()]
    out += [
        ("topology.default", spec.topology.default),
        ("topology.partitionDefault", spec.topology.partition_default),
        ("topology.maxTier", spec.topology.max_tier),
    ]
    return out


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
            problems = policyerrors.describe_all(Policy, exc.errors())
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
    _check_layering(policies)
    return PolicySet(tuple(policies))


def _check_layering(policies: Sequence[Policy]) -> None:
    """Refuse a set whose layering does not hold together (``layer``'s conflicts) for a
    namespace its policies name or select: one such namespace is named with each problem."""
    problems: dict[tuple[str, str], str] = {}
    for namespace, labels in _probes(policies):
        chain = tuple(p for _, p in _scored(policies, namespace, labels))
        if not chain:
            continue
        for conflict in layer(chain).conflicts:
            labelled = ", ".join(f"{k}={v}" for k, v in labels.items())
            example = f"namespace {namespace!r}" + (f" labelled {labelled}" if labelled else "")
            problems.setdefault(
                (conflict.policy.name, conflict.path), f"{conflict.render()} ({example}, for one)"
            )
    if problems:
        raise PolicyError("; ".join(problems.values()))


def _probes(policies: Sequence[Policy]) -> list[tuple[str, dict[str, str]]]:
    """Namespaces (name, labels) the policies themselves name or select: an example of each
    name and glob, with no labels and with the labels of each selector."""
    names = {"x"}
    label_sets: list[dict[str, str]] = [{}]
    for p in policies:
        sel = p.spec.namespaces
        names.update(e for e in (_example(pattern) for pattern in sel.names) if e)
        if sel.selector is not None:
            labels = dict(sel.selector.match_labels)
            for requirement in sel.selector.match_expressions:
                if requirement.operator == "In":
                    labels[requirement.key] = requirement.values[0]
                elif requirement.operator == "Exists":
                    labels[requirement.key] = "x"
            if labels not in label_sets:
                label_sets.append(labels)
    if len(label_sets) > 2:
        label_sets.append({k: v for labels in label_sets for k, v in labels.items()})
    return [(name, labels) for name in sorted(names) for labels in label_sets]


def _example(pattern: str) -> str:
    """A namespace name the name or glob matches, or "" when none is easily made."""
    example = _GLOB_CLASS.sub(
        lambda m: "x" if m.group(0).startswith("[!") else m.group(0)[1], pattern
    )
    example = example.replace("*", "x").replace("?", "x")
    return example if fnmatch.fnmatchcase(example, pattern) else ""


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


def _scored(
    policies: Sequence[Policy], namespace: str, labels: Mapping[str, str]
) -> list[tuple[tuple[int, int], Policy]]:
    """Every policy that selects the namespace with its specificity, the most specific first
    (ties: the alphabetically first name)."""
    labels = {"kubernetes.io/metadata.name": namespace, **labels}
    scored = []
    for policy in policies:
        score = _specificity(policy, namespace, labels)
        if score is not None:
            scored.append((score, policy))
    scored.sort(key=lambda item: (-item[0][0], -item[0][1], item[1].name))
    return scored


def match(policies: PolicySet, namespace: str, labels: Mapping[str, str]) -> Match | None:
    """The most specific policy: exact name > name glob (longer literal first) > label selector
    (more requirements first) > catch-all; ties go to the alphabetically first policy name. Its
    spec is layered over the others that select the namespace (``layer``)."""
    scored = _scored(policies.policies, namespace, labels)
    if not scored:
        return None
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
    chain = tuple(p for _, p in scored)
    layered = layer(chain)
    effective = (
        best if layered.spec is best.spec else best.model_copy(update={"spec": layered.spec})
    )
    notes = layered.adjusted + tuple(
        f"{c.path}: {c.policy.name!r} sets a value its less specific policies do not allow, so "
        f"the stricter one applies here: {c.message}"
        for c in layered.conflicts
    )
    return Match(effective, reason, layered.origins, chain, notes)
