"""Fetch requests (v4-v18) decoded by hand.

Fetch is the other request on the data path: every consumer sends one per round trip.
Through the guard and kio it cost ~25 us per request, and the first one of each version
made kio import and build the version's dataclasses (~150 ms of CPU inside the first
consumer's first fetch). This reader walks Kafka's FetchRequest.json layout (request
header v1, or v2 with tagged fields from v12; ClusterId, a tagged field, is skipped) with
``struct``, every length checked against the bytes present. tests/protocol/test_fetch.py
checks it against kio's reader on random requests and on every truncation.

The objects it returns carry kio's field names (``max_wait`` in milliseconds), so the
handler reads them the same way. From v13 a topic is named by its id (KIP-516): the
reader gives the id and an empty name, for the handler to resolve; from v15 a
follower's id comes in the tagged ReplicaState (KIP-903) instead of ``replica_id``;
v17's replica directory id and v18's follower high watermark (partition tags 0 and 1)
are read too. Which versions are served is the handler's to say (its ``Api``).
"""

from __future__ import annotations

import struct
import uuid
from typing import NamedTuple

from odradek.protocol.reader import DecodeError, Reader, read_header, uuid_field

_LIMITS = struct.Struct(">iiii")  # replica id, max wait ms, min bytes, max bytes
_LIMITS_V15 = struct.Struct(">iii")  # max wait ms, min bytes, max bytes (v15+)
_SESSION = struct.Struct(">ii")  # session id, session epoch
_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_REPLICA_STATE = struct.Struct(">iq")  # replica id, replica epoch (v15+, tag 1)

MIN_VERSION = 4  # isolation level, record batches
MAX_VERSION = 18  # what this reader knows; what is served is the handler's Api
VERSIONS = range(MIN_VERSION, MAX_VERSION + 1)
TOPIC_IDS_FROM = 13  # KIP-516: topics named by id
REPLICA_STATE_FROM = 15  # KIP-903: the replica id moves into a tagged ReplicaState
NO_HIGH_WATERMARK = 2**63 - 1  # v18's default: the fetcher does not send one


class FetchDecodeError(DecodeError):
    """Bytes that are not the Fetch request they claim to be."""


class FetchPartition(NamedTuple):
    partition: int
    current_leader_epoch: int
    fetch_offset: int
    last_fetched_epoch: int
    log_start_offset: int
    partition_max_bytes: int
    replica_directory_id: uuid.UUID | None = None  # v17+, tag 0 (KIP-853)
    high_watermark: int = NO_HIGH_WATERMARK  # v18+, tag 1: a follower's


class FetchTopic(NamedTuple):
    topic: str  # v13+: empty until the handler resolves ``topic_id``
    partitions: list[FetchPartition]
    topic_id: uuid.UUID | None = None  # v13+ (the zero id reads as None, as kio reads it)


class ForgottenTopic(NamedTuple):
    topic: str
    partitions: list[int]
    topic_id: uuid.UUID | None = None  # v13+


class ReplicaState(NamedTuple):
    replica_id: int
    replica_epoch: int


def _v4(f: tuple[int, ...]) -> FetchPartition:
    return FetchPartition(f[0], -1, f[1], -1, -1, f[2])


def _v5(f: tuple[int, ...]) -> FetchPartition:
    return FetchPartition(f[0], -1, f[1], -1, f[2], f[3])


def _v9(f: tuple[int, ...]) -> FetchPartition:
    return FetchPartition(f[0], f[1], f[2], -1, f[3], f[4])


def _v12(f: tuple[int, ...]) -> FetchPartition:
    return FetchPartition(f[0], f[1], f[2], f[3], f[4], f[5])


# A partition's fixed fields per version: partition, [current leader epoch v9+], fetch
# offset, [last fetched epoch v12+], [log start offset v5+], partition max bytes.
_PARTITION = {
    v: (struct.Struct(fmt), fill) for v, fmt, fill in (
        (4, ">iqi", _v4), *((v, ">iqqi", _v5) for v in range(5, 9)),
        *((v, ">iiqqi", _v9) for v in range(9, 12)),
        *((v, ">iiqiqi", _v12) for v in range(12, MAX_VERSION + 1)))
}


