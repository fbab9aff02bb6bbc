"""decode_request against requests written by kio's own writers, and against bytes no
client should send: the only outcomes allowed are a Request or a ProtocolError subclass,
quickly, and without memory proportional to anything a peer merely claims."""

from __future__ import annotations

import dataclasses
import datetime
import io
import json
import os
import select
import struct
import subprocess
import sys
import time
import typing
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import Records

import odradek
from odradek.protocol.codec import (
    CorruptRequestError,
    Request,
    UnsupportedVersionError,
    decode_request,
    encode_response,
)
from odradek.records.builder import build_simple

# Records are opaque bytes to the codec; kio registers strategies for its other types.
st.register_type_strategy(Records, st.binary(max_size=100))

# Every version kio knows of every API (anything kio does not know becomes
# UnsupportedVersionError inside decode_request).
WIDE: dict[int, tuple[int, int]] = {key: (0, 100) for key in range(-2, 100)}
# API keys fuzzed with versions -1..16: the broker's APIs and a few more (not all in kio).
FUZZ_KEYS = [0, 1, 2, 3, 8, 9, 10, 11, 12, 14, 18, 19, 20, 22, 32, 37, 9999, -1]

ROUND_TRIP_VERSIONS = [
    (18, 0), (18, 1), (18, 2), (18, 3),
    (3, 0), (3, 4), (3, 9), (3, 12),
    (0, 3), (0, 9),
    (1, 4), (1, 12),
    (75, 0),  # a nullable struct (its cursor): a marker byte, then the struct or nothing
]
SUPPORTED = {18: (0, 3), 3: (0, 12), 0: (3, 9), 1: (4, 12), 75: (0, 0)}

MAX_DECODE_S = 1.0  # far above anything legitimate for the small inputs fuzzed here


def encode_request(body: Any, correlation_id: int = 42, client_id: str | None = "odradek-test",
                   api_key: int | None = None, api_version: int | None = None) -> bytes:
    """A request frame (without its size prefix), written by kio's writers."""
    schema = type(body)
    header_cls = schema.__header_schema__
    buf = io.BytesIO()
    entity_writer(header_cls)(buf, header_cls(
        request_api_key=schema.__api_key__ if api_key is None else api_key,
        request_api_version=schema.__version__ if api_version is None else api_version,
        correlation_id=correlation_id,
        client_id=client_id,
    ))
    entity_writer(schema)(buf, body)
    return buf.getvalue()


def legacy_header(api_key: int, api_version: int, correlation_id: int = 7,
                  client_id: bytes = b"c") -> bytes:
    """Request header v1: key, version, correlation id, int16-length client id."""
    return struct.pack(">hhih", api_key, api_version, correlation_id, len(client_id)) + client_id


def flexible_header(api_key: int, api_version: int, correlation_id: int = 7,
                    client_id: bytes = b"c") -> bytes:
    """Request header v2: as v1 (the client id stays a legacy string), then tagged fields."""
    return legacy_header(api_key, api_version, correlation_id, client_id) + b"\x00"


def uvarint(value: int) -> bytes:
    out = bytearray()
    while value & ~0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def assert_same(decoded: Any, expected: Any, path: str = "body") -> None:
    """Produce and Fetch are decoded by hand (protocol.produce, protocol.fetch) into their
    own tuples: they must carry every field kio's dataclass has, with the same values
    (durations in ms, records as views of the frame)."""
    if dataclasses.is_dataclass(expected):
        if dataclasses.is_dataclass(decoded):
            assert decoded == expected, path
            return
        for f in dataclasses.fields(expected):
            if f.name == "cluster_id":  # a tagged field the broker has no use for: skipped
                continue
            name = "timeout_ms" if f.name == "timeout" and path == "body" else f.name
            assert_same(getattr(decoded, name), getattr(expected, f.name), f"{path}.{name}")
    elif isinstance(expected, tuple):
        assert len(decoded) == len(expected), path
        for i, (d, e) in enumerate(zip(decoded, expected, strict=True)):
            assert_same(d, e, f"{path}[{i}]")
    elif isinstance(expected, datetime.timedelta):
        assert decoded == expected // datetime.timedelta(milliseconds=1), path
    elif isinstance(expected, bytes):
        assert bytes(decoded) == expected, path
    else:
        assert decoded == expected, path


