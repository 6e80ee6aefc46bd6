"""The results: one table on stdout and one JSON file per run.

Ratios are autowrap over the floor measured in the same run: throughput as a share of the
floor's requests/s, latency as a multiple of the floor's p99. Absolute numbers depend on the
machine and on the load generator sharing it; the ratios are what the targets are set on.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import orjson

TARGET_LEVEL = 50
# Version 0.2's targets (issue 11): adopt mode's per-job call and redirect's wrap, in CPU.
TARGET_CANDIDATE_CPU_RATIO = 3.0
TARGET_WRAP_CPU_MS = 1.5
WRAP_PAYLOAD = "wrap"
# Version 0.1's targets, replaced by the above; still computed and reported beside them.
FORMER_THROUGHPUT = 0.5
FORMER_P99 = 2.0
FORMER_RSS_MIB = 150.0
SCHEMA = 2


def ratios(floor: dict[str, Any], autowrap: dict[str, Any]) -> dict[str, float | None]:
    def div(a: float | None, b: float | None) -> float | None:
        return round(a / b, 3) if a is not None and b else None

    return {
        "throughput": div(autowrap["rps"], floor["rps"]),
        "p50": div(autowrap["p50_ms"], floor["p50_ms"]),
        "p99": div(autowrap["p99_ms"], floor["p99_ms"]),
        "rss": div(autowrap["rss_peak_mib"], floor["rss_peak_mib"]),
        "cpu_per_request": div(autowrap["cpu_ms_per_request"], floor["cpu_ms_per_request"]),
    }


def median_round(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """The floor/autowrap pair of the round with the median throughput ratio (the lower middle
    for an even count): a pair measured back to back, never a mix of two rounds."""
    ranked = sorted(rounds, key=lambda r: r["ratios"]["throughput"] or 0.0)
    chosen = ranked[(len(ranked) - 1) // 2]
    return {"floor": chosen["floor"], "autowrap": chosen["autowrap"], "ratios": chosen["ratios"]}


def _median(values: list[float]) -> float | None:
    """The median (the lower middle for an even count), or None without values."""
    ranked = sorted(values)
    return ranked[(len(ranked) - 1) // 2] if ranked else None


def _cpu_over_rounds(row: dict[str, Any], key: str) -> tuple[float | None, list[float]]:
    """The median over the rounds of a CPU figure (``key`` in the ratios, or autowrap's own
    ``cpu_ms_per_request``), and every round's value. CPU per request does not depend on the
    load generator, so each round's pair is judged on its own and the median taken."""
    values: list[float] = []
    for pair in row["rounds"]:
        value = (
            pair["ratios"].get(key) if key != "cpu_ms" else pair["autowrap"]["cpu_ms_per_request"]
        )
        if value is not None:
            values.append(value)
    return _median(values), values


def targets(rows: list[dict[str, Any]], candidate_payloads: Iterable[str]) -> dict[str, Any]:
    """Version 0.2's targets, judged on this run: server CPU per request at c=50 (where run),
    the median over the rounds; errors over every round."""
    candidates = set(candidate_payloads)
    out: dict[str, Any] = {}
    for row in rows:
        if row["concurrency"] != TARGET_LEVEL:
            continue
        if row["payload"] in candidates:
            ratio, spread = _cpu_over_rounds(row, "cpu_per_request")
            out[f"mutate-candidate-cpu:{row['payload']}"] = {
                "met": ratio is not None and ratio <= TARGET_CANDIDATE_CPU_RATIO,
                "cpu_ratio": ratio,
                "rounds": spread,
                "autowrap_cpu_ms": row["autowrap"]["cpu_ms_per_request"],
                "floor_cpu_ms": row["floor"]["cpu_ms_per_request"],
                "wanted": f"server CPU per request <= {TARGET_CANDIDATE_CPU_RATIO:g}x the floor's",
            }
        elif row["payload"] == WRAP_PAYLOAD:
            cpu, spread = _cpu_over_rounds(row, "cpu_ms")
            out["redirect-wrap-cpu"] = {
                "met": cpu is not None and cpu <= TARGET_WRAP_CPU_MS,
                "autowrap_cpu_ms": cpu,
                "rounds": spread,
                "wanted": f"server CPU per request <= {TARGET_WRAP_CPU_MS:g} ms",
            }
    errors = sum(
        pair[s]["errors"] for row in rows for pair in row["rounds"] for s in ("floor", "autowrap")
    )
    out["zero-errors"] = {"met": errors == 0, "errors": errors}
    return out


def former_targets(rows: list[dict[str, Any]], mutate_payloads: Iterable[str]) -> dict[str, Any]:
    """Version 0.1's targets, which version 0.2's replace: throughput and p99 against the floor
    for every /mutate payload at c=50 (the median round), peak RSS over every round. Reported
    so that figures stay comparable with earlier runs; they decide nothing."""
    mutate = set(mutate_payloads)
    out: dict[str, Any] = {}
    for row in rows:
        if row["payload"] in mutate and row["concurrency"] == TARGET_LEVEL:
            r = row["ratios"]
            met = (r["throughput"] or 0) >= FORMER_THROUGHPUT and (r["p99"] or 99) <= FORMER_P99
            out[f"mutate-c{TARGET_LEVEL}:{row['payload']}"] = {
                "met": met,
                "throughput_ratio": r["throughput"],
                "p99_ratio": r["p99"],
                "wanted": f"throughput >= {FORMER_THROUGHPUT:.0%} of the floor, "
                f"p99 <= {FORMER_P99:g}x the floor",
            }
    peak = max(
        (pair["autowrap"]["rss_peak_mib"] or 0.0 for row in rows for pair in row["rounds"]),
        default=0.0,
    )
    out["rss"] = {"met": peak < FORMER_RSS_MIB, "autowrap_peak_mib": peak,
                  "wanted": f"< {FORMER_RSS_MIB:g} MiB"}  # fmt: skip
    return out


