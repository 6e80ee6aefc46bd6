"""The API calls autowrap makes for one adopted job, by stage, held to the budget
docs/performance.md writes down ("API calls per job"): a change that makes more calls per job
fails here before it costs a real control plane. Counted on the fake cluster, from autowrap's
own identity, between a quiet cluster and the job's pods running; the Lease's renewals and the
informers' watches, which do not grow with jobs, are left out."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from testbed.cluster.resources import PODS, VCJOBS
from testbed.pki import ServingPki
from tests.adopt.cluster import ALICE, AUTOWRAP, bare_pod, running_cluster, vcjob
from tests.adopt.harness import eventually

# (verb, resource) -> calls for one Volcano Job of one master and one worker, adopt mode, from
# its create to its two pods running, by stage (docs/performance.md, "API calls per job"):
# - admission (live, as the trust table requires): may the user create AppWrappers (a
#   SubjectAccessReview), an earlier AppWrapper of the name being deleted (get), the queue
#   (its ClusterQueue: redirect for MultiKueue or topology-aware queues);
# - adopt: the component's server-side dry run, the AppWrapper, the Job's owner;
# - lift: the AppWrapper's hold;
# - release, once per pass (Volcano makes the pods one by one, so two passes): Kueue's Workload
#   and the AppWrapper read live, the claiming pods listed by each of two selectors; one patch
#   per pod;
# - status: the Job's annotation (adopted, admitted) and the Events that say it.
JOB_BUDGET = {
    ("create", "subjectaccessreviews"): 1,
    ("get", "clusterqueues"): 1,
    ("create", "jobs"): 1,
    ("create", "appwrappers"): 1,
    ("patch", "appwrappers"): 1,
    ("list", "workloads"): 2,
    ("get", "appwrappers"): 3,
    ("list", "pods"): 4,
    ("patch", "pods"): 2,
    # Owner, then one status per state the reconciles see: "starting" is written only when one
    # runs between Kueue's admission and the AppWrapper's start, so 3 or 4, with its Event.
    ("patch", "jobs"): 4,
    ("create", "events"): 4,
}
# The same for a labelled Pod: its headless Service and the dry run of both; the pod itself is
# patched by the release and by its status, which says Kueue's words while the pod is queued:
# the hold ("Admission is gated by: ..."), then its removal ("AdmissionGatedBy cleared, waiting
# for quota reservation"), each with its Queued Event, as on the real control plane (Kueue
# 0.19.2 says both on the Workload's QuotaReserved condition).
POD_BUDGET = {
    ("create", "subjectaccessreviews"): 1,
    ("get", "clusterqueues"): 1,
    ("create", "pods"): 1,
    ("create", "services"): 1,
    ("create", "appwrappers"): 1,
    ("patch", "appwrappers"): 1,
    ("list", "workloads"): 1,
    ("get", "appwrappers"): 2,
    ("list", "pods"): 1,
    ("patch", "pods"): 5,
    ("create", "events"): 4,
}


def _calls(cluster: object, since: int) -> Counter[tuple[str, str]]:
    counted: Counter[tuple[str, str]] = Counter()
    requests = list(cluster.api.requests)[since:]  # type: ignore[attr-defined]
    for request in requests:
        if request.user != AUTOWRAP.username or request.query.get("watch") == "true":
            continue
        parts = [p for p in request.path.split("/") if p]
        rest = parts[2:] if parts and parts[0] == "api" else parts[3:]
        if len(rest) >= 2 and rest[0] == "namespaces" and len(rest) > 2:
            rest = rest[2:]
        if not rest or rest[0] == "leases":
            continue
        verb = {"POST": "create", "DELETE": "delete", "PUT": "update", "PATCH": "patch"}.get(
            request.method, "get" if len(rest) > 1 else "list"
        )
        counted[(verb, rest[0])] += 1
    return counted


def _over(counted: Counter[tuple[str, str]], budget: dict[tuple[str, str], int]) -> list[str]:
    return [
        f"{verb} {resource}: {counted[(verb, resource)]} > {budget.get((verb, resource), 0)}"
        for verb, resource in sorted(counted)
        if counted[(verb, resource)] > budget.get((verb, resource), 0)
    ]


async def test_one_adopted_job_stays_within_its_call_budget(
    webhook_pki: ServingPki, tmp_path: Path
) -> None:
    async with running_cluster(webhook_pki, tmp_path) as cluster:
        await cluster.settle()
        since = len(cluster.api.requests)
        await cluster.api.create(VCJOBS, vcjob(workers=1, gpus=1), user=ALICE)
        await cluster.settle()
        await eventually(lambda: len(cluster.pods()) == 2 and all(
            p["status"]["phase"] == "Running" for p in cluster.pods()), what="both pods run")  # fmt: skip
        counted = _calls(cluster, since)
        assert not _over(counted, JOB_BUDGET), (_over(counted, JOB_BUDGET), dict(counted))
        # The stages happened at all: the budget is not met by doing nothing.
        assert counted[("create", "appwrappers")] == 1 and counted[("patch", "pods")] == 2


async def test_one_adopted_pod_stays_within_its_call_budget(
    webhook_pki: ServingPki, tmp_path: Path
) -> None:
    async with running_cluster(webhook_pki, tmp_path) as cluster:
        await cluster.settle()
        since = len(cluster.api.requests)
        await cluster.api.create(PODS, bare_pod(), user=ALICE)
        await cluster.settle()
        await eventually(
            lambda: (
                (cluster.get(PODS, "notebook") or {}).get("status", {}).get("phase") == "Running"
            ),
            what="the pod runs",
        )
        counted = _calls(cluster, since)
        assert not _over(counted, POD_BUDGET), (_over(counted, POD_BUDGET), dict(counted))
        assert counted[("create", "appwrappers")] == 1
