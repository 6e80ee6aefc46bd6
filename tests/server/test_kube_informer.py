"""The informer against the fake cluster over HTTP: paginated lists, transforms, resources the
server does not serve, a fresh cache on every run, and watches that stay alive."""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from testbed.cluster.cluster import FakeCluster
from testbed.cluster.resources import PODS
from tests.support.waiting import eventually
from webhook.core.ports import ApiFailure, Gone
from webhook.shell import informer as informer_module
from webhook.shell import kube
from webhook.shell.informer import Informer
from webhook.shell.kube import Kind, KubeClient

POD_KIND = Kind("", "v1", "pods", "Pod")
Changes = list[tuple[str | None, str | None]]


def _pod(name: str, **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": dict(labels)},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }


def _name(obj: dict[str, Any] | None) -> str | None:
    return None if obj is None else obj["metadata"]["name"]


@contextlib.asynccontextmanager
async def _client(tmp_path: Path, cluster: FakeCluster) -> AsyncIterator[KubeClient]:
    await cluster.start()
    client = await KubeClient.connect(str(cluster.write_kubeconfig(tmp_path / "kubeconfig")))
    try:
        yield client
    finally:
        await client.close()
        await cluster.stop()


@contextlib.asynccontextmanager
async def _running(informer: Informer) -> AsyncIterator[asyncio.Task[None]]:
    task = asyncio.create_task(informer.run())
    try:
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


class _Decoded(dict[str, Any]):
    """An object as decoded, whose release can be watched (a plain dict's cannot)."""


def watch_pages(client: KubeClient) -> list[int]:
    """Watch the objects of each page ``client`` lists: the list returned gets, each time a
    next page is asked for, how many objects of the page before are still alive."""
    listed = client.list_page
    pages: list[list[weakref.ref[_Decoded]]] = []
    alive_at_next: list[int] = []

    async def watched_list(*args: Any, **kwargs: Any) -> tuple[dict[str, Any], int]:
        if pages:
            alive_at_next.append(sum(ref() is not None for ref in pages[-1]))
        page, size = await listed(*args, **kwargs)
        page["items"] = [_Decoded(item) for item in page["items"]]
        pages.append([weakref.ref(item) for item in page["items"]])
        return page, size

    client.list_page = watched_list  # type: ignore[method-assign]
    return alive_at_next


def _recorder(changes: Changes) -> Callable[[Any, Any], None]:
    return lambda old, new: changes.append((_name(old), _name(new)))


async def test_a_list_is_read_in_pages_and_every_object_is_cached(tmp_path: Path) -> None:
    cluster = FakeCluster()
    for i in range(12):
        cluster.store.create(PODS, _pod(f"p{i:02}"))
    async with _client(tmp_path, cluster) as client:
        changes: Changes = []
        informer = Informer(client, POD_KIND, _recorder(changes), page_size=5)
        async with _running(informer):
            await asyncio.wait_for(informer.synced.wait(), 10)
            lists = [q for q in cluster.requests_to("GET", r"/pods$") if "watch" not in q.query]
            assert [q.query.get("limit") for q in lists] == ["5", "5", "5"]
            assert [bool(q.query.get("continue")) for q in lists] == [False, True, True]
            assert sorted(o["metadata"]["name"] for o in informer.items()) == [
                f"p{i:02}" for i in range(12)
            ]
            assert sorted(changes) == [(None, f"p{i:02}") for i in range(12)]


async def test_pages_shrink_when_objects_are_large_and_grow_when_small(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pages are sized by bytes: objects filled up arrive a few at a time, small ones many."""
    monkeypatch.setattr(kube, "PAGE_BYTES", 64 << 10)
    cluster = FakeCluster()
    for i in range(30):
        big = _pod(f"big{i:02}")
        big["metadata"]["annotations"] = {"pad": "x" * (20 << 10)}
        cluster.store.create(PODS, big)
    async with _client(tmp_path, cluster) as client:
        informer = Informer(client, POD_KIND, lambda old, new: None)
        async with _running(informer):
            await asyncio.wait_for(informer.synced.wait(), 10)
            limits = [int(q.query["limit"]) for q in cluster.requests_to("GET", r"/pods$")
                      if "watch" not in q.query]  # fmt: skip
            assert limits[0] == informer_module.FIRST_PAGE
            assert set(limits[1:]) == {3}  # 64 KiB holds three of them
            assert len(informer) == 30

    small = FakeCluster()
    for i in range(200):
        small.store.create(PODS, _pod(f"s{i:03}"))
    async with _client(tmp_path, small) as client:
        informer = Informer(client, POD_KIND, lambda old, new: None, page_size=150)
        async with _running(informer):
            await asyncio.wait_for(informer.synced.wait(), 10)
            limits = [int(q.query["limit"]) for q in small.requests_to("GET", r"/pods$")
                      if "watch" not in q.query]  # fmt: skip
            assert limits == [20, 80, 150]
            assert len(informer) == 200


async def test_no_object_of_a_page_is_held_when_the_next_page_is_asked_for(
    tmp_path: Path,
) -> None:
    """What a list holds at a time is one page and what the cache keeps of the others."""
    cluster = FakeCluster()
    for i in range(5):
        cluster.store.create(PODS, _pod(f"p{i}"))

    def cut(obj: dict[str, Any]) -> dict[str, Any]:
        return {"metadata": {k: obj["metadata"][k] for k in ("name", "resourceVersion")}}

    async with _client(tmp_path, cluster) as client:
        alive_at_next = watch_pages(client)
        informer = Informer(client, POD_KIND, lambda old, new: None, transform=cut, page_size=2)
        async with _running(informer):
            await asyncio.wait_for(informer.synced.wait(), 10)
            assert len(informer) == 5
            assert alive_at_next == [0, 0]  # pages of 2, 2 and 1


async def test_a_metadata_only_informer_caches_metadata_under_its_own_kind(
    tmp_path: Path,
) -> None:
    cluster = FakeCluster()
    cluster.store.create(PODS, _pod("listed", app="a"))
    async with _client(tmp_path, cluster) as client:
        changes: Changes = []
        informer = Informer(client, POD_KIND, _recorder(changes), metadata_only=True)
        async with _running(informer):
            await asyncio.wait_for(informer.synced.wait(), 10)
            cluster.store.create(PODS, _pod("watched", app="b"))
            await eventually(lambda: informer.get("default", "watched"), what="the watched pod")
            for name in ("listed", "watched"):
                cached = informer.get("default", name)
                assert cached is not None
                assert (cached["apiVersion"], cached["kind"]) == ("v1", "Pod")
                assert set(cached) == {"apiVersion", "kind", "metadata"}
            asked = {("watch" in q.query, q.accept.split(";")[1])
                     for q in cluster.requests_to("GET", r"/pods$")}  # fmt: skip
            assert asked == {(False, "as=PartialObjectMetadataList"),
                             (True, "as=PartialObjectMetadata")}  # fmt: skip


async def test_an_expired_continue_token_starts_the_list_over(tmp_path: Path) -> None:
    """The list started over is the cache: a pod the expired list gave and that is deleted
    before the list starts over is not cached."""
    cluster = FakeCluster()
    for i in range(6):
        cluster.store.create(PODS, _pod(f"p{i}"))

    async with _client(tmp_path, cluster) as client:
        listed = client.list_page

        async def compacting_list(*args: Any, **kwargs: Any) -> tuple[dict[str, Any], int]:
            page = await listed(*args, **kwargs)
            if not kwargs.get("continue_token") and len(cluster.requests_to("GET", "/pods")) == 1:
                cluster.store.create(PODS, _pod("late"))
                cluster.store.delete(PODS, "default", "p0", grace_period_seconds=0)
                cluster.store.compact()  # the first page's version is gone
            return page

        client.list_page = compacting_list  # type: ignore[method-assign]
        informer = Informer(client, POD_KIND, lambda old, new: None, page_size=4)
        async with _running(informer):
            await asyncio.wait_for(informer.synced.wait(), 10)
            pages = [q for q in cluster.requests_to("GET", r"/pods$") if "watch" not in q.query]
            assert [bool(q.query.get("continue")) for q in pages] == [False, True, False, True]
            assert sorted(o["metadata"]["name"] for o in informer.items()) == [
                "late",
                *(f"p{i}" for i in range(1, 6)),
            ]


async def test_a_transform_strips_what_is_cached_and_drops_what_is_not_wanted(
    tmp_path: Path,
) -> None:
    cluster = FakeCluster()
    cluster.store.create(PODS, _pod("kept", keep="yes"))
    cluster.store.create(PODS, _pod("dropped", keep="no"))

    def strip(obj: dict[str, Any]) -> dict[str, Any] | None:
        labels = obj["metadata"].get("labels") or {}
        if labels.get("keep") != "yes":
            return None
        return {"metadata": obj["metadata"], "spec": {}}

    async with _client(tmp_path, cluster) as client:
        changes: Changes = []
        informer = Informer(client, POD_KIND, _recorder(changes), transform=strip)
        async with _running(informer):
            await asyncio.wait_for(informer.synced.wait(), 10)
            assert [o["metadata"]["name"] for o in informer.items()] == ["kept"]
            assert informer.get("default", "kept") == {
                "metadata": informer.get("default", "kept")["metadata"],  # type: ignore[index]
                "spec": {},
            }
            assert changes == [(None, "kept")]

            # A watched object the transform turns away leaves the cache, as a deletion.
            pod = cluster.store.get(PODS, "default", "kept")
            assert pod is not None
            pod["metadata"]["labels"]["keep"] = "no"
            cluster.store.update(PODS, pod)
            cluster.store.create(PODS, _pod("new", keep="yes"))
            await eventually(lambda: informer.get("default", "new"), what="the new pod")
            assert informer.get("default", "kept") is None
            assert changes == [(None, "kept"), ("kept", None), (None, "new")]


async def test_a_resource_the_server_does_not_serve_is_reported_and_found_later(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(informer_module, "MAX_BACKOFF", 0.05)
    cluster = FakeCluster()
    cluster.store.create(PODS, _pod("p"))
    async with _client(tmp_path, cluster) as client:
        fault = cluster.inject("GET", r"/pods$", 404, times=None,
                               message="the server could not find the requested resource")  # fmt: skip
        informer = Informer(client, POD_KIND, lambda old, new: None)
        async with _running(informer):
            await eventually(lambda: informer.absent, what="absent")
            assert informer.state == "absent"
            assert not informer.synced.is_set()
            assert "could not find" in informer.error
            tries = fault.hits
            await eventually(lambda: fault.hits > tries + 2, what="looked for again")

            cluster.faults.remove(fault)  # the CRD is installed
            await asyncio.wait_for(informer.synced.wait(), 10)
            assert informer.state == "synced"
            assert not informer.absent
            assert informer.get("default", "p") is not None


async def test_every_run_starts_from_an_empty_cache_and_a_new_list(tmp_path: Path) -> None:
    cluster = FakeCluster()
    cluster.store.create(PODS, _pod("old"))
    async with _client(tmp_path, cluster) as client:
        informer = Informer(client, POD_KIND, lambda old, new: None)
        async with _running(informer):
            await asyncio.wait_for(informer.synced.wait(), 10)
            assert informer.get("default", "old") is not None

        # Leadership lost; meanwhile the pod goes. The next term must not see it.
        cluster.store.delete(PODS, "default", "old", grace_period_seconds=0)
        lists = informer.lists
        task = asyncio.create_task(informer.run())
        try:
            await asyncio.sleep(0)
            assert not informer.synced.is_set()
            assert informer.get("default", "old") is None
            await asyncio.wait_for(informer.synced.wait(), 10)
            assert informer.lists == lists + 1
            assert informer.get("default", "old") is None
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def _silent_server(
    handler: Callable[[web.Request], Awaitable[web.StreamResponse]],
) -> tuple[web.AppRunner, str]:
    app = web.Application()
    app.router.add_route("GET", "/{tail:.*}", handler)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, f"http://127.0.0.1:{runner.addresses[0][1]}"


async def test_a_watch_that_goes_silent_ends_so_that_it_can_be_opened_again() -> None:
    from kubernetes.aio import client as aio

    async def silent(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        await response.prepare(request)
        await response.write(b'{"type":"ADDED","object":{"metadata":{"name":"a",')
        await response.write(b'"resourceVersion":"7"}}}\n')
        await asyncio.sleep(3600)  # a connection that died without a reset
        return response

    runner, url = await _silent_server(silent)
    configuration = aio.Configuration(host=url)
    client = KubeClient(aio.ApiClient(configuration))
    try:
        seen = []

        async def follow() -> None:
            async for event, obj in client.watch(POD_KIND, resource_version="1", idle_seconds=0.3):
                seen.append((event, obj["metadata"]["resourceVersion"]))

        await asyncio.wait_for(follow(), 10)
        assert seen == [("ADDED", "7")]
    finally:
        await client.close()
        await runner.cleanup()


async def test_an_error_event_in_the_stream_is_raised() -> None:
    from kubernetes.aio import client as aio

    async def expired(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        await response.prepare(request)
        await response.write(
            b'{"type":"ERROR","object":{"kind":"Status","code":410,"reason":"Expired",'
            b'"message":"too old resource version: 1 (5)"}}\n'
        )
        return response

    async def failed(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        await response.prepare(request)
        await response.write(b'{"type":"ERROR","object":{"kind":"Status","code":500,'
                             b'"message":"etcd is unhappy"}}\n')  # fmt: skip
        return response

    for handler, expected in ((expired, Gone), (failed, ApiFailure)):
        runner, url = await _silent_server(handler)
        client = KubeClient(aio.ApiClient(aio.Configuration(host=url)))
        try:
            with pytest.raises(expected) as caught:
                async for _ in client.watch(POD_KIND, resource_version="1"):
                    pass
            assert caught.value.status in (410, 500)
        finally:
            await client.close()
            await runner.cleanup()


async def test_a_silent_watch_is_reopened_from_the_last_version_without_a_relist(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster = FakeCluster(bookmark_interval=3600)
    cluster.store.create(PODS, _pod("a"))
    async with _client(tmp_path, cluster) as client:
        watch = client.watch

        def short_idle(*args: Any, **kwargs: Any) -> Any:
            return watch(*args, **{**kwargs, "idle_seconds": 0.2})

        monkeypatch.setattr(client, "watch", short_idle)
        informer = Informer(client, POD_KIND, lambda old, new: None)
        async with _running(informer):
            await asyncio.wait_for(informer.synced.wait(), 10)
            await eventually(
                lambda: (
                    len([q for q in cluster.requests_to("GET", "/pods") if q.query.get("watch")])
                    >= 3
                ),
                what="watches reopened",
            )
            cluster.store.create(PODS, _pod("b"))
            await eventually(lambda: informer.get("default", "b"), what="the pod made meanwhile")
            assert informer.lists == 1
            watches = [q for q in cluster.requests_to("GET", "/pods") if q.query.get("watch")]
            assert all(q.query.get("resourceVersion") for q in watches)


async def test_a_change_the_transform_strips_updates_the_cache_without_a_notification(
    tmp_path: Path,
) -> None:
    cluster = FakeCluster()
    cluster.store.create(PODS, _pod("p", app="x"))

    def decisions(obj: dict[str, Any]) -> dict[str, Any]:
        return {"metadata": {k: obj["metadata"].get(k)
                             for k in ("name", "namespace", "labels", "resourceVersion")}}  # fmt: skip

    async with _client(tmp_path, cluster) as client:
        changes: Changes = []
        informer = Informer(client, POD_KIND, _recorder(changes), transform=decisions)
        async with _running(informer):
            await asyncio.wait_for(informer.synced.wait(), 10)
            pod = cluster.store.get(PODS, "default", "p")
            assert pod is not None
            pod["status"] = {"phase": "Running"}
            stored = cluster.store.update(PODS, pod, subresource="status")
            version = stored["metadata"]["resourceVersion"]
            await eventually(
                lambda: (
                    (informer.get("default", "p") or {})["metadata"]["resourceVersion"] == version
                ),
                what="the status write",
            )
            assert changes == [(None, "p")]

            stored["metadata"]["labels"]["app"] = "y"
            cluster.store.update(PODS, stored)
            await eventually(lambda: len(changes) == 2, what="the label change")
            assert changes == [(None, "p"), ("p", "p")]


async def test_a_watch_that_never_answers_is_a_failure_not_an_end() -> None:
    from kubernetes.aio import client as aio

    async def mute(request: web.Request) -> web.StreamResponse:
        await asyncio.sleep(3600)  # accepted, never answered
        return web.Response()

    runner, url = await _silent_server(mute)
    client = KubeClient(aio.ApiClient(aio.Configuration(host=url)))
    try:
        with pytest.raises(ApiFailure) as caught:
            async for _ in client.watch(POD_KIND, resource_version="1", idle_seconds=0.3):
                pass
        assert caught.value.status is None
        assert "Timeout" in caught.value.message
    finally:
        await client.close()
        await runner.cleanup()


async def test_requests_carry_refreshed_credentials_and_bypass_the_generated_models(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kubernetes.aio.client import ApiClient

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the generated client's (de)serialization was used")

    monkeypatch.setattr(ApiClient, "sanitize_for_serialization", refuse)
    monkeypatch.setattr(ApiClient, "deserialize", refuse)
    cluster = FakeCluster()
    async with _client(tmp_path, cluster) as client:
        configuration = client._api_client.configuration
        configuration.api_key = {"authorization": "Bearer expired"}
        configuration.api_key_prefix = {}

        def refresh(conf: Any) -> None:  # what the kubeconfig loader's exec-plugin hook does
            conf.api_key["authorization"] = f"Bearer {cluster.token}"

        configuration.refresh_api_key_hook = refresh
        body = _pod("p", note="ünïcode")
        body["metadata"]["annotations"] = {"big": str(2**62)}
        created = await client.create(Kind("", "v1", "pods", "Pod"), "default", body, timeout=5)
        assert created["metadata"]["labels"]["note"] == "ünïcode"
        assert created["metadata"]["annotations"]["big"] == str(2**62)
        found = await client.get(POD_KIND, "default", "p", timeout=5)
        assert found is not None and found["metadata"]["uid"] == created["metadata"]["uid"]
        events = client.watch(POD_KIND, "default", resource_version="0", timeout_seconds=1)
        first = await anext(events)
        await events.aclose()
        assert first[0] == "ADDED" and first[1]["metadata"]["name"] == "p"


async def test_a_request_that_gets_no_answer_fails_within_its_timeout() -> None:
    from kubernetes.aio import client as aio

    async def mute(request: web.Request) -> web.StreamResponse:
        await asyncio.sleep(3600)
        return web.Response()

    runner, url = await _silent_server(mute)
    client = KubeClient(aio.ApiClient(aio.Configuration(host=url)))
    try:
        with pytest.raises(ApiFailure) as caught:
            await asyncio.wait_for(client.get(POD_KIND, "default", "p", timeout=0.3), 10)
        assert caught.value.status is None
        assert "no answer within 0.3s" in caught.value.message
    finally:
        await client.close()
        await runner.cleanup()


async def test_a_failed_watch_is_resumed_from_the_last_version_without_a_relist(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(informer_module, "WATCH_SECONDS", 1)
    cluster = FakeCluster()
    cluster.store.create(PODS, _pod("a"))
    async with _client(tmp_path, cluster) as client:
        informer = Informer(client, POD_KIND, lambda old, new: None)
        async with _running(informer):
            await asyncio.wait_for(informer.synced.wait(), 10)
            cluster.store.create(PODS, _pod("b"))
            await eventually(lambda: informer.get("default", "b"), what="b")
            # The server ends the watch after a second; the next one fails twice.
            fault = cluster.inject("GET", r"/pods$", 500, times=2)
            await eventually(lambda: fault.hits == 2, what="the failed watches")
            cluster.store.create(PODS, _pod("c"))
            await eventually(lambda: informer.get("default", "c"), what="c, after the failures")
            assert informer.lists == 1
            watches = [q for q in cluster.requests_to("GET", "/pods") if q.query.get("watch")]
            b_version = cluster.store.get(PODS, "default", "b")["metadata"]["resourceVersion"]  # type: ignore[index]
            assert int(watches[-1].query["resourceVersion"]) >= int(b_version)
