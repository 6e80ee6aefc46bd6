"""``Api.list_kept`` against the fake cluster over HTTP: a whole list read a page at a time,
each object cut as its page arrives, and started over when its continue token expires."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from testbed.cluster.cluster import FakeCluster
from testbed.cluster.resources import PODS
from tests.server.test_kube_informer import POD_KIND, _client, _pod, watch_pages
from webhook.shell import kube


def _cut(pod: dict[str, Any]) -> dict[str, Any] | None:
    labels = pod["metadata"].get("labels") or {}
    return None if labels.get("keep") == "no" else {"name": pod["metadata"]["name"]}


async def test_every_object_is_read_once_and_cut_even_when_the_list_starts_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(kube, "FIRST_PAGE", 2)
    cluster = FakeCluster()
    for i in range(6):
        big = _pod(f"p{i}", app="x")
        big["metadata"]["annotations"] = {"pad": "x" * (1 << 20)}  # 4 MiB pages hold three
        cluster.store.create(PODS, big)
    cluster.store.create(PODS, _pod("other", app="x", keep="no"))
    cluster.store.create(PODS, _pod("unselected"))

    async with _client(tmp_path, cluster) as client:
        listed = client.list_page

        async def compacting_list(*args: Any, **kwargs: Any) -> tuple[dict[str, Any], int]:
            page = await listed(*args, **kwargs)
            if len(cluster.requests_to("GET", "/pods")) == 1:
                cluster.store.create(PODS, _pod("late", app="x"))
                cluster.store.compact()  # the next page's token names a version gone
            return page

        client.list_page = compacting_list  # type: ignore[method-assign]
        kept = await client.list_kept(POD_KIND, "default", timeout=10, labels="app=x", keep=_cut)

    assert sorted(k["name"] for k in kept) == ["late", *(f"p{i}" for i in range(6))]
    pages = cluster.requests_to("GET", r"/pods$")
    limits = [(int(q.query["limit"]), bool(q.query.get("continue"))) for q in pages]
    # Pages by bytes: "other" and p0 (1 MiB) first, then as many as 4 MiB holds at that size;
    # that token expired, so the list starts over from a page of two ("late", "other"), then
    # four times as many, the most a page grows.
    assert limits == [(2, False), (7, True), (2, False), (8, True)]


async def test_no_object_of_a_page_is_held_when_the_next_page_is_asked_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a read holds at a time is one page and what ``keep`` made of the others."""
    monkeypatch.setattr(kube, "FIRST_PAGE", 2)
    cluster = FakeCluster()
    for i in range(5):
        cluster.store.create(PODS, _pod(f"p{i}", app="x"))

    async with _client(tmp_path, cluster) as client:
        alive_at_next = watch_pages(client)
        kept = await client.list_kept(POD_KIND, "default", timeout=10, labels="app=x", keep=_cut)

    assert sorted(k["name"] for k in kept) == [f"p{i}" for i in range(5)]
    assert alive_at_next == [0]  # pages of 2 and 3: the first all gone when the second is asked
