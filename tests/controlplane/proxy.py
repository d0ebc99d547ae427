"""A TCP relay on 127.0.0.1 in front of the apiserver, which a test can cut: a network partition for one client.

TLS passes through untouched (the relay listens on the same address the certificate names), so a kubeconfig that
points at the relay is a real client of the real apiserver until `cut()` drops every connection and refuses new
ones; `heal()` lets connections through again. Side effects: a listening socket and one thread per connection.
"""

from __future__ import annotations

import socket
import threading
from urllib.parse import urlsplit


class Relay:
    """`Relay(url).start()`, then `.url`, `.cut()`, `.heal()`, `.stop()`."""

    def __init__(self, target_url: str):
        parts = urlsplit(target_url)
        self._target = (parts.hostname, parts.port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"{parts.scheme}://127.0.0.1:{self._listener.getsockname()[1]}"
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._cut = threading.Event()
        self._stopped = threading.Event()

    def start(self) -> Relay:
        threading.Thread(target=self._accept, name="relay-accept", daemon=True).start()
        return self

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                downstream, _ = self._listener.accept()
            except OSError:
                return
            if self._cut.is_set():
                downstream.close()
                continue
            try:
                upstream = socket.create_connection(self._target, timeout=5)
            except OSError:
                downstream.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                self._open.update((downstream, upstream))
            for source, sink in ((downstream, upstream), (upstream, downstream)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while chunk := source.recv(65536):
                sink.sendall(chunk)
        except OSError:
            pass
        finally:
            for end in (source, sink):
                self._close(end)

    def _close(self, end: socket.socket) -> None:
        with self._lock:
            self._open.discard(end)
        try:
            end.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        end.close()

    def cut(self) -> None:
        """Drop every connection and refuse new ones."""
        self._cut.set()
        with self._lock:
            ends = list(self._open)
        for end in ends:
            self._close(end)

    def heal(self) -> None:
        self._cut.clear()

    def stop(self) -> None:
        self._stopped.set()
        self.cut()
        self._listener.close()
