"""``autowrap serve``, composed: the HTTPS server, the watch caches and the adopt-mode controller.

The composition root. ``shell.server`` serves the webhooks and knows nothing of the controller;
this module, above both, builds the pieces and hands the server what it plugs in
(``server.Parts``): the Event recorder, autowrap's own namespace, and the tasks that run beside
the webhooks. The command line's ``serve`` calls ``main``, which runs the controller in a second
process (``ControllerProcess``, ``autowrap controller``): an admission answer then never waits
for a reconcile, an informer's list or a burst of watch events, which share nothing with it but
the CPU. Tests and the testbed call ``start``, which can also run it on the serving loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import time
from argparse import Namespace
from collections.abc import Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from webhook.controller import Controller, Settings, own_namespace
from webhook.controller.events import Recorder
from webhook.controller.run import cancel_all
from webhook.core import policy, ports
from webhook.core.policy import PolicyError, PolicySet
from webhook.shell import certs, kube, opevents, policyfiles, relay, server
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
    if options.controller and options.controller_apart:
        tasks.append(asyncio.create_task(ControllerProcess(state, options).run()))
    elif options.controller:
        tasks.append(asyncio.create_task(_run_controller(state, options)))
    return tasks


async def _follow_caches(
    cluster: KubeClient, *, local_queues_too: bool = True
) -> list[asyncio.Task[None]]:
    """Namespaces and LocalQueues followed by watches, so that admission reads them locally.
    The controller process reads namespace labels only: ``local_queues_too=False``."""

    def ignore(old: object, new: object) -> None:
        return None

    namespaces = Informer(cluster, kube.NAMESPACES, ignore)
    local_queues = None
    if not local_queues_too:
        cluster.use_caches(namespaces=namespaces, local_queues=None)
        return [asyncio.create_task(namespaces.run())]
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


class ControllerProcess:
    """The adopt-mode controller in a process of its own (``autowrap controller``), started by
    the serving process and started again, after a pause that grows, whenever it ends. Its
    metrics and missing resources reach ``/metrics`` and ``/readyz`` through ``relay``. On
    shutdown it is asked to stop (SIGTERM: it gives its Lease up) and killed if it does not."""

    def __init__(self, state: State, options: Options) -> None:
        self._options = options
        self._metrics = state.metrics
        self.receiver = relay.Receiver(state.metrics)
        state.metrics.follow_controller(self.receiver.stats)
        state.controller = self
        state.policy_listeners.append(self.receiver.nudge)
        # The running controller process's pid (None between two).
        self.pid: int | None = None

    def absent(self) -> list[str]:
        """What readiness says the controller lacks, as the controller process last reported."""
        return self.receiver.absent()

    def argv(self, fd: int) -> list[str]:
        options = self._options
        argv = [sys.executable, "-m", "webhook", "controller", "--relay-fd", str(fd),
                "--log-level", logging.getLevelName(log.getEffectiveLevel()).lower()]  # fmt: skip
        if options.kubeconfig:
            argv += ["--kubeconfig", options.kubeconfig]
        if options.policy_path is not None:
            argv += ["--policy", str(options.policy_path)]
        if options.controller_namespace:
            argv += ["--namespace", options.controller_namespace]
        if options.controller_identity:
            argv += ["--identity", options.controller_identity]
        return argv

    async def run(self) -> None:
        pause = RESTART_PAUSE
        while True:
            started = time.monotonic()
            code = await self.once()
            if time.monotonic() - started > RESTART_PAUSE_MAX:
                pause = RESTART_PAUSE  # it ran a while: a new failure, not the same one
            # 0: it was asked to stop (a signal to the whole process group), else it failed.
            log.log(logging.WARNING if code == 0 else logging.ERROR,
                    "the controller process ended; starting another",
                    extra={"fields": {"exit_code": code, "retry_in": pause}})  # fmt: skip
            await asyncio.sleep(pause)
            pause = min(2 * pause, RESTART_PAUSE_MAX)
            self._metrics.controller_restarts.inc()

    async def once(self) -> int:
        """Run one controller process until it ends; its exit code (negative: a signal)."""
        ours, theirs = relay.pair()
        try:
            process = await asyncio.create_subprocess_exec(
                *self.argv(theirs.fileno()), stdin=asyncio.subprocess.DEVNULL,
                pass_fds=(theirs.fileno(),),
            )  # fmt: skip
        except OSError as exc:  # no process at all (out of pids or memory): tried again
            log.error("the controller process could not be started",
                      extra={"fields": {"error": str(exc)}})  # fmt: skip
            ours.close()
            return -1
        finally:
            theirs.close()
        self.pid = process.pid
        following = asyncio.create_task(self.receiver.follow(ours))
        try:
            return await process.wait()
        except asyncio.CancelledError:
            await _stop(process)
            raise
        finally:
            self.pid = None
            following.cancel()
            ours.close()
            self.receiver.gone()


# The first pause before a controller process that ended is started again, and the longest.
RESTART_PAUSE = 1.0
RESTART_PAUSE_MAX = 60.0
# How long a stopping controller process has to give its Lease up before it is killed: within
# the serving process's own wait for its tasks (server._TASKS_GRACE). Should the serving process
# end first anyway, the controller process stops when its end of the relay closes.
STOP_GRACE = 4.5


async def _stop(process: asyncio.subprocess.Process) -> None:
    if process.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        process.terminate()
    try:
        async with asyncio.timeout(STOP_GRACE):
            await process.wait()
    except TimeoutError:
        log.warning("the controller process did not stop in time; killed")
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        await process.wait()


# --- the controller process ---------------------------------------------------------------------


@dataclass
class _Policies:
    """The controller process's policy set, read from the files the serving process serves.
    A set that fails to load keeps the last good one in use; the serving process says so (its
    log, ``autowrap_policies_stale``, the PolicyReloadFailed Event), so this one stays quiet."""

    path: Path | None
    current: PolicySet = field(default_factory=lambda: PolicySet(()))
    digest: str = ""
    loaded: bool = False

    def reload(self) -> None:
        if self.path is None:
            if not self.loaded:
                self.current, self.loaded = policyfiles.load(None), True
            return
        try:
            files = policyfiles.read(self.path)
            digest = policyfiles.digest(files)
            if digest == self.digest:
                return
            self.current = policy.build(files)
        except PolicyError:
            return
        self.digest, self.loaded = digest, True


async def run_controller_alone(args: Namespace) -> None:
    """``autowrap controller``: the controller, its caches and its Events, until SIGTERM or
    until the serving process that started it is gone."""
    sender = relay.Sender(args.relay_fd)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    cluster = await KubeClient.connect(args.kubeconfig)
    cluster.observe = sender.api_call
    namespace = own_namespace(args.namespace)
    identity = args.identity or os.environ.get("HOSTNAME", "") or "autowrap"
    opevents.install(opevents.OperatorEvents(
        Recorder(cluster, instance=identity, component="autowrap",
                 reporter="autowrap.io/server"), namespace))  # fmt: skip
    policies = _Policies(Path(args.policy) if args.policy else policyfiles.default_path())
    policies.reload()
    settings = Settings(namespace=namespace)
    if args.identity:
        settings.identity = args.identity
    controller = Controller(cluster, lambda: policies.current, settings, observe=sender.reconciled)
    sender.stats, sender.absent = controller.stats, controller.absent
    sender.on_reload = policies.reload

    async def lead_once_loaded() -> None:
        while not policies.loaded:  # the serving process is not ready either
            await asyncio.sleep(RELOAD_SECONDS)
        await controller.run()

    async def reload_every() -> None:
        while True:
            await asyncio.sleep(RELOAD_SECONDS)
            policies.reload()

    tasks = await _follow_caches(cluster, local_queues_too=False)
    tasks += [asyncio.create_task(reload_every()), asyncio.create_task(sender.run())]
    leading = asyncio.create_task(lead_once_loaded())
    ending = [asyncio.create_task(stop.wait()), asyncio.create_task(sender.closed.wait()),
              leading]  # fmt: skip
    try:
        await asyncio.wait(ending, return_when=asyncio.FIRST_COMPLETED)
    finally:
        # The controller first: its last step gives the Lease up, with the client still open.
        await cancel_all([leading])
        await cancel_all([*tasks, *ending])
        events = opevents.installed()
        if events is not None:
            await events.flush()
            opevents.install(None)
        await cluster.close()
    failure = leading.exception() if leading.done() and not leading.cancelled() else None
    if failure is not None:
        raise failure


RELOAD_SECONDS = 5.0


def controller_main(args: Namespace) -> int:
    """The controller process's exit code: 0 when asked to stop, else not (the serving process
    starts another)."""
    server.configure_logging(getattr(args, "log_level", "info"))
    try:
        _run_loop(run_controller_alone(args))
    except NoConfiguration as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except Exception:
        log.exception("the controller stopped")
        return 1
    return 0


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
        controller_apart=True,
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
