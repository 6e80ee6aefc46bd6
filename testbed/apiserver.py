"""An emulator of kube-apiserver's admission-webhook dispatch, for tests without a cluster.

No kube-apiserver can run on the test machines, yet what matters most about a webhook is how
the apiserver treats it: TLS verified against the configuration's ``caBundle`` only, SNI
``<svc>.<ns>.svc``, ``?timeout=Ns``, the response rules of
``k8s.io/apiserver/pkg/admission/plugin/webhook/request/admissionreview.go``, patch
application, ``failurePolicy``, dry-run versus ``sideEffects``, sequential mutating webhooks
with ``reinvocationPolicy: IfNeeded``, then parallel validating webhooks. This module
reproduces that behaviour around a real webhook server listening on a loopback port.

Line citations are to k8s.io/apiserver at 24a394e5. One write goes, as upstream:

1. the request body is refused over 3 MiB (413 RequestEntityTooLarge) before anything else
   (pkg/endpoints/handlers/rest.go:372-389, pkg/server/config.go:474);
2. mutating webhooks, one after the other;
3. on CREATE the name is generated from ``generateName``; then the storage strategy's own
   validation (``validate_object``: a CRD's schema, for instance) may refuse the object with
   its 422 before any validating webhook is called (pkg/registry/generic/registry/store.go:569
   rest.BeforeCreate before :575 createValidation; :825 rest.BeforeUpdate before :839-843);
4. ValidatingAdmissionPolicies (``admission_policies``: testbed/admission_policy.py),
   after the mutating webhooks and before the validating ones, as kube-apiserver orders its
   admission plugins (kubernetes pkg/kubeapiserver/options/plugins.go ``AllOrderedPlugins``:
   MutatingAdmissionWebhook, ValidatingAdmissionPolicy, ValidatingAdmissionWebhook); a denial
   there means no validating webhook is called;
5. validating webhooks, all at once.

Where kube-apiserver is non-deterministic (which of several failing validating webhooks is
reported) the emulator behaves as kube-apiserver does: every validating webhook runs to
completion and the failure that finished first is the one reported, whatever the configuration
order (pkg/admission/plugin/webhook/validating/dispatcher.go:127 and :229-245).

One rule is stricter than kube-apiserver, because the admission service promises it: any
HTTP status other than 200 is a call error (client-go would also decode 201-206).

Three kube-apiserver behaviours that surprise people are kept on purpose:

* a patch that decodes but does not apply fails the request with an InternalError whatever
  the ``failurePolicy`` (pkg/admission/plugin/webhook/mutating/dispatcher.go:355-361), while a
  patch that is not a JSON Patch at all (not an array of operations) is a call error, so the
  ``failurePolicy`` decides (:336-339); an empty patch (``[]``) is no change (:341-343);
* mutating webhooks see ``name`` absent and ``metadata.name`` empty under ``generateName``;
  the name is generated after mutation and before validation, so validating webhooks see it
  in the object and in ``request.name`` (pkg/registry/rest/create.go:218-230);
* several failing validating webhooks: the first to finish decides (above).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import copy
import datetime
import itertools
import json
import math
import random
import ssl
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import aiohttp
import jsonpatch
import jsonpointer

from testbed.admission_policy import PolicySet, denial_status
from testbed.pki import client_ssl_context

JsonDict = dict[str, Any]
MatchPredicate = Callable[[JsonDict], bool]
# An in-process validating webhook: the AdmissionRequest dict in, a denial message or None out.
# A denial is a message (read as a webhook's, code 400), or a whole Status: an admission
# plugin of kube-apiserver's own answers with its own code and text.
InProcessValidator = tuple[str, Callable[[JsonDict], "str | JsonDict | None"]]
# An in-process mutating webhook: (name, mutate), ``mutate`` given the AdmissionRequest and
# returning the object it would have stored instead (None: no change).
InProcessMutator = tuple[str, Callable[[JsonDict], "JsonDict | None"]]
# The storage strategy's validation (what rest.BeforeCreate / rest.BeforeUpdate run): the object
# and the old object (None on CREATE) in, a metav1.Status failure out, or None when valid.
ObjectValidation = Callable[[JsonDict, "JsonDict | None"], "JsonDict | None"]
Phase = Literal["mutating", "validating"]

ADMISSION_API_VERSION = "admission.k8s.io/v1"
REGISTRATION_API_VERSION = "admissionregistration.k8s.io/v1"
METADATA_NAME_LABEL = "kubernetes.io/metadata.name"
DEFAULT_TIMEOUT_SECONDS = 10
DEFAULT_REQUEST_TIMEOUT = 60.0
WARNING_TOTAL_RUNES = 4 * 1024
WARNING_ITEM_RUNES = 256
GENERATED_SUFFIX_LENGTH = 5
MAX_GENERATE_NAME_PREFIX = 63 - GENERATED_SUFFIX_LENGTH
# k8s.io/apimachinery/pkg/util/rand: no vowels (no words), no confusable characters.
GENERATED_NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
# --max-request-body-bytes default (pkg/server/config.go:474): a create, update or patch body
# longer than this is refused before it is decoded (pkg/endpoints/handlers/rest.go:372-389).
MAX_REQUEST_BODY_BYTES = 3 * 1024 * 1024

# (group, kind) -> (plural resource, namespaced)
KNOWN_RESOURCES: dict[tuple[str, str], tuple[str, bool]] = {
    ("", "Pod"): ("pods", True),
    ("", "Namespace"): ("namespaces", False),
    ("", "Service"): ("services", True),
    ("", "ConfigMap"): ("configmaps", True),
    ("batch", "Job"): ("jobs", True),
    ("batch.volcano.sh", "Job"): ("jobs", True),
    ("workload.codeflare.dev", "AppWrapper"): ("appwrappers", True),
    ("kueue.x-k8s.io", "LocalQueue"): ("localqueues", True),
}

_OPERATIONS = frozenset({"CREATE", "UPDATE", "DELETE", "CONNECT", "*"})
_EXEMPT_FROM_POLICIES = frozenset(
    {
        "ValidatingWebhookConfiguration",
        "MutatingWebhookConfiguration",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    }
)
_SCOPES = frozenset({"*", "Cluster", "Namespaced"})
_SIDE_EFFECTS = frozenset({"None", "NoneOnDryRun", "Some", "Unknown"})
_SELECTOR_OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist"})

_REASON_BY_CODE = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    410: "Expired",
    413: "RequestEntityTooLarge",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


# --- public records and errors ----------------------------------------------------------------


class WebhookConfigError(ValueError):
    """The webhook configuration could not be used (kube-apiserver would refuse it too)."""


class MatchConditionNotEmulated(LookupError):
    """A matchConditions CEL expression has no Python predicate; it is never assumed true."""


class WebhookContractViolation(AssertionError):
    """Raised in strict mode when a webhook breaks the apiserver's response contract."""


@dataclass(frozen=True)
class UserInfo:
    """The authenticated requester, sent as ``request.userInfo``."""

    username: str = "kubernetes-admin"
    uid: str = ""
    groups: tuple[str, ...] = ("system:masters", "system:authenticated")
    extra: Mapping[str, Sequence[str]] = field(default_factory=dict)

    def to_json(self) -> JsonDict:
        """authentication/v1 UserInfo; every field is ``omitempty`` on the wire."""
        out: JsonDict = {}
        if self.username:
            out["username"] = self.username
        if self.uid:
            out["uid"] = self.uid
        if self.groups:
            out["groups"] = list(self.groups)
        if self.extra:
            out["extra"] = {k: list(v) for k, v in self.extra.items()}
        return out


