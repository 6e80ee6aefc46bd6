"""``python -m bench.cpuprofile OUT -m MODULE [ARGS...]``: run ``python -m MODULE ARGS...`` under
cProfile with a CPU-time clock and write the profile to OUT when it exits.

``python -m cProfile`` times functions by the wall clock: on a shared machine a server that is
preempted in the middle of a write (a write to loopback wakes the reader, which often takes the
core) has that wait charged to the write, and the time the event loop sleeps in ``epoll`` to
the loop. Counting the process's CPU time instead charges each function what it spent.
"""

from __future__ import annotations

import cProfile
import runpy
import sys
import time


def main() -> None:
    out, dash_m, module, *args = sys.argv[1:]
    if dash_m != "-m":
        raise SystemExit("usage: python -m bench.cpuprofile OUT -m MODULE [ARGS...]")
    sys.argv = [module, *args]
    profiler = cProfile.Profile(time.process_time)
    profiler.enable()
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    finally:
        profiler.disable()
        profiler.dump_stats(out)


if __name__ == "__main__":
    main()