# --- round trips -------------------------------------------------------------------------


def _examples() -> dict[tuple[int, int], Any]:
    records = Records(build_simple([b"v1", b"v2"], keys=[b"k1", None]))
    ex: dict[tuple[int, int], Any] = {}
    for v in range(4):
        schema = load_request_schema(18, v)
        ex[18, v] = (schema(client_software_name="odradek-tests",
                            client_software_version="1.0") if v >= 3 else schema())
    m0 = load_request_schema(3, 0)
    ex[3, 0] = m0(topics=(_nested(m0, "topics")(name="alpha"), _nested(m0, "topics")(name="b")))
    m4 = load_request_schema(3, 4)
    ex[3, 4] = m4(topics=None, allow_auto_topic_creation=False)
    m9 = load_request_schema(3, 9)
    ex[3, 9] = m9(topics=(_nested(m9, "topics")(name="t\u00e9"),), allow_auto_topic_creation=True,
                  include_cluster_authorized_operations=True,
                  include_topic_authorized_operations=False)
    m12 = load_request_schema(3, 12)
    ex[3, 12] = m12(topics=(_nested(m12, "topics")(topic_id=uuid.uuid4(), name=None),
                            _nested(m12, "topics")(topic_id=None, name="named")),
                    allow_auto_topic_creation=True, include_topic_authorized_operations=True)
    for v in (3, 9):
        p = load_request_schema(0, v)
        topic_cls = _nested(p, "topic_data")
        part_cls = _nested(topic_cls, "partition_data")
        ex[0, v] = p(transactional_id=None, acks=-1,
                     timeout=datetime.timedelta(milliseconds=30000),
                     topic_data=(topic_cls(name="orders", partition_data=(
                         part_cls(index=0, records=records), part_cls(index=3, records=None))),))
    f4 = load_request_schema(1, 4)
    ex[1, 4] = f4(max_wait=datetime.timedelta(milliseconds=500), min_bytes=1,
                  max_bytes=52428800, isolation_level=1,
                  topics=(_nested(f4, "topics")(topic="orders", partitions=(
                      _nested(_nested(f4, "topics"), "partitions")(
                          partition=0, fetch_offset=12345, partition_max_bytes=1048576),)),))
    f12 = load_request_schema(1, 12)
    fetch_topic = _nested(f12, "topics")
    forgotten = _nested(f12, "forgotten_topics_data")
    ex[1, 12] = f12(cluster_id="cluster", max_wait=datetime.timedelta(milliseconds=100),
                    min_bytes=1, session_id=5, session_epoch=2,
                    topics=(fetch_topic(topic="orders", partitions=(
                        _nested(fetch_topic, "partitions")(
                            partition=1, current_leader_epoch=0, fetch_offset=7,
                            last_fetched_epoch=0, log_start_offset=-1,
                            partition_max_bytes=1 << 20),)),),
                    forgotten_topics_data=(forgotten(topic="old", partitions=(1, 2, 3)),),
                    rack_id="rack-a")
    d = load_request_schema(75, 0)
    cursor = typing.get_args(typing.get_type_hints(d)["cursor"])[0]
    ex[75, 0] = d(topics=(_nested(d, "topics")(name="orders"),), response_partition_limit=2,
                  cursor=cursor(topic_name="orders", partition_index=2))
    return ex


def _nested(cls: type, field_name: str) -> type:
    """The element class of an entity-array field."""
    hint = typing.get_type_hints(cls)[field_name]
    for arg in typing.get_args(hint):
        inner = typing.get_args(arg) or (arg,)
        if isinstance(inner[0], type) and hasattr(inner[0], "__dataclass_fields__"):
            return inner[0]
    raise AssertionError(f"{cls.__name__}.{field_name} is not an array of entities")


EXAMPLES = _examples()


def test_kio_header_writer_matches_the_wire_format() -> None:
    """The helper above writes what real clients send (a check on the test itself)."""
    api_versions = load_request_schema(18, 3)
    assert encode_request(api_versions(client_software_name="", client_software_version=""),
                          correlation_id=7, client_id="c") == (
        flexible_header(18, 3, 7, b"c") + b"\x01\x01\x00")
    metadata = load_request_schema(3, 0)
    assert encode_request(metadata(topics=()), correlation_id=7, client_id="c") == (
        legacy_header(3, 0, 7, b"c") + b"\x00\x00\x00\x00")


