"""What the fake API serves for kubectl besides objects: OpenAPI v3 discovery, protobuf bodies
of kubectl's generators, pod logs."""

from __future__ import annotations

import aiohttp

from testbed.cluster import protobuf
from testbed.cluster.cluster import FakeCluster
from testbed.cluster.resources import PODS
from testbed.sim.kubelet import container_log


def _field(number: int, value: bytes) -> bytes:
    assert len(value) < 128
    return bytes([number << 3 | 2, len(value)]) + value


def _namespace(name: str, label: tuple[str, str]) -> bytes:
    meta = _field(1, name.encode()) + _field(
        11, _field(1, label[0].encode()) + _field(2, label[1].encode())
    )
    unknown = _field(1, _field(1, b"v1") + _field(2, b"Namespace")) + _field(2, _field(1, meta))
    return protobuf.PREFIX + unknown


def test_a_protobuf_namespace_decodes_and_other_kinds_are_refused() -> None:
    assert protobuf.decode(_namespace("smoke", ("team", "a"))) == {
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": "smoke", "labels": {"team": "a"}},
    }  # fmt: skip
    pod = protobuf.PREFIX + _field(1, _field(1, b"v1") + _field(2, b"Pod"))
    for body in (pod, b"not protobuf"):
        try:
            protobuf.decode(body)
        except protobuf.Unsupported:
            continue
        raise AssertionError(body)


async def test_openapi_v3_names_each_group_version_and_its_patch_parameters() -> None:
    async with FakeCluster() as fake_kube:  # its token is a cluster admin's
        await _openapi_v3(fake_kube)


async def _openapi_v3(fake_kube: FakeCluster) -> None:
    headers = {"Authorization": f"Bearer {fake_kube.token}"}
    async with aiohttp.ClientSession(headers=headers) as session:
        async with session.get(f"{fake_kube.url}/openapi/v3") as answer:
            paths = (await answer.json())["paths"]
        url = paths["apis/batch.volcano.sh/v1alpha1"]["serverRelativeURL"]
        async with session.get(f"{fake_kube.url}{url}") as answer:
            doc = await answer.json()
    patch = doc["paths"]["/apis/batch.volcano.sh/v1alpha1/namespaces/{namespace}/jobs/{name}"][
        "patch"
    ]
    assert patch["x-kubernetes-group-version-kind"]["kind"] == "Job"
    assert "fieldValidation" in {p["name"] for p in patch["parameters"]}


async def test_a_pod_not_started_has_no_log() -> None:
    async with FakeCluster() as fake_kube:  # its token is a cluster admin's
        await _no_log(fake_kube)


async def _no_log(fake_kube: FakeCluster) -> None:
    fake_kube.store.create(PODS, {"metadata": {"name": "p", "namespace": "default"},
                                  "spec": {"containers": [{"name": "c", "image": "i"}]}})  # fmt: skip
    headers = {"Authorization": f"Bearer {fake_kube.token}"}
    url = f"{fake_kube.url}/api/v1/namespaces/default/pods/p/log"
    async with aiohttp.ClientSession(headers=headers) as session, session.get(url) as answer:
        assert answer.status == 400
        assert "is waiting to start" in (await answer.json())["message"]


def test_a_shell_echo_is_logged_with_the_containers_env() -> None:
    pod = {"metadata": {"name": "p"}, "spec": {"containers": [{
        "name": "c", "command": ["sh", "-c", "echo \"rank $RANK of ${N}\"; sleep 1; echo 'done $X'"],
        "env": [{"name": "RANK", "value": "1"}, {"name": "N", "value": "2"}]}]}}  # fmt: skip
    assert container_log(pod) == "rank 1 of 2\ndone $X\n"
    assert container_log({"spec": {"containers": [{"name": "c", "command": ["python"]}]}}) == ""
