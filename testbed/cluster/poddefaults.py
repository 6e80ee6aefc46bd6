"""What kube-apiserver does to a Pod's resources on every decode, for the fake.

* ``SetDefaults_Pod`` (kubernetes pkg/apis/core/v1/defaults.go): a container that names a
  limit and no request for a resource gets the request equal to the limit, per resource name.
  On a Pod only: a PodTemplate (a Volcano task's, an AppWrapper component's) keeps what was
  written, which is why a pod and its template differ.
* ``SetDefaults_ResourceList`` (same file): every quantity of a Pod's resource lists is
  rounded up to milli precision (``RoundUp(-3)``): ``0.0001`` cpu is stored as ``1m``, ``1n``
  memory as ``1m``, ``1500u`` as ``2m``.
* Quantities are ``resource.Quantity`` values (apimachinery pkg/api/resource/quantity.go),
  served as ``ParseQuantity`` left them: the string as written when it is already in the
  canonical form ParseQuantity recognises (``+1``, ``01``, ``1E3``, ``5.``, ``1Gi``,
  ``100Ki``: the "reuse the string" branches), else ``CanonicalizeBytes`` of the value:
  ``0.5`` → ``500m``, ``1000m`` → ``1``, ``1024Mi`` → ``1Gi``, ``1.5Gi`` → ``1536Mi``,
  ``3e-1`` → ``300e-3``; a decimal exponent with no suffix (past ``E``) is written without
  one, as upstream's suffixer does (``1000000P`` → ``1``).

A fake that does none of this passes tests whose manifests always write ``requests = limits``
as strings, and hides every bug that compares a pod with its template as JSON.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal
from typing import Any

_NUMBER = re.compile(r"^([+-]?)([0-9]*)(?:\.([0-9]*))?(.*)$")
_BINARY = ("", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei")
_DECIMAL = {-9: "n", -6: "u", -3: "m", 0: "", 3: "k", 6: "M", 9: "G", 12: "T", 15: "P", 18: "E"}
_DECIMAL_EXPONENTS = {suffix: exponent for exponent, suffix in _DECIMAL.items()}
_EXPONENT = re.compile(r"^[eE][+-]?[0-9]+$")
_INT64 = 2**63
_NANO = -9
_MILLI = -3


@dataclass(frozen=True)
class _Quantity:
    value: Decimal
    form: str  # "decimal" (DecimalSI), "binary" (BinarySI), "exponent" (DecimalExponent)
    scale: int  # the int64Amount's scale; None-like (-100) for the inf.Dec representation
    written: str | None  # the string ParseQuantity kept


def _round_away(value: Decimal, exponent: int) -> Decimal:
    """Round to 10**exponent away from zero (inf.RoundUp, int64Amount.AsScale)."""
    quantum = Decimal(1).scaleb(exponent)
    rounding = ROUND_CEILING if value >= 0 else ROUND_FLOOR
    return value.quantize(quantum, rounding=rounding)


def _parse(text: str) -> _Quantity | None:
    """ParseQuantity (quantity.go) and parseQuantityString: None where it would fail."""
    match = _NUMBER.match(text)
    if match is None:
        return None
    sign, integer, fraction, suffix = match.groups()
    if not integer and fraction is None:
        return None
    num = integer.lstrip("0") or "0"
    denom = fraction or ""
    if suffix in _BINARY[1:]:
        form, exponent = "binary", 10 * _BINARY.index(suffix)
    elif suffix in _DECIMAL_EXPONENTS:
        form, exponent = "decimal", _DECIMAL_EXPONENTS[suffix]
    elif _EXPONENT.match(suffix):
        form, exponent = "exponent", int(suffix[1:])
    else:
        return None
    negative = sign == "-"
    exact = Decimal(f"{'-' if negative else ''}{num}.{denom or '0'}")
    exact = exact * (2**exponent) if form == "binary" else exact.scaleb(exponent)
    # The int64 fast path, and its "the number is in canonical form, reuse the string".
    if form == "binary":
        precision = 15 - len(num) - int(exponent * 3 / 10) - 1 if not denom else -1
        scale = 0
    else:
        precision = 18 - (len(num) + len(denom))
        scale = exponent - len(denom)
    if precision >= 0 and scale >= _NANO:
        shifted = num + denom
        value = int(shifted)
        result = value * (2**exponent if form == "binary" else 1)
        if value < _INT64 and result < _INT64:
            if form == "binary":
                canonical_form = value & 0x07 != 0
            else:
                canonical_form = (
                    scale % 3 == 0 and not shifted.endswith("000") and shifted[0] != "0"
                )
            return _Quantity(exact, form, scale, text if canonical_form else None)
    # The inf.Dec path: nano precision at most, rounded up; a small binary one is decimal.
    if exact != 0:
        exact = _round_away(exact, _NANO)
    if form == "binary" and abs(exact) < 1024:
        form = "decimal"
    return _Quantity(exact, form, -100, None)


def _round_up_to_milli(quantity: _Quantity) -> _Quantity:
    """Quantity.RoundUp(-3): nothing (the string kept) when the amount's scale is milli or
    coarser, else the value rounded up to milli and the string dropped."""
    if quantity.scale >= _MILLI:
        return quantity
    return _Quantity(_round_away(quantity.value, _MILLI), quantity.form, _MILLI, None)


def _canonical_bytes(quantity: _Quantity) -> str:
    """Quantity.CanonicalizeBytes."""
    value, form = quantity.value, quantity.form
    if value == 0:
        return "0"
    if form == "binary" and (abs(value) < 1024 or value != value.to_integral()):
        form = "decimal"
    if form == "binary":
        amount, power = int(value), 0
        while amount % 1024 == 0:
            amount, power = amount // 1024, power + 1
        return f"{amount}{_BINARY[power] if power < len(_BINARY) else ''}"
    sign, digits, exponent = value.normalize().as_tuple()
    assert isinstance(exponent, int)
    mantissa = int("".join(map(str, digits)) or "0")
    while exponent % 3:
        mantissa, exponent = mantissa * 10, exponent - 1
    mantissa = -mantissa if sign else mantissa
    if form == "exponent":
        return f"{mantissa}e{exponent}" if exponent else str(mantissa)
    return f"{mantissa}{_DECIMAL.get(exponent, '')}"


def canonical(raw: object, *, milli: bool = True) -> object:
    """The quantity as a Pod's resources are stored and served (``milli``: rounded up to
    milli precision, as SetDefaults_ResourceList does for every resource list of a Pod);
    anything that is no quantity, unchanged (the apiserver would refuse it, which is not
    this module's concern)."""
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, int | float):
        raw = repr(raw) if isinstance(raw, float) else str(raw)
    if not isinstance(raw, str):
        return raw
    text = raw.strip()
    quantity = _parse(text)
    if quantity is None:
        return raw
    if milli:
        quantity = _round_up_to_milli(quantity)
    return quantity.written if quantity.written is not None else _canonical_bytes(quantity)


