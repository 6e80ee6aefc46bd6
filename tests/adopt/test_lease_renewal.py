"""A leader keeps its term while the apiserver answers its Lease calls slower than the retry
period but well within the renew deadline.

Each lost term costs the whole sync again: the informers start over from empty caches and list
every Job, AppWrapper, Workload and waiting pod, and nothing is reconciled until they have
(``Controller.lead``). With every renewal attempt cut at the retry period (2 s), a busy
apiserver (or a busy leader) that answered a Lease read in 2.5 s cost the term, and the next
term's lists made both busier: in ``bench.adopt_cost`` at 2,000 Jobs on a loaded machine the
replicas lost terms to "get leases: no answer within 2.0s", and a Job created after a restart
waited through such terms to be adopted. client-go gives each Lease request half the renew
deadline (``resourcelock.NewFromKubeconfig``: ``max(1s, RenewDeadline/2)``) and each attempt
until the renew deadline, so the same apiserver never costs its leader the term.

The slow apiserver is modelled, not waited for: each Lease call given less time than the
latency gets the client's timeout error at once, and a call allowed the latency gets the
cluster's answer at once. Whether the term survives depends on the timeouts the election
gives, never on how fast this machine runs.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from tests.adopt.harness import adopting, eventually
from webhook.controller import leader
from webhook.core.ports import ApiFailure
from webhook.model import names
from webhook.shell.kube import KubeClient

# The retry period, the renew deadline and the lease duration, scaled down from client-go's
# 2, 10 and 15 s; the Lease calls take longer than the retry period, well within half the
# renew deadline (one attempt is a read and a write).
TIMING = leader.Timing(lease=3, renew_deadline=2.0, retry=0.2)
LATENCY = 0.5
RENEWALS = 4


class _SlowLeases:
    """The Lease API of the fake cluster as a busy apiserver serves it: every call is answered
    after ``LATENCY`` seconds, so a call that allows less gets no answer."""

    def __init__(self, client: KubeClient) -> None:
        self.client = client
        self.timeouts: list[float] = []
        self.renewed = 0

    def _answers(self, call: str, timeout: float) -> None:
        self.timeouts.append(timeout)
        if timeout < LATENCY:
            raise ApiFailure(call, None, f"no answer within {timeout:.1f}s")

    async def get(self, kind: Any, namespace: str | None, name: str, *, timeout: float) -> Any:
        self._answers("get leases", timeout)
        return await self.client.get(kind, namespace, name, timeout=timeout)

    async def create(self, kind: Any, namespace: str | None, body: Any, *, timeout: float) -> Any:
        self._answers("create leases", timeout)
        return await self.client.create(kind, namespace, body, timeout=timeout)

    async def replace(self, kind: Any, obj: Any, *, timeout: float) -> Any:
        self._answers("replace leases", timeout)
        written = await self.client.replace(kind, obj, timeout=timeout)
        self.renewed += 1
        return written


async def test_lease_calls_slower_than_the_retry_period_do_not_cost_the_term(
    tmp_path: Path,
) -> None:
    async with adopting(tmp_path) as cluster:
        client = await KubeClient.connect(str(cluster.kubeconfig))
        api = _SlowLeases(client)
        terms: list[asyncio.Event] = []

        async def term() -> None:
            ended = asyncio.Event()
            terms.append(ended)
            try:
                await asyncio.Event().wait()
            finally:
                ended.set()

        replica = asyncio.create_task(
            leader.lead(api, name=names.CONTROLLER_LEASE, namespace="autowrap-system",
                        identity="replica-a", work=term, timing=TIMING)
        )  # fmt: skip
        try:
            await eventually(lambda: bool(terms), what="replica-a leads")
            held = api.renewed
            # Renewed again and again, or the term ended for want of a renewal: whichever
            # comes first (the deadline runs out after a couple of retry periods).
            await eventually(
                lambda: api.renewed >= held + RENEWALS or terms[0].is_set(),
                what="renewals, or the term lost",
            )
            assert not terms[0].is_set(), (
                f"the term was lost: Lease calls were given {sorted(set(api.timeouts))} s, "
                f"the apiserver answers in {LATENCY} s"
            )
            assert len(terms) == 1
        finally:
            replica.cancel()
            await asyncio.gather(replica, return_exceptions=True)
            await client.close()
