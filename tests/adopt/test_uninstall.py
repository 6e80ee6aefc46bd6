"""``autowrap uninstall`` on the testbed cluster as the release installs into it: the namespace
goes only where the install created it, what is kept is said (in a dry run too), and
``--keep-queued`` writes each job that never ran for its user to submit again."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import yaml

from testbed import installation
from testbed.cluster.resources import CONFIGMAPS, NAMESPACES, SERVICES, VCJOBS
from testbed.pki import ServingPki
from tests.adopt.cluster import ALICE, AUTOWRAP, FLAVORS, NAMESPACE, Cluster, running_cluster, vcjob
from tests.deploy.test_manifests import render
from tests.support.cli import run as _run
from webhook.model import names
from webhook.shell.uninstall import CREATED_BY_INSTALL

INSTALL = names.SERVICE_NAMESPACE


@contextlib.asynccontextmanager
async def _installed(
    pki: ServingPki, tmp_path: Path, *, created_by_install: bool
) -> AsyncIterator[tuple[Cluster, Path]]:
    """The release installed; its namespace created by it (the annotation its Namespace
    carries), or one that existed before, with labels and an object of its owner's."""
    async with running_cluster(pki, tmp_path, auto_admit=False,
                               owner_references_component=False) as cluster:  # fmt: skip
        rendered = render("base")
        installation.install(cluster.api, rendered, ca_bundle=pki.ca_bundle,
                             serving_port=cluster.running.port, policy_dir=tmp_path / "policies",
                             flavors={n: {"nodeLabels": f["nodeLabels"]}
                                      for n, f in FLAVORS.items()})  # fmt: skip
        installation.grant_rbac(cluster.api, rendered, AUTOWRAP.username)
        namespace = cluster.api.store.get(NAMESPACES, None, INSTALL)
        assert namespace is not None
        if created_by_install:
            namespace["metadata"].setdefault("annotations", {})[CREATED_BY_INSTALL] = "true"
        else:
            namespace["metadata"].setdefault("labels", {})["team"] = "platform"
            cluster.api.store.create(CONFIGMAPS, {"metadata": {"name": "theirs",
                                                               "namespace": INSTALL}})  # fmt: skip
        cluster.api.store.update(NAMESPACES, namespace)
        await cluster.api.create(VCJOBS, vcjob("queued", workers=1), user=ALICE)
        await cluster.settle()
        assert cluster.appwrapper("queued") is not None
        await cluster.stop_controller()
        yield cluster, cluster.api.write_kubeconfig(tmp_path / "admin-kubeconfig")


async def _uninstall(kubeconfig: Path, *extra: str) -> tuple[int, list[str]]:
    code, out, err = await asyncio.to_thread(
        _run, ["uninstall", "--kubeconfig", str(kubeconfig), *extra]
    )
    assert err == ""
    return code, out.splitlines()


def _alive(cluster: Cluster, name: str) -> bool:
    found = cluster.api.store.get(NAMESPACES, None, name)
    return found is not None and not found["metadata"].get("deletionTimestamp")


async def test_the_namespace_the_install_created_is_deleted(webhook_pki, tmp_path):
    async with _installed(webhook_pki, tmp_path, created_by_install=True) as (cluster, config):
        code, lines = await _uninstall(config)
        assert code == 0
        assert f"delete namespace {INSTALL}" in lines
        assert not _alive(cluster, INSTALL)
        assert any(
            line.startswith("kept: ClusterRole autowrap-appwrapper-volcano-jobs: the AppWrapper")
            for line in lines
        ), lines


async def test_a_namespace_the_install_did_not_create_is_kept_with_what_is_not_autowrap_s(
    webhook_pki, tmp_path
):
    async with _installed(webhook_pki, tmp_path, created_by_install=False) as (cluster, config):
        code, lines = await _uninstall(config)
        assert code == 0
        assert f"delete namespace {INSTALL}" not in lines
        assert _alive(cluster, INSTALL)
        kept = cluster.api.store.get(NAMESPACES, None, INSTALL)
        assert kept is not None and kept["metadata"]["labels"]["team"] == "platform"
        assert cluster.api.store.get(CONFIGMAPS, INSTALL, "theirs") is not None
        # autowrap's own objects there go (those the release labels part-of autowrap).
        assert cluster.api.store.get(SERVICES, INSTALL, names.SERVICE_NAME) is None
        assert f"delete Service {INSTALL}/{names.SERVICE_NAME}" in lines
        assert f"delete RoleBinding {INSTALL}/autowrap-policy-reader" in lines
        assert (
            f"kept: namespace {INSTALL}: the install did not create it (it has no annotation "
            f"{CREATED_BY_INSTALL}), so it stays, with its labels and everything in it that is not "
            "autowrap's"
        ) in lines


@pytest.mark.parametrize("created_by_install", [True, False], ids=["created", "existing"])
async def test_the_dry_run_lists_what_it_keeps_and_changes_nothing(
    webhook_pki, tmp_path, created_by_install
):
    async with _installed(webhook_pki, tmp_path, created_by_install=created_by_install) as (
        cluster,
        config,
    ):
        code, lines = await _uninstall(config, "--dry-run", "--keep-queued", str(tmp_path / "q"))
        assert code == 0 and lines
        assert all(line.startswith(("would ", "left: ")) for line in lines), lines
        kept = [line for line in lines if line.startswith("would keep: ")]
        assert any("ClusterRole autowrap-appwrapper-volcano-jobs" in line for line in kept)
        assert any(f"Job {NAMESPACE}/queued as its user submitted it" in line for line in kept)
        assert any(f"namespace {INSTALL}:" in line for line in kept) is not created_by_install
        assert _alive(cluster, INSTALL) and cluster.job("queued") is not None
        assert not (tmp_path / "q").exists()


async def test_keep_queued_writes_each_job_that_never_ran_for_its_user(webhook_pki, tmp_path):
    async with _installed(webhook_pki, tmp_path, created_by_install=True) as (cluster, config):
        code, lines = await _uninstall(config, "--keep-queued", str(tmp_path / "queued"))
        assert code == 0
        assert cluster.job("queued") is None and cluster.appwrapper("queued") is None
        saved = tmp_path / "queued" / NAMESPACE / "job-queued.yaml"
        assert any(str(saved) in line and line.startswith("kept: ") for line in lines), lines
        job = yaml.safe_load(saved.read_text())
        assert job["kind"] == "Job" and job["metadata"]["name"] == "queued"
        assert "status" not in job and "uid" not in job["metadata"]
        assert names.ADOPTION_FINALIZER not in (job["metadata"].get("finalizers") or [])
        assert names.ADOPTION_LABEL not in (job["metadata"].get("labels") or {})
        for task in job["spec"]["tasks"]:
            gates = task["template"]["spec"].get("schedulingGates") or []
            assert names.ADMISSION_GATE not in [g["name"] for g in gates]
