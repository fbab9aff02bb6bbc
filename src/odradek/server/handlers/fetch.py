"""Fetch (1): whole record batches from each partition, sent with ``sendfile``.

- Limits as Kafka applies them: ``max_bytes`` for the response, ``partition_max_bytes``
  per partition, and the first partition with data may exceed both by one batch so that a
  consumer never gets stuck behind a batch larger than its limits (v3+ semantics).
- Long poll: with less than ``min_bytes`` to return, the fetch waits in the purgatory
  until an append to one of its partitions or ``max_wait`` (woken by appends, no timers).
- Incremental fetch sessions (KIP-227, v7+): a session remembers the partitions and
  offsets of a consumer; later requests send only what changed, and responses leave out
  partitions with nothing new.
- The response is encoded here by hand, not through kio, because its record sections are
  file regions: the header bytes are built in Python and each partition's records go from
  the segment file to the socket without passing through Python.
"""

from __future__ import annotations

import itertools
import struct
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from odradek.protocol.codec import Request
from odradek.protocol.framing import encode_uvarint
from odradek.protocol.messages import ms
from odradek.server.errors import error_code
from odradek.server.handlers.base import UNKNOWN_TOPIC_OR_PARTITION, Api
from odradek.storage.errors import OffsetOutOfRangeError
from odradek.storage.log import FileRegion
from odradek.storage.txn_index import AbortedTxn

if TYPE_CHECKING:
    from odradek.server.broker import Broker

FETCH_SESSION_ID_NOT_FOUND = 70
INVALID_FETCH_SESSION_EPOCH = 71
FINAL_EPOCH = -1
INITIAL_EPOCH = 0
# Kafka's max.incremental.fetch.session.cache.slots: sessions kept at once (the least
# recently used one is evicted), so memory stays bounded whatever clients do.
MAX_SESSIONS = 1000

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_PARTITION_V4 = struct.Struct(">ihqq")  # index, error, high watermark, last stable offset
_I64 = struct.Struct(">q")
_ABORTED = struct.Struct(">qq")  # producer id, first offset

TopicPartition = tuple[str, int]


@dataclass(slots=True)
class PartitionFetch:
    fetch_offset: int
    max_bytes: int
    # What the last response told the client, for incremental responses.
    sent_high_watermark: int = -1
    sent_log_start: int = -1
    sent_last_stable: int = -1


@dataclass(slots=True)
class FetchSession:
    session_id: int
    epoch: int  # the epoch the next request must carry
    partitions: dict[TopicPartition, PartitionFetch] = field(default_factory=dict)


class FetchSessionCache:
    def __init__(self) -> None:
        self.sessions: OrderedDict[int, FetchSession] = OrderedDict()
        self._ids = itertools.count()

    def create(self) -> FetchSession:
        # Ids are positive int32s; 0 means "no session" on the wire.
        session = FetchSession(next(self._ids) % 0x7FFFFFFF + 1, 1)
        self.sessions[session.session_id] = session
        while len(self.sessions) > MAX_SESSIONS:
            self.sessions.popitem(last=False)
        return session

    def get(self, session_id: int) -> FetchSession | None:
        session = self.sessions.get(session_id)
        if session is not None:
            self.sessions.move_to_end(session_id)
        return session


@dataclass(slots=True)
class PartitionResult:
    topic: str
    partition: int
    error: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    region: FileRegion | None
    # read_committed: the aborted transactions of what is returned (None: not asked)
    aborted: list[AbortedTxn] | None = None


def _read(broker: Broker, wanted: list[tuple[TopicPartition, PartitionFetch]],
          max_bytes: int, read_committed: bool) -> tuple[list[PartitionResult], int]:
    results = []
    total = 0
    for (topic, partition), state in wanted:
        lg = broker.get_log(topic, partition)
        if lg is None:
            results.append(PartitionResult(topic, partition, UNKNOWN_TOPIC_OR_PARTITION,
                                           -1, -1, -1, None))
            continue
        budget = min(state.max_bytes, max_bytes - total)
        region = None
        aborted: list[AbortedTxn] | None = [] if read_committed else None
        try:
            if (budget > 0 or total == 0) and read_committed:
                # Only below the last stable offset, with the aborted transactions of
                # the range, so the client can drop their records (KIP-98).
                committed = lg.read_committed(state.fetch_offset, max(budget, 0),
                                              min_one=total == 0)
                read = committed.result
                region, aborted = read.region, committed.aborted
                hw, start, lso = (read.log_end_offset, read.log_start_offset,
                                  committed.last_stable_offset)
            elif budget > 0 or total == 0:
                read = lg.read(state.fetch_offset, max(budget, 0), min_one=total == 0)
                region = read.region
                # Read after the batches: an append in between may have moved it past
                # the high watermark this answer names.
                hw, start, lso = (read.log_end_offset, read.log_start_offset,
                                  min(lg.last_stable_offset, read.log_end_offset))
            else:
                hw, start = lg.log_end_offset, lg.log_start_offset
                lso = min(lg.last_stable_offset, hw)
            error = 0
        except OffsetOutOfRangeError as exc:
            error, hw, start = error_code(exc), exc.log_end_offset, exc.log_start_offset
            lso, aborted = hw, None
        if region is not None:
            total += region.length
        results.append(PartitionResult(topic, partition, error, hw, lso, start, region,
                                       aborted))
    return results, total


