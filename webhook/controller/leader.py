"""One active controller among the replicas, through a ``coordination.k8s.io/v1`` Lease.

The loop keeps client-go's leader election contract (k8s.io/client-go tools/leaderelection,
``tryAcquireOrRenew`` and ``renew``): a replica takes the Lease when it is free, its own, or
unrenewed for ``leaseDurationSeconds`` as this replica's clock measured it; the leader renews
every ``retry`` seconds and stops leading when no renewal succeeded for ``renew_deadline``
seconds, which is shorter than the lease duration, so it has stopped before anyone else may
take over. Every call carries a timeout that ends by that deadline: a hung call cannot keep a
leader that lost its Lease working (the official client's election checks its deadline only
between attempts, and its calls default to a 300 s timeout). Within the deadline a renewal's
calls get as long as client-go gives them (``Timing.call``): a busy apiserver that answers in
a few seconds does not cost the term, and with it a whole sync. On shutdown the Lease is
released (``ReleaseOnCancel``), so a rolling update has no leaderless gap.

It talks to the API through the same client as the rest of autowrap (``Api``), no thread, no
generated models.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from webhook.core.ports import AlreadyExists, ApiFailure, Conflict
from webhook.shell.kube import LEASES

log = logging.getLogger("autowrap")

# The shortest timeout a Lease call gets, even with its deadline nearly spent.
_MIN_CALL_SECONDS = 0.2
_RELEASE_SECONDS = 2.0


class LeaseApi(Protocol):
    async def get(
        self, kind: Any, namespace: str | None, name: str, *, timeout: float
    ) -> dict[str, Any] | None: ...

    async def create(
        self, kind: Any, namespace: str | None, body: Any, *, timeout: float
    ) -> dict[str, Any]: ...

    async def replace(self, kind: Any, obj: Any, *, timeout: float) -> dict[str, Any]: ...


@dataclass(frozen=True)
class Timing:
    """Seconds; client-go's defaults for controllers are 15, 10 and 2."""

    lease: int = 15  # whole seconds: the Lease stores leaseDurationSeconds as an integer
    renew_deadline: float = 10.0
    retry: float = 2.0

    def __post_init__(self) -> None:
        if not 0 < self.retry < self.renew_deadline < self.lease:
            raise ValueError("leader election needs 0 < retry < renew deadline < lease duration")

    @property
    def call(self) -> float:
        """How long one Lease call of a renewal may take: client-go's Lease client timeout,
        half the renew deadline and at least a second (resourcelock.NewFromKubeconfig), and
        the attempt as a whole runs until the deadline (``renew``'s timeoutCtx). Not the retry
        period: each lost term resets every informer and lists everything again before
        anything is reconciled, so renewals cut at 2 s made a leader whose apiserver answered
        Lease reads in 2-3 s under load lose term after term, and adopt nothing meanwhile."""
        return max(1.0, self.renew_deadline / 2)


def _micro_time(now: datetime) -> str:
    """A metav1.MicroTime as the apiserver writes it."""
    return now.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Elector:
    """One replica's view of the Lease ``namespace/name``."""

    def __init__(
        self,
        api: LeaseApi,
        *,
        name: str,
        namespace: str,
        identity: str,
        timing: Timing,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._api = api
        self._name = name
        self._namespace = namespace
        self.identity = identity
        self.timing = timing
        self._clock = clock
        self._wall = wall
        self._observed: tuple[Any, ...] | None = None
        self._observed_at = 0.0
        self._lease: dict[str, Any] | None = None
        self.renewed_at: float | None = None  # when this replica last held it, confirmed

    async def try_acquire_or_renew(self, timeout: float) -> bool:
        """One attempt; True when this replica holds the Lease now."""
        lease = await self._api.get(LEASES, self._namespace, self._name, timeout=timeout)
        now = self._wall()
        if lease is None:
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self._name, "namespace": self._namespace},
                "spec": self._spec(now, acquired=now, transitions=0),
            }
            try:
                self._lease = await self._api.create(LEASES, self._namespace, body, timeout=timeout)
            except AlreadyExists:
                return False
            return self._confirmed()
        spec = lease.get("spec") or {}
        record = (
            spec.get("holderIdentity"),
            spec.get("renewTime"),
            spec.get("leaseDurationSeconds"),
        )
        if record != self._observed:
            self._observed, self._observed_at = record, self._clock()
        holder = spec.get("holderIdentity") or ""
        duration = spec.get("leaseDurationSeconds") or self.timing.lease
        if (
            holder
            and holder != self.identity
            and self._observed_at + float(duration) > self._clock()
        ):
            return False
        mine = holder == self.identity
        transitions = int(spec.get("leaseTransitions") or 0) + (0 if mine else 1)
        acquired = spec.get("acquireTime") if mine else None
        updated = {**lease, "spec": self._spec(now, acquired=acquired, transitions=transitions)}
        try:
            self._lease = await self._api.replace(LEASES, updated, timeout=timeout)
        except Conflict:
            return False
        return self._confirmed()

    def _confirmed(self) -> bool:
        self.renewed_at = self._clock()
        spec = (self._lease or {}).get("spec") or {}
        self._observed = (
            spec.get("holderIdentity"),
            spec.get("renewTime"),
            spec.get("leaseDurationSeconds"),
        )
        self._observed_at = self.renewed_at
        return True

    def _spec(self, now: datetime, *, acquired: Any, transitions: int) -> dict[str, Any]:
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": self.timing.lease,
            "acquireTime": acquired or _micro_time(now),
            "renewTime": _micro_time(now),
            "leaseTransitions": transitions,
        }

    def deadline_left(self) -> float:
        """Seconds until this leader must stop for want of a confirmed renewal."""
        if self.renewed_at is None:
            return 0.0
        return self.renewed_at + self.timing.renew_deadline - self._clock()

    async def release(self) -> None:
        """Give the Lease up at once (client-go's ReleaseOnCancel): a free holder, a one-second
        duration. Only a Lease this replica holds, at the version it last wrote."""
        lease, self._lease, self.renewed_at = self._lease, None, None
        if lease is None:
            return
        spec = {**(lease.get("spec") or {})}
        spec.update(holderIdentity="", leaseDurationSeconds=1, renewTime=_micro_time(self._wall()))
        try:
            await self._api.replace(LEASES, {**lease, "spec": spec}, timeout=_RELEASE_SECONDS)
        except (ApiFailure, OSError, TimeoutError) as exc:
            log.info("lease not released", extra={"fields": {"error": str(exc)}})


