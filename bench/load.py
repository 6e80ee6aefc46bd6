"""Server processes and the load generator.

Each server runs in its own process, started the way it would be in production (autowrap by
its real CLI), and is loaded from this process over TLS with keep-alive, as kube-apiserver
does: one connection pool per level sized to the concurrency, SNI set to the Service name, the
generated CA trusted, ``?timeout=10s`` on the URL and a 10 s client timeout (the apiserver's
default webhook timeout). Memory is the server's own resident set, read from /proc.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from bench.payloads import Expect, Payload

REPO = Path(__file__).resolve().parent.parent
SNI = "autowrap.autowrap-system.svc"
HOST = "127.0.0.1"
TIMEOUT_SECONDS = 10
ERROR_SAMPLES = 3


def free_port() -> int:
    """A loopback port free right now; the server binds it a moment later."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        port: int = s.getsockname()[1]
        return port


def family(pid: int) -> list[int]:
    """A process and its children: ``autowrap serve`` runs its controller as a child process,
    and what autowrap costs is what both cost."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children", encoding="ascii") as f:
            return [pid, *(int(child) for child in f.read().split())]
    except OSError:
        return [pid]


def _rss_kib(pid: int, field: str = "VmRSS") -> int | None:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def rss_mib(pid: int) -> float | None:
    """VmRSS of a process and its children in MiB, or None once it is gone."""
    found = [_rss_kib(p) for p in family(pid)]
    if found[0] is None:
        return None
    return sum(k for k in found if k is not None) / 1024


def _cpu_ticks(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            fields = f.read().rpartition(")")[2].split()
    except OSError:
        return None
    return int(fields[11]) + int(fields[12])


def cpu_seconds(pid: int) -> float | None:
    """User plus system CPU time a process and its children have used so far
    (/proc/<pid>/stat), or None once it is gone."""
    found = [_cpu_ticks(p) for p in family(pid)]
    if found[0] is None:
        return None
    return sum(t for t in found if t is not None) / os.sysconf("SC_CLK_TCK")


def client_tls(ca_file: Path) -> ssl.SSLContext:
    """What the apiserver does with the webhook's caBundle: trust only that CA."""
    context = ssl.create_default_context(cafile=str(ca_file))
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


@dataclass
class Process:
    """A server started by the bench; stopped with SIGTERM (then SIGKILL) by ``stop``."""

    name: str
    argv: list[str]
    port: int
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None
    # The checkout whose code the process runs (another version's, for a comparison).
    repo: Path = REPO

    def start(self) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(self.repo), env.get("PYTHONPATH")]))
        env["PYTHONUNBUFFERED"] = "0"
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                self.argv, cwd=self.repo, env=env, stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )  # fmt: skip

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, lines: int = 20) -> str:
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, grace: float = 15.0) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


async def wait_ready(
    process: Process, url: str, ssl_context: ssl.SSLContext | None, timeout: float = 60.0
) -> None:
    """Poll ``url`` until it answers 200; fail with the server's log if it dies or never does."""
    deadline = time.monotonic() + timeout
    connector = aiohttp.TCPConnector(ssl=ssl_context if ssl_context is not None else False)
    async with aiohttp.ClientSession(connector=connector) as session:
        while time.monotonic() < deadline:
            if not process.alive():
                raise RuntimeError(f"{process.name} exited:\n{process.log_tail()}")
            with contextlib.suppress(aiohttp.ClientError, OSError, asyncio.TimeoutError):
                kwargs: dict[str, Any] = {"server_hostname": SNI} if ssl_context else {}
                async with session.get(url, timeout=aiohttp.ClientTimeout(total=2), **kwargs) as r:
                    if r.status == 200:
                        return
            await asyncio.sleep(0.1)
    raise RuntimeError(f"{process.name} not ready within {timeout:.0f}s:\n{process.log_tail()}")


# --- checking answers --------------------------------------------------------------------------


