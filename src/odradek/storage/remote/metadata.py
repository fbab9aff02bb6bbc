"""Remote log metadata: what the remote tier holds of each partition, and in which state.

Kafka keeps this metadata in a topic of its own, ``__remote_log_metadata``, because
its remote storage managers are plugins and their stores opaque to it. Odradek keeps
it in the object store, next to the data it describes, one small JSON object per
segment, and does not run that topic. Why: the store is already the durable,
shared place every broker reaches; a broker whose disk is lost rebuilds what it
needs from the store alone; and there is no second copy to disagree with the data
(Kafka's topic and the store can drift apart when a broker dies between the two
writes, which is what its segment states are for). The states are Kafka's
(``RemoteLogSegmentState``), kept in that object:

- ``COPY_SEGMENT_STARTED``: written before the data objects. A segment in this state is
  never served; if its writer died, the next leader's remote log manager deletes it.
- ``COPY_SEGMENT_FINISHED``: written after the data objects, the commit point: from
  here on the segment is served and counts for local retention.
- ``DELETE_SEGMENT_STARTED``: written before the data objects go; not served; a
  manager that finds one finishes the deletion.
- ``DELETE_SEGMENT_FINISHED``: the metadata object itself is deleted last.

A segment's objects, under ``<key.prefix><topic>-<topic id>/<partition>/``:
``<base offset, 20 digits>-<segment id>.log`` (the segment file as it was on disk),
``.indexes`` (its offset, time and aborted-transaction indexes, producer snapshot and
leader-epoch entries in one object, as Aiven's plugin bundles them: one request
instead of five) and ``.json`` (this metadata).

Two copies of one offset range can both be FINISHED (two leaders racing through a
leadership change): below the high watermark every replica holds the same batches at
the same offsets, so either serves; ``serving_chain`` picks one per offset and the
manager deletes the other.
"""

from __future__ import annotations

import json
import struct
import uuid
from dataclasses import asdict, dataclass, replace

COPY_STARTED = "COPY_SEGMENT_STARTED"
COPY_FINISHED = "COPY_SEGMENT_FINISHED"
DELETE_STARTED = "DELETE_SEGMENT_STARTED"
STATES = (COPY_STARTED, COPY_FINISHED, DELETE_STARTED)

LOG_SUFFIX = ".log"
INDEXES_SUFFIX = ".indexes"
META_SUFFIX = ".json"

# The .indexes object: a header of five lengths, then the parts in this order.
INDEX_PARTS = ("offset", "time", "transaction", "producer_snapshot", "leader_epoch")
_LENGTHS = struct.Struct(">5I")


def partition_prefix(topic: str, topic_id: uuid.UUID | None, partition: int) -> str:
    """The key prefix of one partition's objects (the topic id keeps a re-created
    topic's segments apart from its predecessor's)."""
    ident = topic_id.hex if topic_id is not None else "no-id"
    return f"{topic}-{ident}/{partition}/"


@dataclass(frozen=True, slots=True)
class RemoteSegment:
    """One segment in the remote tier (Kafka's RemoteLogSegmentMetadata)."""

    segment_id: str
    base_offset: int
    end_offset: int  # its last offset
    max_timestamp: int
    size: int  # bytes of the .log object
    leader_epochs: tuple[tuple[int, int], ...]  # (epoch, start offset) within it
    state: str
    broker: int  # the broker that copied it
    writer: str  # the remote log manager instance that copied it
    event_ms: int  # when the state was written

    def key(self, prefix: str, suffix: str) -> str:
        return f"{prefix}{self.base_offset:020d}-{self.segment_id}{suffix}"

    def encode(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()

    def with_state(self, state: str, now_ms: int) -> RemoteSegment:
        return replace(self, state=state, event_ms=now_ms)

    @classmethod
    def decode(cls, data: bytes) -> RemoteSegment:
        raw = json.loads(data)
        if raw.get("state") not in STATES:
            raise ValueError(f"unknown segment state {raw.get('state')!r}")
        raw["leader_epochs"] = tuple((int(e), int(o)) for e, o in raw["leader_epochs"])
        return cls(**raw)

    @staticmethod
    def new_id() -> str:
        return uuid.uuid4().hex


def serving_chain(segments: list[RemoteSegment]) -> list[RemoteSegment]:
    """The FINISHED segments that serve reads, in offset order, each reaching past the
    one before (a segment whose range an earlier choice covers whole is left out: a
    duplicate from a leadership race, to be deleted)."""
    done = sorted((s for s in segments if s.state == COPY_FINISHED),
                  key=lambda s: (s.base_offset, -s.end_offset))
    chain: list[RemoteSegment] = []
    end = -1
    for seg in done:
        if seg.end_offset <= end:
            continue
        chain.append(seg)
        end = seg.end_offset
    return chain


def pack_indexes(parts: dict[str, bytes]) -> bytes:
    """The .indexes object of a segment from its parts (missing ones empty)."""
    blobs = [parts.get(name, b"") for name in INDEX_PARTS]
    return _LENGTHS.pack(*(len(b) for b in blobs)) + b"".join(blobs)


def unpack_indexes(data: bytes) -> dict[str, bytes]:
    if len(data) < _LENGTHS.size:
        raise ValueError(f"an indexes object of {len(data)} bytes has no header")
    lengths = _LENGTHS.unpack_from(data)
    if _LENGTHS.size + sum(lengths) != len(data):
        raise ValueError(f"an indexes object of {len(data)} bytes claims "
                         f"{_LENGTHS.size + sum(lengths)}")
    out, pos = {}, _LENGTHS.size
    for name, length in zip(INDEX_PARTS, lengths, strict=True):
        out[name] = data[pos:pos + length]
        pos += length
    return out
