"""Simulated upstream controllers for the fake cluster: Kueue, AppWrapper, Volcano, kubelet.

No real cluster runs in the tests, yet adopt mode is about how autowrap's objects meet these
controllers. Each simulator is an asyncio task set (watches plus one worker) that reacts to the
fake store and writes through :class:`FakeCluster` under the real controller's identity, so
every write passes the same admission (adopt-mode.md A4). Start them together::

    async with simulated(cluster, kueue={"auto_admit": False}) as sims:
        await cluster.create(APPWRAPPERS, aw)
        await sims.settle()
        await sims.kueue.admit("ns", "aw")
        await sims.settle()

:meth:`Simulators.settle` replaces sleeps: it resyncs every simulator until a whole round
writes nothing. A simulator that raises stops the others and the error surfaces from
``settle()`` or from leaving the ``async with``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from testbed.cluster.cluster import FakeCluster
from testbed.sim.appwrapper import AppWrapperController
from testbed.sim.kubelet import Kubelet, resolved_env
from testbed.sim.kueue import Kueue, NotAdmissible
from testbed.sim.runtime import Simulator, describe
from testbed.sim.volcano import Volcano

__all__ = [
    "AppWrapperController",
    "Kubelet",
    "Kueue",
    "NotAdmissible",
    "SettleError",
    "SimulatorFailed",
    "Simulators",
    "Volcano",
    "resolved_env",
    "simulated",
]

Options = bool | Mapping[str, Any]
S = TypeVar("S", bound=Simulator)


class SettleError(AssertionError):
    """The simulators kept writing (or stayed busy) past the bound; says who and what."""


class SimulatorFailed(RuntimeError):
    """A simulator raised; the original exception is the ``__cause__``."""


@dataclass
class Simulators:
    """The running simulators and :meth:`settle`. Reading a switched-off one raises."""

    cluster: FakeCluster
    running: dict[str, Simulator] = field(default_factory=dict)
    _tasks: list[asyncio.Task[Any]] = field(default_factory=list)
    _failure: BaseException | None = None

    def _get(self, cls: type[S]) -> S:
        for sim in self.running.values():
            if isinstance(sim, cls):
                return sim
        raise LookupError(f"the {cls.__name__} simulator is switched off")

    @property
    def kueue(self) -> Kueue:
        return self._get(Kueue)

    @property
    def appwrapper(self) -> AppWrapperController:
        return self._get(AppWrapperController)

    @property
    def volcano(self) -> Volcano:
        return self._get(Volcano)

    @property
    def kubelet(self) -> Kubelet:
        return self._get(Kubelet)

    def check(self) -> None:
        """Raise :class:`SimulatorFailed` if any simulator task died."""
        if self._failure is not None:
            raise SimulatorFailed(f"a simulator failed: {self._failure!r}") from self._failure

    async def settle(
        self,
        *,
        rounds: int = 50,
        timeout: float = 10.0,
        idle: Callable[[], bool] | None = None,
    ) -> None:
        """Wait until no simulator has work left: resync all, drain, repeat until a round
        leaves the store's resourceVersion unchanged (nothing was written by anyone).

        ``idle``: another actor that must be quiet too (autowrap's controller under test);
        settling also waits, round after round, until it returns true.

        Raises :class:`SettleError` naming the pending keys and latest writes when that takes
        more than ``rounds`` writing rounds or ``timeout`` seconds (a livelock, or a hung reconcile).
        """
        store = self.cluster.store
        written = 0
        try:
            async with asyncio.timeout(timeout):
                while written < rounds:
                    self.check()
                    before = store.resource_version
                    for sim in self.running.values():
                        sim.resync()
                    await self._drain()
                    self.check()
                    if store.resource_version != before:
                        written += 1
                    elif idle is None or idle():
                        return
                    else:
                        await asyncio.sleep(0.005)  # the other actor may be awaiting I/O
        except TimeoutError:
            self.check()
            raise SettleError(f"not settled after {timeout}s:\n{describe(self.running)}") from None
        raise SettleError(f"still writing after {rounds} rounds:\n{describe(self.running)}")

    async def _drain(self) -> None:
        """Until every queue is empty and stays empty while watch events are delivered."""
        quiet = 0
        while quiet < 3:
            await asyncio.gather(*(s.wait_idle() for s in self.running.values()))
            self.check()
            await asyncio.sleep(0)
            quiet = quiet + 1 if all(s.idle for s in self.running.values()) else 0

    def _on_done(self, task: asyncio.Task[Any]) -> None:
        if task.cancelled() or self._failure is not None:
            return
        self._failure = task.exception() or RuntimeError(f"{task.get_name()} stopped")
        for other in self._tasks:
            other.cancel()
        for sim in self.running.values():
            sim._idle.set()  # wake settle() so it reports the failure


def _options(value: Options) -> dict[str, Any] | None:
    if value is False:
        return None
    return {} if value is True else dict(value)


@contextlib.asynccontextmanager
async def simulated(
    cluster: FakeCluster,
    *,
    kueue: Options = True,
    appwrapper: Options = True,
    volcano: Options = True,
    kubelet: Options = True,
) -> AsyncIterator[Simulators]:
    """Run the chosen simulators for the block. Each option is ``True`` (defaults), ``False``
    (off) or the keyword arguments of its class, e.g. ``kueue={"flavors": {...}}``."""
    sims = Simulators(cluster)
    chosen: list[tuple[type[Simulator], Options]] = [
        (Kueue, kueue),
        (AppWrapperController, appwrapper),
        (Volcano, volcano),
        (Kubelet, kubelet),
    ]
    for cls, value in chosen:
        if (opts := _options(value)) is not None:
            sim = cls(cluster, **opts)
            sims.running[sim.name] = sim
    for name, sim in sims.running.items():
        for i, start in enumerate(sim.tasks()):
            task = asyncio.create_task(start(), name=f"sim-{name}-{i}")
            task.add_done_callback(sims._on_done)
            sims._tasks.append(task)
    try:
        yield sims
    except BaseException as exc:
        if sims._failure is not None:
            exc.add_note(f"meanwhile a simulator failed: {sims._failure!r}")
        raise
    finally:
        for task in sims._tasks:
            task.cancel()
        await asyncio.gather(*sims._tasks, return_exceptions=True)
    sims.check()
