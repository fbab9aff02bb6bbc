"""Produce requests (v3-v13) decoded by hand, with their records left where they arrived.

Produce is the request that carries the data, and the broker's hottest path: the generic
route (the claim guard, then kio's reader) costs 15-30 us per request and copies every
records field out of the frame. This reader walks the same layout (Kafka's
ProduceRequest.json: request header v1, or v2 with tagged fields from v9; topics by id
instead of name from v13) with ``struct``,
checks every length against the bytes present (as the guard does), and hands each
partition's records out as a ``memoryview`` of the received frame: the log writes them
from there. tests/protocol/test_produce.py checks it against kio's reader on random
requests and on every truncation.

The objects it returns carry kio's field names, so handlers read them the same way. A
v13 topic comes with its ``topic_id`` and an empty name: the handler resolves the id
(server/topic_ids.py), as for Fetch.
"""

from __future__ import annotations

import struct
import uuid
from typing import NamedTuple

from odradek.protocol.reader import DecodeError, read_header, uuid_field

_ACKS_TIMEOUT = struct.Struct(">hi")

MIN_VERSION = 3  # record batches (message format v2)
MAX_VERSION = 13
TOPIC_IDS_FROM = 13  # KIP-516: topics by id, not by name
VERSIONS = range(MIN_VERSION, MAX_VERSION + 1)


class ProduceDecodeError(DecodeError):
    """Bytes that are not the Produce request they claim to be."""


class PartitionProduceData(NamedTuple):
    # kio's field name: it replaces the tuple.index method, which mypy reports.
    index: int  # type: ignore[assignment]
    records: memoryview | None


class TopicProduceData(NamedTuple):
    name: str  # v13+: empty until the handler resolves ``topic_id``
    partition_data: list[PartitionProduceData]
    topic_id: uuid.UUID | None = None  # v13+ (the zero id reads as None, as kio reads it)


class ProduceRequestBody(NamedTuple):
    transactional_id: str | None
    acks: int
    timeout_ms: int
    topic_data: list[TopicProduceData]


def decode_produce(frame: bytes | bytearray | memoryview,
                   ) -> tuple[int, int, str | None, ProduceRequestBody]:
    """(api version, correlation id, client id, body) of a Produce v3-v13 frame."""
    r, header = read_header(frame, 0, VERSIONS, 9, ProduceDecodeError)
    flexible = header.flexible
    by_id = header.version >= TOPIC_IDS_FROM
    transactional_id = r.string_field(flexible, nullable=True)
    acks, timeout_ms = r.unpack(_ACKS_TIMEOUT)
    topics = []
    # Least bytes per element: a topic is a name length and a partition count (and
    # tagged fields), or from v13 an id and a count (and tagged fields); a partition is
    # an index and a records length (and tagged fields).
    for _ in range(r.count(flexible, 18 if by_id else 3 if flexible else 6)):
        if by_id:
            topic_id = uuid_field(r.view(16))
            name = ""
        else:
            topic_id = None
            name = r.string_field(flexible, nullable=False)
        partitions = []
        for _ in range(r.count(flexible, 6 if flexible else 8)):
            index = r.int32()
            size = r.uvarint() - 1 if flexible else r.int32()
            records = None if size == -1 else r.view(size)
            if flexible:
                r.skip_tagged_fields()
            partitions.append(PartitionProduceData(index, records))
        if flexible:
            r.skip_tagged_fields()
        topics.append(TopicProduceData(name, partitions, topic_id))
    if flexible:
        r.skip_tagged_fields()
    return header.version, header.correlation_id, header.client_id, ProduceRequestBody(
        transactional_id, acks, timeout_ms, topics)
