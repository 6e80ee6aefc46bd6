"""The controller's work queue: one reconcile per burst of changes to a key."""

from __future__ import annotations

import asyncio

from webhook.controller.workqueue import WorkQueue


async def test_changes_within_a_batch_period_cost_one_reconcile() -> None:
    queue = WorkQueue()
    for _ in range(5):  # a Volcano Job's pods, heard one after the other
        queue.add_batched("job", 0.05)
    queue.add_batched("other", 0.05)
    assert not queue.idle()  # batched work is work: tests and the bench wait for it
    assert len(queue) == 0

    first = await asyncio.wait_for(queue.get(), 1)
    second = await asyncio.wait_for(queue.get(), 1)
    assert {first, second} == {"job", "other"}
    queue.done(first)
    queue.done(second)
    assert queue.idle()
    assert len(queue) == 0


async def test_a_change_during_its_reconcile_brings_the_key_back_once() -> None:
    queue = WorkQueue()
    queue.add_batched("job", 0.01)
    key = await asyncio.wait_for(queue.get(), 1)
    queue.add_batched("job", 0.01)
    queue.add_batched("job", 0.01)
    await asyncio.sleep(0.05)
    assert len(queue) == 0  # not twice at once
    queue.done(key)
    assert len(queue) == 1
    assert await asyncio.wait_for(queue.get(), 1) == "job"
