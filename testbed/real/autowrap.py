"""autowrap installed as a user installs it, its replicas running on the host.

The install is the variant the README names for a cluster without cert-manager,
``deploy/release/autowrap-self-managed.yaml``, plus the component docs/install.md adds where
OwnerReferencesPermissionEnforcement is on (``deploy/components/owner-references-enforcement``,
its ``rbac.yaml`` next to a release file), applied with ``kubectl apply -f``. Two things change,
and only because the replicas run on the host:

- each webhook's ``clientConfig.service`` becomes ``url: https://autowrap.autowrap-system.svc:
  <port><path>``, the port being the launcher's stand-in for the Service (``proxy``). caBundle is
  left as shipped: empty. Each replica runs with the Deployment's own arguments, so with
  ``--self-managed-certs`` it fills the shipped Secret and writes the caBundle itself, as on a
  user's cluster (the same RBAC, the same code path).
- the Deployment's ``replicas`` follow the replicas running on the host (0 at install, then
  scaled by the launcher as it starts and stops them). Its pods are KWOK's: Running, ready, with
  pod IPs that lead nowhere, and the endpoints controller publishes them. That is the most
  ``autowrap doctor`` can be told truthfully here: the Deployment (version, ``--self-managed-certs``),
  how many replicas are ready and how many endpoints the Service has all match the processes that
  serve. An EndpointSlice naming the replicas themselves is impossible (the apiserver refuses
  loopback addresses in endpoints), so doctor's per-endpoint probes (``readyz``, ``ca-bundle``)
  reach the fake pod IPs, as when doctor runs outside a cluster's pod network, and say so; the
  certificate the webhooks really present is checked through the Service stand-in instead.
  Left out, the Deployment would make doctor report autowrap as not installed; applied as
  shipped, it would report two ready replicas whether any process served or not.

Each replica runs as autowrap's own ServiceAccount (a TokenRequest token), with the policies
the installed ConfigMap holds, written where the Deployment would mount them.
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from typing import Any

from testbed.real import manifests

Obj = dict[str, Any]
REPO = Path(__file__).resolve().parents[2]
RELEASE = REPO / "deploy" / "release" / "autowrap-self-managed.yaml"
OWNER_REFERENCES = REPO / "deploy" / "components" / "owner-references-enforcement" / "rbac.yaml"
NAMESPACE = "autowrap-system"
SERVICE = "autowrap"
SERVICE_ACCOUNT = "autowrap"
POLICY_CONFIGMAP = "autowrap-policies"


def render(webhook_port: int) -> list[Obj]:
    """The release and the owner-references component, rewritten to serve from the host."""
    objs = manifests.load([RELEASE, OWNER_REFERENCES])
    hosted = manifests.serve_from_host(objs, {f"{SERVICE}.{NAMESPACE}": webhook_port})
    for obj in hosted:
        if obj["kind"] == "Deployment" and obj["metadata"]["name"] == SERVICE:
            obj["spec"]["replicas"] = 0
    return hosted


def container(objs: list[Obj]) -> Obj:
    deployment = next(o for o in objs if o["kind"] == "Deployment")
    found: Obj = deployment["spec"]["template"]["spec"]["containers"][0]
    return found


def serve_argv(
    objs: list[Obj],
    replica: str,
    *,
    port: int,
    metrics_port: int,
    cert_dir: Path,
    policy_dir: Path,
    kubeconfig: Path,
) -> list[str]:
    """``python -m webhook`` with the Deployment's arguments, the listeners moved to 127.0.0.1
    and their own ports, the mounts to this replica's directories, the API reached through
    ``kubeconfig`` instead of the in-cluster configuration, the host name ``replica``."""
    args = list(container(objs)["args"])
    replaced = {"--host": "127.0.0.1", "--port": str(port), "--metrics-port": str(metrics_port),
                "--cert-dir": str(cert_dir), "--policy": str(policy_dir)}  # fmt: skip
    for i, arg in enumerate(args[:-1]):
        if arg in replaced:
            args[i + 1] = replaced[arg]
    missing = [flag for flag in replaced if flag not in args]
    if missing:
        raise ValueError(f"the Deployment's arguments lack {', '.join(missing)}: {args}")
    # A UTS namespace of its own, whose hostname is the replica's name, as a pod's is its
    # name: the controller's Lease identity is the host name.
    return ["unshare", "--uts", "--", "sh", "-c", 'hostname "$0" && exec "$@"', replica,
            python(), "-m", "webhook", *args, "--metrics-host", "127.0.0.1",
            "--kubeconfig", str(kubeconfig)]  # fmt: skip


def serve_env(objs: list[Obj], replica: str) -> dict[str, str]:
    """The Deployment's environment (its downward-API values as a pod would see them)."""
    env = {"HOSTNAME": replica, "POD_NAME": replica}
    for var in container(objs).get("env") or []:
        field = ((var.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath")
        if field == "metadata.namespace":
            env[var["name"]] = NAMESPACE
        elif field == "metadata.name":
            env[var["name"]] = replica
        elif "value" in var:
            env[var["name"]] = str(var["value"])
    return env


def python() -> str:
    venv = REPO / ".venv" / "bin" / "python"
    return str(venv) if venv.exists() else sys.executable


def write_policies(config_map: Obj, directory: Path) -> None:
    """The ConfigMap's keys as files, as its volume mount would show them."""
    directory.mkdir(parents=True, exist_ok=True)
    data = copy.deepcopy(config_map.get("data") or {})
    for stale in directory.iterdir():
        if stale.name not in data:
            stale.unlink()
    for key, text in data.items():
        path = directory / key
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