@pytest.mark.parametrize("key_version", ROUND_TRIP_VERSIONS, ids=lambda kv: f"key{kv[0]}v{kv[1]}")
def test_round_trip_of_kio_encoded_requests(key_version: tuple[int, int]) -> None:
    body = EXAMPLES[key_version]
    for correlation_id, client_id in [(0, "c"), (2**31 - 1, None), (-(2**31), "\u00fc" * 300)]:
        frame = encode_request(body, correlation_id, client_id)
        request = decode_request(frame, SUPPORTED)
        assert request._replace(body=None) == Request(
            key_version[0], key_version[1], correlation_id, client_id, None, size=len(frame))
        assert_same(request.body, body)


@pytest.mark.parametrize("key_version", ROUND_TRIP_VERSIONS, ids=lambda kv: f"key{kv[0]}v{kv[1]}")
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), correlation_id=st.integers(-(2**31), 2**31 - 1))
def test_round_trip_of_random_requests(key_version: tuple[int, int], data: st.DataObject,
                                       correlation_id: int) -> None:
    schema = load_request_schema(*key_version)
    body = data.draw(st.from_type(schema))
    request = decode_request(encode_request(body, correlation_id), SUPPORTED)
    assert_same(request.body, body)
    assert request.correlation_id == correlation_id


def test_trailing_bytes_after_the_last_field_are_ignored() -> None:
    frame = encode_request(EXAMPLES[3, 12]) + b"\x00\x00\x00"
    assert decode_request(frame, SUPPORTED).body == EXAMPLES[3, 12]


@pytest.mark.parametrize("where", ["header", "body"])
def test_unknown_tagged_fields_are_skipped(where: str) -> None:
    unknown = b"\x01" + b"\x05\x02ab"  # one tagged field: tag 5, 2 bytes
    if where == "header":
        frame = legacy_header(18, 3) + unknown + b"\x02n\x02v\x00"
    else:
        frame = flexible_header(18, 3) + b"\x02n\x02v" + unknown
    request = decode_request(frame, SUPPORTED)
    assert (request.body.client_software_name, request.body.client_software_version) == (
        "n", "v")


# --- unsupported versions ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("api_key", "api_version", "supported"),
    [
        (9999, 0, SUPPORTED),  # unknown to the broker and to Kafka
        (-1, 0, SUPPORTED),
        (0, 99, SUPPORTED),  # Produce v99
        (0, 2, SUPPORTED),  # Produce below the broker's minimum
        (0, -1, SUPPORTED),
        (18, 99, SUPPORTED),
        (3, 99, {3: (0, 200)}),  # "supported" by the broker, unknown to kio
        (9999, 0, {9999: (0, 0)}),  # likewise for the key
    ],
)
def test_unsupported_versions_carry_the_correlation_id(
        api_key: int, api_version: int, supported: dict[int, tuple[int, int]]) -> None:
    frame = legacy_header(api_key, api_version, correlation_id=-559038737) + b"\x00" * 10
    with pytest.raises(UnsupportedVersionError) as info:
        decode_request(frame, supported)
    assert (info.value.api_key, info.value.api_version, info.value.correlation_id) == (
        api_key, api_version, -559038737)


@pytest.mark.parametrize("length", range(8))
def test_frame_shorter_than_a_header_is_corrupt(length: int) -> None:
    with pytest.raises(CorruptRequestError) as info:
        decode_request(legacy_header(18, 0)[:length], SUPPORTED)
    assert info.value.correlation_id is None


def test_undecodable_body_is_corrupt_and_carries_the_correlation_id() -> None:
    frame = legacy_header(0, 3, correlation_id=99) + b"\x7f\xff"  # transactional id, no bytes
    with pytest.raises(CorruptRequestError) as info:
        decode_request(frame, SUPPORTED)
    assert info.value.correlation_id == 99