class FetchRequestBody(NamedTuple):
    replica_id: int  # v15+: ReplicaState's (-1 without one: a consumer)
    max_wait: int  # milliseconds
    min_bytes: int
    max_bytes: int
    isolation_level: int
    session_id: int
    session_epoch: int
    topics: list[FetchTopic]
    forgotten_topics_data: list[ForgottenTopic]
    rack_id: str
    replica_epoch: int = -1  # v15+: ReplicaState's

    @property
    def replica_state(self) -> ReplicaState:
        """v15+'s tagged ReplicaState (kio's name for the two fields above)."""
        return ReplicaState(self.replica_id, self.replica_epoch)


def decode_fetch(frame: bytes | bytearray | memoryview,
                 ) -> tuple[int, int, str | None, FetchRequestBody]:
    """(api version, correlation id, client id, body) of a Fetch v4-v18 frame."""
    try:
        decoded = _decode_common(frame)
    except (struct.error, IndexError, UnicodeDecodeError):
        decoded = None  # cut short or not UTF-8: the careful reader says what is wrong
    return decoded if decoded is not None else _decode_careful(frame)


_HEADER = struct.Struct(">hhih")  # api key, api version, correlation id, client id length
_LIMITS_ISOLATION = struct.Struct(">iiiib")  # _LIMITS, then isolation level
_LIMITS_ISOLATION_V15 = struct.Struct(">iiib")  # the same without the replica id


def _decode_common(frame: bytes | bytearray | memoryview,
                   ) -> tuple[int, int, str | None, FetchRequestBody] | None:
    """The requests consumers send, read with as few Python steps as possible: each
    fixed run of fields in one unpack, one-byte compact lengths, no tagged fields but
    ClusterId's absence. None for anything else, and for anything the careful reader
    would refuse (which then says why). A read past the end raises struct.error or
    IndexError, and a slice is taken only after its length was checked, so nothing
    beyond the frame is ever read as a field."""
    end = len(frame)
    key, version, correlation_id, n = _HEADER.unpack_from(frame, 0)
    if key != 1 or not MIN_VERSION <= version <= MAX_VERSION:
        return None
    pos = 10
    if n < 0:
        if n != -1:
            return None
        client_id = None
    else:
        if pos + n > end:
            return None
        client_id = str(frame[pos : pos + n], "utf-8")
        pos += n
    flexible = version >= 12
    if flexible:
        if frame[pos]:  # tagged fields in the header
            return None
        pos += 1
    if version >= REPLICA_STATE_FROM:  # no replica id: a follower's is a tagged field
        replica_id = -1
        max_wait, min_bytes, max_bytes, isolation_level = _LIMITS_ISOLATION_V15.unpack_from(
            frame, pos)
        pos += 13
    else:
        replica_id, max_wait, min_bytes, max_bytes, isolation_level = (
            _LIMITS_ISOLATION.unpack_from(frame, pos))
        pos += 17
    by_id = version >= TOPIC_IDS_FROM
    if version >= 7:
        session_id, session_epoch = _SESSION.unpack_from(frame, pos)
        pos += 8
    else:
        session_id, session_epoch = 0, -1
    layout, fill = _PARTITION[version]
    unpack, size = layout.unpack_from, layout.size
    # Arrays and strings: compact (one byte, length + 1) when flexible, else int32/int16.
    if flexible:
        count = frame[pos] - 1
        pos += 1
        least = 3
    else:
        (count,) = _I32.unpack_from(frame, pos)
        pos += 4
        least = 6
    if count < 0 or count > 0x7E or count * least > end - pos:
        return None
    topics = []
    for _ in range(count):
        topic_id = None
        if by_id:
            if pos + 16 > end:
                return None
            topic_id = uuid_field(frame[pos : pos + 16])
            name = ""
            pos += 16
        else:
            if flexible:
                n = frame[pos] - 1
                pos += 1
                if n > 0x7E:
                    return None
            else:
                (n,) = _I16.unpack_from(frame, pos)
                pos += 2
            if n < 0 or pos + n > end:
                return None
            name = str(frame[pos : pos + n], "utf-8")
            pos += n
        if flexible:
            parts = frame[pos] - 1
            pos += 1
        else:
            (parts,) = _I32.unpack_from(frame, pos)
            pos += 4
        if parts < 0 or parts > 0x7E or parts * size > end - pos:
            return None
        partitions = []
        for _ in range(parts):
            partitions.append(fill(unpack(frame, pos)))
            pos += size
            if flexible:
                if frame[pos]:
                    return None
                pos += 1
        if flexible:
            if frame[pos]:
                return None
            pos += 1
        topics.append(FetchTopic(name, partitions, topic_id))
    forgotten: list[ForgottenTopic] = []
    if version >= 7:
        if flexible:
            count = frame[pos] - 1
            pos += 1
        else:
            (count,) = _I32.unpack_from(frame, pos)
            pos += 4
        if count:  # a session dropping partitions: rare, read carefully
            return None
    rack_id = ""
    if version >= 11:
        if flexible:
            n = frame[pos] - 1
            pos += 1
            if n > 0x7E:
                return None
        else:
            (n,) = _I16.unpack_from(frame, pos)
            pos += 2
        if n < 0 or pos + n > end:
            return None
        rack_id = str(frame[pos : pos + n], "utf-8")
        pos += n
    if flexible and frame[pos]:  # ClusterId (tag 0) or others
        return None
    return version, correlation_id, client_id, FetchRequestBody(
        replica_id, max_wait, min_bytes, max_bytes, isolation_level, session_id,
        session_epoch, topics, forgotten, rack_id)


