"""The env plan's pure parts, checked by the values a user sees: the env a helper task gets, the
processes counted per pod, the words that say where NPROC_PER_NODE comes from, the bytes an
object grows by, and where the injected entries land in a container's ``env``."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from webhook.core.plumbing import env as plumbing
from webhook.core.workload import PodGroup
from webhook.model import names
from webhook.model.fields import FieldPath

GPU = "nvidia.com/gpu"
INDEX = "volcano.sh/task-index"


def _template(*containers: dict[str, Any], init: tuple[dict[str, Any], ...] = ()) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": list(containers)}
    if init:
        spec["initContainers"] = list(init)
    return {"metadata": {}, "spec": spec}


def _container(name: str = "c", **resources: Any) -> dict[str, Any]:
    return {"name": name, "image": "i", "resources": resources}


def _group(name: str, replicas: int, template: dict[str, Any] | None = None) -> PodGroup:
    path = FieldPath(("spec", "tasks", name))
    return PodGroup(
        name=name,
        replicas=replicas,
        path=path,
        template_path=path.child("template"),
        template=template if template is not None else _template(_container()),
        podset_path=None,
        pod_index_key=INDEX,
    )


def _values(group_plan: plumbing.GroupPlan) -> dict[str, object]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in group_plan.env}


def _plan(groups: list[PodGroup], master: PodGroup, **kw: Any) -> plumbing.Plan:
    args: dict[str, Any] = {
        "master_addr": "j-master-0.j",
        "port": 23456,
        "nproc_override": None,
        "accelerators": (GPU,),
    }
    return plumbing.plan(groups, master, **(args | kw))


# --- helper tasks left out of the world (autowrap.io/exclude-tasks) -------------------------


def test_a_helper_task_gets_the_master_address_and_port_only_and_counts_in_no_size():
    gpus = _template(_container(limits={GPU: "4"}))
    master, worker, helper = _group("master", 1, gpus), _group("worker", 2, gpus), _group("ps", 3)
    plan = _plan([master, worker, helper], master, excluded=("ps",))

    ps = plan.for_group("ps")
    assert ps is not None
    assert ps.env == (
        {"name": "MASTER_ADDR", "value": "j-master-0.j"},
        {"name": "MASTER_PORT", "value": "23456"},
    )
    assert ps.in_world is False
    assert (ps.template_labels, ps.template_annotations) == ({}, {})
    worker_plan = plan.for_group("worker")
    assert worker_plan is not None and worker_plan.in_world is True
    assert (_values(worker_plan)["NNODES"], _values(worker_plan)["WORLD_SIZE"]) == ("3", "12")


def test_the_master_task_stays_in_the_world_even_when_listed_as_excluded():
    master, worker = _group("master", 1), _group("worker", 2)
    plan = _plan([worker, master], master, excluded=("master", "worker"))
    master_plan = plan.for_group("master")
    assert master_plan is not None and master_plan.in_world
    values = _values(master_plan)
    assert (values["RANK"], values["NNODES"], values["WORLD_SIZE"]) == ("0", "1", "1")


def test_the_plan_keeps_the_policy_s_accelerators_and_the_nproc_annotation():
    # Both are read back by the rules that explain NPROC_PER_NODE, so a one-shot iterable
    # must be kept as a tuple.
    master = _group("master", 2, _template(_container(limits={GPU: "4"})))
    plan = _plan([master], master, accelerators=iter([GPU, "amd.com/gpu"]), nproc_override=2)
    assert (plan.accelerators, plan.nproc_override) == ((GPU, "amd.com/gpu"), 2)
    assert _values(plan.groups[0])["WORLD_SIZE"] == "4"


def test_for_group_finds_each_group_by_name_and_nothing_for_an_unknown_name():
    master, worker = _group("master", 1), _group("worker", 2)
    plan = _plan([master, worker], master)
    found = [plan.for_group(name) for name in ("master", "worker", "ps")]
    assert [g.group.name if g else None for g in found] == ["master", "worker", None]


def test_groups_after_the_master_are_ranked_from_an_offset_label():
    master, worker = _group("master", 1), _group("worker", 3)
    worker_plan = _plan([worker, master], master).for_group("worker")
    assert worker_plan is not None
    assert worker_plan.template_labels == {names.NODE_RANK_OFFSET_LABEL: "1"}
    assert worker_plan.template_annotations == {names.POD_INDEX_KEY_ANNOTATION: INDEX}


# --- what counts as an accelerator -----------------------------------------------------------


@pytest.mark.parametrize(
    ("resources", "want"),
    [
        pytest.param(
            {"limits": {GPU: "2"}, "requests": {GPU: "4"}}, 2, id="limits before requests"
        ),
        pytest.param({"requests": {GPU: "4"}}, 4, id="requests when no limit is set"),
        pytest.param({"limits": {}, "requests": {GPU: "4"}}, 4, id="empty limits are no limits"),
        pytest.param({"limits": {GPU: 3}}, 3, id="an integer amount"),
        pytest.param({"limits": {GPU: -3}}, 0, id="a negative integer counts nothing"),
        pytest.param({"limits": {GPU: True}}, 0, id="a boolean is not a number"),
        pytest.param({"limits": {GPU: "1.5"}}, 0, id="a fractional quantity counts nothing"),
    ],
)
def test_accelerators_counted_in_one_container(resources, want):
    assert plumbing.accelerator_count(_template(_container(**resources)), (GPU,)) == want


def test_accelerators_are_summed_over_the_containers():
    template = _template(_container("a", limits={GPU: "2"}), _container("b", limits={GPU: "3"}))
    assert plumbing.accelerator_count(template, (GPU,)) == 5


def test_the_earliest_policy_pattern_decides_which_resource_counts():
    container = _container(limits={"amd.com/gpu": "2", GPU: "8"})
    template = _template(container)
    assert plumbing.accelerator_count(template, ("amd.com/gpu", "nvidia.com/*")) == 2
    assert plumbing.accelerator_count(template, ("nvidia.com/*", "amd.com/gpu")) == 8


def test_a_glob_never_counts_a_share_of_a_device_but_an_exact_name_does():
    template = _template(_container(limits={"volcano.sh/vgpu-memory": "2048"}))
    assert plumbing.accelerator_count(template, ("volcano.sh/*",)) == 0
    assert plumbing.accelerator_count(template, ("volcano.sh/vgpu-memory",)) == 2048


def test_an_accelerator_the_policy_does_not_count_is_found_in_any_container():
    template = _template(
        _container("plain"),
        _container("counted", limits={GPU: "1"}),
        _container("other", limits={"cpu": "1", "amd.com/gpu": "2"}),
    )
    assert plumbing.uncounted_accelerators(template, (GPU,)) == [(2, "amd.com/gpu")]


# --- where NPROC_PER_NODE comes from, in words -----------------------------------------------


def test_nproc_source_names_the_annotation_when_it_is_set():
    template = _template(_container(limits={GPU: "8"}))
    assert plumbing.nproc_source(template, (GPU,), 4) == (
        f"the annotation {names.NPROC_ANNOTATION}"
    )


def test_nproc_source_lists_each_counted_resource_with_its_sum():
    template = _template(
        _container("a", limits={GPU: "2"}),
        _container("b", limits={"amd.com/gpu": "1"}),
        _container("c", limits={GPU: "3"}),
    )
    assert plumbing.nproc_source(template, (GPU, "amd.com/gpu"), None) == (
        "the accelerators counted in the containers' resources (nvidia.com/gpu: 5, amd.com/gpu: 1)"
    )


def test_nproc_source_without_accelerators_names_what_the_policy_counts():
    template = _template(_container(limits={"cpu": "4"}))
    assert plumbing.nproc_source(template, iter([GPU, "amd.com/gpu"]), None) == (
        "no accelerator in the containers' resources"
        " (the policy counts nvidia.com/gpu, amd.com/gpu), so 1"
    )


# --- how many bytes the object grows by ------------------------------------------------------


def _size(obj: object) -> int:
    return len(orjson.dumps(obj))


def test_growth_is_exactly_the_bytes_apply_adds_to_containers_that_have_env():
    master = _group("master", 1)
    group_plan = _plan([master], master).groups[0]
    user = {"name": "USER", "value": "x"}
    template = _template(
        {"name": "a", "env": [user]},
        {"name": "b", "env": [user, {"name": "RANK", "value": "0"}, "not-an-entry"]},
        init=({"name": "i", "env": [user]},),
    )
    applied = plumbing.apply(template, group_plan)
    assert plumbing.growth(template, group_plan) == _size(applied) - _size(template)
    # ``most_growth`` bounds it: every entry in each of the three containers.
    every_entry = sum(_size(e) + 1 for e in group_plan.env)
    assert plumbing.most_growth(template, group_plan) == 3 * every_entry
    assert plumbing.growth(template, group_plan) == 3 * every_entry - (
        _size({"name": "RANK", "value": "0"}) + 1
    )


def test_growth_counts_every_entry_for_a_container_without_env():
    master = _group("master", 1)
    group_plan = _plan([master], master).groups[0]
    template = _template({"name": "a"}, {"name": "b", "env": "not-a-list"})
    every_entry = sum(_size(e) + 1 for e in group_plan.env)
    assert plumbing.growth(template, group_plan) == 2 * every_entry


# --- where the injected entries land ---------------------------------------------------------


@pytest.mark.parametrize(
    ("env", "want"),
    [
        pytest.param([{"name": "A", "value": "$(MASTER_ADDR)"}], 0, id="a literal reference"),
        pytest.param([{"name": "A", "value": "$$(MASTER_ADDR)"}], 1, id="an escaped dollar"),
        pytest.param(
            [{"name": "A", "value": "$(MASTER_ADDR)", "valueFrom": {}}], 1, id="a valueFrom entry"
        ),
        pytest.param([{"name": "A", "value": "$(OTHER)"}], 1, id="a reference to another name"),
        pytest.param(["$(MASTER_ADDR)", {"name": "B", "value": "$(RANK)"}], 1, id="a non-map"),
        pytest.param([{"name": "A", "value": 7}], 1, id="a value that is no string"),
    ],
)
def test_injected_entries_go_before_the_first_reference_to_them(env, want):
    assert plumbing.first_reference(env, {"MASTER_ADDR", "RANK"}) == want


def test_references_names_every_variable_a_value_uses():
    assert plumbing.references("tcp://$(MASTER_ADDR):$(MASTER_PORT)/$$(X)") == {
        "MASTER_ADDR",
        "MASTER_PORT",
    }
    assert plumbing.references("$$") == set()
    assert plumbing.references(None) == set()
    assert plumbing.references(7) == set()


def test_apply_leaves_a_container_that_is_no_map_as_it_is():
    master = _group("master", 1)
    group_plan = _plan([master], master).groups[0]
    applied = plumbing.apply(_template({"name": "a"}, init=("not-a-container",)), group_plan)
    assert applied["spec"]["initContainers"] == ["not-a-container"]
    assert [e["name"] for e in applied["spec"]["containers"][0]["env"]][:2] == [
        "MASTER_ADDR",
        "MASTER_PORT",
    ]


# --- small parsers ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "want"),
    [(" 3 ", 3), ("1", 1), ("0", None), ("-1", None), ("", None), (None, None), ("x", None)],
)
def test_parse_positive(value, want):
    assert plumbing.parse_positive(value) == want


@pytest.mark.parametrize(
    ("value", "want"), [("65535", 65535), ("65536", 29500), ("0", 29500), ("1", 1)]
)
def test_master_port_annotation_must_be_a_port(value, want):
    assert plumbing.master_port({names.MASTER_PORT_ANNOTATION: value}, 29500) == want


def test_excluded_tasks_are_trimmed_and_empty_parts_dropped():
    assert plumbing.excluded_tasks(" ps , ,eval,") == ("ps", "eval")
    assert plumbing.excluded_tasks("") == ()
    assert plumbing.excluded_tasks(None) == ()
