"""A small blocking Kafka client: connections, version negotiation, partition leaders.

It exists for readers that want a partition's records as the raw v2 batches a Fetch
response carries (the Spark reader decodes them straight into Arrow; librdkafka hands out
one Python object per record). One blocking socket per broker, one request in flight,
every wait bounded by the caller's timeout. Message layouts come from kio; the versions
used are the highest both sides serve within the ranges this client can speak, found
with ApiVersions as every Kafka client does (KIP-35). The wire format itself (framing,
response checks and decoding, negotiation) is ``client/codec.py``'s, shared with the
asyncio connection brokers use between themselves (``client/aio.py``).
"""

from __future__ import annotations

import socket
import ssl
import time
from collections.abc import Mapping
from typing import Any

from kio.schema.errors import ErrorCode

from odradek.client import secure
from odradek.client.codec import (
    ALTER_CLIENT_QUOTAS,
    ALTER_PARTITION_REASSIGNMENTS,
    API_VERSIONS,
    DESCRIBE_CLIENT_QUOTAS,
    DESCRIBE_LOG_DIRS,
    ELECT_LEADERS,
    FETCH,
    LIST_OFFSETS,
    LIST_PARTITION_REASSIGNMENTS,
    MAX_RESPONSE_BYTES,
    METADATA,
    SIZE,
    KafkaClientError,
    check_response_size,
    decode_response,
    encode_request,
    negotiate,
    served_versions,
)
from odradek.protocol.extra_schemas import load_request_schema
from odradek.protocol.messages import build

# Re-exported: the Spark fetcher and tests import these from here, where they began.
__all__ = [
    "API_VERSIONS", "FETCH", "LIST_OFFSETS", "MAX_RESPONSE_BYTES", "METADATA", "RETRIABLE",
    "SPOKEN", "BrokerConnection", "Cluster", "KafkaClientError", "wait_before_retry",
]

# The versions this client speaks: Fetch from v4 (record batches v2, the last stable
# offset) to v12 (topic names; v13 switched to topic ids), Metadata v1-12, ListOffsets
# v1-9 (one offset per partition, isolation level from v2; v8 and v9, the same fields,
# let a request ask tiered storage's -4 and -5). Kafka 4 serves all of them.
# The admin requests a controller answers (client/admin.py): ElectLeaders v1-2 (the
# election type), the reassignment APIs at their first versions; the client quota APIs
# (KIP-546), DescribeLogDirs v1-4 (the web console's partition sizes; Kafka 4 dropped
# v0) and, for SASL listeners, SaslHandshake v1 and SaslAuthenticate.
SPOKEN = {FETCH: (4, 12), METADATA: (1, 12), LIST_OFFSETS: (1, 9), ELECT_LEADERS: (1, 2),
          DESCRIBE_LOG_DIRS: (1, 4),
          ALTER_PARTITION_REASSIGNMENTS: (0, 0), LIST_PARTITION_REASSIGNMENTS: (0, 0),
          DESCRIBE_CLIENT_QUOTAS: (0, 1), ALTER_CLIENT_QUOTAS: (0, 1), **secure.SPOKEN}
# Errors after which the partition's leader is looked up again (the Java consumer's
# "refresh metadata and retry" set for a fetch).
RETRIABLE = frozenset({
    ErrorCode.not_leader_or_follower, ErrorCode.leader_not_available,
    ErrorCode.fenced_leader_epoch, ErrorCode.unknown_leader_epoch,
    ErrorCode.replica_not_available, ErrorCode.kafka_storage_error,
    ErrorCode.offset_not_available, ErrorCode.request_timed_out,
    ErrorCode.coordinator_load_in_progress, ErrorCode.unknown_topic_or_partition,
})


