"""Where OwnerReferencesPermissionEnforcement is on and the documented component is missing,
autowrap cannot record the AppWrapper as the Job's owner: the Job's status and an Event say so
and name the fix, the AppWrapper keeps its hold (Kueue admits nothing), and once the component
is installed the Job is adopted and runs (issue 0.5, item 4)."""

from __future__ import annotations

from pathlib import Path

from testbed.cluster.rbac import OWNER_REFERENCES_COMPONENT, Rbac
from testbed.cluster.resources import VCJOBS
from testbed.pki import ServingPki
from tests.adopt.cluster import ALICE, AUTOWRAP, running_cluster, vcjob
from tests.adopt.harness import eventually
from webhook.model import names


async def test_a_missing_owner_reference_grant_is_said_on_the_job_and_fixed_by_the_component(
    webhook_pki: ServingPki, tmp_path: Path
) -> None:
    async with running_cluster(webhook_pki, tmp_path, owner_references_component=False) as cluster:
        await cluster.api.create(VCJOBS, vcjob(workers=1, gpus=1), user=ALICE)

        def status() -> str:
            job = cluster.job()
            return str(((job or {}).get("metadata") or {}).get("annotations", {})
                       .get(names.STATUS_ANNOTATION, ""))  # fmt: skip

        said = await eventually(lambda: "owner" in status() and status(), what="the status")
        assert said.startswith("not adopted: the cluster refused to record its AppWrapper as the "
                               "Volcano Job's owner"), said  # fmt: skip
        assert "deploy/components/owner-references-enforcement" in said
        assert "cannot set an ownerRef" in said
        aw = cluster.appwrapper()
        assert aw is not None and aw["spec"].get("suspend") is True
        assert names.ADMISSION_GATED_BY_ANNOTATION in aw["metadata"]["annotations"]
        await eventually(
            lambda: "AdoptionFailed" in cluster.events(), what="the AdoptionFailed Event"
        )

        # The documented fix: the component's grant. The Job is looked at again and runs.
        cluster.api.enforce_rbac(Rbac.from_manifests(OWNER_REFERENCES_COMPONENT),
                                 AUTOWRAP.username)  # fmt: skip
        await eventually(lambda: "Running" in status(), what="adopted and running", timeout=60)
