"""Events for operators: what goes wrong (or is repaired) in autowrap itself, as core/v1 Events
in autowrap's namespace, besides the log line.

Raised: ``PolicyReloadFailed`` (the last good set stays in use), ``CertificateReloaded`` and
``CertificateReloadFailed`` (the serving certificate on disk changed: cert-manager's renewal, or
the self-managed one), ``CertificateRenewed`` (self-managed: this replica wrote a new pair),
``CABundleRepaired`` (self-managed: a webhook configuration's caBundle was put right) and
``ReconcileFailed`` / ``ReconcileError`` (the controller: an API failure retried, an internal
error).

The involved object is the autowrap Deployment (``names.SERVICE_NAME`` in that namespace), not
the pod or the controller's Lease: it is what operators ``kubectl describe``, it outlives every
replica (a pod's Events go with the pod, and most of these concern the serving side, which has
no Lease), and the replica that saw it is named in ``reportingInstance`` and the message. Only
``create`` on Events is needed, which the controller's RBAC already grants.

Call sites use :func:`emit`, a no-op until the server :func:`install` s a sink (offline
commands, tests of one function, a server without API access). It is safe from any thread
(the self-managed certificate check runs in one): the Event is written on the server's loop,
and never waited for. Repeats within the recorder's window are written once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Coroutine
from typing import Any, Protocol

from webhook.model import names

log = logging.getLogger("autowrap")


class _Recorder(Protocol):
    def emit(
        self, obj: dict[str, Any], reason: str, message: str, *, warning: bool = False
    ) -> Coroutine[Any, Any, None]: ...


class OperatorEvents:
    def __init__(
        self,
        recorder: _Recorder,
        namespace: str,
        *,
        deployment: str = names.SERVICE_NAME,
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        self._recorder = recorder
        self.namespace = namespace
        self.deployment = deployment
        self._loop = loop or asyncio.get_running_loop()
        self._pending: set[asyncio.Task[None]] = set()
        self.replica = os.environ.get("POD_NAME") or os.environ.get("HOSTNAME") or ""

    def subject(self) -> dict[str, Any]:
        return {"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": self.deployment, "namespace": self.namespace}}  # fmt: skip

    def emit(self, reason: str, message: str, *, warning: bool = False) -> None:
        if self.replica:
            message = f"{message} (replica {self.replica})"
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            self._start(reason, message, warning)
        elif not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._start, reason, message, warning)

    def _start(self, reason: str, message: str, warning: bool) -> None:
        task = self._loop.create_task(
            self._recorder.emit(self.subject(), reason, message, warning=warning)
        )
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def flush(self) -> None:
        """Wait for the Events under way (tests; a drain)."""
        while self._pending:
            with contextlib.suppress(Exception):
                await asyncio.gather(*list(self._pending), return_exceptions=True)


_installed: OperatorEvents | None = None


def install(events: OperatorEvents | None) -> None:
    """Where :func:`emit` writes from now on (None: nowhere)."""
    global _installed
    _installed = events


def installed() -> OperatorEvents | None:
    return _installed


def emit(reason: str, message: str, *, warning: bool = False) -> None:
    """Raise an Event on the autowrap Deployment, if the server installed a sink."""
    if _installed is not None:
        try:
            _installed.emit(reason, message, warning=warning)
        except Exception as exc:  # an Event is a courtesy: it never fails the caller
            log.warning("operator event not raised: %s", exc, extra={"fields": {"reason": reason}})
