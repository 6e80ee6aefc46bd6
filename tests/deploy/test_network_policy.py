"""Who can reach autowrap (the NetworkPolicy and its knobs) and what its ServiceAccount may do
without the AppWrapper operator's component-check grants (overlays/without-component-create)."""

from __future__ import annotations

import importlib
import os
import subprocess
from pathlib import Path

import pytest

from tests.deploy.test_manifests import (
    DEPLOY,
    NOT_GRANTED,
    VARIANTS,
    Obj,
    container,
    container_port,
    rbac_grants,
    render,
    the,
)
from webhook.model import names

POLICY = "autowrap-webhook"
SCRAPER_LABEL = "autowrap.io/metrics-scraper"


def kustomize(directory: Path) -> tuple[Obj, ...]:
    import yaml

    done = subprocess.run(["kubectl", "kustomize", str(directory)], capture_output=True,
                          text=True, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return tuple(doc for doc in yaml.safe_load_all(done.stdout) if doc)


def ingress_by_port(objs: tuple[Obj, ...]) -> dict[int, list[Obj]]:
    policy = the(objs, "NetworkPolicy", POLICY)
    return {port["port"]: rule["from"] for rule in policy["spec"]["ingress"]
            for port in rule["ports"]}  # fmt: skip


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_rendering_isolates_autowrap_pods_for_ingress(variant: str) -> None:
    objs = render(variant)
    policy = the(objs, "NetworkPolicy", POLICY)
    assert policy["metadata"]["namespace"] == names.SERVICE_NAMESPACE
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    pod_labels = the(objs, "Deployment", names.SERVICE_NAME)["spec"]["template"]["metadata"]
    selector = policy["spec"]["podSelector"]["matchLabels"]
    assert selector.items() <= pod_labels["labels"].items()


def test_the_webhook_port_admits_the_control_plane_cidr_and_metrics_a_labelled_namespace() -> None:
    objs = render("base")
    ports = ingress_by_port(objs)
    https, metrics = container_port(objs, "https"), container_port(objs, "metrics")
    assert set(ports) == {https, metrics}, "no other port is reachable"
    assert ports[https] == [{"ipBlock": {"cidr": "0.0.0.0/0"}}]  # the default: see the knob
    assert ports[metrics] == [{"namespaceSelector": {"matchLabels": {SCRAPER_LABEL: "true"}}}]


def test_probes_use_the_webhook_port_which_the_node_may_always_reach() -> None:
    # An isolated pod still accepts its own node's connections (Kubernetes docs, "Network
    # Policies"): kubelet's probes need no rule; the server answers them without a client
    # certificate (tests/server/test_caller_auth.py).
    objs = render("base")
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert container(objs)[probe]["httpGet"]["port"] == "https"


def test_the_control_plane_cidr_is_set_by_the_patch_networkpolicy_yaml_shows(
    tmp_path: Path,
) -> None:
    documented = (DEPLOY / "base" / "networkpolicy.yaml").read_text()
    start = documented.index("#   patches:")
    patch = "\n".join(
        line.removeprefix("# ").removeprefix("#")
        for line in documented[start:].splitlines()
        if line.startswith("#") and line.strip("# ")
    )
    patch = patch[: patch.index("KNOB 2")].rstrip()
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        f"resources:\n- {os.path.relpath(DEPLOY / 'base', overlay)}\n{patch.strip()}\n"
    )
    ports = ingress_by_port(kustomize(overlay))
    assert ports[9443] == [{"ipBlock": {"cidr": "10.0.0.0/24"}}]
    assert ports[8080] == [{"namespaceSelector": {"matchLabels": {SCRAPER_LABEL: "true"}}}]


def test_without_component_create_drops_only_the_component_check_grants() -> None:
    kube = importlib.import_module("webhook.shell.kube")
    grants = rbac_grants(render("without-component-create"), names.SERVICE_NAMESPACE,
                         names.SERVICE_NAME)  # fmt: skip
    expected = {
        (g, r, v) for g, r, v in kube.RBAC if (g, r, v) not in kube.COMPONENT_CREATE
    } - NOT_GRANTED
    assert {(g, r, v) for g, r, v, _, _ in grants} == expected
    # Everything but the ClusterRole's rules is the base.
    base = [o for o in render("base") if o["kind"] != "ClusterRole"]
    other = [o for o in render("without-component-create") if o["kind"] != "ClusterRole"]
    assert sorted(map(repr, base)) == sorted(map(repr, other))
