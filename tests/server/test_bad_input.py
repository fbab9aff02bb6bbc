"""Bad input over real sockets against an in-process broker: each case checks that the
offending connection is closed (or answered as Kafka answers), that the broker's memory
does not follow what a peer merely claims, and that a fresh, well-behaved client (raw
ApiVersions and Metadata, then confluent-kafka producing and consuming a record) still
works afterwards.

Cases that once killed the process running the broker (kio reserves memory for claimed
array counts; odradek.protocol.guard now refuses them first) run a broker in a child
process, so that a regression fails the test instead of killing pytest."""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import tracemalloc
import uuid
from collections.abc import Iterator
from typing import Any

import confluent_kafka
import pytest
from kio.index import load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader

import odradek
from odradek.client.wire import encode_request
from odradek.testing import running_broker

MiB = 1024 * 1024
HOST = "127.0.0.1"
TIMEOUT_S = 5.0

# --- a raw protocol client ---------------------------------------------------------------


def encode(api_key: int, api_version: int, body: dict[str, Any], correlation_id: int = 1,
           client_id: str | None = "bad-input-tests") -> bytes:
    """A whole request frame: size, the header kio's schema names, the body."""
    return encode_request(api_key, api_version, body, correlation_id, client_id)


def sized(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def raw_header(api_key: int, api_version: int, correlation_id: int = 1, *,
               flexible: bool = False) -> bytes:
    """Request header v1 (or v2 with ``flexible``) for versions kio has no schema for."""
    header = struct.pack(">hhih", api_key, api_version, correlation_id, 4) + b"test"
    return header + b"\x00" if flexible else header


def recv_exactly(sock: socket.socket, n: int, deadline: float) -> bytes:
    out = bytearray()
    while len(out) < n:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        chunk = sock.recv(min(n - len(out), 1 << 20))
        if not chunk:
            raise ConnectionError(f"closed after {len(out)} of {n} bytes")
        out += chunk
    return bytes(out)


def read_response(sock: socket.socket, api_key: int, api_version: int,
                  timeout: float = TIMEOUT_S) -> tuple[int, Any]:
    """(correlation id, kio response body) of the next response on ``sock``."""
    deadline = time.monotonic() + timeout
    (size,) = struct.unpack(">i", recv_exactly(sock, 4, deadline))
    assert 0 <= size <= 64 * MiB, size
    payload = recv_exactly(sock, size, deadline)
    schema = load_response_schema(api_key, api_version)
    header, used = entity_reader(schema.__header_schema__)(payload, 0)
    body, _ = entity_reader(schema)(payload, used)
    return header.correlation_id, body


def connect(port: int, rcvbuf: int | None = None) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.settimeout(TIMEOUT_S)
    sock.connect((HOST, port))
    return sock


def send_ignoring_reset(sock: socket.socket, data: bytes) -> None:
    """Send what the broker will take; it may close in the middle, which is fine."""
    with contextlib.suppress(BrokenPipeError, ConnectionResetError, TimeoutError):
        sock.sendall(data)


def assert_closed_by_broker(sock: socket.socket, timeout: float = TIMEOUT_S) -> bytes:
    """Wait for the broker to close ``sock``; return anything it sent first."""
    received = bytearray()
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        assert left > 0, f"the broker did not close the connection in {timeout}s"
        sock.settimeout(left)
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            return bytes(received)
        except TimeoutError:
            continue
        if not chunk:
            return bytes(received)
        received += chunk
        assert len(received) < 16 * MiB


# TCP states in /proc/net/tcp that mean this end still holds the connection open.
_OPEN_STATES = {"01": "ESTABLISHED", "08": "CLOSE_WAIT"}


def broker_side_states(broker_port: int) -> dict[int, tuple[str, int, int]]:
    """For each client port, (state, send queue, receive queue) of the broker's socket."""
    out = {}
    with open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            fields = line.split()
            local, remote, state, queues = fields[1], fields[2], fields[3], fields[4]
            if int(local.split(":")[1], 16) == broker_port:
                tx, rx = (int(q, 16) for q in queues.split(":"))
                out[int(remote.split(":")[1], 16)] = (state, tx, rx)
    return out


def broker_side_state(broker_port: int, client_port: int) -> tuple[str, int, int] | None:
    return broker_side_states(broker_port).get(client_port)


def wait_broker_side_closed(broker_port: int, *client_ports: int,
                            timeout: float = TIMEOUT_S) -> None:
    """Wait until the broker no longer holds these connections open (closed, or closing)."""
    deadline = time.monotonic() + timeout
    while True:
        states = broker_side_states(broker_port)
        still_open = {port: states[port] for port in client_ports
                      if port in states and states[port][0] in _OPEN_STATES}
        if not still_open:
            return
        port, (state, tx, rx) = next(iter(still_open.items()))
        assert time.monotonic() < deadline, (
            f"the broker still holds {len(still_open)} connection(s) {timeout}s later, e.g. "
            f"from port {port}: {_OPEN_STATES[state]}, {tx} bytes queued to send, "
            f"{rx} bytes unread")
        time.sleep(0.05)


def rss_bytes(pid: int | str = "self") -> int:
    return _proc_status(pid)["VmRSS"]


def _proc_status(pid: int | str) -> dict[str, int]:
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmPeak", "VmHWM"):
                out[key] = int(value.split()[0]) * 1024
    return out


# --- a well-behaved client ---------------------------------------------------------------

API_VERSIONS_V3 = {"client_software_name": "bad-input-tests", "client_software_version": "1"}


def check_healthy(port: int) -> None:
    """A fresh client gets answers: raw ApiVersions v3 and Metadata, then confluent-kafka
    produces a record and consumes it back."""
    with connect(port) as sock:
        sock.sendall(encode(18, 3, API_VERSIONS_V3, correlation_id=11))
        correlation_id, versions = read_response(sock, 18, 3)
        assert correlation_id == 11
        assert versions.error_code == ErrorCode.none
        assert {0, 1, 3, 18} <= {k.api_key for k in versions.api_keys}
        sock.sendall(encode(3, 12, {"topics": None, "allow_auto_topic_creation": False,
                                    "include_topic_authorized_operations": False},
                            correlation_id=12))
        correlation_id, metadata = read_response(sock, 3, 12)
        assert correlation_id == 12
        assert [b.port for b in metadata.brokers] == [port]
    produce_and_consume(f"{HOST}:{port}")


def produce_and_consume(bootstrap: str) -> None:
    topic = f"bad-input-{uuid.uuid4().hex[:12]}"
    value = uuid.uuid4().bytes
    producer = confluent_kafka.Producer({
        "bootstrap.servers": bootstrap, "message.timeout.ms": 5000,
        "socket.timeout.ms": 5000, "log_level": 3})
    delivered: list[Any] = []
    producer.produce(topic, value=value, key=b"k",
                     on_delivery=lambda err, msg: delivered.append(err))
    assert producer.flush(6) == 0, f"the producer could not deliver in 6s: {delivered}"
    assert len(delivered) == 1 and delivered[0] is None, f"delivery failed: {delivered}"
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": bootstrap, "group.id": "bad-input-tests",
        "enable.auto.commit": False, "auto.offset.reset": "earliest",
        "socket.timeout.ms": 5000, "log_level": 3})
    try:
        consumer.assign([confluent_kafka.TopicPartition(topic, 0,
                                                        confluent_kafka.OFFSET_BEGINNING)])
        deadline = time.monotonic() + 6
        while time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            assert (msg.key(), msg.value(), msg.offset()) == (b"k", value, 0)
            return
        pytest.fail("the consumer got nothing in 6s")
    finally:
        consumer.close()


