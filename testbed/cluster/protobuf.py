"""The Kubernetes protobuf encoding of a request body, for the one built-in object the fake is
sent that way: kubectl's generators (``kubectl create namespace``) post core types as
``application/vnd.kubernetes.protobuf``.

The envelope is the 4-byte prefix ``k8s\\x00`` and a ``runtime.Unknown`` message (typeMeta = 1
{apiVersion = 1, kind = 2}, raw = 2) (k8s.io/apimachinery pkg/runtime/serializer/protobuf/
protobuf.go ``protoEncodingPrefix``, pkg/runtime/generated.proto). Only a Namespace is decoded:
metadata = 1 (ObjectMeta: name = 1, generateName = 2, labels = 11, annotations = 12,
finalizers = 14; pkg/apis/meta/v1/generated.proto) and spec = 2 (finalizers = 1;
k8s.io/api core/v1/generated.proto). Anything else is refused as a real apiserver refuses a
media type it does not serve for a kind (415), rather than decoded in part.
"""

from __future__ import annotations

from typing import Any

MEDIA_TYPE = "application/vnd.kubernetes.protobuf"
PREFIX = b"k8s\x00"


class Unsupported(ValueError):
    """A body this module does not decode."""


def _fields(data: bytes) -> list[tuple[int, int | bytes]]:
    """(field number, value) of each field: varints as int, length-delimited as bytes."""
    found: list[tuple[int, int | bytes]] = []
    i = 0

    def varint() -> int:
        nonlocal i
        value, shift = 0, 0
        while True:
            if i >= len(data):
                raise Unsupported("truncated varint")
            byte = data[i]
            i += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7

    while i < len(data):
        key = varint()
        number, wire = key >> 3, key & 7
        if wire == 0:
            found.append((number, varint()))
        elif wire == 2:
            size = varint()
            found.append((number, data[i : i + size]))
            i += size
        else:
            raise Unsupported(f"wire type {wire}")
    return found


def _text(value: int | bytes) -> str:
    if not isinstance(value, bytes):
        raise Unsupported("expected a string")
    return value.decode()


def _map_entry(value: int | bytes) -> tuple[str, str]:
    entry = dict(_fields(value if isinstance(value, bytes) else b""))
    return _text(entry.get(1, b"")), _text(entry.get(2, b""))


def _metadata(data: bytes) -> dict[str, Any]:
    meta: dict[str, Any] = {}
    for number, value in _fields(data):
        if number == 1:
            meta["name"] = _text(value)
        elif number == 2:
            meta["generateName"] = _text(value)
        elif number in (11, 12):
            key, text = _map_entry(value)
            meta.setdefault("labels" if number == 11 else "annotations", {})[key] = text
        elif number == 14:
            meta.setdefault("finalizers", []).append(_text(value))
        elif number not in (3, 4, 5, 6, 7, 8):  # namespace, selfLink, uid, rv, generation, created
            raise Unsupported(f"ObjectMeta field {number}")
    return meta


def decode(body: bytes) -> dict[str, Any]:
    """The JSON form of a protobuf-encoded Namespace; :class:`Unsupported` for anything else."""
    if not body.startswith(PREFIX):
        raise Unsupported("no k8s protobuf prefix")
    unknown = dict(_fields(body[len(PREFIX) :]))
    type_meta = dict(_fields(unknown.get(1, b"") if isinstance(unknown.get(1), bytes) else b""))
    api_version, kind = _text(type_meta.get(1, b"")), _text(type_meta.get(2, b""))
    if (api_version, kind) != ("v1", "Namespace"):
        raise Unsupported(f"{api_version} {kind}")
    obj: dict[str, Any] = {"apiVersion": "v1", "kind": "Namespace", "metadata": {}}
    raw = unknown.get(2, b"")
    for number, value in _fields(raw if isinstance(raw, bytes) else b""):
        if number == 1 and isinstance(value, bytes):
            obj["metadata"] = _metadata(value)
        elif number == 2 and isinstance(value, bytes):
            finalizers = [_text(v) for n, v in _fields(value) if n == 1]
            if finalizers:
                obj["spec"] = {"finalizers": finalizers}
        elif number != 3:
            raise Unsupported(f"Namespace field {number}")
    return obj


# --- OpenAPI v2, as kube-apiserver serves /openapi/v2 to kubectl -------------------------------


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _message(number: int, body: bytes | str) -> bytes:
    data = body.encode() if isinstance(body, str) else body
    return _varint(number << 3 | 2) + _varint(len(data)) + data


def openapi_v2(patches: list[tuple[str, dict[str, str], list[str]]]) -> bytes:
    """The OpenAPI v2 document in gnostic's protobuf (google/gnostic openapiv2/OpenAPIv2.proto:
    Document.paths = 8, Paths.path = 2, NamedPathItem{name = 1, value = 2}, PathItem.patch = 8,
    Operation{parameters = 8, vendor_extension = 13}, ParametersItem.parameter = 1,
    Parameter.non_body_parameter = 2, NonBodyParameter.query_parameter_sub_schema = 3,
    QueryParameterSubSchema{in = 2, name = 4, type = 6}, NamedAny{name = 1, value = 2},
    Any.yaml = 2): for each (path, group-version-kind, query parameters) a PATCH operation. It
    is what kubectl before 1.28 reads to decide that the server validates fields itself
    (k8s.io/kubectl pkg/cmd/util ... resource/query_param_verifier.go supportsQueryParam);
    no schema is served."""
    paths = b""
    for path, gvk, params in patches:
        operation = b"".join(
            _message(8, _message(1, _message(2, _message(3, _message(2, "query")
                                                         + _message(4, p) + _message(6, "string")))))
            for p in params
        )  # fmt: skip
        extension = "".join(f"{k}: {v!r}\n" for k, v in sorted(gvk.items()))
        operation += _message(13, _message(1, "x-kubernetes-group-version-kind")
                              + _message(2, _message(2, extension)))  # fmt: skip
        paths += _message(2, _message(1, path) + _message(2, _message(8, operation)))
    info = _message(1, "Kubernetes") + _message(2, "v1.33.0-fake")
    return _message(1, "2.0") + _message(2, info) + _message(8, paths)
