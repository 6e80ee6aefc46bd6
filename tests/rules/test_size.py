"""etcd's 1.5 MiB limit, checked before anything is created."""

from __future__ import annotations

import json

import pytest

from tests.builders import appwrapper, context, policy, spec_of, volcano_job
from webhook.core import engine, kinds
from webhook.core.plumbing import env as env_plumbing
from webhook.core.rules import size

POLICY = policy().queues(default="q")


def _big_job(kib):
    job = volcano_job("big").task("w", replicas=2).build()
    job["metadata"]["annotations"] = {"example.com/blob": "x" * (kib * 1024)}
    return job


def test_a_wrapped_job_whose_appwrapper_would_exceed_etcds_limit_is_refused_with_its_size():
    outcome = engine.admit(_big_job(1600), context(POLICY))
    ((v,),) = [outcome.errors]
    assert str(v.path) == "<root>"
    assert "the AppWrapper for this Job would be at least 1,6" in v.detail
    assert "1,572,864 (1.5 MiB)" in v.detail


def test_a_large_job_under_the_limit_passes():
    outcome = engine.admit(_big_job(1400), context(POLICY))
    assert outcome.errors == ()


def test_a_submitted_appwrapper_over_the_limit_is_refused():
    aw = appwrapper("aw", ns="ml").component(_big_job(1600))
    outcome = engine.admit(aw.build(), context(POLICY))
    assert [str(v.path) for v in outcome.errors] == ["<root>"]


def test_the_size_is_that_of_compact_json():
    assert size.json_size({"a": [1, 2]}) == len('{"a":[1,2]}')
    assert size.json_size({"n": 2**70}) == len('{"n":' + str(2**70) + "}")


def _many_containers(count: int) -> dict:
    job = volcano_job("wide").task("master", replicas=1).task("w", replicas=2).build()
    for task in job["spec"]["tasks"]:
        task["template"]["spec"]["containers"] = [
            {"name": f"c{i}", "image": "x"} for i in range(count // 2)
        ]
    return job


def test_a_job_whose_env_would_push_it_over_the_limit_is_refused_before_it_is_built():
    job = _many_containers(12_000)
    assert size.json_size(job) < size.ETCD_LIMIT / 2

    outcome = engine.admit(job, context(POLICY))

    assert outcome.result is None, "nothing is built for it"
    ((v,),) = [outcome.errors]
    assert "would be at least" in v.detail and "with the env autowrap adds" in v.detail
    assert "use fewer containers per pod template" in v.detail


def test_audit_enforcement_cannot_let_through_what_could_not_be_built():
    outcome = engine.admit(_many_containers(12_000), context(policy().queues(default="q").audit()))
    verdict = outcome.verdict()
    assert verdict.denied and "would be at least" in verdict.errors[0]


def test_a_submitted_appwrapper_of_many_containers_is_refused_before_it_is_completed():
    aw = appwrapper("aw", ns="ml").component(_many_containers(12_000)).build()
    outcome = engine.admit(aw, context(POLICY))
    assert outcome.result is None
    assert "the AppWrapper would be at least" in outcome.errors[0].detail


@pytest.mark.parametrize("count", [2, 400, 3_000])
def test_the_counted_growth_never_exceeds_what_plumbing_adds(count: int):
    job = _many_containers(count)
    job["spec"]["tasks"][1]["template"]["spec"]["containers"][0]["env"] = [
        {"name": "MASTER_PORT", "value": "23456"},
        {"name": "OTHER", "value": "1"},
    ]
    adapter = kinds.find(job["apiVersion"], job["kind"])
    assert adapter is not None
    spec = spec_of(POLICY)
    counted = sum(env_plumbing.growth(t, p) for t, p in engine.env_plans(job, adapter, spec))
    most = sum(env_plumbing.most_growth(t, p) for t, p in engine.env_plans(job, adapter, spec))
    built = engine.plumb(job, adapter, spec).result
    assert 0 < counted <= size.json_size(built) - size.json_size(job)
    assert counted <= most


def test_exactly_the_etcd_limit_still_fits():
    assert size.over_limit(size.ETCD_LIMIT, submitted=1, what="Job ml/j") is None
    refused = size.over_limit(size.ETCD_LIMIT + 1, submitted=1, what="Job ml/j")
    assert refused is not None and str(refused.path) == str(size.ROOT)


def test_the_built_appwrapper_is_weighed_whole_past_the_lower_bound():
    """The lower bound counts only the env autowrap adds; the DNS, labels and the AppWrapper
    around the Job come on top, so a Job just under it can still build an AppWrapper one byte
    over etcd's limit: that one is refused with its size, one byte less is not."""

    def weight(outcome):  # compact JSON, measured independently of size.json_size
        return len(json.dumps(outcome.result, separators=(",", ":")).encode())

    small = weight(engine.admit(_big_job(1), context(POLICY)))
    blob = 1024 + size.ETCD_LIMIT + 1 - small  # the blob that makes the AppWrapper limit + 1
    job = volcano_job("big").task("w", replicas=2).build()
    job["metadata"]["annotations"] = {"example.com/blob": "x" * blob}
    outcome = engine.admit(job, context(POLICY))
    assert [v.render() for v in outcome.errors] == [
        "<root>: the AppWrapper is 1,572,865 bytes as JSON, more than the 1,572,864 (1.5 MiB) "
        "etcd stores in one object, so the API server would refuse it; move large data into a "
        "ConfigMap, Secret or volume and reference it"
    ]
    job["metadata"]["annotations"]["example.com/blob"] = "x" * (blob - 1)
    fits = engine.admit(job, context(POLICY))
    assert fits.errors == () and weight(fits) == size.ETCD_LIMIT