class BrokerConnection:
    """One blocking connection to one broker, its API versions known."""

    def __init__(self, host: str, port: int, *, client_id: str, timeout_s: float,
                 security: Mapping[str, str] | None = None) -> None:
        """``security``: TLS and SASL settings (``client/secure.py``); none: PLAINTEXT."""
        self.address = f"{host}:{port}"
        self.client_id = client_id
        self.timeout_s = timeout_s
        security = security or {}
        tls = secure.tls_context(security)
        try:
            sock = socket.create_connection((host, port), timeout=timeout_s)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if tls is not None:
                try:
                    sock = tls.wrap_socket(sock, server_hostname=host)
                except BaseException:
                    sock.close()
                    raise
        except (OSError, ssl.SSLError) as exc:
            raise KafkaClientError(f"cannot connect to {self.address}: {exc}") from None
        self._sock = sock
        self._correlation = 0
        self.versions: dict[int, int] = {}
        try:
            answer = self.call(load_request_schema(API_VERSIONS, 0)())
            self.versions = negotiate(served_versions(answer, self.address), SPOKEN)
            secure.login(self.request, self.address, security)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        self._sock.close()

    def version(self, api_key: int) -> int:
        """The version to use for an API, or KafkaClientError naming what is missing."""
        if api_key not in self.versions:
            low, high = SPOKEN[api_key]
            raise KafkaClientError(f"{self.address} does not serve API key {api_key} at "
                                   f"versions {low}-{high}, which this client needs")
        return self.versions[api_key]

    def request(self, api_key: int, data: Mapping[str, Any]) -> Any:
        """Send ``data`` (plain values; see protocol.messages.build) as the negotiated
        version of ``api_key`` and return the decoded response body."""
        schema = load_request_schema(api_key, self.version(api_key))
        return self.call(build(schema, data))

    def call(self, body: Any) -> Any:
        """Send one kio request body and wait for its response."""
        schema = type(body)
        self._correlation += 1
        frame = encode_request(body, self._correlation, self.client_id)
        try:
            self._sock.sendall(frame)
            del frame
            size = SIZE.unpack(self._receive(4))[0]
            check_response_size(size, self.address)
            payload = self._receive(size)
        except TimeoutError:
            raise KafkaClientError(f"{self.address} did not answer within "
                                   f"{self.timeout_s:g}s") from None
        except OSError as exc:
            raise KafkaClientError(f"connection to {self.address} failed: {exc}") from None
        return decode_response(payload, schema.__api_key__, schema.__version__,
                               self._correlation, self.address)

    def _receive(self, size: int) -> bytes:
        out = bytearray(size)
        view = memoryview(out)
        got = 0
        while got < size:
            n = self._sock.recv_into(view[got:])
            if n == 0:
                raise OSError("the broker closed the connection")
            got += n
        return bytes(out)  # kio reads bytes only


class Cluster:
    """Connections to the brokers of one cluster, found from its bootstrap servers."""

    def __init__(self, bootstrap: str, *, client_id: str, timeout_s: float,
                 security: Mapping[str, str] | None = None) -> None:
        self.bootstrap = [b.strip() for b in bootstrap.split(",") if b.strip()]
        self.client_id = client_id
        self.timeout_s = timeout_s
        self.security = dict(security or {})
        self._by_node: dict[int, BrokerConnection] = {}
        self._brokers: dict[int, tuple[str, int]] = {}
        self._any: BrokerConnection | None = None

    def close(self) -> None:
        for conn in {id(c): c for c in [*self._by_node.values(), self._any] if c}.values():
            conn.close()
        self._by_node.clear()
        self._any = None

    def _connect(self, host: str, port: int) -> BrokerConnection:
        return BrokerConnection(host, port, client_id=self.client_id, timeout_s=self.timeout_s,
                                security=self.security)

    def any_broker(self) -> BrokerConnection:
        """A connection to one of the bootstrap servers (the first that answers)."""
        if self._any is not None:
            return self._any
        failures = []
        for server in self.bootstrap:
            host, _, port = server.rpartition(":")
            try:
                self._any = self._connect(host.strip("[]") or "localhost", int(port))
                return self._any
            except (KafkaClientError, ValueError) as exc:
                failures.append(str(exc))
        raise KafkaClientError("no bootstrap server answered: " + "; ".join(failures))

    def leader(self, topic: str, partition: int) -> BrokerConnection:
        """A connection to the partition's leader, from a fresh Metadata answer."""
        conn = self.any_broker()
        try:
            answer = conn.request(METADATA, {"topics": [{"name": topic}],
                                             "allow_auto_topic_creation": False})
        except KafkaClientError:
            self.forget(conn)
            raise
        self._brokers = {b.node_id: (b.host, b.port) for b in answer.brokers}
        for found in answer.topics:
            if found.name != topic:
                continue
            if found.error_code != ErrorCode.none:
                raise KafkaClientError(f"metadata of topic {topic}: {found.error_code.name}")
            for part in found.partitions:
                if part.partition_index == partition:
                    return self._node(int(part.leader_id), topic, partition)
        raise KafkaClientError(f"partition {topic}-{partition} does not exist")

    def _node(self, node: int, topic: str, partition: int) -> BrokerConnection:
        if node in self._by_node:
            return self._by_node[node]
        if node not in self._brokers:
            raise KafkaClientError(f"{topic}-{partition} has no leader now")
        host, port = self._brokers[node]
        self._by_node[node] = self._connect(host, port)
        return self._by_node[node]

    def forget(self, conn: BrokerConnection) -> None:
        """Drop a connection that failed, so the next call makes a new one."""
        conn.close()
        self._by_node = {n: c for n, c in self._by_node.items() if c is not conn}
        if self._any is conn:
            self._any = None


def wait_before_retry(deadline: float, backoff_s: float) -> bool:
    """Sleep ``backoff_s`` (bounded by ``deadline``); False when the deadline has passed."""
    left = deadline - time.monotonic()
    if left <= 0:
        return False
    time.sleep(min(backoff_s, left))
    return True
