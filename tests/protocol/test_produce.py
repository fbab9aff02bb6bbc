"""The hand-written Produce reader agrees with kio's on every version it reads, leaves the
records in the frame, and refuses every truncated or inflated request with one error."""

from __future__ import annotations

import contextlib
import datetime
import io
import struct
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.index import load_request_schema
from kio.serial import entity_reader, entity_writer

from odradek.protocol.produce import (
    MAX_VERSION,
    MIN_VERSION,
    TOPIC_IDS_FROM,
    ProduceDecodeError,
    decode_produce,
)

VERSIONS = range(MIN_VERSION, MAX_VERSION + 1)


def schema_of(version: int) -> Any:
    produce = load_request_schema(0, version)
    topic = produce.__dataclass_fields__["topic_data"].type.__args__[0]
    partition = topic.__dataclass_fields__["partition_data"].type.__args__[0]
    return produce, topic, partition


def encode(version: int, body: Any, correlation_id: int, client_id: str | None) -> bytes:
    produce = load_request_schema(0, version)
    header_cls = produce.__header_schema__
    buf = io.BytesIO()
    entity_writer(header_cls)(buf, header_cls(request_api_key=0, request_api_version=version,
                                              correlation_id=correlation_id,
                                              client_id=client_id))
    entity_writer(produce)(buf, body)
    return buf.getvalue()


names = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=20)
# kio reads the zero id as None, as the reader does
topic_ids = st.none() | st.uuids().filter(lambda u: u.int != 0)


def named(topic: Any, version: int, name: str, topic_id: uuid.UUID | None,
          partition_data: tuple[Any, ...]) -> Any:
    """A topic of ``version``'s schema: by name, or from v13 by id."""
    if version >= TOPIC_IDS_FROM:
        return topic(topic_id=topic_id, partition_data=partition_data)
    return topic(name=name, partition_data=partition_data)


@st.composite
def requests(draw: st.DrawFn) -> tuple[int, Any, int, str | None]:
    version = draw(st.sampled_from(VERSIONS))
    produce, topic, partition = schema_of(version)
    body = produce(
        transactional_id=draw(st.none() | names),
        acks=draw(st.sampled_from([-1, 0, 1, 7])),
        timeout=datetime.timedelta(milliseconds=draw(st.integers(0, 2**31 - 1))),
        topic_data=tuple(
            named(topic, version, draw(names), draw(topic_ids), tuple(
                partition(index=draw(st.integers(-(2**31), 2**31 - 1)),
                          records=draw(st.none() | st.binary(max_size=300)))
                for _ in range(draw(st.integers(0, 3)))))
            for _ in range(draw(st.integers(0, 3)))),
    )
    return version, body, draw(st.integers(-(2**31), 2**31 - 1)), draw(st.none() | names)


def as_kio(version: int, decoded: Any) -> Any:
    produce, topic, partition = schema_of(version)
    return produce(
        transactional_id=decoded.transactional_id, acks=decoded.acks,
        timeout=datetime.timedelta(milliseconds=decoded.timeout_ms),
        topic_data=tuple(named(topic, version, t.name, t.topic_id, tuple(
            partition(index=p.index, records=None if p.records is None else bytes(p.records))
            for p in t.partition_data)) for t in decoded.topic_data))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(requests())
def test_agrees_with_kio_on_random_requests(request: tuple[int, Any, int, str | None]) -> None:
    version, body, correlation_id, client_id = request
    frame = encode(version, body, correlation_id, client_id)
    got_version, got_correlation, got_client, decoded = decode_produce(frame)
    assert (got_version, got_correlation, got_client) == (version, correlation_id, client_id)
    assert as_kio(version, decoded) == body
    # and kio reads the same frame the same way
    produce = load_request_schema(0, version)
    _, used = entity_reader(produce.__header_schema__)(frame, 0)
    assert entity_reader(produce)(frame, used)[0] == body


def test_records_are_views_of_the_frame_not_copies() -> None:
    produce, topic, partition = schema_of(9)
    body = produce(transactional_id=None, acks=1, timeout=datetime.timedelta(seconds=1),
                   topic_data=(topic(name="t", partition_data=(
                       partition(index=0, records=b"R" * 1000),)),))
    frame = bytearray(encode(9, body, 1, "c"))
    records = decode_produce(frame)[3].topic_data[0].partition_data[0].records
    assert isinstance(records, memoryview) and records.obj is frame
    frame[-1003] = ord("X")  # (then 3 bytes of tagged fields) the view sees the change
    assert bytes(records[:1]) == b"X"


@pytest.mark.parametrize("version", VERSIONS)
def test_every_truncation_is_refused(version: int) -> None:
    produce, topic, partition = schema_of(version)
    body = produce(transactional_id="tx", acks=-1, timeout=datetime.timedelta(seconds=5),
                   topic_data=(named(topic, version, "orders", uuid.uuid4(), (
                       partition(index=0, records=b"abc"), partition(index=1, records=None))),))
    frame = encode(version, body, 5, "client")
    for cut in range(len(frame)):
        with pytest.raises(ProduceDecodeError):
            decode_produce(frame[:cut])


@pytest.mark.parametrize("version", [3, 9, 13])
@pytest.mark.parametrize("what", ["topics", "partitions", "records"])
def test_claims_larger_than_the_request_are_refused(version: int, what: str) -> None:
    flexible = version >= 9
    header = struct.pack(">hhih", 0, version, 1, 1) + b"c" + (b"\x00" if flexible else b"")
    txn = b"\x00" if flexible else b"\xff\xff"
    acks = struct.pack(">hi", 1, 1000)
    huge = b"\xff\xff\xff\xff\x0f" if flexible else b"\x7f\xff\xff\xff"
    one = b"\x02" if flexible else struct.pack(">i", 1)
    name = (uuid.uuid4().bytes if version >= TOPIC_IDS_FROM else b"\x02t" if flexible
            else b"\x00\x01t")
    body = {
        "topics": huge,
        "partitions": one + name + huge,
        "records": one + name + one + struct.pack(">i", 0) + huge,
    }[what]
    with pytest.raises(ProduceDecodeError, match="claims"):
        decode_produce(header + txn + acks + body + b"\x00" * 16)


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=200), st.sampled_from(VERSIONS))
def test_random_bytes_after_a_header_raise_only_the_decode_error(tail: bytes, version: int) -> None:
    frame = struct.pack(">hhih", 0, version, 1, -1) + tail
    with contextlib.suppress(ProduceDecodeError):
        decode_produce(frame)


def test_other_requests_are_not_read_as_produce() -> None:
    with pytest.raises(ProduceDecodeError):
        decode_produce(struct.pack(">hhih", 1, 4, 1, -1) + bytes(50))
    for version in (2, MAX_VERSION + 1):
        with pytest.raises(ProduceDecodeError):
            decode_produce(struct.pack(">hhih", 0, version, 1, -1) + bytes(50))