# --- framing -----------------------------------------------------------------------------


def test_truncated_frame_then_close() -> None:
    with running_broker() as b:
        sock = connect(b.port)
        client_port = sock.getsockname()[1]
        sock.sendall(struct.pack(">i", 100) + b"x" * 10)
        sock.close()
        wait_broker_side_closed(b.port, client_port)
        check_healthy(b.port)


def test_oversized_frame_is_refused_before_anything_is_allocated() -> None:
    claimed = 2**31 - 1  # ~2 GiB; the limit is 1 MiB
    with running_broker(**{"socket.request.max.bytes": MiB}) as b:
        check_healthy(b.port)  # warm up, so the measurement below sees only this request
        rss_before = rss_bytes()
        tracemalloc.start()
        try:
            sock = connect(b.port)
            client_port = sock.getsockname()[1]
            send_ignoring_reset(sock, struct.pack(">i", claimed) + os.urandom(256 * 1024))
            assert assert_closed_by_broker(sock) == b""
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        growth = rss_bytes() - rss_before
        sock.close()
        wait_broker_side_closed(b.port, client_port)
        assert peak < 16 * MiB, f"traced allocations peaked at {peak / MiB:.1f} MiB"
        assert growth < 64 * MiB, f"RSS grew by {growth / MiB:.1f} MiB"
        check_healthy(b.port)