async def handle(broker: Broker, request: Request) -> list[bytes | FileRegion]:
    body = request.body
    version = request.api_version
    cache = broker.fetch_sessions
    requested = [
        ((t.topic, p.partition), PartitionFetch(p.fetch_offset, p.partition_max_bytes))
        for t in body.topics for p in t.partitions
    ]
    session_id = getattr(body, "session_id", 0)
    epoch = getattr(body, "session_epoch", FINAL_EPOCH)
    session: FetchSession | None = None
    incremental = False
    if version >= 7 and session_id == 0 and epoch == INITIAL_EPOCH:
        session = cache.create()
        session.partitions.update(requested)
    elif version >= 7 and session_id != 0:
        if epoch == FINAL_EPOCH:
            cache.sessions.pop(session_id, None)
        else:
            session = cache.get(session_id)
            if session is None:
                return _error_response(request, FETCH_SESSION_ID_NOT_FOUND)
            if epoch != session.epoch:
                return _error_response(request, INVALID_FETCH_SESSION_EPOCH)
            session.epoch += 1
            for forgotten in getattr(body, "forgotten_topics_data", ()):
                for p in forgotten.partitions:
                    session.partitions.pop((forgotten.topic, p), None)
            for tp, state in requested:
                old = session.partitions.get(tp)
                if old is not None:
                    state.sent_high_watermark = old.sent_high_watermark
                    state.sent_log_start = old.sent_log_start
                    state.sent_last_stable = old.sent_last_stable
                session.partitions[tp] = state
            incremental = True
    elif version >= 7 and session_id == 0 and epoch != FINAL_EPOCH:
        return _error_response(request, INVALID_FETCH_SESSION_EPOCH)
    wanted = list(session.partitions.items()) if session is not None else requested

    max_bytes = getattr(body, "max_bytes", 2**31 - 1)
    min_bytes = body.min_bytes
    deadline = time.monotonic() + ms(body.max_wait) / 1000
    read_committed = getattr(body, "isolation_level", 0) == 1
    results, total = _read(broker, wanted, max_bytes, read_committed)
    while (total < min_bytes and not any(r.error for r in results)
           and not broker.stopping):
        left = deadline - time.monotonic()
        if left <= 0:
            break
        await broker.purgatory.wait([tp for tp, _ in wanted], left)
        results, total = _read(broker, wanted, max_bytes, read_committed)

    if incremental and session is not None:
        kept = []
        for r in results:
            state = session.partitions[(r.topic, r.partition)]
            changed = (r.region is not None or r.error or
                       r.high_watermark != state.sent_high_watermark or
                       r.last_stable_offset != state.sent_last_stable or
                       r.log_start_offset != state.sent_log_start)
            if changed:
                kept.append(r)
        results = kept
    if session is not None:
        for r in results:
            state = session.partitions.get((r.topic, r.partition))
            if state is not None:
                state.sent_high_watermark = r.high_watermark
                state.sent_log_start = r.log_start_offset
                state.sent_last_stable = r.last_stable_offset
    return encode_fetch_response(request, results,
                                 session.session_id if session is not None else 0,
                                 read_committed)


def _error_response(request: Request, code: int) -> list[bytes | FileRegion]:
    return encode_fetch_response(request, [], 0, False, error=code)


# --- the response, by hand ---------------------------------------------------------------


def encode_fetch_response(request: Request, results: list[PartitionResult], session_id: int,
                          read_committed: bool, error: int = 0) -> list[bytes | FileRegion]:
    """Fetch response v4..12 as parts: bytes, and file regions for record sections."""
    version = request.api_version
    flexible = version >= 12
    parts: list[bytes | FileRegion] = []
    buf = bytearray()
    buf += _I32.pack(request.correlation_id)
    if flexible:
        buf += b"\x00"  # response header v1: no tagged fields
    buf += _I32.pack(0)  # throttle_time_ms
    if version >= 7:
        buf += _I16.pack(error) + _I32.pack(session_id)
    by_topic: dict[str, list[PartitionResult]] = {}
    for r in results:
        by_topic.setdefault(r.topic, []).append(r)
    buf += encode_uvarint(len(by_topic) + 1) if flexible else _I32.pack(len(by_topic))
    for topic, partitions in by_topic.items():
        name = topic.encode()
        buf += (encode_uvarint(len(name) + 1) if flexible else _I16.pack(len(name))) + name
        buf += encode_uvarint(len(partitions) + 1) if flexible else _I32.pack(len(partitions))
        for r in partitions:
            buf += _PARTITION_V4.pack(r.partition, r.error, r.high_watermark,
                                      r.last_stable_offset)
            if version >= 5:
                buf += _I64.pack(r.log_start_offset)
            # aborted transactions: null for read_uncommitted (and errors), else the
            # (producer id, first offset) of each aborted transaction in the range
            aborted = r.aborted
            if aborted is None:
                buf += b"\x00" if flexible else _I32.pack(-1)
            else:
                buf += (encode_uvarint(len(aborted) + 1) if flexible
                        else _I32.pack(len(aborted)))
                for txn in aborted:
                    buf += _ABORTED.pack(txn.producer_id, txn.first_offset)
                    if flexible:
                        buf += b"\x00"
            if version >= 11:
                buf += _I32.pack(-1)  # preferred read replica: none
            length = r.region.length if r.region is not None else 0
            buf += encode_uvarint(length + 1) if flexible else _I32.pack(length)
            if r.region is not None:
                parts.append(bytes(buf))
                parts.append(r.region)
                buf = bytearray()
            if flexible:
                buf += b"\x00"  # partition tagged fields
        if flexible:
            buf += b"\x00"  # topic tagged fields
    if flexible:
        buf += b"\x00"  # response tagged fields
    parts.append(bytes(buf))
    size = sum(p.length if isinstance(p, FileRegion) else len(p) for p in parts)
    parts[0] = _I32.pack(size) + parts[0]
    return parts


API = Api(1, "Fetch", 4, 12, handle)
