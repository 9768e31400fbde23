"""A loopback server for the transport tests: accepts clients, one thread each, until close().

The TLS forwarder and the SASL proxy subclass it and say what to do with a client in ``_serve``.
"""

from __future__ import annotations

import socket
import threading


class LoopbackServer:
    def __init__(self, name: str, family: int = socket.AF_INET, host: str = "127.0.0.1") -> None:
        self.listener = socket.socket(family)
        self.listener.bind((host, 0))
        self.listener.listen(8)
        self.listener.settimeout(0.05)
        self.port = self.listener.getsockname()[1]
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._accept, daemon=True, name=name)]
        self._threads[0].start()

    def close(self) -> None:
        self._stop.set()
        for t in list(self._threads):
            t.join(5)
        self.listener.close()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self.listener.accept()
            except (TimeoutError, OSError):
                continue
            t = threading.Thread(target=self._serve, args=(client,), daemon=True)
            self._threads.append(t)
            t.start()

    def _serve(self, client: socket.socket) -> None:
        raise NotImplementedError
