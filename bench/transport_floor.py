"""``python -m bench.transport_floor --kubeconfig K --control URL``: what reading the API costs
a Python process that makes no decision at all, on the cluster ``bench.adopt_cost`` measures
autowrap against: the floor under autowrap's CPU per adopted Job and per released pod.

It speaks to the API as autowrap's client does (aiohttp on uvloop, TLS with the kubeconfig's
CA, JSON decoded with orjson) and does nothing else:

- *per call*: ``GET`` one namespace, one call after the other;
- *per watch event*: a watch of pods labelled ``workload.codeflare.dev/appwrapper`` in a
  namespace, while the simulated cluster creates pods of about a real pod's size there, one
  every ``EVENT_INTERVAL_MS`` (its ``/bloat`` endpoint); each event is read as a line and
  decoded.

Prints one JSON object: CPU microseconds per call and per event, from this process's own
``time.process_time``.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import ssl
import time
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import uvloop
import yaml

from webhook.model import names

POD_BYTES = 3500  # a Volcano worker pod as the simulated cluster stores it is about 3.9 KB
# Events about as far apart as in the release phase (about 120 a second): each one wakes the
# reader on its own, as there. Events in a burst share a read and cost a fifth as much.
EVENT_INTERVAL_MS = 8


def _server(kubeconfig: Path) -> tuple[str, dict[str, str], dict[str, Any]]:
    """The API's address, the headers every call carries, and the TLS options: the
    kubeconfig's CA and server name, as the official client uses them."""
    config = yaml.safe_load(kubeconfig.read_text())
    cluster = config["clusters"][0]["cluster"]
    token = config["users"][0]["user"]["token"]
    options: dict[str, Any] = {}
    if "certificate-authority-data" in cluster:
        context = ssl.create_default_context(
            cadata=base64.b64decode(cluster["certificate-authority-data"]).decode()
        )
        options = {"ssl": context, "server_hostname": cluster.get("tls-server-name")}
    headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
    return cluster["server"], headers, options


async def _calls(
    session: aiohttp.ClientSession, server: str, count: int, options: dict[str, Any]
) -> float:
    url = f"{server}/api/v1/namespaces/default"
    started = time.process_time()
    for _ in range(count):
        async with session.get(url, **options) as response:
            orjson.loads(await response.read())
    return (time.process_time() - started) / count


async def _events(
    session: aiohttp.ClientSession, server: str, control: str, namespace: str, count: int,
    options: dict[str, Any],
) -> float:  # fmt: skip
    pods = f"{server}/api/v1/namespaces/{namespace}/pods"
    selector = {"labelSelector": names.APPWRAPPER_LABEL}
    async with session.get(pods, params=selector, **options) as response:
        version = orjson.loads(await response.read())["metadata"]["resourceVersion"]
    query = {**selector, "watch": "true", "resourceVersion": version, "timeoutSeconds": "120"}
    seen = 0
    started = 0.0
    timeout = aiohttp.ClientTimeout(total=150)
    async with session.get(pods, params=query, timeout=timeout, **options) as watch:
        trigger = asyncio.create_task(
            session.post(f"{control}/bloat", params={
                "count": str(count), "size": str(POD_BYTES), "prefix": f"floor{int(time.time())}",
                "interval_ms": str(EVENT_INTERVAL_MS)})
        )  # fmt: skip
        started = time.process_time()
        line = bytearray()
        async for chunk in watch.content.iter_any():
            start = 0
            while (end := chunk.find(b"\n", start)) >= 0:
                line += chunk[start:end]
                start = end + 1
                event: Any = orjson.loads(line)
                line.clear()
                if event.get("type") in ("ADDED", "MODIFIED", "DELETED"):
                    seen += 1
            line += chunk[start:]
            if seen >= count:
                break
        spent = time.process_time() - started
        (await trigger).release()
    return spent / max(seen, 1)


async def measure(kubeconfig: Path, control: str, namespace: str, count: int) -> dict[str, float]:
    server, headers, options = _server(kubeconfig)
    async with aiohttp.ClientSession(headers=headers) as session:
        await _calls(session, server, 20, options)  # connections open, code warm
        per_call = await _calls(session, server, count, options)
        per_event = await _events(session, server, control, namespace, count, options)
    return {"us_per_call": round(per_call * 1e6, 1), "us_per_event": round(per_event * 1e6, 1)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.transport_floor", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("--kubeconfig", type=Path, required=True)
    parser.add_argument("--control", required=True, help="the simulated cluster's control URL")
    parser.add_argument("--namespace", required=True, help="where the watched pods are made")
    parser.add_argument("--count", type=int, default=400)
    args = parser.parse_args(argv)
    result = uvloop.run(measure(args.kubeconfig, args.control, args.namespace, args.count))
    print(orjson.dumps(result).decode())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
