"""What the controller process tells the serving process: its metrics, over a socket pair.

``autowrap serve`` answers admission in one process and runs the adopt-mode controller in a
second one (``webhook.app``), so that no reconcile, informer list or watch event ever delays an
admission answer. The controller's numbers still belong on the one ``/metrics`` endpoint and its
missing resources on ``/readyz``: the controller process sends them, a line of JSON a second,
and the serving process feeds them into the same series an in-process controller fills. The
line carries the controller's counters as they stand (``ControllerStats``) and the reconcile and
API call durations observed since the last line.

The other way, the serving process sends a nudge when it has loaded a new policy set, and the
controller process reads the files again at once. The socket is also how each side knows the
other is gone: the controller process stops when the serving process's end closes (the serving
process was killed and cannot stop it), and the serving process restarts a controller process
that ended.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import orjson

from webhook.shell.metrics import ControllerStats, Metrics

log = logging.getLogger("autowrap")

# How often the controller process sends a line (the scrape interval is 15 s or more).
INTERVAL_SECONDS = 1.0
# A line longer than this is not the controller's: the reading side stops reading.
MAX_LINE_BYTES = 1 << 20
# What the serving process sends when it has loaded a new policy set: the controller process
# reads the same files at once, rather than at its next turn, so that no object admission
# prepared under the new set is judged by the controller under the old one.
RELOAD = b"reload\n"


@dataclass
class Report:
    """One line: the counters now, and the durations observed since the last line."""

    stats: ControllerStats = field(default_factory=ControllerStats)
    absent: list[str] = field(default_factory=list)
    reconciles: list[float] = field(default_factory=list)
    api_calls: list[tuple[str, int | None, float]] = field(default_factory=list)

    def encode(self) -> bytes:
        return orjson.dumps({
            "stats": asdict(self.stats), "absent": self.absent,
            "reconciles": [round(s, 6) for s in self.reconciles],
            "api_calls": [[c, code, round(s, 6)] for c, code, s in self.api_calls],
        }) + b"\n"  # fmt: skip

    @classmethod
    def decode(cls, line: bytes) -> Report:
        data = orjson.loads(line)
        raw = data.get("stats") or {}
        stats = ControllerStats(
            leading=bool(raw.get("leading")), queue_depth=int(raw.get("queue_depth") or 0),
            reconciles=int(raw.get("reconciles") or 0), errors=int(raw.get("errors") or 0),
            adopted=int(raw.get("adopted") or 0), released=int(raw.get("released") or 0),
            failed={str(k): int(v) for k, v in (raw.get("failed") or {}).items()},
            resources={str(k): bool(v) for k, v in (raw.get("resources") or {}).items()},
            watch_events={str(k): (int(v[0]), int(v[1]))
                          for k, v in (raw.get("watch_events") or {}).items()},
        )  # fmt: skip
        return cls(
            stats=stats,
            absent=[str(a) for a in data.get("absent") or ()],
            reconciles=[float(s) for s in data.get("reconciles") or ()],
            api_calls=[(str(c), int(code) if code is not None else None, float(s))
                       for c, code, s in data.get("api_calls") or ()],
        )  # fmt: skip


def pair() -> tuple[socket.socket, socket.socket]:
    """The serving process's end, and the controller process's end (inheritable, for the child)."""
    ours, theirs = socket.socketpair()
    theirs.set_inheritable(True)
    return ours, theirs


class Sender:
    """The controller process's side: gathers what the controller observes, sends it each
    ``interval``; ``closed`` is set when the serving process's end goes away."""

    def __init__(self, fd: int, *, interval: float = INTERVAL_SECONDS) -> None:
        self._sock = socket.socket(fileno=fd)
        self._sock.setblocking(False)
        self._interval = interval
        self._reconciles: list[float] = []
        self._api_calls: list[tuple[str, int | None, float]] = []
        self.stats: Callable[[], ControllerStats] = ControllerStats
        self.absent: Callable[[], list[str]] = list
        # Called when the serving process has loaded a new policy set.
        self.on_reload: Callable[[], None] = lambda: None
        self.closed = asyncio.Event()

    def reconciled(self, seconds: float) -> None:
        self._reconciles.append(seconds)

    def api_call(self, call: str, code: int | None, seconds: float) -> None:
        self._api_calls.append((call, code, seconds))

    def report(self) -> Report:
        """What the next line says; the durations are handed over once."""
        report = Report(self.stats(), self.absent(), self._reconciles, self._api_calls)
        self._reconciles, self._api_calls = [], []
        return report

    async def run(self) -> None:
        """Send a line each interval until cancelled or the other end is gone (then a last
        line is not sent: nobody reads it)."""
        loop = asyncio.get_running_loop()
        watching = asyncio.create_task(self._watch_peer())
        try:
            while not self.closed.is_set():
                try:
                    await loop.sock_sendall(self._sock, self.report().encode())
                except OSError:
                    self.closed.set()
                    break
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self._interval):
                        await self.closed.wait()
        finally:
            watching.cancel()
            self._sock.close()

    async def _watch_peer(self) -> None:
        """What the serving process writes: a reload nudge (``RELOAD``) for each policy set it
        loaded; EOF when its end closed."""
        loop = asyncio.get_running_loop()
        with contextlib.suppress(OSError):
            while await loop.sock_recv(self._sock, 4096):
                self.on_reload()
        self.closed.set()