def test_claimed_size_under_the_limit_is_not_allocated_up_front() -> None:
    """A slow sender announcing 90 MiB (under the default 100 MiB limit) and sending 1 KiB
    costs the broker about 1 KiB, and its connection stays open: it is legitimate."""
    with running_broker() as b:
        check_healthy(b.port)
        rss_before = rss_bytes()
        tracemalloc.start()
        try:
            sock = connect(b.port)
            sock.sendall(struct.pack(">i", 90 * MiB) + b"\x00" * 1024)
            time.sleep(0.3)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        growth = rss_bytes() - rss_before
        state = broker_side_state(b.port, sock.getsockname()[1])
        assert state is not None and state[0] == "01"
        sock.close()
        assert peak < 16 * MiB, f"traced allocations peaked at {peak / MiB:.1f} MiB"
        assert growth < 32 * MiB, f"RSS grew by {growth / MiB:.1f} MiB"
        check_healthy(b.port)


@pytest.mark.parametrize("size", [-1, -(2**31)])
def test_negative_frame_size(size: int) -> None:
    with running_broker() as b:
        sock = connect(b.port)
        send_ignoring_reset(sock, struct.pack(">i", size) + b"x" * 100)
        assert assert_closed_by_broker(sock) == b""
        sock.close()
        check_healthy(b.port)


def test_complete_request_before_a_bad_size_is_still_answered() -> None:
    with running_broker() as b:
        sock = connect(b.port)
        sock.sendall(encode(18, 3, API_VERSIONS_V3, correlation_id=21)
                     + struct.pack(">i", -1) + b"x" * 8)
        received = assert_closed_by_broker(sock)
        sock.close()
        check_healthy(b.port)
        assert len(received) > 4, "no response to the complete request before the bad one"
        (size,) = struct.unpack_from(">i", received)
        header, _ = entity_reader(load_response_schema(18, 3).__header_schema__)(received, 4)
        assert size == len(received) - 4 and header.correlation_id == 21


def test_half_a_frame_then_silence_is_closed_after_the_idle_time() -> None:
    idle_ms = 1000
    with running_broker(**{"connections.max.idle.ms": idle_ms}) as b:
        sock = connect(b.port)
        client_port = sock.getsockname()[1]
        start = time.monotonic()
        sock.sendall(struct.pack(">i", 100) + b"x" * 50)
        assert assert_closed_by_broker(sock, timeout=idle_ms / 1000 + 3) == b""
        elapsed = time.monotonic() - start
        assert elapsed >= idle_ms / 1000 * 0.8, f"closed after only {elapsed:.2f}s"
        sock.close()
        wait_broker_side_closed(b.port, client_port)
        check_healthy(b.port)


# --- versions ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("api_key", "api_version"),
    [(9999, 0), (-1, 0), (0, 99), (3, 99), (1, 32767), (0, 2)],
    ids=["key9999", "key-1", "produce-v99", "metadata-v99", "fetch-v32767", "produce-v2"],
)
def test_unsupported_api_or_version_closes_the_connection(api_key: int,
                                                          api_version: int) -> None:
    with running_broker() as b:
        sock = connect(b.port)
        client_port = sock.getsockname()[1]
        send_ignoring_reset(sock, sized(raw_header(api_key, api_version, 5) + b"\x00" * 40))
        assert assert_closed_by_broker(sock) == b""
        sock.close()
        wait_broker_side_closed(b.port, client_port)
        check_healthy(b.port)


@pytest.mark.parametrize("api_version", [6, 99, 32767])  # 6: not yet in any Kafka
def test_api_versions_of_an_unknown_version_gets_a_v0_answer(api_version: int) -> None:
    """As Kafka: ApiVersions v0 with UNSUPPORTED_VERSION (35) listing the versions served,
    and the connection stays open so the client can retry at a version it finds there."""
    with running_broker() as b:
        sock = connect(b.port)
        body = b"\x10bad-input-tests\x021\x00"  # v3-style body: compact strings, no tags
        sock.sendall(sized(raw_header(18, api_version, 77, flexible=True) + body))
        correlation_id, response = read_response(sock, 18, 0)
        assert correlation_id == 77
        assert response.error_code == ErrorCode.unsupported_version
        assert response.error_code.value == 35
        versions = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
        assert versions, "an empty api_keys list leaves the client nothing to retry with"
        assert versions[18][0] == 0 and 3 <= versions[18][1] < api_version
        assert {0, 1, 3} <= versions.keys()
        # The client retries on the same connection, at a version offered.
        sock.sendall(encode(18, 3, API_VERSIONS_V3, correlation_id=78))
        correlation_id, retry = read_response(sock, 18, 3)
        assert correlation_id == 78 and retry.error_code == ErrorCode.none
        sock.close()
        check_healthy(b.port)


