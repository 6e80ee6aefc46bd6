"""A delete decided from a stale cache never touches the object now holding the name.

The controller's cache can still hold an object that was deleted and re-created under the same
name (a leader change or a lagging watch during a GitOps re-apply). ``_finish_delete`` reads the
live object, and acts only when it is the very object the cache saw (same uid): the new object
keeps its adoption finalizer and its AppWrapper."""

from __future__ import annotations

import copy
from pathlib import Path

from tests.adopt.harness import NAMESPACE, adopting, vcjob
from tests.support.waiting import eventually
from webhook.controller.events import Recorder
from webhook.controller.reconcile import Reconciler
from webhook.model import names
from webhook.shell.kube import KubeClient, object_kinds


async def test_a_cached_terminating_object_does_not_release_the_live_one_of_its_name(
    tmp_path: Path,
) -> None:
    async with adopting(tmp_path) as cluster:
        cluster.store_job(vcjob(workers=1))
        controller = await cluster.start_controller()
        live = await eventually(
            lambda: (
                (job := cluster.job())
                and job["metadata"]["labels"].get(names.ADOPTION_LABEL) == "adopted"
                and job
            ),
            what="adopted",
        )
        # Queued: the AppWrapper is Suspended and the Job keeps its finalizer until it runs.
        cluster.set_phase("Suspended")
        await eventually(controller.idle, what="controller idle")
        await cluster.stop_controller(controller)
        appwrapper = cluster.appwrapper()
        assert appwrapper is not None

        # What the cache still holds: the earlier Job "train", being deleted, with its finalizer.
        stale = copy.deepcopy(live)
        stale["metadata"]["uid"] = "uid-of-the-earlier-train"
        stale["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        assert names.ADOPTION_FINALIZER in stale["metadata"]["finalizers"]

        client = await KubeClient.connect(str(cluster.kubeconfig))
        try:
            reconciler = Reconciler(
                client,
                lambda: cluster.policies,
                Recorder(client, instance="replica-a"),
                objects_of=lambda key: [stale],
                pods_of=lambda key: [],
                appwrapper_of=lambda key: appwrapper,
                kinds=object_kinds(),
            )
            await reconciler.reconcile((NAMESPACE, "train"))
        finally:
            await client.close()

        now = cluster.job()
        assert now is not None and now["metadata"]["uid"] == live["metadata"]["uid"]
        assert names.ADOPTION_FINALIZER in now["metadata"]["finalizers"]
        kept = cluster.appwrapper()
        assert kept is not None and kept["metadata"]["uid"] == appwrapper["metadata"]["uid"]
        assert not kept["metadata"].get("deletionTimestamp")
