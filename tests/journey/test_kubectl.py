"""The documented journey, typed with the real kubectl against the testbed cluster.

README "Your first job", docs/how-it-works.md and docs/user-guide.md say what a user types and
sees; each test types it with the ``kubectl`` binary (over HTTPS, as the namespace user) against
the simulated cluster with autowrap serving, and checks what kubectl printed and what the
cluster stored. What users type is what these tests run.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import re
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from testbed.cluster.common import write_kubeconfig
from testbed.cluster.resources import APPWRAPPERS, PODS, VCJOBS, WORKLOADS
from testbed.pki import ServingPki
from testbed.redirect import REPO
from tests.adopt.cluster import ALICE, NAMESPACE, QUEUE, Cluster, running_cluster, vcjob
from tests.journey.kubectl import BINARIES, KUBECTL, USER_TOKEN, Kubectl, Typed, needs_kubectl
from webhook.model import names

pytestmark = needs_kubectl

Obj = dict[str, Any]


@dataclass
class Journey:
    cluster: Cluster
    kubectl: Kubectl
    folder: Path

    def manifest(self, obj: Obj, name: str = "job.yaml") -> str:
        path = self.folder / name
        path.write_text(yaml.safe_dump(obj, sort_keys=False))
        return str(path)

    async def eventually(self, check: Callable[[], Any], what: str, timeout: float = 20.0) -> Any:
        """Until ``check()`` is truthy, settling the cluster between looks."""
        try:
            async with asyncio.timeout(timeout):
                while True:
                    await self.cluster.settle()
                    found = check()
                    if found:
                        return found
                    await asyncio.sleep(0.05)
        except TimeoutError:
            raise AssertionError(f"not within {timeout:.0f} s: {what}") from None

    def stored(self, res: Any, name: str = "train") -> Obj:
        found = self.cluster.api.store.get(res, NAMESPACE, name)
        assert found is not None, f"{res.plural} {name} is not stored"
        return found

    def running_pods(self, job: str = "train") -> list[str]:
        return [
            p["metadata"]["uid"]
            for p in self.cluster.pods(job)
            if (p.get("status") or {}).get("phase") == "Running"
        ]


@contextlib.asynccontextmanager
async def journey(
    pki: ServingPki, tmp_path: Path, binary: str | None = KUBECTL, **options: Any
) -> AsyncIterator[Journey]:
    async with running_cluster(pki, tmp_path, **options) as cluster:
        cluster.api.users[USER_TOKEN] = ALICE
        kubeconfig = write_kubeconfig(tmp_path / "user-kubeconfig", cluster.api.url, USER_TOKEN,
                                      NAMESPACE, tls=cluster.api.tls)  # fmt: skip
        yield Journey(cluster, Kubectl(kubeconfig, tmp_path, binary), tmp_path)


async def render(manifest: str, policies: Path) -> str:
    """``autowrap render job.yaml -n ml --policy DIR``, the command itself: what the user pipes
    into ``kubectl apply -f -``."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "webhook", "render", manifest, "-n", NAMESPACE, "--policy",
        str(policies), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await process.communicate()
    assert process.returncode == 0, err.decode()
    return out.decode()


def jsonpath(typed: Typed) -> str:
    assert typed.code == 0, typed.both
    return typed.out.strip()


# --- adopt mode ---------------------------------------------------------------------------------


