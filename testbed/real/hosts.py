"""Service DNS names on 127.0.0.1, through /etc/hosts; the pod network unreachable.

The apiserver calls each webhook at ``https://<service>.<namespace>.svc`` and checks the serving
certificate for that name (the AppWrapper rotator issues its certificate for exactly that), so
the names must resolve: a line each in /etc/hosts, which Go's resolver and Python's both read.
Lines are only ever added, never rewritten or removed (other users of the file own theirs), in
place (the file is often a bind mount). A name already mapped elsewhere is an error: calls to
it would leave the machine.
"""

from __future__ import annotations

import shutil
import subprocess
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


def unreachable(cidr: str) -> None:
    """Connections to ``cidr`` (KWOK's pod IPs, which no process serves) refused at once by a
    route of type unreachable, as they are where no network leads there. Without it a machine
    whose outbound traffic passes a transparent proxy has the proxy answer for every pod IP
    (another certificate, a 404): ``autowrap doctor``'s probes of the Service's endpoints would
    report that instead of not reaching them. Best effort and kept (other sessions use the same
    range): where ``ip`` is missing or not permitted, nothing changes."""
    ip = shutil.which("ip")
    if ip is None:
        return
    shown = subprocess.run([ip, "route", "show", cidr], capture_output=True, text=True,
                           check=False)  # fmt: skip
    if "unreachable" in shown.stdout:
        return
    subprocess.run([ip, "route", "add", "unreachable", cidr], capture_output=True, check=False)