def _decode_careful(frame: bytes | bytearray | memoryview,
                    ) -> tuple[int, int, str | None, FetchRequestBody]:
    """Any Fetch v4-v18 frame, every field through the bounds-checked reader; the
    errors say what is wrong."""
    r, header = read_header(frame, 1, VERSIONS, 12, FetchDecodeError)
    flexible, version = header.flexible, header.version
    if version >= REPLICA_STATE_FROM:
        replica_id = -1
        max_wait, min_bytes, max_bytes = r.unpack(_LIMITS_V15)
    else:
        replica_id, max_wait, min_bytes, max_bytes = r.unpack(_LIMITS)
    (isolation_level,) = r.unpack(_I8)
    session_id, session_epoch = (
        r.unpack(_SESSION) if version >= 7 else (0, -1))
    layout, fill = _PARTITION[version]
    size = layout.size
    by_id = version >= TOPIC_IDS_FROM
    least = 17 if by_id else 3 if flexible else 6  # the smallest topic entry
    topics = []
    for _ in range(r.count(flexible, least)):
        topic_id = uuid_field(r.view(16)) if by_id else None
        name = "" if by_id else r.string_field(flexible, nullable=False)
        partitions = []
        for _ in range(r.count(flexible, size)):
            # One unpack for the partition's fixed fields; the ones this version lacks
            # get Kafka's defaults.
            p = fill(r.unpack(layout))
            if flexible:
                tags = r.tagged_fields()
                if tags and version >= 17:
                    p = _partition_tags(r, p, tags, version)
            partitions.append(p)
        if flexible:
            r.skip_tagged_fields()
        topics.append(FetchTopic(name, partitions, topic_id))
    forgotten = []
    if version >= 7:
        for _ in range(r.count(flexible, least)):
            topic_id = uuid_field(r.view(16)) if by_id else None
            name = "" if by_id else r.string_field(flexible, nullable=False)
            ids = [r.int32() for _ in range(r.count(flexible, 4))]
            if flexible:
                r.skip_tagged_fields()
            forgotten.append(ForgottenTopic(name, ids, topic_id))
    rack_id = r.string_field(flexible, nullable=False) if version >= 11 else ""
    replica_epoch = -1
    if flexible:
        tags = r.tagged_fields()  # ClusterId (tag 0) is not used; ReplicaState is
        state = tags.get(1) if version >= REPLICA_STATE_FROM else None
        if state is not None:
            replica_id, replica_epoch = _tagged_struct(r, state, _REPLICA_STATE)
    return version, header.correlation_id, header.client_id, FetchRequestBody(
        replica_id, max_wait, min_bytes, max_bytes, isolation_level, session_id,
        session_epoch, topics, forgotten, rack_id, replica_epoch)


def _tagged_struct(r: Reader, field: memoryview, layout: struct.Struct) -> tuple:
    """A tagged field holding a struct of fixed fields (and its own tagged fields)."""
    inner = Reader(field, 0, r.error)
    values = inner.unpack(layout)
    inner.skip_tagged_fields()
    return values


def _partition_tags(r: Reader, p: FetchPartition, tags: dict[int, memoryview],
                    version: int) -> FetchPartition:
    """v17's replica directory id (tag 0) and v18's high watermark (tag 1)."""
    directory = tags.get(0)
    if directory is not None:
        if len(directory) != 16:
            raise r.error(f"a replica directory id of {len(directory)} bytes")
        p = p._replace(replica_directory_id=uuid_field(directory))
    watermark = tags.get(1) if version >= 18 else None
    if watermark is not None:
        if len(watermark) != 8:
            raise r.error(f"a high watermark of {len(watermark)} bytes")
        p = p._replace(high_watermark=_I64.unpack(watermark)[0])
    return p
