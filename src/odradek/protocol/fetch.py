"""Fetch requests (v4-v12) decoded by hand.

Fetch is the other request on the data path: every consumer sends one per round trip.
Through the guard and kio it cost ~25 us per request, and the first one of each version
made kio import and build the version's dataclasses (~150 ms of CPU inside the first
consumer's first fetch). This reader walks Kafka's FetchRequest.json layout (request
header v1, or v2 with tagged fields from v12; ClusterId, a tagged field, is skipped) with
``struct``, every length checked against the bytes present. tests/protocol/test_fetch.py
checks it against kio's reader on random requests and on every truncation.

The objects it returns carry kio's field names (``max_wait`` in milliseconds), so the
handler reads them the same way.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from odradek.protocol.reader import DecodeError, read_header

_LIMITS = struct.Struct(">iiii")  # replica id, max wait ms, min bytes, max bytes
_SESSION = struct.Struct(">ii")  # session id, session epoch
_I8 = struct.Struct(">b")

MIN_VERSION = 4  # isolation level, record batches
MAX_VERSION = 12  # v13 names topics by id (KIP-516), which this broker does not serve
VERSIONS = range(MIN_VERSION, MAX_VERSION + 1)


class FetchDecodeError(DecodeError):
    """Bytes that are not the Fetch request they claim to be."""


class FetchPartition(NamedTuple):
    partition: int
    current_leader_epoch: int
    fetch_offset: int
    last_fetched_epoch: int
    log_start_offset: int
    partition_max_bytes: int


class FetchTopic(NamedTuple):
    topic: str
    partitions: list[FetchPartition]


class ForgottenTopic(NamedTuple):
    topic: str
    partitions: list[int]


def _v4(f: tuple[int, ...]) -> FetchPartition:
    return FetchPartition(f[0], -1, f[1], -1, -1, f[2])


def _v5(f: tuple[int, ...]) -> FetchPartition:
    return FetchPartition(f[0], -1, f[1], -1, f[2], f[3])


def _v9(f: tuple[int, ...]) -> FetchPartition:
    return FetchPartition(f[0], f[1], f[2], -1, f[3], f[4])


def _v12(f: tuple[int, ...]) -> FetchPartition:
    return FetchPartition(*f)


# A partition's fixed fields per version: partition, [current leader epoch v9+], fetch
# offset, [last fetched epoch v12+], [log start offset v5+], partition max bytes.
_PARTITION = {
    v: (struct.Struct(fmt), fill) for v, fmt, fill in (
        (4, ">iqi", _v4), *((v, ">iqqi", _v5) for v in range(5, 9)),
        *((v, ">iiqqi", _v9) for v in range(9, 12)), (12, ">iiqiqi", _v12))
}


class FetchRequestBody(NamedTuple):
    replica_id: int
    max_wait: int  # milliseconds
    min_bytes: int
    max_bytes: int
    isolation_level: int
    session_id: int
    session_epoch: int
    topics: list[FetchTopic]
    forgotten_topics_data: list[ForgottenTopic]
    rack_id: str


def decode_fetch(frame: bytes | bytearray | memoryview,
                 ) -> tuple[int, int, str | None, FetchRequestBody]:
    """(api version, correlation id, client id, body) of a Fetch v4-v12 frame."""
    r, header = read_header(frame, 1, VERSIONS, 12, FetchDecodeError)
    flexible, version = header.flexible, header.version
    replica_id, max_wait, min_bytes, max_bytes = r.unpack(_LIMITS)
    (isolation_level,) = r.unpack(_I8)
    session_id, session_epoch = (
        r.unpack(_SESSION) if version >= 7 else (0, -1))
    layout, fill = _PARTITION[version]
    size = layout.size
    topics = []
    for _ in range(r.count(flexible, 3 if flexible else 6)):
        name = r.string_field(flexible, nullable=False)
        partitions = []
        for _ in range(r.count(flexible, size)):
            # One unpack for the partition's fixed fields; the ones this version lacks
            # get Kafka's defaults.
            partitions.append(fill(r.unpack(layout)))
            if flexible:
                r.skip_tagged_fields()
        if flexible:
            r.skip_tagged_fields()
        topics.append(FetchTopic(name, partitions))  # type: ignore[arg-type]
    forgotten = []
    if version >= 7:
        for _ in range(r.count(flexible, 3 if flexible else 6)):
            name = r.string_field(flexible, nullable=False)
            ids = [r.int32() for _ in range(r.count(flexible, 4))]
            if flexible:
                r.skip_tagged_fields()
            forgotten.append(ForgottenTopic(name, ids))  # type: ignore[arg-type]
    rack_id = r.string_field(flexible, nullable=False) if version >= 11 else ""
    if flexible:
        r.skip_tagged_fields()  # ClusterId (tag 0) among them
    return version, header.correlation_id, header.client_id, FetchRequestBody(
        replica_id, max_wait, min_bytes, max_bytes, isolation_level, session_id,
        session_epoch, topics, forgotten, rack_id)  # type: ignore[arg-type]
