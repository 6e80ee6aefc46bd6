"""``python -m bench.adopt_cost [--jobs 200] [--scale 5000] [--bloat 450] [--compare DIR]``:
what adopt mode costs autowrap's process, per adopted Job and per released pod, on a cluster
that writes what a real one writes.

Three processes: the simulated cluster (``bench.simcluster``: the fake API with kube-scheduler,
kubelet, Volcano, Kueue and the AppWrapper controller simulated), ``autowrap serve`` with a
kubeconfig for it (its controller on, as deployed), and this driver. Only autowrap's process
is measured: CPU from ``/proc/<pid>/stat`` (utime + stime), memory from ``/proc/<pid>/status``
(VmRSS sampled every 50 ms, VmHWM at the end).

1. *adopt*: ``--jobs`` Volcano Jobs of 4 pods stored at once, as adopt-mode admission stores
   them; Volcano makes their pods at once (gated), the scheduler marks them SchedulingGated,
   Kueue makes Workloads, the AppWrapper controller reports Suspended. Done when every Job is
   adopted and nothing but the Lease was written for ``QUIET`` s. CPU per adopted Job;
2. *release*: Kueue admits every AppWrapper; autowrap releases the pods; the scheduler binds
   them, the kubelet starts them (two status writes), Volcano and the AppWrapper controller
   report. Done when every pod runs and all is quiet. CPU per released pod;
3. *scale* (``--scale N``): the adopted families are copied until N Jobs exist (4 N pods, in
   the state autowrap left them in), and a fresh autowrap process starts against them:
   ``/healthz`` is probed every 50 ms through start-up; peak RSS and RSS once the caches are
   full;
4. *ballast* (``--ballast N``, 450 by default): a namespace user creates, in the namespace the
   adopt-mode policy covers, N pods of 1 MiB labelled ``workload.codeflare.dev/appwrapper=x``,
   annotated with a podSet and held by a gate of her own (no autowrap webhook sees them);
   ``/healthz`` is probed every 50 ms throughout; CPU, RSS growth, peak RSS, slowest answer;
5. *relist*: the cluster cuts every watch after compacting its history, so every informer gets
   410 Gone and lists again, ballast included; the same figures;
6. *restart*: the leader stops and a fresh replica starts and syncs against all of it (the
   ballast, the adopted families); its peak RSS (VmHWM) and slowest ``/healthz``;
7. *claimed* (``--claimed N``, 200 by default): one more Job is adopted, then a namespace
   user creates N pods of 1 MiB labelled with its AppWrapper's name (a real one), gated as
   admission gates pods, and Kueue admits it: every release decision for it reads those pods
   live (a page at a time, each cut to what the decision reads). ``/healthz`` is probed every
   50 ms from the ballast's first pod until the Job's pods run; CPU, peak RSS, slowest answer;
8. *bloat* (``--bloat N``): a namespace user creates N pods of 1 MiB labelled
   ``workload.codeflare.dev/appwrapper`` in a namespace no policy covers; autowrap's RSS
   growth.

Beside each CPU figure the run prints its ratio to the *transport floor* measured in the same
run (``bench.transport_floor``: what a process that decides nothing spends on the same calls
and watch events), and 0.3's figures from its own release run (docs/performance.md) and issue 27.

``--compare DIR`` runs the same against the code of another checkout (``git worktree add
/tmp/aw-0.2 a519357``), each version on a fresh cluster, and prints both side by side. The
cluster and this driver always run this checkout's code.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from bench import load, policies
from webhook.model import names

QUIET = 1.0
PODS_PER_JOB = 4
WARM_JOBS = 2
IDLE_SECONDS = 5.0
TARGET_MS_PER_JOB = 5.0
TARGET_MS_PER_POD = 1.0
TARGET_SCALE_RSS_MIB = 256.0
TARGET_HEALTHZ_MS = 100.0
TARGET_BLOAT_MIB = 10.0
TARGET_FLOOR_RATIO = 2.5
MEMORY_LIMIT_MIB = 512.0
TARGET_BALLAST_HEALTHZ_MS = 1000.0
# 0.3's figures (its release run, docs/performance.md "Version 0.3"; the ballast rows from issue 27's
# held-out measurement of 0.3 on the same shape of ballast), printed beside this run's.
VERSION_03 = {
    "CPU ms per adopted job": "4.0",
    "CPU ms per released pod": "2.2",
    "transport floor per job ms": "1.2",
    "transport floor per pod ms": "0.48",
    "CPU/floor per adopted job": "3.3",
    "CPU/floor per released pod": "4.6",
    "API calls per adopted job": "5.1",
    "API calls per released pod": "2.6",
    "watch events per adopted job": "14",
    "watch events per released pod": "4.7",
    "relist: peak RSS MiB": "516",
    "restart: peak RSS MiB": "1550",
    "restart: slowest /healthz ms": "2900",
}


def _status_kib(pid: int, field: str) -> int | None:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def _mib(kib: int | None) -> float | None:
    return None if kib is None else round(kib / 1024, 1)


class Proc:
    """A child process with its log; stopped with SIGTERM, then SIGKILL."""

    def __init__(self, argv: list[str], cwd: Path, log: Path) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = str(cwd)
        with log.open("wb") as out:
            self.popen = subprocess.Popen(argv, cwd=cwd, env=env, stdout=out,
                                          stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)  # fmt: skip
        self.log = log

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def tail(self, lines: int = 30) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        return ""

    def stop(self) -> None:
        if self.alive():
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(20)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()


class Cluster:
    """The simulated cluster's process and its control API."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.port = load.free_port()
        self.proc = Proc([load.python(), "-m", "bench.simcluster", "--control-port",
                          str(self.port), "--work", str(work)], load.REPO, work / "cluster.log")  # fmt: skip
        self.session = aiohttp.ClientSession(base_url=f"http://127.0.0.1:{self.port}",
                                             timeout=aiohttp.ClientTimeout(total=600))  # fmt: skip

    async def ready(self) -> None:
        for _ in range(600):
            if (self.work / "ready").exists():
                return
            if not self.proc.alive():
                raise RuntimeError(f"the simulated cluster exited:\n{self.proc.tail()}")
            await asyncio.sleep(0.1)
        raise TimeoutError("the simulated cluster did not start")

    async def stats(self) -> dict[str, Any]:
        async with self.session.get("/stats") as response:
            return await response.json()  # type: ignore[no-any-return]

    async def requests(self) -> dict[str, int]:
        async with self.session.get("/requests") as response:
            return await response.json()  # type: ignore[no-any-return]

    async def post(self, path: str, **query: Any) -> dict[str, Any]:
        async with self.session.post(path, params={k: str(v) for k, v in query.items()}) as r:
            if r.status != 200:
                raise RuntimeError(f"{path}: {r.status} {await r.text()}")
            return await r.json()  # type: ignore[no-any-return]

    async def close(self) -> None:
        await self.session.close()
        self.proc.stop()


