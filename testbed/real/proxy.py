"""The Service in front of autowrap's replicas: one loopback port that forwards each TCP
connection to a live replica, as kube-proxy spreads a Service's connections over its endpoints.

The webhook configurations name one URL; every replica listens on a port of its own (all bind
127.0.0.1). Connections are handed round-robin to the replicas registered as ready, a refused
connect falling through to the next. With none registered the port is closed, so the apiserver
meets a refused connection, as kube-proxy rejects a Service without endpoints, and judges the
call by the webhook's failurePolicy. TLS passes through untouched: the apiserver checks the
replica's own certificate.
"""

from __future__ import annotations

import contextlib
import itertools
import socket
import threading


class ServiceProxy:
    def __init__(self, port: int) -> None:
        self.port = port
        self._backends: list[int] = []
        self._lock = threading.Lock()
        self._turn = itertools.count()
        self._listener: socket.socket | None = None

    def set_backends(self, ports: list[int]) -> None:
        with self._lock:
            self._backends = list(ports)
            if ports and self._listener is None:
                self._listener = socket.create_server(("127.0.0.1", self.port))
                threading.Thread(target=self._accept, args=(self._listener,),
                                 name=f"proxy-{self.port}", daemon=True).start()  # fmt: skip
            elif not ports and self._listener is not None:
                self._close_listener()

    def close(self) -> None:
        with self._lock:
            self._backends = []
            self._close_listener()

    def _close_listener(self) -> None:
        if self._listener is not None:
            with contextlib.suppress(OSError):
                self._listener.shutdown(socket.SHUT_RDWR)
            self._listener.close()
            self._listener = None

    def _connect(self) -> socket.socket | None:
        with self._lock:
            backends = list(self._backends)
        start = next(self._turn)
        for i in range(len(backends)):
            port = backends[(start + i) % len(backends)]
            with contextlib.suppress(OSError):
                return socket.create_connection(("127.0.0.1", port), timeout=5.0)
        return None

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        upstream = self._connect()
        if upstream is None:
            client.close()
            return
        upstream.settimeout(None)
        pump = threading.Thread(target=_copy, args=(upstream, client), daemon=True)
        pump.start()
        _copy(client, upstream)
        pump.join()
        for s in (client, upstream):
            s.close()


def _copy(source: socket.socket, target: socket.socket) -> None:
    """Bytes from ``source`` to ``target`` until EOF, then a half-close of ``target``."""
    with contextlib.suppress(OSError):
        while data := source.recv(65536):
            target.sendall(data)
    with contextlib.suppress(OSError):
        target.shutdown(socket.SHUT_WR)
