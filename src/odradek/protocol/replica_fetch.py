"""The follower's side of Fetch v13 by hand: the request a replica fetcher sends and the
answer it reads (what Odradek brokers speak to each other; other versions go through
kio's generic path, client/codec.py).

v13, not v12, for its topic ids (KIP-516), as Kafka's followers fetch: a follower whose
metadata still has a deleted topic fetches that topic's id, and the leader of a new
topic of the same name answers UNKNOWN_TOPIC_ID rather than the new topic's batches
(by name, v12, the follower was answered with them: appended to the old log, or
counted as caught up on it; the fault tier's topic churn found it).

A follower sends one Fetch per round trip with its leader, and through kio each cost
~10% of a replicating cluster's CPU (building the request's dataclasses from plain
values, kio's generic writer, the guard's walk and kio's reader over the answer). Here
the request is packed with ``struct`` from a ``protocol.fetch.FetchRequestBody`` (the
same type the broker's reader gives), and the answer is read with the bounds-checked
``Reader``: every count and length is checked against the bytes present before anything
is taken, a null where the schema has none is refused, and every failure is one
exception, ``FetchResponseError``. tests/protocol/test_replica_fetch.py checks both
against kio's writer and reader on random messages; the fuzz tier's ``fetch_response``
target runs this reader beside kio's.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Mapping
from typing import NamedTuple

from kio.schema.errors import ErrorCode

from odradek.protocol.fetch import FetchRequestBody
from odradek.protocol.framing import encode_uvarint
from odradek.protocol.reader import DecodeError, Reader, uuid_field

VERSION = 13  # followers fetch by topic id (see above)

_HEAD = struct.Struct(">ihhih")  # size, api key, version, correlation id, client id length
_LIMITS = struct.Struct(">iiiibii")  # replica, max wait, min/max bytes, isolation, session
_PARTITION = struct.Struct(">iiqiqib")  # ... partition max bytes, no tagged fields
_I32 = struct.Struct(">i")
_ANSWER_TOP = struct.Struct(">ihi")  # throttle time, error code, session id
_ANSWER_PARTITION = struct.Struct(">ihqqq")  # index, error, hw, last stable, log start
_ABORTED = 16  # producer id, first offset (+ a tagged-fields byte)
_UVARINT = [encode_uvarint(n) for n in range(128)]
_ERRORS: dict[int, ErrorCode] = {int(code.value): code for code in ErrorCode}


class FetchResponseError(DecodeError):
    """Bytes that are not the Fetch answer they claim to be."""


class FetchedPartition(NamedTuple):
    partition_index: int
    error_code: ErrorCode
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    records: bytes | memoryview | None  # a view of the answer frame


class FetchedTopic(NamedTuple):
    topic: str  # the name the fetcher knows for the id ("" for an id it does not know)
    partitions: list[FetchedPartition]
    topic_id: uuid.UUID | None = None


class FetchAnswer(NamedTuple):
    """Fetch v13's response body, with kio's field names (what the fetcher reads)."""

    throttle_time_ms: int
    error_code: ErrorCode
    session_id: int
    responses: list[FetchedTopic]


def _uvarint(n: int) -> bytes:
    return _UVARINT[n] if n < 128 else encode_uvarint(n)


def _compact_string(text: str) -> bytes:
    data = text.encode()
    return _uvarint(len(data) + 1) + data


_NO_ID = bytes(16)


def _id(topic_id: uuid.UUID | None) -> bytes:
    return _NO_ID if topic_id is None else topic_id.bytes


def encode_fetch_request(correlation_id: int, client_id: str, body: FetchRequestBody
                         ) -> bytes:
    """One Fetch v13 request frame (size prefix, request header v2, body): topics and
    forgotten topics by their ``topic_id`` (the zero id where it is None)."""
    client = client_id.encode()
    out = [b"", client, b"\x00",  # the head goes first once the size is known
           _LIMITS.pack(body.replica_id, body.max_wait, body.min_bytes, body.max_bytes,
                        body.isolation_level, body.session_id, body.session_epoch),
           _uvarint(len(body.topics) + 1)]
    pack = _PARTITION.pack
    for topic in body.topics:
        out.append(_id(topic.topic_id))
        out.append(_uvarint(len(topic.partitions) + 1))
        for p in topic.partitions:
            out.append(pack(p.partition, p.current_leader_epoch, p.fetch_offset,
                            p.last_fetched_epoch, p.log_start_offset, p.partition_max_bytes,
                            0))
        out.append(b"\x00")
    out.append(_uvarint(len(body.forgotten_topics_data) + 1))
    for forgotten in body.forgotten_topics_data:
        out.append(_id(forgotten.topic_id))
        out.append(_uvarint(len(forgotten.partitions) + 1))
        out.extend(_I32.pack(p) for p in forgotten.partitions)
        out.append(b"\x00")
    out.append(_compact_string(body.rack_id))
    out.append(b"\x00")  # no ClusterId (tag 0)
    size = sum(map(len, out)) + _HEAD.size - 4
    out[0] = _HEAD.pack(size, 1, VERSION, correlation_id, len(client))
    return b"".join(out)


def _error(code: int, r: Reader) -> ErrorCode:
    found = _ERRORS.get(code)
    if found is None:
        raise r.error(f"unknown error code {code}")
    return found


def decode_fetch_response(payload: bytes | memoryview, correlation_id: int,
                          names: Mapping[uuid.UUID, str] | None = None) -> FetchAnswer:
    """A Fetch v13 response frame without its size prefix (response header v1, body),
    answering request ``correlation_id``; FetchResponseError if it is not one. Each
    topic's id is named from ``names`` ("" for one not there)."""
    names = names or {}
    r = Reader(payload if isinstance(payload, memoryview) else memoryview(payload), 0,
               FetchResponseError)
    got = r.int32()
    if got != correlation_id:
        raise r.error(f"an answer to request {got}, not {correlation_id}")
    r.skip_tagged_fields()
    throttle_ms, code, session_id = r.unpack(_ANSWER_TOP)
    top_error = _error(code, r)
    responses = []
    for _ in range(r.count(True, 17)):
        topic_id = uuid_field(r.view(16))  # the zero id reads as None, as kio reads it
        name = names.get(topic_id, "") if topic_id is not None else ""
        partitions = []
        for _ in range(r.count(True, _ANSWER_PARTITION.size + 7)):
            index, code, hw, lso, start = r.unpack(_ANSWER_PARTITION)
            error = _error(code, r)
            n = r.uvarint() - 1  # aborted transactions: a follower reads them as data
            if n >= 0:
                for _ in range(r.check_count(n, _ABORTED + 1)):
                    r.take(_ABORTED)
                    r.skip_tagged_fields()
            r.int32()  # preferred read replica: none between brokers
            length = r.uvarint() - 1
            # A view of the frame: the follower writes it to its log without a copy.
            records = None if length < 0 else r.view(length)
            r.skip_tagged_fields()
            partitions.append(FetchedPartition(index, error, hw, lso, start, records))
        r.skip_tagged_fields()
        responses.append(FetchedTopic(name, partitions, topic_id))
    r.skip_tagged_fields()
    if r.pos != r.end:
        raise r.error(f"{r.end - r.pos} bytes after the answer")
    return FetchAnswer(throttle_ms, top_error, session_id, responses)
