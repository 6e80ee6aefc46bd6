"""A replica told to stop stops, whenever the word arrives.

Python 3.11's ``asyncio.wait_for`` returns the inner result and drops the cancellation when
both land in the same turn of the event loop (CPython gh-86296, fixed in 3.12 by building
``wait_for`` on ``asyncio.timeout``). A Lease attempt that answered just as its replica was
told to stop then kept competing for the Lease forever: a shutdown that never ends, and a
test cluster that hung in its teardown under load."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from tests.adopt.harness import adopting, eventually
from webhook.controller import leader
from webhook.model import names
from webhook.shell.kube import KubeClient


class _StopAsItAnswers:
    """The Lease API, through the real client; the first read that answers tells the
    competing replica to stop in the same turn of the event loop."""

    def __init__(self, client: KubeClient) -> None:
        self.client = client
        self.replica: asyncio.Task[None] | None = None
        self.told = False

    async def get(self, kind: Any, namespace: str | None, name: str, *, timeout: float) -> Any:
        lease = await self.client.get(kind, namespace, name, timeout=timeout)
        if not self.told and self.replica is not None:
            self.told = True
            asyncio.get_running_loop().call_soon(self.replica.cancel)
        return lease

    async def create(self, kind: Any, namespace: str | None, body: Any, *, timeout: float) -> Any:
        return await self.client.create(kind, namespace, body, timeout=timeout)

    async def replace(self, kind: Any, obj: Any, *, timeout: float) -> Any:
        return await self.client.replace(kind, obj, timeout=timeout)


async def _idle() -> None:
    await asyncio.Event().wait()


async def test_a_stop_that_arrives_as_a_lease_attempt_answers_is_not_lost(tmp_path: Path) -> None:
    async with adopting(tmp_path) as cluster:
        holder = await cluster.start_controller("replica-a")
        await eventually(lambda: holder.leading.is_set(), what="replica-a leads")
        client = await KubeClient.connect(str(cluster.kubeconfig))
        try:
            api = _StopAsItAnswers(client)
            replica = asyncio.create_task(
                leader.lead(
                    api, name=names.CONTROLLER_LEASE, namespace="autowrap-system",
                    identity="replica-b", work=_idle, timing=leader.Timing(3, 2, 1),
                )
            )  # fmt: skip
            api.replica = replica
            await eventually(lambda: api.told, what="the stop told as the Lease was read")
            await eventually(lambda: replica.done(), what="replica-b stopped")
            assert replica.cancelled()
            assert holder.leading.is_set()
        finally:
            await client.close()