@dataclass(frozen=True)
class ResourceInfo:
    """What the apiserver knows about the object's type when it builds an AdmissionReview."""

    group: str
    version: str
    kind: str
    resource: str
    namespaced: bool

    @property
    def qualified_resource(self) -> str:
        return f"{self.resource}.{self.group}" if self.group else self.resource

    @property
    def qualified_kind(self) -> str:
        return f"{self.kind}.{self.group}" if self.group else self.kind


@dataclass(frozen=True)
class WebhookCall:
    """One HTTP call the emulator made to a webhook (or tried to make)."""

    name: str
    configuration: str
    phase: Phase
    round: int
    path: str
    url: str
    request_uid: str
    timeout_param: str
    http_status: int | None
    duration: float
    allowed: bool | None
    patched: bool
    error: str | None
    failed_open: bool
    request: JsonDict
    response: JsonDict | None


@dataclass(frozen=True)
class AdmissionResult:
    """What a client of kube-apiserver would observe for one write request.

    ``object`` is the object as far as admission got: after applied patches and, when
    allowed, with the fields the apiserver fills on create (name from ``generateName``, uid,
    creationTimestamp, and resourceVersion when persisted). ``warnings`` are what the client
    would receive as ``Warning`` headers, after the apiserver's truncation.
    """

    allowed: bool
    object: JsonDict
    status_code: int
    reason: str
    message: str
    warnings: tuple[str, ...]
    calls: tuple[WebhookCall, ...]
    status: JsonDict | None
    dry_run: bool


def status_json(
    code: int, message: str, reason: str | None = None, details: JsonDict | None = None
) -> JsonDict:
    """A metav1.Status failure body, as kube-apiserver serialises it (an empty reason is no
    field: ``json:"reason,omitempty"``)."""
    out: JsonDict = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
    }
    said = reason if reason is not None else _REASON_BY_CODE.get(code, "")
    if said:
        out["reason"] = said
    if details is not None:
        out["details"] = details
    out["code"] = code
    return out


def request_entity_too_large(limit: int = MAX_REQUEST_BODY_BYTES) -> JsonDict:
    """What limitedReadBody answers for a body over ``limit`` bytes (handlers/rest.go:385-387):
    apierrors.NewRequestEntityTooLargeError (k8s.io/apimachinery pkg/api/errors/errors.go),
    413 with the message ``Request entity too large: limit is <limit>`` and no details."""
    return status_json(413, f"Request entity too large: limit is {limit}", "RequestEntityTooLarge")


def request_body_size(obj: Any) -> int:
    """Bytes of ``obj`` as a client sends it: compact JSON, UTF-8 (Go's encoding/json writes
    no whitespace between tokens and non-ASCII characters unescaped)."""
    return len(json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode())


# --- configuration ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Webhook:
    """One entry of ``webhooks[]`` with v1 defaults applied."""

    name: str
    configuration: str
    mutating: bool
    service_name: str
    service_namespace: str
    path: str
    port: int
    ca_pem: str
    rules: tuple[JsonDict, ...]
    failure_policy: str
    side_effects: str | None
    timeout_seconds: int
    object_selector: JsonDict
    namespace_selector: JsonDict
    match_conditions: tuple[tuple[str, str], ...]
    reinvocation_policy: str

    @property
    def key(self) -> tuple[str, str]:
        return (self.configuration, self.name)

    @property
    def hostname(self) -> str:
        return f"{self.service_name}.{self.service_namespace}.svc"

    @property
    def phase(self) -> Phase:
        return "mutating" if self.mutating else "validating"


def _require(cond: bool, message: str) -> None:
    if not cond:
        raise WebhookConfigError(message)


def _decode_ca_bundle(value: str, where: str) -> str:
    try:
        pem = base64.b64decode(value, validate=True).decode("ascii")
    except (binascii.Error, UnicodeDecodeError) as exc:
        raise WebhookConfigError(f"{where}: caBundle is not base64 PEM: {exc}") from exc
    _require("-----BEGIN CERTIFICATE-----" in pem, f"{where}: caBundle holds no PEM certificate")
    return pem


def _check_selector(selector: JsonDict, where: str) -> None:
    for expr in selector.get("matchExpressions") or []:
        op = expr.get("operator")
        _require(op in _SELECTOR_OPERATORS, f"{where}: unsupported selector operator {op!r}")
        values = expr.get("values") or []
        if op in ("In", "NotIn"):
            _require(bool(values), f"{where}: operator {op} needs values")
        else:
            _require(not values, f"{where}: operator {op} takes no values")


def _check_rules(rules: Sequence[JsonDict], where: str) -> None:
    for rule in rules:
        for op in rule.get("operations") or []:
            _require(op in _OPERATIONS, f"{where}: unknown operation {op!r}")
        _require(rule.get("scope", "*") in _SCOPES, f"{where}: unknown scope {rule.get('scope')!r}")


def _parse_webhook(
    raw: JsonDict,
    configuration: str,
    mutating: bool,
    default_ca_bundle: str | None,
    match_conditions: Mapping[str, MatchPredicate],
) -> Webhook:
    name = raw.get("name")
    _require(isinstance(name, str) and bool(name), f"{configuration}: webhook without a name")
    assert isinstance(name, str)
    where = f"{configuration}/{name}"
    client = raw.get("clientConfig") or {}
    _require("url" not in client, f"{where}: clientConfig.url is not emulated, use service")
    service = client.get("service")
    if not isinstance(service, dict):
        raise WebhookConfigError(f"{where}: clientConfig.service is required")
    ca_bundle = client.get("caBundle") or default_ca_bundle
    _require(bool(ca_bundle), f"{where}: no caBundle (pass ca_bundle= to inject one)")
    versions = raw.get("admissionReviewVersions") or []
    _require("v1" in versions, f"{where}: admissionReviewVersions must include v1")
    failure_policy = raw.get("failurePolicy", "Fail")
    _require(failure_policy in ("Fail", "Ignore"), f"{where}: bad failurePolicy")
    side_effects = raw.get("sideEffects")
    _require(side_effects is None or side_effects in _SIDE_EFFECTS, f"{where}: bad sideEffects")
    timeout = raw.get("timeoutSeconds", DEFAULT_TIMEOUT_SECONDS)
    _require(isinstance(timeout, int) and 1 <= timeout <= 30, f"{where}: timeoutSeconds 1-30")
    reinvocation = raw.get("reinvocationPolicy", "Never") if mutating else "Never"
    _require(reinvocation in ("Never", "IfNeeded"), f"{where}: bad reinvocationPolicy")
    rules = tuple(raw.get("rules") or [])
    _check_rules(rules, where)
    object_selector = raw.get("objectSelector") or {}
    namespace_selector = raw.get("namespaceSelector") or {}
    _check_selector(object_selector, f"{where}.objectSelector")
    _check_selector(namespace_selector, f"{where}.namespaceSelector")
    conditions = tuple((c["name"], c["expression"]) for c in raw.get("matchConditions") or [])
    for cond_name, expression in conditions:
        if expression not in match_conditions:
            raise MatchConditionNotEmulated(
                f"{where}: matchCondition {cond_name!r} has no Python predicate for the CEL "
                f"expression {expression!r}; pass match_conditions={{expression: predicate}}"
            )
    return Webhook(
        name=name,
        configuration=configuration,
        mutating=mutating,
        service_name=service["name"],
        service_namespace=service["namespace"],
        path=service.get("path") or "/",
        port=int(service.get("port", 443)),
        ca_pem=_decode_ca_bundle(str(ca_bundle), where),
        rules=rules,
        failure_policy=failure_policy,
        side_effects=side_effects,
        timeout_seconds=timeout,
        object_selector=object_selector,
        namespace_selector=namespace_selector,
        match_conditions=conditions,
        reinvocation_policy=reinvocation,
    )


