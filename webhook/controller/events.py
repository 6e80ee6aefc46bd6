"""Events on the user's object, so that ``kubectl describe`` says why its pods wait.

The controller is level-triggered and may judge the same state several times; an Event is
written once per (object, reason, message) within a window, as the client-go recorder's
correlator aggregates repeats (k8s.io/client-go/tools/record/events_cache.go).
"""

from __future__ import annotations

import datetime
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from webhook.core.ports import ApiFailure
from webhook.shell.kube import EVENTS, Api

log = logging.getLogger("autowrap")

COMPONENT = "autowrap-controller"
REPEAT_WINDOW = 600.0
API_TIMEOUT = 10.0


class Recorder:
    def __init__(
        self,
        api: Api,
        *,
        instance: str,
        clock: Callable[[], float] = time.monotonic,
        component: str = COMPONENT,
        reporter: str = "autowrap.io/controller",
    ) -> None:
        self._api = api
        self._instance = instance
        self._component = component
        self._reporter = reporter
        self._clock = clock
        self._seen: dict[tuple[str, str, str], float] = {}

    async def emit(
        self, obj: Mapping[str, Any], reason: str, message: str, *, warning: bool = False
    ) -> None:
        metadata = obj.get("metadata") or {}
        uid = str(metadata.get("uid") or "")
        key = (uid, reason, message)
        now = self._clock()
        if now - self._seen.get(key, -REPEAT_WINDOW) < REPEAT_WINDOW:
            return
        self._seen[key] = now
        if len(self._seen) > 10_000:
            self._seen = {k: t for k, t in self._seen.items() if now - t < REPEAT_WINDOW}
        stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        namespace = str(metadata.get("namespace") or "default")
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "generateName": f"{metadata.get('name', 'object')}.",
                "namespace": namespace,
            },
            "involvedObject": {
                "apiVersion": obj.get("apiVersion"),
                "kind": obj.get("kind"),
                "name": metadata.get("name"),
                "namespace": namespace,
                "uid": uid,
                "resourceVersion": metadata.get("resourceVersion"),
            },
            "reason": reason,
            "message": message[:1024],
            "type": "Warning" if warning else "Normal",
            "source": {"component": self._component},
            "reportingComponent": self._reporter,
            "reportingInstance": self._instance,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        try:
            await self._api.create(EVENTS, namespace, body, timeout=API_TIMEOUT)
        except ApiFailure as exc:  # an Event is a courtesy: its failure must not fail the step
            log.warning("event not recorded: %s", exc, extra={"fields": {"reason": reason}})
