"""What the fake cluster's callers share: kubeconfigs, identities, access rules, the request log.

Kept apart from :mod:`testbed.cluster.cluster` so that simulators and harnesses can use
them without the HTTP front door.
"""

from __future__ import annotations

import base64
import re
import ssl
import tempfile
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from testbed.apiserver import JsonDict, UserInfo
from webhook.model.names import SERVICE_NAME, SERVICE_NAMESPACE

DEFAULT_TOKEN = "fake-token"


def sanitize_label(value: str) -> str:
    """The AppWrapper operator's SanitizeLabel (pkg/utils/utils.go:624-637 at b47a99ee): the
    first 63 bytes, ``[^-_.\\w]`` (ASCII ``\\w``, as Go's regexp) to ``_``, ``-_.`` trimmed."""
    head = value.encode()[:63].decode("utf-8", "replace")
    return re.sub(r"[^-_.\w]", "_", head, flags=re.ASCII).strip("-_.")


def service_account_user(name: str = SERVICE_NAME, namespace: str = SERVICE_NAMESPACE) -> UserInfo:
    """The identity a pod's service-account token authenticates as."""
    return UserInfo(
        username=f"system:serviceaccount:{namespace}:{name}",
        uid=str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{name}.{namespace}")),
        groups=(
            "system:serviceaccounts",
            f"system:serviceaccounts:{namespace}",
            "system:authenticated",
        ),
    )


@dataclass(frozen=True)
class ServingTLS:
    """The API's serving certificate and the CA that signed it. Clients reach the API by its
    address and check the certificate against ``server_name``, as a kubeconfig's
    ``tls-server-name`` asks."""

    ca_pem: bytes
    cert_pem: bytes
    key_pem: bytes
    server_name: str = "kubernetes.default.svc"

    @classmethod
    def issue(cls, server_name: str = "kubernetes.default.svc") -> ServingTLS:
        from webhook.shell import certs

        ca = certs.make_ca("fake-apiserver-ca")
        serving = certs.make_serving(ca, [server_name])
        return cls(ca.cert_pem, serving.cert_pem, serving.key_pem, server_name)

    def context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        with tempfile.TemporaryDirectory() as tmp:
            cert, key = Path(tmp) / "tls.crt", Path(tmp) / "tls.key"
            cert.write_bytes(self.cert_pem)
            key.write_bytes(self.key_pem)
            context.load_cert_chain(cert, key)
        return context


def write_kubeconfig(
    path: Path, server: str, token: str, namespace: str = "default", *,
    tls: ServingTLS | None = None,
) -> Path:  # fmt: skip
    """A kubeconfig with bearer-token auth for a fake API at ``server``, read by
    ``kubernetes(.aio).config.load_kube_config``; with ``tls``, the CA and server name to
    check the API's certificate against."""
    cluster: dict[str, Any] = {"server": server}
    if tls is not None:
        cluster["certificate-authority-data"] = base64.b64encode(tls.ca_pem).decode()
        cluster["tls-server-name"] = tls.server_name
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "fake", "cluster": cluster}],
        "users": [{"name": "fake-user", "user": {"token": token}}],
        "contexts": [
            {
                "name": "fake",
                "context": {"cluster": "fake", "user": "fake-user", "namespace": namespace},
            }
        ],
        "current-context": "fake",
        "preferences": {},
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


@dataclass(frozen=True)
class RecordedRequest:
    """One request the fake received, for assertions (bodies are decoded JSON or None)."""

    method: str
    path: str
    query: Mapping[str, str]
    body: Any
    user: str
    impersonated_user: str | None
    accept: str = ""
    """The Accept header: metadata-only reads ask ``as=PartialObjectMetadata(List)``."""


@dataclass(frozen=True)
class AccessRule:
    """One authorization rule; ``None`` subjects and ``"*"`` attributes match all.

    A rule is about resources or, with ``non_resource``, about URLs (``path``, e.g.
    ``/metrics``): RBAC keeps the two apart (a PolicyRule has either resources or
    nonResourceURLs, k8s.io/api rbac/v1 types.go PolicyRule), and so does the
    SubjectAccessReview (resourceAttributes or nonResourceAttributes)."""

    allowed: bool
    user: str | None
    in_group: str | None
    verb: str
    group: str
    resource: str
    namespace: str
    name: str
    subresource: str
    reason: str
    path: str = "*"
    non_resource: bool = False

    def matches(self, user: str, groups: list[str], attrs: Mapping[str, Any]) -> bool:
        """``attrs``: the review's resourceAttributes, or its nonResourceAttributes (which
        carry a ``path``)."""
        if self.user is not None and self.user != user:
            return False
        if self.in_group is not None and self.in_group not in groups:
            return False
        if self.non_resource != ("path" in attrs):
            return False
        if self.non_resource:
            wanted = {"verb": self.verb, "path": self.path}
        else:
            wanted = {
                "verb": self.verb,
                "group": self.group,
                "resource": self.resource,
                "namespace": self.namespace,
                "name": self.name,
                "subresource": self.subresource,
            }
        return all(v == "*" or v == str(attrs.get(k, "") or "") for k, v in wanted.items())


def parse_label_selector(text: str) -> JsonDict:
    """The string form of a label selector (``a=b,c!=d,e,!f,g in (x,y)``) as a LabelSelector."""
    match_labels: dict[str, str] = {}
    expressions: list[JsonDict] = []
    for term in re.split(r",(?![^()]*\))", text.strip()):
        term = term.strip()
        if not term:
            continue
        set_based = re.fullmatch(r"(\S+)\s+(in|notin)\s+\(([^)]*)\)", term)
        if set_based:
            key, op, values = set_based.groups()
            expressions.append(
                {
                    "key": key,
                    "operator": "In" if op == "in" else "NotIn",
                    "values": [v.strip() for v in values.split(",") if v.strip()],
                }
            )
        elif "!=" in term:
            key, value = (s.strip() for s in term.split("!=", 1))
            expressions.append({"key": key, "operator": "NotIn", "values": [value]})
        elif "=" in term:
            key, value = (s.strip() for s in term.replace("==", "=").split("=", 1))
            match_labels[key] = value
        elif term.startswith("!"):
            expressions.append({"key": term[1:].strip(), "operator": "DoesNotExist"})
        else:
            expressions.append({"key": term, "operator": "Exists"})
    return {"matchLabels": match_labels, "matchExpressions": expressions}


__all__ = [
    "DEFAULT_TOKEN",
    "AccessRule",
    "RecordedRequest",
    "parse_label_selector",
    "sanitize_label",
    "service_account_user",
    "write_kubeconfig",
]
