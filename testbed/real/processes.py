"""Child processes of one session: each in its own process group, each with its own log.

Every component runs in a session of its own (``start_new_session``), so a Ctrl-C in the
terminal reaches the launcher alone, which then stops the components in reverse order, each as
a whole group (a component's own children go with it). A component that does not come up is
reported with the tail of its log: a startup failure is said by the component, not guessed.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")
TAIL = 40


class ComponentError(RuntimeError):
    """A component did not come up in time, or exited; the message ends with its log tail."""


def free_ports(count: int) -> list[int]:
    """``count`` distinct TCP ports free on 127.0.0.1 (held open together while chosen)."""
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@dataclass
class Process:
    name: str
    argv: list[str]
    log: Path
    popen: subprocess.Popen[bytes]

    @property
    def running(self) -> bool:
        return self.popen.poll() is None


def tail(path: Path, lines: int = TAIL) -> str:
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 200 * lines))
            text = f.read().decode(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


# Every process group started on this machine for a real cluster, with its program: what a
# session killed before it could stop them (a SIGKILL, a CI timeout) left running is found here
# by the next session, which holds the machine's lock, and stopped (``reap_leftovers``).
LEDGER = Path(tempfile.gettempdir()) / "autowrap-real-cluster.groups"


def started_at(pid: int) -> str | None:
    """When a process started (clock ticks since boot, /proc/<pid>/stat field 22): with its
    pid, it names that process alone, whatever it has exec'd since (an autowrap replica starts
    as ``unshare`` and becomes python)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def reap_leftovers() -> list[str]:
    """Kill the process groups an earlier session recorded and left running; their programs.
    Only a group whose leader is the very process recorded (its pid and its start time) is
    killed: a pid reused since belongs to someone else. Call it holding the machine's lock."""
    killed = []
    with contextlib.suppress(FileNotFoundError):
        for line in LEDGER.read_text().splitlines():
            pid_text, _, rest = line.partition(" ")
            started, _, program = rest.partition(" ")
            if not pid_text.isdigit():
                continue
            if started_at(int(pid_text)) == started:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(int(pid_text), signal.SIGKILL)
                    killed.append(program)
    LEDGER.write_text("")
    return killed


class Supervisor:
    """Starts, watches and stops the session's processes; :meth:`stop_all` leaves none."""

    def __init__(self, logs: Path, env: Mapping[str, str]) -> None:
        self.logs = logs
        self.env = dict(env)
        self.processes: dict[str, Process] = {}
        atexit.register(self.stop_all)

    def start(
        self,
        name: str,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> Process:
        if name in self.processes and self.processes[name].running:
            raise RuntimeError(f"{name} is already running")
        log = self.logs / f"{name}.log"
        with log.open("ab") as out:
            out.write(f"--- {time.strftime('%H:%M:%S')} {' '.join(argv)}\n".encode())
            out.flush()
            popen = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**self.env, **(env or {})},
                cwd=cwd,
                start_new_session=True,
            )
        process = Process(name, list(argv), log, popen)
        self.processes[name] = process
        with LEDGER.open("a") as ledger:
            ledger.write(f"{popen.pid} {started_at(popen.pid)} {argv[0]}\n")
        return process

    def stop(self, name: str, timeout: float = 10.0) -> None:
        """SIGTERM to the component's process group, SIGKILL after ``timeout``."""
        process = self.processes.get(name)
        if process is None:
            return
        group = process.popen.pid
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.popen.wait(timeout)
        # The leader has gone (or hangs): whatever is left of its group is killed either way.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.popen.wait(5.0)

    def stop_all(self) -> None:
        for name in reversed(list(self.processes)):
            self.stop(name, timeout=5.0)

    def log_tail(self, name: str, lines: int = TAIL) -> str:
        process = self.processes.get(name)
        return tail(process.log if process else self.logs / f"{name}.log", lines)

    def fail(self, name: str, why: str) -> ComponentError:
        return ComponentError(f"{name}: {why}\n--- last lines of {self.logs / name}.log ---\n"
                              f"{self.log_tail(name)}")  # fmt: skip

    def wait(
        self,
        name: str,
        check: Callable[[], T | None],
        *,
        timeout: float,
        what: str,
        interval: float = 0.1,
    ) -> T:
        """The first truthy value of ``check``; :class:`ComponentError` (with the log of
        ``name``) when ``timeout`` passes or the process exits first."""
        deadline = time.monotonic() + timeout
        last = ""
        while True:
            try:
                value = check()
            except Exception as error:  # the component is not answering yet
                value, last = None, f"{type(error).__name__}: {error}"
            if value:
                return value
            process = self.processes.get(name)
            if process is not None and not process.running:
                raise self.fail(name, f"exited with code {process.popen.returncode} while "
                                      f"waiting for {what}")  # fmt: skip
            if time.monotonic() > deadline:
                raise self.fail(name, f"not {what} within {timeout:.0f} s"
                                      + (f" (last error: {last})" if last else ""))  # fmt: skip
            time.sleep(interval)
