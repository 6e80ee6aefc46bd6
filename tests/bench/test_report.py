"""How a cell measured in several rounds is reported and judged."""

from __future__ import annotations

from typing import Any

from bench import report


def _level(
    server: str, rps: float, p99: float, errors: int = 0, rss: float = 100.0, cpu: float = 0.1
) -> dict[str, Any]:
    latencies = {"p50_ms": p99 / 2, "p95_ms": p99, "p99_ms": p99, "max_ms": p99}
    return {"server": server, "requests": 4000, "rps": rps, **latencies, "errors": errors,
            "rss_peak_mib": rss, "cpu_ms_per_request": cpu, "error_samples": []}  # fmt: skip


def _round(floor_rps: float, autowrap_rps: float, **autowrap: Any) -> dict[str, Any]:
    pair = {
        "floor": _level("floor", floor_rps, 10.0),
        "autowrap": _level("autowrap", autowrap_rps, 15.0, **autowrap),
    }
    pair["ratios"] = report.ratios(pair["floor"], pair["autowrap"])
    return pair


def _row(rounds: list[dict[str, Any]], payload: str = "aw-complete") -> dict[str, Any]:
    return {
        "payload": payload,
        "concurrency": 50,
        **report.median_round(rounds),
        "rounds": rounds,
    }


def test_the_median_round_is_reported_whole() -> None:
    slow, middle, fast = _round(5000, 2000), _round(5000, 3000), _round(4000, 3800)
    chosen = report.median_round([fast, slow, middle])
    assert chosen == {k: middle[k] for k in ("floor", "autowrap", "ratios")}
    assert chosen["ratios"]["throughput"] == 0.6


def test_an_even_count_takes_the_lower_middle() -> None:
    rounds = [_round(5000, 3500), _round(5000, 2000), _round(5000, 3000), _round(5000, 4000)]
    assert report.median_round(rounds)["ratios"]["throughput"] == 0.6


def test_errors_and_memory_count_in_every_round_not_only_the_reported_one() -> None:
    rounds = [_round(5000, 3000), _round(5000, 2000, errors=2, rss=180.0), _round(5000, 3500)]
    row = _row(rounds)
    assert row["autowrap"]["errors"] == 0  # the reported round had none
    judged = report.targets([row], [])
    assert judged["zero-errors"] == {"met": False, "errors": 2}
    former = report.former_targets([row], ["aw-complete"])
    assert former["rss"]["met"] is False and former["rss"]["autowrap_peak_mib"] == 180.0
    assert former["mutate-c50:aw-complete"]["throughput_ratio"] == 0.6
    table = report.table(
        {"mode": "full", "started": "now", "machine": {"cpus": 2, "loop": "uvloop"},
         "settings": {"rounds": 3}, "load": [row], "compute": [], "targets": judged,
         "former_targets": former}
    )  # fmt: skip
    line = next(t for t in table.splitlines() if t.startswith("aw-complete"))
    assert "40-70" in line  # every round's throughput ratio, lowest to highest
    assert line.rstrip().endswith("0/2")  # errors over every round


def test_cpu_targets_take_the_median_over_the_rounds() -> None:
    candidate = _row(
        [_round(5000, 2000, cpu=0.25), _round(5000, 2500, cpu=0.4), _round(5000, 3000, cpu=0.2)],
        payload="adopt-vcjob",
    )
    wrap = _row(
        [_round(5000, 300, cpu=1.2), _round(5000, 250, cpu=1.8), _round(5000, 280, cpu=1.4)],
        payload="wrap",
    )
    judged = report.targets([candidate, wrap], ["adopt-vcjob"])
    adopt = judged["mutate-candidate-cpu:adopt-vcjob"]
    assert adopt["cpu_ratio"] == 2.5 and adopt["met"] is True  # 2.0, 2.5, 4.0 over the rounds
    assert sorted(adopt["rounds"]) == [2.0, 2.5, 4.0]
    assert judged["redirect-wrap-cpu"]["autowrap_cpu_ms"] == 1.4
    assert judged["redirect-wrap-cpu"]["met"] is True
    slow_wrap = _row([_round(5000, 300, cpu=1.6)], payload="wrap")
    assert report.targets([slow_wrap], [])["redirect-wrap-cpu"]["met"] is False
