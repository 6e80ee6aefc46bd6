"""Kubernetes resource quantities (``500m``, ``2Gi``, ``1e3``, ``8``) as exact decimals.

The grammar is apimachinery's ``resource.ParseQuantity``: a signed decimal number, then an
optional binary suffix (Ki … Ei), decimal suffix (n u m k M G T P E) or exponent (e3, E-2).
YAML integers and floats are accepted as they are, as the API server does for JSON numbers.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from decimal import ROUND_CEILING, Decimal, InvalidOperation
from typing import Any

_QUANTITY = re.compile(r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(.*)$")
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_EXPONENT = re.compile(r"^[eE]([+-]?[0-9]+)$")


def parse(value: object) -> Decimal | None:
    """The quantity's exact value, or None where it is not a quantity."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return Decimal(value)
    if isinstance(value, float):
        return Decimal(str(value)) if value == value and abs(value) != float("inf") else None
    if not isinstance(value, str):
        return None
    match = _QUANTITY.match(value.strip())
    if match is None:
        return None
    number, suffix = match.groups()
    try:
        amount = Decimal(number)
    except InvalidOperation:
        return None
    if suffix in _BINARY:
        return amount * _BINARY[suffix]
    if suffix in _DECIMAL:
        return amount.scaleb(_DECIMAL[suffix])
    exponent = _EXPONENT.match(suffix)
    if exponent is not None:
        return amount.scaleb(int(exponent.group(1)))
    return None


# kube-apiserver rounds every quantity of a Pod's resource lists up to milli precision
# (SetDefaults_ResourceList, pkg/apis/core/v1/defaults.go: cpu "0.0001" is stored as "1m");
# a Volcano Job's template, a custom resource, keeps what was written.
_MILLI = Decimal("1e-3")


def effective_requirements(
    resources: Mapping[str, Any],
) -> tuple[dict[str, Decimal | str], dict[str, Decimal | str]]:
    """A container's ``(requests, limits)`` as kube-apiserver stores them on a Pod: each
    quantity as its exact value (``0.5``, ``500m`` and ``"0.5"`` are one value; a string that
    is no quantity stays as written, for the apiserver to refuse; rounded up to milli, as the
    apiserver stores a Pod's), and a request defaulted
    from the limit of each resource that names a limit and no request (``SetDefaults_Pod``,
    pkg/apis/core/v1/defaults.go: on a Pod only, never on a PodTemplate, which is why a Job's
    template and the pod made from it differ there)."""

    def values(part: object) -> dict[str, Decimal | str]:
        out: dict[str, Decimal | str] = {}
        if not isinstance(part, Mapping):
            return out
        for name, raw in part.items():
            exact = parse(raw)
            out[str(name)] = (
                exact.quantize(_MILLI, rounding=ROUND_CEILING) if exact is not None else str(raw)
            )
        return out

    requests, limits = values(resources.get("requests")), values(resources.get("limits"))
    for name, limit in limits.items():
        requests.setdefault(name, limit)
    return requests, limits


def show(value: Decimal) -> str:
    """A decimal without a trailing exponent or zeros (``4``, ``0.5``)."""
    text = format(value.normalize(), "f")
    return text.rstrip("0").rstrip(".") if "." in text else text
