"""One replica of autowrap as the apiserver meets it: the certificate it presents, and /readyz.

``autowrap doctor`` checks every webhook's caBundle against the certificate each ready endpoint
of the Service presents *now* (not the one a Secret says it should), so it connects to the
endpoint itself. Nothing is trusted here: the handshake accepts any certificate and hands it
over (DER) for the caller to verify against each caBundle, as kube-apiserver would, under the
Service's DNS name sent as SNI.
"""

from __future__ import annotations

import asyncio
import ssl
from dataclasses import dataclass

from webhook.model import names

READ_LIMIT = 2048


@dataclass(frozen=True)
class Probed:
    certificate: bytes | None
    status: int | None
    body: str
    error: str


def _context() -> ssl.SSLContext:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # verified by the caller, against each caBundle
    return context


async def replica(host: str, port: int, server_name: str, *, timeout: float) -> Probed:
    """GET ``/readyz`` on ``host:port`` over TLS with SNI ``server_name``; the peer's
    certificate and the answer, or what went wrong."""
    writer = None
    try:
        async with asyncio.timeout(timeout):
            reader, writer = await asyncio.open_connection(
                host, port, ssl=_context(), server_hostname=server_name
            )
            tls = writer.get_extra_info("ssl_object")
            der = tls.getpeercert(binary_form=True) if tls is not None else None
            writer.write(
                f"GET {names.READYZ_PATH} HTTP/1.1\r\nHost: {server_name}\r\n"
                "Connection: close\r\n\r\n".encode()
            )
            await writer.drain()
            answer = await reader.read(READ_LIMIT)
    except TimeoutError:
        return Probed(None, None, "", f"no answer within {timeout:.0f}s")
    except (OSError, ssl.SSLError) as exc:
        return Probed(None, None, "", f"{type(exc).__name__}: {exc}")
    finally:
        if writer is not None:
            writer.close()
    head, _, body = answer.decode("utf-8", "replace").partition("\r\n\r\n")
    status_line = head.split("\r\n", 1)[0].split()
    status = int(status_line[1]) if len(status_line) > 1 and status_line[1].isdigit() else None
    if status is None:
        return Probed(der, None, "", f"not an HTTP answer: {head[:80]!r}")
    return Probed(der, status, body, "")
