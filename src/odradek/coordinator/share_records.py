"""Kafka's record layouts in the internal topic ``__share_group_state`` (KIP-932).

The share coordinator keeps each share-partition's persisted state — its start offset
and the delivery state of the in-flight offsets above it — as records in this topic,
keyed by (group id, topic id, partition). Two record types:

    ShareSnapshot (key version 0): the whole state of a share-partition at a moment.
    ShareUpdate (key version 1): the batches that changed since the last snapshot (and
        the start offset, or -1 if it did not move); replayed over the snapshot.

Keys are Kafka's non-flexible coordinator keys: int16 record type, then GroupId (int16
length + UTF-8), TopicId (16 bytes), Partition (int32). Values are int16 version 0, then
the flexible encoding (compact arrays: unsigned varint count + 1; a tagged-field section
at the end of every struct):

    ShareSnapshotValue: SnapshotEpoch int32, StateEpoch int32, LeaderEpoch int32,
        StartOffset int64, CreateTimestamp int64, WriteTimestamp int64,
        StateBatches [FirstOffset int64, LastOffset int64, DeliveryState int8,
        DeliveryCount int16], tag 0 DeliveryCompleteCount int32 (default -1: left out)
    ShareUpdateValue: SnapshotEpoch int32, LeaderEpoch int32, StartOffset int64,
        StateBatches [same], tag 0 DeliveryCompleteCount int32 (default -1)

Delivery states as persisted: 0 available, 2 acknowledged, 4 archived (an acquired
record is written as available: locks do not survive a restart). Layouts from Kafka
4.4's share-coordinator/src/main/resources/common/message/Share{Snapshot,Update}{Key,
Value}.json; the tests hold bytes written by Kafka's own generated classes.

This module also owns which ``__share_group_state`` partition a share-partition's state
lives in (``partition_for``), and ``StateBatch``, the persisted range that
``coordinator.share_partition`` is built from and snapshots to.
"""

from __future__ import annotations

import base64
import struct
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from odradek.coordinator.offsets_topic import java_string_hashcode
from odradek.protocol.framing import encode_uvarint
from odradek.protocol.reader import DecodeError, Reader

SHARE_GROUP_STATE_TOPIC = "__share_group_state"
# share.coordinator.state.topic.num.partitions, Kafka's default.
DEFAULT_SHARE_GROUP_STATE_PARTITIONS = 50

SNAPSHOT_KEY_VERSION = 0  # CoordinatorRecordType.SHARE_SNAPSHOT
UPDATE_KEY_VERSION = 1  # CoordinatorRecordType.SHARE_UPDATE
VALUE_VERSION = 0  # both values' only version
NO_DELIVERY_COMPLETE_COUNT = -1  # KIP-1226's tagged field at its default: not written

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_KEY_TAIL = struct.Struct(">16si")  # TopicId, Partition
_BATCH = struct.Struct(">qqbh")  # FirstOffset, LastOffset, DeliveryState, DeliveryCount
# Least bytes a state batch takes: its fields and an empty tagged-field section.
_BATCH_MIN = _BATCH.size + 1
_SNAPSHOT_HEAD = struct.Struct(
    ">i"  # SnapshotEpoch
    "i"  # StateEpoch
    "i"  # LeaderEpoch
    "q"  # StartOffset
    "q"  # CreateTimestamp
    "q"  # WriteTimestamp
)
_UPDATE_HEAD = struct.Struct(
    ">i"  # SnapshotEpoch
    "i"  # LeaderEpoch
    "q"  # StartOffset
)


class ShareGroupStateFormatError(DecodeError):
    """A ``__share_group_state`` record that does not decode (truncated, bad version)."""


class StateBatch(NamedTuple):
    """Offsets first..last (inclusive) in one persisted delivery state with one count."""

    first_offset: int
    last_offset: int
    delivery_state: int  # 0 available, 2 acknowledged, 4 archived
    delivery_count: int


@dataclass(frozen=True, slots=True)
class ShareSnapshotKey:
    group_id: str
    topic_id: uuid.UUID
    partition: int


@dataclass(frozen=True, slots=True)
class ShareUpdateKey:
    group_id: str
    topic_id: uuid.UUID
    partition: int


ShareGroupStateKey = ShareSnapshotKey | ShareUpdateKey


@dataclass(frozen=True, slots=True)
class ShareSnapshotValue:
    snapshot_epoch: int
    state_epoch: int
    leader_epoch: int
    start_offset: int
    create_timestamp: int
    write_timestamp: int
    state_batches: tuple[StateBatch, ...] = field(default=())
    delivery_complete_count: int = NO_DELIVERY_COMPLETE_COUNT


@dataclass(frozen=True, slots=True)
class ShareUpdateValue:
    snapshot_epoch: int
    leader_epoch: int
    start_offset: int  # -1: the start offset did not move
    state_batches: tuple[StateBatch, ...] = field(default=())
    delivery_complete_count: int = NO_DELIVERY_COMPLETE_COUNT


def kafka_uuid_string(topic_id: uuid.UUID) -> str:
    """Kafka's ``Uuid.toString``: the 16 bytes in url-safe base64 without padding."""
    return base64.urlsafe_b64encode(topic_id.bytes).rstrip(b"=").decode()


def coordinator_key(group_id: str, topic_id: uuid.UUID, partition: int) -> str:
    """Kafka's ``SharePartitionKey.asCoordinatorKey``: "group:topicId:partition"."""
    return f"{group_id}:{kafka_uuid_string(topic_id)}:{partition}"


