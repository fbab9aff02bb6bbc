"""Kafka's record layouts in the internal topic ``__transaction_state``.

One record per transactional id (the topic is compacted): the key is Kafka's
``TransactionLogKey`` version 0 — int16 version 0, then the transactional id as an int16
length + UTF-8 — and the value ``TransactionLogValue``: int16 version, then

    version 0 (what Kafka 3.x writes, and we write):
        producer_id int64, producer_epoch int16, transaction_timeout_ms int32,
        transaction_status int8, transaction_partitions nullable array (int32 count,
        -1 for null) of [topic string, partition_ids array of int32],
        transaction_last_update_timestamp_ms int64, transaction_start_timestamp_ms int64
    version 1 (flexible, Kafka 4's transaction.version 1; read only): the same fields in
        compact encoding (unsigned varint length + 1), tagged fields at the end of each
        partition entry and of the value — tag 0 previous producer id, tag 1 next
        producer id, tag 2 client transaction version (KIP-890; skipped here).

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
from odradek.protocol.reader import DecodeError, Reader

TRANSACTION_STATE_TOPIC = "__transaction_state"
# transaction.state.log.num.partitions, Kafka's default.
DEFAULT_TRANSACTION_STATE_PARTITIONS = 50

KEY_VERSION = 0  # CoordinatorRecordType.TRANSACTION_LOG
VALUE_VERSION = 0  # the highest non-flexible version: what a Kafka 3.x broker reads
NO_TIMESTAMP = -1  # a transaction that has not started

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
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
    """Version 0, as Kafka 3.x writes it. Topics and partitions are sorted (Kafka's order
    is a hash map's), so a state always encodes to the same bytes."""
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
    if flexible:
        # Previous/next producer id and client transaction version (KIP-890): this
        # coordinator implements transaction version 0, which has none of them.
        r.skip_tagged_fields()
    return TransactionLogValue(producer_id, epoch, timeout, status, partitions, last_update,
                               start)

