"""DNS plumbing: Volcano's svc plugin for jobs; hostname, subdomain and a Service for a Pod."""

from __future__ import annotations

import pytest

from tests.builders import pod, volcano_job
from tests.engine.helpers import component, outcome_of, render
from tests.engine.simulate import pods_of, resolve_env

PUBLISH = "--publish-not-ready-addresses=true"


@pytest.mark.parametrize(
    ("plugins", "want"),
    [
        pytest.param(None, {"svc": [PUBLISH]}, id="no plugins: svc is enabled"),
        pytest.param({"env": []}, {"env": [], "svc": [PUBLISH]}, id="other plugins are kept"),
        pytest.param({"svc": []}, {"svc": [PUBLISH]}, id="an empty svc gets the flag"),
        pytest.param(
            {"svc": ["--disable-network-policy=true"]},
            {"svc": ["--disable-network-policy=true", PUBLISH]},
            id="the user's svc arguments are kept and the flag appended",
        ),
        pytest.param({"svc": [PUBLISH]}, {"svc": [PUBLISH]}, id="the flag is not duplicated"),
        pytest.param(
            {"svc": ["--publish-not-ready-addresses=false"]},
            {"svc": ["--publish-not-ready-addresses=false"]},
            id="an explicit false is the user's choice and only warned about",
        ),
    ],
)
def test_svc_plugin_is_enabled_with_publish_not_ready_addresses(plugins, want):
    job = volcano_job("j").task("w", replicas=2)
    if plugins is not None:
        job.spec(plugins=plugins)
    outcome = outcome_of(job)
    assert outcome.errors == ()
    assert component(outcome.result)["spec"]["plugins"] == want


def test_plugging_twice_does_not_add_the_flag_again():
    once = component(render(volcano_job("j").task("w", replicas=2)))
    again = component(
        render(volcano_job("j").task("w", replicas=2).spec(plugins=once["spec"]["plugins"]))
    )
    assert again["spec"]["plugins"] == {"svc": [PUBLISH]}


def test_no_shared_hostname_is_set_in_any_job_template():
    job = volcano_job("j").task("master", replicas=1).task("w", replicas=4)
    for task in component(render(job))["spec"]["tasks"]:
        assert "hostname" not in task["template"]["spec"]
        assert "subdomain" not in task["template"]["spec"]


@pytest.mark.parametrize(
    ("template_spec", "want"),
    [
        pytest.param({"hostname": "boss"}, "boss.j", id="the master's own hostname is used"),
        pytest.param({"subdomain": "mesh"}, "j-master-0.mesh", id="the master's subdomain is used"),
        pytest.param({"hostname": "boss", "subdomain": "mesh"}, "boss.mesh", id="both are used"),
    ],
)
def test_master_addr_respects_the_users_hostname_and_subdomain(template_spec, want):
    job = (
        volcano_job("j")
        .task("master", replicas=1)
        .template_spec("master", **template_spec)
        .task("w", replicas=2)
    )
    appwrapper = render(job)
    pods = pods_of(appwrapper)
    master = next(p for p in pods if p.task == "master")
    assert master.fqdn == want
    assert {p.env()["MASTER_ADDR"] for p in pods} == {want}


def test_a_shared_hostname_in_a_multi_replica_template_is_rejected():
    job = volcano_job("j").task("w", replicas=3).template_spec("w", hostname="same")
    outcome = outcome_of(job)
    assert [(str(v.path), v.severity.value) for v in outcome.errors] == [
        ("spec.tasks[0].template.spec.hostname", "error")
    ]


def test_a_pod_gets_hostname_subdomain_and_a_headless_service_component():
    appwrapper = render(pod("solo").gpus(1))
    components = appwrapper["spec"]["components"]
    assert [c["template"]["kind"] for c in components] == ["Pod", "Service"]
    wrapped, service = components[0]["template"], components[1]["template"]
    assert (wrapped["spec"]["hostname"], wrapped["spec"]["subdomain"]) == ("solo", "solo")
    assert service["metadata"]["name"] == "solo"
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["publishNotReadyAddresses"] is True
    selector = service["spec"]["selector"]
    assert selector and all(wrapped["metadata"]["labels"].get(k) == v for k, v in selector.items())
    assert service["spec"]["ports"][0]["port"] == 23456
    assert "podSets" not in components[0] and "podSets" not in components[1]


def test_a_pod_is_one_node_of_rank_zero_and_its_own_master():
    appwrapper = render(pod("solo").gpus(4))
    wrapped = appwrapper["spec"]["components"][0]["template"]
    env = resolve_env(wrapped, wrapped["spec"]["containers"][0])
    assert env["MASTER_ADDR"] == env["PET_MASTER_ADDR"] == "solo.solo"
    assert (env["NNODES"], env["RANK"], env["NODE_RANK"], env["PET_NODE_RANK"]) == (
        "1",
        "0",
        "0",
        "0",
    )
    assert (env["NPROC_PER_NODE"], env["WORLD_SIZE"]) == ("4", "4")


def test_a_pod_keeps_its_own_hostname_and_subdomain():
    appwrapper = render(pod("solo").spec(hostname="h", subdomain="net"))
    wrapped, service = (c["template"] for c in appwrapper["spec"]["components"])
    assert (wrapped["spec"]["hostname"], wrapped["spec"]["subdomain"]) == ("h", "net")
    assert service["metadata"]["name"] == "net"
    env = resolve_env(wrapped, wrapped["spec"]["containers"][0])
    assert env["MASTER_ADDR"] == "h.net"


def test_a_pod_whose_name_starts_with_a_digit_gets_a_dns1035_service_name():
    appwrapper = render(pod("0solo"))
    service = appwrapper["spec"]["components"][1]["template"]
    name = service["metadata"]["name"]
    assert name[0].isalpha() and name != "0solo"
    wrapped = appwrapper["spec"]["components"][0]["template"]
    assert wrapped["spec"]["subdomain"] == name


def test_the_pod_service_uses_the_policy_port():
    from tests.builders import policy

    appwrapper = render(pod("solo"), policy().master_port(29500))
    service = appwrapper["spec"]["components"][1]["template"]
    assert [(p["port"], p["targetPort"]) for p in service["spec"]["ports"]] == [(29500, 29500)]
