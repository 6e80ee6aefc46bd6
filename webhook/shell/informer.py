"""A watch-backed cache of one resource: list once, then follow a watch.

The controller reads its objects from these, and admission its namespaces and LocalQueues.
The controller's decisions are made from what is stored, and reading the store on every
reconcile would cost one LIST per step; an informer keeps a local copy current instead. It
lists, then watches from the list's resourceVersion (with bookmarks, so a quiet watch still
advances), re-watches when the server closes the stream, and lists again when the server no
longer has the version it asks for (410 Gone): the same contract client-go's reflector keeps
(k8s.io/client-go/tools/cache/reflector.go, ListAndWatch).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from webhook.shell.kube import Api, Gone, Kind

log = logging.getLogger("autowrap")

Key = tuple[str, str]
Obj = dict[str, Any]
Handler = Callable[[Obj | None, Obj | None], None]

LIST_TIMEOUT = 60.0
WATCH_SECONDS = 300
MAX_BACKOFF = 30.0


def key_of(obj: Obj) -> Key:
    metadata = obj.get("metadata") or {}
    return str(metadata.get("namespace") or ""), str(metadata.get("name") or "")


class Informer:
    """The current objects of ``kind`` matching ``labels``; ``handler(old, new)`` hears of each
    change (``old`` None for an addition, ``new`` None for a deletion)."""

    def __init__(self, api: Api, kind: Kind, handler: Handler, *, labels: str = "") -> None:
        self.kind = kind
        self.labels = labels
        self.synced = asyncio.Event()
        self._api = api
        self._handler = handler
        self._objects: dict[Key, Obj] = {}

    def get(self, namespace: str, name: str) -> Obj | None:
        return self._objects.get((namespace, name))

    def items(self) -> list[Obj]:
        return list(self._objects.values())

    async def run(self) -> None:
        """List and watch until cancelled; failures are retried with backoff, never raised."""
        backoff = 0.2
        while True:
            try:
                version = await self._relist()
                backoff = 0.2
                while True:
                    version = await self._follow(version)
            except Gone:
                continue  # the version is too old: list again at once
            except Exception as exc:  # an API failure, or a stream that is not a watch stream
                log.warning(
                    "watch failed, retrying",
                    extra={"fields": {"resource": self.kind.plural, "error": str(exc)}},
                )
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF)

    async def _relist(self) -> str:
        listed = await self._api.list(self.kind, None, timeout=LIST_TIMEOUT, labels=self.labels)
        fresh: dict[Key, Obj] = {}
        for item in listed.get("items") or []:
            item.setdefault("apiVersion", self.kind.api_version)
            item.setdefault("kind", self.kind.kind)
            fresh[key_of(item)] = item
        previous, self._objects = self._objects, fresh
        for key, obj in fresh.items():
            old = previous.get(key)
            if old is None or _version(old) != _version(obj):
                self._handler(old, obj)
        for key, old in previous.items():
            if key not in fresh:
                self._handler(old, None)
        self.synced.set()
        return str((listed.get("metadata") or {}).get("resourceVersion") or "")

    async def _follow(self, version: str) -> str:
        async for event, obj in self._api.watch(
            self.kind, resource_version=version, labels=self.labels, timeout_seconds=WATCH_SECONDS
        ):
            version = _version(obj) or version
            if event == "BOOKMARK":
                continue
            key = key_of(obj)
            old = self._objects.get(key)
            if event == "DELETED":
                self._objects.pop(key, None)
                self._handler(old, None)
            else:
                self._objects[key] = obj
                self._handler(old, obj)
        return version


def _version(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")