def test_encode_response_frames_api_versions_v0_and_v3() -> None:
    for version in (0, 3):
        schema = load_response_schema(18, version)
        key_cls = _nested(schema, "api_keys")
        fields = {"error_code": ErrorCode.none,
                  "api_keys": (key_cls(api_key=18, min_version=0, max_version=3),)}
        if version >= 1:
            fields["throttle_time"] = datetime.timedelta(0)
        body = schema(**fields)
        out = encode_response(18, version, 1234, body)
        (size,) = struct.unpack_from(">i", out)
        assert size == len(out) - 4
        header, used = entity_reader(schema.__header_schema__)(out, 4)
        assert header.correlation_id == 1234
        decoded, _ = entity_reader(schema)(out, 4 + used)  # readers return sizes read
        assert decoded == body


# --- decoding hostile bytes, in a forked child ---------------------------------------------
#
# kio's array readers reserve memory for the element count a request *claims* (see
# KIO_PREALLOCATES below): a compact array count of 2**32 made Rust abort the whole
# process, which is why odradek.protocol.guard checks every claim first. Hostile bytes are
# still decoded in a forked child of a worker process, so that a regression fails these
# tests instead of killing pytest; the child reports the outcome, the time taken and the
# growth of its address space (VmPeak) and resident set (VmHWM).

_WORKER = r"""
import json, os, select, signal, struct, sys, time
from odradek.protocol.codec import ProtocolError, decode_request

SUPPORTED = [
    {key: (0, 100) for key in range(-2, 100)},
    {int(k): tuple(v) for k, v in json.loads(sys.argv[1]).items()},
]
ERR_PATH = sys.argv[2]
TIMEOUT_S = float(sys.argv[3])
# Load the schemas once here, so children do not each import them again.
for key in json.loads(sys.argv[4]):
    for version in range(17):
        try:
            decode_request(struct.pack(">hhih", key, version, 0, -1), SUPPORTED[0])
        except ProtocolError:
            pass

def vm():
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmPeak", "VmHWM"):
                out[key] = int(value.split()[0])
    return out

def decode(frame, supported, fd):
    before = vm()
    start = time.monotonic()
    cause = None
    try:
        request = decode_request(frame, supported)
        outcome, detail = "Request", [request.api_key, request.api_version]
    except ProtocolError as exc:
        outcome, detail = type(exc).__name__, str(exc)[:300]
        cause = type(exc.__cause__).__name__ if exc.__cause__ is not None else None
    except BaseException as exc:
        outcome = "unexpected " + type(exc).__module__ + "." + type(exc).__qualname__
        detail = repr(exc)[:300]
    elapsed = time.monotonic() - start
    after = vm()
    os.write(fd, json.dumps({
        "outcome": outcome, "detail": detail, "cause": cause, "elapsed": elapsed,
        "vmpeak_growth_kb": after["VmPeak"] - before["VmPeak"],
        "rss_growth_kb": after["VmHWM"] - before["VmHWM"],
    }).encode())

while True:
    head = sys.stdin.buffer.read(5)
    if len(head) < 5:
        break
    size, which = struct.unpack(">IB", head)
    frame = sys.stdin.buffer.read(size)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        os.dup2(os.open(ERR_PATH, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), 2)
        try:
            decode(frame, SUPPORTED[which], w)
        finally:
            os._exit(0)
    os.close(w)
    chunks, timed_out = [], False
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([r], [], [], left)[0]:
            timed_out = True
            break
        data = os.read(r, 65536)
        if not data:
            break
        chunks.append(data)
    os.close(r)
    if timed_out:
        os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    if chunks and not timed_out:
        result = json.loads(b"".join(chunks))
    else:
        result = {"outcome": "timeout" if timed_out else "died"}
    result["signal"] = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
    with open(ERR_PATH, errors="replace") as f:
        result["stderr"] = f.read(400)
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()
"""

CHILD_TIMEOUT_S = 10.0
ALLOWED_OUTCOMES = ("Request", "UnsupportedVersionError", "CorruptRequestError")
# A request of at most a few KiB has no business growing the address space by this much.
VM_GROWTH_LIMIT_KB = 64 * 1024