class Autowrap:
    """``autowrap serve`` from ``repo`` against the simulated cluster."""

    def __init__(self, repo: Path, work: Path, n: int, profile: Path | None = None) -> None:
        self.port, self.metrics_port = load.free_port(), load.free_port()
        self.work = work
        profiler = ["-m", "cProfile", "-o", str(profile)] if profile else []
        argv = [
            load.python(), *profiler, "-m", "webhook", "serve", "--host", load.HOST,
            "--port", str(self.port), "--metrics-port", str(self.metrics_port),
            "--cert-dir", str(work / "certs"), "--policy", str(work / "policies"),
            "--kubeconfig", str(work / "kubeconfig"),
        ]  # fmt: skip
        self.proc = Proc(argv, repo, work / f"autowrap-{n}.log")
        self.tls = load.client_tls(work / "certs" / "ca.crt")
        self.rss_peak = 0.0

    def cpu(self) -> float:
        return load.cpu_seconds(self.proc.pid) or 0.0

    def wakeups(self) -> int:
        """Times the processes have slept and been woken (voluntary context switches): on a
        virtual machine each costs tens of microseconds of CPU however little follows."""
        return sum(
            _status_kib(p, "voluntary_ctxt_switches") or 0 for p in load.family(self.proc.pid)
        )

    async def counters(self) -> dict[str, float]:
        """The controller's reconciles and watch events so far, from its /metrics."""
        url = f"http://{load.HOST}:{self.metrics_port}{names.METRICS_PATH}"
        async with aiohttp.ClientSession() as session, session.get(url) as response:
            text = await response.text()
        found: dict[str, float] = {}
        for line in text.splitlines():
            if line.startswith(("autowrap_controller_reconciles_total ",
                                "autowrap_controller_watch_events_total{",
                                "autowrap_controller_leading ",
                                "autowrap_controller_queue_depth ")):  # fmt: skip
                metric, _, value = line.rpartition(" ")
                found[metric] = float(value)
        return found

    def rss(self) -> float:
        value = load.rss_mib(self.proc.pid) or 0.0
        self.rss_peak = max(self.rss_peak, value)
        return value

    def hwm(self) -> float | None:
        """The peak RSS of each process, summed (they share the container's memory limit)."""
        peaks = [_status_kib(p, "VmHWM") for p in load.family(self.proc.pid)]
        return _mib(sum(p for p in peaks if p is not None)) if peaks[0] is not None else None


