"""A status that says the AppWrapper is gone is never said while it exists: not when a replica
leads again and its caches refill, nor when its AppWrapper cache lags behind the store."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from testbed.cluster.resources import APPWRAPPERS, WORKLOADS
from testbed.sim.kueue import admitted_workload
from testbed.sim.objects import set_condition
from tests.adopt.harness import NAMESPACE, QUEUE, Adopting, adopting, eventually, vcjob
from webhook.controller import Controller
from webhook.core import adoption
from webhook.model import names

JOBS = 6
# The cluster-wide LIST and WATCH of AppWrappers (live reads are namespaced).
APPWRAPPERS_COLLECTION = r"^/apis/workload\.codeflare\.dev/v1beta2/appwrappers$"
WORKLOADS_COLLECTION = r"^/apis/kueue\.x-k8s\.io/[^/]+/workloads$"
GONE = adoption.status(None, pending=False).text
NO_QUOTA = "couldn't assign flavors to pod set worker: insufficient quota for nvidia.com/gpu"


def _statuses_written(cluster: Adopting) -> Iterator[str]:
    """Every value of the status annotation autowrap wrote to a Job, in any patch it sent."""
    for request in cluster.api.requests:
        if request.method != "PATCH" or "/jobs/" not in request.path:
            continue
        body: Any = request.body
        if isinstance(body, dict):
            value = ((body.get("metadata") or {}).get("annotations") or {}).get(
                names.STATUS_ANNOTATION
            )
            if value is not None:
                yield str(value)
        elif isinstance(body, list):
            for op in body:
                if isinstance(op, dict) and str(op.get("path", "")).endswith("~1status"):
                    yield str(op.get("value"))


def _status(cluster: Adopting, name: str) -> str:
    job = cluster.job(name)
    return str(((job or {}).get("metadata") or {}).get("annotations", {}).get(
        names.STATUS_ANNOTATION, ""))  # fmt: skip


def _queued(cluster: Adopting, name: str) -> bool:
    return _status(cluster, name).startswith("Queued")


def _short_of_quota(cluster: Adopting, name: str) -> None:
    """What Kueue writes for an AppWrapper it cannot admit yet: its Workload, QuotaReserved
    false with the reason."""
    aw = cluster.appwrapper(name)
    assert aw is not None
    workload = admitted_workload(aw, QUEUE)
    workload.pop("status")
    stored = cluster.api.store.create(WORKLOADS, workload)
    status: dict[str, Any] = {}
    set_condition(status, "QuotaReserved", False, "Pending", NO_QUOTA)
    cluster.api.store.update(WORKLOADS, {**stored, "status": status}, subresource="status")


async def _adopt_jobs(cluster: Adopting) -> Controller:
    controller = await cluster.start_controller("replica-a")
    for i in range(JOBS):
        cluster.store_job(vcjob(f"job-{i}"))
    await eventually(lambda: all(_queued(cluster, f"job-{i}") for i in range(JOBS)),
                     what="every job adopted and queued", timeout=30)  # fmt: skip
    await eventually(controller.idle, what="controller idle")
    return controller


def _assert_never_said_gone(cluster: Adopting) -> None:
    said = [s for s in _statuses_written(cluster) if s == GONE]
    assert not said, f"a Job was told its AppWrapper is gone while it existed ({len(said)} times)"
    assert not cluster.events("AppWrapperGone")
    assert all(cluster.appwrapper(f"job-{i}") is not None for i in range(JOBS))


async def test_a_new_leader_term_reconciles_only_once_its_caches_are_listed(
    tmp_path: Path,
) -> None:
    """The Lease lost and taken again: the new term lists every resource afresh, and while the
    AppWrappers' and Workloads' lists are slow, the Jobs already listed must not be judged
    against caches that are still empty."""
    async with adopting(tmp_path) as cluster:
        a = await _adopt_jobs(cluster)
        for i in range(JOBS):
            _short_of_quota(cluster, f"job-{i}")
        await eventually(lambda: all(NO_QUOTA in _status(cluster, f"job-{i}") for i in range(JOBS))
                         and a.idle(), what="Kueue's reason said", timeout=30)  # fmt: skip
        written = len(list(_statuses_written(cluster)))
        lists_before = [i.lists for i in a.informers]

        renewals = cluster.api.inject("PUT", "/leases/", 500, times=None)
        await eventually(lambda: not a.leading.is_set(), what="the lease lost", timeout=15)
        # The next term's AppWrapper and Workload lists answer slowly (a loaded apiserver).
        cluster.api.inject("GET", APPWRAPPERS_COLLECTION, None, delay=1.5, times=1)
        cluster.api.inject("GET", WORKLOADS_COLLECTION, None, delay=1.5, times=1)
        cluster.api.faults.remove(renewals)
        await eventually(a.leading.is_set, what="leading again", timeout=15)
        reconciles = a.reconciles

        # The harm would show in the reconciles the relist brings, one per Job at least.
        await eventually(lambda: all(i.synced.is_set() for i in a.informers)
                         and all(i.lists > n for i, n in zip(a.informers, lists_before, strict=True))
                         and a.reconciles >= reconciles + JOBS and a.idle(),
                         what="every key of the new term reconciled", timeout=30)  # fmt: skip
        _assert_never_said_gone(cluster)
        # Nothing changed while the lease changed hands: the new term writes no status at all
        # (one judged on a Workload cache still empty would drop Kueue's reason, then restore it).
        assert list(_statuses_written(cluster))[written:] == []
        assert all(NO_QUOTA in _status(cluster, f"job-{i}") for i in range(JOBS))


async def test_a_lagging_appwrapper_cache_never_says_the_appwrapper_is_gone(
    tmp_path: Path,
) -> None:
    """The AppWrapper watch stalls (a slow apiserver, a relist under way) while Jobs are
    adopted: the AppWrappers autowrap just created are not in its cache yet, and the Jobs'
    own changes are judged before they are. "Gone" is decided on a live read."""
    async with adopting(tmp_path) as cluster:
        a = await cluster.start_controller("replica-a")
        await eventually(lambda: all(i.synced.is_set() for i in a.informers), what="listed")
        # An informer opens its watch after its list: a watch request already under way when
        # the hold is set would escape it, and one not yet open would not be ended.
        await eventually(lambda: cluster.api.open_watches("appwrappers") == 1,
                         what="the AppWrapper watch open")  # fmt: skip
        stalled = asyncio.Event()
        cluster.api.inject("GET", APPWRAPPERS_COLLECTION, None, hold=stalled, times=1)
        cluster.api.end_watches()  # every watch is opened again; the AppWrappers' one stalls
        try:
            for i in range(JOBS):
                cluster.store_job(vcjob(f"job-{i}"))
            await eventually(lambda: all(_queued(cluster, f"job-{i}") for i in range(JOBS)),
                             what="every job adopted and queued", timeout=30)  # fmt: skip
            # The Jobs' adoption writes come back through their watch while the AppWrappers'
            # one is held: each key is judged again with no AppWrapper cached.
            await eventually(lambda: a.idle() and a.reconciles >= 2 * JOBS,
                             what="the adopted jobs judged again", timeout=30)  # fmt: skip
            appwrappers = next(i for i in a.informers if i.kind.plural == "appwrappers")
            assert len(appwrappers) == 0, "the AppWrapper watch was not held"
        finally:
            stalled.set()
        _assert_never_said_gone(cluster)


async def test_an_appwrapper_deleted_leaving_its_job_is_said_gone(tmp_path: Path) -> None:
    """The live read confirms what is really gone: an AppWrapper deleted with its dependents
    orphaned leaves the Job saying so, once, with its Event."""
    async with adopting(tmp_path) as cluster:
        await _adopt_jobs(cluster)
        cluster.api.store.delete(APPWRAPPERS, NAMESPACE, "job-0", propagation="Orphan")
        await eventually(lambda: _status(cluster, "job-0") == GONE, what="job-0 says gone")
        await eventually(lambda: cluster.events("AppWrapperGone"), what="the Event")
        assert [e["involvedObject"]["name"] for e in cluster.events("AppWrapperGone")] == ["job-0"]
        assert all(_queued(cluster, f"job-{i}") for i in range(1, JOBS))
