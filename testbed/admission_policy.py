"""ValidatingAdmissionPolicy (admissionregistration.k8s.io/v1) as kube-apiserver applies it, for
the apiserver emulator: no cluster runs on the test machines, yet the policies autowrap ships
(deploy/base/admission-policies.yaml) must be shown to refuse and allow what they promise.

Citations are to k8s.io/apiserver pkg/admission/plugin/policy/validating: dispatcher.go at
0cbcb7cd (``Dispatch``) and validator.go at 1ad6fd7a (``Validate``); and to kubernetes
pkg/kubeapiserver/options/plugins.go (``AllOrderedPlugins``: the ValidatingAdmissionPolicy
plugin runs after the mutating webhooks and before the validating webhooks, so a denial here
means no validating webhook is called). What is reproduced:

* matching: ``matchConstraints`` (resourceRules, excludeResourceRules, namespaceSelector,
  objectSelector: the new or the old object's labels), then each binding's ``matchResources``
  narrowing it (policy/matching, as for webhooks: a write through a subresource is matched
  only by a rule naming it, ``pods/status`` or ``pods/*``, never by ``pods``);
* ``matchConditions`` then ``variables`` then ``validations``, in CEL with cel-python, over
  ``object``, ``oldObject`` (null on CREATE; ``object`` null on DELETE; for ``pods/status``
  the whole Pod, as the status strategy prepared it), ``request`` (the AdmissionRequest
  without the objects; ``subResource`` only on a write through a subresource, as
  the AdmissionRequest's JSON omits it empty: expressions test it with ``has()``), ``namespaceObject`` and ``variables``. A variable that
  fails to evaluate fails only the expressions that read it (upstream evaluates them lazily);
* an evaluation error is a denial under ``failurePolicy: Fail`` (the default) and nothing under
  Ignore (validator.go ``policyDecisionActionForError``);
* the message: ``messageExpression`` when it yields a non-blank one-line string, else
  ``message``, else ``failed expression: <expression>`` (validator.go ``Validate``);
* the answer: of every denial collected, the first is reported as
  ``<resource> "<name>" is forbidden: ValidatingAdmissionPolicy '<p>' with binding '<b>'
  denied request: <message>``, with the validation's ``reason`` (Invalid, hence 422, when it
  has none) and its HTTP code (dispatcher.go, the ``len(deniedDecisions) > 0`` block and
  ``reasonToCode``);
* ``validationActions``: Deny denies; Warn adds the warning
  ``Validation failed for ValidatingAdmissionPolicy '<p>' with binding '<b>': <message>``;
  Audit is recorded in :attr:`PolicySet.audited`.

Not emulated, and refused when a manifest uses them (never assumed true): ``paramKind`` /
``paramRef`` (``params``), the ``authorizer`` variable, ``auditAnnotations``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

JsonDict = dict[str, Any]
API_VERSION = "admissionregistration.k8s.io/v1"
POLICY_KIND = "ValidatingAdmissionPolicy"
BINDING_KIND = "ValidatingAdmissionPolicyBinding"
# dispatcher.go reasonToCode.
_CODE_BY_REASON = {
    "Unauthorized": 401,
    "Forbidden": 403,
    "RequestEntityTooLarge": 413,
    "Invalid": 422,
}
_NOT_EMULATED = re.compile(r"\b(params|authorizer)\b")

Matcher = Callable[..., bool]


class PolicyNotEmulated(LookupError):
    """The policy uses a feature this emulation does not evaluate."""


class PolicyConfigError(ValueError):
    """The policy or binding could not be used (a CEL expression that does not compile...)."""


@dataclass(frozen=True)
class _Program:
    expression: str
    run: Callable[[Mapping[str, Any]], Any]


@dataclass(frozen=True)
class _Validation:
    program: _Program
    message: str
    message_program: _Program | None
    reason: str


@dataclass(frozen=True)
class _Selectors:
    rules: tuple[JsonDict, ...]
    exclude: tuple[JsonDict, ...]
    namespace_selector: JsonDict
    object_selector: JsonDict


@dataclass(frozen=True)
class _Policy:
    name: str
    failure_policy: str
    match: _Selectors
    conditions: tuple[tuple[str, _Program], ...]
    variables: tuple[tuple[str, _Program], ...]
    validations: tuple[_Validation, ...]


@dataclass(frozen=True)
class _Binding:
    name: str
    policy: str
    actions: tuple[str, ...]
    match: _Selectors | None


@dataclass(frozen=True)
class Decision:
    """One validation that did not pass (or could not be evaluated)."""

    policy: str
    binding: str
    message: str
    reason: str


@dataclass
class Outcome:
    """What the policies said about one request."""

    denied: list[Decision] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    audited: list[Decision] = field(default_factory=list)


def _compile(env: Any, celpy: Any, expression: str, where: str) -> _Program:
    if _NOT_EMULATED.search(expression):
        raise PolicyNotEmulated(f"{where}: params and authorizer are not emulated: {expression}")
    try:
        program = env.program(env.compile(expression))
    except Exception as exc:  # celpy's parse errors
        raise PolicyConfigError(f"{where}: does not compile: {exc}") from exc

    def run(activation: Mapping[str, Any]) -> Any:
        return program.evaluate(dict(activation))

    return _Program(expression, run)


def _selectors(raw: JsonDict | None) -> _Selectors:
    raw = raw or {}
    return _Selectors(
        rules=tuple(raw.get("resourceRules") or ()),
        exclude=tuple(raw.get("excludeResourceRules") or ()),
        namespace_selector=dict(raw.get("namespaceSelector") or {}),
        object_selector=dict(raw.get("objectSelector") or {}),
    )


class PolicySet:
    """The ValidatingAdmissionPolicies and bindings among ``documents`` (other kinds ignored)."""

    def __init__(self, documents: Iterable[JsonDict]) -> None:
        import celpy  # a test dependency; imported here so the emulator loads without it

        self._celpy: Any = celpy
        env = celpy.Environment()
        self.policies: list[_Policy] = []
        self.bindings: list[_Binding] = []
        for doc in documents:
            if not doc or doc.get("apiVersion") != API_VERSION:
                continue
            if doc.get("kind") == POLICY_KIND:
                self.policies.append(self._policy(env, doc))
            elif doc.get("kind") == BINDING_KIND:
                self.bindings.append(self._binding(doc))

    def _policy(self, env: Any, doc: JsonDict) -> _Policy:
        name = str(doc["metadata"]["name"])
        spec = doc.get("spec") or {}
        for unsupported in ("paramKind", "auditAnnotations"):
            if spec.get(unsupported):
                raise PolicyNotEmulated(f"{name}: spec.{unsupported} is not emulated")
        where = f"ValidatingAdmissionPolicy {name}"
        validations = []
        for i, raw in enumerate(spec.get("validations") or ()):
            message_expression = raw.get("messageExpression")
            validations.append(
                _Validation(
                    program=_compile(
                        env, self._celpy, raw["expression"], f"{where} validations[{i}]"
                    ),  # fmt: skip
                    message=str(raw.get("message") or ""),
                    message_program=_compile(
                        env, self._celpy, message_expression, f"{where} validations[{i}]"
                    )
                    if message_expression
                    else None,
                    reason=str(raw.get("reason") or ""),
                )
            )
        return _Policy(
            name=name,
            failure_policy=str(spec.get("failurePolicy") or "Fail"),
            match=_selectors(spec.get("matchConstraints")),
            conditions=tuple(
                (c["name"], _compile(env, self._celpy, c["expression"], f"{where} {c['name']}"))
                for c in spec.get("matchConditions") or ()
            ),
            variables=tuple(
                (v["name"], _compile(env, self._celpy, v["expression"], f"{where} {v['name']}"))
                for v in spec.get("variables") or ()
            ),
            validations=tuple(validations),
        )

    @staticmethod
    def _binding(doc: JsonDict) -> _Binding:
        name = str(doc["metadata"]["name"])
        spec = doc.get("spec") or {}
        if spec.get("paramRef"):
            raise PolicyNotEmulated(f"binding {name}: paramRef is not emulated")
        actions = tuple(spec.get("validationActions") or ())
        if not actions:
            raise PolicyConfigError(f"binding {name}: validationActions is required")
        resources = spec.get("matchResources")
        return _Binding(name, str(spec["policyName"]), actions,
                        _selectors(resources) if resources else None)  # fmt: skip

    # -- evaluation ------------------------------------------------------------------------------

    def evaluate(
        self,
        request: JsonDict,
        *,
        matches: Callable[[_Selectors], bool],
        namespace_object: JsonDict | None,
    ) -> Outcome:
        """Every matching policy and binding over one AdmissionRequest (as sent to webhooks).
        ``matches`` applies a rule set to this request (resource rules and selectors, as the
        emulator does for webhooks)."""
        outcome = Outcome()
        to_cel = self._celpy.json_to_cel
        activation: JsonDict = {}
        for policy in self.policies:
            if not matches(policy.match):
                continue
            bindings = [
                b for b in self.bindings
                if b.policy == policy.name and (b.match is None or matches(b.match))
            ]  # fmt: skip
            if not bindings:
                continue
            # Converted once, and only for a request some policy matches (a kubelet's status
            # writes mostly match none).
            activation = activation or {
                "object": to_cel(request.get("object")),
                "oldObject": to_cel(request.get("oldObject")),
                "request": to_cel(
                    {k: v for k, v in request.items() if k not in ("object", "oldObject")}
                ),  # fmt: skip
                "namespaceObject": to_cel(namespace_object),
            }
            decisions = self._decide(policy, activation)
            for binding in bindings:
                for message, reason in decisions:
                    decision = Decision(policy.name, binding.name, message, reason)
                    if "Deny" in binding.actions:
                        outcome.denied.append(decision)
                    if "Warn" in binding.actions:
                        outcome.warnings.append(
                            f"Validation failed for ValidatingAdmissionPolicy '{policy.name}' "
                            f"with binding '{binding.name}': {message}"
                        )
                    if "Audit" in binding.actions:
                        outcome.audited.append(decision)
        return outcome

    def _decide(self, policy: _Policy, activation: JsonDict) -> list[tuple[str, str]]:
        """(message, reason) of each validation that denies; [] when all pass."""
        celpy = self._celpy
        fail = policy.failure_policy != "Ignore"
        for name, program in policy.conditions:
            try:
                if not self._true(program.run(activation)):
                    return []
            except celpy.CELEvalError as exc:
                return [(f"failed to evaluate matchCondition {name!r}: {exc}", "")] if fail else []
        variables: dict[Any, Any] = {}
        for name, program in policy.variables:
            scope = {**activation, "variables": celpy.celtypes.MapType(variables)}
            try:
                value = program.run(scope)
            except celpy.CELEvalError as exc:
                value = exc  # an error value: fails what reads it, as upstream's lazy variable
            variables[celpy.celtypes.StringType(name)] = value
        scope = {**activation, "variables": celpy.celtypes.MapType(variables)}
        denied: list[tuple[str, str]] = []
        for validation in policy.validations:
            try:
                passed = self._true(validation.program.run(scope))
            except celpy.CELEvalError as exc:
                if fail:
                    denied.append((str(exc), ""))
                continue
            if passed:
                continue
            denied.append((self._message(validation, scope), validation.reason or "Invalid"))
        return denied

    def _true(self, value: Any) -> bool:
        """Only CEL true passes; any other value (false, a non-bool) denies (validator.go
        compares the result with celtypes.True)."""
        return isinstance(value, self._celpy.celtypes.BoolType) and bool(value)

    def _message(self, validation: _Validation, scope: JsonDict) -> str:
        if validation.message_program is not None:
            try:
                value = validation.message_program.run(scope)
            except self._celpy.CELEvalError:
                value = None
            if isinstance(value, str):
                text = value.strip()
                if text and "\n" not in text:
                    return text
        if validation.message.strip():
            return validation.message.strip()
        return f"failed expression: {validation.program.expression.strip()}"


def denial_status(decision: Decision, qualified_resource: str, name: str, group: str,
                  resource: str) -> JsonDict:  # fmt: skip
    """dispatcher.go: admission.NewForbidden's message and details, then the decision's reason
    (Invalid when it has none) and the code reasonToCode gives it."""
    reason = decision.reason or "Invalid"
    inner = (
        f"ValidatingAdmissionPolicy '{decision.policy}' with binding '{decision.binding}' "
        f"denied request: {decision.message}"
    )
    details: JsonDict = {"name": name, "kind": resource, "causes": [{"message": inner}]}
    if group:
        details["group"] = group
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": f'{qualified_resource} "{name}" is forbidden: {inner}',
        "reason": reason,
        "details": details,
        "code": _CODE_BY_REASON.get(reason, 422),
    }
