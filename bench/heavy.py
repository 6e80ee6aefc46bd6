"""``python -m bench.heavy [--concurrent 8] [--repo DIR]``: what large reviews cost the server.

Starts ``autowrap serve`` (redirect mode, the fake API behind it) as its own process and sends
it, all at once, ``--concurrent`` copies of each case below to ``/mutate`` and to
``/validate``, while ``/healthz`` is asked every 20 ms. Prints, per case and webhook: the
answers, the server's CPU seconds per request and peak RSS (read from /proc), the largest
answer, and the slowest probe. ``--repo`` serves the code of another checkout (for a
before/after comparison); the client side is always this one.

Cases: a user-written AppWrapper of 2.8 MiB holding a Volcano Job of 24 000 small containers
(its env would take it far over etcd's limit), and the same shape at 1 600 containers, which
fits and is completed or wrapped.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

from bench import payloads
from testbed import scenarios as sc
from testbed.cluster.cluster import for_autowrap
from testbed.pki import service_dns_names, write_pki
from webhook.model import names

HEALTH_EVERY = 0.02


def _appwrapper(containers: int, image_bytes: int) -> dict[str, Any]:
    per_task = containers // 2
    image = "registry.example.com/" + "i" * max(image_bytes - 22, 1)
    tasks = [
        {"name": f"t{t}", "replicas": 1, "template": {"spec": {"restartPolicy": "Never",
         "containers": [{"name": f"c{i}", "image": image} for i in range(per_task)]}}}
        for t in range(2)
    ]  # fmt: skip
    job = payloads.vcjob("wide", tasks, namespace=sc.NAMESPACE)
    appwrapper = payloads.appwrapper("wide", job)
    appwrapper["metadata"].update(namespace=sc.NAMESPACE, labels={names.QUEUE_LABEL: sc.QUEUE})
    return appwrapper


CASES = {
    "aw-24000-containers-2.8MiB": lambda: _appwrapper(24_000, 90),
    "aw-1600-containers": lambda: _appwrapper(1_600, 20),
}


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _round(served: sc.Served, path: str, body: bytes, concurrent: int) -> dict[str, Any]:
    pid = served.process.pid
    tls = served.pki.client_context()
    peak_rss, probes, stop = [sc.rss_kib(pid)], [], asyncio.Event()

    async def watch(session: aiohttp.ClientSession) -> None:
        while not stop.is_set():
            started = time.monotonic()
            async with session.get(f"https://127.0.0.1:{served.port}{names.HEALTHZ_PATH}",
                                   ssl=tls, server_hostname=sc.SNI) as resp:  # fmt: skip
                await resp.read()
            probes.append(time.monotonic() - started)
            peak_rss.append(sc.rss_kib(pid))
            await asyncio.sleep(HEALTH_EVERY)

    cpu_before = _cpu_seconds(pid)
    async with aiohttp.ClientSession() as session:
        watcher = asyncio.create_task(watch(session))
        await asyncio.sleep(0.2)
        answers = await asyncio.gather(
            *(sc.post(session, served.port, path, body, tls) for _ in range(concurrent))
        )
        stop.set()
        await watcher
    cpu = _cpu_seconds(pid) - cpu_before
    outcomes: dict[str, int] = {}
    largest, message = 0, ""
    for answer in answers:
        response = answer.body.get("response", {}) if isinstance(answer.body, dict) else {}
        message = message or str(response.get("status", {}).get("message", ""))[:160]
        key = f"{answer.status} " + (
            "patched" if response.get("patch") else
            "allowed" if response.get("allowed") else
            f"denied {response.get('status', {}).get('code')}"
        )  # fmt: skip
        outcomes[key] = outcomes.get(key, 0) + 1
        largest = max(largest, len(json.dumps(answer.body)) if answer.body else 0)
    return {
        "answers": outcomes,
        "first_message": message,
        "cpu_s_per_request": round(cpu / concurrent, 3),
        "slowest_answer_s": round(max(a.elapsed for a in answers), 2),
        "largest_answer_bytes": largest,
        "peak_rss_mib": round(max(peak_rss) / 1024, 1),
        "slowest_healthz_ms": round(max(probes) * 1000, 1) if probes else None,
        "healthz_probes": len(probes),
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        kube = for_autowrap(keep_requests=100)
        await kube.start()
        served = await sc.start_serve(write_pki(tmp / "pki", service_dns_names()), kube, tmp,
                                      repo=Path(args.repo) if args.repo else None)  # fmt: skip
        try:
            for name, build in CASES.items():
                obj = build()
                kind = ("workload.codeflare.dev", "v1beta2", "AppWrapper")
                resource = ("workload.codeflare.dev", "v1beta2", "appwrappers")
                body = json.dumps(
                    payloads.review("u-" + name, obj, kind, resource, sc.NAMESPACE)
                ).encode()
                for path in (names.MUTATE_PATH, names.VALIDATE_PATH):
                    row = await _round(served, path, body, args.concurrent)
                    row["request_bytes"] = len(body)
                    results[f"{name} {path}"] = row
                    if served.process.poll() is not None:
                        results["server"] = f"exited {served.process.returncode}"
                        return results
        finally:
            served.process.terminate()
            served.process.wait(30)
            await kube.stop()
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.heavy", description=__doc__)
    parser.add_argument("--concurrent", type=int, default=8)
    parser.add_argument("--repo", help="serve the code of this checkout instead")
    args = parser.parse_args(argv)
    results = asyncio.run(run(args))
    json.dump(results, sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
