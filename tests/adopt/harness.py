"""A fake cluster with autowrap's controller running against it over HTTP (kubernetes.aio).

Objects are stored as adopt-mode admission stores them (``adoption.prepare`` of the engine's
outcome), so these tests judge the controller alone; ``tests/adopt/test_e2e.py`` sends the
user's create through the real webhooks as well.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from testbed.cluster.cluster import FakeCluster
from testbed.cluster.resources import (
    ALL,
    APPWRAPPERS,
    EVENTS,
    LOCALQUEUES,
    PODS,
    VCJOBS,
    WORKLOADS,
    Resource,
)
from testbed.jobs import training_job
from testbed.sim.kueue import admitted_workload
from tests.builders import context, policy_set
from tests.support.waiting import eventually as eventually  # the adopt tests import it here
from webhook.controller import Controller, Settings
from webhook.core import adoption, engine
from webhook.core.policy import PolicySet
from webhook.model import names
from webhook.shell.kube import KubeClient

Obj = dict[str, Any]
NAMESPACE = "ml"
QUEUE = "team-queue"
MERGE = "application/merge-patch+json"


def vcjob(name: str = "train", *, workers: int = 3, image: str = "torch:2.4") -> Obj:
    return training_job(name, namespace=NAMESPACE, queue=QUEUE, workers=workers, image=image)


def prepared(obj: Obj, *, user: str = "alice") -> Obj:
    """The object as adopt-mode admission stores it."""
    outcome = engine.admit(copy.deepcopy(obj), context(ns=NAMESPACE, user=user))
    assert outcome.action is engine.Action.WRAP, outcome.reason
    return adoption.prepare(obj, outcome, user=user)


@dataclass
class Adopting:
    """The fake cluster and the controllers running against it."""

    api: FakeCluster
    kubeconfig: Path
    controllers: list[Controller] = field(default_factory=list)
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    clients: list[KubeClient] = field(default_factory=list)
    policies: PolicySet = field(default_factory=policy_set)

    async def start_controller(
        self,
        identity: str = "replica-a",
        *,
        lease_seconds: int = 3,
        now: Callable[[], float] = time.time,
    ) -> Controller:
        """``now``: the wall clock the controller reads objects' ages against."""
        client = await KubeClient.connect(str(self.kubeconfig))
        settings = Settings(
            namespace="autowrap-system", identity=identity,
            lease_seconds=lease_seconds, renew_seconds=2, retry_seconds=1,
        )  # fmt: skip
        controller = Controller(client, lambda: self.policies, settings, now=now)
        self.controllers.append(controller)
        self.clients.append(client)
        self.tasks.append(asyncio.create_task(controller.run()))
        return controller

    async def stop_controller(self, controller: Controller) -> None:
        index = self.controllers.index(controller)
        task = self.tasks.pop(index)
        self.controllers.pop(index)
        client = self.clients.pop(index)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await client.close()

    async def stop(self) -> None:
        for controller in list(self.controllers):
            await self.stop_controller(controller)

    # --- what the user and the upstream controllers do ----------------------------------------

    def store_job(self, obj: Obj) -> Obj:
        return self.api.store.create(VCJOBS, prepared(obj))

    def job(self, name: str = "train") -> Obj | None:
        return self.api.store.get(VCJOBS, NAMESPACE, name)

    def appwrapper(self, name: str = "train") -> Obj | None:
        return self.api.store.get(APPWRAPPERS, NAMESPACE, name)

    def set_phase(self, phase: str, name: str = "train", **extra: Any) -> Obj:
        """What the AppWrapper controller writes on the status subresource."""
        return self.api.store.patch(APPWRAPPERS, NAMESPACE, name,
                                    {"status": {"phase": phase, **extra}}, MERGE,
                                    subresource="status")  # fmt: skip

    def admit(self, name: str = "train", infos: list[Obj] | None = None) -> Obj:
        """What Kueue's RunWithPodSetsInfo writes: podSetInfos and suspend false, one update
        (stored as no suspend at all: omitempty)."""
        aw = self.appwrapper(name)
        assert aw is not None
        count = len(aw["spec"]["components"][0].get("podSets") or [{}])
        infos = infos or [
            {"labels": {"kueue.x-k8s.io/podset": f"{name}-{i}"},
             "nodeSelector": {"pool": "a100"},
             "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]}
            for i in range(count)
        ]  # fmt: skip
        self.admit_workload(name)
        components = copy.deepcopy(aw["spec"]["components"])
        components[0]["podSetInfos"] = infos
        return self.api.store.patch(APPWRAPPERS, NAMESPACE, name,
                                    {"spec": {"suspend": None, "components": components}}, MERGE)  # fmt: skip

    def admit_workload(self, name: str = "train") -> Obj:
        """What Kueue's scheduler writes first: the AppWrapper's Workload, admitted."""
        aw = self.appwrapper(name)
        assert aw is not None
        workload = admitted_workload(aw, QUEUE)
        status = workload.pop("status")
        stored = self.api.store.create(WORKLOADS, workload)
        return self.api.store.update(WORKLOADS, {**stored, "status": status}, subresource="status")

    def volcano_pods(self, job: Obj) -> list[Obj]:
        """The pods Volcano creates from the stored task templates (gates included)."""
        return [
            self.volcano_pod(job, task["name"], index)
            for task in job["spec"]["tasks"]
            for index in range(task["replicas"])
        ]

    def volcano_pod(self, job: Obj, task_name: str, index: int) -> Obj:
        """One pod as Volcano's createJobPod makes it: the task template copied whole, named
        ``{job}-{task}-{index}``, with the job and task annotations and labels and a controller
        reference (job_controller_util.go, volcano.md section 3)."""
        task = next(t for t in job["spec"]["tasks"] if t["name"] == task_name)
        template = copy.deepcopy(task["template"])
        metadata = template.get("metadata", {})
        metadata["name"] = f"{job['metadata']['name']}-{task_name}-{index}"
        metadata["namespace"] = NAMESPACE
        written = {names.VOLCANO_TASK_SPEC: task_name, names.VOLCANO_TASK_INDEX: str(index),
                   names.VOLCANO_JOB_NAME: job["metadata"]["name"]}  # fmt: skip
        metadata.setdefault("annotations", {}).update(written)
        metadata.setdefault("labels", {}).update(written)
        if job["spec"].get("priorityClassName") and not template["spec"].get("priorityClassName"):
            template["spec"]["priorityClassName"] = job["spec"]["priorityClassName"]
        metadata["ownerReferences"] = [{"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
                                        "name": job["metadata"]["name"],
                                        "uid": job["metadata"]["uid"], "controller": True}]  # fmt: skip
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": template["spec"]}
        return self.api.store.create(PODS, pod)

    def pods(self) -> list[Obj]:
        return self.api.store.list(PODS, NAMESPACE)

    def events(self, reason: str) -> list[Obj]:
        return [e for e in self.api.store.list(EVENTS, NAMESPACE) if e.get("reason") == reason]


@contextlib.asynccontextmanager
async def adopting(tmp_path: Path, *, without: Sequence[Resource] = ()) -> AsyncIterator[Adopting]:
    """``without``: resources the cluster does not serve (a CRD not installed)."""
    api = FakeCluster(resources=[r for r in ALL if r not in without])
    await api.start()
    api.add_namespace(NAMESPACE)
    api.add_namespace("autowrap-system")
    api.store.create(LOCALQUEUES, {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "LocalQueue",
                                   "metadata": {"name": QUEUE, "namespace": NAMESPACE},
                                   "spec": {"clusterQueue": "cq"}})  # fmt: skip
    # autowrap runs as its ServiceAccount, under the RBAC deploy/base grants it.
    kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig", token=api.authorize_autowrap())
    harness = Adopting(api, kubeconfig)
    try:
        yield harness
    finally:
        await harness.stop()
        await api.stop()
