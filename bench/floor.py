"""The floor: the least an aiohttp HTTPS admission endpoint can do.

It reads the same AdmissionReview autowrap gets, parses it (orjson), checks it is an
``admission.k8s.io/v1`` AdmissionReview with a uid, and answers ``allowed: true``. No policy,
no logging, no metrics. Whatever autowrap costs beyond this is autowrap's own cost; the same
TLS settings, body limit, event loop and machine make the ratio between the two meaningful.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ssl
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web

from bench.serving import serve_until_signalled

MAX_BODY_BYTES = 7 * 1024 * 1024


def _bad(status: int, message: str) -> web.Response:
    return web.Response(
        body=orjson.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                           "message": message, "code": status}),
        status=status,
        content_type="application/json",
    )  # fmt: skip


async def admit(request: web.Request) -> web.Response:
    try:
        review = orjson.loads(await request.read())
        uid = review["request"]["uid"]
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return _bad(400, "not an AdmissionReview")
    if review.get("apiVersion") != "admission.k8s.io/v1" or not isinstance(uid, str):
        return _bad(400, "not an admission.k8s.io/v1 AdmissionReview")
    answer = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {"uid": uid, "allowed": True},
    }
    return web.Response(body=orjson.dumps(answer), content_type="application/json")


async def healthz(request: web.Request) -> web.Response:
    return web.Response(text="ok")


def build_app() -> web.Application:
    app = web.Application(client_max_size=MAX_BODY_BYTES)
    app.router.add_post("/mutate", admit)
    app.router.add_post("/validate", admit)
    app.router.add_get("/healthz", healthz)
    return app


def tls_context(cert_dir: Path) -> ssl.SSLContext:
    """The same server context autowrap builds: TLS 1.2 or later, the generated pair."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert_dir / "tls.crt", cert_dir / "tls.key")
    return context


async def _run(host: str, port: int, cert_dir: Path) -> None:
    await serve_until_signalled(build_app(), host, port, tls_context(cert_dir))


def run(coro: Coroutine[Any, Any, None], loop: str) -> None:
    """Run on the event loop autowrap itself would pick, so the floor is not handicapped."""
    if loop == "uvloop" or (loop == "auto" and _has_uvloop()):
        import uvloop

        uvloop.run(coro)
    else:
        asyncio.run(coro)


def _has_uvloop() -> bool:
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return False
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.floor", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--cert-dir", required=True, type=Path)
    parser.add_argument("--loop", choices=("auto", "asyncio", "uvloop"), default="auto")
    args = parser.parse_args(argv)
    with contextlib.suppress(KeyboardInterrupt):
        run(_run(args.host, args.port, args.cert_dir), args.loop)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
