"""What kube-apiserver lets an update change in a Pod's spec: ``ValidatePodUpdate``.

Imitated from kubernetes/kubernetes pkg/apis/core/validation/validation.go (read at
000f2605): ``ValidatePodUpdate``, ``ValidateContainerUpdates``, ``validateOnlyAddedTolerations``,
``validateOnlyDeletedSchedulingGates``, ``validateNodeSelectorMutation``,
``validateNodeAffinityMutation`` and ``validateNodeSelectorTermHasOnlyAdditions``, and
``ValidatePodCreate``'s rule that a gated pod names no node. In that order:

1. containers and initContainers may be neither added nor removed (and stop there); each
   image must be set and carry no surrounding whitespace;
2. ``activeDeadlineSeconds`` may be set, or lowered, never raised or removed;
3. tolerations: every existing one stays (only its ``tolerationSeconds`` may change);
   additions are allowed;
4. scheduling gates may only be removed ("only deletion is allowed, but found new scheduling
   gate 'x'");
5. everything else in the spec is frozen, but while the old pod is gated (KEP-3838, pod
   scheduling readiness, mutable scheduling directives): ``nodeSelector`` may gain keys (no
   change or removal of existing ones), and the required node affinity may be narrowed (each
   existing term may only gain matchExpressions or matchFields; the number of terms is kept;
   an absent one may be set); preferred terms are free.

Equality is the apiserver's semantic one: an absent field, ``null``, ``false``, ``""`` and an
empty list or map are the same (the typed structs cannot tell them apart).

Errors come as kube-apiserver answers them: 422 Invalid, ``Pod "<name>" is invalid: <path>:
<Type>: <detail>`` (several as ``[e1, e2]``), with one ``details.causes`` entry per field error
(apimachinery pkg/api/errors ``NewInvalid``; pkg/util/validation/field ``Error.Error``).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from testbed.apiserver import JsonDict

MAX_INT32 = 2**31 - 1
UPDATABLE = (
    "`spec.containers[*].image`",
    "`spec.initContainers[*].image`",
    "`spec.activeDeadlineSeconds`",
    "`spec.tolerations` (only additions to existing tolerations)",
    "`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)",
)
_TYPES = {"FieldValueForbidden": "Forbidden", "FieldValueInvalid": "Invalid value",
          "FieldValueRequired": "Required value"}  # fmt: skip


@dataclass(frozen=True)
class FieldError:
    """field.Error: the cause type, the path, and the detail."""

    type: str
    field: str
    detail: str
    value: Any = None

    def body(self) -> str:
        """ErrorBody: ``Forbidden: detail``, ``Invalid value: <v>: detail``,
        ``Required value``."""
        kind = _TYPES[self.type]
        if self.type == "FieldValueInvalid":
            shown = f'"{self.value}"' if isinstance(self.value, str) else json.dumps(self.value)
            kind = f"{kind}: {shown}"
        return f"{kind}: {self.detail}" if self.detail else kind

    def __str__(self) -> str:
        return f"{self.field}: {self.body()}"


def _forbidden(path: str, detail: str) -> FieldError:
    return FieldError("FieldValueForbidden", path, detail)


def _invalid(path: str, value: Any, detail: str) -> FieldError:
    return FieldError("FieldValueInvalid", path, detail, value)


def semantic(value: Any) -> Any:
    """``value`` with what the typed API cannot tell from absence removed."""
    if isinstance(value, Mapping):
        out = {k: semantic(v) for k, v in value.items()}
        return {k: v for k, v in out.items() if v not in (None, False, "", [], {})}
    if isinstance(value, list):
        return [semantic(v) for v in value]
    return value


def _list(spec: Mapping[str, Any], key: str) -> list[Any]:
    found = spec.get(key)
    return list(found) if isinstance(found, list) else []


def _containers(new: list[Any], old: list[Any], path: str) -> tuple[list[FieldError], bool]:
    """ValidateContainerUpdates."""
    if len(new) != len(old):
        return [_forbidden(path, "pod updates may not add or remove containers")], True
    errors: list[FieldError] = []
    for i, container in enumerate(new):
        image = str((container or {}).get("image") or "")
        if not image:
            errors.append(FieldError("FieldValueRequired", f"{path}[{i}].image", ""))
        if image.strip() != image:
            errors.append(_invalid(f"{path}[{i}].image", image,
                                   "must not have leading or trailing whitespace"))  # fmt: skip
    return errors, False


def _deadline(new: Any, old: Any) -> list[FieldError]:
    path = "spec.activeDeadlineSeconds"
    if new is not None:
        if not isinstance(new, int) or new < 0 or new > MAX_INT32:
            return [_invalid(path, new, f"must be between 0 and {MAX_INT32}, inclusive")]
        if old is not None and old < new:
            return [_invalid(path, new, "must be less than or equal to previous value")]
        return []
    if old is not None:
        return [_invalid(path, None, "must not update from a positive integer to nil value")]
    return []


def _only_added_tolerations(new: list[Any], old: list[Any]) -> list[FieldError]:
    """validateOnlyAddedTolerations: each old toleration is still there, whatever its
    tolerationSeconds now says."""
    for existing in old:
        if not any(
            semantic({**existing, "tolerationSeconds": (candidate or {}).get("tolerationSeconds")})
            == semantic(candidate)
            for candidate in new
        ):
            return [_forbidden("spec.tolerations",
                               "existing toleration can not be modified except its "
                               "tolerationSeconds")]  # fmt: skip
    return []


def _only_deleted_gates(new: list[Any], old: list[Any]) -> list[FieldError]:
    """validateOnlyDeletedSchedulingGates (one error per new gate; upstream reports them in
    map order, here in list order)."""
    known = {(gate or {}).get("name") for gate in old}
    return [
        _forbidden(f"spec.schedulingGates[{i}].name",
                   f"only deletion is allowed, but found new scheduling gate '{name}'")
        for i, name in enumerate((gate or {}).get("name") for gate in new)
        if name not in known
    ]  # fmt: skip


def _node_selector(new: Mapping[str, Any], old: Mapping[str, Any]) -> list[FieldError]:
    """validateNodeSelectorMutation: the old keys keep their values."""
    for key, value in old.items():
        if key not in new or new[key] != value:
            return [_invalid("spec.nodeSelector", dict(new),
                             "only additions to spec.nodeSelector are allowed (no mutations "
                             "or deletions)")]  # fmt: skip
    return []


def _required_terms(affinity: Any) -> list[Any] | None:
    node = (affinity or {}).get("nodeAffinity") or {}
    required = node.get("requiredDuringSchedulingIgnoredDuringExecution")
    if required is None:
        return None
    return list(required.get("nodeSelectorTerms") or [])


def _term_only_adds(new: Mapping[str, Any], old: Mapping[str, Any]) -> bool:
    """validateNodeSelectorTermHasOnlyAdditions: the old requirements stay, first, unchanged."""
    for key in ("matchExpressions", "matchFields"):
        old_list, new_list = _list(old, key), _list(new, key)
        if len(old_list) > len(new_list):
            return False
        if semantic(new_list[: len(old_list)]) != semantic(old_list):
            return False
    return True


def _node_affinity(new_affinity: Any, old_affinity: Any) -> list[FieldError]:
    """validateNodeAffinityMutation: with a required node affinity already set, keep its
    number of terms and let each only gain requirements."""
    path = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
    old_terms = _required_terms(old_affinity)
    if old_terms is None:
        return []
    new_terms = _required_terms(new_affinity) or []
    if old_terms and len(old_terms) != len(new_terms):
        return [_invalid(f"{path}.nodeSelectorTerms", new_terms,
                         "no additions/deletions to non-empty NodeSelectorTerms list are "
                         "allowed")]  # fmt: skip
    return [
        _invalid(f"{path}.nodeSelectorTerms[{i}]", new_terms[i],
                 "only additions are allowed (no mutations or deletions)")
        for i, old_term in enumerate(old_terms)
        if not _term_only_adds(new_terms[i] or {}, old_term or {})
    ]  # fmt: skip


def _diff(old: Any, new: Any, path: str = "spec") -> list[str]:
    """The changed paths, standing in for the cmp.Diff kube-apiserver appends."""
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        return [line for key in sorted(set(old) | set(new))
                for line in _diff(old.get(key), new.get(key), f"{path}.{key}")]  # fmt: skip
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        return [line for i, (a, b) in enumerate(zip(old, new, strict=True))
                for line in _diff(a, b, f"{path}[{i}]")]  # fmt: skip
    if old == new:
        return []
    return [f"  {path}: {json.dumps(old)} -> {json.dumps(new)}"]


def pod_update_errors(new_pod: Mapping[str, Any], old_pod: Mapping[str, Any]) -> list[FieldError]:
    """ValidatePodUpdate's spec rules for an update of ``old_pod`` to ``new_pod``."""
    new = semantic(new_pod.get("spec") or {})
    old = semantic(old_pod.get("spec") or {})
    errors: list[FieldError] = []
    if not _list(new, "containers"):
        # validatePodMetadataAndSpec runs before the update's own rules: a pod left with no
        # container (an apply that no longer names the one it applied) is said so first.
        errors.append(FieldError("FieldValueRequired", "spec.containers", ""))
    for key in ("containers", "initContainers"):
        found, stop = _containers(_list(new, key), _list(old, key), f"spec.{key}")
        errors += found
        if stop:
            return errors
    deadline = _deadline(new.get("activeDeadlineSeconds"), old.get("activeDeadlineSeconds"))
    if deadline and new.get("activeDeadlineSeconds") is not None:
        return errors + deadline
    errors += deadline
    errors += _only_added_tolerations(_list(new, "tolerations"), _list(old, "tolerations"))
    errors += _only_deleted_gates(_list(new, "schedulingGates"), _list(old, "schedulingGates"))
    if new == old:
        return errors
    munged = copy.deepcopy(new)
    for key in ("containers", "initContainers"):
        for container, before in zip(_list(munged, key), _list(old, key), strict=True):
            container["image"] = before.get("image")
    for key in ("activeDeadlineSeconds", "schedulingGates", "tolerations"):
        munged.pop(key, None)
        if key in old:
            munged[key] = copy.deepcopy(old[key])
    grace = old.get("terminationGracePeriodSeconds")
    if isinstance(grace, int) and grace < 0 and munged.get("terminationGracePeriodSeconds") == 1:
        munged["terminationGracePeriodSeconds"] = grace
    if old.get("schedulingGates"):
        old_selector = old.get("nodeSelector") or {}
        if (munged.get("nodeSelector") or {}) != old_selector:
            errors += _node_selector(munged.get("nodeSelector") or {}, old_selector)
            munged.pop("nodeSelector", None)
            if old_selector:
                munged["nodeSelector"] = copy.deepcopy(old_selector)
        old_node = (old.get("affinity") or {}).get("nodeAffinity")
        new_node = (munged.get("affinity") or {}).get("nodeAffinity")
        if old_node != new_node:
            errors += _node_affinity(munged.get("affinity"), old.get("affinity"))
            affinity = dict(munged.get("affinity") or {})
            affinity.pop("nodeAffinity", None)
            if old_node is not None:
                affinity["nodeAffinity"] = copy.deepcopy(old_node)
            munged.pop("affinity", None)
            if affinity:
                munged["affinity"] = affinity
    munged = semantic(munged)
    if munged != old:
        changes = "\n".join(_diff(old, munged))
        errors.append(_forbidden("spec", "pod updates may not change fields other than "
                                         f"{','.join(UPDATABLE)}\n{changes}"))  # fmt: skip
    return errors


def create_errors(pod: Mapping[str, Any]) -> list[FieldError]:
    """ValidatePodCreate: "A Pod cannot be assigned a Node if there are remaining scheduling
    gates"."""
    spec = pod.get("spec") or {}
    if spec.get("nodeName") and spec.get("schedulingGates"):
        return [_forbidden("spec.nodeName",
                           "cannot be set until all schedulingGates have been cleared")]  # fmt: skip
    return []


def invalid_pod(name: str, errors: Sequence[FieldError]) -> tuple[str, JsonDict]:
    """NewInvalid(Pod, name, errors): the 422's message, and its details with one cause per
    error."""
    shown = str(errors[0]) if len(errors) == 1 else "[" + ", ".join(map(str, errors)) + "]"
    causes: list[JsonDict] = [
        {"reason": e.type, "message": e.body(), "field": e.field} for e in errors
    ]
    return f'Pod "{name}" is invalid: {shown}', {"name": name, "kind": "Pod", "causes": causes}


__all__ = [
    "FieldError",
    "create_errors",
    "invalid_pod",
    "pod_update_errors",
    "semantic",
]
