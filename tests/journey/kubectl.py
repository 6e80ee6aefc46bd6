"""The real ``kubectl`` against the testbed cluster, as a user types it.

The testbed serves its API over HTTPS; the user's kubeconfig names its CA and server name and
a bearer token that authenticates as the namespace user (``tests.adopt.cluster.ALICE``).
kubectl runs as a child process without blocking the event loop that serves it the API."""

from __future__ import annotations

import asyncio
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

KUBECTL = shutil.which("kubectl")
# The oldest kubectl adopt mode serves (Kubernetes 1.27), where installed beside the default
# one under that name (as cloud SDKs install them): the journey holds for both.
OLDEST = "kubectl.1.27"
BINARIES = [KUBECTL] + [
    str(Path(os.path.realpath(KUBECTL)).parent / OLDEST)
    for _ in [0]
    if KUBECTL is not None and (Path(os.path.realpath(KUBECTL)).parent / OLDEST).exists()
]
USER_TOKEN = "alice-token"
TIMEOUT = 60.0

needs_kubectl = pytest.mark.skipif(
    KUBECTL is None, reason="kubectl is not installed: the journey drives the real binary"
)


@dataclass(frozen=True)
class Typed:
    """What the user saw: exit code, stdout, stderr."""

    code: int
    out: str
    err: str

    @property
    def both(self) -> str:
        return self.out + self.err


class Kubectl:
    def __init__(self, kubeconfig: Path, home: Path, binary: str | None = KUBECTL) -> None:
        self.kubeconfig = kubeconfig
        self.home = home
        self.binary = binary

    async def __call__(self, *args: str, stdin: str | None = None, check: bool = False) -> Typed:
        assert self.binary is not None
        env = {"PATH": os.environ.get("PATH", ""), "HOME": str(self.home),
               "KUBECONFIG": str(self.kubeconfig), "KUBECACHEDIR": str(self.home / "cache")}  # fmt: skip
        process = await asyncio.create_subprocess_exec(
            self.binary, *args, env=env,
            stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        try:
            out, err = await asyncio.wait_for(
                process.communicate(stdin.encode() if stdin is not None else None), TIMEOUT
            )
        except TimeoutError:
            process.kill()
            await process.wait()
            raise AssertionError(f"kubectl {' '.join(args)} hung for {TIMEOUT:.0f} s") from None
        typed = Typed(int(process.returncode or 0), out.decode(), err.decode())
        if check:
            assert typed.code == 0, f"kubectl {' '.join(args)}: {typed.both}"
        return typed
