"""The controller bench as a CI check: at its smoke size, every job adopted, every pod released.

No timing is asserted. The smoke size runs the fake store as the tests run it (CRD schemas
checked, the garbage collector on every write), so an AppWrapper the schema refuses or an
ownerReference the collector would act on shows up here too.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson

from bench import controller

REPO = Path(__file__).resolve().parents[2]


def test_smoke_controller_bench_adopts_and_releases_everything(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.controller", "--smoke", "--out", str(tmp_path)],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, f"{done.stdout[-4000:]}\n{done.stderr[-3000:]}"
    files = list(tmp_path.glob("controller-*.json"))
    assert len(files) == 1
    result = orjson.loads(files[0].read_bytes())

    mode = controller.MODES["smoke"]
    assert result["mode"] == "smoke" and result["jobs"] == mode.jobs
    assert len(result["rounds"]) == mode.rounds
    for round_ in result["rounds"]:
        assert "failure" not in round_, round_.get("failure")
        checks = round_["checks"]
        jobs = mode.warm_up + mode.jobs + mode.paced_jobs
        # Every job adopted and owned by its AppWrapper, exactly one AppWrapper created each.
        assert checks["jobs"] == checks["appwrappers"] == checks["appwrapper_creates"] == jobs
        assert checks["duplicate_creates"] == {}
        assert checks["not_adopted"] == [] and checks["not_owned"] == []
        # Every pod (4 per job of the warm-up and the burst) released with Kueue's placement,
        # none before its AppWrapper was admitted.
        assert checks["pods"] == 4 * (mode.warm_up + mode.jobs) == round_["pods"] + 4 * mode.warm_up
        assert checks["still_gated"] == [] and checks["misplaced"] == []
        assert checks["released_before_admission"] == []
        assert checks["ok"] is True
        assert round_["in_flight"]["gated_pods"] == round_["pods"]
        assert round_["controller_metrics"]["autowrap_controller_leading"] == 1.0
        assert round_["server_exit_code"] == 0
    assert result["summary"]["targets"]["correct"] == {"met": True}
    assert "autowrap controller bench (smoke)" in done.stdout
