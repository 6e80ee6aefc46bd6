"""The machinery every simulated controller shares: watches feed a work queue, one worker drains it.

Real controllers are level-triggered: a reconcile reads what is stored and moves it one step,
whatever event woke it. The simulators follow that rule, which is what lets
:meth:`testbed.sim.Simulators.settle` work without sleeps: it re-queues every object
(an informer resync) and repeats until a whole round writes nothing.

Writes go through :class:`FakeCluster` as the controller's own identity, so they pass the same
admission webhooks the real controller's writes pass (adopt-mode.md A4).
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, ClassVar, TypeVar

from testbed.apiserver import UserInfo
from testbed.cluster.cluster import FakeCluster
from testbed.cluster.common import service_account_user
from testbed.cluster.resources import EVENTS, Resource
from testbed.cluster.store import ApiError
from testbed.sim.objects import JsonDict, Key, key_of, meta, now

KeyMapper = Callable[[JsonDict], Iterable[Key]]
T = TypeVar("T")


def same_key(obj: JsonDict) -> Iterable[Key]:
    return [key_of(obj)]


class Simulator:
    """One simulated controller. Subclasses set ``name``, ``primary``, ``user`` and ``reconcile``.

    ``primary`` is the resource whose objects are the work items; ``sources()`` adds other
    watched resources and maps their events to primary keys (a pod event wakes its owner).
    """

    name: ClassVar[str] = "simulator"
    primary: ClassVar[Resource]

    def __init__(self, cluster: FakeCluster, user: UserInfo) -> None:
        self.cluster = cluster
        self.store = cluster.store
        self.user = user
        self._queue: dict[Key, None] = {}
        self._wakeup = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._paused = False
        self.current: Key | None = None
        self.writes: collections.deque[str] = collections.deque(maxlen=50)
        """The latest writes, newest last: what :meth:`settle` reports when it cannot settle."""
        self.rejections: list[str] = []
        """Writes the fake API refused and the real controller would retry (Events upstream)."""

    # -- what subclasses provide ---------------------------------------------------------------

    def sources(self) -> list[tuple[Resource, KeyMapper]]:
        return [(self.primary, same_key)]

    async def reconcile(self, key: Key) -> None:
        raise NotImplementedError

    # -- the queue ---------------------------------------------------------------------------------

    def queue_key(self, key: Key) -> None:
        if key[1]:
            self._queue[key] = None
            if not self._paused:
                self._idle.clear()
                self._wakeup.set()

    def pause(self) -> None:
        """Stop reconciling (events are still queued), as a controller that is down, or that
        polls and has not looked yet (the AppWrapper controller polls its components every
        minute once ready, A6), does."""
        self._paused = True
        self._wakeup.set()

    def resume(self) -> None:
        self._paused = False
        if self._queue:
            self._idle.clear()
        self._wakeup.set()

    def resync(self) -> None:
        for obj in self.store.list(self.primary):
            self.queue_key(key_of(obj))

    @property
    def idle(self) -> bool:
        return self._idle.is_set()

    def pending(self) -> list[Key]:
        return ([self.current] if self.current else []) + list(self._queue)

    async def wait_idle(self) -> None:
        await self._idle.wait()

    # -- tasks -----------------------------------------------------------------------------------

    def tasks(self) -> list[Callable[[], Any]]:
        """The coroutines the runner starts: one watch per source and the worker."""
        return [*(self._watcher(res, mapper) for res, mapper in self.sources()), self._work]

    def _watcher(self, res: Resource, mapper: KeyMapper) -> Callable[[], Any]:
        async def watch() -> None:
            stream = self.store.watch(res)
            try:
                async for event, obj in stream:
                    if event == "BOOKMARK":
                        continue
                    for key in mapper(obj):
                        self.queue_key(key)
            finally:
                await stream.aclose()

        return watch

    async def _work(self) -> None:
        while True:
            await asyncio.sleep(0)  # never starve the loop, even if every write completes at once
            if not self._queue or self._paused:
                self._idle.set()
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            key = next(iter(self._queue))
            del self._queue[key]
            self.current = key
            try:
                await self.reconcile(key)
            except ApiError as err:
                # A stale read (409 Conflict) or an object that vanished meanwhile: the next
                # reconcile reads fresh state, as controller-runtime requeues on error.
                if err.status not in (404, 409):
                    raise
                self.queue_key(key)
            finally:
                self.current = None

    # -- writes, as this controller ------------------------------------------------------------

    def _note(self, verb: str, res: Resource, namespace: str, name: str) -> None:
        self.writes.append(f"{verb} {res.plural} {namespace}/{name}")

    async def create(self, res: Resource, obj: JsonDict, namespace: str) -> JsonDict:
        self._note("create", res, namespace, meta(obj).get("name") or "")
        return await self.cluster.create(res, obj, namespace=namespace, user=self.user)

    async def update(self, res: Resource, obj: JsonDict) -> JsonDict:
        ns, name = key_of(obj)
        self._note("update", res, ns, name)
        return await self.cluster.update(res, obj, user=self.user)

    async def update_status(self, res: Resource, obj: JsonDict) -> JsonDict:
        """PUT ``/status``: the main endpoint ignores status for these resources."""
        ns, name = key_of(obj)
        self._note("update status of", res, ns, name)
        return await self.cluster.update(res, obj, user=self.user, subresource="status")

    async def event(
        self,
        obj: JsonDict,
        reason: str,
        message: str,
        *,
        component: str,
        host: str = "",
        kind: str = "Normal",
        user: UserInfo | None = None,
    ) -> None:
        """A core/v1 Event about ``obj``, as client-go's recorder makes one
        (tools/record/event.go ``makeEvent``: name ``<object>.<unix nanos in hex>``, count 1,
        first and last timestamp now). Not aggregated: each call is a create, which is what a
        real component's recorder sends for distinct reasons. A refused create is dropped, as
        the recorder drops it after its retries."""
        m = meta(obj)
        stamp = now()
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{m.get('name')}.{time.time_ns():x}",
                         "namespace": m.get("namespace") or "default"},
            "involvedObject": {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"),
                               "namespace": m.get("namespace"), "name": m.get("name"),
                               "uid": m.get("uid"), "resourceVersion": m.get("resourceVersion")},
            "reason": reason,
            "message": message,
            "source": {"component": component, **({"host": host} if host else {})},
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
            "type": kind,
            "reportingComponent": component,
            "reportingInstance": host,
        }  # fmt: skip
        self.writes.append(f"event {reason} {m.get('namespace')}/{m.get('name')}")
        try:
            await self.cluster.create(EVENTS, event, namespace=str(event["metadata"]["namespace"]),
                                      user=user or self.user)  # fmt: skip
        except ApiError as err:
            self.reject(f"event {reason}", err)

    def reject(self, what: str, err: ApiError) -> None:
        """Record a refused write once; the next reconcile retries it, as upstream requeues."""
        text = f"{what}: {err.status} {err.reason}: {err.message}"
        if text not in self.rejections:
            self.rejections.append(text)

    async def delete(self, res: Resource, namespace: str, name: str) -> JsonDict | None:
        """Delete by name with Background propagation and no UID precondition."""
        self._note("delete", res, namespace, name)
        return await self.cluster.delete(
            res, namespace, name, user=self.user, propagation="Background"
        )


async def retry_on_conflict(attempt: Callable[[], Awaitable[T]], tries: int = 10) -> T:
    """client-go's RetryOnConflict for calls made from a test, outside the worker's requeue:
    ``attempt`` must read fresh state each time."""
    for _ in range(tries - 1):
        try:
            return await attempt()
        except ApiError as err:
            if err.status != 409 or err.reason == "AlreadyExists":
                raise
        await asyncio.sleep(0)
    return await attempt()


def sa(namespace: str, name: str) -> UserInfo:
    """A controller's service-account identity."""
    return service_account_user(name, namespace)


def by_owner(kind: str) -> KeyMapper:
    """Map a dependent to its controller owner of ``kind`` (events of pods wake their Job)."""

    def mapper(obj: JsonDict) -> Iterable[Key]:
        ns = key_of(obj)[0]
        return [
            (ns, ref["name"])
            for ref in meta(obj).get("ownerReferences") or []
            if ref.get("controller") and ref.get("kind") == kind
        ]

    return mapper


def by_label(label: str) -> KeyMapper:
    """Map an object to the primary named by one of its labels."""

    def mapper(obj: JsonDict) -> Iterable[Key]:
        value = (meta(obj).get("labels") or {}).get(label)
        return [(key_of(obj)[0], value)] if value else []

    return mapper


def describe(sims: Mapping[str, Simulator]) -> str:
    lines = []
    for name, sim in sims.items():
        pending = ", ".join(f"{ns}/{n}" for ns, n in sim.pending()) or "nothing queued"
        recent = "; ".join(list(sim.writes)[-5:]) or "no writes"
        lines.append(f"{name}: {pending}; latest writes: {recent}")
    return "\n".join(lines)
