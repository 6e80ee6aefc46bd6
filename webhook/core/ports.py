"""What the core and admission ask of the cluster, and how a call to it fails.

The port between the pure floors and the shell: ``Cluster`` is the calls admission makes,
``Identity`` who asked, ``ApiFailure`` and its kinds what a call that did not succeed raises.
``webhook.shell.kube`` implements and raises them; admission catches them without importing
the client, and everything above it catches the same types.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from webhook.core import provenance


class ApiFailure(Exception):
    """A call that did not succeed: ``status`` is the HTTP status, None when nothing answered."""

    def __init__(self, call: str, status: int | None, message: str, reason: str = "") -> None:
        super().__init__(f"{call}: {message}")
        self.call = call
        self.status = status
        self.message = message
        self.reason = reason


class AlreadyExists(ApiFailure):
    pass


class Conflict(ApiFailure):
    """The object changed since it was read (a stale resourceVersion or failed precondition)."""


class Gone(ApiFailure):
    """A watch or list asked for a resourceVersion the apiserver no longer has (410)."""


@dataclass(frozen=True)
class Identity:
    """Who asked: the user of the admission request, as SubjectAccessReview wants it."""

    username: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()


class Cluster(Protocol):
    """What admission needs from the API (``webhook.shell.kube.KubeClient`` in the server)."""

    async def create_appwrapper(
        self, namespace: str, body: dict[str, Any], *, dry_run: bool, timeout: float
    ) -> dict[str, Any]: ...

    async def get_appwrapper(
        self, namespace: str, name: str, *, timeout: float
    ) -> dict[str, Any] | None: ...

    async def appwrapper_terminating(
        self, namespace: str, name: str, *, timeout: float
    ) -> bool: ...

    async def may_create_appwrappers(
        self, who: Identity, namespace: str, *, timeout: float
    ) -> tuple[bool, str]: ...

    async def local_queue_exists(
        self, namespace: str, queue: str, *, timeout: float
    ) -> bool | None: ...

    async def namespace_labels(self, namespace: str, *, timeout: float) -> dict[str, str]: ...

    async def own_identity(self, *, timeout: float) -> provenance.Me:
        """Who autowrap's own credentials authenticate as (asked once, then remembered)."""
        ...

    async def refusal(
        self, namespace: str, components: list[dict[str, Any]], *, timeout: float
    ) -> str | None:
        """What the cluster says to a server-side dry-run create of these objects, or None."""
        ...

    async def redirect_reason(self, namespace: str, queue: str, *, timeout: float) -> str | None:
        """Why adopt mode cannot serve this queue (its ClusterQueue uses MultiKueue or
        topology-aware scheduling), or None."""
        ...

    async def kueue_workloads(
        self, namespace: str, appwrapper_uid: str, *, timeout: float
    ) -> list[dict[str, Any]]:
        """Kueue's Workloads for the AppWrapper of that uid (label kueue.x-k8s.io/job-uid),
        read live; none where Kueue is not served."""
        ...
