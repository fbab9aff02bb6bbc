"""Produce requests (v3-v9) decoded by hand, with their records left where they arrived.

Produce is the request that carries the data, and the broker's hottest path: the generic
route (the claim guard, then kio's reader) costs 15-30 us per request and copies every
records field out of the frame. This reader walks the same layout (Kafka's
ProduceRequest.json: request header v1, or v2 with tagged fields from v9) with ``struct``,
checks every length against the bytes present (as the guard does), and hands each
partition's records out as a ``memoryview`` of the received frame: the log writes them
from there. tests/protocol/test_produce.py checks it against kio's reader on random
requests and on every truncation.

The objects it returns carry kio's field names, so handlers read them the same way.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

_HEADER = struct.Struct(">hhih")  # api key, api version, correlation id, client id length
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_ACKS_TIMEOUT = struct.Struct(">hi")

MIN_VERSION = 3  # record batches (message format v2)
MAX_VERSION = 9  # the last version without topic ids (v13) that this reader knows


class ProduceDecodeError(ValueError):
    """Bytes that are not the Produce request they claim to be."""


class PartitionProduceData(NamedTuple):
    index: int
    records: memoryview | None


class TopicProduceData(NamedTuple):
    name: str
    partition_data: list[PartitionProduceData]


class ProduceRequestBody(NamedTuple):
    transactional_id: str | None
    acks: int
    timeout_ms: int
    topic_data: list[TopicProduceData]


class _Reader:
    """A cursor over one frame; every read is bounds-checked."""

    __slots__ = ("buf", "end", "pos")

    def __init__(self, buf: memoryview, pos: int) -> None:
        self.buf = buf
        self.pos = pos
        self.end = len(buf)

    def take(self, n: int) -> int:
        """Claim n bytes; returns where they start."""
        pos = self.pos
        if n < 0 or pos + n > self.end:
            raise ProduceDecodeError(
                f"a field claims {n} bytes at byte {pos}; {self.end - pos} are left")
        self.pos = pos + n
        return pos

    def int16(self) -> int:
        return _I16.unpack_from(self.buf, self.take(2))[0]

    def int32(self) -> int:
        return _I32.unpack_from(self.buf, self.take(4))[0]

    def uvarint(self) -> int:
        value = shift = 0
        buf, pos, end = self.buf, self.pos, self.end
        while True:
            if pos >= end:
                raise ProduceDecodeError("a varint runs past the end of the request")
            byte = buf[pos]
            pos += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                self.pos = pos
                return value
            shift += 7
            if shift > 28:
                raise ProduceDecodeError("a varint longer than 5 bytes")

    def string(self, length: int, nullable: bool) -> str | None:
        if length < 0:
            if length == -1 and nullable:
                return None
            raise ProduceDecodeError(f"string length {length}")
        start = self.take(length)
        try:
            return str(self.buf[start : start + length], "utf-8")
        except UnicodeDecodeError as exc:
            raise ProduceDecodeError(f"a string is not UTF-8: {exc}") from None

    def count(self, flexible: bool, least_bytes: int) -> int:
        """An array's element count, refused if the bytes left cannot hold that many."""
        n = self.uvarint() - 1 if flexible else self.int32()
        if n < 0:
            raise ProduceDecodeError(f"array count {n} where an array is required")
        if n * least_bytes > self.end - self.pos:
            raise ProduceDecodeError(
                f"an array claims {n} elements; {self.end - self.pos} bytes are left")
        return n

    def skip_tagged_fields(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()  # tag: none is defined for Produce, all are skipped
            self.take(self.uvarint())


def decode_produce(frame: bytes | bytearray | memoryview,
                   ) -> tuple[int, int, str | None, ProduceRequestBody]:
    """(api version, correlation id, client id, body) of a Produce v3-v9 frame."""
    buf = memoryview(frame)
    if len(buf) < _HEADER.size:
        raise ProduceDecodeError(f"request of {len(buf)} bytes is shorter than its header")
    api_key, version, correlation_id, client_id_length = _HEADER.unpack_from(buf)
    if api_key != 0 or not MIN_VERSION <= version <= MAX_VERSION:
        raise ProduceDecodeError(f"not a Produce v3-v9 request (key {api_key} v{version})")
    flexible = version >= 9
    r = _Reader(buf, _HEADER.size)
    client_id = r.string(client_id_length, nullable=True)
    if flexible:
        r.skip_tagged_fields()
        transactional_id = r.string(r.uvarint() - 1, nullable=True)
    else:
        transactional_id = r.string(r.int16(), nullable=True)
    acks, timeout_ms = _ACKS_TIMEOUT.unpack_from(buf, r.take(_ACKS_TIMEOUT.size))
    topics = []
    # Least bytes per element: a topic is a name length and a partition count (and
    # tagged fields); a partition is an index and a records length (and tagged fields).
    for _ in range(r.count(flexible, 3 if flexible else 6)):
        name = r.string(r.uvarint() - 1 if flexible else r.int16(), nullable=False)
        partitions = []
        for _ in range(r.count(flexible, 6 if flexible else 8)):
            index = r.int32()
            size = r.uvarint() - 1 if flexible else r.int32()
            if size == -1:
                records = None
            else:
                start = r.take(size)
                records = buf[start : start + size]
            if flexible:
                r.skip_tagged_fields()
            partitions.append(PartitionProduceData(index, records))
        if flexible:
            r.skip_tagged_fields()
        topics.append(TopicProduceData(name, partitions))  # type: ignore[arg-type]
    if flexible:
        r.skip_tagged_fields()
    return version, correlation_id, client_id, ProduceRequestBody(
        transactional_id, acks, timeout_ms, topics)
