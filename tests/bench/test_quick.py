"""The bench as a CI smoke check: every payload answered correctly by both servers.

No timing is asserted (CI machines vary); what must hold anywhere is that autowrap, run by its
real CLI against the fake Kubernetes API, gives the expected answer to every request, the floor
too, and that the result file keeps its shape for whoever reads it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson

from bench import payloads

REPO = Path(__file__).resolve().parents[2]
SERVERS = ("floor", "autowrap")
LEVEL_KEYS = {"server", "payload", "concurrency", "requests", "errors", "seconds", "rps",
              "p50_ms", "p95_ms", "p99_ms", "max_ms", "rss_peak_mib", "cpu_ms_per_request",
              "error_samples"}  # fmt: skip


def test_smoke_bench_answers_every_request_correctly(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--smoke", "--out", str(tmp_path)],
        cwd=REPO, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert done.returncode == 0, f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    files = list(tmp_path.glob("*.json"))
    assert len(files) == 1
    result = orjson.loads(files[0].read_bytes())

    names = [p.name for p in payloads.build()]
    assert result["mode"] == "smoke"
    assert [p["name"] for p in result["payloads"]] == names
    assert [c["payload"] for c in result["compute"]] == names
    assert all(c["admit_per_s"] > 0 and c["review_per_s"] > 0 for c in result["compute"])
    levels = result["settings"]["levels"]
    assert {(r["payload"], r["concurrency"]) for r in result["load"]} == {
        (n, c) for n in names for c in levels
    }
    for row in result["load"]:
        assert set(row["ratios"]) >= {"throughput", "p50", "p99", "rss", "cpu_per_request"}
        # The reported pair is one measured round, whole.
        assert len(row["rounds"]) == result["settings"]["rounds"]
        assert {k: row[k] for k in ("floor", "autowrap", "ratios")} in row["rounds"]
        for server in SERVERS:
            level = row[server]
            assert set(level) == LEVEL_KEYS
            assert level["server"] == server
            assert level["requests"] > 0
            assert level["errors"] == 0, (row["payload"], server, level["error_samples"])
            assert level["rss_peak_mib"] > 0
    assert result["targets"]["zero-errors"] == {"met": True, "errors": 0}
    assert "rss" in result["former_targets"]
    # The adopt payloads run under an adopt-mode policy and are answered with the gate
    # (checked per request); the wrap payload under a redirect-mode one.
    adopt = [p for p in payloads.build() if p.expect.gate]
    assert {p.name for p in adopt} == {"adopt-vcjob", "adopt-pod"}
    assert all(p.path == "/mutate" for p in adopt)

    # Every wrap really created an AppWrapper through the fake API (warm-up included).
    calls = result["fakeapi"]["calls"]
    assert calls["appwrappers"] >= result["fakeapi"]["wraps_answered"] > 0
    # Every wrap is authorized; one user's allowed review is kept a few seconds, so the bench's
    # one user is asked about far less often than it wraps.
    assert 0 < calls["subjectaccessreviews"] <= calls["appwrappers"]
    assert "unauthorized" not in calls
    # Every call autowrap made is one the fake API serves (nothing answered 404 by default).
    assert "unrouted" not in calls
    assert result["server_exit_codes"] == {"floor": 0, "autowrap": 0, "fakeapi": 0}
    assert "autowrap bench (smoke)" in done.stdout
