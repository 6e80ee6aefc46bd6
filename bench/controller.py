"""``python -m bench.controller [--jobs 500] [--rounds 3] [--smoke]``: the adopt-mode controller
against a fake cluster.

Each round starts a fake Kubernetes API in this process (``testbed.cluster``: storage with
kube-apiserver's write and watch semantics, served over HTTP) and ``autowrap serve`` as its own
process with a kubeconfig for it, so the controller runs as deployed: inside the server, on
``kubernetes.aio``, through its Lease, watches and work queue. Then, timed from this process
with the store's write hook (the moment the fake API commits each write):

1. *adopt*: ``--jobs`` Volcano Jobs created at once, as adopt-mode admission stores them
   (``adoption.prepare`` of the engine's outcome); done when every Job carries
   ``autowrap.io/adoption: adopted``. Jobs adopted per second, create-to-AppWrapper latency;
2. *in flight*: Volcano's pods for every Job (gated, from the stored task templates); the
   server's RSS with every Job queued and every pod waiting;
3. *release*: every AppWrapper admitted at once, as Kueue does (``spec.suspend: false`` and
   ``podSetInfos`` in one update); done when no pod carries the gate. Pods released per second;
4. *paced*: Jobs created one by one at a steady rate below capacity: the create-to-AppWrapper
   latency a user sees when the controller is not catching up with a burst.

Every phase waits until the controller is quiet (no write for ``QUIET`` seconds) before the
next, so the CPU figures include its follow-up writes (lifting Kueue's hold, Events, status).
Correctness is checked at the end of each round: every Job adopted and owned by its AppWrapper
(the right uid), exactly one AppWrapper created per Job, every pod released with Kueue's
placement, and no pod released before its AppWrapper was admitted.

This script imports the fake cluster from ``testbed/`` and so runs from the repository
root (``python -m bench.controller``); ``python -m bench`` never imports it.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import copy
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from bench import load, payloads, policies
from testbed.cluster.cluster import FakeCluster
from testbed.cluster.resources import (
    APPWRAPPERS,
    CLUSTERQUEUES,
    LEASES,
    LOCALQUEUES,
    PODS,
    RESOURCEFLAVORS,
    VCJOBS,
    WORKLOADS,
    Resource,
)
from testbed.cluster.store import Store
from testbed.sim.kueue import admitted_workload
from webhook.core import adoption
from webhook.model import names
from webhook.shell import policyfiles

Obj = dict[str, Any]
NAMESPACE = policies.ADOPT_NAMESPACE
MERGE = "application/merge-patch+json"
# Kueue's placement for every podSet (what the release applies to each pod).
POOL = {"pool": "a100"}
TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
# The controller is quiet once nothing but its Lease was written for this long.
QUIET = 0.5
RESULTS = Path(__file__).resolve().parent / "results"

TARGET_ADOPT_PER_S = 50.0
TARGET_RELEASE_PER_S = 500.0
TARGET_RSS_MIB = 200.0
TARGET_JOBS = 500


@dataclass(frozen=True)
class Mode:
    name: str
    jobs: int
    rounds: int
    paced_jobs: int
    paced_per_s: float
    warm_up: int
    # The fake store as the tests run it (CRD schemas checked, the garbage collector's scan
    # on every write), or ``FastStore``.
    faithful_store: bool


MODES = {
    "full": Mode("full", TARGET_JOBS, 3, 100, 20.0, 3, faithful_store=False),
    "smoke": Mode("smoke", 10, 1, 3, 10.0, 1, faithful_store=True),
}


class FastStore(Store):
    """The fake store without two costs of the fake itself, for timing the controller.

    The store's garbage collector walks every stored object on every write, looking up each
    ownerReference (client-side, kube-apiserver does nothing of the kind: its GC is a separate
    controller fed by watches); with 2 500 objects one write then costs some 50 ms of this
    process, and the fake API, not the controller, sets the pace. Nothing is deleted in this
    bench, so the collector has nothing to do; the round's checks verify every ownerReference
    the controller writes (the owner exists, with that uid). The CRD schema check (the
    ``jsonschema`` package walking the Volcano Job and AppWrapper CRDs) is off too; the smoke
    size runs the faithful store, schemas and collector included, for correctness.
    """

    def __init__(self) -> None:
        super().__init__(history_limit=200_000, validate_schemas=False)

    def _collect_garbage(self) -> None:
        return None


# --- what the fake API sees ----------------------------------------------------------------------


@dataclass
class Tracker:
    """Times of the writes that matter, taken when the fake API commits them."""

    clock: Callable[[], float] = time.perf_counter
    created: dict[str, float] = field(default_factory=dict)
    appwrapper_created: dict[str, float] = field(default_factory=dict)
    appwrapper_creates: collections.Counter[str] = field(default_factory=collections.Counter)
    admitted: dict[str, float] = field(default_factory=dict)
    adopted: dict[str, float] = field(default_factory=dict)
    released: dict[str, float] = field(default_factory=dict)
    # Pods ungated before their AppWrapper was admitted (must stay empty).
    early: list[str] = field(default_factory=list)
    writes: collections.Counter[str] = field(default_factory=collections.Counter)
    last_write: float = 0.0

    def __call__(self, kind: str, res: Resource, obj: Obj, old: Obj | None) -> None:
        now = self.clock()
        if res != LEASES:
            self.last_write = now
            self.writes[f"{res.plural} {kind}"] += 1
        metadata = obj.get("metadata") or {}
        name = str(metadata.get("name") or "")
        if res == VCJOBS:
            if kind == "ADDED":
                self.created[name] = now
            labels = metadata.get("labels") or {}
            adopted = labels.get(names.ADOPTION_LABEL) == names.ADOPTION_ADOPTED
            if adopted and name not in self.adopted:
                self.adopted[name] = now
        elif res == APPWRAPPERS:
            job = str((metadata.get("annotations") or {}).get(names.ORIGIN_NAME_ANNOTATION, ""))
            if kind == "ADDED":
                self.appwrapper_creates[job] += 1
                self.appwrapper_created.setdefault(job, now)
            if adoption.is_admitted(obj) and job not in self.admitted:
                self.admitted[job] = now
        elif res == PODS and kind == "MODIFIED" and old is not None and _ungated(old, obj):
            self.released[name] = now
            job = str((metadata.get("labels") or {}).get(names.APPWRAPPER_LABEL, ""))
            if job not in self.admitted:
                self.early.append(name)


def _ungated(old: Obj, new: Obj) -> bool:
    return adoption.is_gated(old) and not adoption.is_gated(new)


async def _until(what: str, done: Callable[[], bool], timeout: float, server: load.Process) -> None:
    deadline = time.perf_counter() + timeout
    while not done():
        if not server.alive():
            raise RuntimeError(f"autowrap exited while waiting for {what}:\n{server.log_tail()}")
        if time.perf_counter() > deadline:
            raise TimeoutError(f"{what}: not reached within {timeout:.0f} s")
        await asyncio.sleep(0.01)


async def _quiet(tracker: Tracker, server: load.Process, timeout: float) -> float:
    """Wait until nothing but the Lease has been written for ``QUIET`` seconds; returns when
    the last write was."""
    await _until(
        "the controller to go quiet",
        lambda: time.perf_counter() - tracker.last_write >= QUIET,
        timeout,
        server,
    )
    return tracker.last_write


# --- what the user, Volcano and Kueue do ---------------------------------------------------------


def _volcano_pods(job: Obj) -> list[Obj]:
    """The pods Volcano's createJobPod makes from the stored Job: each task template copied
    whole (gate, AppWrapper label and podSet annotation included), named
    ``{job}-{task}-{index}``, with the job and task annotations and a controller reference
    (job_controller_util.go, volcano.md section 3)."""
    job_name = job["metadata"]["name"]
    found = []
    for task in job["spec"]["tasks"]:
        for index in range(task["replicas"]):
            template = copy.deepcopy(task["template"])
            metadata = template.get("metadata") or {}
            metadata["name"] = f"{job_name}-{task['name']}-{index}"
            metadata["namespace"] = NAMESPACE
            annotations = metadata.setdefault("annotations", {})
            annotations[names.VOLCANO_TASK_SPEC] = task["name"]
            annotations[names.VOLCANO_TASK_INDEX] = str(index)
            annotations[names.VOLCANO_JOB_NAME] = job_name
            metadata.setdefault("labels", {})[names.VOLCANO_JOB_NAME] = job_name
            metadata["ownerReferences"] = [{
                "apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "name": job_name,
                "uid": job["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True,
            }]  # fmt: skip
            found.append({"apiVersion": "v1", "kind": "Pod", "metadata": metadata,
                          "spec": template["spec"]})  # fmt: skip
    return found


def _admit(store: Store, appwrapper: Obj) -> None:
    """What Kueue writes: its Workload admitted, then (RunWithPodSetsInfo) podSetInfos and
    ``suspend: false`` in one update."""
    components = copy.deepcopy(appwrapper["spec"]["components"])
    count = len(components[0].get("podSets") or [{}])
    name = appwrapper["metadata"]["name"]
    components[0]["podSetInfos"] = [
        {"labels": {"kueue.x-k8s.io/podset": f"{name}-{i}"}, "nodeSelector": dict(POOL),
         "tolerations": [dict(TOLERATION)]}
        for i in range(count)
    ]  # fmt: skip
    workload = admitted_workload(appwrapper, payloads.QUEUE, "cluster-queue")
    status = workload.pop("status")
    stored = store.create(WORKLOADS, workload)
    store.update(WORKLOADS, {**stored, "status": status}, subresource="status")
    body = {"spec": {"suspend": None, "components": components}}
    store.patch(APPWRAPPERS, NAMESPACE, name, body, MERGE)


def _cluster(faithful: bool) -> FakeCluster:
    """A fake cluster with the namespace, its LocalQueue and Kueue's objects behind it."""
    store = Store(history_limit=200_000) if faithful else FastStore()
    cluster = FakeCluster(store=store)
    cluster.add_namespace(NAMESPACE)
    cluster.add_namespace(names.SERVICE_NAMESPACE)
    kueue = "kueue.x-k8s.io/v1beta1"
    store.create(RESOURCEFLAVORS, {"apiVersion": kueue, "kind": "ResourceFlavor",
                                   "metadata": {"name": "default-flavor"},
                                   "spec": {"nodeLabels": dict(POOL)}})  # fmt: skip
    store.create(CLUSTERQUEUES, {"apiVersion": kueue, "kind": "ClusterQueue",
                                 "metadata": {"name": "cluster-queue"},
                                 "spec": {"namespaceSelector": {}, "resourceGroups": [{
                                     "coveredResources": ["nvidia.com/gpu"],
                                     "flavors": [{"name": "default-flavor", "resources": [
                                         {"name": "nvidia.com/gpu", "nominalQuota": 4096}]}]}]}})  # fmt: skip
    store.create(LOCALQUEUES, {"apiVersion": kueue, "kind": "LocalQueue",
                               "metadata": {"name": payloads.QUEUE, "namespace": NAMESPACE},
                               "spec": {"clusterQueue": "cluster-queue"}})  # fmt: skip
    return cluster