def partition_for_key(key: str, num_partitions: int) -> int:
    """The ``__share_group_state`` partition of a coordinator key: Kafka's
    ``Utils.abs(key.hashCode()) % numPartitions``."""
    h = java_string_hashcode(key)
    # Kafka's Utils.abs maps Integer.MIN_VALUE to 0 rather than overflowing.
    return (0 if h == -(1 << 31) else abs(h)) % num_partitions


def partition_for(group_id: str, topic_id: uuid.UUID, partition: int,
                  num_partitions: int = DEFAULT_SHARE_GROUP_STATE_PARTITIONS) -> int:
    """The ``__share_group_state`` partition holding this share-partition's state (and so
    the broker whose share coordinator owns it)."""
    return partition_for_key(coordinator_key(group_id, topic_id, partition), num_partitions)


# --- writing ---------------------------------------------------------------------------


def encode_key(key: ShareGroupStateKey) -> bytes:
    version = SNAPSHOT_KEY_VERSION if isinstance(key, ShareSnapshotKey) else UPDATE_KEY_VERSION
    raw = key.group_id.encode()
    return (_INT16.pack(version) + _INT16.pack(len(raw)) + raw
            + _KEY_TAIL.pack(key.topic_id.bytes, key.partition))


def _batches(batches: Sequence[StateBatch]) -> bytes:
    # Each batch is a struct of its own: its (empty) tagged-field section follows it.
    parts = [encode_uvarint(len(batches) + 1)]
    parts += [_BATCH.pack(*b) + b"\x00" for b in batches]
    return b"".join(parts)


def _tags(delivery_complete_count: int) -> bytes:
    if delivery_complete_count == NO_DELIVERY_COMPLETE_COUNT:
        return b"\x00"
    # one field: tag 0, 4 bytes
    return b"\x01\x00\x04" + _INT32.pack(delivery_complete_count)


def encode_value(value: ShareSnapshotValue | ShareUpdateValue) -> bytes:
    if isinstance(value, ShareSnapshotValue):
        head = _SNAPSHOT_HEAD.pack(value.snapshot_epoch, value.state_epoch,
                                   value.leader_epoch, value.start_offset,
                                   value.create_timestamp, value.write_timestamp)
    else:
        head = _UPDATE_HEAD.pack(value.snapshot_epoch, value.leader_epoch,
                                 value.start_offset)
    return b"".join((_INT16.pack(VALUE_VERSION), head, _batches(value.state_batches),
                     _tags(value.delivery_complete_count)))


# --- reading ---------------------------------------------------------------------------


def _reader(data: bytes | bytearray | memoryview) -> Reader:
    return Reader(memoryview(data), 0, ShareGroupStateFormatError)


def decode_key(data: bytes | bytearray | memoryview) -> ShareGroupStateKey | None:
    """The key of a ``__share_group_state`` record; None for a record type this module
    does not know (skipped, as Kafka skips them)."""
    r = _reader(data)
    version = r.int16()
    if version not in (SNAPSHOT_KEY_VERSION, UPDATE_KEY_VERSION):
        return None
    group_id = r.string(r.int16(), nullable=False)
    raw_id, partition = r.unpack(_KEY_TAIL)
    topic_id = uuid.UUID(bytes=bytes(raw_id))
    if version == SNAPSHOT_KEY_VERSION:
        return ShareSnapshotKey(group_id, topic_id, partition)
    return ShareUpdateKey(group_id, topic_id, partition)


def _read_batches(r: Reader) -> tuple[StateBatch, ...]:
    n = r.check_count(r.uvarint() - 1, _BATCH_MIN)
    batches = []
    for _ in range(n):
        batches.append(StateBatch(*r.unpack(_BATCH)))
        r.skip_tagged_fields()
    return tuple(batches)


def _read_tags(r: Reader) -> int:
    tags = r.tagged_fields()
    if 0 not in tags:
        return NO_DELIVERY_COMPLETE_COUNT
    raw = tags[0]
    if len(raw) != 4:
        raise ShareGroupStateFormatError(f"a tagged field of {len(raw)} bytes, not 4")
    (count,) = _INT32.unpack(raw)
    return int(count)


def _version(r: Reader) -> None:
    version = r.int16()
    if version != VALUE_VERSION:
        raise ShareGroupStateFormatError(f"unsupported share group state value version "
                                         f"{version}")


def decode_snapshot_value(data: bytes | bytearray | memoryview) -> ShareSnapshotValue:
    r = _reader(data)
    _version(r)
    snapshot_epoch, state_epoch, leader_epoch, start, created, written = r.unpack(
        _SNAPSHOT_HEAD)
    batches = _read_batches(r)
    return ShareSnapshotValue(snapshot_epoch, state_epoch, leader_epoch, start, created,
                              written, batches, _read_tags(r))


def decode_update_value(data: bytes | bytearray | memoryview) -> ShareUpdateValue:
    r = _reader(data)
    _version(r)
    snapshot_epoch, leader_epoch, start = r.unpack(_UPDATE_HEAD)
    batches = _read_batches(r)
    return ShareUpdateValue(snapshot_epoch, leader_epoch, start, batches, _read_tags(r))


def decode_value(key: ShareGroupStateKey,
                 data: bytes | bytearray | memoryview) -> ShareSnapshotValue | ShareUpdateValue:
    """A value, read by the layout its key's record type names."""
    if isinstance(key, ShareSnapshotKey):
        return decode_snapshot_value(data)
    return decode_update_value(data)