KIO_PREALLOCATES = (
    "kio's array readers (legacy_array_reader / compact_array_reader in _kio_native) "
    "reserve 8 bytes per *claimed* element before reading any: an 18-byte Metadata v0 "
    "request whose array count is 2**31-1 grows the decoding process's address space "
    "(VmPeak) by 16 GiB, and a compact array count of 2**32-1 or more (a 5-byte uvarint) "
    "makes Rust abort the whole process with SIGABRT ('memory allocation of 34359738360 "
    "bytes failed'). "
    "Kafka's generated parsers refuse a count larger than the bytes remaining instead, "
    "and so does decode_request, through odradek.protocol.guard, before kio sees them."
)


class DecodeWorker:
    def __init__(self, tmp_dir: str) -> None:
        src = os.path.dirname(os.path.dirname(odradek.__file__))
        env = dict(os.environ, PYTHONPATH=src, RUST_BACKTRACE="0")
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _WORKER, json.dumps(SUPPORTED),
             os.path.join(tmp_dir, "child-stderr"), str(CHILD_TIMEOUT_S),
             json.dumps(FUZZ_KEYS)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)

    def decode(self, frame: bytes, broker_versions: bool = False) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(struct.pack(">IB", len(frame), int(broker_versions)) + frame)
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.proc.stdout], [], [], CHILD_TIMEOUT_S + 20)
        assert ready, "the decode worker stopped answering"
        line = self.proc.stdout.readline()
        assert line, f"the decode worker exited with {self.proc.poll()}"
        return json.loads(line)

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture(scope="module")
def worker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DecodeWorker]:
    w = DecodeWorker(str(tmp_path_factory.mktemp("decode-worker")))
    try:
        yield w
    finally:
        w.close()


def is_kio_preallocation(result: dict[str, Any]) -> bool:
    """The known kio defect: a reservation for a claimed count (or the abort it causes)."""
    aborted = result["signal"] is not None and "memory allocation of" in result["stderr"]
    return aborted or result.get("vmpeak_growth_kb", 0) >= VM_GROWTH_LIMIT_KB


def check_outcome(result: dict[str, Any], frame: bytes) -> None:
    """The only acceptable outcomes: a Request or a ProtocolError subclass, quickly, with
    no memory to speak of."""
    shown = frame[:64].hex() + ("..." if len(frame) > 64 else "")
    assert result["signal"] is None, (
        f"the decoding process died of signal {result['signal']} on {shown}: "
        f"{result['stderr'][:200]!r}")
    assert result["outcome"] in ALLOWED_OUTCOMES, (result, shown)
    # decode_request wraps whatever kio raised: running out of memory or stack must never
    # be what a peer's bytes cause.
    assert result["cause"] not in ("MemoryError", "RecursionError", "SystemError"), (
        result, shown)
    assert result["elapsed"] < MAX_DECODE_S, (result, shown)
    assert result["vmpeak_growth_kb"] < VM_GROWTH_LIMIT_KB, (result, shown)
    assert result["rss_growth_kb"] < VM_GROWTH_LIMIT_KB, (result, shown)


def fuzz_decode(worker: DecodeWorker, frame: bytes, broker_versions: bool = False) -> None:
    """check_outcome, with a precise message if kio's preallocation ever gets through."""
    result = worker.decode(frame, broker_versions)
    assert not is_kio_preallocation(result), (KIO_PREALLOCATES, result)
    check_outcome(result, frame)


def test_the_worker_reports_outcomes(worker: DecodeWorker) -> None:
    ok = worker.decode(encode_request(EXAMPLES[3, 12]), broker_versions=True)
    assert ok["outcome"] == "Request" and ok["signal"] is None
    bad = worker.decode(legacy_header(9999, 0), broker_versions=True)
    assert bad["outcome"] == "UnsupportedVersionError"


# --- claimed counts and lengths ----------------------------------------------------------

I32_MAX = struct.pack(">i", 2**31 - 1)