# --- undecodable bodies ------------------------------------------------------------------

GARBAGE = {
    # a varint that never ends, where Metadata v12 has its topic count
    "metadata-v12-overlong-varint": raw_header(3, 12, 5, flexible=True) + b"\xff" * 12,
    # a transactional id claiming 32767 bytes, followed by a few
    "produce-v3-short-string": raw_header(0, 3, 5) + b"\x7f\xff" + b"garbage" * 3,
    # a negative records length in an otherwise valid Produce v3
    "produce-v3-negative-bytes": raw_header(0, 3, 5) + struct.pack(">hhii", -1, 1, 1000, 1)
    + b"\x00\x01t" + struct.pack(">iii", 1, 0, -7),
    # a header that stops inside the client id
    "header-cut-in-client-id": struct.pack(">hhih", 18, 3, 5, 20) + b"abc",
    # Produce v3 claiming 2 GiB of records after a valid start
    "produce-v3-records-2GiB": raw_header(0, 3, 5) + struct.pack(">hhii", -1, 1, 1000, 1)
    + b"\x00\x01t" + struct.pack(">ii", 1, 0) + struct.pack(">i", 2**31 - 1) + b"abc",
}


@pytest.mark.parametrize("name", list(GARBAGE))
def test_garbage_body_after_a_valid_header_closes_the_connection(name: str) -> None:
    with running_broker() as b:
        check_healthy(b.port)
        rss_before = rss_bytes()
        sock = connect(b.port)
        client_port = sock.getsockname()[1]
        send_ignoring_reset(sock, sized(GARBAGE[name]))
        assert assert_closed_by_broker(sock) == b""
        growth = rss_bytes() - rss_before
        sock.close()
        wait_broker_side_closed(b.port, client_port)
        assert growth < 64 * MiB, f"RSS grew by {growth / MiB:.1f} MiB"
        check_healthy(b.port)


def _s(text: str) -> bytes:
    return struct.pack(">h", len(text)) + text.encode()


# Requests with an array the schema does not allow to be null sent as null (-1), one per
# API where mutated real-client traffic once got such a null past decoding into a handler
# (issue 21): refused at decode now, naming the field, as Kafka's generated readers do.
NULL_ARRAYS = {
    "ListOffsets v1 topics": (raw_header(2, 1) + struct.pack(">ii", -1, -1), "topics"),
    "OffsetCommit v2 topics": (raw_header(8, 2) + _s("g") + struct.pack(">i", 1) + _s("m")
                               + struct.pack(">qi", -1, -1), "topics"),
    "OffsetFetch v1 topics": (raw_header(9, 1) + _s("g") + struct.pack(">i", -1), "topics"),
    "DescribeGroups v0 groups": (raw_header(15, 0) + struct.pack(">i", -1), "groups"),
    "CreateTopics v2 topics": (raw_header(19, 2) + struct.pack(">ii?", -1, 1000, False),
                               "topics"),
    "AddPartitionsToTxn v0 topics": (raw_header(24, 0) + _s("txn")
                                     + struct.pack(">qhi", 1, 0, -1), "v3_and_below_topics"),
    "ConsumerGroupDescribe v0 group_ids": (raw_header(69, 0, flexible=True)
                                           + b"\x00\x00\x00", "group_ids"),
}


@pytest.mark.parametrize("name", list(NULL_ARRAYS))
def test_a_null_where_the_schema_allows_none_is_refused_at_decode(
        name: str, caplog: pytest.LogCaptureFixture) -> None:
    frame, field = NULL_ARRAYS[name]
    with caplog.at_level("WARNING"), running_broker() as b:
        sock = connect(b.port)
        send_ignoring_reset(sock, sized(frame))
        assert assert_closed_by_broker(sock) == b""
        sock.close()
        check_healthy(b.port)
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert any(f"non-nullable field {field} was serialized as null" in w
               for w in warnings), warnings
    assert not [r for r in caplog.records if r.levelname == "ERROR"], caplog.text