@pytest.mark.parametrize("binary", BINARIES, ids=lambda b: Path(str(b)).name)
async def test_apply_get_describe_wait_reapply_and_delete_as_documented(
    webhook_pki: ServingPki, tmp_path: Path, binary: str
) -> None:
    async with journey(webhook_pki, tmp_path, binary) as j:
        job = j.manifest(vcjob())
        applied = await j.kubectl("apply", "-f", job)
        assert applied.code == 0 and "job.batch.volcano.sh/train created" in applied.out, applied
        await j.eventually(lambda: len(j.running_pods()) == 4, "the job's four pods run")

        waited = await j.kubectl("wait", "--for=jsonpath={.status.state.phase}=Running",
                                 "vcjob/train", "--timeout=20s")  # fmt: skip
        assert waited.code == 0, waited.both
        waited = await j.kubectl("wait", "--for=jsonpath={.status.phase}=Running",
                                 "appwrapper/train", "--timeout=20s")  # fmt: skip
        assert waited.code == 0, waited.both
        described = await j.kubectl("describe", "vcjob", "train")
        assert described.code == 0, described.both
        assert "Admitted by Kueue; AppWrapper train is Running" in described.out
        assert "Adopted" in described.out and "autowrap-controller" in described.out
        uids, version = j.running_pods(), j.stored(VCJOBS)["metadata"]["resourceVersion"]

        # Re-applied unchanged, client-side: kubectl says configured and nothing is written.
        again = await j.kubectl("apply", "-f", job)
        assert again.code == 0 and "job.batch.volcano.sh/train" in again.out, again.both
        diff = await j.kubectl("diff", "-f", job)
        assert diff.code == 0 and not diff.out, diff.both
        await j.cluster.settle()
        assert j.stored(VCJOBS)["metadata"]["resourceVersion"] == version
        assert j.running_pods() == uids

        deleted = await j.kubectl("delete", "-f", job, "--timeout=20s")
        assert deleted.code == 0 and 'job.batch.volcano.sh "train" deleted' in deleted.out
        await j.eventually(
            lambda: not j.cluster.appwrappers() and not j.cluster.pods()
            and j.cluster.job() is None, "the Job, its AppWrapper and its pods are gone",
        )  # fmt: skip


async def test_server_side_apply_twice_writes_nothing(
    webhook_pki: ServingPki, tmp_path: Path
) -> None:
    async with journey(webhook_pki, tmp_path) as j:
        job = j.manifest(vcjob())
        first = await j.kubectl("apply", "--server-side", "-f", job)
        assert first.code == 0 and "serverside-applied" in first.out, first.both
        await j.eventually(lambda: len(j.running_pods()) == 4, "the job's four pods run")
        uids, stored = j.running_pods(), j.stored(VCJOBS)
        second = await j.kubectl("apply", "--server-side", "-f", job)
        assert second.code == 0 and "serverside-applied" in second.out, second.both
        await j.cluster.settle()
        after = j.stored(VCJOBS)
        assert after["metadata"]["generation"] == stored["metadata"]["generation"]
        assert after["spec"] == stored["spec"]
        assert j.running_pods() == uids


async def test_a_server_dry_run_stores_nothing_and_generate_name_is_adopted(
    webhook_pki: ServingPki, tmp_path: Path
) -> None:
    async with journey(webhook_pki, tmp_path, auto_admit=False) as j:
        job = j.manifest(vcjob())
        dry = await j.kubectl("apply", "--dry-run=server", "-f", job)
        assert dry.code == 0 and "created (server dry run)" in dry.out, dry.both
        await j.cluster.settle()
        assert j.cluster.job() is None and not j.cluster.appwrappers()

        sweep = vcjob()
        del sweep["metadata"]["name"]
        sweep["metadata"]["generateName"] = "sweep-"
        created = await j.kubectl("create", "-f", j.manifest(sweep, "sweep.yaml"))
        assert created.code == 0, created.both
        name = created.out.split("/", 1)[1].split()[0]
        assert name.startswith("sweep-")
        aw = await j.eventually(lambda: j.cluster.appwrapper(name), "its AppWrapper exists")
        assert aw["metadata"]["labels"][names.QUEUE_LABEL] == QUEUE
        gates = await j.kubectl("get", "pods", "-o",
                                "jsonpath={range .items[*]}{.spec.schedulingGates[0].name} {end}")  # fmt: skip
        assert jsonpath(gates).split() == [names.ADMISSION_GATE] * 4

        # Deleting the queued Job (the adoption finalizer still on it) does not hang.
        assert names.ADOPTION_FINALIZER in j.stored(VCJOBS, name)["metadata"]["finalizers"]
        deleted = await j.kubectl("delete", "vcjob", name, "--timeout=20s")
        assert deleted.code == 0, deleted.both
        await j.eventually(lambda: not j.cluster.appwrappers() and j.cluster.job(name) is None,
                           "the queued Job and its AppWrapper are gone")  # fmt: skip


