"""The upstream installs, read from the components' module sources at run time.

Each project's own manifests are rendered as its users render them (``kubectl kustomize`` of
Kueue's and the AppWrapper controller's ``config/default``, the Volcano chart's templates), and
only the kinds a controller running on the host needs are kept: CRDs, ServiceAccounts, RBAC,
webhook configurations, the namespace. Their Deployments, Services and APIServices are left out:
no pod can run a controller here, and an APIService without a backend would break discovery.

A webhook served on the host is reached the way a Service would be: ``clientConfig.service`` is
replaced by ``url: https://<service>.<namespace>.svc:<port><path>``, the name resolving to
127.0.0.1 (``/etc/hosts``), so the serving certificate is still checked for the Service's DNS
name, as the apiserver checks it in a cluster.
"""

from __future__ import annotations

import base64
import copy
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

Obj = dict[str, Any]
INSTALL_KINDS = frozenset({
    "Namespace", "CustomResourceDefinition", "ServiceAccount", "ClusterRole",
    "ClusterRoleBinding", "Role", "RoleBinding", "MutatingWebhookConfiguration",
    "ValidatingWebhookConfiguration",
})  # fmt: skip
WEBHOOK_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")


def kustomize(kubectl: Path, directory: Path) -> list[Obj]:
    done = subprocess.run([str(kubectl), "kustomize", str(directory)], capture_output=True,
                          text=True, check=False)  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"kubectl kustomize {directory}: {done.stderr.strip()}")
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def load(paths: Iterable[Path]) -> list[Obj]:
    out: list[Obj] = []
    for path in paths:
        out += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return out


def select(objs: Iterable[Mapping[str, Any]], kinds: Iterable[str] = INSTALL_KINDS) -> list[Obj]:
    wanted = set(kinds)
    return [copy.deepcopy(dict(o)) for o in objs if o.get("kind") in wanted]


def host_url(service: Mapping[str, Any], port: int) -> str:
    """Where ``service`` (a clientConfig's ``service``) is served from the host."""
    return (f"https://{service['name']}.{service['namespace']}.svc:{port}"
            f"{service.get('path') or ''}")  # fmt: skip


def serve_from_host(
    objs: Iterable[Obj], ports: Mapping[str, int], ca_pem: bytes | None = None
) -> list[Obj]:
    """Every clientConfig (webhooks, and CRD conversion webhooks) naming a Service in
    ``ports`` (``"<name>.<namespace>"``) rewritten to the host URL; ``caBundle`` set to
    ``ca_pem`` where given (else left to the component, which writes its own)."""
    out = []
    for obj in objs:
        obj = copy.deepcopy(obj)
        configs: list[Obj] = []
        if obj.get("kind") in WEBHOOK_KINDS:
            configs = [hook.setdefault("clientConfig", {}) for hook in obj.get("webhooks") or []]
        elif obj.get("kind") == "CustomResourceDefinition":
            conversion = (obj.get("spec") or {}).get("conversion") or {}
            webhook = conversion.get("webhook")
            if webhook and "clientConfig" in webhook:
                configs = [webhook["clientConfig"]]
        for config in configs:
            service = config.get("service")
            if not service:
                continue
            key = f"{service['name']}.{service['namespace']}"
            if key not in ports:
                raise ValueError(f"{obj['kind']} {obj['metadata']['name']} calls Service "
                                 f"{key}, which nothing here serves")  # fmt: skip
            del config["service"]
            config["url"] = host_url(service, ports[key])
            if ca_pem is not None:
                config["caBundle"] = base64.b64encode(ca_pem).decode()
        out.append(obj)
    return out


def stages(objs: Iterable[Obj]) -> list[list[Obj]]:
    """The objects in the groups they can be applied in, each group at once: namespaces, CRDs,
    ServiceAccounts, the rest (RBAC, config), webhooks last (a webhook applied before the
    objects it judges could refuse them)."""
    rank = {"Namespace": 0, "CustomResourceDefinition": 1, "ServiceAccount": 2,
            "MutatingWebhookConfiguration": 4, "ValidatingWebhookConfiguration": 4}  # fmt: skip
    groups: list[list[Obj]] = [[] for _ in range(5)]
    for obj in objs:
        groups[rank.get(str(obj.get("kind")), 3)].append(obj)
    return [g for g in groups if g]
