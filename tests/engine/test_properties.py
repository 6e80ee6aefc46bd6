"""Properties over generated Volcano Jobs and junk: fixed point, never raising, exact ranks."""

from __future__ import annotations

import copy
import string

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.builders import context, pod_template, policy
from tests.engine.simulate import pods_of, rank_order
from webhook.core import engine

SETTINGS = settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
CTX = context(
    policy().topology(
        default={"mode": "hard", "highestTierAllowed": 2},
        partitionDefault={"mode": "soft", "highestTierAllowed": 1},
    )
)

dns_label = st.from_regex(r"[a-z]([a-z0-9-]{0,10}[a-z0-9])?", fullmatch=True)


@st.composite
def volcano_jobs(draw):
    job_name = draw(dns_label)
    task_names = draw(st.lists(dns_label, min_size=1, max_size=8, unique=True))
    tasks = []
    for name in task_names:
        replicas = draw(st.integers(0, 6))
        template = pod_template(
            gpus=draw(st.one_of(st.none(), st.sampled_from([1, 2, 4, 8]))),
            init_containers=draw(st.integers(0, 1)),
        )
        task = {"name": name, "replicas": replicas, "template": template}
        if replicas and draw(st.booleans()):
            size = draw(st.sampled_from([d for d in range(1, replicas + 1) if replicas % d == 0]))
            task["partitionPolicy"] = {"totalPartitions": replicas // size, "partitionSize": size}
        tasks.append(task)
    metadata = {"name": job_name, "labels": {"autowrap.io/wrap": "true"}}
    master = draw(st.one_of(st.none(), st.sampled_from(task_names)))
    if master is not None:
        metadata["annotations"] = {"autowrap.io/master-task": master}
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": metadata,
        "spec": {"schedulerName": "volcano", "tasks": tasks},
    }


@SETTINGS
@given(volcano_jobs())
def test_render_is_a_fixed_point(job):
    first = engine.admit(job, CTX)
    assert first.action is engine.Action.WRAP
    again = engine.admit(first.result, CTX)
    assert again.action is engine.Action.COMPLETE
    assert again.result == first.result
    assert sorted(v.detail for v in again.errors) == sorted(v.detail for v in first.errors)


@SETTINGS
@given(volcano_jobs())
def test_ranks_are_exactly_zero_to_nnodes_minus_one(job):
    outcome = engine.admit(job, CTX)
    if outcome.errors:
        return
    pods = pods_of(outcome.result)
    nnodes = sum(t["replicas"] for t in job["spec"]["tasks"])
    assert len(pods) == nnodes
    ranks = {(p.task, p.index): int(p.env()["RANK"]) for p in pods}
    assert sorted(ranks.values()) == list(range(nnodes))
    assert ranks == {key: i for i, key in enumerate(rank_order(job))}
    for p in pods:
        env = p.env()
        assert env["NODE_RANK"] == env["PET_NODE_RANK"] == env["RANK"]
        assert env["NNODES"] == str(nnodes)
    if pods:
        rank_zero = next(p for p in pods if ranks[(p.task, p.index)] == 0)
        assert {p.env()["MASTER_ADDR"] for p in pods} == {rank_zero.fqdn}


json_leaf = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 70000), st.text(string.printable, max_size=8)
)
junk = st.recursive(
    json_leaf,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(
            st.sampled_from(
                [
                    "apiVersion",
                    "kind",
                    "metadata",
                    "spec",
                    "name",
                    "labels",
                    "annotations",
                    "tasks",
                    "template",
                    "replicas",
                    "containers",
                    "initContainers",
                    "env",
                    "value",
                    "partitionPolicy",
                    "networkTopology",
                    "plugins",
                    "components",
                    "podSets",
                    "path",
                    "resources",
                    "limits",
                    "hostname",
                    "subdomain",
                    "x",
                ]
            ),
            inner,
            max_size=6,
        ),
    ),
    max_leaves=30,
)
KINDS = [
    ("batch.volcano.sh/v1alpha1", "Job"),
    ("v1", "Pod"),
    ("workload.codeflare.dev/v1beta2", "AppWrapper"),
]


