"""The Kueue queue: there must be one, well formed and allowed by the namespace's policy."""

from __future__ import annotations

from webhook.core.policy import QueuePolicy
from webhook.model import dnsnames, names
from webhook.model.fields import LABELS, FieldPath, Violation, error

QUEUE_PATH = LABELS.key(names.QUEUE_LABEL)


def check(
    queue: str | None, policy: QueuePolicy, *, path: FieldPath = QUEUE_PATH
) -> list[Violation]:
    if not queue:
        return [
            error(
                path,
                f"no Kueue queue: add the label {names.QUEUE_LABEL}: <LocalQueue name> to "
                "metadata.labels, or ask your platform team for a default queue in this "
                "namespace's autowrap policy",
            )
        ]
    if not dnsnames.is_dns1123_subdomain(queue):
        return [
            error(
                path,
                f"{queue!r} is not a valid queue name (a lower-case RFC 1123 subdomain: letters, "
                "digits, '-' and '.'); use the name of a LocalQueue in this namespace",
            )
        ]
    if policy.allowed and queue not in policy.allowed:
        return [
            error(
                path,
                f"queue {queue!r} is not allowed in this namespace; use one of: "
                f"{', '.join(policy.allowed)}",
            )
        ]
    return []
