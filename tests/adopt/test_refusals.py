"""Adopt mode's refusals carry the status a client acts on, not only a message: an earlier
object's AppWrapper still being deleted is a 409 Conflict (retry in a moment), which a client
tells from the 403 of a refused right and the 422 of an object that cannot work."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from testbed.cluster.resources import APPWRAPPERS, VCJOBS
from testbed.cluster.store import ApiError
from testbed.pki import ServingPki
from tests.adopt.cluster import ALICE, NAMESPACE, running_cluster, vcjob
from tests.builders import context
from webhook.core import engine

HOLD = "example.com/hold"


async def test_a_create_while_the_earlier_objects_appwrapper_is_deleted_is_a_409_conflict(
    webhook_pki: ServingPki, tmp_path: Path
) -> None:
    async with running_cluster(webhook_pki, tmp_path) as cluster:
        # The AppWrapper of an earlier Job "train", held by a finalizer while it is torn down.
        outcome = engine.admit(copy.deepcopy(vcjob()), context(ns=NAMESPACE, user="alice"))
        assert outcome.result is not None
        earlier = copy.deepcopy(outcome.result)
        earlier["metadata"]["namespace"] = NAMESPACE
        earlier["metadata"]["finalizers"] = [HOLD]
        cluster.api.store.create(APPWRAPPERS, earlier)
        cluster.api.store.delete(APPWRAPPERS, NAMESPACE, "train")

        with pytest.raises(ApiError) as denied:
            await cluster.api.create(VCJOBS, vcjob(), user=ALICE)

        assert (denied.value.status, denied.value.reason) == (409, "Conflict")
        assert "is being deleted" in denied.value.message
        assert cluster.job() is None
