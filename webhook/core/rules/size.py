"""etcd's limit on one stored object: the API server refuses a larger write.

etcd's ``--max-request-bytes`` defaults to 1.5 MiB, and the API server answers a bigger object
with "etcdserver: request is too large" only when it writes, after admission. An AppWrapper
holds its components whole, so a large ConfigMap-like template or many tasks can cross it; the
size is measured as compact JSON, which is close to what is stored.
"""

from __future__ import annotations

import json

import orjson

from webhook.model.fields import ROOT, FieldPath, Violation, error

ETCD_LIMIT = 1572864  # 1.5 MiB


def json_size(obj: object) -> int:
    try:
        return len(orjson.dumps(obj))
    except TypeError:  # an integer beyond 64 bits, which JSON allows and orjson does not
        return len(json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode())


def check(obj: object, *, what: str, path: FieldPath = ROOT) -> list[Violation]:
    size = json_size(obj)
    if size <= ETCD_LIMIT:
        return []
    return [
        error(
            path,
            f"{what} is {size:,} bytes as JSON, more than the {ETCD_LIMIT:,} (1.5 MiB) etcd "
            "stores in one object, so the API server would refuse it; move large data into a "
            "ConfigMap, Secret or volume and reference it",
        )
    ]


def over_limit(least: int, *, submitted: int, what: str) -> Violation | None:
    """The finding for an object that would weigh at least ``least`` bytes once autowrap adds
    the env of SPEC section 4 to every container, before it is built; None when it may fit."""
    if least <= ETCD_LIMIT:
        return None
    return error(
        ROOT,
        f"{what} would be at least {least:,} bytes as JSON with the env autowrap adds to each "
        f"container ({submitted:,} as submitted), more than the {ETCD_LIMIT:,} (1.5 MiB) etcd "
        "stores in one object, so the API server would refuse it; use fewer containers per pod "
        "template, or move large data into a ConfigMap, Secret or volume and reference it",
    )
