"""The whole adopt-mode cluster: user writes go through kube-apiserver's admission (the emulator,
configured with the webhook configurations rendered from deploy/) to the real autowrap server
over TLS; autowrap's controller runs against the fake API over HTTP; simulated Kueue,
AppWrapper controller, Volcano and kubelet do their part."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import shutil
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testbed.apiserver import ApiserverEmulator, UserInfo
from testbed.cluster import owner_references
from testbed.cluster.cluster import AUTOWRAP_TOKEN, FakeCluster
from testbed.cluster.common import ServingTLS, write_kubeconfig
from testbed.cluster.rbac import OWNER_REFERENCES_COMPONENT, Rbac
from testbed.cluster.resources import ALL, APPWRAPPERS, EVENTS, LOCALQUEUES, PODS, VCJOBS
from testbed.jobs import training_job
from testbed.pki import ServingPki
from testbed.policies import in_mode
from testbed.redirect import REPO, cel_predicates, webhook_configurations
from testbed.sim import Simulators, simulated
from tests.deploy.test_manifests import render
from webhook import app
from webhook.model import names
from webhook.shell import server

Obj = dict[str, Any]
NAMESPACE = "ml"
QUEUE = "team-queue"
ALICE = UserInfo(username="alice", groups=("system:authenticated",))
AUTOWRAP = UserInfo(
    username=f"system:serviceaccount:{names.SERVICE_NAMESPACE}:autowrap",
    groups=("system:serviceaccounts", f"system:serviceaccounts:{names.SERVICE_NAMESPACE}",
            "system:authenticated"),
)  # fmt: skip
FLAVORS = {
    "a100": {
        "nodeLabels": {"cloud.example/pool": "a100"},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    }
}


def vcjob(name: str = "train", *, masters: int = 1, workers: int = 3, gpus: int = 8) -> Obj:
    return training_job(name, namespace=NAMESPACE, queue=QUEUE, masters=masters, workers=workers,
                        gpus=gpus, command=["torchrun", "train.py"])  # fmt: skip


def bare_pod(name: str = "notebook") -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE,
                     "labels": {names.WRAP_LABEL: "true", names.QUEUE_LABEL: QUEUE}},
        "spec": {"restartPolicy": "Never", "containers": [
            {"name": "main", "image": "torch:2.4", "resources": {"limits": {"nvidia.com/gpu": 2}}}]},
    }  # fmt: skip


@dataclass
class Cluster:
    api: FakeCluster
    emulator: ApiserverEmulator
    running: server.Running
    sims: Simulators

    @property
    def controller(self) -> Any:
        return self.running.state.controller

    async def settle(self, timeout: float = 20.0) -> None:
        """Until neither the simulators nor autowrap's controller has work left, and the
        controller has seen everything stored (a watch event may still be on its way when the
        simulators fall quiet)."""

        def quiet() -> bool:
            return self.controller is None or (
                self.controller.leading.is_set() and self.controller.idle() and self.caught_up()
            )

        await self.sims.settle(idle=quiet, timeout=timeout, rounds=500)

    async def sees_namespace(self, namespace: str, labels: Mapping[str, str]) -> bool:
        """Whether autowrap's server reads these labels on the namespace, the way admission
        reads them (its watch-backed cache follows the API a moment behind)."""
        client = self.running.state.cluster
        assert client is not None
        found = await client.namespace_labels(namespace, timeout=5.0)
        return labels.items() <= found.items()

    def caught_up(self) -> bool:
        for informer in self.controller.informers:
            res = next(r for r in ALL if (r.group, r.plural) == (informer.kind.group,
                                                               informer.kind.plural))  # fmt: skip
            kept = informer.transform or (lambda obj: obj)
            stored = {
                (o["metadata"].get("namespace", ""), o["metadata"]["name"]):
                o["metadata"]["resourceVersion"]
                for o in self.api.store.list(res, labels=informer.labels)
                if kept(copy.deepcopy(o)) is not None
            }  # fmt: skip
            seen = {
                (o["metadata"].get("namespace", ""), o["metadata"]["name"]):
                o["metadata"]["resourceVersion"]
                for o in informer.items()
            }  # fmt: skip
            if stored != seen:
                return False
        return True

    async def stop_controller(self) -> None:
        """Stop the controller the way a crash does (mid-step, nothing handed over)."""
        task = next(t for t in self.running.tasks if t.get_coro().__qualname__ == "_run_controller")
        self.running.tasks.remove(task)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        self.running.state.controller = None

    async def restart_controller(self) -> None:
        """Stop the controller the way a crash does and start a fresh one, which must finish
        from what is stored."""
        state, options = self.running.state, self.running.options
        await self.stop_controller()
        fresh = asyncio.create_task(app._run_controller(state, options))
        self.running.tasks.append(fresh)
        while state.controller is None or not state.controller.leading.is_set():
            await asyncio.sleep(0.01)

    def get(self, res: Any, name: str, namespace: str = NAMESPACE) -> Obj | None:
        return self.api.store.get(res, namespace, name)

    def job(self, name: str = "train") -> Obj | None:
        return self.get(VCJOBS, name)

    def appwrapper(self, name: str = "train") -> Obj | None:
        return self.get(APPWRAPPERS, name)

    def appwrappers(self) -> list[Obj]:
        return self.api.store.list(APPWRAPPERS, NAMESPACE)

    def pods(self, job: str = "train") -> list[Obj]:
        return sorted(
            (p for p in self.api.store.list(PODS, NAMESPACE)
             if p["metadata"]["name"].startswith(f"{job}-")),
            key=lambda p: p["metadata"]["name"],
        )  # fmt: skip

    def events(self, name: str = "train") -> list[str]:
        return [
            str(e.get("reason"))
            for e in self.api.store.list(EVENTS, NAMESPACE)
            if (e.get("involvedObject") or {}).get("name") == name
        ]


def _policies(tmp_path: Path, extra: str, mode: str) -> Path:
    source = tmp_path / "policies-source"
    source.mkdir()
    for path in sorted((REPO / "policies").iterdir()):
        if path.suffix in (".yaml", ".yml"):
            shutil.copy(path, source / path.name)
    if extra:
        (source / "zz-extra.yaml").write_text(extra)
    return in_mode(source, tmp_path / "policies", mode)


@contextlib.asynccontextmanager
async def running_cluster(
    pki: ServingPki,
    tmp_path: Path,
    *,
    auto_admit: bool = True,
    controller: bool = True,
    kueue: Mapping[str, Any] | None = None,
    pods: bool = True,
    upstream: bool = True,
    extra_policies: str = "",
    namespace_labels: Mapping[str, str] | None = None,
    mode: str = "Adopt",
    owner_references_enforcement: bool = True,
    owner_references_component: bool = True,
    controller_apart: bool = False,
) -> AsyncIterator[Cluster]:
    """``pods=False`` switches Volcano and the kubelet off, ``upstream=False`` every simulator
    (for tests about adoption alone); ``extra_policies`` is a policy file added to the shipped
    ones, ``namespace_labels`` label the user's namespace, ``mode`` is every policy's mode;
    ``owner_references_enforcement=False`` is a cluster without that admission plugin (the
    upstream default), autowrap then holding deploy/base's grants alone;
    ``owner_references_component=False`` leaves out the component docs/install.md asks for
    where the plugin is on; ``controller_apart=True`` runs the controller in a process of its
    own, as ``autowrap serve`` does."""
    configurations = webhook_configurations()
    emulator = ApiserverEmulator("127.0.0.1", 0, configurations,
                                 match_conditions=cel_predicates(configurations),
                                 ca_bundle=pki.ca_bundle,
                                 admission_policies=render("base"))  # fmt: skip
    # autowrap runs as its own ServiceAccount, so the cluster's policies on its writes apply,
    # and reaches the API over HTTPS, checking its certificate as against kube-apiserver.
    # autowrap's requests are authorized by the RBAC deploy/base grants its ServiceAccount.
    api = FakeCluster(emulator=emulator, tls=ServingTLS.issue())
    api.authorize_autowrap(AUTOWRAP_TOKEN, AUTOWRAP)
    # As OpenShift runs it (adopt-mode.md K4): what an ownerReference costs its writer, and the
    # component docs/install.md adds there for it.
    if owner_references_enforcement:
        api.add_validating_webhook(owner_references.NAME, owner_references.enforcement(api))
        if owner_references_component:
            api.enforce_rbac(Rbac.from_manifests(OWNER_REFERENCES_COMPONENT), AUTOWRAP.username)
    await api.start()
    api.add_namespace(NAMESPACE, labels=dict(namespace_labels or {}))
    api.add_namespace(names.SERVICE_NAMESPACE)
    api.store.create(LOCALQUEUES, {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "LocalQueue",
                                   "metadata": {"name": QUEUE, "namespace": NAMESPACE},
                                   "spec": {"clusterQueue": "cq"}})  # fmt: skip
    cert_dir = tmp_path / "certs"
    cert_dir.mkdir()
    for source in (pki.cert_path, pki.key_path, pki.ca_path):
        shutil.copy(source, cert_dir / source.name)
    options = server.Options(
        host="127.0.0.1", port=0, metrics_port=0, cert_dir=cert_dir,
        policy_path=_policies(tmp_path, extra_policies, mode),
        kubeconfig=str(write_kubeconfig(tmp_path / "kubeconfig", api.url, AUTOWRAP_TOKEN, tls=api.tls)),
        reload_interval=60.0, drain_timeout=5.0, controller=controller,
        controller_apart=controller_apart,
        controller_namespace=names.SERVICE_NAMESPACE, controller_identity="autowrap-0",
    )  # fmt: skip
    running = await app.start(options)
    emulator.port = running.port
    options_kueue = {"flavors": FLAVORS, "auto_admit": auto_admit, **(kueue or {})}
    try:
        nodes = {"gpu-node": {"cloud.example/pool": "a100"}}
        async with simulated(
            api, kueue=options_kueue if upstream else False, appwrapper=upstream,
            volcano=pods and upstream, kubelet={"nodes": nodes} if pods and upstream else False,
        ) as sims:  # fmt: skip
            yield Cluster(api, emulator, running, sims)
    finally:
        await running.drain()
        await api.stop()
