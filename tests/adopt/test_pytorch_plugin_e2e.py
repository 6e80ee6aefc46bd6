"""A Job that keeps Volcano's pytorch plugin in an Audit namespace: it is wrapped and runs, and
every pod runs with exactly the values ``autowrap render --pods`` showed for it, the plugin's
appended MASTER_PORT, WORLD_SIZE and RANK included (the simulated Volcano runs the plugin, the
simulated kubelet resolves the env)."""

from __future__ import annotations

from pathlib import Path

from testbed.cluster.resources import VCJOBS
from testbed.pki import ServingPki
from testbed.sim import resolved_env
from tests.adopt.cluster import ALICE, running_cluster, vcjob
from webhook.cli import podview


async def test_the_pods_run_with_what_render_pods_shows(
    webhook_pki: ServingPki, tmp_path: Path
) -> None:
    job = vcjob(workers=2)
    job["spec"]["plugins"] = {"pytorch": ["--master=master", "--worker=worker", "--port=5000"]}
    worker = job["spec"]["tasks"][1]["template"]["spec"]["containers"][0]
    worker["env"] = [{"name": "DIST_URL", "value": "tcp://$(MASTER_ADDR):$(MASTER_PORT)"}]
    research = {"autowrap.io/tier": "research"}
    async with running_cluster(webhook_pki, tmp_path, namespace_labels=research) as cluster:
        await cluster.api.create(VCJOBS, job, user=ALICE)
        await cluster.settle()

        stored = cluster.job()
        assert stored is not None
        rows = {r.pod: r for r in podview.pods(stored)}
        pods = cluster.pods()
        assert sorted(rows) == sorted(p["metadata"]["name"] for p in pods)
        for pod in pods:
            assert pod["status"]["phase"] == "Running"
            env = resolved_env(pod, store=cluster.api.store)
            row = rows[pod["metadata"]["name"]]
            assert (env["MASTER_ADDR"], env["MASTER_PORT"], env["WORLD_SIZE"]) == (
                row.master_addr, row.master_port, row.world_size
            )  # fmt: skip
            assert (env["NNODES"], env["NPROC_PER_NODE"], env["NODE_RANK"]) == (
                row.nnodes, row.nproc, row.node_rank
            )  # fmt: skip
            assert dict(row.expanded) == {k: env[k] for k in dict(row.expanded)}
        # What that is: the plugin's port and pod count, autowrap's PET_* beside them, and an
        # entry of the user's expanded before the plugin's entries.
        worker_env = resolved_env(cluster.pods()[1], store=cluster.api.store)
        assert (worker_env["MASTER_PORT"], worker_env["WORLD_SIZE"]) == ("5000", "3")
        assert (worker_env["PET_MASTER_PORT"], worker_env["RANK"]) == ("23456", "1")
        assert worker_env["DIST_URL"] == "tcp://train-master-0.train:23456"
