"""A cluster on loopback for end-to-end tests: the real autowrap server, the apiserver
emulator configured from the *rendered* ``deploy/`` webhook configurations, and the fake
cluster, which sends every write of autowrap's (its AppWrapper creates, its components' dry
runs) through the emulator as kube-apiserver would (so autowrap's own webhooks run on what its
wrap creates)."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from testbed import prerequisites
from testbed.apiserver import AdmissionResult, ApiserverEmulator, UserInfo
from testbed.cluster.cluster import FakeCluster
from testbed.jobs import training_job
from testbed.pki import ServingPki
from testbed.policies import in_mode
from webhook import app
from webhook.model import names
from webhook.shell import server

REPO = Path(__file__).resolve().parents[1]
NAMESPACE = "ml"
QUEUE = "team-queue"
ALICE = UserInfo(username="alice", groups=("system:authenticated",))
MALLORY = UserInfo(username="mallory", groups=("system:authenticated",))

Obj = dict[str, Any]
# What an AppWrapper creates: redirect mode only ever dry-runs these.
COMPONENTS = re.compile(r"/namespaces/[^/]+/(jobs|pods|services)$")


@cache
def webhook_configurations() -> tuple[Obj, ...]:
    """The Mutating/ValidatingWebhookConfigurations exactly as `kubectl apply -k` would create."""
    kubectl = prerequisites.kubectl()
    import yaml

    out = subprocess.run(
        [kubectl, "kustomize", str(REPO / "deploy" / "base")],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    return tuple(
        doc for doc in yaml.safe_load_all(out.stdout)
        if doc and doc["kind"] in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
    )  # fmt: skip


def cel_predicates(configurations: tuple[Obj, ...]) -> dict[str, Callable[[Obj], bool]]:
    """Each matchConditions expression, evaluated with cel-python over the request's object."""
    import pytest  # only to skip the test that needs it

    celpy = pytest.importorskip("celpy", reason="cel-python evaluates the matchConditions")
    env = celpy.Environment()
    predicates: dict[str, Callable[[Obj], bool]] = {}
    for configuration in configurations:
        for hook in configuration["webhooks"]:
            for condition in hook.get("matchConditions", []):
                expression = condition["expression"]
                program = env.program(env.compile(expression))

                def predicate(request: Obj, program: Any = program) -> bool:
                    # The variables kube-apiserver binds for matchConditions (object, oldObject,
                    # request); a missing object is null there (e.g. oldObject on CREATE).
                    activation = {
                        "object": celpy.json_to_cel(request.get("object")),
                        "oldObject": celpy.json_to_cel(request.get("oldObject")),
                        "request": celpy.json_to_cel(
                            {k: v for k, v in request.items() if k not in ("object", "oldObject")}
                        ),
                    }
                    return bool(program.evaluate(activation))

                predicates[expression] = predicate
    return predicates


@dataclass
class Cluster:
    emulator: ApiserverEmulator
    kube: FakeCluster
    running: server.Running
    cert_dir: Path
    policy_dir: Path
    pki: ServingPki

    @property
    def state(self) -> server.State:
        return self.running.state

    async def create(
        self, obj: Obj, *, user: UserInfo = ALICE, dry_run: bool = False
    ) -> AdmissionResult:
        return await self.emulator.create(obj, user=user, dry_run=dry_run)

    def appwrappers(self) -> dict[tuple[str, str], Obj]:
        return self.kube.appwrappers()

    async def create_appwrapper_as(self, username: str, obj: Obj) -> Obj:
        """Another user's ``kubectl create`` of an AppWrapper, through the fake API's HTTP."""
        import aiohttp

        namespace = obj["metadata"]["namespace"]
        url = (f"{self.kube.url}/apis/{names.APPWRAPPER_GROUP}/{names.APPWRAPPER_VERSION}"
               f"/namespaces/{namespace}/{names.APPWRAPPER_PLURAL}")  # fmt: skip
        headers = {"Authorization": f"Bearer {self.kube.token}", "Impersonate-User": username,
                   "User-Agent": "kubectl/v1.36.0 (linux/amd64)"}  # fmt: skip
        async with (
            aiohttp.ClientSession() as session,
            session.post(
                url, json=obj, headers=headers, params={"fieldManager": "kubectl-create"}
            ) as response,
        ):
            body: Obj = await response.json()
            assert response.status == 201, body
            return body


async def start_cluster(
    pki: ServingPki,
    kube: FakeCluster,
    kubeconfig: Path,
    tmp_path: Path,
    *,
    namespaces: Mapping[str, Mapping[str, str]] | None = None,
    policies: Path = REPO / "policies",
) -> tuple[Cluster, Callable[[], Any]]:
    cert_dir = tmp_path / "certs"
    cert_dir.mkdir()
    for source in (pki.cert_path, pki.key_path, pki.ca_path):
        shutil.copy(source, cert_dir / source.name)
    # This harness serves redirect mode (SPEC section 6); adopt mode has tests/adopt/harness.py.
    policy_dir = in_mode(policies, tmp_path / "policies", "Redirect")
    options = server.Options(
        host="127.0.0.1", port=0, metrics_port=0, cert_dir=cert_dir, policy_path=policy_dir,
        kubeconfig=str(kubeconfig), reload_interval=0.2, drain_timeout=5.0, controller=False,
        watch_caches=False,
    )  # fmt: skip
    running = await app.start(options)
    configurations = webhook_configurations()
    namespaces = namespaces or {NAMESPACE: {}}
    emulator = ApiserverEmulator(
        "127.0.0.1",
        running.port,
        configurations,
        namespace_labels=namespaces,
        match_conditions=cel_predicates(configurations),
        ca_bundle=pki.ca_bundle,
    )
    for ns, labels in namespaces.items():
        kube.add_namespace(ns, labels)
        kube.add_local_queue(ns, QUEUE)
        kube.allow(ALICE.username, verb="create", group=names.APPWRAPPER_GROUP,
                   resource=names.APPWRAPPER_PLURAL, namespace=ns)  # fmt: skip
    kube.admit_with(emulator)
    cluster = Cluster(emulator, kube, running, cert_dir, policy_dir, pki)
    return cluster, running.drain


# --- what users create ------------------------------------------------------------------------


def vcjob(name: str = "train", *, workers: int = 3, labels: dict[str, str] | None = None) -> Obj:
    """A training Job as a user writes it (``schedulerName`` left to Volcano's defaulting)."""
    return training_job(name, namespace=NAMESPACE, queue=QUEUE, workers=workers, labels=labels,
                        scheduler=False)  # fmt: skip


def pod(name: str = "notebook") -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {names.WRAP_LABEL: "true",
                                                                     names.QUEUE_LABEL: QUEUE}},
        "spec": {"containers": [{"name": "main", "image": "torch:2.4"}]},
    }  # fmt: skip
