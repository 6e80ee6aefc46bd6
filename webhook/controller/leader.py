"""One active controller among the replicas, through a ``coordination.k8s.io/v1`` Lease.

The official client's leader election (``kubernetes.aio.leaderelection``) runs the loop; its
``LeaseLock.create`` passes ``pretty=True``, which the client's own parameter validation
refuses in version 37, so no replica could ever create the Lease. ``_LeaseLock`` creates it
without that argument and leaves everything else to the library.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from kubernetes.aio import client
from kubernetes.aio.client.exceptions import ApiException
from kubernetes.aio.leaderelection import electionconfig, leaderelection
from kubernetes.aio.leaderelection.resourcelock.leaselock import LeaseLock

log = logging.getLogger("autowrap")


class _LeaseLock(LeaseLock):
    async def create(self, name: str, namespace: str, election_record: Any) -> bool:
        body = client.V1Lease(
            metadata=client.V1ObjectMeta(name=name), spec=self.update_lease(election_record)
        )
        try:
            await self.api_instance.create_namespaced_lease(namespace, body)
        except ApiException as exc:
            log.info("lease not created", extra={"fields": {"status": exc.status}})
            return False
        return True


async def lead(
    api_client: Any,
    *,
    name: str,
    namespace: str,
    identity: str,
    work: Callable[[], Coroutine[Any, Any, None]],
    lease_seconds: int = 15,
    renew_seconds: int = 10,
    retry_seconds: int = 2,
) -> None:
    """Run ``work`` whenever this replica holds the Lease, until cancelled; ``work`` is
    cancelled as soon as the Lease is lost, and the election starts over."""
    lock = _LeaseLock(name, namespace, identity, api_client)
    # The library starts ``work`` as a task of its own and cancels it only when the Lease is
    # lost, not when the election itself is cancelled: keep hold of it, so that shutdown stops
    # the informers and workers too.
    leading: set[asyncio.Task[Any]] = set()

    async def tracked() -> None:
        task = asyncio.current_task()
        assert task is not None
        leading.add(task)
        try:
            await work()
        finally:
            leading.discard(task)

    async def stopped() -> None:
        log.info("controller lost its lease", extra={"fields": {"identity": identity}})

    try:
        while True:
            config = electionconfig.Config(
                lock, lease_seconds, renew_seconds, retry_seconds, tracked, stopped
            )
            election = leaderelection.LeaderElection(config)
            try:
                await election.run()
            except ApiException as exc:
                log.warning("leader election failed, retrying",
                            extra={"fields": {"status": exc.status}})  # fmt: skip
            except (OSError, TimeoutError, ValueError) as exc:
                log.warning(
                    "leader election failed, retrying", extra={"fields": {"error": str(exc)}}
                )
            await asyncio.sleep(retry_seconds)
    finally:
        pending = set(leading)
        while pending:  # cancelled again if a cancellation was absorbed (see run.cancel_all)
            for task in pending:
                task.cancel()
            _, pending = await asyncio.wait(pending, timeout=1.0)
