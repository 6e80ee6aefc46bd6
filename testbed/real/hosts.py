"""Service DNS names on 127.0.0.1, through /etc/hosts.

The apiserver calls each webhook at ``https://<service>.<namespace>.svc`` and checks the serving
certificate for that name (the AppWrapper rotator issues its certificate for exactly that), so
the names must resolve: a line each in /etc/hosts, which Go's resolver and Python's both read.
Lines are only ever added, never rewritten or removed (other users of the file own theirs), in
place (the file is often a bind mount). A name already mapped elsewhere is an error: calls to
it would leave the machine.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

HOSTS = Path("/etc/hosts")
MARK = "# autowrap testbed"


def mapped(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in text.splitlines():
        fields = line.split("#", 1)[0].split()
        for name in fields[1:]:
            out.setdefault(name, fields[0])
    return out


def ensure(names: Iterable[str], hosts: Path = HOSTS) -> None:
    text = hosts.read_text()
    known = mapped(text)
    wrong = {n: known[n] for n in names if n in known and known[n] != "127.0.0.1"}
    if wrong:
        raise RuntimeError(f"{hosts} maps {wrong} elsewhere than 127.0.0.1; the webhooks "
                           "served on the host would not be reached")  # fmt: skip
    missing = [n for n in names if n not in known]
    if not missing:
        return
    lines = "".join(f"127.0.0.1 {name} {MARK}\n" for name in missing)
    try:
        with hosts.open("a") as out:
            out.write(("\n" if text and not text.endswith("\n") else "") + lines)
    except PermissionError:
        raise RuntimeError(f"{hosts} is not writable here; add these lines to it (as root):\n"
                           f"{lines}") from None  # fmt: skip
