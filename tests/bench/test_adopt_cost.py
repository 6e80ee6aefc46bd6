"""``bench.adopt_cost`` as a CI check: at a tiny size, against the simulated cluster in its own
process, every Job is adopted and every pod released and running, start-up over copied
families, a user's ballast in the covered namespace with a relist and a fresh replica, pods
that claim a real AppWrapper read by its release, and a foreign namespace's large pods
included. No figure is asserted."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson

REPO = Path(__file__).resolve().parents[2]


def test_the_adopt_cost_bench_adopts_releases_and_reports_every_figure(tmp_path: Path) -> None:
    out = tmp_path / "result.json"
    done = subprocess.run(
        [sys.executable, "-m", "bench.adopt_cost", "--jobs", "3", "--scale", "8",
         "--bloat", "2", "--ballast", "3", "--claimed", "3", "--out", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, f"{done.stdout[-4000:]}\n{done.stderr[-3000:]}"
    result = orjson.loads(out.read_bytes())["this"]["rounds"][0]
    assert "failure" not in result, result.get("failure")
    assert result["ok"] is True
    assert result["adopt"]["cpu_ms_per_job"] > 0 and result["release"]["cpu_ms_per_pod"] > 0
    # The cluster wrote what a real one writes while the pods were released and started.
    writes = result["cluster_writes"]
    assert writes["events ADDED"] > 0 and writes["podgroups MODIFIED"] > 0
    assert writes["workloads MODIFIED"] > 0 and writes["pods MODIFIED"] > 0
    assert result["scale"]["jobs"] == 8 and result["scale"]["healthz_probes"] > 0
    assert result["bloat"]["pods"] == 2
    assert result["ballast"]["pods"] == 3 and result["ballast"]["healthz_probes"] > 0
    assert result["claimed"]["pods"] == 3 and result["claimed"]["healthz_probes"] > 0
    assert result["relist"]["healthz_probes"] > 0 and result["restart"]["peak_rss_mib"] > 0
    assert result["adopt"]["floor_ratio"] > 0 and result["release"]["floor_ratio"] > 0
    assert "CPU ms per adopted job" in done.stdout
