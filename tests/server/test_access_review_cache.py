"""A SubjectAccessReview's "allowed" is kept briefly for that exact user and namespace, so that
a burst of one user's creates asks the API once; a denial is never kept (a permission just
granted works at once), and a revoked one stops working within the TTL."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from webhook.core.ports import Identity
from webhook.shell.kube import ALLOWED_TTL, KubeClient

ALICE = Identity("alice", "u-1", ("ml-team", "system:authenticated"))


class Reviews(KubeClient):
    """KubeClient whose only API is SubjectAccessReviews answered from ``allowed``."""

    def __init__(self) -> None:
        self.now = 1000.0
        super().__init__(None, clock=lambda: self.now)
        self.allowed: set[tuple[str, str]] = set()
        self.asked = 0

    async def create(self, kind: Any, namespace: str | None, body: Mapping[str, Any],
                     **kwargs: Any) -> dict[str, Any]:  # fmt: skip
        self.asked += 1
        spec = body["spec"]
        user, ns = spec["user"], spec["resourceAttributes"]["namespace"]
        allowed = (user, ns) in self.allowed
        return {"status": {"allowed": allowed, "reason": "" if allowed else "no"}}


async def test_an_allowed_review_is_asked_once_for_a_burst_and_again_after_the_ttl() -> None:
    api = Reviews()
    api.allowed.add(("alice", "ml"))
    for _ in range(20):
        assert await api.may_create_appwrappers(ALICE, "ml", timeout=1.0) == (True, "")
    assert api.asked == 1

    api.allowed.clear()  # revoked
    api.now += ALLOWED_TTL - 0.1
    assert (await api.may_create_appwrappers(ALICE, "ml", timeout=1.0))[0]
    api.now += 0.2
    assert await api.may_create_appwrappers(ALICE, "ml", timeout=1.0) == (False, "no")
    assert api.asked == 2


async def test_a_denial_is_never_kept() -> None:
    api = Reviews()
    assert not (await api.may_create_appwrappers(ALICE, "ml", timeout=1.0))[0]
    api.allowed.add(("alice", "ml"))  # granted now
    assert (await api.may_create_appwrappers(ALICE, "ml", timeout=1.0))[0]
    assert api.asked == 2


async def test_what_is_kept_is_for_that_exact_user_and_namespace() -> None:
    api = Reviews()
    api.allowed.add(("alice", "ml"))
    assert (await api.may_create_appwrappers(ALICE, "ml", timeout=1.0))[0]
    # Another namespace, another uid, other groups: each asked for itself.
    assert not (await api.may_create_appwrappers(ALICE, "other", timeout=1.0))[0]
    renamed = Identity("alice", "u-2", ALICE.groups)
    fewer_groups = Identity("alice", "u-1", ("system:authenticated",))
    with_extra = Identity("alice", "u-1", ALICE.groups, (("scopes", ("x",)),))
    for who in (renamed, fewer_groups, with_extra):
        await api.may_create_appwrappers(who, "ml", timeout=1.0)
    assert api.asked == 5