def check_answer(status: int, body: bytes, uid: str, expect: Expect | None) -> str | None:
    """None for a correct answer, else a short description of what is wrong.

    ``expect`` None means "the floor": any well-formed ``allowed: true``.
    """
    if status != 200:
        return f"HTTP {status}: {body[:120]!r}"
    try:
        review = orjson.loads(body)
        response = review["response"]
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return f"not an AdmissionReview: {body[:120]!r}"
    if review.get("apiVersion") != "admission.k8s.io/v1" or review.get("kind") != "AdmissionReview":
        return "wrong apiVersion/kind in the answer"
    if response.get("uid") != uid:
        return f"uid {response.get('uid')!r} answered for {uid!r}"
    wanted = expect or Expect(allowed=True)
    if response.get("allowed") is not wanted.allowed:
        return f"allowed={response.get('allowed')} ({_message(response)})"
    if wanted.patched and response.get("patchType") != "JSONPatch":
        return "no JSONPatch in the answer"
    code = (response.get("status") or {}).get("code")
    if wanted.code is not None and code != wanted.code:
        return f"status.code {code} instead of {wanted.code} ({_message(response)})"
    if wanted.message_starts and not _message(response).startswith(wanted.message_starts):
        return f"unexpected message: {_message(response)}"
    if wanted.gate:
        gated = _gates_added(response, wanted.gate)
        if gated != wanted.gated:
            return f"the JSONPatch adds the gate {wanted.gate!r} {gated} times, not {wanted.gated}"
    return None


def _gates_added(response: dict[str, Any], gate: str) -> int:
    """How many ``schedulingGates`` lists the answer's JSONPatch adds ``gate`` to (adding the
    whole list, or one entry of it)."""
    try:
        ops = orjson.loads(base64.b64decode(response.get("patch") or ""))
    except (ValueError, orjson.JSONDecodeError):
        return 0
    wanted = {"name": gate}
    added = 0
    for op in ops if isinstance(ops, list) else []:
        if not isinstance(op, dict) or op.get("op") != "add":
            continue
        path, value = str(op.get("path", "")), op.get("value")
        whole_list = value if isinstance(value, list) and path.endswith("/schedulingGates") else []
        if wanted in whole_list or ("/schedulingGates/" in path and value == wanted):
            added += 1
    return added


def _message(response: dict[str, Any]) -> str:
    return str((response.get("status") or {}).get("message", ""))[:160]


# --- one level -----------------------------------------------------------------------------------


@dataclass
class LevelResult:
    server: str
    payload: str
    concurrency: int
    requests: int
    errors: int
    seconds: float
    rps: float
    p50_ms: float
    p95_ms: float
    p99_ms: float
    max_ms: float
    rss_peak_mib: float | None
    # Server CPU per request: the cost that does not depend on the load generator's speed.
    cpu_ms_per_request: float | None
    error_samples: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile: an observed latency, never an interpolation."""
    if not sorted_values:
        return 0.0
    rank = max(1, min(len(sorted_values), int(-(-q * len(sorted_values) // 100))))
    return sorted_values[rank - 1]


class RssSampler:
    """Peak VmRSS of a process while a level runs, sampled every 20 ms."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak: float | None = rss_mib(pid)
        self._task: asyncio.Task[None] | None = None

    async def _sample(self) -> None:
        while True:
            value = rss_mib(self.pid)
            if value is not None and (self.peak is None or value > self.peak):
                self.peak = value
            await asyncio.sleep(0.02)

    def __enter__(self) -> RssSampler:
        self._task = asyncio.get_running_loop().create_task(self._sample())
        return self

    def __exit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
        value = rss_mib(self.pid)
        if value is not None and (self.peak is None or value > self.peak):
            self.peak = value


