"""Kubernetes name grammars (apimachinery's validation), checked before Volcano or the
apiserver would refuse a name at a point where the job could no longer be fixed."""

from __future__ import annotations

import re

DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def is_dns1123_label(value: str) -> bool:
    return len(value) <= 63 and bool(DNS1123_LABEL.match(value))


def is_dns1035_label(value: str) -> bool:
    return len(value) <= 63 and bool(DNS1035_LABEL.match(value))


def is_dns1123_subdomain(value: str) -> bool:
    return len(value) <= 253 and bool(DNS1123_SUBDOMAIN.match(value))


def to_label(value: str, *, limit: int = 63, fallback: str = "x") -> str:
    """The nearest DNS-1123 label: lower case, other characters as '-', trimmed to ``limit``."""
    label = re.sub(r"[^a-z0-9-]+", "-", value.lower())[:limit].strip("-")
    return label or fallback
