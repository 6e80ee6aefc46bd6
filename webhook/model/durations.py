"""Go ``time.ParseDuration`` syntax, which the AppWrapper controller uses for its annotations.

The controller silently replaces a malformed value with its default, so autowrap parses with
the same grammar at admission and rejects what the controller would have ignored.
"""

from __future__ import annotations

import re

_UNIT_NANOS = {
    "ns": 1,
    "us": 1_000,
    "µs": 1_000,
    "μs": 1_000,
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60 * 1_000_000_000,
    "h": 3600 * 1_000_000_000,
}
_TERM = re.compile(r"(\d+\.?\d*|\.\d+)(ns|us|µs|μs|ms|s|m|h)")


def parse_seconds(text: str) -> float:
    """Seconds in a Go duration string; raises ValueError with Go's reason on bad input."""
    s = text.strip()
    if s != text or not s:
        raise ValueError(f'invalid duration "{text}"')
    sign = 1.0
    if s[0] in "+-":
        sign = -1.0 if s[0] == "-" else 1.0
        s = s[1:]
    if s == "0":
        return 0.0
    if not s:
        raise ValueError(f'invalid duration "{text}"')
    pos = 0
    nanos = 0.0
    while pos < len(s):
        match = _TERM.match(s, pos)
        if match is None:
            if re.match(r"(\d+\.?\d*|\.\d+)", s[pos:]):
                raise ValueError(f'missing or unknown unit in duration "{text}"')
            raise ValueError(f'invalid duration "{text}"')
        nanos += float(match.group(1)) * _UNIT_NANOS[match.group(2)]
        pos = match.end()
    return sign * nanos / 1e9


def format_seconds(seconds: float) -> str:
    """A short Go-compatible spelling, e.g. 90 -> "1m30s", 86400 -> "24h0m0s"."""
    whole = int(seconds)
    if whole != seconds or whole < 0:
        return f"{seconds}s"
    if whole == 0:
        return "0s"
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes}m{secs}s"
    if minutes:
        return f"{minutes}m{secs}s"
    return f"{secs}s"
