"""A tiny blocking Kafka wire client: send any kio request at any version over a plain
socket and decode the response. For tests and benchmarks that need what real clients
cannot show (sessions, raw errors, exact versions), against Odradek or any Kafka."""

from __future__ import annotations

import io
import socket
import struct
from typing import Any

from kio.serial import entity_writer

from odradek.client.codec import reader
from odradek.protocol.extra_schemas import load_request_schema, load_response_schema
from odradek.protocol.messages import build


def encode_request(api_key: int, version: int, body: dict[str, Any],
                   correlation_id: int = 1, client_id: str | None = "wire-test") -> bytes:
    """A whole request frame (size prefix included) from version-agnostic data
    (``client_id`` None: a null client id, which the header allows)."""
    schema = load_request_schema(api_key, version)
    header_cls = schema.__header_schema__
    buf = io.BytesIO()
    entity_writer(header_cls)(buf, build(header_cls, {
        "request_api_key": api_key, "request_api_version": version,
        "correlation_id": correlation_id, "client_id": client_id}))
    entity_writer(schema)(buf, build(schema, body))
    payload = buf.getvalue()
    return struct.pack(">i", len(payload)) + payload


class WireClient:
    def __init__(self, port: int, host: str = "127.0.0.1", timeout: float = 10.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.correlation_id = 0  # of the last request sent
        self.answered = 0  # of the last response received

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> WireClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send(self, api_key: int, version: int, body: dict[str, Any]) -> int:
        """Send a request built from version-agnostic data; returns its correlation id."""
        self.correlation_id += 1
        self.sock.sendall(encode_request(api_key, version, body, self.correlation_id))
        return self.correlation_id

    def receive(self, api_key: int, version: int) -> Any:
        """The next response; responses come in request order, so its correlation id
        must be the oldest one not yet answered."""
        size = struct.unpack(">i", self._read(4))[0]
        payload = self._read(size)
        schema = load_response_schema(api_key, version)
        header_schema: type = schema.__header_schema__  # (mypy#11470, as client/codec)
        header, used = reader(header_schema)(payload, 0)
        self.answered += 1
        assert header.correlation_id == self.answered, (header, self.answered)
        body, _ = reader(schema)(payload, used)
        return body

    def request(self, api_key: int, version: int, body: dict[str, Any]) -> Any:
        self.send(api_key, version, body)
        return self.receive(api_key, version)

    def _read(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("the broker closed the connection")
            out += chunk
        return bytes(out)


def closed_by_peer(client: WireClient, timeout: float = 5.0) -> bool:
    """Whether the broker closes ``client``'s connection (within ``timeout``) without
    sending anything more."""
    try:
        client.sock.settimeout(timeout)
        return client.sock.recv(1) == b""
    except (ConnectionError, OSError):
        return True
