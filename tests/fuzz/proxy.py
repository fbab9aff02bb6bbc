"""A TCP proxy that records the requests real clients send (tests/fuzz/record_corpus.py):
every byte is forwarded both ways unchanged, and each request frame the client sends is
kept (without its size prefix) in the order it was sent."""

from __future__ import annotations

import contextlib
import socket
import struct
import threading


class RecordingProxy:
    """Listens on 127.0.0.1 (``port``) and forwards to ``target`` (HOST:PORT), which may
    be set after the proxy is made (a broker advertising the proxy's port is started
    once that port is known, so that clients reach every broker through it)."""

    def __init__(self, target: str | None = None) -> None:
        self.target: tuple[str, int] | None = None
        if target is not None:
            self.forward_to(target)
        self.frames: list[bytes] = []
        self._lock = threading.Lock()
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._server.getsockname()[1]
        self._stop = False
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def forward_to(self, target: str) -> None:
        host, _, port = target.rpartition(":")
        self.target = (host, int(port))

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _accept(self) -> None:
        self._server.settimeout(0.2)
        while not self._stop:
            try:
                client, _ = self._server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            assert self.target is not None, "forward_to() first"
            upstream = socket.create_connection(self.target)
            threading.Thread(target=self._requests, args=(client, upstream),
                             daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client), daemon=True).start()

    def _requests(self, client: socket.socket, upstream: socket.socket) -> None:
        """Client to broker: forward, and cut the stream into frames."""
        pending = b""
        try:
            while data := client.recv(1 << 20):
                upstream.sendall(data)
                pending += data
                while len(pending) >= 4:
                    size = struct.unpack(">i", pending[:4])[0]
                    if len(pending) < 4 + size:
                        break
                    with self._lock:
                        self.frames.append(pending[4:4 + size])
                    pending = pending[4 + size:]
        except OSError:
            pass
        finally:
            for s in (client, upstream):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(1 << 20):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                dst.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        self._stop = True
        self._server.close()
        self._thread.join(2)
