"""A replica says it leads only while its term runs: a term stopped at any of its steps, the
first ones included, says so (``Controller.leading``, the ``autowrap_controller_leading``
metric), whether the Lease was lost or the replica shut down."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.adopt.harness import adopting, eventually

# The API discovery a term starts with (which version of Kueue's API the cluster serves).
DISCOVERY = r"^/apis$"


async def test_a_replica_stopped_while_its_term_starts_no_longer_says_it_leads(
    tmp_path: Path,
) -> None:
    async with adopting(tmp_path) as cluster:
        answer = asyncio.Event()
        discovery = cluster.api.inject("GET", DISCOVERY, None, hold=answer)
        try:
            a = await cluster.start_controller("replica-a")
            await eventually(lambda: discovery.hits, what="a's term looks up Kueue's version")
            assert a.leading.is_set()
            await cluster.stop_controller(a)
        finally:
            answer.set()
        assert not a.leading.is_set()
        assert not a.stats().leading
