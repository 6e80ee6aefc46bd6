"""etcd's 1.5 MiB limit, checked before anything is created."""

from __future__ import annotations

from tests.builders import appwrapper, context, policy, volcano_job
from webhook import engine
from webhook.rules import size

POLICY = policy().queues(default="q")


def _big_job(kib):
    job = volcano_job("big").task("w", replicas=2).build()
    job["metadata"]["annotations"] = {"example.com/blob": "x" * (kib * 1024)}
    return job


def test_a_wrapped_job_whose_appwrapper_would_exceed_etcds_limit_is_refused_with_its_size():
    outcome = engine.admit(_big_job(1600), context(POLICY))
    ((v,),) = [outcome.errors]
    assert str(v.path) == "<root>"
    assert "the AppWrapper is 1,6" in v.detail and "1,572,864 (1.5 MiB)" in v.detail


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
