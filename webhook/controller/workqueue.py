"""The controller's work queue: each key at most once in the queue and once in work.

As client-go's workqueue (k8s.io/client-go/util/workqueue/queue.go): a key added while it is
being worked on is queued again once that work ends, so two workers never reconcile the same
object at once, and a burst of events for one object costs one reconcile. Failed keys come
back after an exponential backoff per key, reset when the key succeeds.

Changes heard from watches can be batched (``add_batched``): the first one starts a short
wait, and every change to the same key during it rides on that one reconcile, as the Job
controller batches pod updates (pkg/controller/job/job_controller.go, syncJobBatchPeriod).
A Volcano Job's pods arrive together, and the scheduler, Volcano and the AppWrapper
controller write in quick succession after each step.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Hashable

BASE_DELAY = 0.05
MAX_DELAY = 60.0


class WorkQueue:
    def __init__(self) -> None:
        self._queue: asyncio.Queue[Hashable] = asyncio.Queue()
        self._queued: set[Hashable] = set()
        self._working: set[Hashable] = set()
        self._again: set[Hashable] = set()
        self._failures: dict[Hashable, int] = {}
        self._timers: dict[Hashable, asyncio.TimerHandle] = {}
        self._batched: dict[Hashable, asyncio.TimerHandle] = {}

    def __len__(self) -> int:
        return len(self._queued)

    def add(self, key: Hashable) -> None:
        if key in self._working:
            self._again.add(key)
        elif key not in self._queued:
            self._queued.add(key)
            self._queue.put_nowait(key)

    def add_after(self, key: Hashable, delay: float) -> None:
        """Queue ``key`` in ``delay`` seconds (an earlier pending timer for it wins)."""
        self._later(self._timers, key, delay)

    def add_batched(self, key: Hashable, period: float) -> None:
        """Queue ``key`` at the end of a batch period started by the first change to it; a key
        already waiting in a batch, or in the queue, is left as it is."""
        if key not in self._queued:
            self._later(self._batched, key, period)

    def _later(
        self, timers: dict[Hashable, asyncio.TimerHandle], key: Hashable, delay: float
    ) -> None:
        if key in timers:
            return

        def fire() -> None:
            timers.pop(key, None)
            self.add(key)

        timers[key] = asyncio.get_running_loop().call_later(delay, fire)

    def retry(self, key: Hashable) -> float:
        """Queue a failed key after its backoff; returns the delay."""
        failures = self._failures.get(key, 0)
        self._failures[key] = failures + 1
        delay = min(BASE_DELAY * 2.0**failures, MAX_DELAY)
        self.add_after(key, delay)
        return delay

    def forget(self, key: Hashable) -> None:
        self._failures.pop(key, None)

    async def get(self) -> Hashable:
        key = await self._queue.get()
        self._queued.discard(key)
        self._working.add(key)
        return key

    def done(self, key: Hashable) -> None:
        self._working.discard(key)
        if key in self._again:
            self._again.discard(key)
            self.add(key)

    def idle(self) -> bool:
        """Nothing queued, batched or under way (keys waiting on a retry or requeue timer are
        not work yet)."""
        return not self._queued and not self._working and not self._batched

    def close(self) -> None:
        for timer in (*self._timers.values(), *self._batched.values()):
            with contextlib.suppress(Exception):
                timer.cancel()
        self._timers.clear()
        self._batched.clear()