async def _until(what: str, check: Any, server: Autowrap, timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        stats = await check()
        if stats:
            return stats  # type: ignore[no-any-return]
        if not server.proc.alive():
            raise RuntimeError(f"autowrap exited while waiting for {what}:\n{server.proc.tail()}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not reached within {timeout:.0f} s")
        server.rss()
        await asyncio.sleep(0.05)


async def _wait(cluster: Cluster, server: Autowrap, what: str, timeout: float,
                **wanted: int) -> dict[str, Any]:  # fmt: skip
    """Until every count in ``wanted`` is reached and nothing but the Lease was written for
    ``QUIET`` seconds."""

    async def check() -> dict[str, Any] | None:
        stats = await cluster.stats()
        reached = all(stats[k] >= v for k, v in wanted.items())
        return stats if reached and stats["quiet_s"] >= QUIET else None

    return await _until(what, check, server, timeout)


async def _start_server(repo: Path, work: Path, n: int, profile: Path | None) -> Autowrap:
    server = Autowrap(repo, work, n, profile)
    await load.wait_ready(_LoadProcess(server), f"https://{load.HOST}:{server.port}/readyz",
                          server.tls, timeout=120)  # fmt: skip
    return server


class _LoadProcess(load.Process):
    """``load.wait_ready`` wants a ``load.Process``; this one wraps an ``Autowrap``."""

    def __init__(self, server: Autowrap) -> None:
        super().__init__("autowrap", [], server.port, server.proc.log)
        self._server = server

    def alive(self) -> bool:
        return self._server.proc.alive()

    def log_tail(self, lines: int = 20) -> str:
        return self._server.proc.tail(lines)


async def _phase(cluster: Cluster, server: Autowrap, action: Any, what: str, timeout: float,
                 **wanted: int) -> tuple[float, float, dict[str, int]]:  # fmt: skip
    """The server's CPU seconds from ``action`` until quiet, the wall time, and the API
    requests it made meanwhile (by verb and resource)."""
    calls, counters = await cluster.requests(), await server.counters()
    cpu, started, wakeups = server.cpu(), time.monotonic(), server.wakeups()
    await action()
    stats = await _wait(cluster, server, what, timeout, **wanted)
    spent, wall = server.cpu() - cpu, time.monotonic() - started - stats["quiet_s"]
    after = await cluster.requests()
    made = {shape: n - calls.get(shape, 0) for shape, n in after.items()}
    made.update({name: int(n - counters.get(name, 0))
                 for name, n in (await server.counters()).items()})  # fmt: skip
    made["autowrap_wakeups"] = server.wakeups() - wakeups
    return spent, wall, {shape: n for shape, n in made.items() if n}


def _api_calls(calls: dict[str, int]) -> float:
    """API requests among ``calls`` (which also holds the controller's own counters)."""
    return float(sum(n for shape, n in calls.items() if not shape.startswith("autowrap_")))


def _watch_events(calls: dict[str, int]) -> float | None:
    """Watch events received, or None from a version that does not count them."""
    counted = [n for shape, n in calls.items()
               if shape.startswith("autowrap_controller_watch_events_total")]  # fmt: skip
    return float(sum(counted)) if counted else None


def _reconciles(calls: dict[str, int]) -> float:
    return float(calls.get("autowrap_controller_reconciles_total", 0))


def _per_item(value: float | None, count: int) -> float | None:
    return None if value is None else round(value / count, 2)


def _per(calls: dict[str, int], count: int) -> dict[str, float]:
    return {shape: round(n / count, 2) for shape, n in calls.items()}


async def _transport_floor(cluster: Cluster, work: Path) -> dict[str, float]:
    """``bench.transport_floor`` against this cluster, before autowrap starts."""
    process = await asyncio.create_subprocess_exec(
        load.python(), "-m", "bench.transport_floor", "--kubeconfig", str(work / "kubeconfig"),
        "--control", f"http://127.0.0.1:{cluster.port}",
        "--namespace", policies.UNCOVERED_NAMESPACE, cwd=load.REPO,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await process.communicate()
    if process.returncode != 0:
        raise RuntimeError(f"bench.transport_floor failed:\n{err.decode()[-2000:]}")
    return orjson.loads(out)  # type: ignore[no-any-return]


def _floor_ms(result: dict[str, Any], phase: str, per: str) -> float | None:
    """The transport floor of a phase's calls and watch events, per job or pod, in ms."""
    floor, figures = result.get("floor"), result.get(phase)
    if not floor or not figures or figures.get(f"events_per_{per}") is None:
        return None
    micros = (figures[f"calls_per_{per}"] * floor["us_per_call"]
              + figures[f"events_per_{per}"] * floor["us_per_event"])  # fmt: skip
    return round(micros / 1000, 2)


async def _probe(server: Autowrap, stop: asyncio.Event) -> list[float]:
    """Answer times of /healthz, one probe every 50 ms, until ``stop``; probes that found
    nothing listening yet are not answers and are not counted."""
    times: list[float] = []
    connector = aiohttp.TCPConnector(ssl=server.tls, force_close=True)
    url = f"https://{load.HOST}:{server.port}{names.HEALTHZ_PATH}"
    async with aiohttp.ClientSession(connector=connector) as session:
        while not stop.is_set():
            started = time.perf_counter()
            with contextlib.suppress(aiohttp.ClientConnectorError, OSError):
                try:
                    async with session.get(url, server_hostname=load.SNI,
                                           timeout=aiohttp.ClientTimeout(total=30)) as r:  # fmt: skip
                        await r.read()
                        times.append(time.perf_counter() - started)
                except TimeoutError:
                    times.append(time.perf_counter() - started)
            server.rss()
            await asyncio.sleep(0.05)
    return times


async def _observed(server: Autowrap, action: Any, what: str, done: Any,
                    timeout: float) -> dict[str, Any]:  # fmt: skip
    """CPU, RSS (before, after, peak sampled every 50 ms) and the slowest ``/healthz`` answer
    from ``action`` until ``done()``."""
    before, cpu, started = server.rss(), server.cpu(), time.monotonic()
    server.rss_peak = before
    stop = asyncio.Event()
    probes = asyncio.create_task(_probe(server, stop))
    try:
        await action()
        await _until(what, done, server, timeout)
    finally:
        stop.set()
        answers = await probes
    return {"cpu_s": round(server.cpu() - cpu, 2), "seconds": round(time.monotonic() - started, 1),
            "rss_before_mib": round(before, 1), "rss_after_mib": round(server.rss(), 1),
            "growth_mib": round(server.rss() - before, 1), "peak_rss_mib": round(server.rss_peak, 1),
            "slowest_healthz_ms": round(max(answers) * 1000, 1) if answers else None,
            "healthz_probes": len(answers)}  # fmt: skip


def _listed_again(cluster: Cluster, before: int) -> Any:
    """A check: the pods were listed again since ``before`` lists began (no new page asked for
    3 s) and all is quiet."""
    seen = {"lists": -1, "at": time.monotonic()}

    async def check() -> dict[str, Any] | None:
        stats = await cluster.stats()
        if stats["pod_lists"] != seen["lists"]:
            seen.update(lists=stats["pod_lists"], at=time.monotonic())
        settled = time.monotonic() - seen["at"] >= 3
        return (
            stats
            if stats["pod_relists"] > before and settled and stats["quiet_s"] >= QUIET
            else None
        )

    return check


async def _fresh_replica(repo: Path, work: Path, n: int,
                         cluster: Cluster) -> tuple[Autowrap, dict[str, Any]]:  # fmt: skip
    """A new autowrap process against the cluster as it is: until it has listed everything and
    all is quiet, its peak RSS (VmHWM) and ``/healthz`` probed every 50 ms from its start."""
    relists = (await cluster.stats())["pod_relists"]
    server = Autowrap(repo, work, n)
    stop = asyncio.Event()
    started = time.monotonic()
    probes = asyncio.create_task(_probe(server, stop))

    async def leading() -> dict[str, Any] | None:
        """A replica that lost its first term lists too and falls quiet: it has synced only
        once it leads with nothing queued."""
        found = await server.counters()
        done = (found.get("autowrap_controller_leading") == 1
                and found.get("autowrap_controller_queue_depth") == 0)  # fmt: skip
        return found if done else None

    try:
        await _until("a fresh replica's sync", _listed_again(cluster, relists), server, 900)
        await _until("a fresh replica leading with nothing queued", leading, server, 900)
        await asyncio.sleep(2)
    finally:
        stop.set()
        answers = await probes
    return server, {
        "synced_after_s": round(time.monotonic() - started, 1),
        "rss_after_sync_mib": round(server.rss(), 1), "peak_rss_mib": server.hwm(),
        "slowest_healthz_ms": round(max(answers) * 1000, 1) if answers else None,
        "healthz_probes": len(answers),
    }  # fmt: skip


async def _claimed(cluster: Cluster, server: Autowrap, count: int,
                   timeout: float) -> dict[str, Any]:  # fmt: skip
    """Phase 7: ``count`` pods of 1 MiB that claim a real AppWrapper by its label, read live by
    every release decision for it; until its Job's own pods run."""
    before = await cluster.stats()
    await cluster.post("/jobs", prefix="claimed", count=1)
    await _wait(cluster, server, "the claimed Job adopted", timeout,
                adopted=before["adopted"] + 1, gated=before["gated"] + PODS_PER_JOB)  # fmt: skip

    async def action() -> None:
        await cluster.post("/bloat", count=count, size=1 << 20, prefix="claim",
                           appwrapper="claimed-00000")  # fmt: skip
        await cluster.post("/admit")

    async def released() -> dict[str, Any] | None:
        stats = await cluster.stats()
        done = stats["running"] >= before["running"] + PODS_PER_JOB and stats["quiet_s"] >= QUIET
        return stats if done else None

    figures = await _observed(server, action, "the claimed Job's pods running", released, 900)
    return {**figures, "pods": count}


async def run_version(repo: Path, args: argparse.Namespace) -> dict[str, Any]:
    result: dict[str, Any] = {"repo": str(repo), "jobs": args.jobs}
    with tempfile.TemporaryDirectory(prefix="autowrap-adopt-cost-") as tmp:
        work = Path(tmp)
        subprocess.run([load.python(), "-m", "webhook", "certs", "--out", str(work / "certs")],
                       cwd=load.REPO, check=True, capture_output=True)  # fmt: skip
        policies.write(work / "policies")
        cluster = Cluster(work)
        server: Autowrap | None = None
        try:
            await cluster.ready()
            result["floor"] = await _transport_floor(cluster, work)
            profile = args.profile.with_suffix(f".{repo.name}.prof") if args.profile else None
            server = await _start_server(repo, work, 1, profile)
            timeout = 120 + args.jobs * 2.0
            result["idle_rss_mib"] = round(server.rss(), 1)

            async def leading() -> dict[str, Any] | None:
                stats = await cluster.stats()
                return stats if stats["holder"] else None

            await _until("the Lease", leading, server, timeout)
            await cluster.post("/jobs", prefix="warm", count=WARM_JOBS)
            await _wait(cluster, server, "warm-up adopted", timeout, adopted=WARM_JOBS)
            await cluster.post("/admit")
            warm_pods = WARM_JOBS * PODS_PER_JOB
            await _wait(cluster, server, "warm-up running", timeout, released=warm_pods,
                        running=warm_pods)  # fmt: skip

            # What the process spends with nothing to do (the Lease, timers): every phase pays
            # it for its wall time, so it shows apart.
            cpu, started = server.cpu(), time.monotonic()
            await asyncio.sleep(IDLE_SECONDS)
            result["idle_cpu_ms_per_s"] = round(
                (server.cpu() - cpu) * 1000 / (time.monotonic() - started), 2
            )
            total_jobs, total_pods = WARM_JOBS + args.jobs, warm_pods + args.jobs * PODS_PER_JOB
            cpu, wall, calls = await _phase(
                cluster, server, lambda: cluster.post("/jobs", prefix="job", count=args.jobs),
                "every Job adopted", timeout, adopted=total_jobs, gated=args.jobs * PODS_PER_JOB,
            )  # fmt: skip
            result["adopt"] = {"cpu_ms_per_job": round(cpu * 1000 / args.jobs, 2),
                               "cpu_s": round(cpu, 2), "seconds": round(wall, 1),
                               "rss_mib": round(server.rss(), 1),
                               "calls_per_job": round(_api_calls(calls) / args.jobs, 2),
                               "events_per_job": _per_item(_watch_events(calls), args.jobs),
                               "reconciles_per_job": round(_reconciles(calls) / args.jobs, 2),
                               "wakeups_per_job": round(calls.get("autowrap_wakeups", 0) / args.jobs, 1),
                               "calls": _per(calls, args.jobs)}  # fmt: skip
            cpu, wall, calls = await _phase(cluster, server, lambda: cluster.post("/admit"),
                                            "every pod released and running", timeout,
                                            released=total_pods, running=total_pods)  # fmt: skip
            pods = args.jobs * PODS_PER_JOB
            result["release"] = {"cpu_ms_per_pod": round(cpu * 1000 / pods, 2),
                                 "cpu_s": round(cpu, 2), "seconds": round(wall, 1),
                                 "rss_mib": round(server.rss(), 1),
                                 "calls_per_pod": round(_api_calls(calls) / pods, 2),
                                 "events_per_pod": _per_item(_watch_events(calls), pods),
                                 "reconciles_per_pod": round(_reconciles(calls) / pods, 2),
                                 "wakeups_per_pod": round(calls.get("autowrap_wakeups", 0) / pods, 1),
                                 "calls": _per(calls, pods)}  # fmt: skip
            result["adopt"]["floor_ms_per_job"] = _floor_ms(result, "adopt", "job")
            result["release"]["floor_ms_per_pod"] = _floor_ms(result, "release", "pod")
            for phase, per in (("adopt", "job"), ("release", "pod")):
                figures, floor = result[phase], result[phase][f"floor_ms_per_{per}"]
                if floor:
                    spent = figures["cpu_ms_per_job" if per == "job" else "cpu_ms_per_pod"]
                    figures["floor_ratio"] = round(spent / floor, 2)
            result["peak_rss_mib"] = server.hwm()
            stats = await cluster.stats()
            result["cluster_writes"] = stats["writes"]
            result["ok"] = stats["adopted"] >= total_jobs and stats["running"] >= total_pods

            if args.ballast:
                settle = 3.0

                async def created() -> dict[str, Any] | None:
                    stats = await cluster.stats()
                    return stats if stats["quiet_s"] >= settle else None

                result["ballast"] = await _observed(
                    server, lambda: cluster.post("/bloat", count=args.ballast, size=1 << 20,
                                                 covered=1, prefix="ballast"),
                    "ballast quiet", created, 900,
                )  # fmt: skip
                result["ballast"]["pods"] = args.ballast
                relists = (await cluster.stats())["pod_relists"]
                result["relist"] = await _observed(
                    server, lambda: cluster.post("/relist"), "relisted",
                    _listed_again(cluster, relists), 900,
                )  # fmt: skip
                server.proc.stop()
                server, result["restart"] = await _fresh_replica(repo, work, 3, cluster)

            if args.claimed:
                result["claimed"] = await _claimed(cluster, server, args.claimed, timeout)

            if args.scale:
                await cluster.post("/clone", total=args.scale)
                server.proc.stop()
                before = (await cluster.stats())["pod_lists"]
                stop = asyncio.Event()
                started = time.monotonic()
                server = Autowrap(repo, work, 2)
                probes = asyncio.create_task(_probe(server, stop))

                seen = {"lists": before, "at": time.monotonic()}

                async def synced() -> dict[str, Any] | None:
                    """The pods are listed (no new page asked for 5 s) and all is quiet."""
                    stats = await cluster.stats()
                    if stats["pod_lists"] != seen["lists"]:
                        seen.update(lists=stats["pod_lists"], at=time.monotonic())
                    listed = seen["lists"] > before and time.monotonic() - seen["at"] >= 5
                    return stats if listed and stats["quiet_s"] >= QUIET else None

                try:
                    await _until("start-up at scale", synced, server, 600)
                    listed = seen["at"] - started
                    await asyncio.sleep(3)  # the last page decoded and handled
                finally:
                    stop.set()
                    answers = await probes
                result["scale"] = {
                    "jobs": args.scale, "pods": args.scale * PODS_PER_JOB,
                    "listed_after_s": round(listed, 1),
                    "pod_list_requests": seen["lists"] - before,
                    "rss_after_sync_mib": round(server.rss(), 1),
                    "peak_rss_mib": server.hwm(),
                    "slowest_healthz_ms": round(max(answers) * 1000, 1) if answers else None,
                    "healthz_over_100ms": sum(1 for a in answers if a > TARGET_HEALTHZ_MS / 1000),
                    "healthz_probes": len(answers),
                }  # fmt: skip

            if args.bloat:
                await asyncio.sleep(1)
                before_rss = server.rss()
                cpu = server.cpu()
                await cluster.post("/bloat", count=args.bloat, size=1 << 20)
                await _wait(cluster, server, "bloat quiet", 600)
                await asyncio.sleep(3)
                result["bloat"] = {"pods": args.bloat, "pod_mib": 1,
                                   "rss_before_mib": round(before_rss, 1),
                                   "rss_after_mib": round(server.rss(), 1),
                                   "growth_mib": round(server.rss() - before_rss, 1),
                                   "cpu_s": round(server.cpu() - cpu, 2)}  # fmt: skip
        except (RuntimeError, TimeoutError) as exc:
            result["failure"] = str(exc)
            if server is not None:
                result["log_tail"] = server.proc.tail(30)
            with contextlib.suppress(Exception):
                result["progress"] = await cluster.stats()
        finally:
            if server is not None:
                server.proc.stop()
            await cluster.close()
    return result


ROWS = (
    ("CPU ms per adopted job", ("adopt", "cpu_ms_per_job"), ""),
    ("CPU ms per released pod", ("release", "cpu_ms_per_pod"), ""),
    ("transport floor per job ms", ("adopt", "floor_ms_per_job"), ""),
    ("transport floor per pod ms", ("release", "floor_ms_per_pod"), ""),
    ("CPU/floor per adopted job", ("adopt", "floor_ratio"), f"<= {TARGET_FLOOR_RATIO:g}"),
    ("CPU/floor per released pod", ("release", "floor_ratio"), f"<= {TARGET_FLOOR_RATIO:g}"),
    ("floor: CPU us per API call", ("floor", "us_per_call"), ""),
    ("floor: CPU us per watch event", ("floor", "us_per_event"), ""),
    ("API calls per adopted job", ("adopt", "calls_per_job"), ""),
    ("API calls per released pod", ("release", "calls_per_pod"), ""),
    ("watch events per adopted job", ("adopt", "events_per_job"), ""),
    ("watch events per released pod", ("release", "events_per_pod"), ""),
    ("reconciles per adopted job", ("adopt", "reconciles_per_job"), ""),
    ("reconciles per released pod", ("release", "reconciles_per_pod"), ""),
    ("wakeups per adopted job", ("adopt", "wakeups_per_job"), ""),
    ("wakeups per released pod", ("release", "wakeups_per_pod"), ""),
    ("idle CPU ms per s", ("idle_cpu_ms_per_s",), ""),
    ("adopt phase wall s", ("adopt", "seconds"), ""),
    ("release phase wall s", ("release", "seconds"), ""),
    ("peak RSS MiB (cost run)", ("peak_rss_mib",), ""),
    ("scale: pods listed after s", ("scale", "listed_after_s"), ""),
    ("scale: RSS after sync MiB", ("scale", "rss_after_sync_mib"), ""),
    ("scale: peak RSS MiB", ("scale", "peak_rss_mib"), f"< {TARGET_SCALE_RSS_MIB:g}"),
    ("scale: slowest /healthz ms", ("scale", "slowest_healthz_ms"), f"<= {TARGET_HEALTHZ_MS:g}"),
    ("ballast: CPU s", ("ballast", "cpu_s"), ""),
    ("ballast: RSS growth MiB", ("ballast", "growth_mib"), ""),
    ("ballast: peak RSS MiB", ("ballast", "peak_rss_mib"), f"< {MEMORY_LIMIT_MIB:g}"),
    (
        "ballast: slowest /healthz ms",
        ("ballast", "slowest_healthz_ms"),
        f"<= {TARGET_BALLAST_HEALTHZ_MS:g}",
    ),
    ("relist: CPU s", ("relist", "cpu_s"), ""),
    ("relist: peak RSS MiB", ("relist", "peak_rss_mib"), f"< {MEMORY_LIMIT_MIB:g}"),
    (
        "relist: slowest /healthz ms",
        ("relist", "slowest_healthz_ms"),
        f"<= {TARGET_BALLAST_HEALTHZ_MS:g}",
    ),
    ("restart: synced after s", ("restart", "synced_after_s"), ""),
    ("restart: RSS after sync MiB", ("restart", "rss_after_sync_mib"), ""),
    ("restart: peak RSS MiB", ("restart", "peak_rss_mib"), f"< {MEMORY_LIMIT_MIB:g}"),
    (
        "restart: slowest /healthz ms",
        ("restart", "slowest_healthz_ms"),
        f"<= {TARGET_BALLAST_HEALTHZ_MS:g}",
    ),
    ("claimed: CPU s", ("claimed", "cpu_s"), ""),
    ("claimed: peak RSS MiB", ("claimed", "peak_rss_mib"), f"< {MEMORY_LIMIT_MIB:g}"),
    (
        "claimed: slowest /healthz ms",
        ("claimed", "slowest_healthz_ms"),
        f"<= {TARGET_BALLAST_HEALTHZ_MS:g}",
    ),
    ("bloat: RSS growth MiB", ("bloat", "growth_mib"), f"< {TARGET_BLOAT_MIB:g}"),
)


def _at(result: dict[str, Any], path: tuple[str, ...]) -> Any:
    value: Any = result
    for part in path:
        value = value.get(part) if isinstance(value, dict) else None
    return value


def figures(rounds: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each row's median, lowest and highest over the rounds (the lower median for an even
    count: a value some round measured)."""
    out = {}
    for title, path, target in ROWS:
        values = sorted(v for r in rounds if (v := _at(r, path)) is not None)
        if values:
            out[title] = {"median": values[(len(values) - 1) // 2], "min": values[0],
                          "max": values[-1], "rounds": values, "target": target}  # fmt: skip
    return out


def table(results: dict[str, list[dict[str, Any]]]) -> str:
    labels = list(results)
    summaries = {label: figures(rounds) for label, rounds in results.items()}
    width = 22
    lines = [f"{'figure':<30}" + "".join(f"{label:>{width}}" for label in labels)
             + f"{'0.3 (own run)':>14}{'target':>10}"]  # fmt: skip
    for title, _, target in ROWS:
        target = f"{VERSION_03.get(title, ''):>14}{target:>10}"
        cells = []
        for label in labels:
            f = summaries[label].get(title)
            if f is None:
                cells.append("-")
            elif f["min"] == f["max"]:
                cells.append(str(f["median"]))
            else:
                cells.append(f"{f['median']} ({f['min']}-{f['max']})")
        lines.append(f"{title:<30}" + "".join(f"{c:>{width}}" for c in cells) + target)
    for label, rounds in results.items():
        for n, r in enumerate(rounds, 1):
            if "failure" in r:
                lines += ["", f"{label} round {n} FAILED: {r['failure']}",
                          f"  progress: {r.get('progress')}"]  # fmt: skip
                lines += [f"  | {line}" for line in r.get("log_tail", "").splitlines()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.adopt_cost", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("--jobs", type=int, default=200, help="jobs of 4 pods (default 200)")
    parser.add_argument("--scale", type=int, default=0, help="jobs for the start-up run")
    parser.add_argument("--bloat", type=int, default=0, help="1 MiB pods in a foreign namespace")
    parser.add_argument("--ballast", type=int, default=450,
                        help="1 MiB pods a user labels for an AppWrapper in the covered namespace "
                             "(then a relist and a fresh replica; 0: none)")  # fmt: skip
    parser.add_argument("--claimed", type=int, default=200,
                        help="1 MiB pods a user labels for a real AppWrapper, read live by its "
                             "release (0: none)")  # fmt: skip
    parser.add_argument(
        "--repo", type=Path, help="serve this checkout's code instead of this one's"
    )
    parser.add_argument("--compare", type=Path, help="also run this checkout's code (e.g. 0.2)")
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="rounds per version, each on a fresh cluster (medians reported)",
    )
    parser.add_argument("--out", type=Path, help="write the JSON result here")
    parser.add_argument("--profile", type=Path,
                        help="profile the first server with cProfile into PATH.<repo>.prof")  # fmt: skip
    args = parser.parse_args(argv)
    versions = [("this", args.repo or load.REPO)]
    versions += [("compare", args.compare)] if args.compare else []
    results: dict[str, list[dict[str, Any]]] = {label: [] for label, _ in versions}
    for n in range(args.rounds):
        # Alternate the order, so that the machine's drift falls on both alike.
        for label, repo in versions if n % 2 == 0 else versions[::-1]:
            print(f"adopt cost: round {n + 1}/{args.rounds}, {label} ({repo}), {args.jobs} jobs",
                  file=sys.stderr)  # fmt: skip
            results[label].append(asyncio.run(run_version(repo.resolve(), args)))
    print(table(results))
    if args.out:
        document = {label: {"figures": figures(rounds), "rounds": rounds}
                    for label, rounds in results.items()}  # fmt: skip
        args.out.write_bytes(orjson.dumps(document, option=orjson.OPT_INDENT_2))
    return 0 if all(r.get("ok") and "failure" not in r for v in results.values() for r in v) else 1


if __name__ == "__main__":
    raise SystemExit(main())
