"""``python -m bench.simcluster --control-port P --work DIR``: the simulated cluster of
``bench.adopt_cost``, in a process of its own so that none of its CPU counts as autowrap's.

It serves the fake Kubernetes API (``testbed.cluster``) with the simulated controllers
running against it (``testbed.sim``: kube-scheduler and kubelet, Volcano, Kueue, the
AppWrapper controller), so every write a real cluster makes reaches autowrap's watches: the
gated pods' ``PodScheduled=False SchedulingGated``, bindings, the kubelet's two status updates,
Volcano's pods at once and its PodGroup and Job status, Kueue's Workloads, Events. Kueue admits
only when told (``POST /admit``), so adoption and release are measured apart.

A small control API on ``--control-port`` (plain HTTP, loopback) drives it:

- ``GET /stats``: counts (Jobs adopted, pods gated, released, running) and how long ago the
  last write other than a Lease was;
- ``POST /jobs?prefix=&count=``: that many Volcano Jobs of 4 pods, stored as adopt-mode
  admission stores them (``adoption.prepare`` of the engine's outcome);
- ``POST /admit``: Kueue admits every queued AppWrapper;
- ``POST /clone?total=``: copies of the adopted families already there (Job, AppWrapper, pods,
  PodGroup, Workload, Service, ConfigMap) with new names and uids, stored directly, until
  ``total`` Jobs exist: a large cluster in the state autowrap itself left it in;
- ``POST /bloat?count=&size=&prefix=&interval_ms=&covered=``: pods of ``size`` bytes labelled
  ``workload.codeflare.dev/appwrapper`` and held by a gate of their own, in a namespace no
  policy covers (a user's), or with ``covered=1`` in the one the adopt-mode policy covers,
  labelled for AppWrapper ``x`` and annotated with a podSet as admission's pods are: a hostile
  namespace user's ballast. With ``appwrapper=NAME`` (implies ``covered``) the pods are
  labelled for that AppWrapper, a real one, and gated as admission gates pods
  (``autowrap.io/admission``): each release decision for it reads them live. The bytes are split as a user would have to on kube-apiserver
  (annotations hold at most 256 KiB together): 200 KiB in an annotation, the rest in an env
  value;
- ``POST /relist``: every watch is cut and the watch history compacted, so each informer's
  next watch gets 410 Gone and lists again (what an etcd compaction or an apiserver restart
  does).

The API is served over HTTPS (a CA of its own, named in the kubeconfig with the server name to
check); the kubeconfig for it is written to ``DIR/kubeconfig``; ``DIR/ready`` appears once both
servers listen. Imports ``testbed``; run it from the repository root.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web

from bench import payloads, policies
from testbed.cluster.cluster import FakeCluster
from testbed.cluster.common import ServingTLS
from testbed.cluster.resources import (
    APPWRAPPERS,
    CLUSTERQUEUES,
    CONFIGMAPS,
    LEASES,
    LOCALQUEUES,
    PODGROUPS,
    PODS,
    RESOURCEFLAVORS,
    SERVICES,
    VCJOBS,
    WORKLOADS,
    Resource,
)
from testbed.cluster.store import Store
from testbed.sim import Simulators, simulated
from webhook.core import adoption
from webhook.model import names
from webhook.shell import policyfiles

Obj = dict[str, Any]
NAMESPACE = policies.ADOPT_NAMESPACE
UNCOVERED = policies.UNCOVERED_NAMESPACE
POOL = {"pool": "a100"}
FLAVOR = "default-flavor"
FAMILY = (VCJOBS, APPWRAPPERS, PODS, PODGROUPS, WORKLOADS, SERVICES, CONFIGMAPS)


class BenchStore(Store):
    """The fake store without the fake's own per-write costs that a real apiserver does not
    have: its garbage collector scans every object on every write (kube-apiserver's runs as a
    separate controller), and CRD schemas are checked with ``jsonschema``. Nothing is deleted
    here, so the collector has nothing to do."""

    def __init__(self) -> None:
        super().__init__(history_limit=400_000, validate_schemas=False)

    def _collect_garbage(self) -> None:
        return None

    def count(self, res: Resource) -> int:
        return len(self._table(res))

    def put(self, res: Resource, obj: Obj) -> None:
        """Store ``obj`` as it is (uid and all) with a new resourceVersion, telling no watcher:
        the state of a cluster before autowrap starts."""
        self._rv += 1
        obj["metadata"]["resourceVersion"] = str(self._rv)
        key = self._key(res, obj["metadata"].get("namespace"), obj["metadata"]["name"])
        self._table(res)[key] = obj


class Counts:
    """What the writes did so far, counted as the store commits them."""

    def __init__(self) -> None:
        self.adopted: set[str] = set()
        self.released: set[str] = set()
        self.running: set[str] = set()
        self.gated: set[str] = set()
        self.last_write = time.monotonic()
        self.writes: dict[str, int] = {}

    def __call__(self, kind: str, res: Resource, obj: Obj, old: Obj | None) -> None:
        if res == LEASES:
            return
        self.last_write = time.monotonic()
        label = f"{res.plural} {kind}"
        self.writes[label] = self.writes.get(label, 0) + 1
        metadata = obj.get("metadata") or {}
        name = f"{metadata.get('namespace')}/{metadata.get('name')}"
        if res == VCJOBS:
            if (metadata.get("labels") or {}).get(names.ADOPTION_LABEL) == "adopted":
                self.adopted.add(name)
        elif res == PODS and metadata.get("namespace") == NAMESPACE:
            if adoption.is_gated(obj):
                self.gated.add(name)
            elif name in self.gated:
                self.gated.discard(name)
                self.released.add(name)
            if (obj.get("status") or {}).get("phase") == "Running":
                self.running.add(name)


def prepared_jobs(prefix: str, count: int, work: Path) -> list[Obj]:
    """Volcano Jobs of 4 pods (1 master, 3 workers) as adopt-mode admission stores them."""
    policy_set = policyfiles.load(policies.write(work / "policies"))
    return payloads.adopted_jobs(prefix, count, policy_set, digits=5)


def cluster() -> FakeCluster:
    """The fake API: the two namespaces, Kueue's flavor, ClusterQueue and LocalQueue."""
    store = BenchStore()
    # Over HTTPS, as kube-apiserver serves: what TLS costs a client is part of its cost.
    fake = FakeCluster(store=store, bookmark_interval=60.0, tls=ServingTLS.issue())
    fake.add_namespace(NAMESPACE)
    fake.add_namespace(UNCOVERED)
    fake.add_namespace(names.SERVICE_NAMESPACE)
    kueue = "kueue.x-k8s.io/v1beta1"
    store.create(RESOURCEFLAVORS, {"apiVersion": kueue, "kind": "ResourceFlavor",
                                   "metadata": {"name": FLAVOR}, "spec": {"nodeLabels": POOL}})  # fmt: skip
    store.create(CLUSTERQUEUES, {"apiVersion": kueue, "kind": "ClusterQueue",
                                 "metadata": {"name": "cluster-queue"},
                                 "spec": {"namespaceSelector": {}, "resourceGroups": [{
                                     "coveredResources": ["nvidia.com/gpu"],
                                     "flavors": [{"name": FLAVOR, "resources": [
                                         {"name": "nvidia.com/gpu", "nominalQuota": 100000}]}]}]}})  # fmt: skip
    store.create(LOCALQUEUES, {"apiVersion": kueue, "kind": "LocalQueue",
                               "metadata": {"name": payloads.QUEUE, "namespace": NAMESPACE},
                               "spec": {"clusterQueue": "cluster-queue"}})  # fmt: skip
    return fake


