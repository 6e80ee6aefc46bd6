"""A watch-backed cache of one resource: list once, then follow a watch.

The controller reads its objects from these, and admission its namespaces and LocalQueues.
The controller's decisions are made from what is stored, and reading the store on every
reconcile would cost one LIST per step; an informer keeps a local copy current instead. It
lists, then watches from the list's resourceVersion (with bookmarks, so a quiet watch still
advances), re-watches when the server closes the stream, and lists again when the server no
longer has the version it asks for (410 Gone): the same contract client-go's reflector keeps
(k8s.io/client-go/tools/cache/reflector.go, ListAndWatch).

Lists are paginated (``limit``/``continue``, as client-go's pager does: tools/pager/pager.go)
by the pager ``list_kept`` uses too (``kube.Api.pages``), and yield to the event loop within
and between pages, so a cluster of many objects never holds the serving loop for one long
decode; an expired continue token (410) starts the list over. Pages are sized by bytes, not
only by count: the first asks for ``FIRST_PAGE`` objects, and each next one for as many as the
last page's average size fits in ``kube.PAGE_BYTES`` (at most four times more, at most
``page_size``), so objects someone filled up to the apiserver's 1.5 MiB never
arrive hundreds at once: what a list holds in memory at a time stays a few MiB whatever users
put in the objects. ``metadata_only`` lists and watches the objects' metadata alone
(PartialObjectMetadata, ``kube.METADATA_ACCEPT``), as controller-runtime's metadata informers
do; the items are given the informer's kind back, as its ``newGVKFixupWatcher`` does
(pkg/cache/internal/informers.go). A
``transform`` cuts each object down to what its readers use before it is stored (or drops it),
so the cache holds only that. A resource the server does not serve (404: its CRD is not
installed) is reported through ``absent`` and looked for again with backoff, without ever
claiming ``synced``.

After each page, every object alive is moved out of the cyclic garbage collector's reach
(``gc.freeze``): decoded JSON holds no reference cycles (reference counting frees it), yet
each full collection walks every tracked object, on the serving loop. With 20,000 realistic
pods cached one such walk took 0.3-1 s, and a burst of allocations (a list) triggers several.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

from webhook.core.ports import ApiFailure, Gone
from webhook.shell.kube import FIRST_PAGE, PAGE_SIZE, Api, Kind

log = logging.getLogger("autowrap")

Key = tuple[str, str]
Obj = dict[str, Any]
Handler = Callable[[Obj | None, Obj | None], None]
Transform = Callable[[Obj], Obj | None]

LIST_TIMEOUT = 60.0
WATCH_SECONDS = 300
MAX_BACKOFF = 30.0
# Handlers run on the serving loop: hand it back after this many objects of one page.
HANDLER_BATCH = 100


def key_of(obj: Obj) -> Key:
    metadata = obj.get("metadata") or {}
    return str(metadata.get("namespace") or ""), str(metadata.get("name") or "")


class Informer:
    """The current objects of ``kind`` matching ``labels``; ``handler(old, new)`` hears of each
    change (``old`` None for an addition, ``new`` None for a deletion).

    ``transform(obj)`` (optional) is applied to every listed and watched object before it is
    stored and before the handler sees it; None means "not of interest": the object is not
    stored, and one stored before is removed (the handler hears of it as a deletion). It
    must keep ``metadata`` name, namespace and resourceVersion, and may change the object it
    is given (each is decoded afresh for the informer). With a transform, a change that
    leaves the transformed object as it was (only its resourceVersion moved: a status write
    the transform strips) updates the cache but is not handed to the handler: what the
    transform keeps is what decisions read, so nothing else can alter one.
    """

    def __init__(
        self,
        api: Api,
        kind: Kind,
        handler: Handler,
        *,
        labels: str = "",
        transform: Transform | None = None,
        page_size: int = PAGE_SIZE,
        metadata_only: bool = False,
    ) -> None:
        self.kind = kind
        self.labels = labels
        self.synced = asyncio.Event()
        self.absent = False
        """The server answered 404 to the last LIST: it does not serve this resource (yet)."""
        self.error = ""
        """Why the last LIST or watch failed ("" while all is well)."""
        self.lists = 0
        """LISTs completed: a relist after a 410 counts again."""
        self.events = 0
        """Watch events received (bookmarks aside): what following this resource costs."""
        self.handled = 0
        """Watch events handed to the handler: the rest changed nothing the transform keeps."""
        self._api = api
        self._handler = handler
        self.transform = transform
        self._page_size = page_size
        self.metadata_only = metadata_only
        """Lists and watches ask for the objects' metadata alone (PartialObjectMetadata)."""
        self._objects: dict[Key, Obj] = {}
        self._version = ""

    @property
    def state(self) -> str:
        """``synced``, ``absent`` (the server does not serve the resource) or ``listing``."""
        if self.synced.is_set():
            return "synced"
        return "absent" if self.absent else "listing"

    def get(self, namespace: str, name: str) -> Obj | None:
        return self._objects.get((namespace, name))

    def items(self) -> list[Obj]:
        return list(self._objects.values())

    def __len__(self) -> int:
        return len(self._objects)

    def reset(self) -> None:
        """Forget everything: not synced, nothing stored. ``run`` starts with this, so that a
        replica that leads again never acts on what it cached in an earlier term."""
        self.synced.clear()
        self.absent = False
        self.error = ""
        self._objects = {}
        self._version = ""

    async def run(self) -> None:
        """List and watch until cancelled; failures are retried with backoff, never raised.
        Every run starts from an empty cache (``reset``) and a fresh LIST. A watch that ends
        or fails is opened again from the last resourceVersion seen; only a 410 Gone (or a
        LIST that failed) lists again, as the reflector does."""
        self.reset()
        backoff = 0.2
        listed = False
        while True:
            try:
                if not listed:
                    self._version = await self._relist()
                    listed, backoff = True, 0.2
                await self._follow()
                backoff = 0.2
            except Gone:
                listed = False  # the version is too old: list again at once
            except Exception as exc:  # an API failure, or a stream that is not a watch stream
                self.error = str(exc)
                missing = isinstance(exc, ApiFailure) and exc.status == 404
                if missing and not self.synced.is_set():
                    self.absent = True
                log.warning(
                    "resource not served, looking again later"
                    if missing
                    else ("watch failed, retrying" if listed else "list failed, retrying"),
                    extra={"fields": {"resource": self.kind.plural, "error": str(exc)}},
                )
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF)

    def _prepared(self, item: Obj) -> Obj | None:
        if self.metadata_only:
            # PartialObjectMetadata (or the whole object from a server that cannot cut it):
            # the metadata, under the informer's own kind.
            item = {"apiVersion": self.kind.api_version, "kind": self.kind.kind,
                    "metadata": item.get("metadata") or {}}  # fmt: skip
        else:
            item.setdefault("apiVersion", self.kind.api_version)
            item.setdefault("kind", self.kind.kind)
        return item if self.transform is None else self.transform(item)

    async def _list(self) -> tuple[dict[Key, Obj], str]:
        """Every object (``Api.pages``: pages sized by bytes, a list whose continue token
        expired started over), each prepared as its page arrives, the serving loop handed back
        within and between pages; and the list's resourceVersion."""
        fresh: dict[Key, Obj] = {}
        version = ""
        async for page in self._api.pages(
            self.kind, timeout=LIST_TIMEOUT, labels=self.labels,
            first=min(FIRST_PAGE, self._page_size), most=self._page_size,
            metadata_only=self.metadata_only,
        ):  # fmt: skip
            if page.starts_list:
                fresh = {}
            await self._prepare_page(page.items, fresh)
            gc.freeze()  # what this page added to the cache (what it did not keep goes with it)
            version = page.version
            if not page.last:
                await asyncio.sleep(0)  # the serving loop's turn between pages
        return fresh, version

    async def _prepare_page(self, items: list[Any], into: dict[Key, Obj]) -> None:
        """Each object of a page prepared into ``into``, the serving loop's turn every
        ``HANDLER_BATCH``; nothing of the page is left referenced here once it returns."""
        for count, item in enumerate(items, 1):
            kept = self._prepared(item)
            if kept is not None:
                into[key_of(kept)] = kept
            if count % HANDLER_BATCH == 0:
                await asyncio.sleep(0)  # the serving loop's turn within a page

    async def _relist(self) -> str:
        fresh, version = await self._list()
        previous, self._objects = self._objects, fresh
        self.absent, self.error, self.lists = False, "", self.lists + 1
        for count, (key, obj) in enumerate(fresh.items(), 1):
            old = previous.get(key)
            if old is None or (
                _version(old) != _version(obj)
                and (self.transform is None or not _same_but_version(old, obj))
            ):
                self._handler(old, obj)
            if count % HANDLER_BATCH == 0:
                await asyncio.sleep(0)
        for key, old in previous.items():
            if key not in fresh:
                self._handler(old, None)
        self.synced.set()
        return version

    async def _follow(self) -> None:
        """One watch from ``_version``, applied as it arrives; ``_version`` follows every
        event, so a watch cut off midway is resumed where it stopped."""
        async with contextlib.aclosing(
            self._api.watch(self.kind, resource_version=self._version, labels=self.labels,
                            timeout_seconds=WATCH_SECONDS, metadata_only=self.metadata_only)
        ) as events:  # fmt: skip
            await self._apply(events)
        self.error = ""

    async def _apply(self, events: AsyncIterator[tuple[str, Obj]]) -> None:
        async for event, obj in events:
            self._version = _version(obj) or self._version
            if event == "BOOKMARK":
                continue
            self.events += 1
            key = key_of(obj)
            old = self._objects.get(key)
            new = None if event == "DELETED" else self._prepared(obj)
            if new is None:
                if old is not None:
                    del self._objects[key]
                    self.handled += 1
                    self._handler(old, None)
            else:
                self._objects[key] = new
                if old is None or self.transform is None or not _same_but_version(old, new):
                    self.handled += 1
                    self._handler(old, new)


def _same_but_version(old: Obj, new: Obj) -> bool:
    """Equal apart from ``metadata.resourceVersion``."""
    if old.keys() != new.keys():
        return False
    for field, value in new.items():
        if field != "metadata":
            if old[field] != value:
                return False
            continue
        before = old.get("metadata") or {}
        if not isinstance(value, dict) or before.keys() != value.keys():
            return False
        if any(before[k] != v for k, v in value.items() if k != "resourceVersion"):
            return False
    return True


def _version(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")
