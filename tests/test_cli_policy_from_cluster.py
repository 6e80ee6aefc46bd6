"""``check``, ``render`` and ``explain --policy-from-cluster``: judged with the policies the
cluster's autowrap reads (the ConfigMap autowrap-policies), fetched with the user's own
kubeconfig and RBAC, with an error that says what, where and how to fix where it cannot be."""

from __future__ import annotations

import asyncio
import contextlib
import io
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import yaml

from testbed.apiserver import UserInfo
from testbed.cluster import rbac as authz
from testbed.cluster.cluster import FakeCluster
from testbed.cluster.resources import CONFIGMAPS
from tests.builders import volcano_job
from webhook.cli import main as cli

REPO = Path(__file__).resolve().parents[1]
ALICE_TOKEN = "alice-token"
ALICE = UserInfo(username="alice", groups=("system:authenticated",))
# The cluster's policies: the shipped default, and a team policy the checkout does not have.
VISION = """\
apiVersion: autowrap.io/v1alpha1
kind: Policy
metadata:
  name: vision
spec:
  namespaces: {names: [vision]}
  wrap: Always
  queue: {default: vision-queue}
"""


def _run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    try:
        args = cli.parser().parse_args(argv)
        code: int = args.handler(args, out, err, io.StringIO())
    except cli.InputError as exc:
        return cli.EXIT_UNREADABLE, out.getvalue(), f"error: {exc}\n"
    return code, out.getvalue(), err.getvalue()


@contextlib.asynccontextmanager
async def _cluster(
    tmp_path: Path, *, installed: str | None = "autowrap-system", reader: bool = True
) -> AsyncIterator[Path]:
    """A cluster whose autowrap (in ``installed``) reads the default and vision policies, and
    alice's kubeconfig; her requests are authorized by the install's RBAC (without the policy
    reader's Role where ``reader`` is False)."""
    cluster = FakeCluster(users={ALICE_TOKEN: ALICE}, default_allow=False)
    rbac = authz.Rbac.from_manifests()
    if not reader:
        rbac = authz.Rbac(
            [o for o in rbac.objects if o["metadata"]["name"] != "autowrap-policy-reader"],
            bootstrap=rbac.bootstrap,
        )
    if installed and installed != "autowrap-system":
        rbac = rbac.moved("autowrap-system", installed)
    cluster.enforce_rbac(rbac, ALICE.username)
    if installed:
        default = (REPO / "deploy" / "base" / "policies" / "default.yaml").read_text()
        cluster.add_namespace(installed)
        cluster.store.create(CONFIGMAPS, {
            "metadata": {"name": "autowrap-policies", "namespace": installed},
            "data": {"default.yaml": default, "vision.yaml": VISION},
        })  # fmt: skip
    async with cluster:
        yield cluster.write_kubeconfig(tmp_path / "alice-kubeconfig", token=ALICE_TOKEN)


def _job(tmp_path: Path) -> str:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(volcano_job("plain").task("w", replicas=2).build()))
    return str(path)


async def _cli(*argv: str) -> tuple[int, str, str]:
    return await asyncio.to_thread(_run, list(argv))


async def test_check_judges_with_the_cluster_s_policies(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)  # a checkout: without the flag, deploy/base/policies would judge
    async with _cluster(tmp_path) as kubeconfig:
        code, out, err = await _cli("check", _job(tmp_path), "-n", "vision",
                                    "-l", "autowrap.io/wrap=Always",
                                    "--policy-from-cluster", "--kubeconfig", str(kubeconfig))  # fmt: skip
    assert code == 0, err
    assert out == "Job vision/plain: would be wrapped into AppWrapper vision/plain\n"
    assert err == (
        "note: policies from the cluster: ConfigMap autowrap-system/autowrap-policies "
        "(default, vision)\n"
    )


async def test_explain_names_the_configmap_each_policy_comes_from(tmp_path):
    async with _cluster(tmp_path) as kubeconfig:
        code, out, _ = await _cli("explain", "-n", "vision", "--policy-from-cluster",
                                  "--kubeconfig", str(kubeconfig))  # fmt: skip
    assert code == 0
    assert out.startswith(
        "policy 'vision' (autowrap-system/autowrap-policies: vision.yaml) names 'vision' "
        "explicitly; less specific: 'default'"
    )


async def test_render_reads_another_install_namespace(tmp_path):
    async with _cluster(tmp_path, installed="platform-webhooks") as kubeconfig:
        code, out, err = await _cli("render", _job(tmp_path), "-n", "vision",
                                    "-l", "autowrap.io/wrap=Always", "--policy-from-cluster",
                                    "--install-namespace", "platform-webhooks",
                                    "--kubeconfig", str(kubeconfig))  # fmt: skip
    assert code == 0, err
    assert "kueue.x-k8s.io/queue-name: vision-queue" in out
    assert "ConfigMap platform-webhooks/autowrap-policies" in err


async def test_a_user_who_may_not_read_the_policies_is_told_what_to_ask_for(tmp_path):
    async with _cluster(tmp_path, reader=False) as kubeconfig:
        code, out, err = await _cli("check", _job(tmp_path), "--policy-from-cluster",
                                    "--kubeconfig", str(kubeconfig))  # fmt: skip
    assert code == 2 and out == ""
    assert err.startswith(
        "error: --policy-from-cluster: you may not read ConfigMap "
        "autowrap-system/autowrap-policies (HTTP 403: "
    )
    assert 'User "alice" cannot get resource "configmaps"' in err
    assert "Role autowrap-policy-reader in autowrap-system" in err
    assert "--policy PATH" in err


async def test_a_cluster_without_autowrap_there_says_where_to_look(tmp_path):
    async with _cluster(tmp_path, installed=None) as kubeconfig:
        code, _, err = await _cli("check", _job(tmp_path), "--policy-from-cluster",
                                  "--kubeconfig", str(kubeconfig))  # fmt: skip
    assert code == 2
    assert err.startswith(
        "error: --policy-from-cluster: ConfigMap autowrap-system/autowrap-policies does not "
        "exist: autowrap is not installed in namespace 'autowrap-system'. Pass "
        "--install-namespace NS"
    )


async def test_an_unreachable_cluster_is_one_line(tmp_path):
    from testbed.cluster.common import write_kubeconfig

    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", "http://127.0.0.1:9", "token")
    code, _, err = await _cli("check", _job(tmp_path), "--policy-from-cluster",
                              "--kubeconfig", str(kubeconfig))  # fmt: skip
    assert code == 2 and err.count("\n") == 1
    assert err.startswith(
        "error: --policy-from-cluster: cannot read ConfigMap autowrap-system/autowrap-policies ("
    )


def test_policy_and_policy_from_cluster_exclude_each_other(capsys):
    with pytest.raises(SystemExit) as info:
        cli.parser().parse_args(["check", "x.yaml", "--policy", "p", "--policy-from-cluster"])
    assert info.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err