class Control:
    """The control API's handlers."""

    def __init__(self, fake: FakeCluster, sims: Simulators, counts: Counts, work: Path) -> None:
        self.fake, self.sims, self.counts, self.work = fake, sims, counts, work
        self.store: BenchStore = fake.store  # type: ignore[assignment]

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get("/stats", self.stats),
            web.get("/requests", self.requests),
            web.post("/jobs", self.jobs),
            web.post("/admit", self.admit),
            web.post("/clone", self.clone),
            web.post("/bloat", self.bloat),
            web.post("/relist", self.relist),
        ]

    async def stats(self, request: web.Request) -> web.Response:
        lease = self.store.get(LEASES, names.SERVICE_NAMESPACE, names.CONTROLLER_LEASE) or {}
        pod_lists = [q for q in self.fake.requests
                     if q.method == "GET" and q.path.endswith("/pods") and "watch" not in q.query]  # fmt: skip
        return web.json_response({
            "jobs": self.store.count(VCJOBS),
            "adopted": len(self.counts.adopted),
            "gated": len(self.counts.gated),
            "released": len(self.counts.released),
            "running": len(self.counts.running),
            "quiet_s": round(time.monotonic() - self.counts.last_write, 3),
            "holder": (lease.get("spec") or {}).get("holderIdentity") or "",
            "requests": len(self.fake.requests),
            "pod_lists": len(pod_lists),
            # LISTs of every namespace's pods begun: an informer's (re)list, not a live read.
            "pod_relists": sum(1 for q in pod_lists
                               if q.path == "/api/v1/pods" and not q.query.get("continue")),  # fmt: skip
            "writes": self.counts.writes,
        })  # fmt: skip

    async def requests(self, request: web.Request) -> web.Response:
        """autowrap's requests so far, counted by verb and resource (``GET pods/{name}``,
        ``WATCH pods``, ``PATCH vcjobs/{name}/status``): where its API calls go."""
        counted: dict[str, int] = {}
        for q in self.fake.requests:  # the simulators write to the store, not through the API
            shape = request_shape(q.method, q.path, q.query)
            if shape == "POST events" and isinstance(q.body, dict):
                shape += f" ({q.body.get('reason')})"
            counted[shape] = counted.get(shape, 0) + 1
        return web.json_response(dict(sorted(counted.items(), key=lambda kv: -kv[1])))

    async def jobs(self, request: web.Request) -> web.Response:
        prefix, count = request.query["prefix"], int(request.query["count"])
        built = await asyncio.to_thread(prepared_jobs, prefix, count, self.work)
        for job in built:
            self.store.create(VCJOBS, job)
        return web.json_response({"created": len(built)})

    async def admit(self, request: web.Request) -> web.Response:
        admitted = 0
        for aw in self.store.list(APPWRAPPERS, NAMESPACE):
            spec = aw.get("spec") or {}
            if spec.get("suspend") and self.sims.kueue.why_not_admissible(aw) is None:
                await self.sims.kueue.admit(NAMESPACE, aw["metadata"]["name"], flavor=FLAVOR)
                admitted += 1
                if admitted % 50 == 0:
                    await asyncio.sleep(0)
        return web.json_response({"admitted": admitted})

    async def clone(self, request: web.Request) -> web.Response:
        """Copies of every adopted family, renamed ``<job>c<k>`` with fresh uids."""
        total = int(request.query["total"])
        jobs = [j for j in self.store.list(VCJOBS, NAMESPACE)
                if (j["metadata"].get("labels") or {}).get(names.ADOPTION_LABEL) == "adopted"]  # fmt: skip
        if not jobs:
            raise web.HTTPConflict(text="nothing adopted to clone")
        families = []
        for job in jobs:
            name = job["metadata"]["name"]
            members = []
            for res in FAMILY:
                for obj in self.store.list(res, NAMESPACE):
                    if name in obj["metadata"]["name"]:
                        members.append((res, orjson.dumps(obj)))
            families.append((name, members))
        existing, k = len(jobs), 0
        while existing < total:
            for name, members in families:
                if existing >= total:
                    break
                uids: dict[str, str] = {}
                renamed = f"{name}c{k:04d}"
                for _, raw in members:
                    obj = orjson.loads(raw)
                    uid = str(obj["metadata"].get("uid") or "")
                    if uid and uid not in uids:
                        uids[uid] = str(uuid.uuid4())
                for res, raw in members:
                    text = raw.decode().replace(name, renamed)
                    for old, new in uids.items():
                        text = text.replace(old, new)
                    self.store.put(res, orjson.loads(text))
                existing += 1
            k += 1
            await asyncio.sleep(0)
        return web.json_response({"jobs": existing})

    async def bloat(self, request: web.Request) -> web.Response:
        count, size = int(request.query.get("count", 450)), int(request.query.get("size", 1 << 20))
        prefix = request.query.get("prefix", "big")
        interval = float(request.query.get("interval_ms", 0)) / 1000
        claimed = request.query.get("appwrapper", "")
        covered = request.query.get("covered") in ("1", "true") or bool(claimed)
        gate = names.ADMISSION_GATE if claimed else "example.com/mine"
        namespace = NAMESPACE if covered else UNCOVERED
        in_annotation = min(size, 200 << 10)
        annotation, env = "x" * in_annotation, "y" * max(size - in_annotation, 0)
        for i in range(count):
            if interval:
                await asyncio.sleep(interval)
            name = f"{prefix}-{i:04d}"
            annotations = {"filler": annotation}
            if covered:
                annotations[adoption.PODSET_ANNOTATION] = "0"
            pod = {"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": name, "namespace": namespace,
                                "labels": {names.APPWRAPPER_LABEL: claimed or ("x" if covered else name)},
                                "annotations": annotations},
                   "spec": {"schedulingGates": [{"name": gate}],
                            "containers": [{"name": "c", "image": "busybox",
                                            "env": [{"name": "FILLER", "value": env}]}]}}  # fmt: skip
            await self.fake.create(PODS, pod, namespace=namespace)
            if i % 10 == 9:
                await asyncio.sleep(0)
        return web.json_response({"created": count})

    async def relist(self, request: web.Request) -> web.Response:
        """Cut every watch, after the history is compacted past what any watcher saw."""
        for n in range(2):  # versions no informer follows, then the history forgotten
            self.store.create(CONFIGMAPS, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
                "name": f"relist-{uuid.uuid4().hex[:8]}-{n}", "namespace": NAMESPACE}})  # fmt: skip
        self.store.compact()
        cut = 0
        for task in list(self.fake._streams):
            task.cancel()
            cut += 1
        return web.json_response({"watches_cut": cut})


