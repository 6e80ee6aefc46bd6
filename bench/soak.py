"""``python -m bench.soak [--seconds 300] [--clients 4]``: a sustained-load soak of autowrap.

Starts a fake cluster in this process and ``python -m webhook serve`` as its own
process on loopback, loads it with the mix of pass-through, AppWrapper-completion and wrap
requests for the given time, samples the server's resident set, and prints the figures as
JSON. Exits 1 on any failed request or when the server died.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import tempfile
from pathlib import Path
from typing import Any

from testbed.cluster.cluster import FakeCluster, for_autowrap
from testbed.cluster.resources import APPWRAPPERS, Resource
from testbed.pki import service_dns_names, write_pki
from testbed.scenarios import soak, start_serve


async def run(seconds: float, clients: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="autowrap-soak-") as scratch:
        tmp = Path(scratch)
        pki = write_pki(tmp / "pki", service_dns_names())
        async with for_autowrap(keep_requests=1000) as kube:
            created = _count_appwrapper_creates(kube)
            served = await start_serve(pki, kube, tmp)
            pruning = asyncio.create_task(_forget_appwrappers(kube))
            try:
                figures = await soak(served, seconds, clients=clients)
            finally:
                pruning.cancel()
                served.process.send_signal(signal.SIGTERM)
                figures_exit = await asyncio.to_thread(served.process.wait, 60)
            figures["exit_code"] = figures_exit
            figures["appwrappers_created"] = created[0]
            return figures


async def _forget_appwrappers(kube: FakeCluster) -> None:
    """Every wrap in the soak names a new job, so a stored AppWrapper is never read again;
    dropping them keeps this process's memory flat however long the soak runs."""
    while True:
        await asyncio.sleep(5)
        for namespace, name in kube.appwrappers():
            kube.store.delete(APPWRAPPERS, namespace, name)


def _count_appwrapper_creates(kube: FakeCluster) -> list[int]:
    """A counter of the AppWrappers stored so far, pruned ones included."""
    created = [0]

    def count(kind: str, res: Resource, obj: Any, old: Any) -> None:
        if kind == "ADDED" and res == APPWRAPPERS:
            created[0] += 1

    kube.store.on_write(count)
    return created


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__)
    parser.add_argument("--seconds", type=float, default=300.0)
    parser.add_argument("--clients", type=int, default=4)
    args = parser.parse_args(argv)
    figures = asyncio.run(run(args.seconds, args.clients))
    print(json.dumps(figures, indent=2))
    return 0 if figures["errors"] == 0 and figures["exit_code"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