# --- many connections, slow readers ------------------------------------------------------


def test_300_idle_connections_do_not_stop_a_normal_client() -> None:
    with running_broker(**{"connections.max.idle.ms": 20_000}) as b:
        socks: list[socket.socket] = []
        try:
            for i in range(300):
                if i % 50 == 49:
                    # Let the broker drain its accept queue (asyncio's listen backlog is
                    # 100): a burst faster than it accepts costs SYN retries of 1s each.
                    time.sleep(0.05)
                sock = connect(b.port)
                if i % 3 == 1:
                    sock.sendall(struct.pack(">i", 1000))  # a size, then nothing
                elif i % 3 == 2:
                    sock.sendall(struct.pack(">i", 1000) + b"\x00" * 500)  # half a frame
                socks.append(sock)
            served = time.monotonic()
            check_healthy(b.port)
            assert time.monotonic() - served < 5
            # All 300 are still held open by the broker (not dropped to make room).
            states = broker_side_states(b.port)
            assert sum(states.get(s.getsockname()[1], ("",))[0] == "01" for s in socks) == 300
        finally:
            ports = [s.getsockname()[1] for s in socks]
            for sock in socks:
                sock.close()
        wait_broker_side_closed(b.port, *ports)
        check_healthy(b.port)


# Metadata v12 naming 100 unknown 200-byte topics, not to be created: ~22 KB each way.
FLOOD_REQUEST = {"topics": [{"name": f"{i:03d}" + "x" * 197, "topic_id": None}
                            for i in range(100)],
                 "allow_auto_topic_creation": False,
                 "include_topic_authorized_operations": False}


def flood_without_reading(port: int, max_requests: int = 2000) -> tuple[socket.socket, int]:
    """Send requests and never read: the broker ends up blocked writing to this client."""
    sock = connect(port, rcvbuf=4096)
    request = encode(3, 12, FLOOD_REQUEST)
    sock.settimeout(0.5)
    sent = 0
    with contextlib.suppress(TimeoutError):
        while sent < max_requests:
            sock.sendall(request)
            sent += 1
    return sock, sent


def test_client_that_never_reads_does_not_stop_others() -> None:
    idle_ms = 1000
    with running_broker(**{"connections.max.idle.ms": idle_ms}) as b:
        sock, sent = flood_without_reading(b.port)
        try:
            assert sent < 2000, "the broker read 44 MB of requests while none was answered"
            start = time.monotonic()
            check_healthy(b.port)  # while the flooder is stuck
            assert time.monotonic() - start < 5
            time.sleep(idle_ms / 1000 + 0.5)  # past the drain timeout
            check_healthy(b.port)
        finally:
            sock.close()
        check_healthy(b.port)


def test_client_that_never_reads_is_disconnected_after_the_idle_time() -> None:
    idle_ms = 1000
    with running_broker(**{"connections.max.idle.ms": idle_ms}) as b:
        sock, _ = flood_without_reading(b.port)
        try:
            wait_broker_side_closed(b.port, sock.getsockname()[1],
                                    timeout=idle_ms / 1000 + 3)
        finally:
            sock.close()


# --- absurd array counts: a broker in a child process ------------------------------------


_BROKER_SCRIPT = r"""
import json, sys
from odradek.testing import running_broker
with running_broker(**json.loads(sys.argv[1])) as b:
    print(b.port, flush=True)
    sys.stdin.read()
"""


class ChildBroker:
    def __init__(self, proc: subprocess.Popen[bytes], port: int, stderr_path: str) -> None:
        self.proc = proc
        self.port = port
        self.stderr_path = stderr_path

    def status(self) -> dict[str, int]:
        self.assert_alive()
        status = _proc_status(self.proc.pid)
        if "VmPeak" not in status:  # a zombie: it died just now
            self.assert_alive(wait=1.0)
        return status

    def assert_alive(self, wait: float = 0.2) -> None:
        try:
            rc: int | None = self.proc.wait(wait)  # a death may take a moment to show
        except subprocess.TimeoutExpired:
            rc = None
        if rc is not None:
            with open(self.stderr_path, errors="replace") as f:
                err = f.read()
            died = f"signal {signal.Signals(-rc).name}" if rc < 0 else f"exit status {rc}"
            first = next((line for line in err.splitlines() if "memory allocation" in line),
                         err[-300:])
            pytest.fail(f"the broker process died ({died}): {first}")


