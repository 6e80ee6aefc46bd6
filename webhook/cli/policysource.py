"""Where ``check``, ``render`` and ``explain`` take their policies from.

In this order: ``--policy PATH``; ``$AUTOWRAP_POLICY``; ``--policy-from-cluster``, the
ConfigMap the cluster's autowrap reads, fetched with the user's own kubeconfig; else the policy
set ``deploy/`` installs: ``deploy/base/policies`` when run from a checkout, the copy shipped
inside the package elsewhere. Whatever the user did not name is said on stderr, with its
policies, so that nobody is judged by a set they did not know they used.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path

from webhook.cli.inputs import InputError
from webhook.core import policy, ports
from webhook.model import names
from webhook.shell import kube, policyfiles

CONFIGMAP = "autowrap-policies"
# The Role the install binds to every authenticated user, to read the ConfigMap.
READER_ROLE = "autowrap-policy-reader"
TIMEOUT = 15.0

Say = Callable[[str], None]


def load(
    path: str | None,
    *,
    from_cluster: bool = False,
    kubeconfig: str | None = None,
    install_namespace: str = names.SERVICE_NAMESPACE,
    note: Say,
) -> policy.PolicySet:
    """The policy set to judge with; ``note`` is told where it came from unless the user named
    a path."""
    if path:
        return policyfiles.load(Path(path))
    configured = os.environ.get(policyfiles.ENV_VAR)
    if configured:
        return policyfiles.load(Path(configured))
    if from_cluster:
        files = from_configmap(kubeconfig, install_namespace)
        policies = policy.build(files)
        note(
            f"policies from the cluster: ConfigMap {install_namespace}/{CONFIGMAP} "
            f"({_listed(policies)})"
        )
        return policies
    if policyfiles.CHECKOUT_DIR.is_dir():
        policies = policyfiles.load(policyfiles.CHECKOUT_DIR)
        note(
            f"no --policy given: using ./{policyfiles.CHECKOUT_DIR} ({_listed(policies)}), the "
            "set deploy/ installs; --policy-from-cluster judges with your cluster's policies, "
            "--policy PATH with others"
        )
        return policies
    policies = policy.build(policyfiles.packaged())
    note(
        f"no --policy given: using the policy set autowrap installs by default "
        f"({_listed(policies)}); --policy-from-cluster judges with your cluster's policies, "
        "--policy PATH with others"
    )
    return policies


def _listed(policies: policy.PolicySet) -> str:
    return ", ".join(p.name for p in policies.policies)


def from_configmap(kubeconfig: str | None, namespace: str) -> list[tuple[str, str]]:
    """(source, text) pairs of the installed ConfigMap, read as the server reads its mount."""
    where = f"ConfigMap {namespace}/{CONFIGMAP}"
    try:
        found = asyncio.run(_get(kubeconfig, namespace))
    except kube.NoConfiguration as exc:
        raise InputError(
            f"--policy-from-cluster: no Kubernetes configuration to read {where} with ({exc}); "
            "pass --kubeconfig PATH, or --policy PATH with a copy of the policies"
        ) from None
    except ports.ApiFailure as exc:
        raise InputError(refused(where, namespace, exc)) from None
    if found is None:
        raise InputError(
            f"--policy-from-cluster: {where} does not exist: autowrap is not installed in "
            f"namespace {namespace!r}. Pass --install-namespace NS where it is (kubectl get "
            f"configmaps --all-namespaces --field-selector metadata.name={CONFIGMAP} finds it)"
        )
    data = found.get("data")
    files = policyfiles.from_config_map(
        {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}
    )
    if not files:
        raise InputError(
            f"--policy-from-cluster: {where} holds no *.yaml policy file, so the cluster wraps "
            "nothing; ask your platform team to install a policy set (docs/install.md, "
            '"Choosing the policies")'
        )
    return [(f"{namespace}/{CONFIGMAP}: {source}", text) for source, text in files]


def refused(where: str, namespace: str, exc: ports.ApiFailure) -> str:
    """What to say when the cluster did not hand the ConfigMap over."""
    said = f"HTTP {exc.status}: {exc.message}" if exc.status else exc.message
    if exc.status == 403:
        return (
            f"--policy-from-cluster: you may not read {where} ({said}). The install lets every "
            f"authenticated user read it (Role {READER_ROLE} in {namespace}); ask your platform "
            "team to keep or restore it, or for a copy of the policies to pass as --policy PATH"
        )
    if exc.status == 401:
        return (
            f"--policy-from-cluster: the cluster did not accept your credentials reading {where} "
            f"({said}); log in again (a fresh kubeconfig), or pass --kubeconfig PATH"
        )
    return (
        f"--policy-from-cluster: cannot read {where} ({said}); check that the cluster answers "
        "(kubectl get --raw /version), or pass --policy PATH with a copy of the policies"
    )


async def _get(kubeconfig: str | None, namespace: str) -> dict[str, object] | None:
    api = await kube.Api.connect(kubeconfig)
    try:
        return await api.get(kube.CONFIGMAPS, namespace, CONFIGMAP, timeout=TIMEOUT)
    finally:
        await api.close()
