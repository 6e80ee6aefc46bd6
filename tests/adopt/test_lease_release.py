"""A replica that stops gracefully gives its Lease up before its API client closes, so the
next replica leads at once instead of after the Lease expires (client-go's ReleaseOnCancel)."""

from __future__ import annotations

from pathlib import Path

from testbed.cluster.resources import LEASES
from testbed.pki import ServingPki
from tests.adopt.cluster import running_cluster
from tests.adopt.harness import eventually
from webhook.model import names


async def test_a_drained_replica_leaves_its_lease_free(
    webhook_pki: ServingPki, tmp_path: Path
) -> None:
    async with running_cluster(webhook_pki, tmp_path, upstream=False) as cluster:

        def holder() -> str:
            lease = cluster.api.store.get(LEASES, names.SERVICE_NAMESPACE, names.CONTROLLER_LEASE)
            return str(((lease or {}).get("spec") or {}).get("holderIdentity") or "")

        await eventually(lambda: holder() == "autowrap-0", what="autowrap-0 holds the Lease")
        await cluster.running.drain()
        lease = cluster.api.store.get(LEASES, names.SERVICE_NAMESPACE, names.CONTROLLER_LEASE)
        assert lease is not None
        assert holder() == "" and lease["spec"]["leaseDurationSeconds"] == 1, lease["spec"]
