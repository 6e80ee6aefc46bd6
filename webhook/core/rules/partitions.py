"""Partition math: Volcano's own rules, checked before anything is queued, plus the one it
misses (``minPartitions`` ≤ ``totalPartitions``, which Volcano only reports indirectly)."""

from __future__ import annotations

from collections.abc import Iterable

from webhook.core.workload import PodGroup
from webhook.model.fields import Violation, error


def check(groups: Iterable[PodGroup]) -> list[Violation]:
    found: list[Violation] = []
    for group in groups:
        part = group.partition
        if part is None:
            continue
        total_ok = part.total is not None and part.total >= 1
        size_ok = part.size is not None and part.size >= 1
        if not total_ok:
            found.append(
                error(
                    part.path.child("totalPartitions"),
                    f"must be an integer ≥ 1, got {part.total}; set how many partitions task "
                    f"{group.name!r} is split into",
                )
            )
        if not size_ok:
            found.append(
                error(
                    part.path.child("partitionSize"),
                    f"must be an integer ≥ 1, got {part.size}; set how many pods each partition of "
                    f"task {group.name!r} holds",
                )
            )
        if not (total_ok and size_ok):
            continue
        assert part.total is not None and part.size is not None
        if group.replicas != part.total * part.size:
            found.append(
                error(
                    group.path.child("replicas"),
                    f"replicas {group.replicas} must equal totalPartitions × partitionSize = "
                    f"{part.total} × {part.size} = {part.total * part.size}; change replicas or the "
                    "partition policy",
                )
            )
        minimum = part.minimum or 0
        if minimum > part.total:
            found.append(
                error(
                    part.path.child("minPartitions"),
                    f"minPartitions {minimum} is more than totalPartitions {part.total}; lower it",
                )
            )
        if minimum > 0 and group.min_available is not None:
            expected = minimum * part.size
            if group.min_available != expected:
                found.append(
                    error(
                        group.path.child("minAvailable"),
                        f"minAvailable {group.min_available} must equal minPartitions × "
                        f"partitionSize = {minimum} × {part.size} = {expected}; set it to {expected} "
                        "or remove it (Volcano then derives it)",
                    )
                )
    return found
