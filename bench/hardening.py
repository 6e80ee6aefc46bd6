"""``python -m bench.hardening [--quick] [--soak-seconds 300]``: the hardening figures.

Runs, at a larger scale than tests/hardening, every scenario against the real server on
loopback: hostile inputs over TLS, Kubernetes API faults with a retry, certificate rotations
and policy reloads under load, a SIGTERM drain with requests in flight, and a soak. Prints a
table, writes ``bench/results/hardening-<timestamp>.json`` and exits 1 if any scenario found a
problem.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp

from testbed import scenarios as sc
from testbed.cluster.cluster import FakeCluster, for_autowrap
from testbed.pki import service_dns_names, write_pki
from testbed.redirect import start_cluster
from webhook.model import names

RESULTS = Path(__file__).resolve().parent / "results"


async def _cluster(tmp: Path) -> tuple[Any, Any, FakeCluster]:
    pki = write_pki(tmp / "pki", service_dns_names())
    kube = for_autowrap()
    await kube.start()
    cluster, stop = await start_cluster(pki, kube, kube.write_kubeconfig(tmp / "kc"), tmp)
    return cluster, stop, kube


async def fuzz(tmp: Path, count: int) -> dict[str, Any]:
    cluster, stop, kube = await _cluster(tmp)
    try:
        cases = sc.hostile_inputs(seed=int(time.time()), count=count)
        tally = await sc.send_all(cluster.running.port, cluster.pki.client_context(), cases)
    finally:
        await stop()
        await kube.stop()
    return {"inputs": tally.sent, "by_status": dict(tally.by_status),
            "problems": tally.problems[:10], "problem_count": len(tally.problems)}  # fmt: skip


async def faults(tmp: Path, repeats: int) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    problems: list[str] = []
    for n in range(repeats):
        for fault in sorted(sc.PHASES):
            sub = tmp / f"fault-{n}-{len(rows)}"
            sub.mkdir()
            cluster, stop, kube = await _cluster(sub)
            try:
                outcome = await sc.fault_run(cluster, fault, "train")
            finally:
                await stop()
                await kube.stop()
            rows.append({"fault": fault, "existed": outcome.existed_after_failure,
                         "appwrappers": outcome.appwrappers_after_retry})  # fmt: skip
            problems += [f"{fault}: {p}" for p in outcome.problems]
    injected = sum(len(phase) for _ in range(repeats) for p in sc.PHASES.values() for phase in p)
    return {"runs": len(rows), "faults_injected": injected, "problem_count": len(problems),
            "problems": problems[:10],
            "stored_despite_failure": sum(r["existed"] for r in rows)}  # fmt: skip


async def rotation_and_reload(tmp: Path, rotations: int, reloads: int) -> dict[str, Any]:
    cluster, stop, kube = await _cluster(tmp)
    try:
        tls = cluster.pki.client_context()
        tally, done = sc.LoadTally(), asyncio.Event()
        traffic = asyncio.create_task(sc.load(cluster.running.port, tls, done, tally, clients=4))
        await sc.rotate(cluster.pki, cluster.cert_dir, lambda: cluster.state.tls.reloads,
                        rotations)  # fmt: skip
        default = cluster.policy_dir / "default.yaml"
        text = default.read_text()
        stale_seen = 0
        for i in range(reloads):
            default.write_text(text.replace("masterPort: 23456", f"masterPort: {23460 + i}"))
            broken = cluster.policy_dir / "broken.yaml"
            broken.write_text("apiVersion: autowrap.io/v1alpha1\nkind: Policy\nspec: {wrap: No}\n")
            await asyncio.sleep(0.6)
            stale_seen += bool(cluster.state.policy_error)
            broken.unlink()
            await asyncio.sleep(0.6)
        done.set()
        await traffic
    finally:
        await stop()
        await kube.stop()
    return {"rotations": rotations, "policy_reloads": reloads, "invalid_sets_reported": stale_seen,
            "requests": tally.requests, "handshakes": tally.handshakes,
            "problem_count": len(tally.failures) + (reloads - stale_seen),
            "problems": tally.failures[:10]}  # fmt: skip


async def drain(tmp: Path, in_flight: int) -> dict[str, Any]:
    pki = write_pki(tmp / "pki", service_dns_names())
    async with for_autowrap() as kube:
        served = await sc.start_serve(pki, kube, tmp)
        kube.inject("POST", r"/subjectaccessreviews$", status=None, delay=2.0, times=None)
        tls = pki.client_context()
        reqs = [sc.admission_request(sc.labelled_vcjob(f"d-{i}")) for i in range(in_flight)]
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
            tasks = [asyncio.create_task(sc.post(session, served.port, names.VALIDATE_PATH,
                                                 sc.encode(sc.review(r)), tls)) for r in reqs]  # fmt: skip
            while len(kube.requests_to("POST", r"/subjectaccessreviews$")) < in_flight:
                await asyncio.sleep(0.02)
            served.process.send_signal(signal.SIGTERM)
            signalled = time.monotonic()
            answers = await asyncio.gather(*tasks)
        code = await asyncio.to_thread(served.process.wait, 60)
        exit_after = time.monotonic() - signalled
        complete = sum(a.status == 200 and "was wrapped into" in json.dumps(a.body)
                       for a in answers)  # fmt: skip
    return {"in_flight": in_flight, "answered_in_full": complete, "exit_code": code,
            "exit_after_s": round(exit_after, 2),
            "problem_count": (in_flight - complete) + (code != 0)}  # fmt: skip


async def soak(tmp: Path, seconds: float) -> dict[str, Any]:
    pki = write_pki(tmp / "pki", service_dns_names())
    async with for_autowrap() as kube:
        served = await sc.start_serve(pki, kube, tmp)
        try:
            figures = await sc.soak(served, seconds, clients=4)
        finally:
            served.process.send_signal(signal.SIGTERM)
            figures["exit_code"] = await asyncio.to_thread(served.process.wait, 60)
    figures["problem_count"] = figures["errors"] + (not figures["alive"])
    return figures


async def run(args: argparse.Namespace) -> dict[str, Any]:
    quick = args.quick
    with tempfile.TemporaryDirectory(prefix="autowrap-hardening-") as scratch:
        tmp = Path(scratch)
        for sub in ("fuzz", "faults", "rotation", "drain", "soak"):
            (tmp / sub).mkdir()
        return {
            "fuzz": await fuzz(tmp / "fuzz", 300 if quick else 3000),
            "faults": await faults(tmp / "faults", 1 if quick else 3),
            "rotation_and_reload": await rotation_and_reload(
                tmp / "rotation", 3 if quick else 10, 2 if quick else 5
            ),  # fmt: skip
            "drain": await drain(tmp / "drain", 8 if quick else 32),
            "soak": await soak(tmp / "soak", 20.0 if quick else args.soak_seconds),
        }


def table(results: dict[str, Any]) -> str:
    f, k, r, d, s = (results[x] for x in ("fuzz", "faults", "rotation_and_reload", "drain",
                                          "soak"))  # fmt: skip
    rows = [
        ("hostile inputs", f"{f['inputs']} sent; statuses {f['by_status']}", f["problem_count"]),
        ("API faults", f"{k['faults_injected']} injected in {k['runs']} runs; "
                       f"{k['stored_despite_failure']} stored despite the failure", k["problem_count"]),
        ("rotation + reload", f"{r['rotations']} cert rotations, {r['policy_reloads']} policy "
                              f"reloads (+invalid); {r['requests']} requests, "
                              f"{r['handshakes']} handshakes", r["problem_count"]),
        ("SIGTERM drain", f"{d['in_flight']} in flight, {d['answered_in_full']} answered; "
                          f"exit {d['exit_code']} after {d['exit_after_s']} s", d["problem_count"]),
        ("soak", f"{s['seconds']} s, {s['requests']} requests; RSS {s['rss_kib_after_warm_up']} "
                 f"-> {s['rss_kib_end']} KiB (max {s['rss_kib_max']})", s["problem_count"]),
    ]  # fmt: skip
    width = max(len(r[0]) for r in rows)
    lines = [f"{'scenario'.ljust(width)}  problems  figures"]
    lines += [f"{name.ljust(width)}  {str(problems).rjust(8)}  {text}"
              for name, text, problems in rows]  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.hardening", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small scale (about a minute)")
    parser.add_argument("--soak-seconds", type=float, default=300.0)
    args = parser.parse_args(argv)
    started = datetime.now(UTC)
    results = asyncio.run(run(args))
    results["meta"] = {"date": started.isoformat(timespec="seconds"),
                       "command": "python -m bench.hardening " + " ".join(argv or sys.argv[1:]),
                       "seconds": round((datetime.now(UTC) - started).total_seconds(), 1)}  # fmt: skip
    print(table(results))
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"hardening-{started.strftime('%Y%m%dT%H%M%SZ')}.json"
    out.write_text(json.dumps(results, indent=2, default=str))
    print(f"written: {out}")
    problems = sum(v.get("problem_count", 0) for v in results.values() if isinstance(v, dict))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