async def run_level(
    *,
    server: Process,
    base_url: str,
    tls: ssl.SSLContext,
    payload: Payload,
    expect: Expect | None,
    concurrency: int,
    max_requests: int,
    max_seconds: float,
) -> LevelResult:
    """``concurrency`` workers on one keep-alive pool until ``max_requests`` or ``max_seconds``.

    The pool is opened (TLS handshakes done) before the clock starts: kube-apiserver keeps its
    connections to a webhook alive, so steady state is what matters.
    """
    connector = aiohttp.TCPConnector(
        limit=concurrency, ssl=tls, keepalive_timeout=60, enable_cleanup_closed=True
    )
    timeout = aiohttp.ClientTimeout(total=TIMEOUT_SECONDS)
    url = f"{base_url}{payload.path}?timeout={TIMEOUT_SECONDS}s"
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    latencies: list[float] = []
    errors: list[str] = []
    issued = 0
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        await _open_pool(session, base_url, concurrency)
        started = time.perf_counter()
        deadline = started + max_seconds

        async def worker() -> None:
            nonlocal issued
            while issued < max_requests and time.perf_counter() < deadline:
                issued += 1
                uid, body = payload.body()
                t0 = time.perf_counter()
                try:
                    async with session.post(
                        url, data=body, headers=headers, server_hostname=SNI
                    ) as resp:
                        answer = await resp.read()
                        status = resp.status
                    problem = check_answer(status, answer, uid, expect)
                except TimeoutError:
                    problem = f"no answer within {TIMEOUT_SECONDS}s"
                except (aiohttp.ClientError, OSError) as exc:
                    problem = f"{type(exc).__name__}: {exc}"
                latencies.append(time.perf_counter() - t0)
                if problem is not None:
                    errors.append(problem)

        cpu_before = cpu_seconds(server.pid)
        with RssSampler(server.pid) as rss:
            await asyncio.gather(*(worker() for _ in range(concurrency)))
            elapsed = time.perf_counter() - started
        cpu_after = cpu_seconds(server.pid)
    latencies.sort()
    samples = list(dict.fromkeys(errors))[:ERROR_SAMPLES]
    return LevelResult(
        server=server.name,
        payload=payload.name,
        concurrency=concurrency,
        requests=len(latencies),
        errors=len(errors),
        seconds=round(elapsed, 3),
        rps=round(len(latencies) / elapsed, 1) if elapsed > 0 else 0.0,
        p50_ms=round(percentile(latencies, 50) * 1000, 2),
        p95_ms=round(percentile(latencies, 95) * 1000, 2),
        p99_ms=round(percentile(latencies, 99) * 1000, 2),
        max_ms=round((latencies[-1] if latencies else 0.0) * 1000, 2),
        rss_peak_mib=round(rss.peak, 1) if rss.peak is not None else None,
        cpu_ms_per_request=(
            round((cpu_after - cpu_before) * 1000 / len(latencies), 3)
            if cpu_before is not None and cpu_after is not None and latencies
            else None
        ),
        error_samples=samples,
    )


async def _open_pool(session: aiohttp.ClientSession, base_url: str, concurrency: int) -> None:
    """Open ``concurrency`` connections at once (the pool keeps them for the level)."""

    async def one() -> None:
        with contextlib.suppress(aiohttp.ClientError, OSError, TimeoutError):
            async with session.get(f"{base_url}/healthz", server_hostname=SNI) as resp:
                await resp.read()

    await asyncio.gather(*(one() for _ in range(concurrency)))


async def warm_up(
    *, base_url: str, tls: ssl.SSLContext, payload: Payload, count: int, expect: Expect | None
) -> list[str]:
    """A few sequential requests first: imports, caches and the API client's pool warm up."""
    problems: list[str] = []
    connector = aiohttp.TCPConnector(limit=1, ssl=tls)
    timeout = aiohttp.ClientTimeout(total=TIMEOUT_SECONDS * 3)
    url = f"{base_url}{payload.path}?timeout={TIMEOUT_SECONDS}s"
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        for _ in range(count):
            uid, body = payload.body()
            async with session.post(
                url, data=body, headers={"Content-Type": "application/json"}, server_hostname=SNI
            ) as resp:
                problem = check_answer(resp.status, await resp.read(), uid, expect)
            if problem:
                problems.append(problem)
    return problems


def python() -> str:
    return sys.executable