@st.composite
def junk_objects(draw):
    api_version, kind = draw(st.sampled_from(KINDS))
    obj = {"apiVersion": api_version, "kind": kind}
    for key in ("metadata", "spec"):
        if draw(st.booleans()):
            obj[key] = draw(junk)
    if draw(st.booleans()):
        obj["metadata"] = {"name": draw(dns_label), "labels": {"autowrap.io/wrap": "true"}}
    return obj


@SETTINGS
@given(st.one_of(junk, junk_objects()))
def test_admit_never_raises_on_junk(obj):
    outcome = engine.admit(obj, CTX)
    outcome.verdict()


V = "batch.volcano.sh/v1alpha1"
AW = "workload.codeflare.dev/v1beta2"


@pytest.mark.parametrize(
    "obj",
    [
        pytest.param(
            {"apiVersion": V, "kind": "Job", "metadata": {"name": "x"}, "spec": {"tasks": [None]}},
            id="a null task",
        ),
        pytest.param(
            {"apiVersion": V, "kind": "Job", "metadata": {"name": "x"}, "spec": {"tasks": [3]}},
            id="a task that is a number",
        ),
        pytest.param(
            {"apiVersion": V, "kind": "Job", "metadata": None, "spec": {"tasks": []}},
            id="null job metadata",
        ),
        pytest.param(
            {"apiVersion": "v1", "kind": "Pod", "metadata": [], "spec": {}},
            id="pod metadata that is a list",
        ),
        pytest.param(
            {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": None},
            id="null pod spec",
        ),
        pytest.param(
            {
                "apiVersion": V,
                "kind": "Job",
                "metadata": {"name": "x"},
                "spec": {
                    "tasks": [
                        {"name": "a", "replicas": 1, "template": {"spec": {}}},
                        {"name": "b", "replicas": 2, "template": {"metadata": None, "spec": {}}},
                    ]
                },
            },
            id="null template metadata in a later multi-pod task",
        ),
        pytest.param(
            {"apiVersion": V, "kind": "Job", "spec": []},
            id="a job spec that is a list, under a policy with topology defaults",
        ),
        pytest.param(
            {
                "apiVersion": V,
                "kind": "Job",
                "metadata": {"name": "x"},
                "spec": {
                    "tasks": [
                        {
                            "name": "a",
                            "replicas": 1,
                            "partitionPolicy": [],
                            "template": {"spec": {}},
                        }
                    ]
                },
            },
            id="a partitionPolicy that is a list, under a policy with a partition default",
        ),
        pytest.param(
            {
                "apiVersion": AW,
                "kind": "AppWrapper",
                "metadata": {"name": "a"},
                "spec": {
                    "components": [{"template": {"apiVersion": V, "kind": "Job", "spec": []}}]
                },
            },
            id="an AppWrapper component whose job spec is a list",
        ),
        pytest.param(
            {"apiVersion": AW, "kind": "AppWrapper", "metadata": "x", "spec": {}},
            id="AppWrapper metadata that is a string",
        ),
        pytest.param(
            {
                "apiVersion": AW,
                "kind": "AppWrapper",
                "metadata": {"name": "a"},
                "spec": {
                    "components": [{"template": {"apiVersion": "v1", "kind": "Pod", "spec": None}}]
                },
            },
            id="a Pod component with a null spec",
        ),
    ],
)
def test_admit_never_raises_on_malformed_objects(obj):
    engine.admit(obj, CTX).verdict()


def _as_appwrapper(job):
    return {
        "apiVersion": "workload.codeflare.dev/v1beta2",
        "kind": "AppWrapper",
        "metadata": {"name": "aw", "labels": {"kueue.x-k8s.io/queue-name": "q"}},
        "spec": {"components": [{"template": job}]},
    }


@SETTINGS
@given(volcano_jobs(), st.booleans())
def test_admit_never_changes_the_object_it_was_given(job, enclosed):
    """The result shares unchanged parts with the input, so a write into a shared part would
    corrupt the request's object (and hide the change from the patch diff)."""
    submitted = _as_appwrapper(job) if enclosed else job
    before = copy.deepcopy(submitted)

    for check in (True, False):
        engine.admit(submitted, CTX, check=check)

    assert submitted == before
