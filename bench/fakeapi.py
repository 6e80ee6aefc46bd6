"""A minimal Kubernetes API for admission: only the calls ``webhook/shell/kube.py`` makes for it.

It runs in its own process (``python -m bench.fakeapi``) on plain HTTP on loopback, so that
autowrap's real client stack (the official client's asyncio API, ``kubernetes.aio``, over
aiohttp, and JSON (de)serialization) is exercised and measured, while the cost of a real
apiserver and etcd is not. It serves discovery (``GET /apis``), LocalQueue lists, the
ClusterQueue and ResourceFlavor reads of adopt mode's MultiKueue/topology check, namespace
reads, SubjectAccessReviews (allowed), server-side dry-run creates of what an AppWrapper would
create (Volcano Jobs, Pods, Services: 201, body echoed), and AppWrapper create (201, body echoed)
and get (404: nothing is stored). ``GET /bench/stats`` says how many calls of each kind arrived, so the bench
can check that each wrap really created an AppWrapper; a call to any other path is answered
404 and counted as ``unrouted``, so the bench sees when autowrap starts calling something new.
The controller is not served here (``bench.controller`` runs it against a full fake cluster).
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

from bench.payloads import QUEUE
from bench.policies import ADOPT_NAMESPACE, REDIRECT_NAMESPACE
from bench.serving import serve_until_signalled
from webhook.model import names

TOKEN = "bench-token"
KUEUE_GROUP = "kueue.x-k8s.io"
KUEUE_VERSION = "v1beta1"
CLUSTER_QUEUE = "cluster-queue"
FLAVOR = "default-flavor"
STATS = web.AppKey("stats", collections.defaultdict[str, int])


def _json(body: object, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(body), status=status, content_type="application/json")


def _status(code: int, reason: str, message: str) -> web.Response:
    body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code}  # fmt: skip
    return _json(body, code)


@web.middleware
async def _count_unrouted(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    try:
        return await handler(request)
    except web.HTTPNotFound:
        request.app[STATS]["unrouted"] += 1
        return _status(404, "NotFound", f"the bench's fake API does not serve {request.path}")


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
        "spec": {"clusterQueue": CLUSTER_QUEUE},
    }
    return _json(
        {
            "apiVersion": f"{KUEUE_GROUP}/{KUEUE_VERSION}",
            "kind": "LocalQueueList",
            "metadata": {"resourceVersion": "1"},
            "items": [item] if ns in (REDIRECT_NAMESPACE, ADOPT_NAMESPACE) else [],
        }
    )


def _queue_item(ns: str) -> dict[str, object]:
    return {
        "apiVersion": f"{KUEUE_GROUP}/{KUEUE_VERSION}",
        "kind": "LocalQueue",
        "metadata": {"name": QUEUE, "namespace": ns, "resourceVersion": "1"},
        "spec": {"clusterQueue": CLUSTER_QUEUE},
    }


def _namespace_item(ns: str) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": ns, "resourceVersion": "1",
                     "labels": {"kubernetes.io/metadata.name": ns}},
        "status": {"phase": "Active"},
    }  # fmt: skip


async def _list_or_watch(
    request: web.Request, kind: str, items: list[dict[str, object]]
) -> web.StreamResponse:
    """The all-namespaces list, or a watch that only sends a bookmark: nothing changes here.
    autowrap serve follows namespaces and LocalQueues with watches (its admission caches)."""
    if request.query.get("watch") not in ("true", "1"):
        return _json({"apiVersion": "v1", "kind": f"{kind}List",
                      "metadata": {"resourceVersion": "1"}, "items": items})  # fmt: skip
    response = web.StreamResponse(headers={"Content-Type": "application/json"})
    await response.prepare(request)
    bookmark = {"type": "BOOKMARK", "object": {"kind": kind, "metadata": {"resourceVersion": "1"}}}
    await response.write(orjson.dumps(bookmark) + b"\n")
    # Held for a few seconds only (the client watches again), so that shutting the fake API
    # down never waits on an open stream.
    with contextlib.suppress(asyncio.CancelledError, ConnectionError):
        await asyncio.sleep(min(float(request.query.get("timeoutSeconds", "5")), 5.0))
    return response


async def all_local_queues(request: web.Request) -> web.StreamResponse:
    request.app[STATS]["localqueues"] += 1
    items = [_queue_item(ns) for ns in (REDIRECT_NAMESPACE, ADOPT_NAMESPACE)]
    return await _list_or_watch(request, "LocalQueue", items)


async def all_namespaces(request: web.Request) -> web.StreamResponse:
    request.app[STATS]["namespace"] += 1
    items = [_namespace_item(ns) for ns in (REDIRECT_NAMESPACE, ADOPT_NAMESPACE)]
    return await _list_or_watch(request, "Namespace", items)


async def cluster_queue(request: web.Request) -> web.Response:
    """A ClusterQueue with one plain flavor: no admission checks (no MultiKueue)."""
    request.app[STATS]["clusterqueues"] += 1
    name = request.match_info["name"]
    if name != CLUSTER_QUEUE:
        return _status(404, "NotFound", f'clusterqueues.{KUEUE_GROUP} "{name}" not found')
    quota = [{"name": "nvidia.com/gpu", "nominalQuota": 64}]
    return _json({
        "apiVersion": f"{KUEUE_GROUP}/{KUEUE_VERSION}", "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {"namespaceSelector": {}, "resourceGroups": [{
            "coveredResources": ["nvidia.com/gpu"],
            "flavors": [{"name": FLAVOR, "resources": quota}]}]},
    })  # fmt: skip


async def resource_flavor(request: web.Request) -> web.Response:
    """A ResourceFlavor without ``topologyName`` (no topology-aware scheduling)."""
    request.app[STATS]["resourceflavors"] += 1
    name = request.match_info["name"]
    if name != FLAVOR:
        return _status(404, "NotFound", f'resourceflavors.{KUEUE_GROUP} "{name}" not found')
    return _json({
        "apiVersion": f"{KUEUE_GROUP}/{KUEUE_VERSION}", "kind": "ResourceFlavor",
        "metadata": {"name": name}, "spec": {"nodeLabels": {"pool": "a100"}},
    })  # fmt: skip


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


async def dry_run_create(request: web.Request) -> web.Response:
    """The dry run redirect makes of the AppWrapper's components before creating it: accepted.
    Only dry runs are served; autowrap itself never creates these objects."""
    plural = request.match_info["plural"]
    if request.query.get("dryRun") != "All":
        request.app[STATS]["unrouted"] += 1
        return _status(405, "MethodNotAllowed", f"the bench's fake API only dry-runs {plural}")
    request.app[STATS][f"{plural}-dry-run"] += 1
    body = orjson.loads(await request.read())
    body.setdefault("metadata", {}).setdefault("namespace", request.match_info["ns"])
    return _json(body, 201)


async def get_appwrapper(request: web.Request) -> web.Response:
    """Nothing is stored: every wrap names a fresh job, so an AppWrapper is never read back
    except after an AlreadyExists, which this API never answers."""
    request.app[STATS]["appwrapper-gets"] += 1
    name = request.match_info["name"]
    group = names.APPWRAPPER_GROUP
    return _status(404, "NotFound", f'{names.APPWRAPPER_PLURAL}.{group} "{name}" not found')


async def stats(request: web.Request) -> web.Response:
    counts = request.app[STATS]
    return _json(counts)


def build_app() -> web.Application:
    app = web.Application(
        middlewares=[_count_unrouted, _authenticate], client_max_size=names.MAX_BODY_BYTES
    )
    counts: collections.defaultdict[str, int] = collections.defaultdict(int)
    app[STATS] = counts
    app.router.add_get("/apis", api_groups)
    app.router.add_get("/apis/", api_groups)
    app.router.add_get(
        f"/apis/{KUEUE_GROUP}/{{version}}/namespaces/{{ns}}/localqueues", local_queues
    )
    app.router.add_get(f"/apis/{KUEUE_GROUP}/{{version}}/clusterqueues/{{name}}", cluster_queue)
    app.router.add_get(f"/apis/{KUEUE_GROUP}/{{version}}/resourceflavors/{{name}}", resource_flavor)
    app.router.add_get("/api/v1/namespaces/{ns}", namespace)
    app.router.add_get("/api/v1/namespaces", all_namespaces)
    app.router.add_get(f"/apis/{KUEUE_GROUP}/{{version}}/localqueues", all_local_queues)
    app.router.add_post("/apis/authorization.k8s.io/v1/subjectaccessreviews", subject_access_review)
    app.router.add_post(
        f"/apis/{names.APPWRAPPER_GROUP}/{names.APPWRAPPER_VERSION}/namespaces/{{ns}}/"
        f"{names.APPWRAPPER_PLURAL}",
        create_appwrapper,
    )
    app.router.add_get(
        f"/apis/{names.APPWRAPPER_GROUP}/{names.APPWRAPPER_VERSION}/namespaces/{{ns}}/"
        f"{names.APPWRAPPER_PLURAL}/{{name}}",
        get_appwrapper,
    )
    app.router.add_post("/apis/batch.volcano.sh/v1alpha1/namespaces/{ns}/{plural:jobs}",
                        dry_run_create)  # fmt: skip
    app.router.add_post("/api/v1/namespaces/{ns}/{plural:pods|services}", dry_run_create)
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