def _num(value: float | None, width: int, digits: int = 1) -> str:
    if value is None:
        return "-".rjust(width)
    return f"{value:.{digits}f}".rjust(width)


def table(result: dict[str, Any]) -> str:
    """The human view: one line per payload and concurrency, floor then autowrap."""
    head = (
        f"{'payload':<18} {'c':>3} {'n':>5} | {'floor rps':>9} {'p50':>6} {'p95':>6} {'p99':>6} "
        f"{'max':>6} {'RSS':>5} | {'autowrap':>8} {'p50':>6} {'p95':>6} {'p99':>6} {'max':>7} "
        f"{'RSS':>5} | {'thr %':>6} {'range':>7} {'p99 x':>6} | {'cpu ms f/a':>11} | {'err f/a':>7}"
    )
    lines = [
        f"autowrap bench ({result['mode']}), {result['started']}, "
        f"{result['machine']['cpus']} CPUs, event loop {result['machine']['loop']}",
        "n = autowrap requests in the level, latencies in ms, RSS = peak server VmRSS in MiB, thr % = autowrap rps / floor rps, "
        "p99 x = autowrap p99 / floor p99, cpu ms = server CPU time per request, "
        f"{result['settings'].get('rounds', 1)} round(s) per cell: the median by thr % is shown, "
        "range = lowest-highest thr % over the rounds, err over every round",
        "",
        head,
        "-" * len(head),
    ]
    previous = None
    for row in result["load"]:
        if previous is not None and row["payload"] != previous:
            lines.append("")
        previous = row["payload"]
        f, a, r = row["floor"], row["autowrap"], row["ratios"]
        thr = None if r["throughput"] is None else r["throughput"] * 100
        spread = [p["ratios"]["throughput"] or 0.0 for p in row["rounds"]]
        low, high = round(min(spread) * 100), round(max(spread) * 100)
        errs = [sum(p[s]["errors"] for p in row["rounds"]) for s in ("floor", "autowrap")]
        lines.append(
            f"{row['payload']:<18} {row['concurrency']:>3} {a['requests']:>5} | {_num(f['rps'], 9)} "
            f"{_num(f['p50_ms'], 6)} {_num(f['p95_ms'], 6)} {_num(f['p99_ms'], 6)} "
            f"{_num(f['max_ms'], 6)} {_num(f['rss_peak_mib'], 5, 0)} | {_num(a['rps'], 8)} "
            f"{_num(a['p50_ms'], 6)} {_num(a['p95_ms'], 6)} {_num(a['p99_ms'], 6)} "
            f"{_num(a['max_ms'], 7)} {_num(a['rss_peak_mib'], 5, 0)} | {_num(thr, 6, 0)} "
            f"{f'{low}-{high}':>7} {_num(r['p99'], 6, 2)} | "
            f"{_num(f['cpu_ms_per_request'], 5, 2)}/{_num(a['cpu_ms_per_request'], 5, 2)} | "
            f"{errs[0]:>3}/{errs[1]:<3}"
        )
        for pair in row["rounds"]:
            for sample in pair["floor"]["error_samples"] + pair["autowrap"]["error_samples"]:
                lines.append(f"    error: {sample}")
    lines += ["", "compute only (no HTTP): calls/s and ms per call"]
    lines.append(
        f"{'payload':<18} {'bytes':>9} | {'admit/s':>9} {'ms':>8} | {'review/s':>9} {'ms':>8}"
    )
    for c in result["compute"]:
        lines.append(
            f"{c['payload']:<18} {c['bytes']:>9} | {_num(c['admit_per_s'], 9)} "
            f"{_num(c['admit_ms'], 8, 3)} | {_num(c['review_per_s'], 9)} {_num(c['review_ms'], 8, 3)}"
        )
    lines += ["", "targets (version 0.2):"]
    lines += _judged(result["targets"])
    if result.get("former_targets"):
        lines += ["", "former targets (version 0.1, replaced; reported, not judged):"]
        lines += _judged(result["former_targets"])
    return "\n".join(lines)


def _judged(targets: dict[str, Any]) -> list[str]:
    lines = []
    for name, t in targets.items():
        detail = ", ".join(f"{k}={v}" for k, v in t.items() if k != "met")
        lines.append(f"  {'MET ' if t['met'] else 'MISSED'} {name}: {detail}")
    return lines


def write(result: dict[str, Any], out_dir: Path) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    stamp = result["started"].replace(":", "").replace("-", "")
    path = out_dir / f"{stamp}.json"
    path.write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
    return path