def parse_configurations(
    configurations: Iterable[JsonDict],
    default_ca_bundle: str | None = None,
    match_conditions: Mapping[str, MatchPredicate] | None = None,
) -> tuple[list[Webhook], list[Webhook]]:
    """Split configurations into (mutating, validating) webhooks in dispatch order.

    kube-apiserver sorts configurations by ``metadata.name`` and keeps the list order inside
    each one, so that is the order here too.
    """
    conditions = match_conditions or {}
    mutating: list[Webhook] = []
    validating: list[Webhook] = []
    configs = sorted(configurations, key=lambda c: str((c.get("metadata") or {}).get("name", "")))
    for config in configs:
        kind = config.get("kind")
        _require(
            config.get("apiVersion") == REGISTRATION_API_VERSION,
            f"unsupported apiVersion {config.get('apiVersion')!r}",
        )
        _require(
            kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"),
            f"unsupported kind {kind!r}",
        )
        is_mutating = kind == "MutatingWebhookConfiguration"
        config_name = str((config.get("metadata") or {}).get("name", ""))
        _require(bool(config_name), f"{kind} without metadata.name")
        hooks = [
            _parse_webhook(raw, config_name, is_mutating, default_ca_bundle, conditions)
            for raw in config.get("webhooks") or []
        ]
        names = [h.name for h in hooks]
        _require(len(names) == len(set(names)), f"{config_name}: duplicate webhook names")
        (mutating if is_mutating else validating).extend(hooks)
    return mutating, validating


# --- matching -----------------------------------------------------------------------------------


def selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """metav1.LabelSelector semantics; an absent or empty selector matches everything."""
    if not selector:
        return True
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        present = key in labels
        if op == "In" and not (present and labels[key] in values):
            return False
        if op == "NotIn" and present and labels[key] in values:
            return False
        if op == "Exists" and not present:
            return False
        if op == "DoesNotExist" and present:
            return False
    return True


def _split_resource(entry: str) -> tuple[str, str]:
    res, _, sub = entry.partition("/")
    return res, sub


def rule_matches(
    rule: Mapping[str, Any],
    operation: str,
    info: ResourceInfo,
    namespace: str,
    subresource: str = "",
) -> bool:
    """One RuleWithOperations, as k8s.io/apiserver/pkg/admission/plugin/webhook/predicates."""

    def listed(values: Iterable[str], wanted: str) -> bool:
        return any(v == "*" or v == wanted for v in values)

    if not listed(rule.get("operations") or [], operation):
        return False
    if not listed(rule.get("apiGroups") or [], info.group):
        return False
    if not listed(rule.get("apiVersions") or [], info.version):
        return False
    resource_ok = False
    for entry in rule.get("resources") or []:
        res, sub = _split_resource(entry)
        if (res == "*" or res == info.resource) and (sub == "*" or sub == subresource):
            resource_ok = True
            break
    if not resource_ok:
        return False
    scope = rule.get("scope", "*")
    is_namespace = info.group == "" and info.resource == "namespaces"
    if scope == "Namespaced":
        return not is_namespace and namespace != ""
    if scope == "Cluster":
        return is_namespace or namespace == ""
    return True


def resource_info(
    obj: Mapping[str, Any], resource: str | None = None, namespaced: bool | None = None
) -> ResourceInfo:
    """Group/version/resource from apiVersion and kind, with an override for unknown kinds."""
    api_version = str(obj.get("apiVersion", ""))
    kind = str(obj.get("kind", ""))
    if not api_version or not kind:
        raise ValueError("object needs apiVersion and kind")
    group, _, version = api_version.rpartition("/")
    known = KNOWN_RESOURCES.get((group, kind))
    if resource is None and known is None:
        raise ValueError(f"unknown kind {kind} in {api_version!r}: pass resource=")
    plural = resource or (known[0] if known else "")
    is_namespaced = namespaced if namespaced is not None else (known[1] if known else True)
    return ResourceInfo(
        group=group, version=version, kind=kind, resource=plural, namespaced=is_namespaced
    )


# --- warnings -----------------------------------------------------------------------------------


class WarningRecorder:
    """Port of k8s.io/apiserver/pkg/endpoints/filters/warning.go: dedupe, then truncate.

    While the total stays within 4096 runes every warning is kept whole; the first warning
    that would exceed it switches to truncation: all warnings are replayed cut to 256 runes,
    and later ones are added (cut) until 4096 runes have been written.
    """

    def __init__(self) -> None:
        self._recorded: set[str] = set()
        self._ordered: list[str] = []
        self._written = 0
        self._truncating = False
        self.headers: list[str] = []

    def add(self, text: str) -> None:
        if not text:
            return
        if self._written >= WARNING_TOTAL_RUNES and self._truncating:
            return
        if text in self._recorded:
            return
        self._recorded.add(text)
        self._ordered.append(text)
        if self._truncating and len(text) > WARNING_ITEM_RUNES:
            text = text[:WARNING_ITEM_RUNES]
        if self._written + len(text) <= WARNING_TOTAL_RUNES or self._truncating:
            self._written += len(text)
            self.headers.append(text)
            return
        self._truncating = True
        self._written = 0
        self.headers = []
        for item in self._ordered:
            cut = item[:WARNING_ITEM_RUNES]
            self._written += len(cut)
            self.headers.append(cut)


# --- dispatch internals -------------------------------------------------------------------------


