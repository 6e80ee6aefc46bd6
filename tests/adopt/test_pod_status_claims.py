"""The claim of a running pod holds through ``pods/status`` as through the pod itself.

kube-apiserver's podStatusStrategy.PrepareForUpdate (kubernetes
pkg/registry/core/pod/strategy.go:216-233 at 008b3652) keeps a pod's spec and ownerReferences
on a ``pods/status`` write, but the labels and annotations the request sends: whoever may
update ``pods/status`` could move a running pod's ``workload.codeflare.dev/appwrapper`` label
to another workload's AppWrapper, and autowrap would count the pod against that admission.
Namespace editors cannot (the bootstrap ``edit`` and ``admin`` roles aggregate
``system:aggregate-to-edit``, whose writes on pods name ``pods``, ``pods/attach``,
``pods/proxy``, ``pods/exec`` and ``pods/portforward``, and only ``view`` reads
``pods/status``: kubernetes plugin/pkg/auth/authorizer/rbac/bootstrappolicy/policy.go), but
kubelets, controllers and anyone an administrator grants it can, so ``autowrap-wrapped-pods``
matches ``pods/status`` too.

The cluster is the simulated one of tests/adopt (autowrap's webhooks, ValidatingAdmissionPolicies
and controller real; Kueue, the AppWrapper controller, Volcano and a kubelet simulated). mallory
talks to the API over HTTP under RBAC, with a Role that grants ``get`` on pods and ``update``
on ``pods/status`` in the namespace, and nothing else.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from kubernetes.aio import client
from kubernetes.aio.config.kube_config import new_client_from_config

from testbed.apiserver import UserInfo
from testbed.cluster.rbac import RBAC_GROUP, Rbac
from testbed.cluster.resources import APPWRAPPERS, PODS, VCJOBS
from testbed.pki import ServingPki
from tests.adopt.cluster import ALICE, NAMESPACE, Cluster, running_cluster, vcjob
from webhook.model import names

Obj = dict[str, Any]
MALLORY = UserInfo(username="mallory", groups=("system:authenticated",))
MALLORY_TOKEN = "mallory-token"
WORKER = "train-worker-0"
POD_PATH = f"/api/v1/namespaces/{NAMESPACE}/pods/{WORKER}"


def _status_writer_role() -> list[Obj]:
    """A Role granting what an operator might hand a status-reporting tool: read pods, update
    their status; and its RoleBinding to mallory."""
    role = {
        "apiVersion": f"{RBAC_GROUP}/v1", "kind": "Role",
        "metadata": {"name": "pod-status-writer", "namespace": NAMESPACE},
        "rules": [
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
            {"apiGroups": [""], "resources": ["pods/status"], "verbs": ["update"]},
        ],
    }  # fmt: skip
    binding = {
        "apiVersion": f"{RBAC_GROUP}/v1", "kind": "RoleBinding",
        "metadata": {"name": "pod-status-writer-mallory", "namespace": NAMESPACE},
        "roleRef": {"apiGroup": RBAC_GROUP, "kind": "Role", "name": "pod-status-writer"},
        "subjects": [{"apiGroup": RBAC_GROUP, "kind": "User", "name": MALLORY.username}],
    }  # fmt: skip
    return [role, binding]


class _Http:
    """mallory's requests, as JSON over HTTP with the official client's transport and her
    token (plain dicts: the API's objects go back as she read them)."""

    def __init__(self, api_client: client.ApiClient) -> None:
        self._client = api_client

    async def call(self, method: str, path: str, body: Obj | None = None) -> tuple[int, Obj]:
        """(HTTP status, decoded answer) of one request, a refusal included; a PATCH is a
        JSON merge patch."""
        content = "application/merge-patch+json" if method == "PATCH" else "application/json"
        serialized = await self._client.param_serialize(
            method, path, header_params={"Content-Type": content, "Accept": "application/json"},
            body=body, auth_settings=["BearerToken"],
        )  # fmt: skip
        response = await self._client.call_api(*serialized)
        answer = await response.read()
        return response.status, json.loads(answer)


@contextlib.asynccontextmanager
async def _as_mallory(cluster: Cluster, tmp_path: Path) -> AsyncIterator[_Http]:
    """mallory's connection, her requests authorized by RBAC with her Role added to the
    cluster's roles (autowrap's own grants kept)."""
    api = cluster.api
    assert api.rbac is not None
    api.enforce_rbac(Rbac([*api.rbac.objects, *_status_writer_role()], bootstrap=False),
                     MALLORY.username)  # fmt: skip
    api.users[MALLORY_TOKEN] = MALLORY
    kubeconfig = api.write_kubeconfig(tmp_path / "mallory.kubeconfig", NAMESPACE,
                                      token=MALLORY_TOKEN)  # fmt: skip
    api_client = await new_client_from_config(config_file=str(kubeconfig), persist_config=False)
    try:
        yield _Http(api_client)
    finally:
        await api_client.close()


def _running(pod: Obj | None) -> bool:
    return (
        pod is not None
        and not (pod.get("spec") or {}).get("schedulingGates")
        and (pod.get("status") or {}).get("phase") == "Running"
    )


async def _two_jobs(cluster: Cluster) -> None:
    """alice's jobs ``train`` (its pods running) and ``serve``, each adopted into its own
    AppWrapper."""
    for name in ("train", "serve"):
        await cluster.api.create(VCJOBS, vcjob(name, workers=1, gpus=1), user=ALICE)
    await cluster.settle()
    assert cluster.appwrapper("train") is not None and cluster.appwrapper("serve") is not None
    for pod in cluster.pods("train"):
        # Reached through the kubelet's own pods/status writes, which the policy matches.
        assert _running(pod), pod["metadata"]["name"]
        assert pod["metadata"]["labels"][names.APPWRAPPER_LABEL] == "train"


async def test_a_status_writer_cannot_move_a_running_pods_claim_to_another_workload(
    webhook_pki: ServingPki, tmp_path: Path
) -> None:
    async with running_cluster(webhook_pki, tmp_path) as cluster:
        await _two_jobs(cluster)
        async with _as_mallory(cluster, tmp_path) as mallory:
            # Her Role reaches the pod through its status only.
            relabel = {"metadata": {"labels": {names.APPWRAPPER_LABEL: "serve"}}}
            code, answer = await mallory.call("PATCH", POD_PATH, relabel)
            assert code == 403 and 'cannot patch resource "pods"' in answer["message"], answer

            # Through pods/status: to another workload's AppWrapper, or off any.
            for claim in ("serve", None):
                code, pod = await mallory.call("GET", POD_PATH)
                assert code == 200, pod
                labels = pod["metadata"]["labels"]
                if claim is None:
                    del labels[names.APPWRAPPER_LABEL]
                else:
                    labels[names.APPWRAPPER_LABEL] = claim
                code, answer = await mallory.call("PUT", f"{POD_PATH}/status", pod)
                message = str(answer.get("message"))
                assert code == 403 and answer["reason"] == "Forbidden", answer
                assert "ValidatingAdmissionPolicy 'autowrap-wrapped-pods'" in message
                assert "metadata: the label workload.codeflare.dev/appwrapper" in message
                stored = cluster.get(PODS, WORKER)
                assert stored is not None
                assert stored["metadata"]["labels"][names.APPWRAPPER_LABEL] == "train", claim

            # A status write that leaves the claim alone is hers to make.
            code, pod = await mallory.call("GET", POD_PATH)
            pod["metadata"]["labels"]["example.com/checked"] = "yes"
            code, written = await mallory.call("PUT", f"{POD_PATH}/status", pod)
            assert code == 200, written
            assert written["metadata"]["labels"]["example.com/checked"] == "yes"
            assert written["metadata"]["labels"][names.APPWRAPPER_LABEL] == "train"

        # The kubelet's own status writes to the same pods go on: the job runs to the end.
        done = await cluster.sims.kubelet.finish(NAMESPACE, WORKER)
        assert done["status"]["phase"] == "Succeeded"
        assert done["metadata"]["labels"][names.APPWRAPPER_LABEL] == "train"
        assert _running(cluster.get(PODS, "train-master-0"))
        assert cluster.get(APPWRAPPERS, "serve") is not None