@contextlib.contextmanager
def child_broker(settings: dict[str, Any] | None = None,
                 address_space_limit: int | None = None) -> Iterator[ChildBroker]:
    def limit() -> None:  # runs in the child before exec
        if address_space_limit is not None:
            import resource

            resource.setrlimit(resource.RLIMIT_AS, (address_space_limit, address_space_limit))

    src = os.path.dirname(os.path.dirname(odradek.__file__))
    env = dict(os.environ, PYTHONPATH=src, RUST_BACKTRACE="0")
    with tempfile.TemporaryDirectory(prefix="odradek-bad-input-") as tmp:
        stderr_path = os.path.join(tmp, "stderr")
        with open(stderr_path, "wb") as err:
            proc = subprocess.Popen(
                [sys.executable, "-c", _BROKER_SCRIPT, json.dumps(settings or {})],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, env=env,
                preexec_fn=limit)
        try:
            assert proc.stdout is not None
            ready, _, _ = select.select([proc.stdout], [], [], 30)
            line = proc.stdout.readline() if ready else b""
            assert line.strip().isdigit(), f"the child broker did not start: {line!r}"
            yield ChildBroker(proc, int(line), stderr_path)
        finally:
            if proc.poll() is None:
                assert proc.stdin is not None
                proc.stdin.close()
                try:
                    proc.wait(15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


def produce_v3_with_topic_count(count: int) -> bytes:
    """Produce v3: null transactional id, acks 1, timeout 1000, then a topic count."""
    return sized(raw_header(0, 3, 9) + struct.pack(">hhii", -1, 1, 1000, count) + b"\x00" * 16)


def produce_v9_with_topic_count(count: int) -> bytes:
    """Produce v9 (flexible): the topic array count as an unsigned varint of count + 1."""
    n = count + 1
    varint = bytearray()
    while n & ~0x7F:
        varint.append((n & 0x7F) | 0x80)
        n >>= 7
    varint.append(n)
    return sized(raw_header(0, 9, 9, flexible=True) + b"\x00" + struct.pack(">hi", 1, 1000)
                 + bytes(varint) + b"\x00" * 16)


def _absurd_count_case(broker: ChildBroker, request: bytes) -> None:
    check_healthy(broker.port)
    before = broker.status()
    sock = connect(broker.port)
    send_ignoring_reset(sock, request)
    with contextlib.suppress(AssertionError, OSError):
        assert_closed_by_broker(sock, timeout=3)
    sock.close()
    broker.assert_alive()
    after = broker.status()
    growth = after["VmPeak"] - before["VmPeak"]
    rss_growth = after["VmHWM"] - before["VmHWM"]
    assert rss_growth < 64 * MiB, f"peak RSS grew by {rss_growth / MiB:.0f} MiB"
    assert growth < 1024 * MiB, (
        f"the broker's address space peaked {growth / MiB:.0f} MiB higher after one "
        f"{len(request)}-byte request")
    check_healthy(broker.port)


def test_absurd_array_length_in_produce_is_refused_cheaply() -> None:
    """A 2 GiB records length in Produce v3 (no array involved): closed, nothing reserved."""
    with child_broker() as broker:
        check_healthy(broker.port)
        before = broker.status()
        sock = connect(broker.port)
        send_ignoring_reset(sock, sized(GARBAGE["produce-v3-records-2GiB"]))
        assert assert_closed_by_broker(sock) == b""
        sock.close()
        broker.assert_alive()
        after = broker.status()
        assert after["VmPeak"] - before["VmPeak"] < 1024 * MiB
        assert after["VmHWM"] - before["VmHWM"] < 64 * MiB
        check_healthy(broker.port)


def test_absurd_array_count_in_produce() -> None:
    with child_broker() as broker:
        _absurd_count_case(broker, produce_v3_with_topic_count(2**31 - 1))


def test_absurd_array_count_in_produce_on_a_smaller_host() -> None:
    with child_broker(address_space_limit=4 * 1024 * MiB) as broker:
        _absurd_count_case(broker, produce_v3_with_topic_count(2**31 - 1))


def test_absurd_compact_array_count_in_produce() -> None:
    with child_broker() as broker:
        _absurd_count_case(broker, produce_v9_with_topic_count(2**32))
