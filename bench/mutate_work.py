"""``python -m bench.mutate_work [--compare DIR]``: the Python work of one ``/mutate`` review,
counted, for this checkout and another: bytecodes executed, Python calls and C calls made by
``admission.review_body`` on each ``/mutate`` payload of the bench.

CPU time per request (``bench.mutate_cost``) is what a change is judged on, but on a shared
machine it moves by ±20-40 % from one minute to the next, more than most single changes to
the request path. A count of the interpreter's work does not move: the same body through the
same code always runs the same bytecodes. It leaves out what runs in C (JSON decoding, dict
comparisons, TLS), so it tells whether a change removed Python work, and ``bench.mutate_cost``
how much CPU that was worth.

Each checkout runs in its own interpreter with its own code (``PYTHONPATH``), on bodies and
policies this checkout writes; the wrap payload's API calls are answered in-process at once
by that checkout's ``bench.compute.InstantCluster``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench import load, payloads, policies
from bench.mutate_cost import MUTATE_PAYLOADS

# Run by each checkout's interpreter: argv[1] is the directory with the bodies and policies.
_COUNT = """
import hashlib, json, sys
from pathlib import Path
from bench.compute import InstantCluster
from webhook import admission
from webhook.shell import policyfiles

work = Path(sys.argv[1])
loaded = policyfiles.load(work / "policies")
deps = admission.Deps(policies=lambda: loaded, cluster=InstantCluster())
counts = {}


def review(body):
    coro = admission.review_body(body, webhook="mutate", timeout=None, deps=deps,
                                 record=admission.Record(webhook="mutate"))
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value
    raise RuntimeError("review_body waited for something")


def tracer(frame, event, arg):
    frame.f_trace_opcodes = True
    if event == "opcode":
        counts["bytecodes"] += 1
    elif event == "call":
        counts["python_calls"] += 1
    return tracer


def profiler(frame, event, arg):
    if event == "c_call":
        counts["c_calls"] += 1


result = {}
for path in sorted(work.glob("*.json")):
    body = path.read_bytes()
    for _ in range(3):  # caches (the policy match) as a running server has them
        answer = review(body)
    counts.update(bytecodes=0, python_calls=0, c_calls=0)
    sys.setprofile(profiler)
    sys.settrace(tracer)
    answer = review(body)
    sys.settrace(None)
    sys.setprofile(None)
    digest = hashlib.sha256(json.dumps(answer, sort_keys=True).encode()).hexdigest()[:12]
    result[path.stem] = dict(counts, answer=digest)
print(json.dumps(result))
"""


def count(repo: Path, work: Path) -> dict[str, dict[str, Any]]:
    """The counts of ``repo``'s code on the bodies in ``work``, and a digest of each answer."""
    env = {"PYTHONPATH": str(repo), "PATH": "/usr/bin:/bin"}
    done = subprocess.run([load.python(), "-c", _COUNT, str(work)], cwd=repo, env=env,
                          check=True, capture_output=True, text=True)  # fmt: skip
    counted: dict[str, dict[str, Any]] = json.loads(done.stdout)
    return counted


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.mutate_work", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("--compare", type=Path, action="append", default=[],
                        help="also count this checkout's code (repeatable)")  # fmt: skip
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="autowrap-mutate-work-") as tmp:
        work = Path(tmp)
        policies.write(work / "policies")
        for payload in payloads.build():
            if payload.name in MUTATE_PAYLOADS:
                (work / f"{payload.name}.json").write_bytes(payload.body()[1])
        checkouts = [("this", load.REPO), *((str(c), c.resolve()) for c in args.compare)]
        counted = {label: count(repo, work) for label, repo in checkouts}
    print(f"{'payload':<12} " + " | ".join(f"{label[-24:]:^30}" for label, _ in checkouts))
    print(f"{'':<12} " + " | ".join(f"{'bytecodes  py calls  C calls':^30}" for _ in checkouts))
    for name in MUTATE_PAYLOADS:
        cells = []
        for label, _ in checkouts:
            c = counted[label].get(name)
            cells.append("-" if c is None else
                         f"{c['bytecodes']:>9} {c['python_calls']:>9} {c['c_calls']:>8}")  # fmt: skip
        print(f"{name:<12} " + " | ".join(f"{cell:^30}" for cell in cells))
    # The same body must get the same answer from every checkout (byte for byte, but its order
    # of keys): a change to the request path that saves work must not change a response.
    differ = [f"{name} ({label})" for name in MUTATE_PAYLOADS for label, _ in checkouts[1:]
              if counted[label].get(name, {}).get("answer") != counted["this"][name]["answer"]]  # fmt: skip
    print("answers: " + (f"differ from this checkout's: {', '.join(differ)}" if differ else
                         "the same from every checkout"))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
