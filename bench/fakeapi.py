"""A minimal Kubernetes API for the wrap payload: only the calls ``webhook/kube.py`` makes.

It runs in its own process (``python -m bench.fakeapi``) on plain HTTP on loopback, so that
autowrap's real client stack (the official ``kubernetes`` client in its thread pool, urllib3,
JSON (de)serialization) is exercised and measured, while the cost of a real apiserver and etcd
is not. Every AppWrapper create is answered 201 with the body echoed; ``GET /bench/stats``
says how many calls of each kind arrived, so the bench can check that each wrap really
created an AppWrapper.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

import orjson
from aiohttp import web

from bench.payloads import NAMESPACE, QUEUE
from bench.serving import serve_until_signalled
from webhook import names

TOKEN = "bench-token"
KUEUE_GROUP = "kueue.x-k8s.io"
KUEUE_VERSION = "v1beta1"
STATS = web.AppKey("stats", dict[str, int])


def _json(body: object, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(body), status=status, content_type="application/json")


def _status(code: int, reason: str, message: str) -> web.Response:
    body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code}  # fmt: skip
    return _json(body, code)


@web.middleware
async def _authenticate(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """Token auth as the kubeconfig sets it up: a client misconfiguration fails loudly."""
    if request.path != "/bench/stats" and request.headers.get("Authorization") != f"Bearer {TOKEN}":
        request.app[STATS]["unauthorized"] += 1
        return _status(401, "Unauthorized", "Unauthorized")
    return await handler(request)


async def api_groups(request: web.Request) -> web.Response:
    request.app[STATS]["discovery"] += 1
    kueue = {"groupVersion": f"{KUEUE_GROUP}/{KUEUE_VERSION}", "version": KUEUE_VERSION}
    appwrapper = {
        "groupVersion": names.APPWRAPPER_API_VERSION,
        "version": names.APPWRAPPER_VERSION,
    }
    return _json(
        {
            "kind": "APIGroupList",
            "apiVersion": "v1",
            "groups": [
                {"name": KUEUE_GROUP, "versions": [kueue], "preferredVersion": kueue},
                {
                    "name": names.APPWRAPPER_GROUP,
                    "versions": [appwrapper],
                    "preferredVersion": appwrapper,
                },
            ],
        }
    )


async def local_queues(request: web.Request) -> web.Response:
    request.app[STATS]["localqueues"] += 1
    ns = request.match_info["ns"]
    item = {
        "apiVersion": f"{KUEUE_GROUP}/{KUEUE_VERSION}",
        "kind": "LocalQueue",
        "metadata": {"name": QUEUE, "namespace": ns},
        "spec": {"clusterQueue": "cluster-queue"},
    }
    return _json(
        {
            "apiVersion": f"{KUEUE_GROUP}/{KUEUE_VERSION}",
            "kind": "LocalQueueList",
            "metadata": {"resourceVersion": "1"},
            "items": [item] if ns == NAMESPACE else [],
        }
    )


async def namespace(request: web.Request) -> web.Response:
    request.app[STATS]["namespace"] += 1
    ns = request.match_info["ns"]
    return _json(
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": ns, "labels": {"kubernetes.io/metadata.name": ns}},
            "status": {"phase": "Active"},
        }
    )


async def subject_access_review(request: web.Request) -> web.Response:
    request.app[STATS]["subjectaccessreviews"] += 1
    body = orjson.loads(await request.read())
    body["status"] = {"allowed": True, "reason": "bench: everyone may create appwrappers"}
    return _json(body, 201)


async def create_appwrapper(request: web.Request) -> web.Response:
    stats = request.app[STATS]
    body = orjson.loads(await request.read())
    if request.query.get("dryRun"):
        stats["appwrappers-dry-run"] += 1
    else:
        stats["appwrappers"] += 1
    metadata = body.setdefault("metadata", {})
    metadata.setdefault("namespace", request.match_info["ns"])
    metadata["uid"] = str(uuid.uuid4())
    metadata["resourceVersion"] = str(stats["appwrappers"])
    metadata["creationTimestamp"] = "2025-01-01T00:00:00Z"
    return _json(body, 201)


async def stats(request: web.Request) -> web.Response:
    return _json(dict(request.app[STATS]))


def build_app() -> web.Application:
    app = web.Application(middlewares=[_authenticate], client_max_size=names.MAX_BODY_BYTES)
    counts: dict[str, int] = collections.defaultdict(int)
    app[STATS] = counts
    app.router.add_get("/apis", api_groups)
    app.router.add_get("/apis/", api_groups)
    app.router.add_get(
        f"/apis/{KUEUE_GROUP}/{{version}}/namespaces/{{ns}}/localqueues", local_queues
    )
    app.router.add_get("/api/v1/namespaces/{ns}", namespace)
    app.router.add_post("/apis/authorization.k8s.io/v1/subjectaccessreviews", subject_access_review)
    app.router.add_post(
        f"/apis/{names.APPWRAPPER_GROUP}/{names.APPWRAPPER_VERSION}/namespaces/{{ns}}/"
        f"{names.APPWRAPPER_PLURAL}",
        create_appwrapper,
    )
    app.router.add_get("/bench/stats", stats)
    return app


def write_kubeconfig(path: Path, port: int, token: str = TOKEN) -> Path:
    """A kubeconfig that points the official client at the fake API with token auth."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "bench", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
        "users": [{"name": "autowrap", "user": {"token": token}}],
        "contexts": [{"name": "bench", "context": {"cluster": "bench", "user": "autowrap"}}],
        "current-context": "bench",
    }
    path.write_bytes(orjson.dumps(config))
    return path


async def _run(host: str, port: int) -> None:
    await serve_until_signalled(build_app(), host, port)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fakeapi", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_run(args.host, args.port))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
