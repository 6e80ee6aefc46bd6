"""autowrap installed from its Helm chart (deploy/helm/autowrap) on the real control plane,
its replicas served from the host as testbed/real/autowrap.py serves the kustomize install.

The pinned helm installs, upgrades and uninstalls the chart as a user does, with one difference,
made by a post-renderer (``python -m testbed.real.chart PORT``, helm's ``--post-renderer``) and
the same the launcher makes to the kustomize install, for the same reason (autowrap.py): every
webhook's ``clientConfig.service`` becomes the host URL of the Service stand-in, and the
Deployment's ``replicas`` is 0, the launcher scaling it as it starts and stops replicas on the
host. Helm's three-way merge leaves that scale alone on upgrade, since neither release changes
the field, as it leaves the caBundle autowrap writes.

Switching what is installed, within the one session's cluster:

- :func:`remove` takes autowrap out as docs/install.md says (``autowrap uninstall``); the host
  replicas are stopped first, as deleting the Deployment stops its pods;
- :func:`serve` runs replicas for the objects now installed (with a token of the ServiceAccount
  the new install created);
- :func:`install_kustomize` puts the launcher's kustomize install back.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import yaml

from testbed.real import autowrap, build, kubeapi, manifests
from testbed.real.cluster import RealCluster

Obj = dict[str, Any]
CHART = autowrap.REPO / "deploy" / "helm" / "autowrap"
RELEASE = "autowrap"
# What autowrap uninstall leaves for the AppWrapper controller (webhook/shell/uninstall.py).
KEPT = "autowrap-appwrapper-volcano-jobs"
RBAC = "/apis/rbac.authorization.k8s.io/v1"
TIMEOUT = 120.0


def post_render(text: str, webhook_port: int) -> str:
    """The rendered manifests as the host serves them (the module's docstring says what)."""
    objs = [d for d in yaml.safe_load_all(text) if d]
    hosted = manifests.serve_from_host(
        objs, {f"{autowrap.SERVICE}.{autowrap.NAMESPACE}": webhook_port}
    )
    for obj in hosted:
        if obj["kind"] == "Deployment" and obj["metadata"]["name"] == autowrap.SERVICE:
            obj["spec"]["replicas"] = 0
    return yaml.safe_dump_all(hosted, sort_keys=False)


def helm_binary() -> Path:
    return build.components()["helm"].binary("helm")


class Helm:
    """The pinned helm, as the cluster's administrator, its state kept in the session's
    directory."""

    def __init__(self, cluster: RealCluster, binary: Path | None = None) -> None:
        self.cluster = cluster
        self.binary = binary or helm_binary()
        home = cluster.workdir / "helm"
        self.env = {
            **cluster.supervisor.env,
            "KUBECONFIG": str(cluster.admin_kubeconfig),
            "HELM_CONFIG_HOME": str(home / "config"),
            "HELM_CACHE_HOME": str(home / "cache"),
            "HELM_DATA_HOME": str(home / "data"),
        }

    def run(self, *args: str, timeout: float = TIMEOUT) -> subprocess.CompletedProcess[str]:
        """``helm <args>``; never raises on a non-zero exit."""
        return subprocess.run([str(self.binary), *args], capture_output=True, text=True,
                              env=self.env, cwd=autowrap.REPO, timeout=timeout, check=False)  # fmt: skip

    def post_renderer(self) -> list[str]:
        return [
            "--post-renderer", autowrap.python(),
            "--post-renderer-args=-m", "--post-renderer-args=testbed.real.chart",
            f"--post-renderer-args={self.cluster.webhook_port}",
        ]  # fmt: skip

    def install(self, chart: Path, *values: str) -> subprocess.CompletedProcess[str]:
        return self.run("install", RELEASE, str(chart), "--namespace", autowrap.NAMESPACE,
                        "--create-namespace", *self.post_renderer(), *values)  # fmt: skip

    def upgrade(self, chart: Path, *values: str) -> subprocess.CompletedProcess[str]:
        return self.run("upgrade", RELEASE, str(chart), "--namespace", autowrap.NAMESPACE,
                        *self.post_renderer(), *values)  # fmt: skip

    def uninstall(self) -> subprocess.CompletedProcess[str]:
        return self.run("uninstall", RELEASE, "--namespace", autowrap.NAMESPACE)

    def releases(self) -> list[Obj]:
        done = self.run("list", "--all-namespaces", "--all", "-o", "json")
        if done.returncode != 0:
            raise RuntimeError(f"helm list: {done.stderr}")
        listed: list[Obj] = json.loads(done.stdout or "[]")
        return listed

    def history(self) -> list[Obj]:
        done = self.run("history", RELEASE, "--namespace", autowrap.NAMESPACE, "-o", "json")
        if done.returncode != 0:
            raise RuntimeError(f"helm history: {done.stderr}")
        listed: list[Obj] = json.loads(done.stdout)
        return listed

    def manifest(self) -> list[Obj]:
        """The objects of the release as installed (post-rendered)."""
        done = self.run("get", "manifest", RELEASE, "--namespace", autowrap.NAMESPACE)
        if done.returncode != 0:
            raise RuntimeError(f"helm get manifest: {done.stderr}")
        return [d for d in yaml.safe_load_all(done.stdout) if d]


def autowrap_cli(
    cluster: RealCluster, *args: str, timeout: float = TIMEOUT
) -> subprocess.CompletedProcess[str]:
    """``autowrap <args>`` from the checkout, as the cluster's administrator."""
    argv = [
        autowrap.python(),
        "-m",
        "webhook",
        *args,
        "--kubeconfig",
        str(cluster.admin_kubeconfig),
    ]
    return subprocess.run(argv, capture_output=True, text=True, cwd=autowrap.REPO,
                          env=cluster.supervisor.env, timeout=timeout, check=False)  # fmt: skip


def wait_for(probe: Callable[[], bool], what: str, timeout: float = TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not probe():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout:.0f} s")
        time.sleep(0.5)


def remove(cluster: RealCluster) -> subprocess.CompletedProcess[str]:
    """Take autowrap out: its replicas stopped (deleting the Deployment stops its pods), then
    ``autowrap uninstall``; once it says it is done, the namespace, where it deleted it, gone.
    Returns what ``autowrap uninstall`` printed."""
    stop_replicas(cluster)
    done = autowrap_cli(cluster, "uninstall", "--namespace", autowrap.NAMESPACE)
    if done.returncode == 0:
        path = f"/api/v1/namespaces/{autowrap.NAMESPACE}"
        wait_for(
            lambda: _gone_or_kept(cluster.admin.get(path)),
            f"namespace {autowrap.NAMESPACE} deleted",
        )
    return done


def stop_replicas(cluster: RealCluster) -> None:
    """Every replica stopped: withdrawn from the Service stand-in and the Deployment's count
    first where the Deployment is still there, as the launcher stops them."""
    if not cluster.running_replicas():
        return
    path = f"/apis/apps/v1/namespaces/{autowrap.NAMESPACE}/deployments/{autowrap.SERVICE}"
    if cluster.admin.get(path) is not None:
        cluster.stop_autowrap()
        return
    cluster.proxy.set_backends([])
    for replica in cluster.running_replicas():
        cluster.supervisor.stop(replica.name, timeout=30.0)


def _gone_or_kept(namespace: Obj | None) -> bool:
    return namespace is None or not (namespace.get("metadata") or {}).get("deletionTimestamp")


def drop_kept(cluster: RealCluster) -> None:
    """Delete what ``autowrap uninstall`` left for the AppWrapper controller, so that the next
    install creates it as its own (Helm refuses to take over an object of another owner)."""
    for kind in ("clusterrolebindings", "clusterroles"):
        if cluster.admin.get(f"{RBAC}/{kind}/{KEPT}") is not None:
            cluster.admin.delete(f"{RBAC}/{kind}/{KEPT}")


def refresh_token(cluster: RealCluster) -> None:
    """A token of the ServiceAccount the current install created, where replicas read it."""
    token = cluster.admin.token(autowrap.NAMESPACE, autowrap.SERVICE_ACCOUNT)
    kubeapi.write_kubeconfig(cluster.autowrap_kubeconfig, cluster.server,
                             cluster.workdir / "pki" / "ca.crt", kubeapi.Credentials(token=token))  # fmt: skip


def serve(cluster: RealCluster, objs: Iterable[Obj], replicas: int) -> None:
    """Replicas running the installed Deployment's arguments, ``replicas`` of them."""
    cluster.autowrap_objects = list(objs)
    refresh_token(cluster)
    cluster.start_autowrap(replicas)


def roll(cluster: RealCluster, objs: Iterable[Obj]) -> None:
    """What a rolling update with maxUnavailable 0 does to the replicas: each old one is
    replaced by one running the new objects, the new one ready before the old one stops."""
    old = [r.name for r in cluster.running_replicas()]
    cluster.autowrap_objects = list(objs)
    cluster.refresh_policies()
    for name in old:
        cluster.start_autowrap(len(cluster.running_replicas()) + 1)
        cluster.stop_autowrap(name)


def install_kustomize(cluster: RealCluster, objs: list[Obj], replicas: int) -> None:
    """The launcher's install (deploy/release, served from the host) applied again, into its
    namespace created afresh as the launcher's install created it (a namespace left by another
    install is deleted first)."""
    stop_replicas(cluster)
    deleted = cluster.kubectl("delete", "namespace", autowrap.NAMESPACE, "--ignore-not-found",
                              "--timeout=120s", timeout=150.0)  # fmt: skip
    if deleted.returncode != 0:
        raise RuntimeError(f"namespace {autowrap.NAMESPACE} not deleted:\n{deleted.stderr}")
    manifest = cluster.workdir / "etc" / "autowrap-install.yaml"
    applied = cluster.kubectl("apply", "-f", str(manifest))
    if applied.returncode != 0:
        raise RuntimeError(f"kubectl apply of autowrap's release failed:\n{applied.stderr}")
    serve(cluster, objs, replicas)
    wait_for(lambda: ca_bundles_written(cluster), "caBundle written into both configurations")


def ca_bundles_written(cluster: RealCluster) -> bool:
    """Whether every webhook of autowrap's two configurations has its caBundle (what a
    self-managed replica writes once it has the certificate)."""
    for kind, name in (("mutatingwebhookconfigurations", "autowrap-mutating"),
                       ("validatingwebhookconfigurations", "autowrap-validating")):  # fmt: skip
        found = cluster.admin.get(f"/apis/admissionregistration.k8s.io/v1/{kind}/{name}")
        hooks = (found or {}).get("webhooks") or []
        if not hooks or not all(h.get("clientConfig", {}).get("caBundle") for h in hooks):
            return False
    return True


def main(argv: list[str]) -> int:
    """helm's post-renderer: the manifests on stdin, as the host serves them on stdout."""
    if len(argv) != 1 or not argv[0].isdigit():
        print("usage: python -m testbed.real.chart WEBHOOK_PORT < manifests", file=sys.stderr)
        return 2
    sys.stdout.write(post_render(sys.stdin.read(), int(argv[0])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
