"""``python -m bench.mutate_cost [--compare DIR] [--payload NAME] [--levels 10,50] [--rounds 5]``:
server CPU per ``/mutate`` request, this checkout beside the floor and, with ``--compare``,
beside another checkout's code (``git worktree add --detach /tmp/aw-0.3 9b8c9df``), all in one
run.

The full bench (``python -m bench``) loads autowrap and the floor with every payload at four
levels; this one loads only the ``/mutate`` payloads (the pod rank, once per pod; the
AppWrapper completion, once per job; adopt mode's preparation of a Volcano Job and of a Pod)
on up to three servers at once: the floor, autowrap from this checkout and autowrap from
``--compare``, each in its own process on the same fake API, certificates and policies. Each
cell (payload, level) runs ``--rounds`` times, the servers' order rotating each round so that
the machine's drift falls on all alike; the median of the rounds and their range are
printed. Every answer is checked as the full bench checks it (the compared version must give
the same kind of answer).

CPU per request is the server's utime + stime (``/proc/<pid>/stat``) over the cell divided by
the requests answered: it does not depend on the load generator, which shares the machine.
Requests per second are bounded by the generator and the machine's load: a lower bound of
what a server can do, printed only as that. ``--profile PATH`` runs this checkout's server
under cProfile and writes its profile to PATH when it stops (its CPU figures then include the
profiler's own cost).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from bench import fakeapi, load, payloads, policies

MUTATE_PAYLOADS = ("pod-rank", "aw-complete", "adopt-vcjob", "adopt-pod")
LEVELS = (10, 50)
# A multiple of the servers' count (two, or three with --compare): each takes each place in the
# rotating order as often.
ROUNDS = 6
REQUESTS = 3000
SECONDS = 4.0
WARM_UP = 20


def _autowrap(
    name: str, repo: Path, work: Path, kubeconfig: Path, profile: Path | None
) -> load.Process:
    py = load.python()
    process = load.Process(name, [], load.free_port(), work / f"{name}.log", repo=repo)
    profiler = ["-m", "bench.cpuprofile", str(profile)] if profile else []
    process.argv = [
        py, *profiler, "-m", "webhook", "serve", "--host", load.HOST, "--port", str(process.port),
        "--metrics-port", str(load.free_port()), "--cert-dir", str(work / "certs"),
        "--policy", str(work / "policies"), "--kubeconfig", str(kubeconfig), "--no-controller",
    ]  # fmt: skip
    return process


def _summary(values: list[float]) -> dict[str, float]:
    return {"median": round(statistics.median(values), 3), "min": min(values), "max": max(values)}


async def _run(
    args: argparse.Namespace, selected: list[payloads.Payload], work: Path
) -> dict[str, Any]:
    py = load.python()
    subprocess.run([py, "-m", "webhook", "certs", "--out", str(work / "certs")],
                   cwd=load.REPO, check=True, capture_output=True)  # fmt: skip
    tls = load.client_tls(work / "certs" / "ca.crt")
    policies.write(work / "policies")
    api = load.Process("fakeapi", [], load.free_port(), work / "fakeapi.log")
    api.argv = [py, "-m", "bench.fakeapi", "--port", str(api.port)]
    kubeconfig = fakeapi.write_kubeconfig(work / "kubeconfig", api.port)
    floor = load.Process("floor", [], load.free_port(), work / "floor.log")
    floor.argv = [py, "-m", "bench.floor", "--host", load.HOST, "--port", str(floor.port),
                  "--cert-dir", str(work / "certs")]  # fmt: skip
    servers = [floor, _autowrap("this", load.REPO, work, kubeconfig, args.profile)]
    if args.compare:
        servers.append(_autowrap("compare", args.compare.resolve(), work, kubeconfig, None))
    cells: list[dict[str, Any]] = []
    try:
        api.start()
        await load.wait_ready(api, f"http://{load.HOST}:{api.port}/bench/stats", None)
        for server in servers:
            server.start()
        for server in servers:
            path = "/healthz" if server is floor else "/readyz"
            await load.wait_ready(server, f"https://{load.HOST}:{server.port}{path}", tls)
        print("  pids: " + ", ".join(f"{s.name} {s.pid}" for s in servers), file=sys.stderr)
        for payload in selected:
            for server in servers:
                expect = None if server is floor else payload.expect
                problems = await load.warm_up(
                    base_url=f"https://{load.HOST}:{server.port}", tls=tls, payload=payload,
                    count=WARM_UP, expect=expect,
                )  # fmt: skip
                if problems:
                    raise RuntimeError(f"{server.name} answers {payload.name} wrongly: "
                                       f"{problems[0]}\n{server.log_tail()}")  # fmt: skip
            for level in args.levels:
                rounds: list[dict[str, Any]] = []
                for n in range(args.rounds):
                    shift = n % len(servers)
                    order = servers[shift:] + servers[:shift]
                    result: dict[str, Any] = {}
                    for server in order:
                        level_result = await load.run_level(
                            server=server, base_url=f"https://{load.HOST}:{server.port}",
                            tls=tls, payload=payload,
                            expect=None if server is floor else payload.expect,
                            concurrency=level, max_requests=args.requests,
                            max_seconds=args.seconds,
                        )  # fmt: skip
                        result[server.name] = level_result.as_json()
                    rounds.append(result)
                cell = _cell(payload.name, level, rounds, [s.name for s in servers])
                cells.append(cell)
                print(_line(cell), file=sys.stderr)
    finally:
        for server in [*reversed(servers), api]:
            server.stop(grace=30.0)
    return {"cells": cells}


def _cell(
    payload: str, level: int, rounds: list[dict[str, Any]], names: list[str]
) -> dict[str, Any]:
    cell: dict[str, Any] = {"payload": payload, "concurrency": level, "rounds": rounds}
    for name in names:
        cpu = [r[name]["cpu_ms_per_request"] for r in rounds if r[name]["cpu_ms_per_request"]]
        cell[name] = {
            "cpu_ms_per_request": _summary(cpu) if cpu else None,
            "rps": _summary([r[name]["rps"] for r in rounds]),
            "errors": sum(r[name]["errors"] for r in rounds),
            "requests": sum(r[name]["requests"] for r in rounds),
        }
    for name in names[1:]:
        # The ratio of each round (both servers loaded minutes apart at most), then the median.
        cell[f"{name}/floor"] = _summary([
            r[name]["cpu_ms_per_request"] / r["floor"]["cpu_ms_per_request"]
            for r in rounds
            if r[name]["cpu_ms_per_request"] and r["floor"]["cpu_ms_per_request"]
        ])  # fmt: skip
    if "compare" in names:
        cell["this/compare"] = _summary([
            r["this"]["cpu_ms_per_request"] / r["compare"]["cpu_ms_per_request"]
            for r in rounds
            if r["this"]["cpu_ms_per_request"] and r["compare"]["cpu_ms_per_request"]
        ])  # fmt: skip
    return cell


def _cpu(figure: dict[str, Any] | None) -> str:
    if figure is None:
        return "-"
    c = figure["cpu_ms_per_request"]
    return "-" if c is None else f"{c['median']:.3f} ({c['min']:.3f}-{c['max']:.3f})"


def _ratio(figure: dict[str, float] | None) -> str:
    return (
        "-" if not figure else f"{figure['median']:.2f}x ({figure['min']:.2f}-{figure['max']:.2f})"
    )


def _line(cell: dict[str, Any]) -> str:
    return (f"  {cell['payload']:<12} c={cell['concurrency']:<3} cpu ms/request floor "
            f"{_cpu(cell['floor'])}, this {_cpu(cell['this'])}, compare {_cpu(cell.get('compare'))}")  # fmt: skip


def table(result: dict[str, Any]) -> str:
    header = (f"{'payload':<12} {'c':>3} | {'CPU ms per request (median, range)':^62} | "
              f"{'this/floor':^18} {'compare/floor':^18} {'this/compare':^18} | "
              f"{'req/s, at least: floor this compare':^36} | errors")  # fmt: skip
    lines = [header, "-" * len(header),
             f"{'':<12} {'':>3} | {'floor':^20} {'this':^20} {'compare':^20} |"]  # fmt: skip
    for cell in result["cells"]:
        rps = " ".join(
            f"{cell[n]['rps']['median']:>8.0f}" if n in cell else f"{'-':>8}"
            for n in ("floor", "this", "compare")
        )
        errors = "/".join(str(cell[n]["errors"]) for n in ("floor", "this", "compare") if n in cell)
        lines.append(
            f"{cell['payload']:<12} {cell['concurrency']:>3} | {_cpu(cell['floor']):^20} "
            f"{_cpu(cell['this']):^20} {_cpu(cell.get('compare')):^20} | "
            f"{_ratio(cell.get('this/floor')):^18} {_ratio(cell.get('compare/floor')):^18} "
            f"{_ratio(cell.get('this/compare')):^18} | {rps:^36} | {errors}"
        )
    return "\n".join(lines)


def _load_average() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.mutate_cost", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("--compare", type=Path, help="also serve this checkout's code (e.g. 0.3)")
    parser.add_argument("--payload", action="append", choices=MUTATE_PAYLOADS,
                        help="only these payloads (repeatable; default: all four)")  # fmt: skip
    parser.add_argument("--levels", default=",".join(map(str, LEVELS)),
                        help=f"concurrency levels (default {','.join(map(str, LEVELS))})")  # fmt: skip
    parser.add_argument("--rounds", type=int, default=ROUNDS, help=f"rounds a cell ({ROUNDS})")
    parser.add_argument("--requests", type=int, default=REQUESTS,
                        help=f"requests a server per round, at most ({REQUESTS})")  # fmt: skip
    parser.add_argument("--seconds", type=float, default=SECONDS,
                        help=f"seconds a server per round, at most ({SECONDS})")  # fmt: skip
    parser.add_argument("--profile", type=Path, help="cProfile this checkout's server into PATH")
    parser.add_argument("--out", type=Path, help="write the JSON result here")
    args = parser.parse_args(argv)
    args.levels = [int(x) for x in args.levels.split(",")]
    wanted = args.payload or list(MUTATE_PAYLOADS)
    selected = [p for p in payloads.build() if p.name in wanted]
    started = datetime.now(UTC).replace(microsecond=0)
    load_before, t0 = _load_average(), time.monotonic()
    with tempfile.TemporaryDirectory(prefix="autowrap-mutate-cost-") as tmp:
        result = asyncio.run(_run(args, selected, Path(tmp)))
    result.update({
        "started": started.isoformat(), "seconds": round(time.monotonic() - t0, 1),
        "load_average": {"before": load_before, "after": _load_average()},
        "cpus": os.cpu_count(), "compare": str(args.compare) if args.compare else None,
        "command": " ".join(["python -m bench.mutate_cost", *sys.argv[1:]]),
    })  # fmt: skip
    print(table(result))
    print(f"\n{result['started']}, {result['seconds']} s, load average before "
          f"{result['load_average']['before']}, after {result['load_average']['after']}")  # fmt: skip
    if args.out:
        args.out.write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
    failed = any(cell[n]["errors"] for cell in result["cells"] for n in ("floor", "this", "compare")
                 if n in cell)  # fmt: skip
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
