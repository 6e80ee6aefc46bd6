"""``autowrap serve``, composed: the HTTPS server, the watch caches and the adopt-mode controller.

The composition root. ``shell.server`` serves the webhooks and knows nothing of the controller;
this module, above both, builds the pieces for one process and hands the server what it plugs
in (``server.Parts``): the Event recorder, autowrap's own namespace, and the tasks that run
beside the webhooks. The command line's ``serve`` calls ``main``; tests and the testbed call
``start``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from argparse import Namespace
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

from webhook.controller import Controller, Settings, own_namespace
from webhook.controller.events import Recorder
from webhook.core import ports
from webhook.core.policy import PolicyError
from webhook.shell import certs, kube, policyfiles, server
from webhook.shell.informer import Informer
from webhook.shell.kube import KubeClient, NoConfiguration
from webhook.shell.server import Options, Running, State

log = logging.getLogger("autowrap")


async def start(options: Options) -> Running:
    """The server started with this process's parts (a controller when ``options`` say so)."""
    parts = server.Parts(
        recorder=lambda cluster: _recorder(cluster, options),
        namespace=lambda: own_namespace(options.controller_namespace),
        background=lambda state: _background(state, options),
    )
    return await server.start(options, parts)


async def _background(state: State, options: Options) -> list[asyncio.Task[None]]:
    assert state.cluster is not None
    tasks: list[asyncio.Task[None]] = []
    if options.watch_caches:
        tasks += await _follow_caches(state.cluster)
    if options.controller:
        tasks.append(asyncio.create_task(_run_controller(state, options)))
    return tasks


async def _follow_caches(cluster: KubeClient) -> list[asyncio.Task[None]]:
    """Namespaces and LocalQueues followed by watches, so that admission reads them locally."""

    def ignore(old: object, new: object) -> None:
        return None

    namespaces = Informer(cluster, kube.NAMESPACES, ignore)
    local_queues = None
    try:
        version = await cluster.kueue_version(timeout=10.0)
    except ports.ApiFailure as exc:
        log.warning("Kueue not discovered; LocalQueues are looked up per request",
                    extra={"fields": {"error": str(exc)}})  # fmt: skip
        version = None
    if version is not None:
        kind = kube.Kind(kube.KUEUE_GROUP, version, "localqueues", "LocalQueue")
        local_queues = Informer(cluster, kind, ignore)
    cluster.use_caches(namespaces=namespaces, local_queues=local_queues)
    return [asyncio.create_task(i.run()) for i in (namespaces, local_queues) if i is not None]


async def _run_controller(state: State, options: Options) -> None:
    """The adopt-mode controller beside the webhooks; it competes for the Lease itself."""
    assert state.cluster is not None
    while not state.policies_loaded:  # started on an invalid set: nothing to act on yet
        await asyncio.sleep(options.reload_interval)
    settings = Settings(namespace=own_namespace(options.controller_namespace))
    if options.controller_identity:
        settings.identity = options.controller_identity
    controller = Controller(state.cluster, lambda: state.policies, settings,
                            observe=lambda s: state.metrics.reconcile_latency.observe(s))  # fmt: skip
    state.metrics.follow_controller(controller.stats)
    state.controller = controller
    await controller.run()


def _recorder(cluster: KubeClient, options: Options) -> Recorder:
    identity = options.controller_identity or os.environ.get("HOSTNAME", "") or "autowrap"
    return Recorder(cluster, instance=identity, component="autowrap", reporter="autowrap.io/server")


async def serve(options: Options, stop: asyncio.Event) -> None:
    """Run until ``stop`` is set, then drain."""
    running = await start(options)
    try:
        await stop.wait()
    finally:
        await running.drain()


def _run_loop(main: Coroutine[Any, Any, None]) -> None:
    """uvloop where it is installed (a faster event loop and TLS transport), else asyncio's."""
    try:
        import uvloop
    except ImportError:
        asyncio.run(main)
        return
    uvloop.run(main)


def main(args: Namespace) -> int:
    server.configure_logging(getattr(args, "log_level", "info"))
    renewal = None
    if args.self_managed_certs:
        from webhook.shell import selfmanaged

        # The Secret, and the certificate's <service>.<namespace>.svc, live where the pod runs.
        args.install_namespace = own_namespace(getattr(args, "controller_namespace", None))
        try:
            renewal = selfmanaged.Renewal(args, selfmanaged.prepare(args))
        except Exception as exc:  # start-up: say what failed and stop, no traceback
            print(f"error: self-managed certificates: {exc}", file=sys.stderr)
            return 1
    options = Options(
        host=args.host,
        port=args.port,
        metrics_port=args.metrics_port,
        metrics_host=args.metrics_host,
        metrics_auth=args.metrics_auth,
        client_ca_file=Path(args.client_ca_file) if args.client_ca_file else None,
        cert_dir=Path(args.cert_dir) if args.cert_dir else None,
        policy_path=Path(args.policy) if args.policy else policyfiles.default_path(),
        kubeconfig=args.kubeconfig,
        controller=not args.no_controller,
    )
    if options.cert_dir is not None:
        missing = [
            f for f in (certs.TLS_CERT, certs.TLS_KEY) if not (options.cert_dir / f).is_file()
        ]
        if missing:
            print(f"error: {options.cert_dir} has no {' or '.join(missing)}; create them with "
                  "`autowrap certs --out DIR` or omit --cert-dir for a development pair",
                  file=sys.stderr)  # fmt: skip
            return 2

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        # Self-managed certificates are renewed on a timer; the server follows the files.
        renewing = asyncio.create_task(renewal.run()) if renewal is not None else None
        try:
            await serve(options, stop)
        finally:
            if renewing is not None:
                renewing.cancel()

    try:
        _run_loop(run())
    except (PolicyError, NoConfiguration) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0
