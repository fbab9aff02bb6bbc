"""Kafka's record layouts in the internal topic ``__transaction_state``.

One record per transactional id (the topic is compacted): the key is Kafka's
``TransactionLogKey`` version 0 — int16 version 0, then the transactional id as an int16
length + UTF-8 — and the value ``TransactionLogValue``: int16 version, then

    version 0 (what Kafka 3.x writes, and we write for transaction version 1):
        producer_id int64, producer_epoch int16, transaction_timeout_ms int32,
        transaction_status int8, transaction_partitions nullable array (int32 count,
        -1 for null) of [topic string, partition_ids array of int32],
        transaction_last_update_timestamp_ms int64, transaction_start_timestamp_ms int64
    version 1 (flexible, Kafka 4's; we write it for a transaction version 2 client): the
        same fields in compact encoding (unsigned varint length + 1), tagged fields at
        the end of each partition entry and of the value — tag 0 previous producer id
        (int64), tag 1 next producer id (int64), tag 2 client transaction version
        (int16), KIP-890 part 2; each left out at its default (-1, -1, 0).

A tombstone (null value) removes a transactional id. The status byte is the state's id
(``TxnState``). An ``Empty`` transaction's partitions are written as null, as Kafka does.
Layouts from Kafka's transaction-coordinator/src/main/resources/common/message/
TransactionLog{Key,Value}.json, so a log is replayable by either broker.

This module also owns which ``__transaction_state`` partition a transactional id lives
in (``partition_for``: ``Utils.abs(transactionalId.hashCode) %
transaction.state.log.num.partitions``).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from odradek.coordinator.offsets_topic import java_string_hashcode
from odradek.protocol.framing import encode_uvarint
from odradek.protocol.reader import DecodeError, Reader

TRANSACTION_STATE_TOPIC = "__transaction_state"
# transaction.state.log.num.partitions, Kafka's default.
DEFAULT_TRANSACTION_STATE_PARTITIONS = 50

KEY_VERSION = 0  # CoordinatorRecordType.TRANSACTION_LOG
VALUE_VERSION = 0  # the highest non-flexible version: what a Kafka 3.x broker reads
NO_TIMESTAMP = -1  # a transaction that has not started

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")
# The fixed head of a version 0/1 value after its version: producer id, epoch, timeout,
# status.
_HEAD = struct.Struct(
    ">q"  # producer_id
    "h"  # producer_epoch
    "i"  # transaction_timeout_ms
    "b"  # transaction_status
)
# The fixed tail: last update and start timestamps.
_TAIL = struct.Struct(
    ">q"  # transaction_last_update_timestamp_ms
    "q"  # transaction_start_timestamp_ms
)


class TransactionLogFormatError(DecodeError):
    """A ``__transaction_state`` record that does not decode (truncated, bad version)."""


@dataclass(frozen=True, slots=True)
class TransactionLogValue:
    producer_id: int
    producer_epoch: int
    transaction_timeout_ms: int
    status: int  # TxnState's id
    # topic -> partition ids; None is the null array of an Empty transaction.
    partitions: dict[str, list[int]] | None = field(default=None)
    last_update_timestamp_ms: int = NO_TIMESTAMP
    start_timestamp_ms: int = NO_TIMESTAMP
    # value version 1's tagged fields (KIP-890 part 2)
    previous_producer_id: int = -1
    next_producer_id: int = -1
    client_version: int = 0


def partition_for(
    transactional_id: str, num_partitions: int = DEFAULT_TRANSACTION_STATE_PARTITIONS
) -> int:
    """The ``__transaction_state`` partition holding ``transactional_id`` (and so the
    broker that coordinates it)."""
    h = java_string_hashcode(transactional_id)
    # Kafka's Utils.abs maps Integer.MIN_VALUE to 0 rather than overflowing.
    return (0 if h == -(1 << 31) else abs(h)) % num_partitions


# --- writing ---------------------------------------------------------------------------


def _string(s: str) -> bytes:
    raw = s.encode()
    return _INT16.pack(len(raw)) + raw


def encode_key(transactional_id: str) -> bytes:
    return _INT16.pack(KEY_VERSION) + _string(transactional_id)


def encode_value(value: TransactionLogValue) -> bytes:
    """Version 0, as Kafka 3.x writes it, or version 1 for a transaction version 2
    client (its tagged fields say so). Topics and partitions are sorted (Kafka's order
    is a hash map's), so a state always encodes to the same bytes."""
    if value.client_version >= 2:
        return _encode_v1(value)
    parts = [
        _INT16.pack(VALUE_VERSION),
        _HEAD.pack(value.producer_id, value.producer_epoch, value.transaction_timeout_ms,
                   value.status),
    ]
    if value.partitions is None:
        parts.append(_INT32.pack(-1))
    else:
        parts.append(_INT32.pack(len(value.partitions)))
        for topic in sorted(value.partitions):
            ids = sorted(value.partitions[topic])
            parts += [_string(topic), _INT32.pack(len(ids)),
                      struct.pack(f">{len(ids)}i", *ids)]
    parts.append(_TAIL.pack(value.last_update_timestamp_ms, value.start_timestamp_ms))
    return b"".join(parts)


def _compact_string(s: str) -> bytes:
    raw = s.encode()
    return encode_uvarint(len(raw) + 1) + raw


def _encode_v1(value: TransactionLogValue) -> bytes:
    parts = [
        _INT16.pack(1),
        _HEAD.pack(value.producer_id, value.producer_epoch, value.transaction_timeout_ms,
                   value.status),
    ]
    if value.partitions is None:
        parts.append(b"\x00")
    else:
        parts.append(encode_uvarint(len(value.partitions) + 1))
        for topic in sorted(value.partitions):
            ids = sorted(value.partitions[topic])
            parts += [_compact_string(topic), encode_uvarint(len(ids) + 1),
                      struct.pack(f">{len(ids)}i", *ids), b"\x00"]
    parts.append(_TAIL.pack(value.last_update_timestamp_ms, value.start_timestamp_ms))
    tags = []
    if value.previous_producer_id != -1:
        tags.append(b"\x00\x08" + _INT64.pack(value.previous_producer_id))
    if value.next_producer_id != -1:
        tags.append(b"\x01\x08" + _INT64.pack(value.next_producer_id))
    if value.client_version != 0:
        tags.append(b"\x02\x02" + _INT16.pack(value.client_version))
    parts.append(encode_uvarint(len(tags)))
    parts += tags
    return b"".join(parts)


# --- reading ---------------------------------------------------------------------------


def _reader(data: bytes) -> Reader:
    return Reader(memoryview(data), 0, TransactionLogFormatError)


def decode_key(data: bytes) -> str | None:
    """The transactional id of a ``__transaction_state`` key; None for a key version
    that is not a transaction log key (Kafka skips those too)."""
    r = _reader(data)
    (version,) = r.unpack(_INT16)
    if version != KEY_VERSION:
        return None
    (n,) = r.unpack(_INT16)
    if n < 0:
        raise TransactionLogFormatError("null transactional id")
    return r.string(n, nullable=False)


def decode_value(data: bytes) -> TransactionLogValue:
    r = _reader(data)
    (version,) = r.unpack(_INT16)
    if version not in (0, 1):
        raise TransactionLogFormatError(f"unsupported transaction log value version {version}")
    flexible = version == 1
    producer_id, epoch, timeout, status = r.unpack(_HEAD)
    partitions: dict[str, list[int]] | None
    if flexible:
        n = r.uvarint() - 1
    else:
        (n,) = r.unpack(_INT32)
    if n < 0:
        partitions = None
    else:
        partitions = {}
        for _ in range(r.check_count(n, 2)):
            if flexible:
                topic = r.string(r.check_count(r.uvarint() - 1, 1), nullable=False)
                count = r.check_count(r.uvarint() - 1, 4)
            else:
                (length,) = r.unpack(_INT16)
                topic = r.string(r.check_count(length, 1), nullable=False)
                (count,) = r.unpack(_INT32)
                r.check_count(count, 4)
            ids = list(struct.unpack(f">{count}i", r.view(4 * count)))
            partitions.setdefault(topic, []).extend(ids)
            if flexible:
                r.skip_tagged_fields()
    last_update, start = r.unpack(_TAIL)
    previous, following, client_version = -1, -1, 0
    if flexible:
        # KIP-890 part 2: previous/next producer id, client transaction version.
        tags = r.tagged_fields()
        if 0 in tags:
            (previous,) = _INT64.unpack(_exact(tags[0], 8))
        if 1 in tags:
            (following,) = _INT64.unpack(_exact(tags[1], 8))
        if 2 in tags:
            (client_version,) = _INT16.unpack(_exact(tags[2], 2))
    return TransactionLogValue(producer_id, epoch, timeout, status, partitions, last_update,
                               start, previous, following, client_version)


def _exact(field: memoryview, size: int) -> memoryview:
    if len(field) != size:
        raise TransactionLogFormatError(f"a tagged field of {len(field)} bytes, not {size}")
    return field

