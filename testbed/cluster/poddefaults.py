"""What kube-apiserver does to a Pod's resources on every decode, for the fake.

* ``SetDefaults_Pod`` (kubernetes pkg/apis/core/v1/defaults.go): a container that names a
  limit and no request for a resource gets the request equal to the limit, per resource name.
  On a Pod only: a PodTemplate (a Volcano task's, an AppWrapper component's) keeps what was
  written, which is why a pod and its template differ.
* Quantities are ``resource.Quantity`` values, served in canonical form (apimachinery
  ``Quantity.String`` → ``CanonicalizeBytes``): ``0.5`` → ``500m``, ``1000m`` → ``1``, the
  integer ``8`` → ``"8"``, ``1024Mi`` → ``1Gi``, ``1536Mi`` stays, ``1e3`` stays.

A fake that does neither passes tests whose manifests always write ``requests = limits`` as
strings, and hides every bug that compares a pod with its template as JSON.
"""

from __future__ import annotations

import re
from decimal import ROUND_CEILING, Decimal
from typing import Any

_NUMBER = re.compile(r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(.*)$")
_BINARY = ("", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei")
_DECIMAL = {-9: "n", -6: "u", -3: "m", 0: "", 3: "k", 6: "M", 9: "G", 12: "T", 15: "P", 18: "E"}
_DECIMAL_EXPONENTS = {suffix: exponent for exponent, suffix in _DECIMAL.items()}
_NANO = Decimal("1e-9")


def canonical(raw: object) -> object:
    """The quantity as the apiserver serves it; anything that is no quantity, unchanged (the
    apiserver would refuse it, which is not this module's concern)."""
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, int | float):
        raw = repr(raw) if isinstance(raw, float) else str(raw)
    if not isinstance(raw, str):
        return raw
    match = _NUMBER.match(raw.strip())
    if match is None:
        return raw
    number, suffix = match.groups()
    if suffix in _BINARY[1:]:
        value, form = Decimal(number) * 1024 ** _BINARY.index(suffix), "binary"
    elif suffix in _DECIMAL_EXPONENTS:
        value, form = Decimal(number).scaleb(_DECIMAL_EXPONENTS[suffix]), "decimal"
    elif re.fullmatch(r"[eE][+-]?[0-9]+", suffix):
        value, form = Decimal(number).scaleb(int(suffix[1:])), "exponent"
    else:
        return raw
    value = value.quantize(_NANO, rounding=ROUND_CEILING) if value != value.to_integral() else value
    if value == 0:
        return "0"
    if form == "binary" and (abs(value) < 1024 or value != value.to_integral()):
        form = "decimal"
    if form == "binary":
        amount, power = int(value), 0
        while power < len(_BINARY) - 1 and amount % 1024 == 0:
            amount, power = amount // 1024, power + 1
        return f"{amount}{_BINARY[power]}"
    mantissa, exponent = _mantissa(value)
    if form == "exponent":
        return f"{mantissa}e{exponent}" if exponent else str(mantissa)
    while exponent > 18:
        mantissa, exponent = mantissa * 10, exponent - 1
    return f"{mantissa}{_DECIMAL[exponent]}"


def _mantissa(value: Decimal) -> tuple[int, int]:
    """An integer mantissa and an exponent that is a multiple of 3 (int64Amount
    AsCanonicalBytes: strip the factors of ten, then step the exponent down to a multiple)."""
    sign, digits, exponent = value.normalize().as_tuple()
    assert isinstance(exponent, int)
    mantissa = int("".join(map(str, digits)) or "0")
    while exponent % 3:
        mantissa, exponent = mantissa * 10, exponent - 1
    return (-mantissa if sign else mantissa), exponent


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