def quantity_value(raw: object) -> object:
    """The quantity's exact value as text (``1``, ``"1"`` and ``1000m`` alike), what Go's
    semantic equality compares; anything that is no quantity, unchanged."""
    if isinstance(raw, bool) or not isinstance(raw, int | float | str):
        return raw
    quantity = _parse(repr(raw) if isinstance(raw, float) else str(raw).strip())
    return raw if quantity is None else str(quantity.value.normalize())


def default_pod(pod: dict[str, Any]) -> None:
    """Default and canonicalise ``pod``'s resources in place."""
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return
    for field in ("initContainers", "containers", "ephemeralContainers"):
        for container in spec.get(field) or []:
            if isinstance(container, dict) and isinstance(container.get("resources"), dict):
                _default_requirements(container["resources"])
    if isinstance(spec.get("resources"), dict):  # pod-level resources (1.34+)
        _default_requirements(spec["resources"])
    if isinstance(spec.get("overhead"), dict):
        spec["overhead"] = {k: canonical(v) for k, v in spec["overhead"].items()}


def _default_requirements(resources: dict[str, Any]) -> None:
    for part in ("limits", "requests"):
        if isinstance(resources.get(part), dict):
            resources[part] = {k: canonical(v) for k, v in resources[part].items()}
    limits = resources.get("limits")
    if isinstance(limits, dict) and limits:
        requests = resources.setdefault("requests", {})
        if isinstance(requests, dict):
            for name, limit in limits.items():
                requests.setdefault(name, limit)
