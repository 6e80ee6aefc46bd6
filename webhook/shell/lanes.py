"""Large admission requests are computed off the serving event loop, a few at a time.

A review's cost grows with its object: an AppWrapper of 24 000 small containers takes about a
second of CPU and a hundred MiB while autowrap plumbs and checks it. On the event loop, that
second would stall every other request, the probes and ``/metrics`` with it, and eight such
requests at once would exceed the pod's memory limit. So a request whose body reaches
``HEAVY_BODY_BYTES`` takes one of ``LANES`` lanes: its review runs on a worker thread with an
event loop of its own, while the serving loop goes on answering probes, metrics and small
requests (the interpreter hands the lock back to it every few milliseconds). A request that
finds every lane busy waits for one within its own budget; the ones that wait too long are
refused, never queued past the apiserver's deadline.

The review's calls to the Kubernetes API still run on the serving loop, where the client and
its connections live: ``_OnServingLoop`` carries each call there and its answer back.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Final, TypeVar

T = TypeVar("T")

# Typical submissions weigh a few KiB; a review of 32 KiB may hold a thousand containers, and
# computing one takes tens of milliseconds.
HEAVY_BODY_BYTES: Final = 32 * 1024
LANES: Final = 2


class _OnServingLoop:
    """Any object with coroutine methods, called from another thread's event loop: each call
    runs on the loop the object belongs to, and is awaited where it was made."""

    def __init__(self, target: Any, loop: asyncio.AbstractEventLoop) -> None:
        self._target = target
        self._loop = loop

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._target, name)

        async def call(*args: Any, **kwargs: Any) -> Any:
            future = asyncio.run_coroutine_threadsafe(method(*args, **kwargs), self._loop)
            return await asyncio.wrap_future(future)

        return call


class Lanes:
    """At most ``lanes`` heavy reviews at once, each on a worker thread."""

    def __init__(self, lanes: int = LANES) -> None:
        self._free = asyncio.Semaphore(lanes)
        # As many threads as lanes: a review whose caller went away still holds its thread
        # until it ends, so no more than ``lanes`` ever run, whatever the callers do.
        self._pool = ThreadPoolExecutor(max_workers=lanes, thread_name_prefix="autowrap-heavy")
        self.busy = 0

    async def run(
        self,
        work: Callable[[Any], Coroutine[Any, Any, T]],
        cluster: Any,
        *,
        wait: float,
    ) -> T | None:
        """``work(cluster)`` on a lane; None when no lane came free within ``wait`` seconds.
        ``cluster`` (the API client, or None) is handed to ``work`` callable from its thread."""
        try:
            async with asyncio.timeout(max(wait, 0.0)):
                await self._free.acquire()
        except TimeoutError:
            return None
        loop = asyncio.get_running_loop()
        bridged = None if cluster is None else _OnServingLoop(cluster, loop)
        self.busy += 1
        try:
            return await loop.run_in_executor(self._pool, lambda: asyncio.run(work(bridged)))
        finally:
            self.busy -= 1
            self._free.release()

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
