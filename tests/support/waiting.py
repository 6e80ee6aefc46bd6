"""The one way tests wait: for observable state, never for a fixed time.

``eventually`` polls a check (plain or async) until it gives something truthy and returns that;
a check that never comes true fails the test with what was waited for. The deadline only turns
a hang into a failure: nothing here asserts how long anything took.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")

TIMEOUT = 20.0
INTERVAL = 0.02


async def eventually(
    check: Callable[[], T | None | Awaitable[T | None]],
    *,
    timeout: float = TIMEOUT,
    what: str = "",
    interval: float = INTERVAL,
) -> T:
    """The first truthy value of ``check``, polled until ``timeout`` (then the test fails)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        value = check()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value  # type: ignore[return-value]
        if loop.time() > deadline:
            raise AssertionError(f"not reached within {timeout}s: {what or check}")
        await asyncio.sleep(interval)