class Receiver:
    """The serving process's side: feeds each line into ``metrics`` and keeps what readiness
    and the controller series read (``stats``, ``absent``)."""

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics
        self.latest = ControllerStats()
        self.missing: list[str] = []
        self._writer: asyncio.StreamWriter | None = None

    @property
    def connected(self) -> bool:
        """Whether a controller process's relay is being read now."""
        return self._writer is not None

    def nudge(self) -> None:
        """Have the controller process read the policy files again now (nothing when none
        runs: the next one reads them as it starts)."""
        if self._writer is not None and not self._writer.is_closing():
            self._writer.write(RELOAD)

    def stats(self) -> ControllerStats:
        return self.latest

    def absent(self) -> list[str]:
        return self.missing

    def apply(self, report: Report) -> None:
        self.latest, self.missing = report.stats, report.absent
        for seconds in report.reconciles:
            self._metrics.reconcile_latency.observe(seconds)
        for call, code, seconds in report.api_calls:
            self._metrics.api_call(call, code, seconds)

    def gone(self) -> None:
        """The controller process ended: it leads nothing, whatever it said last."""
        self.latest = ControllerStats(
            reconciles=self.latest.reconciles, errors=self.latest.errors,
            adopted=self.latest.adopted, released=self.latest.released,
            failed=self.latest.failed, watch_events=self.latest.watch_events,
        )  # fmt: skip

    async def follow(self, sock: socket.socket) -> None:
        """Read lines until the other end closes."""
        reader, writer = await asyncio.open_unix_connection(sock=sock, limit=MAX_LINE_BYTES)
        self._writer = writer
        try:
            while True:
                try:
                    line = await reader.readline()
                except (ValueError, asyncio.LimitOverrunError, OSError) as exc:
                    log.warning("the controller process's report could not be read",
                                extra={"fields": {"error": str(exc)}})  # fmt: skip
                    return
                if not line:
                    return
                try:
                    self.apply(Report.decode(line))
                except (orjson.JSONDecodeError, TypeError, ValueError, IndexError) as exc:
                    log.warning("the controller process sent a line that is not a report",
                                extra={"fields": {"error": str(exc)}})  # fmt: skip
        finally:
            self._writer = None
            writer.close()


def inherited_fd(value: str) -> int:
    """The descriptor number handed to the controller process, checked to be open."""
    fd = int(value)
    os.fstat(fd)
    return fd