async def lead(
    api: LeaseApi,
    *,
    name: str,
    namespace: str,
    identity: str,
    work: Callable[[], Coroutine[Any, Any, None]],
    timing: Timing | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """Run ``work`` whenever this replica holds the Lease, until cancelled; ``work`` is
    cancelled, and waited for, as soon as a renewal is not confirmed within the deadline."""
    elector = Elector(api, name=name, namespace=namespace, identity=identity,
                      timing=timing or Timing(), clock=clock)  # fmt: skip
    try:
        while True:
            await _acquire(elector)
            log.info("controller acquired its lease", extra={"fields": {"identity": identity}})
            task = asyncio.create_task(work())
            try:
                await _keep(elector, task)
            finally:
                await _stop(task)
            log.info("controller lost its lease", extra={"fields": {"identity": identity}})
    finally:
        await elector.release()


async def _attempt(elector: Elector, timeout: float, call: float | None = None) -> bool:
    """One attempt, given ``timeout`` seconds in all and ``call`` (at most ``timeout``) for
    each of its API calls."""
    # ``asyncio.timeout``, not ``wait_for``: on Python 3.11, ``wait_for`` returns the attempt's
    # answer and drops a cancellation that lands in the same turn of the loop (CPython
    # gh-86296), and the replica told to stop then competes for the Lease forever.
    try:
        async with asyncio.timeout(timeout):
            return await elector.try_acquire_or_renew(timeout if call is None else call)
    except (ApiFailure, OSError, TimeoutError) as exc:
        log.info(
            "lease attempt failed", extra={"fields": {"error": str(exc) or type(exc).__name__}}
        )
        return False


async def _acquire(elector: Elector) -> None:
    timing = elector.timing
    while not await _attempt(elector, timing.renew_deadline):
        await asyncio.sleep(timing.retry)


async def _keep(elector: Elector, task: asyncio.Task[None]) -> None:
    """Renew until a renewal misses its deadline or the work ends by itself."""
    timing = elector.timing
    while not task.done():
        await asyncio.wait({task}, timeout=timing.retry)
        if task.done():
            break
        while True:
            left = elector.deadline_left()
            if left <= 0:
                return  # not confirmed in time: stop acting before anyone may take over
            # Until the deadline, each call for as long as client-go allows (``Timing.call``).
            left = max(_MIN_CALL_SECONDS, left)
            if await _attempt(elector, left, min(left, timing.call)):
                break
            if elector.deadline_left() > 0:
                await asyncio.sleep(min(timing.retry, max(elector.deadline_left(), 0.0)))
    if not task.cancelled() and (failure := task.exception()) is not None:
        log.error("leading work failed; competing for the lease again",
                  exc_info=failure)  # fmt: skip


async def _stop(task: asyncio.Task[None]) -> None:
    """Cancel the work and wait until it has stopped. A cancellation that arrives while aiohttp
    reads a watch stream is sometimes absorbed by the library, so it is repeated."""
    while not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=1.0)
