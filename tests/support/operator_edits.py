"""What an operator does to a running cluster with ``kubectl``, through the API as a client."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from kubernetes.aio import client
from kubernetes.aio.config.kube_config import new_client_from_config


async def edit_cluster_role_verbs(
    kubeconfig: Path, role: str, group: str, resource: str, change: Callable[[list[str]], None]
) -> None:
    """``kubectl edit clusterrole <role>``: read it, ``change`` the verbs of its rule on
    ``group``/``resource`` alone, write it back (a PUT with the resourceVersion read; kubectl
    edit sends the difference as a patch, which stores the same object)."""
    async with await new_client_from_config(
        config_file=str(kubeconfig), persist_config=False
    ) as api:
        rbac = client.RbacAuthorizationV1Api(api)
        stored = await rbac.read_cluster_role(role)
        rule = next(
            r for r in stored.rules if r.api_groups == [group] and r.resources == [resource]
        )
        change(rule.verbs)
        await rbac.replace_cluster_role(role, stored)