# --- one round -----------------------------------------------------------------------------------


def _percentile_ms(values: list[float], q: float) -> float | None:
    return round(load.percentile(sorted(values), q) * 1000, 1) if values else None


def _rate(count: int, seconds: float) -> float | None:
    return round(count / seconds, 1) if seconds > 0 else None


async def _metrics(port: int) -> dict[str, float]:
    """The controller's own counters from the server's /metrics (label-less samples)."""
    url = f"http://{load.HOST}:{port}{names.METRICS_PATH}"
    async with aiohttp.ClientSession() as session, session.get(url) as resp:
        text = await resp.text()
    found: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("autowrap_controller_") and "{" not in line:
            metric, _, value = line.partition(" ")
            with contextlib.suppress(ValueError):
                found[metric] = float(value)
    return found


class Sampler:
    """Peak VmRSS of the server over the round, sampled every 20 ms."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak = 0.0
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._sample())

    async def _sample(self) -> None:
        while True:
            self.now()
            await asyncio.sleep(0.02)

    def now(self) -> float:
        value = load.rss_mib(self.pid) or 0.0
        self.peak = max(self.peak, value)
        return value

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()


@dataclass
class Phase:
    """Server and fake-API CPU over a phase, from its start until the controller is quiet."""

    server_pid: int
    started: float = 0.0
    server_cpu: float = 0.0
    api_cpu: float = 0.0

    def __enter__(self) -> Phase:
        self.started = time.perf_counter()
        self.server_cpu = load.cpu_seconds(self.server_pid) or 0.0
        self.api_cpu = time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server_cpu = (load.cpu_seconds(self.server_pid) or 0.0) - self.server_cpu
        self.api_cpu = time.process_time() - self.api_cpu

    def figures(self, quiet_at: float, per: int) -> dict[str, Any]:
        wall = quiet_at - self.started
        return {
            "seconds_to_quiet": round(wall, 3),
            "server_cpu_s": round(self.server_cpu, 3),
            "server_cpu_ms_per_item": round(self.server_cpu * 1000 / per, 3) if per else None,
            # Share of one core: near 1.0 the server is the bottleneck, well below it the
            # fake API (this process, sharing the machine) is.
            "server_core_share": round(self.server_cpu / wall, 2) if wall > 0 else None,
            "fake_api_cpu_s": round(self.api_cpu, 3),
        }


async def one_round(mode: Mode, jobs: int, work: Path, label: str) -> dict[str, Any]:
    py = load.python()
    cert_dir = work / "certs"
    subprocess.run([py, "-m", "webhook", "certs", "--out", str(cert_dir)], cwd=load.REPO,
                   check=True, capture_output=True)  # fmt: skip
    tls = load.client_tls(cert_dir / "ca.crt")
    policy_dir = policies.write(work / "policies")
    policy_set = policyfiles.load(policy_dir)
    warm = payloads.adopted_jobs(f"warm-{label}", mode.warm_up, policy_set)
    burst = payloads.adopted_jobs(f"job-{label}", jobs, policy_set)
    paced = payloads.adopted_jobs(f"paced-{label}", mode.paced_jobs, policy_set)
    total = len(warm) + len(burst) + len(paced)

    cluster = _cluster(mode.faithful_store)
    await cluster.start()
    store = cluster.store
    tracker = Tracker()
    store.on_write(tracker)
    # autowrap runs as its ServiceAccount, under the RBAC deploy/base grants it.
    kubeconfig = cluster.write_kubeconfig(work / "kubeconfig", namespace=names.SERVICE_NAMESPACE,
                                          token=cluster.authorize_autowrap())  # fmt: skip
    server = load.Process("autowrap", [], load.free_port(), work / "autowrap.log")
    metrics_port = load.free_port()
    server.argv = [
        py, "-m", "webhook", "serve", "--host", load.HOST, "--port", str(server.port),
        "--metrics-port", str(metrics_port), "--cert-dir", str(cert_dir),
        "--policy", str(policy_dir), "--kubeconfig", str(kubeconfig),
    ]  # fmt: skip
    timeout = 60.0 + total * 0.5
    result: dict[str, Any] = {"jobs": jobs, "pods": 0}
    try:
        server.start()
        await load.wait_ready(server, f"https://{load.HOST}:{server.port}/readyz", tls)
        sampler = Sampler(server.pid)
        sampler.start()
        result["idle_rss_mib"] = round(sampler.now(), 1)

        def holder() -> str:
            lease = store.get(LEASES, names.SERVICE_NAMESPACE, names.CONTROLLER_LEASE) or {}
            return str((lease.get("spec") or {}).get("holderIdentity") or "")

        await _until("the controller to hold its Lease", lambda: bool(holder()), timeout, server)

        # Warm-up: one whole cycle (adopt, pods, admit, release) for a few Jobs.
        for job in warm:
            store.create(VCJOBS, job)
        await _until("warm-up adopted", lambda: len(tracker.adopted) >= len(warm), timeout, server)
        warm_pods = 0
        for job in warm:
            stored = store.get(VCJOBS, NAMESPACE, job["metadata"]["name"])
            assert stored is not None
            for pod in _volcano_pods(stored):
                store.create(PODS, pod)
                warm_pods += 1
            aw = store.get(APPWRAPPERS, NAMESPACE, job["metadata"]["name"])
            assert aw is not None
            _admit(store, aw)
        await _until("warm-up released", lambda: len(tracker.released) >= warm_pods, timeout,
                     server)  # fmt: skip
        await _quiet(tracker, server, timeout)

        # 1. adopt: every Job created at once.
        burst_names = [j["metadata"]["name"] for j in burst]
        with Phase(server.pid) as adopt:
            for job in burst:
                store.create(VCJOBS, job)
            created_all = time.perf_counter()
            await _until("every Job adopted",
                         lambda: all(n in tracker.adopted for n in burst_names), timeout, server)  # fmt: skip
            quiet_at = await _quiet(tracker, server, timeout)
        first = min(tracker.created[n] for n in burst_names)
        last = max(tracker.adopted[n] for n in burst_names)
        latencies = [tracker.appwrapper_created[n] - tracker.created[n] for n in burst_names]
        result["adopt"] = {
            "create_seconds": round(created_all - first, 3),
            "seconds": round(last - first, 3),
            "per_s": _rate(jobs, last - first),
            "create_to_appwrapper_p50_ms": _percentile_ms(latencies, 50),
            "create_to_appwrapper_p99_ms": _percentile_ms(latencies, 99),
            **adopt.figures(quiet_at, jobs),
        }

        # 2. in flight: Volcano's pods for every Job, all gated.
        pods: list[Obj] = []
        for name in burst_names:
            stored = store.get(VCJOBS, NAMESPACE, name)
            assert stored is not None
            pods += _volcano_pods(stored)
        with Phase(server.pid) as in_flight:
            for pod in pods:
                store.create(PODS, pod)
            quiet_at = await _quiet(tracker, server, timeout)
        result["pods"] = len(pods)
        result["in_flight"] = {
            "rss_mib": round(sampler.now(), 1),
            "gated_pods": sum(1 for p in store.list(PODS, NAMESPACE) if adoption.is_gated(p)),
            **in_flight.figures(quiet_at, len(pods)),
        }

        # 3. release: every AppWrapper admitted at once.
        pod_names = [p["metadata"]["name"] for p in pods]
        appwrappers = [store.get(APPWRAPPERS, NAMESPACE, n) for n in burst_names]
        with Phase(server.pid) as release:
            for aw in appwrappers:
                assert aw is not None
                _admit(store, aw)
            admitted_all = time.perf_counter()
            await _until("every pod released",
                         lambda: all(n in tracker.released for n in pod_names), timeout, server)  # fmt: skip
            quiet_at = await _quiet(tracker, server, timeout)
        first = min(tracker.admitted[n] for n in burst_names)
        last = max(tracker.released[n] for n in pod_names)
        waits = [
            tracker.released[p["metadata"]["name"]]
            - tracker.admitted[p["metadata"]["labels"][names.APPWRAPPER_LABEL]]
            for p in pods
        ]
        result["release"] = {
            "admit_seconds": round(admitted_all - first, 3),
            "seconds": round(last - first, 3),
            "per_s": _rate(len(pods), last - first),
            "admitted_to_released_p50_ms": _percentile_ms(waits, 50),
            "admitted_to_released_p99_ms": _percentile_ms(waits, 99),
            **release.figures(quiet_at, len(pods)),
        }

        # 4. paced: one Job at a time, below capacity.
        paced_names = [j["metadata"]["name"] for j in paced]
        interval = 1 / mode.paced_per_s
        started = time.perf_counter()
        for i, job in enumerate(paced):
            await asyncio.sleep(max(0.0, started + i * interval - time.perf_counter()))
            store.create(VCJOBS, job)
        await _until("every paced Job adopted",
                     lambda: all(n in tracker.adopted for n in paced_names), timeout, server)  # fmt: skip
        await _quiet(tracker, server, timeout)
        latencies = [tracker.appwrapper_created[n] - tracker.created[n] for n in paced_names]
        result["paced"] = {
            "jobs": len(paced),
            "per_s": mode.paced_per_s,
            "create_to_appwrapper_p50_ms": _percentile_ms(latencies, 50),
            "create_to_appwrapper_p99_ms": _percentile_ms(latencies, 99),
        }
        result["peak_rss_mib"] = round(sampler.peak, 1)
        result["controller_metrics"] = await _metrics(metrics_port)
        result["checks"] = _checks(store, tracker, total)
        result["writes"] = dict(sorted(tracker.writes.items()))
        sampler.stop()
    except (RuntimeError, TimeoutError) as exc:
        result["failure"] = str(exc)
        result["progress"] = {
            "created": len(tracker.created), "appwrappers": len(tracker.appwrapper_created),
            "adopted": len(tracker.adopted), "released": len(tracker.released),
        }  # fmt: skip
        result["log_tail"] = server.log_tail(40)
    finally:
        result["server_exit_code"] = server.stop()
        await cluster.stop()
    return result


def _checks(store: Store, tracker: Tracker, total: int) -> dict[str, Any]:
    """What must hold after a round, whatever the timings: every Job adopted and owned by its
    own AppWrapper, one AppWrapper created per Job, every pod released with Kueue's placement,
    none before its AppWrapper was admitted."""
    jobs = store.list(VCJOBS, NAMESPACE)
    appwrappers = {a["metadata"]["name"]: a for a in store.list(APPWRAPPERS, NAMESPACE)}
    not_adopted, not_owned = [], []
    for job in jobs:
        name = job["metadata"]["name"]
        if (job["metadata"].get("labels") or {}).get(names.ADOPTION_LABEL) != "adopted":
            not_adopted.append(name)
        aw = appwrappers.get(name)
        owners = job["metadata"].get("ownerReferences") or []
        if aw is None or owners != [adoption.owner_reference(aw)]:
            not_owned.append(name)
    pods = store.list(PODS, NAMESPACE)
    gated = [p["metadata"]["name"] for p in pods if adoption.is_gated(p)]
    misplaced = [
        p["metadata"]["name"]
        for p in pods
        if (p["spec"].get("nodeSelector") or {}).get("pool") != POOL["pool"]
        or TOLERATION not in (p["spec"].get("tolerations") or [])
        or "kueue.x-k8s.io/podset" not in (p["metadata"].get("labels") or {})
    ]
    duplicates = {job: n for job, n in tracker.appwrapper_creates.items() if n > 1}
    checks: dict[str, Any] = {
        "jobs": len(jobs),
        "appwrappers": len(appwrappers),
        "appwrapper_creates": sum(tracker.appwrapper_creates.values()),
        "duplicate_creates": duplicates,
        "not_adopted": not_adopted[:10],
        "not_owned": not_owned[:10],
        "pods": len(pods),
        "still_gated": gated[:10],
        "misplaced": misplaced[:10],
        "released_before_admission": tracker.early[:10],
    }
    checks["ok"] = (
        len(jobs) == total and len(appwrappers) == total
        and checks["appwrapper_creates"] == total and not duplicates and not not_adopted
        and not not_owned and not gated and not misplaced and not tracker.early
    )  # fmt: skip
    return checks


# --- the run -------------------------------------------------------------------------------------


def _median(values: list[float]) -> float | None:
    ranked = sorted(values)
    return ranked[(len(ranked) - 1) // 2] if ranked else None


def _over_rounds(rounds: list[dict[str, Any]], phase: str, key: str) -> dict[str, Any]:
    values = [r[phase][key] for r in rounds if phase in r and r[phase].get(key) is not None]
    return {"median": _median(values), "min": min(values, default=None),
            "max": max(values, default=None), "rounds": values}  # fmt: skip


def summary(rounds: list[dict[str, Any]], jobs: int) -> dict[str, Any]:
    """Medians over the rounds, and the targets (judged only at the target's size)."""
    ok = all(r.get("checks", {}).get("ok") for r in rounds) and not any(
        "failure" in r for r in rounds
    )
    figures = {
        "adopted_per_s": _over_rounds(rounds, "adopt", "per_s"),
        "released_per_s": _over_rounds(rounds, "release", "per_s"),
        "create_to_appwrapper_p50_ms": _over_rounds(rounds, "adopt", "create_to_appwrapper_p50_ms"),
        "create_to_appwrapper_p99_ms": _over_rounds(rounds, "adopt", "create_to_appwrapper_p99_ms"),
        "paced_create_to_appwrapper_p50_ms": _over_rounds(
            rounds, "paced", "create_to_appwrapper_p50_ms"
        ),
        "paced_create_to_appwrapper_p99_ms": _over_rounds(
            rounds, "paced", "create_to_appwrapper_p99_ms"
        ),
        "server_cpu_ms_per_adoption": _over_rounds(rounds, "adopt", "server_cpu_ms_per_item"),
        "server_cpu_ms_per_release": _over_rounds(rounds, "release", "server_cpu_ms_per_item"),
        "in_flight_rss_mib": _over_rounds(rounds, "in_flight", "rss_mib"),
    }
    peak = max((r.get("peak_rss_mib") or 0.0 for r in rounds), default=0.0)
    targets: dict[str, Any] = {"correct": {"met": ok}}
    if jobs >= TARGET_JOBS:
        adopted = figures["adopted_per_s"]["median"]
        released = figures["released_per_s"]["median"]
        targets["adopted-per-s"] = {"met": (adopted or 0) >= TARGET_ADOPT_PER_S,
                                    "median": adopted, "wanted": f">= {TARGET_ADOPT_PER_S:g}"}  # fmt: skip
        targets["released-per-s"] = {"met": (released or 0) >= TARGET_RELEASE_PER_S,
                                     "median": released,
                                     "wanted": f">= {TARGET_RELEASE_PER_S:g}"}  # fmt: skip
        targets["rss"] = {"met": 0 < peak < TARGET_RSS_MIB, "peak_mib": peak,
                          "wanted": f"< {TARGET_RSS_MIB:g} MiB with {jobs} jobs in flight"}  # fmt: skip
    return {"figures": figures, "peak_rss_mib": peak, "targets": targets}


def table(result: dict[str, Any]) -> str:
    lines = [
        f"autowrap controller bench ({result['mode']}), {result['started']}, "
        f"{result['machine']['cpus']} CPUs, {result['jobs']} jobs x 4 pods, "
        f"{len(result['rounds'])} round(s)",
        "",
        f"{'figure':<36} {'median':>9} {'min':>9} {'max':>9}",
    ]
    for name, f in result["summary"]["figures"].items():
        cells = [f[k] for k in ("median", "min", "max")]
        lines.append(f"{name:<36} " + " ".join(
            f"{'-' if c is None else c:>9}" for c in cells))  # fmt: skip
    lines.append(f"{'peak RSS over every round (MiB)':<36} {result['summary']['peak_rss_mib']:>9}")
    for i, r in enumerate(result["rounds"], 1):
        if "failure" in r:
            lines += ["", f"round {i} FAILED: {r['failure']}", f"  progress: {r['progress']}"]
            lines += [f"  | {line}" for line in r.get("log_tail", "").splitlines()]
            continue
        checks = r["checks"]
        lines.append(
            f"round {i}: checks {'ok' if checks['ok'] else 'FAILED ' + str(checks)}; server CPU "
            f"adopt {r['adopt']['server_core_share']} of a core, release "
            f"{r['release']['server_core_share']}; reconcile errors "
            f"{r['controller_metrics'].get('autowrap_controller_reconcile_errors_total', '?')}"
        )
    lines += ["", "targets:"]
    for name, t in result["summary"]["targets"].items():
        detail = ", ".join(f"{k}={v}" for k, v in t.items() if k != "met")
        lines.append(f"  {'MET ' if t['met'] else 'MISSED'} {name}{': ' if detail else ''}{detail}")
    return "\n".join(lines)


async def _run(mode: Mode, jobs: int, rounds: int) -> dict[str, Any]:
    started = datetime.now(UTC).replace(microsecond=0)
    results = []
    for n in range(rounds):
        print(f"controller bench {mode.name}: round {n + 1} of {rounds}, {jobs} jobs ...",
              file=sys.stderr)  # fmt: skip
        with tempfile.TemporaryDirectory(prefix="autowrap-controller-bench-") as tmp:
            results.append(await one_round(mode, jobs, Path(tmp), f"r{n + 1}"))
    return {
        "schema": 1,
        "mode": mode.name,
        "started": started.isoformat(),
        "command": " ".join(["python -m bench.controller", *sys.argv[1:]]),
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
        },  # fmt: skip
        "jobs": jobs,
        "rounds": results,
        "summary": summary(results, jobs),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.controller", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("--smoke", action="store_true",
                        help=f"{MODES['smoke'].jobs} jobs, one round: correctness only (CI)")  # fmt: skip
    parser.add_argument("--jobs", type=int, help=f"jobs per round (default {TARGET_JOBS})")
    parser.add_argument("--rounds", type=int, help="rounds, each on a fresh cluster and server")
    parser.add_argument("--out", type=Path, default=RESULTS, help="directory for the JSON result")
    args = parser.parse_args(argv)
    mode = MODES["smoke" if args.smoke else "full"]
    t0 = time.monotonic()
    result = asyncio.run(_run(mode, args.jobs or mode.jobs, args.rounds or mode.rounds))
    result["seconds"] = round(time.monotonic() - t0, 1)
    args.out.mkdir(parents=True, exist_ok=True)
    stamp = result["started"].replace(":", "").replace("-", "")
    path = args.out / f"controller-{stamp}.json"
    path.write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
    print(table(result))
    print(f"\nresult: {path} ({result['seconds']} s)")
    return 0 if result["summary"]["targets"]["correct"]["met"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
