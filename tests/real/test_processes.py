"""The reaper of a killed session's processes stops exactly the groups that session started,
whatever their leaders exec'd since (an autowrap replica starts as ``unshare``), and never a
process that merely reuses a recorded pid. Needs no cluster."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from testbed.real import processes


def _gone(popen: subprocess.Popen[bytes]) -> bool:
    for _ in range(100):
        if popen.poll() is not None:
            return True
        time.sleep(0.05)
    return False


def test_a_recorded_group_is_reaped_after_its_leader_execd_and_a_reused_pid_is_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(processes, "LEDGER", tmp_path / "groups")
    supervisor = processes.Supervisor(tmp_path, {"PATH": "/usr/bin:/bin"})
    # The leader becomes another program, as `unshare ... exec python` does.
    left = supervisor.start("replica", ["sh", "-c", "exec sleep 60"])
    other = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        # A line for a pid whose process started at another time: not ours.
        with processes.LEDGER.open("a") as ledger:
            ledger.write(f"{other.pid} 1 sleep\n")
        time.sleep(0.2)  # the shell has exec'd sleep

        assert processes.reap_leftovers() == ["sh"]
        assert _gone(left.popen)
        assert other.poll() is None
    finally:
        other.kill()
        other.wait()
        supervisor.stop_all()
