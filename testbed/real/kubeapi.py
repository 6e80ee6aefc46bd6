"""A small synchronous client for the launcher's own calls to kube-apiserver, and kubeconfigs.

The launcher installs a few hundred upstream objects and polls a dozen conditions; one TLS
request each, by server-side apply, is quicker than a kubectl process per batch and needs no
discovery: the path of an object follows from its apiVersion, kind and namespace. What the
tests and a user do goes through kubectl instead (:meth:`RealCluster.kubectl`).
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

Obj = dict[str, Any]
FIELD_MANAGER = "autowrap-testbed"


class ApiError(RuntimeError):
    def __init__(self, status: int, method: str, path: str, body: str) -> None:
        super().__init__(f"{method} {path}: HTTP {status}: {body[:2000]}")
        self.status = status
        self.body = body


def plural(kind: str) -> str:
    lower = kind.lower()
    if lower.endswith("y"):
        return lower[:-1] + "ies"
    return lower + "s"


def collection(api_version: str, kind: str, namespace: str | None = None) -> str:
    """The collection path of ``kind`` (core group: ``/api/v1``; others ``/apis/<g>/<v>``)."""
    root = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    scope = f"/namespaces/{namespace}" if namespace else ""
    return f"{root}{scope}/{plural(kind)}"


def path_of(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{collection(obj['apiVersion'], obj['kind'], meta.get('namespace'))}/{meta['name']}"


@dataclass(frozen=True)
class Credentials:
    """Who calls: a client certificate pair, or a bearer token."""

    cert: Path | None = None
    key: Path | None = None
    token: str | None = None


class Api:
    def __init__(self, server: str, ca: Path, credentials: Credentials) -> None:
        self.server = server
        self.credentials = credentials
        self.context = ssl.create_default_context(cafile=str(ca))
        if credentials.cert and credentials.key:
            self.context.load_cert_chain(str(credentials.cert), str(credentials.key))

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = "application/json",
        query: Mapping[str, str] | None = None,
        timeout: float = 30.0,
        raw: bool = False,
    ) -> Any:
        url = self.server + path + (f"?{urllib.parse.urlencode(query)}" if query else "")
        data = None
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
        headers = {"Accept": "application/json", "Content-Type": content_type}
        if self.credentials.token:
            headers["Authorization"] = f"Bearer {self.credentials.token}"
        req = urllib.request.Request(url, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, context=self.context, timeout=timeout) as response:
                payload = response.read()
        except urllib.error.HTTPError as error:
            raise ApiError(
                error.code, method, path, error.read().decode(errors="replace")
            ) from None
        if raw:
            return payload.decode()
        return json.loads(payload) if payload else None

    def get(self, path: str) -> Obj | None:
        """The object, or None when it does not exist."""
        try:
            found: Obj = self.request("GET", path)
        except ApiError as error:
            if error.status == 404:
                return None
            raise
        return found

    def create(self, obj: Mapping[str, Any], *, dry_run: bool = False) -> Obj:
        meta = obj.get("metadata") or {}
        query = {"dryRun": "All"} if dry_run else None
        created: Obj = self.request(
            "POST", collection(obj["apiVersion"], obj["kind"], meta.get("namespace")), obj,
            query=query,
        )  # fmt: skip
        return created

    def apply(self, obj: Mapping[str, Any]) -> Obj:
        """Server-side apply of ``obj`` (created, or brought to this content), forcing
        ownership of its fields: the launcher owns what it installs."""
        applied: Obj = self.request(
            "PATCH", path_of(obj), dict(obj), content_type="application/apply-patch+yaml",
            query={"fieldManager": FIELD_MANAGER, "force": "true"},
        )  # fmt: skip
        return applied

    def apply_all(self, objs: Iterable[Mapping[str, Any]]) -> None:
        for obj in objs:
            self.apply(obj)

    def delete(self, path: str) -> None:
        try:
            self.request("DELETE", path)
        except ApiError as error:
            if error.status != 404:
                raise

    def token(self, namespace: str, service_account: str, seconds: int = 86400) -> str:
        """A TokenRequest token of ``namespace/service_account``."""
        answer = self.request(
            "POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{service_account}/token",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
             "spec": {"expirationSeconds": seconds}},
        )  # fmt: skip
        return str(answer["status"]["token"])


def write_kubeconfig(
    path: Path, server: str, ca: Path, credentials: Credentials, namespace: str = "default"
) -> Path:
    user: Obj = {}
    if credentials.token:
        user["token"] = credentials.token
    else:
        user["client-certificate"] = str(credentials.cert)
        user["client-key"] = str(credentials.key)
    config = {
        "apiVersion": "v1", "kind": "Config", "current-context": "testbed",
        "clusters": [{"name": "testbed",
                      "cluster": {"server": server, "certificate-authority": str(ca)}}],
        "users": [{"name": "testbed", "user": user}],
        "contexts": [{"name": "testbed",
                      "context": {"cluster": "testbed", "user": "testbed",
                                  "namespace": namespace}}],
    }  # fmt: skip
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


def condition(obj: Mapping[str, Any] | None, kind: str) -> bool:
    """Whether ``obj``'s status holds condition ``kind`` with status True."""
    conditions = ((obj or {}).get("status") or {}).get("conditions") or []
    return any(c.get("type") == kind and c.get("status") == "True" for c in conditions)
