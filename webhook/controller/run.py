"""The controller process: leader election, informers, the work queue and its workers.

It runs inside ``autowrap serve`` whenever the server has API access (``--no-controller``
turns it off), one active replica at a time through the Lease ``autowrap-controller``.
Informers follow the kinds of object a step depends on (adopted objects, their pods, the
AppWrappers the controller created, and Kueue's Workloads for those, whose reason for waiting is
mirrored); every change maps to one key, and workers reconcile
keys from the queue. A failed reconcile is retried with backoff; nothing is polled.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections import defaultdict
from collections.abc import Callable, Collection, Hashable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from webhook.controller import leader
from webhook.controller.events import Recorder
from webhook.controller.reconcile import Counters, Key, Reconciler
from webhook.controller.workqueue import WorkQueue
from webhook.core import adoption, podmeta, waiting
from webhook.core.policy import PolicySet
from webhook.core.ports import ApiFailure, Conflict
from webhook.model import names, objects
from webhook.shell import opevents
from webhook.shell.informer import Informer, Obj
from webhook.shell.kube import APPWRAPPERS, KUEUE_GROUP, Kind, KubeClient, object_kinds
from webhook.shell.metrics import ControllerStats

log = logging.getLogger("autowrap")

SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
# How long the changes heard for one key are gathered into one reconcile (``WorkQueue``).
BATCH_SECONDS = 0.05
WORKLOADS_LOOKUP_TIMEOUT = 10.0


def own_namespace(context_namespace: str | None = None) -> str:
    """Where the Lease lives: the pod's namespace from the downward API, else the service
    account's namespace file, else the kubeconfig context's namespace, else autowrap-system."""
    from_env = os.environ.get("POD_NAMESPACE", "").strip()
    if from_env:
        return from_env
    with contextlib.suppress(OSError):
        found = SERVICE_ACCOUNT_NAMESPACE.read_text().strip()
        if found:
            return found
    return context_namespace or names.SERVICE_NAMESPACE


@dataclass
class Settings:
    namespace: str = names.SERVICE_NAMESPACE
    identity: str = field(default_factory=socket.gethostname)
    # Reconciles wait on the API, not the CPU: enough of them to keep it busy.
    workers: int = 16
    # Whole seconds: the Lease stores leaseDurationSeconds as an integer.
    lease_seconds: int = 15
    renew_seconds: float = 10.0
    retry_seconds: float = 2.0


async def cancel_all(tasks: Collection[asyncio.Task[Any]]) -> None:
    """Cancel the tasks and wait until they are done. A cancellation that arrives while aiohttp
    reads a watch stream is sometimes absorbed by the library (the task goes on reading), so
    the stragglers are cancelled again until they end."""
    pending = {t for t in tasks if not t.done()}
    while pending:
        for task in pending:
            task.cancel()
        _, pending = await asyncio.wait(pending, timeout=1.0)


class Controller:
    def __init__(
        self,
        api: KubeClient,
        policies: Callable[[], PolicySet],
        settings: Settings,
        *,
        clock: Callable[[], float] = time.monotonic,
        observe: Callable[[float], None] = lambda seconds: None,
        now: Callable[[], float] = time.time,
    ) -> None:
        """``clock`` times reconciles; ``now`` is the wall clock an object's age is read
        against (its creationTimestamp), e.g. an orphaned AppWrapper's grace period."""
        self.settings = settings
        self._observe = observe
        self.queue = WorkQueue()
        self.leading = asyncio.Event()
        self.reconciles = 0
        self.errors = 0
        self._api = api
        self._policies = policies
        self._clock = clock
        self._kinds = object_kinds()
        self._by_key: dict[str, dict[Key, set[tuple[str, str]]]] = defaultdict(
            lambda: defaultdict(set)
        )
        self._informers: dict[str, Informer] = {}
        for (_, kind_name), kind in self._kinds.items():
            self._informers[kind_name] = Informer(
                api, kind, self._watcher(kind_name), labels=names.ADOPTION_LABEL,
                transform=self._object_view,
            )  # fmt: skip
        # Pods not released yet: a release labels the pod, which takes it out of the watch, so
        # the scheduler's and the kubelet's writes to running pods cost nothing here. A pod
        # whose gate someone else removed keeps coming, and shows as escaped. Their metadata
        # only (webhook.core.podmeta): anyone may label pods so and fill them up.
        self._informers["pods"] = Informer(
            api, Kind("", "v1", "pods", "Pod"), self._watcher("pods"),
            labels=f"{names.APPWRAPPER_LABEL},!{names.RELEASED_LABEL}", transform=self._pod_view,
            metadata_only=True,
        )  # fmt: skip
        self._informers["appwrappers"] = Informer(
            api, APPWRAPPERS, self._watcher("appwrappers"), labels=f"{names.ADOPTED_LABEL}=true",
            transform=adoption.appwrapper_view,
        )  # fmt: skip
        self.reconciler = Reconciler(
            api,
            policies,
            Recorder(api, instance=settings.identity),
            objects_of=self._objects_of,
            pods_of=lambda key: self._cached("pods", key),
            appwrapper_of=lambda key: self._informers["appwrappers"].get(*key),
            kinds=self._kinds,
            counters=Counters(),
            now=now,
            served=self.served,
            workloads_of=lambda key: self._cached("workloads", key),
        )

    # --- what is cached ------------------------------------------------------------------------

    def _pod_view(self, pod: Obj) -> Obj | None:
        """A waiting pod's metadata as the cache keeps it (``podmeta.waiting_pod``); None (not
        cached) for a pod no policy could have had autowrap prepare: any namespace user can
        label pods workload.codeflare.dev/appwrapper, and only namespaces a policy covers hold
        pods autowrap releases."""
        namespace = str((pod.get("metadata") or {}).get("namespace") or "")
        if not self._covered(namespace):
            return None
        return podmeta.waiting_pod(pod)

    def _object_view(self, obj: Obj) -> Obj | None:
        """An object labelled for adoption, as decisions read it; None (not cached) in a
        namespace no policy covers, unless it carries the adoption finalizer, whose delete
        autowrap must still let through (a policy may have stopped covering it)."""
        metadata = obj.get("metadata") or {}
        if not self._covered(str(metadata.get("namespace") or "")) and (
            names.ADOPTION_FINALIZER not in (metadata.get("finalizers") or [])
        ):
            return None
        view = adoption.object_view(obj)
        if objects.labels_of(view).get(names.ADOPTION_LABEL) == names.ADOPTION_ADOPTED:
            view = _autowraps_metadata(view)
        return view

    def _covered(self, namespace: str) -> bool:
        policies = self._policies()
        if not policies.selects_by_labels:
            return policies.match(namespace, {}) is not None
        labels = self._api.known_namespace_labels(namespace)
        # Labels not known yet: kept, rather than a pod of a covered namespace missed.
        return labels is None or policies.match(namespace, labels) is not None

    def served(self, source: str) -> bool:
        """Whether the cluster serves the resource behind an informer (its CRD installed)."""
        informer = self._informers.get(source)
        return informer is not None and not informer.absent

    def absent(self) -> list[str]:
        """The resources the controller follows that the cluster does not serve."""
        return sorted(
            f"{i.kind.plural}.{i.kind.group or 'core'}"
            for i in self._informers.values()
            if i.absent
        )

    # --- keys -----------------------------------------------------------------------------------

    @staticmethod
    def key_of(source: str, obj: Obj) -> Key | None:
        metadata = obj.get("metadata") or {}
        namespace = str(metadata.get("namespace") or "")
        if source == "appwrappers":
            return namespace, str(metadata.get("name") or "")
        if source == "pods":
            name = objects.labels_of(obj).get(names.APPWRAPPER_LABEL)
        elif source == "workloads":
            name = waiting.appwrapper_of(obj)
        else:
            name = adoption.appwrapper_name_of(obj)
        return (namespace, name) if name else None

    def _watcher(self, source: str) -> Callable[[Obj | None, Obj | None], None]:
        index = self._by_key[source]

        def changed(old: Obj | None, new: Obj | None) -> None:
            # A Workload admitted without a reason said before changes no status (the
            # AppWrapper's own start does): kept, waking nothing.
            wake = source != "workloads" or waiting.wakes(old, new)
            for obj, present in ((old, False), (new, True)):
                if obj is None:
                    continue
                key = self.key_of(source, obj)
                if key is None:
                    continue
                member = (
                    str((obj.get("metadata") or {}).get("namespace") or ""),
                    objects.name_of(obj),
                )
                if present:
                    index[key].add(member)
                else:
                    index[key].discard(member)
                    if not index[key]:
                        index.pop(key, None)
                if wake:
                    self.queue.add_batched(key, BATCH_SECONDS)

        return changed

    def _cached(self, source: str, key: Key) -> list[Obj]:
        informer = self._informers.get(source)
        if informer is None:
            return []
        found = []
        for namespace, name in sorted(self._by_key[source].get(key, ())):
            obj = informer.get(namespace, name)
            if obj is not None:
                found.append(obj)
        return found

    def _objects_of(self, key: Key) -> list[Obj]:
        found: list[Obj] = []
        for _, kind_name in self._kinds:
            found += self._cached(kind_name, key)
        return found

    # --- running ----------------------------------------------------------------------------------

    async def run(self) -> None:
        """Compete for the Lease forever; lead while holding it."""
        await leader.lead(
            self._api,
            name=names.CONTROLLER_LEASE,
            namespace=self.settings.namespace,
            identity=self.settings.identity,
            work=self.lead,
            timing=leader.Timing(
                self.settings.lease_seconds,
                self.settings.renew_seconds,
                self.settings.retry_seconds,
            ),
        )

    async def lead(self) -> None:
        """Informers and workers, until cancelled (the Lease was lost, or shutdown)."""
        log.info("controller leading", extra={"fields": {"identity": self.settings.identity}})
        self.leading.set()
        tasks: list[asyncio.Task[None]] = []
        # Every step of the term sits in the ``try``: a term cancelled at any await (the Lease
        # lost, or shutdown, while Kueue's version is looked up) says it no longer leads.
        try:
            # Each informer starts this term from an empty cache, so the key index does too: an
            # object deleted between two terms is never heard of as a deletion.
            for index in self._by_key.values():
                index.clear()
            await self._follow_workloads()
            # Nor is any informer synced until it has listed in this term: an informer's own
            # run forgets its cache only once its task starts, after ``_listed`` has looked, and
            # the previous term's ``synced`` would let the workers judge every key against
            # caches that are still filling (an adopted object with no AppWrapper cached yet
            # reads as "gone"). client-go's controllers likewise start workers only after
            # WaitForCacheSync.
            for informer in self._informers.values():
                informer.reset()
            tasks += [asyncio.create_task(i.run()) for i in self._informers.values()]
            await self._listed()
            tasks += [asyncio.create_task(self._work()) for _ in range(self.settings.workers)]
            await asyncio.gather(*tasks)
        finally:
            self.leading.clear()
            await cancel_all(tasks)
            self.queue.close()

    async def _follow_workloads(self) -> None:
        """Follow Kueue's Workloads (in the version the cluster's Kueue serves, found once), so
        that a queued object's status says why Kueue has not admitted it yet. A cluster
        without Kueue, or a failed look-up (tried again next term), holds up nothing."""
        if "workloads" in self._informers:
            return
        try:
            version = await self._api.kueue_version(timeout=WORKLOADS_LOOKUP_TIMEOUT)
        except ApiFailure as exc:
            log.warning("Kueue's API version not found, its reasons are not mirrored: %s", exc)
            return
        if version is None:
            return
        self._informers["workloads"] = Informer(
            self._api, Kind(KUEUE_GROUP, version, "workloads", "Workload"),
            self._watcher("workloads"), transform=waiting.workload_view,
        )  # fmt: skip

    async def _listed(self) -> None:
        """Until every informer has listed, or found its resource not served: a kind the
        cluster lacks (Volcano in a Pod-only cluster) never holds up the others. Each kind found
        missing is said once, in the log and as an operator Event; readiness and the metrics
        keep saying it (``absent``)."""
        said: set[str] = set()
        while True:
            waiting = [i for i in self._informers.values() if not i.synced.is_set()]
            for informer in waiting:
                name = f"{informer.kind.plural}.{informer.kind.group or 'core'}"
                if informer.absent and name not in said:
                    said.add(name)
                    message = (f"the cluster does not serve {name}: objects that need it are not "
                               "adopted until its CRD is installed; the other kinds are")  # fmt: skip
                    log.warning(message)
                    opevents.emit("ResourceMissing", message, warning=True)
            if all(i.absent for i in waiting):
                return
            listing = [asyncio.ensure_future(i.synced.wait()) for i in waiting if not i.absent]
            try:
                await asyncio.wait(listing, timeout=0.5, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for future in listing:
                    future.cancel()

    async def _work(self) -> None:
        while True:
            key = await self.queue.get()
            started = self._clock()
            try:
                result = await self.reconciler.reconcile(self._key(key))
            except asyncio.CancelledError:
                self.queue.done(key)
                raise
            except Conflict:
                # The object changed since the cache saw it: the watch brings the new version
                # and the step is judged again. Routine, not an error.
                self.queue.retry(key)
            except ApiFailure as exc:
                self.errors += 1
                delay = self.queue.retry(key)
                log.warning("reconcile failed, retrying: %s", exc, extra={"fields": {
                    "key": "/".join(self._key(key)), "error": str(exc), "retry_in": delay}})  # fmt: skip
                opevents.emit("ReconcileFailed", f"reconcile failed, retrying: {exc}", warning=True)
            except Exception as exc:
                self.errors += 1
                delay = self.queue.retry(key)
                log.exception(
                    "reconcile failed", extra={"fields": {"key": "/".join(self._key(key))}}
                )
                opevents.emit("ReconcileError", f"internal error reconciling "
                              f"{'/'.join(self._key(key))}, retrying: {exc!r}",
                              warning=True)  # fmt: skip
            else:
                self.queue.forget(key)
                if result.requeue is not None:
                    self.queue.add_after(key, result.requeue)
            finally:
                self.reconciles += 1
                self._observe(self._clock() - started)
                self.queue.done(key)
            # A reconcile that makes no API call never yields: hand the loop to the webhooks.
            await asyncio.sleep(0)

    @staticmethod
    def _key(key: Hashable) -> Key:
        assert isinstance(key, tuple) and len(key) == 2
        return str(key[0]), str(key[1])

    @property
    def informers(self) -> tuple[Informer, ...]:
        """The watch-backed caches (read-only use: what the controller currently sees)."""
        return tuple(self._informers.values())

    def stats(self) -> ControllerStats:
        counters = self.reconciler.counters
        return ControllerStats(
            leading=self.leading.is_set(), queue_depth=len(self.queue),
            reconciles=self.reconciles, errors=self.errors, adopted=counters.adopted,
            released=counters.released, failed=dict(counters.failed),
            resources={f"{i.kind.plural}.{i.kind.group or 'core'}": not i.absent
                       for i in self._informers.values()} if self.leading.is_set() else {},
            watch_events={name: (i.events, i.handled) for name, i in self._informers.items()},
        )  # fmt: skip

    def idle(self) -> bool:
        """No work queued or under way (tests and the benchmark wait for it)."""
        return self.queue.idle()


def _autowraps_metadata(view: Obj) -> Obj:
    """An adopted object's metadata cut to what decisions read of it once it is adopted:
    autowrap's own labels and annotations (``autowrap.io/``, and the AppWrapper label that keys
    a bare Pod, its own template) and its controller reference. Its
    users may fill the rest (any number of labels, 256 KiB of annotations), and what is cached
    of an adopted object must not grow with that. The finalizers stay whole: dropping
    autowrap's is guarded by the list as read."""
    metadata = dict(view.get("metadata") or {})
    for part in ("labels", "annotations"):
        found = metadata.get(part)
        if isinstance(found, dict):
            metadata[part] = {k: v for k, v in found.items()
                              if k.startswith(names.PREFIX) or k == names.APPWRAPPER_LABEL}  # fmt: skip
    owner = adoption.controller_of(view)
    if "ownerReferences" in metadata:
        metadata["ownerReferences"] = [dict(owner)] if owner is not None else []
    return {**view, "metadata": metadata}
