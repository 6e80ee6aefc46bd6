"""The Kubernetes API fails in every way autowrap can see: the user gets a clear denial, a
retry converges to exactly one AppWrapper, and no AppWrapper exists that the user was not told
about."""

from __future__ import annotations

import pytest

from testbed.redirect import ALICE, NAMESPACE, Cluster
from testbed.scenarios import BUDGET, PHASES, fault_run, labelled_vcjob


@pytest.mark.parametrize("fault", sorted(PHASES))
async def test_a_failed_api_call_denies_clearly_and_the_retry_leaves_exactly_one_appwrapper(
    cluster: Cluster, fault: str
) -> None:
    outcome = await fault_run(cluster, fault, "train")

    assert outcome.problems == []
    assert not outcome.first_allowed
    assert all("autowrap could not complete the request" in m for m in outcome.messages)
    assert outcome.appwrappers_after_retry == 1


@pytest.mark.parametrize(
    "fault",
    ["create stored, then connection lost", "create stored and lost, then get answers 500"],
)
async def test_when_the_appwrapper_may_have_been_stored_the_denial_says_so_and_how_to_check(
    cluster: Cluster, fault: str
) -> None:
    outcome = await fault_run(cluster, fault, "train")

    assert outcome.existed_after_failure
    for message in outcome.messages:
        assert f"AppWrapper {NAMESPACE}/train" in message
        assert f"kubectl get appwrapper train -n {NAMESPACE}" in message


@pytest.mark.parametrize("fault", ["create answers 403"])
async def test_when_the_api_refused_the_create_the_denial_says_nothing_was_created(
    cluster: Cluster, fault: str
) -> None:
    outcome = await fault_run(cluster, fault, "train")

    assert not outcome.existed_after_failure
    assert "nothing was created" in outcome.first_message


async def test_a_slow_api_is_abandoned_within_the_apiservers_budget(cluster: Cluster) -> None:
    cluster.kube.inject("POST", r"/subjectaccessreviews$", status=None, delay=BUDGET + 0.5)

    result = await cluster.emulator.create(labelled_vcjob("slow"), user=ALICE,
                                           request_timeout=BUDGET)  # fmt: skip

    call = next(c for c in cluster.emulator.calls if c.name.startswith("vcjobs."))
    assert call.timeout_param == f"{int(BUDGET)}s"
    assert call.error is None, "autowrap answered before the apiserver gave up"
    assert call.duration < BUDGET
    assert "did not answer" in result.message
    assert cluster.appwrappers() == {}


async def test_an_unreachable_api_denies_clearly_and_a_retry_after_recovery_wraps_once(
    cluster: Cluster,
) -> None:
    await cluster.kube.stop()
    down = await cluster.emulator.create(labelled_vcjob("train"), user=ALICE,
                                         request_timeout=BUDGET)  # fmt: skip
    await cluster.kube.start()
    retry = await cluster.emulator.create(labelled_vcjob("train"), user=ALICE,
                                          request_timeout=BUDGET)  # fmt: skip

    assert not down.allowed
    assert "the Kubernetes API did not answer" in down.message
    assert "was wrapped into AppWrapper ml/train" in retry.message
    assert list(cluster.appwrappers()) == [(NAMESPACE, "train")]


async def test_a_persistently_failing_create_never_leaves_an_appwrapper_behind(
    cluster: Cluster,
) -> None:
    cluster.kube.inject("POST", r"/appwrappers$", status=500, times=None)

    results = [await cluster.create(labelled_vcjob(f"job-{i}")) for i in range(5)]

    assert all(not r.allowed and "answered 500" in r.message for r in results)
    assert cluster.appwrappers() == {}
    assert cluster.emulator.contract_violations == []