async def test_kubectl_run_of_a_labelled_pod_is_adopted_and_deleted_with_its_appwrapper(
    webhook_pki: ServingPki, tmp_path: Path
) -> None:
    async with journey(webhook_pki, tmp_path) as j:
        overrides = {"apiVersion": "v1", "spec": {"containers": [{
            "name": "notebook", "image": "torch:2.4",
            "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}  # fmt: skip
        run = await j.kubectl(
            "run", "notebook", "--image=torch:2.4", "--restart=Never",
            f"--labels={names.WRAP_LABEL}=true,{names.QUEUE_LABEL}={QUEUE}",
            f"--overrides={json.dumps(overrides)}",
        )  # fmt: skip
        assert run.code == 0 and "pod/notebook created" in run.out, run.both
        ready = await j.kubectl("wait", "--for=condition=Ready", "pod/notebook", "--timeout=20s")
        assert ready.code == 0, ready.both
        assert j.cluster.appwrapper("notebook") is not None
        deleted = await j.kubectl("delete", "pod", "notebook", "--timeout=20s")
        assert deleted.code == 0, deleted.both
        await j.eventually(lambda: j.cluster.appwrapper("notebook") is None,
                           "the AppWrapper went with the pod")  # fmt: skip


# --- F4: describe says why Kueue has not admitted it -----------------------------------------------


async def test_describe_says_why_kueue_has_not_admitted_it_and_follows_the_reason(
    webhook_pki: ServingPki, tmp_path: Path
) -> None:
    # 4 pods × 8 GPUs; the ClusterQueue's flavor a100 has 16.
    async with journey(webhook_pki, tmp_path, kueue={"quota": {"nvidia.com/gpu": 16}}) as j:
        assert (await j.kubectl("apply", "-f", j.manifest(vcjob()))).code == 0
        reason = ("couldn't assign flavors to pod set train-1: insufficient unused quota for "
                  "nvidia.com/gpu in flavor a100, 16 more needed")  # fmt: skip

        def described_reason() -> bool:
            return reason in (j.stored(VCJOBS)["metadata"].get("annotations") or {}).get(
                names.STATUS_ANNOTATION, ""
            )

        await j.eventually(described_reason, "the status names Kueue's reason")
        described = await j.kubectl("describe", "vcjob", "train")
        assert reason in described.out, described.out
        events = await j.kubectl("get", "events", "--field-selector",
                                 "involvedObject.name=train,involvedObject.kind=Job",
                                 "-o", "jsonpath={range .items[*]}{.reason}|{.message}\n{end}")  # fmt: skip
        queued = [line for line in jsonpath(events).splitlines() if line.startswith("Queued|")]
        assert len(queued) == 1 and reason in queued[0], events.out

        # Kueue's reason changes (less quota left): the status and one more Event follow it.
        j.cluster.sims.kueue.quota = {"nvidia.com/gpu": 8}
        j.cluster.sims.kueue.queue_key((NAMESPACE, "train"))
        reason = reason.replace("16 more needed", "24 more needed")
        await j.eventually(described_reason, "the status follows Kueue's new reason")
        events = await j.kubectl("get", "events", "--field-selector", "involvedObject.name=train",
                                 "-o", "jsonpath={range .items[*]}{.reason}|{.message}\n{end}")  # fmt: skip
        queued = [line for line in jsonpath(events).splitlines() if line.startswith("Queued|")]
        assert len(queued) == 2 and any(reason in line for line in queued), events.out

        # Admitted: the reason goes, the job runs.
        j.cluster.sims.kueue.quota = None
        j.cluster.sims.kueue.queue_key((NAMESPACE, "train"))
        await j.eventually(lambda: len(j.running_pods()) == 4, "the job's four pods run")
        described = await j.kubectl("describe", "vcjob", "train")
        assert "insufficient unused quota" not in (
            j.stored(VCJOBS)["metadata"].get("annotations") or {}
        ).get(names.STATUS_ANNOTATION, "")
        assert "Admitted by Kueue" in described.out
        # No "Queued" without a reason between Kueue's admission and the AppWrapper's start.
        events = await j.kubectl("get", "events", "--field-selector", "involvedObject.name=train",
                                 "-o", "jsonpath={range .items[*]}{.reason}|{.message}\n{end}")  # fmt: skip
        queued = [line for line in jsonpath(events).splitlines() if line.startswith("Queued|")]
        assert len(queued) == 2 and all("Kueue: " in line for line in queued), events.out


# --- redirect mode -----------------------------------------------------------------------------------


async def test_rerunning_the_redirect_pipeline_changes_nothing_that_runs(
    webhook_pki: ServingPki, tmp_path: Path
) -> None:
    """F1: ``autowrap render job.yaml | kubectl apply -f -`` run twice, client- and server-side."""
    async with journey(webhook_pki, tmp_path, mode="Redirect") as j:
        rendered = await render(j.manifest(vcjob()), tmp_path / "policies")
        first = await j.kubectl("apply", "-f", "-", stdin=rendered)
        assert first.code == 0, first.both
        assert "appwrapper.workload.codeflare.dev/train created" in first.out
        await j.eventually(lambda: len(j.running_pods()) == 4, "the job's four pods run")
        job_uid, uids = j.stored(VCJOBS)["metadata"]["uid"], j.running_pods()
        spec = j.stored(APPWRAPPERS)["spec"]
        assert "suspend" not in spec  # admitted: false, left out (omitempty)

        runs = (("apply", "-f", "-"), ("apply", "--server-side", "-f", "-"),
                ("apply", "--server-side", "--force-conflicts", "-f", "-"))  # fmt: skip
        for args in runs:
            again = await j.kubectl(*args, stdin=rendered)
            if "--force-conflicts" in args or "--server-side" not in args:
                assert again.code == 0, again.both
            else:  # Kueue's field manager owns the components it wrote into
                assert again.code == 1 and "conflict" in again.err, again.both
            await j.cluster.settle()
            assert j.stored(APPWRAPPERS)["spec"] == spec, args
            assert j.stored(VCJOBS)["metadata"]["uid"] == job_uid, args
            assert j.running_pods() == uids, args

        # A manifest that says suspend: true (as render printed it before, or written by
        # hand), applied again: the stop is not Kueue's, so it is not applied, and kubectl
        # says why.
        saved = yaml.safe_load(rendered)
        saved["spec"] = {"suspend": True, **saved["spec"]}
        for args in (("apply", "-f", "-"), ("apply", "--server-side", "--force-conflicts",
                                            "-f", "-")):  # fmt: skip
            again = await j.kubectl(*args, stdin=yaml.safe_dump(saved))
            assert again.code == 0, again.both
            assert "spec.suspend: true was not applied" in again.err, again.both
            await j.cluster.settle()
            assert j.stored(APPWRAPPERS)["spec"] == spec, args
            assert j.running_pods() == uids, args

        # Kueue's own preemption still suspends it.
        await j.cluster.sims.kueue.preempt(NAMESPACE, "train")
        await j.eventually(lambda: j.cluster.job() is None, "preemption deleted the Job")
        assert j.stored(APPWRAPPERS)["spec"]["suspend"] is True


async def test_reapplying_the_job_manifest_after_admission_answers_as_before(
    webhook_pki: ServingPki, tmp_path: Path
) -> None:
    """F2: before admission the create is answered with the redirect; after it, kubectl finds
    the Job the AppWrapper created and patches it: the answer is the same redirect."""
    async with journey(webhook_pki, tmp_path, mode="Redirect", auto_admit=False) as j:
        job = j.manifest(vcjob())
        dry = await j.kubectl("apply", "--dry-run=server", "-f", job)
        assert dry.code == 1 and "(dry run: nothing was created)" in dry.err, dry.both
        assert not j.cluster.appwrappers()
        before = await j.kubectl("apply", "-f", job)
        assert before.code == 1, before.both
        said = f"Job {NAMESPACE}/train was wrapped into AppWrapper {NAMESPACE}/train"
        assert said in before.err and "Forbidden" in before.err, before.err

        await j.cluster.sims.kueue.admit(NAMESPACE, "train")
        await j.eventually(lambda: len(j.running_pods()) == 4, "the job's four pods run")
        job_before = j.stored(VCJOBS)
        for args in (("apply", "-f", job), ("apply", "--server-side", "--force-conflicts",
                                            "-f", job)):  # fmt: skip
            after = await j.kubectl(*args)
            assert after.code == 1, after.both
            assert said in after.err, after.err
            assert "may not change fields" not in after.err, after.err
            assert f"kubectl get appwrapper train -n {NAMESPACE}" in after.err, after.err
        await j.cluster.settle()
        assert j.stored(VCJOBS)["spec"] == job_before["spec"]
        # kubectl label still works: only the spec is the AppWrapper's.
        labelled = await j.kubectl("label", "vcjob", "train", "team=a")
        assert labelled.code == 0, labelled.both


async def test_workloads_are_what_kueue_wrote(webhook_pki: ServingPki, tmp_path: Path) -> None:
    """The simulated Kueue's pending condition has the shape real Kueue's scheduler writes."""
    async with journey(webhook_pki, tmp_path, kueue={"quota": {"nvidia.com/gpu": 0}}) as j:
        assert (await j.kubectl("apply", "-f", j.manifest(vcjob()))).code == 0
        await j.cluster.settle()
        (workload,) = j.cluster.api.store.list(WORKLOADS, NAMESPACE)
        (reserved,) = [c for c in workload["status"]["conditions"] if c["type"] == "QuotaReserved"]
        assert (reserved["status"], reserved["reason"]) == ("False", "Pending")
        assert reserved["message"].endswith("nvidia.com/gpu in flavor a100, 8 more needed")
        assert not [p for p in j.cluster.api.store.list(PODS, NAMESPACE)
                    if not p["spec"].get("schedulingGates")]  # fmt: skip


# --- the smoke test of docs/install.md, as written ------------------------------------------------


def _statements(script: str) -> list[str]:
    """The shell statements of a docs block, one per line, a heredoc with its body; comments
    and blank lines dropped (a person types them one by one)."""
    statements: list[str] = []
    lines = iter(script.splitlines())
    for line in lines:
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        heredoc = re.search(r"<<-?\s*'?(\w+)'?", line)
        if heredoc:
            end = heredoc.group(1)
            body = list(itertools.takewhile(lambda text, end=end: text != end, lines))
            line = "\n".join([line, *body, end])
        statements.append(line)
    return statements


async def test_the_smoke_test_of_the_install_guide_as_written(
    webhook_pki: ServingPki, tmp_path: Path
) -> None:
    text = (REPO / "docs" / "install.md").read_text()
    section = text[text.index("## Smoke test") :]
    section = section[: section.index("\n## ", 1)]
    # The steps typed by hand: the block that creates smoke-job.yaml.
    (block,) = [b for b in re.findall(r"```sh\n(.*?)```\n", section, re.S) if "smoke-job.yaml" in b]
    async with journey(webhook_pki, tmp_path) as j:
        admin = j.cluster.api.write_kubeconfig(tmp_path / "admin-kubeconfig")
        assert KUBECTL is not None
        env = {"PATH": f"{Path(KUBECTL).parent}:/usr/bin:/bin", "HOME": str(tmp_path),
               "KUBECONFIG": str(admin), "CLUSTER_QUEUE": "cq"}  # fmt: skip
        said: dict[str, str] = {}
        for statement in _statements(block):
            process = await asyncio.create_subprocess_exec(
                "bash", "-c", statement, cwd=tmp_path, env=env,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
            )  # fmt: skip
            out, _ = await asyncio.wait_for(process.communicate(), 60)
            assert process.returncode == 0, f"{statement}\n{out.decode()}"
            said[statement.splitlines()[0]] = out.decode()
            await j.cluster.settle()

        def output(prefix: str) -> str:
            return next(out for statement, out in said.items() if statement.startswith(prefix))

        dry = output("kubectl create --dry-run=server")
        assert f"- name: {names.ADMISSION_GATE}" in dry  # the gate
        assert f"{names.ADOPTION_LABEL}: pending" in dry and f"- {names.ADOPTION_FINALIZER}" in dry
        assert "job.batch.volcano.sh/smoke created" in output("kubectl create -f smoke-job.yaml")
        assert "adopted" in output("kubectl get vcjob smoke").splitlines()[1]
        events = output("kubectl describe vcjob smoke").split("Events:", 1)[1]
        # kubectl describe sorts Events by their timestamps, which are whole seconds: two of
        # the same second come in no set order, so only their presence is asserted.
        assert "Adopted" in events and "Running" in events, events
        assert "smoke" in output("kubectl get appwrapper smoke")
        assert len(output("kubectl get workloads").splitlines()) == 2
        pods = output("kubectl get pods").split()
        assert "smoke-master-0" in pods and "smoke-worker-0" in pods
        assert output("kubectl logs") == "node 1 of 2, master smoke-master-0.smoke:23456\n"
        assert "untouched" in output("kubectl get vcjob untouched")
        assert 'namespace "autowrap-smoke" deleted' in output("kubectl delete namespace")