ABSURD = [
    # legacy arrays: int32 count
    pytest.param(legacy_header(3, 0) + I32_MAX + b"\x00\x01a", id="metadata-v0-topics"),
    pytest.param(legacy_header(0, 3) + struct.pack(">hhi", -1, 1, 1000) + I32_MAX,
                 id="produce-v3-topic-data"),
    pytest.param(legacy_header(0, 3) + struct.pack(">hhii", -1, 1, 1000, 1) + b"\x00\x01t"
                 + I32_MAX + b"\x00" * 8, id="produce-v3-partition-data"),
    pytest.param(legacy_header(1, 4) + struct.pack(">iiiib", -1, 500, 1, 1 << 20, 0)
                 + I32_MAX, id="fetch-v4-topics"),
    # compact arrays: unsigned varint count + 1
    pytest.param(flexible_header(3, 12) + uvarint(2**31) + b"\x00" * 20,
                 id="metadata-v12-topics"),
    pytest.param(flexible_header(3, 12) + uvarint(2**32) + b"\x00" * 20,
                 id="metadata-v12-topics-2**32"),
    pytest.param(flexible_header(3, 12) + uvarint(2**35 - 1) + b"\x00" * 20,
                 id="metadata-v12-topics-2**35"),
    pytest.param(flexible_header(0, 9) + b"\x00" + struct.pack(">hi", 1, 1000)
                 + uvarint(2**32), id="produce-v9-topic-data-2**32"),
    pytest.param(flexible_header(1, 12) + struct.pack(">iiiibii", -1, 500, 1, 1 << 20, 0, 0, -1)
                 + uvarint(2**31), id="fetch-v12-topics"),
    pytest.param(flexible_header(1, 12) + struct.pack(">iiiibii", -1, 500, 1, 1 << 20, 0, 0, -1)
                 + b"\x01" + b"\x02" + b"\x02t" + uvarint(2**31) + b"\x00" * 8,
                 id="fetch-v12-forgotten-partitions"),
    # legacy bytes and strings: int32 / int16 length
    pytest.param(legacy_header(0, 3) + struct.pack(">hhii", -1, 1, 1000, 1) + b"\x00\x01t"
                 + struct.pack(">ii", 1, 0) + I32_MAX + b"abc", id="produce-v3-records"),
    pytest.param(legacy_header(3, 0) + struct.pack(">ih", 1, 0x7FFF) + b"abc",
                 id="metadata-v0-topic-name"),
    pytest.param(struct.pack(">hhih", 18, 0, 7, 0x7FFF) + b"abc", id="client-id"),
    # compact strings and bytes
    pytest.param(flexible_header(0, 9) + b"\x00" + struct.pack(">hi", 1, 1000) + b"\x02"
                 + b"\x02t" + b"\x02" + struct.pack(">i", 0) + uvarint(2**34) + b"abc",
                 id="produce-v9-records"),
    pytest.param(flexible_header(18, 3) + uvarint(2**31) + b"abc", id="api-versions-v3-name"),
    # tagged fields: count and size
    pytest.param(flexible_header(18, 3) + b"\x01\x01" + uvarint(2**31 - 1),
                 id="tagged-field-count"),
    pytest.param(flexible_header(18, 3) + b"\x01\x01" + b"\x01\x00" + uvarint(2**31),
                 id="tagged-field-size"),
    pytest.param(legacy_header(18, 3) + uvarint(2**31 - 1), id="header-tagged-field-count"),
    # negative counts and lengths other than the null marker
    pytest.param(legacy_header(3, 0) + struct.pack(">i", -2), id="metadata-v0-count=-2"),
    pytest.param(legacy_header(3, 0) + struct.pack(">i", -(2**31)), id="metadata-v0-min-count"),
    pytest.param(legacy_header(0, 3) + struct.pack(">hhii", -1, 1, 1000, 1) + b"\x00\x01t"
                 + struct.pack(">iii", 1, 0, -7), id="produce-v3-records-length=-7"),
    pytest.param(flexible_header(3, 12) + b"\xff" * 12, id="overlong-varint"),
]


@pytest.mark.parametrize("frame", ABSURD)
def test_absurd_claimed_sizes_fail_fast_without_allocating(worker: DecodeWorker,
                                                           frame: bytes) -> None:
    result = worker.decode(frame, broker_versions=True)
    check_outcome(result, frame)
    assert result["outcome"] == "CorruptRequestError", result
    assert result["elapsed"] < 0.1, result


def test_absurd_array_count_fails_before_decoding_the_elements_that_follow(
        worker: DecodeWorker) -> None:
    frame = legacy_header(3, 0) + I32_MAX + b"\x00" * (1 << 20)  # 512 Ki empty names
    result = worker.decode(frame, broker_versions=True)
    assert result["signal"] is None, result
    assert result["outcome"] == "CorruptRequestError", result
    assert result["elapsed"] < 0.05, result
    assert result["rss_growth_kb"] < 1024, result  # less than the frame itself