class _CallError(Exception):
    """ErrCallingWebhook: the failurePolicy decides whether the request fails."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class _Reject(Exception):
    """A StatusError that ends the request whatever the failurePolicy."""

    def __init__(self, status: JsonDict) -> None:
        super().__init__(status.get("message", ""))
        self.status = status


@dataclass
class _Attempt:
    """Mutable state of one request while it goes through admission."""

    info: ResourceInfo
    namespace: str
    name: str
    operation: str
    user: UserInfo
    dry_run: bool
    old_object: JsonDict | None
    options: JsonDict
    deadline: float
    validators: tuple[InProcessValidator, ...] = ()
    mutators: tuple[InProcessMutator, ...] = ()
    subresource: str = ""
    warnings: WarningRecorder = field(default_factory=WarningRecorder)
    calls: list[WebhookCall] = field(default_factory=list)


@dataclass(frozen=True)
class _Verified:
    allowed: bool
    patch: bytes
    status: JsonDict | None
    warnings: tuple[str, ...]


def _denial_status(webhook_name: str, result: JsonDict | None) -> JsonDict:
    """webhookerrors.ToStatusErr: code >= 400, 'Failure', message prefixed with the name."""
    status = dict(result or {})
    denied_by = f'admission webhook "{webhook_name}" denied the request'
    code = status.get("code")
    if not isinstance(code, int) or code < 400:
        status["code"] = 400
    if status.get("status") in (None, "", "Success"):
        status["status"] = "Failure"
    if status.get("message"):
        status["message"] = f"{denied_by}: {status['message']}"
    elif status.get("reason"):
        status["message"] = f"{denied_by}: {status['reason']}"
    else:
        status["message"] = f"{denied_by} without explanation"
    status.setdefault("kind", "Status")
    status.setdefault("apiVersion", "v1")
    status.setdefault("metadata", {})
    if not status.get("reason"):
        status.pop("reason", None)  # omitempty, as the apiserver writes the Status
    return status


def _decode_patch_field(value: Any) -> bytes:
    """Go decodes a JSON string into []byte as standard base64 (CR/LF ignored)."""
    if not isinstance(value, str):
        raise _CallError(f"json: cannot unmarshal {type(value).__name__} into response.patch")
    try:
        return base64.b64decode(value.replace("\r", "").replace("\n", ""), validate=True)
    except binascii.Error as exc:
        raise _CallError(f"illegal base64 data in response.patch: {exc}") from exc


def verify_admission_response(uid: str, mutating: bool, review: Any) -> _Verified:
    """VerifyAdmissionResponse plus the decoding checks client-go would do first."""
    if not isinstance(review, dict):
        raise _CallError("response body is not a JSON object")
    gv, kind = review.get("apiVersion"), review.get("kind")
    if gv != ADMISSION_API_VERSION or kind != "AdmissionReview":
        raise _CallError(
            f"expected webhook response of {ADMISSION_API_VERSION}, Kind=AdmissionReview, "
            f"got {gv}, Kind={kind}"
        )
    response = review.get("response")
    if response is None:
        raise _CallError("webhook response was absent")
    if not isinstance(response, dict):
        raise _CallError("json: cannot unmarshal response into admission.AdmissionResponse")
    got_uid = response.get("uid", "")
    if got_uid != uid:
        raise _CallError(f'expected response.uid="{uid}", got "{got_uid}"')
    allowed = response.get("allowed", False)
    if not isinstance(allowed, bool):
        raise _CallError("json: cannot unmarshal response.allowed into bool")
    patch = _decode_patch_field(response["patch"]) if "patch" in response else b""
    patch_type = response.get("patchType") or ""
    if mutating and patch and not patch_type:
        raise _CallError("webhook returned response.patch but not response.patchType")
    if mutating and not patch and patch_type:
        raise _CallError("webhook returned response.patchType but not response.patch")
    if not mutating and patch:
        raise _CallError("validating webhook may not return response.patch")
    if not mutating and patch_type:
        raise _CallError("validating webhook may not return response.patchType")
    if patch and patch_type != "JSONPatch":
        raise _CallError(f'unsupported patch type "{patch_type}"')
    warnings = response.get("warnings") or []
    if not isinstance(warnings, list) or not all(isinstance(w, str) for w in warnings):
        raise _CallError("json: cannot unmarshal response.warnings into []string")
    status = response.get("status")
    if status is not None and not isinstance(status, dict):
        raise _CallError("json: cannot unmarshal response.status into metav1.Status")
    return _Verified(allowed=allowed, patch=patch, status=status, warnings=tuple(warnings))


def _go_json_type(value: Any) -> str:
    """How Go's encoding/json names a JSON value's type in an UnmarshalTypeError."""
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list):
        return "array"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "bool"
    return "number"


def _reject_constant(name: str) -> Any:
    raise ValueError(f"invalid character {name[0]!r} looking for beginning of value")


def _decode_patch(patch: bytes) -> list[Any]:
    """jsonpatch.DecodePatch (gopkg.in/evanphx/json-patch.v4, what mutating/dispatcher.go:336
    calls): the JSON must be null or an array whose items are objects (or null); what each
    operation says is only looked at when the patch is applied. Failing here is a call error
    (:337-339): 'received undecodable patch in webhook response: <the decoder's error>'."""
    prefix = "received undecodable patch in webhook response"
    try:
        # Go replaces invalid UTF-8 rather than failing, and has no NaN or Infinity literals.
        ops = json.loads(patch.decode("utf-8", "replace"), parse_constant=_reject_constant)
    except ValueError as exc:
        raise _CallError(f"{prefix}: {exc}") from exc
    if ops is None:
        return []
    if not isinstance(ops, list):
        raise _CallError(
            f"{prefix}: json: cannot unmarshal {_go_json_type(ops)} into Go value of type "
            "jsonpatch.Patch"
        )
    for op in ops:
        if op is not None and not isinstance(op, dict):
            raise _CallError(
                f"{prefix}: json: cannot unmarshal {_go_json_type(op)} into Go value of type "
                "jsonpatch.Operation"
            )
    return ops


def _apply_patch(ops: list[Any], obj: JsonDict) -> JsonDict:
    """Apply decoded RFC 6902 operations; a failure is an InternalError, never subject to the
    failurePolicy (mutating/dispatcher.go:359-361)."""
    try:
        patched = jsonpatch.JsonPatch(ops).apply(obj)
    except (
        jsonpatch.JsonPatchException,
        jsonpointer.JsonPointerException,
        KeyError,
        TypeError,
        ValueError,
        IndexError,
        AttributeError,
    ) as exc:
        raise _Reject(_internal_error(f"{type(exc).__name__}: {exc}")) from exc
    if not isinstance(patched, dict):
        raise _Reject(_internal_error("patched object is not a JSON object"))
    return patched


def _internal_error(message: str) -> JsonDict:
    return status_json(
        500,
        f"Internal error occurred: {message}",
        "InternalError",
        details={"causes": [{"message": message}]},
    )


def generate_name(prefix: str) -> str:
    suffix = "".join(random.choices(GENERATED_NAME_ALPHABET, k=GENERATED_SUFFIX_LENGTH))
    return prefix[:MAX_GENERATE_NAME_PREFIX] + suffix


def rfc3339_now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _describe_client_error(exc: BaseException) -> str:
    """Error texts in the spirit of Go's net/http and crypto/tls, for readable messages."""
    if isinstance(exc, TimeoutError):
        return "context deadline exceeded"
    if isinstance(exc, aiohttp.ClientConnectorCertificateError):
        return f"tls: failed to verify certificate: {exc.certificate_error}"
    if isinstance(exc, aiohttp.ClientSSLError):
        return f"remote error: tls: {exc}"
    if isinstance(exc, aiohttp.ClientConnectorError):
        return f"dial tcp {exc.host}:{exc.port}: connect: {exc.os_error.strerror or exc}"
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return "EOF"
    return f"{type(exc).__name__}: {exc}"


# --- the emulator -------------------------------------------------------------------------------


