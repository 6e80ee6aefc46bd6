"""``python -m bench [--quick | --smoke]``: autowrap against the floor, same run, same machine.

Starts a fake Kubernetes API, autowrap (its real CLI, with a kubeconfig for the fake API) and
the floor, each in its own process on loopback ports chosen now; measures compute-only rates in
this process; then loads both servers with every payload at every concurrency level, floor and
autowrap alternating so that drift hits both (a full run measures each cell three times and
reports the pair with the median throughput ratio: this machine's speed drifts by ±20 % from
minute to minute). Prints a table, writes
``bench/results/<timestamp>.json``, stops everything, and exits 1 if any request failed.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import compute, fakeapi, load, payloads, policies, report


@dataclass(frozen=True)
class Mode:
    """Request budgets: every cell stops at whichever of count or time comes first."""

    name: str
    levels: tuple[int, ...]
    small_requests: int
    small_seconds: float
    # (at least, at most) for ~1 MiB objects: 2c requests within those bounds. Above "at most"
    # concurrent requests the level is capped: 200 requests of 1 MiB in flight at once would
    # take autowrap longer than the apiserver's 10 s timeout on this class of machine.
    large_requests: tuple[int, int]
    large_seconds: float
    warm_up: int
    compute_seconds: float
    # Floor/autowrap pairs per cell; the pair with the median throughput ratio is reported.
    rounds: int

    def budget(self, payload: payloads.Payload, concurrency: int) -> tuple[int, float]:
        if payload.size() > 100_000:
            least, most = self.large_requests
            return max(least, min(most, 2 * concurrency)), self.large_seconds
        return max(self.small_requests, concurrency), self.small_seconds


MODES = {
    "full": Mode("full", (1, 10, 50, 200), 4000, 5.0, (30, 60), 8.0, 5, 1.0, 3),
    "quick": Mode("quick", (1, 10, 50, 200), 400, 0.6, (4, 20), 1.0, 2, 0.2, 1),
    "smoke": Mode("smoke", (1, 10), 20, 1.0, (3, 3), 1.0, 1, 0.02, 1),
}
RESULTS = Path(__file__).resolve().parent / "results"


def _uvloop_available() -> bool:
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return False
    return True


async def _bench(mode: Mode, selected: list[payloads.Payload], work: Path) -> dict[str, Any]:
    py = load.python()
    cert_dir = work / "certs"
    subprocess.run(
        [py, "-m", "webhook", "certs", "--out", str(cert_dir)],
        cwd=load.REPO, check=True, capture_output=True,
    )  # fmt: skip
    tls = load.client_tls(cert_dir / "ca.crt")
    policy_dir = policies.write(work / "policies")

    api = load.Process("fakeapi", [], load.free_port(), work / "fakeapi.log")
    api.argv = [py, "-m", "bench.fakeapi", "--port", str(api.port)]
    kubeconfig = fakeapi.write_kubeconfig(work / "kubeconfig", api.port)
    autowrap = load.Process("autowrap", [], load.free_port(), work / "autowrap.log")
    metrics_port = load.free_port()
    autowrap.argv = [
        py, "-m", "webhook", "serve", "--host", load.HOST, "--port", str(autowrap.port),
        "--metrics-port", str(metrics_port), "--cert-dir", str(cert_dir),
        "--policy", str(policy_dir), "--kubeconfig", str(kubeconfig),
        # The controller is measured on its own (python -m bench.controller): here it would
        # only compete for the Lease against an API that does not serve one.
        "--no-controller",
    ]  # fmt: skip
    floor = load.Process("floor", [], load.free_port(), work / "floor.log")
    floor.argv = [py, "-m", "bench.floor", "--host", load.HOST, "--port", str(floor.port),
                  "--cert-dir", str(cert_dir)]  # fmt: skip
    servers = [api, autowrap, floor]
    started = datetime.now(UTC).replace(microsecond=0)
    print(f"bench {mode.name}: computing payloads ...", file=sys.stderr)
    computed = compute.measure(selected, policy_dir, mode.compute_seconds)
    rows: list[dict[str, Any]] = []
    try:
        for process in servers:
            process.start()
        await load.wait_ready(api, f"http://{load.HOST}:{api.port}/bench/stats", None)
        await load.wait_ready(autowrap, f"https://{load.HOST}:{autowrap.port}/readyz", tls)
        await load.wait_ready(floor, f"https://{load.HOST}:{floor.port}/healthz", tls)
        idle_rss = {p.name: load.rss_mib(p.pid) for p in (floor, autowrap)}
        targets_by_name = {floor.name: floor, autowrap.name: autowrap}
        for payload in selected:
            for server in (floor, autowrap):
                problems = await load.warm_up(
                    base_url=f"https://{load.HOST}:{server.port}", tls=tls, payload=payload,
                    count=mode.warm_up, expect=payload.expect if server is autowrap else None,
                )  # fmt: skip
                if problems:
                    raise RuntimeError(
                        f"{server.name} answers {payload.name} wrongly: {problems[0]}\n"
                        f"{server.log_tail()}"
                    )
            for level in mode.levels:
                count, seconds = mode.budget(payload, level)
                cell: dict[str, Any] = {
                    "payload": payload.name, "path": payload.path, "concurrency": level,
                }  # fmt: skip
                rounds: list[dict[str, Any]] = []
                for _ in range(mode.rounds):
                    pair: dict[str, Any] = {}
                    for name in ("floor", "autowrap"):
                        server = targets_by_name[name]
                        result = await load.run_level(
                            server=server, base_url=f"https://{load.HOST}:{server.port}",
                            tls=tls, payload=payload,
                            expect=payload.expect if name == "autowrap" else None,
                            concurrency=level, max_requests=count, max_seconds=seconds,
                        )  # fmt: skip
                        pair[name] = result.as_json()
                    pair["ratios"] = report.ratios(pair["floor"], pair["autowrap"])
                    rounds.append(pair)
                cell.update(report.median_round(rounds))
                cell["rounds"] = rounds
                rows.append(cell)
                print(
                    f"  {payload.name:<18} c={level:<3} floor {cell['floor']['rps']:>8} rps, "
                    f"autowrap {cell['autowrap']['rps']:>8} rps, errors "
                    f"{cell['floor']['errors']}/{cell['autowrap']['errors']}",
                    file=sys.stderr,
                )
        api_stats = await _api_stats(api.port)
    finally:
        exits = {p.name: p.stop() for p in reversed(servers)}
    finished = datetime.now(UTC).replace(microsecond=0)
    wraps = sum(
        pair["autowrap"]["requests"] - pair["autowrap"]["errors"]
        for row in rows
        if row["payload"] == "wrap"
        for pair in row["rounds"]
    )
    return {
        "schema": report.SCHEMA,
        "mode": mode.name,
        "started": started.isoformat(),
        "finished": finished.isoformat(),
        "command": " ".join(["python -m bench", *sys.argv[1:]]),
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "loop": "uvloop" if _uvloop_available() else "asyncio",
        },
        "settings": {
            "levels": list(mode.levels),
            "small_requests": mode.small_requests,
            "small_seconds": mode.small_seconds,
            "large_requests": list(mode.large_requests),
            "large_seconds": mode.large_seconds,
            "rounds": mode.rounds,
            "timeout_seconds": load.TIMEOUT_SECONDS,
            "sni": load.SNI,
        },
        "payloads": [
            {"name": p.name, "path": p.path, "bytes": p.size(), "description": p.description}
            for p in selected
        ],
        "idle_rss_mib": idle_rss,
        "compute": computed,
        "load": rows,
        "fakeapi": {"calls": api_stats, "wraps_answered": wraps},
        "server_exit_codes": exits,
        "targets": report.targets(rows, [p.name for p in selected if p.expect.gate]),
        # Version 0.1 judged its /mutate payloads on throughput; the adopt payloads are new.
        "former_targets": report.former_targets(
            rows, [p.name for p in selected if p.path == "/mutate" and not p.expect.gate]
        ),
    }


async def _api_stats(port: int) -> dict[str, int]:
    import aiohttp

    url = f"http://{load.HOST}:{port}/bench/stats"
    async with aiohttp.ClientSession() as session, session.get(url) as resp:
        stats: dict[str, int] = await resp.json()
        return stats


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--quick", action="store_true", help="all levels, small budgets (< 1 min)")
    group.add_argument("--smoke", action="store_true", help="tiny budgets, levels 1 and 10 (CI)")
    parser.add_argument("--payload", action="append", metavar="NAME",
                        help="run only these payloads (repeatable)")  # fmt: skip
    parser.add_argument("--out", type=Path, default=RESULTS, help="directory for the JSON result")
    args = parser.parse_args(argv)
    mode = MODES["smoke" if args.smoke else "quick" if args.quick else "full"]
    selected = payloads.build()
    if args.payload:
        unknown = set(args.payload) - {p.name for p in selected}
        if unknown:
            parser.error(f"unknown payload(s): {', '.join(sorted(unknown))}")
        selected = [p for p in selected if p.name in args.payload]
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="autowrap-bench-") as tmp:
        result = asyncio.run(_bench(mode, selected, Path(tmp)))
    result["seconds"] = round(time.monotonic() - t0, 1)
    path = report.write(result, args.out)
    print(report.table(result))
    print(f"\nresult: {path} ({result['seconds']} s)")
    return 0 if result["targets"]["zero-errors"]["met"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