# --- fuzzing -----------------------------------------------------------------------------

FUZZ_SETTINGS = settings(max_examples=200, deadline=None,
                         suppress_health_check=[HealthCheck.too_slow])


@FUZZ_SETTINGS
@given(frame=st.binary(max_size=300))
def test_fuzz_arbitrary_bytes(worker: DecodeWorker, frame: bytes) -> None:
    fuzz_decode(worker, frame)


@FUZZ_SETTINGS
@given(
    api_key=st.sampled_from(FUZZ_KEYS),
    api_version=st.integers(-1, 16),
    flexible=st.booleans(),
    body=st.binary(max_size=300),
)
def test_fuzz_valid_header_then_arbitrary_body(worker: DecodeWorker, api_key: int,
                                               api_version: int, flexible: bool,
                                               body: bytes) -> None:
    header = (flexible_header if flexible else legacy_header)(api_key, api_version)
    fuzz_decode(worker, header + body)


BIG_VALUES = [
    b"\x7f\xff\xff\xff", b"\xff\xff\xff\xff", b"\x80\x00\x00\x00", b"\xff\xff\xff\xfe",
    b"\x7f\xff", b"\xff\xfe", b"\xff\xff\xff\xff\x0f", b"\x80\x80\x80\x80\x08",
    b"\xff" * 10, b"\x00\x00", b"\x00",
]

mutation = st.one_of(
    st.tuples(st.just("flip"), st.integers(0, 10_000), st.integers(1, 255)),
    st.tuples(st.just("set"), st.integers(0, 10_000), st.integers(0, 255)),
    st.tuples(st.just("insert"), st.integers(0, 10_000), st.binary(min_size=1, max_size=8)),
    st.tuples(st.just("delete"), st.integers(0, 10_000), st.integers(1, 8)),
    st.tuples(st.just("truncate"), st.integers(0, 10_000), st.just(0)),
    st.tuples(st.just("big"), st.integers(0, 10_000), st.sampled_from(BIG_VALUES)),
)


def mutate(frame: bytes, ops: list[tuple[str, int, Any]]) -> bytes:
    out = bytearray(frame)
    for op, raw_pos, arg in ops:
        pos = raw_pos % (len(out) + 1)
        if op == "flip" and pos < len(out):
            out[pos] ^= arg
        elif op == "set" and pos < len(out):
            out[pos] = arg
        elif op == "insert":
            out[pos:pos] = arg
        elif op == "delete":
            del out[pos : pos + arg]
        elif op == "truncate":
            del out[pos:]
        elif op == "big":
            out[pos : pos + len(arg)] = arg
    return bytes(out)


@pytest.mark.parametrize("key_version", ROUND_TRIP_VERSIONS, ids=lambda kv: f"key{kv[0]}v{kv[1]}")
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), ops=st.lists(mutation, min_size=1, max_size=4))
def test_fuzz_mutated_valid_requests(worker: DecodeWorker, key_version: tuple[int, int],
                                     data: st.DataObject,
                                     ops: list[tuple[str, int, Any]]) -> None:
    body = data.draw(st.one_of(st.just(EXAMPLES[key_version]),
                               st.from_type(load_request_schema(*key_version))))
    fuzz_decode(worker, mutate(encode_request(body), ops), broker_versions=True)


@pytest.mark.parametrize("key_version", ROUND_TRIP_VERSIONS, ids=lambda kv: f"key{kv[0]}v{kv[1]}")
def test_every_truncation_of_a_valid_request(key_version: tuple[int, int]) -> None:
    """Truncating never enlarges a count, so this is safe to decode in this process."""
    frame = encode_request(EXAMPLES[key_version])
    for end in range(len(frame)):
        start = time.monotonic()
        try:
            result = decode_request(frame[:end], SUPPORTED)
        except (UnsupportedVersionError, CorruptRequestError) as exc:
            assert not isinstance(exc.__cause__, (MemoryError, RecursionError)), exc
        else:
            # A prefix may decode (trailing optional fields), but only as the same API.
            assert (result.api_key, result.api_version) == key_version
        assert time.monotonic() - start < 0.5
