"""AdmissionReview ``admission.k8s.io/v1``: the envelope, and responses built from decisions.

Two error channels, as kube-apiserver expects: a body that is not an AdmissionReview is a
``BadReview`` (the server answers 4xx with the reason); an object that is not acceptable is a
well-formed response with ``allowed: false`` inside an HTTP 200.
"""

from __future__ import annotations

import base64
import contextlib
from collections.abc import Sequence
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError

API_VERSION = "admission.k8s.io/v1"
# kube-apiserver truncates each warning at 256 runes and ignores warnings past 4096 in total.
WARNING_ITEM_LIMIT = 256
WARNING_TOTAL_LIMIT = 4096


class BadReview(Exception):
    """The request body is not a usable AdmissionReview; ``status`` is the HTTP status to send."""

    def __init__(self, reason: str, status: int = 400) -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True, frozen=True)


class GroupVersionKind(_Model):
    group: str = ""
    version: str = ""
    kind: str = ""


class GroupVersionResource(_Model):
    group: str = ""
    version: str = ""
    resource: str = ""


class UserInfo(_Model):
    username: str = ""
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: dict[str, tuple[str, ...]] = Field(default_factory=dict)


class AdmissionRequest(_Model):
    uid: str = Field(min_length=1)
    kind: GroupVersionKind
    resource: GroupVersionResource = GroupVersionResource()
    sub_resource: str = Field(default="", alias="subResource")
    name: str = ""
    namespace: str = ""
    operation: Literal["CREATE", "UPDATE", "DELETE", "CONNECT"]
    user_info: UserInfo = Field(default=UserInfo(), alias="userInfo")
    object: dict[str, Any] | None = None
    old_object: dict[str, Any] | None = Field(default=None, alias="oldObject")
    dry_run: bool = Field(default=False, alias="dryRun")


class AdmissionReview(_Model):
    api_version: Literal["admission.k8s.io/v1"] = Field(alias="apiVersion")
    kind: Literal["AdmissionReview"]
    request: AdmissionRequest


_UNDECODED = object()
# 19 digits in a row may be an integer beyond 64 bits (2**63 has 19); shorter ones never are.
# Found by mapping every digit to "0" and everything else to " ", then one substring search:
# several times faster than a regular expression over the body.
_DIGITS_ONLY = bytes(b"0"[0] if chr(i).isdigit() and i < 128 else b" "[0] for i in range(256))
_LONG_RUN = b"0" * 19


def _has_long_number(body: bytes) -> bool:
    return _LONG_RUN in body.translate(_DIGITS_ONLY)


def parse(body: bytes) -> AdmissionReview:
    """The review in a request body; raises BadReview saying what is wrong with it."""
    if not body:
        raise BadReview("empty body: expected an admission.k8s.io/v1 AdmissionReview")
    decoded: Any = _UNDECODED
    if not _has_long_number(body):
        with contextlib.suppress(orjson.JSONDecodeError):
            decoded = orjson.loads(body)
    try:
        if decoded is _UNDECODED:
            # pydantic's own reader keeps integers beyond 64 bits exact (orjson would turn them
            # into floats, so a body with a long run of digits goes this way), and it words
            # the error when the body is not JSON at all.
            return AdmissionReview.model_validate_json(body)
        # Decoding with orjson and validating the decoded envelope costs about half of
        # validating straight from JSON.
        return AdmissionReview.model_validate(decoded)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "body"
        if first["type"] == "json_invalid":
            raise BadReview(f"body is not JSON: {first['msg']}") from None
        raise BadReview(
            f"not an admission.k8s.io/v1 AdmissionReview: {where}: {first['msg']}"
        ) from None


def fit_warnings(warnings: Sequence[str]) -> list[str]:
    """Warnings that reach the user intact: each within the per-item limit, all within the total."""
    out: list[str] = []
    total = 0
    for text in warnings:
        item = text if len(text) <= WARNING_ITEM_LIMIT else text[: WARNING_ITEM_LIMIT - 1] + "…"
        if total + len(item) > WARNING_TOTAL_LIMIT:
            break
        out.append(item)
        total += len(item)
    return out


def allow(uid: str, *, patch: bytes = b"", warnings: Sequence[str] = ()) -> dict[str, Any]:
    """Allowed, with ``patch`` (a JSONPatch, already encoded as JSON) when there is one."""
    response: dict[str, Any] = {"uid": uid, "allowed": True}
    if patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(patch).decode()
    fitted = fit_warnings(warnings)
    if fitted:
        response["warnings"] = fitted
    return _envelope(response)


def deny(
    uid: str,
    message: str,
    *,
    code: int = 403,
    reason: str = "Forbidden",
    warnings: Sequence[str] = (),
    details: dict[str, Any] | None = None,
) -> dict[str, Any]:
    status: dict[str, Any] = {"code": max(code, 400), "message": message, "reason": reason}
    if details:
        status["details"] = details
    response: dict[str, Any] = {"uid": uid, "allowed": False, "status": status}
    fitted = fit_warnings(warnings)
    if fitted:
        response["warnings"] = fitted
    return _envelope(response)


def _envelope(response: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": "AdmissionReview", "response": response}