def request_shape(method: str, path: str, query: Mapping[str, str]) -> str:
    """``PATCH vcjobs/{name}/status`` for ``PATCH /apis/batch.volcano.sh/v1alpha1/namespaces/
    bench/jobs/x/status``: the verb and the resource, without namespaces and names."""
    parts = [p for p in path.split("/") if p]
    parts = parts[2:] if parts[:1] == ["api"] else parts[3:]
    if parts[:1] == ["namespaces"] and len(parts) > 2:
        parts = parts[2:]
    verb = "WATCH" if query.get("watch") in ("1", "true") else method
    shape = parts[0] if parts else path
    if len(parts) > 1:
        shape += "/{name}" + "".join(f"/{p}" for p in parts[2:])
    return f"{verb} {shape}"


async def serve(control_port: int, work: Path) -> None:
    fake = cluster()
    counts = Counts()
    fake.store.on_write(counts)
    await fake.start()
    # autowrap runs as its ServiceAccount, under the RBAC deploy/base grants it.
    fake.write_kubeconfig(work / "kubeconfig", namespace=names.SERVICE_NAMESPACE,
                          token=fake.authorize_autowrap())  # fmt: skip
    options = {
        "kueue": {"auto_admit": False, "flavors": {FLAVOR: {"nodeLabels": POOL}}},
        "kubelet": {"nodes": {"node-0": POOL}},
    }
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with simulated(fake, **options) as sims:
        app = web.Application(client_max_size=8 << 20)
        app.add_routes(Control(fake, sims, counts, work).routes())
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", control_port).start()
        (work / "ready").write_text(str(fake.port))
        try:
            await stop.wait()
        finally:
            await runner.cleanup()
    with contextlib.suppress(Exception):
        await fake.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.simcluster", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("--control-port", type=int, required=True)
    parser.add_argument("--work", type=Path, required=True)
    args = parser.parse_args(argv)
    asyncio.run(serve(args.control_port, args.work))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