class ApiserverEmulator:
    """Sends AdmissionReviews to a webhook server the way kube-apiserver does.

    Every Service referenced by the configurations is reached at ``host:port`` (the test's
    loopback listener) while TLS still uses the in-cluster name for SNI and verification.
    ``namespace_labels`` lists the namespaces that exist (their ``kubernetes.io/metadata.name``
    label is added automatically); when it is ``None`` every namespace exists with only that
    label. ``match_conditions`` maps each CEL expression of the configurations to a Python
    predicate over the AdmissionRequest dict. ``max_request_body_bytes`` is kube-apiserver's
    ``--max-request-body-bytes`` (3 MiB unless changed). ``admission_policies`` are documents
    among which the ValidatingAdmissionPolicies and their bindings are applied (other kinds
    are ignored, so a whole rendered manifest can be passed).
    """

    def __init__(
        self,
        host: str,
        port: int,
        configurations: Iterable[JsonDict] = (),
        namespace_labels: Mapping[str, Mapping[str, str]] | None = None,
        match_conditions: Mapping[str, MatchPredicate] | None = None,
        *,
        ca_bundle: str | None = None,
        strict: bool = False,
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
        max_request_body_bytes: int = MAX_REQUEST_BODY_BYTES,
        admission_policies: Iterable[JsonDict] = (),
    ) -> None:
        self.host = host
        self.port = port
        self.strict = strict
        self.request_timeout = request_timeout
        self.max_request_body_bytes = max_request_body_bytes
        self._match_conditions = dict(match_conditions or {})
        documents = list(admission_policies)
        self.admission_policies = PolicySet(documents) if documents else None
        self.mutating, self.validating = parse_configurations(
            configurations, ca_bundle, self._match_conditions
        )
        self._namespaces: dict[str, dict[str, str]] | None = None
        if namespace_labels is not None:
            self._namespaces = {}
            for name, labels in namespace_labels.items():
                self.set_namespace(name, labels)
        self.contract_violations: list[str] = []
        self.failed_open: list[WebhookCall] = []
        self.calls: list[WebhookCall] = []
        self.stored: dict[tuple[str, str, str], JsonDict] = {}
        self._ssl_contexts: dict[str, ssl.SSLContext] = {}
        self._resource_versions = itertools.count(1)

    # -- namespaces ----------------------------------------------------------------------------

    def set_namespace(self, name: str, labels: Mapping[str, str] | None = None) -> None:
        """Declare a namespace (and its labels) for namespaceSelector evaluation."""
        if self._namespaces is None:
            self._namespaces = {}
        self._namespaces[name] = {**(labels or {}), METADATA_NAME_LABEL: name}

    def _namespace_labels(self, name: str) -> dict[str, str] | None:
        if self._namespaces is None:
            return {METADATA_NAME_LABEL: name}
        return self._namespaces.get(name)

    # -- public entry points -------------------------------------------------------------------

    async def create(
        self,
        obj: Mapping[str, Any],
        user: UserInfo | None = None,
        dry_run: bool = False,
        operation: str = "CREATE",
        *,
        old_object: Mapping[str, Any] | None = None,
        namespace: str | None = None,
        resource: str | None = None,
        namespaced: bool | None = None,
        request_timeout: float | None = None,
        persist: bool = True,
        field_manager: str | None = None,
        validators: Sequence[InProcessValidator] = (),
        validate_object: ObjectValidation | None = None,
        subresource: str = "",
        mutators: Sequence[InProcessMutator] = (),
    ) -> AdmissionResult:
        """Run one write request through admission and, if allowed, "store" it.

        ``persist=False`` admits without storing, for callers that keep state elsewhere
        (the fake Kubernetes API routing its creates through this emulator).
        ``operation`` is CREATE, UPDATE (pass ``old_object``) or DELETE (pass the stored
        object as both ``obj`` and ``old_object``; the review carries ``object: null``, as
        rest.AdmissionToValidateObjectDeleteFunc builds it, registry/rest/delete.go:178-210).
        ``validators`` are in-process validating webhooks (``(name, deny)``), called in
        parallel with the configured ones on the AdmissionRequest. ``mutators`` are in-process
        mutating webhooks (``(name, mutate)``), called in order after the configured ones:
        kube-apiserver calls mutating webhook configurations in the order of their names
        (configuration/mutating_webhook_manager.go sorts them), and the in-process ones stand
        for upstream configurations named after autowrap's (Volcano's
        ``volcano-admission-service-jobs-mutate`` after ``autowrap-mutating``).

        A CREATE or UPDATE whose object, sent as JSON, is over ``max_request_body_bytes`` is
        refused with 413 before anything else (handlers/create.go:94 and update.go:78 read
        the body through limitedReadBody, rest.go:372-389). ``validate_object`` is the
        storage strategy's validation (``(object, old_object)`` in, a metav1.Status failure
        or None out); it runs after mutation and name generation and before the validating
        webhooks, as rest.BeforeCreate runs before createValidation (registry/store.go:569,
        :575) and rest.BeforeUpdate before updateValidation (:825, :839-843), so a refusal
        there means no validating webhook is called.

        ``subresource`` (``status``) is a write through that subresource: the review carries
        it as ``subResource`` and ``requestSubResource``, and only a rule that names it
        (``pods/status``, ``pods/*``, ``*/*``) matches, for webhooks and policies alike
        (k8s.io/apiserver pkg/admission/plugin/webhook/predicates/rules/rules.go:106-117 at
        7fc9c57d, ``Matcher.resource``: ``pods`` matches the main resource only).
        """
        timeout = self.request_timeout if request_timeout is None else request_timeout
        loop = asyncio.get_running_loop()
        # Only CREATE and UPDATE send the object; DELETE's body is DeleteOptions.
        sends_object = operation in ("CREATE", "UPDATE")
        if sends_object and request_body_size(obj) > self.max_request_body_bytes:
            too_large = request_entity_too_large(self.max_request_body_bytes)
            return self._result(False, copy.deepcopy(dict(obj)), too_large, (), (), dry_run)
        current = copy.deepcopy(dict(obj))
        info = resource_info(current, resource, namespaced)
        try:
            ns = self._resolve_namespace(current, info, namespace)
            attempt = _Attempt(
                info=info,
                namespace=ns,
                name=str((current.get("metadata") or {}).get("name") or ""),
                operation=operation,
                user=user or UserInfo(),
                dry_run=dry_run,
                old_object=copy.deepcopy(dict(old_object)) if old_object is not None else None,
                options=self._options(operation, dry_run, field_manager),
                deadline=loop.time() + timeout,
                validators=tuple(validators),
                mutators=tuple(mutators),
                subresource=subresource,
            )
        except _Reject as rej:
            return self._result(False, current, rej.status, (), (), dry_run)
        try:
            current = await self._run_mutating(attempt, current)
            if operation == "CREATE":
                current = self._before_create(current, info)
            if validate_object is not None and operation in ("CREATE", "UPDATE"):
                refusal = validate_object(copy.deepcopy(current), copy.deepcopy(attempt.old_object))
                if refusal is not None:
                    raise _Reject(refusal)
            # registry/rest/create.go:224-230: validating webhooks get the request's name or,
            # when it had none (generateName), the name now in the object.
            attempt.name = attempt.name or str((current.get("metadata") or {}).get("name") or "")
            self._run_admission_policies(attempt, current)
            await self._run_validating(attempt, current)
            current = self._finish_write(current, info, ns, operation, dry_run, persist)
        except _Reject as rej:
            return self._result(
                False, current, rej.status, attempt.warnings.headers, attempt.calls, dry_run
            )
        return self._result(
            True,
            current,
            None,
            attempt.warnings.headers,
            attempt.calls,
            dry_run,
            code=201 if operation == "CREATE" else 200,
        )

    async def admit(
        self,
        operation: str,
        obj: Mapping[str, Any],
        *,
        old_object: Mapping[str, Any] | None = None,
        user: UserInfo | None = None,
        dry_run: bool = False,
        resource: str | None = None,
        namespaced: bool | None = None,
        field_manager: str | None = None,
        validators: Sequence[InProcessValidator] = (),
        validate_object: ObjectValidation | None = None,
        subresource: str = "",
        mutators: Sequence[InProcessMutator] = (),
    ) -> AdmissionResult:
        """Admission only (never stored) for a CREATE, UPDATE or DELETE: the front door of a
        fake cluster that keeps the objects itself (see :meth:`create` for the arguments)."""
        return await self.create(
            obj,
            user=user,
            dry_run=dry_run,
            operation=operation,
            old_object=old_object,
            resource=resource,
            namespaced=namespaced,
            persist=False,
            field_manager=field_manager,
            validators=validators,
            validate_object=validate_object,
            subresource=subresource,
            mutators=mutators,
        )

    def webhooks(self) -> list[Webhook]:
        return [*self.mutating, *self.validating]

    # -- request preparation -------------------------------------------------------------------

    def _resolve_namespace(self, obj: JsonDict, info: ResourceInfo, namespace: str | None) -> str:
        meta = obj.setdefault("metadata", {})
        if not info.namespaced:
            return ""
        ns = namespace or meta.get("namespace") or ""
        if not ns:
            raise _Reject(
                status_json(
                    400,
                    "the server could not find the requested resource (namespace is required)",
                    "BadRequest",
                )
            )
        if meta.get("namespace") and meta["namespace"] != ns:
            raise _Reject(
                status_json(
                    400,
                    "the namespace of the provided object does not match the namespace sent "
                    "on the request",
                    "BadRequest",
                )
            )
        meta["namespace"] = ns
        if self._namespace_labels(ns) is None:
            raise _Reject(
                status_json(
                    404,
                    f'namespaces "{ns}" not found',
                    "NotFound",
                    details={"name": ns, "kind": "namespaces"},
                )
            )
        return ns

    @staticmethod
    def _options(operation: str, dry_run: bool, field_manager: str | None) -> JsonDict:
        kind = {
            "CREATE": "CreateOptions",
            "UPDATE": "UpdateOptions",
            "DELETE": "DeleteOptions",
        }.get(operation, "CreateOptions")
        options: JsonDict = {"kind": kind, "apiVersion": "meta.k8s.io/v1"}
        if dry_run:
            options["dryRun"] = ["All"]
        if field_manager:
            options["fieldManager"] = field_manager
        return options

    def _review(self, attempt: _Attempt, obj: JsonDict, uid: str) -> JsonDict:
        info = attempt.info
        gvk = {"group": info.group, "version": info.version, "kind": info.kind}
        gvr = {"group": info.group, "version": info.version, "resource": info.resource}
        request: JsonDict = {
            "uid": uid,
            "kind": gvk,
            "resource": gvr,
            "requestKind": dict(gvk),
            "requestResource": dict(gvr),
        }
        if attempt.subresource:
            # admission/v1 AdmissionRequest: subResource and requestSubResource (omitempty),
            # the kind and resource staying the Pod's (pods/status reads and writes a Pod).
            request["subResource"] = attempt.subresource
            request["requestSubResource"] = attempt.subresource
        if attempt.name:
            request["name"] = attempt.name
        if attempt.namespace:
            request["namespace"] = attempt.namespace
        request.update(
            {
                "operation": attempt.operation,
                "userInfo": attempt.user.to_json(),
                "object": copy.deepcopy(obj) if attempt.operation != "DELETE" else None,
                "oldObject": copy.deepcopy(attempt.old_object),
                "dryRun": attempt.dry_run,
                "options": dict(attempt.options),
            }
        )
        return {"kind": "AdmissionReview", "apiVersion": ADMISSION_API_VERSION, "request": request}

    # -- matching ------------------------------------------------------------------------------

    def _should_call(self, hook: Webhook, attempt: _Attempt, obj: JsonDict) -> bool:
        """ShouldCallHook: namespaceSelector, objectSelector, rules, then matchConditions."""
        info = attempt.info
        if attempt.namespace or (info.group == "" and info.resource == "namespaces"):
            if info.resource == "namespaces" and info.group == "":
                ns_labels = dict((obj.get("metadata") or {}).get("labels") or {})
            else:
                ns_labels = self._namespace_labels(attempt.namespace) or {}
            if not selector_matches(hook.namespace_selector, ns_labels):
                return False
        new_labels = (obj.get("metadata") or {}).get("labels") or {}
        old_labels = ((attempt.old_object or {}).get("metadata") or {}).get("labels") or {}
        if hook.object_selector and not (
            selector_matches(hook.object_selector, new_labels)
            or (
                attempt.old_object is not None
                and selector_matches(hook.object_selector, old_labels)
            )
        ):
            return False
        if not any(
            rule_matches(r, attempt.operation, info, attempt.namespace, attempt.subresource)
            for r in hook.rules
        ):
            return False
        return self._match_conditions_hold(hook, attempt, obj)

    def _match_conditions_hold(self, hook: Webhook, attempt: _Attempt, obj: JsonDict) -> bool:
        if not hook.match_conditions:
            return True
        request = self._review(attempt, obj, "")["request"]
        errors: list[str] = []
        for cond_name, expression in hook.match_conditions:
            try:
                outcome = self._match_conditions[expression](request)
            except Exception as exc:  # a predicate error is a CEL evaluation error
                errors.append(f"matchCondition {cond_name!r}: {exc}")
                continue
            if not outcome:
                return False
        if not errors:
            return True
        if hook.failure_policy == "Ignore":
            return False
        qualified = attempt.info.qualified_resource
        message = (
            f'{qualified} "{attempt.name}" is forbidden: failed calling webhook '
            f'"{hook.name}": failed evaluating match conditions: {"; ".join(errors)}'
        )
        raise _Reject(status_json(403, message, "Forbidden"))

    # -- mutating ------------------------------------------------------------------------------

    async def _run_mutating(self, attempt: _Attempt, obj: JsonDict) -> JsonDict:
        """Sequential calls; IfNeeded webhooks run once more if a later webhook changed it."""
        invoked_reinvocable: set[tuple[str, str]] = set()
        to_reinvoke: set[tuple[str, str]] = set()
        for hook in self.mutating:
            if not self._should_call(hook, attempt, obj):
                continue
            obj, changed = await self._mutate_once(hook, attempt, obj, round_=0)
            if changed:
                to_reinvoke |= invoked_reinvocable
            if hook.reinvocation_policy == "IfNeeded":
                invoked_reinvocable.add(hook.key)
        for hook in self.mutating:
            if hook.key not in to_reinvoke or not self._should_call(hook, attempt, obj):
                continue
            obj, _ = await self._mutate_once(hook, attempt, obj, round_=1)
        for _name, mutate in attempt.mutators:
            mutated = mutate(self._review(attempt, obj, str(uuid.uuid4()))["request"])
            if mutated is not None and mutated != obj:
                obj = copy.deepcopy(mutated)
        return obj

    async def _mutate_once(
        self, hook: Webhook, attempt: _Attempt, obj: JsonDict, round_: int
    ) -> tuple[JsonDict, bool]:
        try:
            verified = await self._call(hook, attempt, obj, round_)
        except _CallError as err:
            self._fail_or_ignore(hook, attempt, err)
            return obj, False
        if verified is None or not verified.patch:
            return obj, False  # mutating/dispatcher.go:333-335
        try:
            ops = _decode_patch(verified.patch)
        except _CallError as err:
            # mutating/dispatcher.go:336-339: an ErrCallingWebhook, so the failurePolicy decides
            self._amend_last_call(attempt, hook, error=err.reason)
            self._violation(hook, err.reason)
            self._fail_or_ignore(hook, attempt, err)
            return obj, False
        if not ops:
            return obj, False  # mutating/dispatcher.go:341-343: an empty patch is no change
        if attempt.operation == "DELETE":
            # mutating/dispatcher.go:345-348: nothing to apply a patch to on DELETE
            raise _Reject(
                _internal_error(
                    f'admission webhook "{hook.name}" attempted to modify the object, which '
                    "is not supported for this operation"
                )
            )
        try:
            patched = _apply_patch(ops, obj)
        except _Reject as rej:
            self._violation(hook, f"patch could not be applied: {rej.status['message']}")
            raise
        changed = patched != obj
        if changed:
            self._mark_patched(attempt)
        return patched, changed

    def _mark_patched(self, attempt: _Attempt) -> None:
        last = attempt.calls[-1]
        patched = WebhookCall(**{**last.__dict__, "patched": True})
        attempt.calls[-1] = patched
        self._replace_call(last, patched)

    # -- validating ----------------------------------------------------------------------------

    async def _run_validating(self, attempt: _Attempt, obj: JsonDict) -> None:
        """All validating webhooks at once; the first failure to finish is the one reported.

        Upstream each webhook's goroutine sends its error on a channel as it finishes
        (validating/dispatcher.go:127, :218, :226), the dispatcher waits for all of them
        (:229) and returns the first error received (:232-245): arrival order, not
        configuration order. Here every call is a task whose done-callback records its
        failure in the order the tasks finish; all of them are awaited before deciding.
        A failure of the emulator itself (a contract violation raised in strict mode, a bug)
        is raised ahead of any webhook's refusal so it is never hidden by one.
        """
        hooks = [h for h in self.validating if self._should_call(h, attempt, obj)]
        arrived: list[BaseException] = []

        def on_done(task: asyncio.Future[None]) -> None:
            failure = None if task.cancelled() else task.exception()
            if failure is not None:
                arrived.append(failure)

        tasks = [
            *(asyncio.ensure_future(self._validate_once(h, attempt, obj)) for h in hooks),
            *(
                asyncio.ensure_future(self._validate_in_process(v, attempt, obj))
                for v in attempt.validators
            ),
        ]
        for task in tasks:
            task.add_done_callback(on_done)
        # Callbacks run in registration order, so each task's on_done has run before gather,
        # whose own callbacks were added later, sees the last task finish.
        await asyncio.gather(*tasks, return_exceptions=True)
        emulator_errors = [e for e in arrived if not isinstance(e, _Reject)]
        if emulator_errors:
            raise emulator_errors[0]
        if arrived:
            raise arrived[0]

    async def _validate_in_process(
        self, validator: InProcessValidator, attempt: _Attempt, obj: JsonDict
    ) -> None:
        name, deny = validator
        message = deny(self._review(attempt, obj, str(uuid.uuid4()))["request"])
        if isinstance(message, dict):
            raise _Reject(message)
        if message is not None:
            raise _Reject(_denial_status(name, {"message": message}))

    async def _validate_once(self, hook: Webhook, attempt: _Attempt, obj: JsonDict) -> None:
        try:
            await self._call(hook, attempt, obj, round_=0)
        except _CallError as err:
            self._fail_or_ignore(hook, attempt, err)

    # -- ValidatingAdmissionPolicy -------------------------------------------------------------

    def _run_admission_policies(self, attempt: _Attempt, obj: JsonDict) -> None:
        """Every matching policy and binding; the first denial collected is the answer.

        Writes of the admission configuration itself (webhook configurations, policies and
        bindings) never reach a policy: webhook/predicates/rules/rules.go
        IsExemptAdmissionConfigurationResource, which the policy plugin applies before
        dispatching."""
        if self.admission_policies is None:
            return
        info = attempt.info
        if info.group == "admissionregistration.k8s.io" and info.kind in _EXEMPT_FROM_POLICIES:
            return
        request = self._review(attempt, obj, str(uuid.uuid4()))["request"]
        namespace_object = None
        if attempt.namespace:
            labels = self._namespace_labels(attempt.namespace) or {}
            namespace_object = {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": attempt.namespace, "labels": dict(labels)},
            }

        def matches(selectors: Any) -> bool:
            return self._policy_matches(selectors, attempt, obj)

        outcome = self.admission_policies.evaluate(
            request, matches=matches, namespace_object=namespace_object
        )
        for warning in outcome.warnings:
            attempt.warnings.add(warning)
        if outcome.denied:
            raise _Reject(
                denial_status(
                    outcome.denied[0],
                    info.qualified_resource,
                    attempt.name,
                    info.group,
                    info.resource,
                )  # fmt: skip
            )

    def _policy_matches(self, selectors: Any, attempt: _Attempt, obj: JsonDict) -> bool:
        """matchConstraints / matchResources: the same predicates as a webhook's rules and
        selectors (policy/matching builds on webhook/predicates), plus excludeResourceRules."""
        info = attempt.info
        if attempt.namespace:
            ns_labels = self._namespace_labels(attempt.namespace) or {}
            if not selector_matches(selectors.namespace_selector, ns_labels):
                return False
        new_labels = (obj.get("metadata") or {}).get("labels") or {}
        old_labels = ((attempt.old_object or {}).get("metadata") or {}).get("labels") or {}
        if selectors.object_selector and not (
            (
                attempt.operation != "DELETE"
                and selector_matches(selectors.object_selector, new_labels)
            )
            or (
                attempt.old_object is not None
                and selector_matches(selectors.object_selector, old_labels)
            )
        ):
            return False
        if selectors.rules and not any(
            rule_matches(r, attempt.operation, info, attempt.namespace, attempt.subresource)
            for r in selectors.rules
        ):
            return False
        return not any(
            rule_matches(
                {**r, "operations": r.get("operations") or ["*"]},
                attempt.operation,
                info,
                attempt.namespace,
                attempt.subresource,
            )  # fmt: skip
            for r in selectors.exclude
        )

    # -- failure handling ----------------------------------------------------------------------

    def _violation(self, hook: Webhook, text: str) -> None:
        message = f'{hook.phase} webhook "{hook.name}": {text}'
        self.contract_violations.append(message)
        if self.strict:
            raise WebhookContractViolation(message)

    def _fail_or_ignore(self, hook: Webhook, attempt: _Attempt, err: _CallError) -> None:
        message = f'failed calling webhook "{hook.name}": {err.reason}'
        if hook.failure_policy == "Ignore":
            self._record_failed_open(attempt, hook)
            if asyncio.get_running_loop().time() >= attempt.deadline:
                raise _Reject(
                    status_json(504, "request did not complete within requested timeout", "Timeout")
                )
            return
        raise _Reject(_internal_error(message))

    def _record_failed_open(self, attempt: _Attempt, hook: Webhook) -> None:
        opened = self._amend_last_call(attempt, hook, failed_open=True)
        if opened is not None:
            self.failed_open.append(opened)

    def _amend_last_call(
        self, attempt: _Attempt, hook: Webhook, **changes: Any
    ) -> WebhookCall | None:
        """Replace the latest recorded call to ``hook`` with a copy carrying ``changes``."""
        for index in range(len(attempt.calls) - 1, -1, -1):
            call = attempt.calls[index]
            if call.name == hook.name and call.configuration == hook.configuration:
                amended = WebhookCall(**{**call.__dict__, **changes})
                attempt.calls[index] = amended
                self._replace_call(call, amended)
                return amended
        return None

    def _replace_call(self, old: WebhookCall, new: WebhookCall) -> None:
        for index, call in enumerate(self.calls):
            if call is old:
                self.calls[index] = new
                return

    # -- one HTTP call -------------------------------------------------------------------------

    async def _call(
        self, hook: Webhook, attempt: _Attempt, obj: JsonDict, round_: int
    ) -> _Verified | None:
        """One webhook call: dry-run gate, POST, contract checks, warnings, denial."""
        if attempt.dry_run:
            if hook.side_effects is None:
                self._record(
                    hook,
                    attempt,
                    round_,
                    "",
                    "",
                    {},
                    None,
                    0.0,
                    None,
                    "Webhook SideEffects is nil",
                    None,
                )
                raise _CallError("Webhook SideEffects is nil")
            if hook.side_effects not in ("None", "NoneOnDryRun"):
                raise _Reject(
                    status_json(
                        400,
                        f'admission webhook "{hook.name}" does not support dry run',
                        "BadRequest",
                    )
                )
        uid = str(uuid.uuid4())
        review = self._review(attempt, obj, uid)
        remaining = attempt.deadline - asyncio.get_running_loop().time()
        budget = min(float(hook.timeout_seconds), remaining)
        timeout_param = f"{max(math.ceil(budget - 1e-9), 0)}s"
        url = f"https://{hook.hostname}:{hook.port}{hook.path}?timeout={timeout_param}"
        started = time.monotonic()
        status: int | None = None
        body: JsonDict | None = None

        def record(allowed: bool | None, error: str | None) -> None:
            duration = time.monotonic() - started
            self._record(hook, attempt, round_, uid, timeout_param, review, status, duration,
                         allowed, error, body)  # fmt: skip

        try:
            if budget <= 0:
                raise TimeoutError
            status, body = await self._post(hook, review, timeout_param, budget)
            verified = self._verify(hook, uid, status, body)
        except _CallError as err:
            record(None, err.reason)
            raise
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            reason = f'failed to call webhook: Post "{url}": {_describe_client_error(exc)}'
            record(None, reason)
            raise _CallError(reason) from exc
        record(verified.allowed, None)
        for warning in verified.warnings:
            attempt.warnings.add(warning)
        if not verified.allowed:
            raise _Reject(_denial_status(hook.name, verified.status))
        return verified

    def _verify(self, hook: Webhook, uid: str, status: int, body: JsonDict | None) -> _Verified:
        try:
            if status != 200:
                raise _CallError(f"failed to call webhook: unexpected HTTP status {status}")
            if body is None:
                raise _CallError("failed to call webhook: response body is not JSON")
            return verify_admission_response(uid, hook.mutating, body)
        except _CallError as err:
            self._violation(hook, err.reason)
            if err.reason.startswith("failed to call webhook"):
                raise
            raise _CallError(f"received invalid webhook response: {err.reason}") from None

    async def _post(
        self, hook: Webhook, review: JsonDict, timeout_param: str, budget: float
    ) -> tuple[int, JsonDict | None]:
        """POST the review; returns the status and the decoded body (None if not JSON)."""
        payload = json.dumps(review).encode()
        headers = {
            "Content-Type": "application/json",
            "Accept": "application/json, */*",
            "User-Agent": "kube-apiserver-admission",
            "Host": f"{hook.hostname}:{hook.port}",
        }
        connector = aiohttp.TCPConnector(force_close=True)
        async with (
            asyncio.timeout(budget),
            aiohttp.ClientSession(connector=connector) as session,
            session.post(
                f"https://{self.host}:{self.port}{hook.path}",
                params={"timeout": timeout_param},
                data=payload,
                headers=headers,
                ssl=self._ssl_context(hook.ca_pem),
                server_hostname=hook.hostname,
            ) as resp,
        ):
            raw = await resp.read()
            content_type = resp.headers.get("Content-Type", "application/json")
        if content_type.split(";")[0].strip().lower() != "application/json":
            return resp.status, None
        try:
            decoded = json.loads(raw)
        except ValueError:
            return resp.status, None
        return resp.status, decoded if isinstance(decoded, dict) else {"_": decoded}

    def _ssl_context(self, ca_pem: str) -> ssl.SSLContext:
        if ca_pem not in self._ssl_contexts:
            self._ssl_contexts[ca_pem] = client_ssl_context(ca_pem)
        return self._ssl_contexts[ca_pem]

    def _record(
        self,
        hook: Webhook,
        attempt: _Attempt,
        round_: int,
        uid: str,
        timeout_param: str,
        review: JsonDict,
        status: int | None,
        duration: float,
        allowed: bool | None,
        error: str | None,
        response: JsonDict | None,
    ) -> None:
        call = WebhookCall(
            name=hook.name,
            configuration=hook.configuration,
            phase=hook.phase,
            round=round_,
            path=hook.path,
            url=f"https://{hook.hostname}:{hook.port}{hook.path}",
            request_uid=uid,
            timeout_param=timeout_param,
            http_status=status,
            duration=duration,
            allowed=allowed,
            patched=False,
            error=error,
            failed_open=False,
            request=review,
            response=response,
        )
        attempt.calls.append(call)
        self.calls.append(call)

    # -- storage -------------------------------------------------------------------------------

    @staticmethod
    def _before_create(obj: JsonDict, info: ResourceInfo) -> JsonDict:
        """registry/store.go:552-555 (uid, creationTimestamp, the name from generateName), then
        the name-required check of rest.BeforeCreate's validation (rest/create.go:130-133)."""
        meta = obj.setdefault("metadata", {})
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = generate_name(str(meta["generateName"]))
        if not meta.get("name"):
            raise _Reject(
                status_json(
                    422,
                    f'{info.qualified_kind} "" is invalid: metadata.name: Required value: '
                    "name or generateName is required",
                    "Invalid",
                    details={
                        "kind": info.kind,
                        "group": info.group,
                        "causes": [
                            {
                                "reason": "FieldValueRequired",
                                "field": "metadata.name",
                                "message": "Required value: name or generateName is required",
                            }
                        ],
                    },
                )
            )
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = rfc3339_now()
        return obj

    def _finish_write(
        self,
        obj: JsonDict,
        info: ResourceInfo,
        ns: str,
        operation: str,
        dry_run: bool,
        persist: bool,
    ) -> JsonDict:
        name = str(obj["metadata"].get("name", ""))
        key = (info.resource, ns, name)
        if operation == "CREATE" and key in self.stored:
            details: JsonDict = {"name": name, "kind": info.resource}
            if info.group:
                details["group"] = info.group
            raise _Reject(
                status_json(
                    409,
                    f'{info.qualified_resource} "{name}" already exists',
                    "AlreadyExists",
                    details=details,
                )
            )
        if dry_run or not persist:
            return obj
        obj["metadata"]["resourceVersion"] = str(next(self._resource_versions))
        self.stored[key] = copy.deepcopy(obj)
        return obj

    @staticmethod
    def _result(
        allowed: bool,
        obj: JsonDict,
        status: JsonDict | None,
        warnings: Sequence[str],
        calls: Sequence[WebhookCall],
        dry_run: bool,
        code: int = 0,
    ) -> AdmissionResult:
        return AdmissionResult(
            allowed=allowed,
            object=obj,
            status_code=int(status["code"]) if status else code,
            reason=str(status.get("reason", "")) if status else "",
            message=str(status.get("message", "")) if status else "",
            warnings=tuple(warnings),
            calls=tuple(calls),
            status=status,
            dry_run=dry_run,
        )
