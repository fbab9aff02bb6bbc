"""Kafka's record layouts in the internal topic ``__consumer_offsets``.

Every record there is a key and a value, each opening with an int16 schema version, then
fields in Kafka's classic encoding: big-endian integers, strings as int16 length + UTF-8
(-1 for null), bytes as int32 length (-1 for null), arrays as int32 count. Layouts are
those of Kafka's ``OffsetCommitKey/Value`` and ``GroupMetadataKey/Value`` schemas
(group-coordinator/src/main/resources/common/message/*.json); we write the versions a
Kafka 3.x broker writes and read every non-flexible version, so a log written by either
can be replayed by the other.

This module also owns which ``__consumer_offsets`` partition a group lives in
(``partition_for``: Kafka's ``Utils.abs(groupId.hashCode) % offsets.topic.num.partitions``).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from odradek.protocol.reader import DecodeError, Reader

OFFSETS_TOPIC = "__consumer_offsets"
# offsets.topic.num.partitions, Kafka's default.
DEFAULT_OFFSETS_TOPIC_PARTITIONS = 50

# Key versions: 0 and 1 are both an offset commit key (group, topic, partition); 2 is a
# group metadata key (group); 3-8 are KIP-848 consumer group keys, 10, 11, 14 and 15 the
# KIP-932 share group keys Odradek writes (their values are in ``consumer_records.py``).
# Other versions belong to records Odradek does not write (share groups' assignments,
# streams groups).
OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
CONSUMER_GROUP_METADATA_KEY = 3  # (group) -> group epoch
CONSUMER_GROUP_PARTITION_METADATA_KEY = 4  # (group) -> subscribed topics' metadata
CONSUMER_GROUP_MEMBER_METADATA_KEY = 5  # (group, member) -> subscription, client
CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA_KEY = 6  # (group) -> assignment epoch
CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER_KEY = 7  # (group, member) -> target partitions
CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT_KEY = 8  # (group, member) -> epoch, partitions
SHARE_GROUP_MEMBER_METADATA_KEY = 10  # (group, member) -> subscription, client
SHARE_GROUP_METADATA_KEY = 11  # (group) -> group epoch
SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT_KEY = 14  # (group, member) -> epoch, partitions
SHARE_GROUP_STATE_PARTITION_METADATA_KEY = 15  # (group) -> initialized share partitions
STREAMS_GROUP_METADATA_KEY = 17  # (group) -> group epoch
STREAMS_GROUP_MEMBER_METADATA_KEY = 19  # (group, member) -> process, endpoint, client
STREAMS_GROUP_TARGET_ASSIGNMENT_METADATA_KEY = 20  # (group) -> assignment epoch
STREAMS_GROUP_TARGET_ASSIGNMENT_MEMBER_KEY = 21  # (group, member) -> target tasks
STREAMS_GROUP_CURRENT_MEMBER_ASSIGNMENT_KEY = 22  # (group, member) -> epoch, tasks
STREAMS_GROUP_TOPOLOGY_KEY = 23  # (group) -> topology
_GROUP_LEVEL_KEYS = (3, 4, 6, 11, 15, 17, 20, 23)
_MEMBER_LEVEL_KEYS = (5, 7, 8, 10, 14, 19, 21, 22)
SHARE_GROUP_KEYS = (10, 11, 14, 15)
STREAMS_GROUP_KEYS = (17, 19, 20, 21, 22, 23)
# Value versions Kafka 3.x writes: offset commit v3 (with leader epoch), or v1 when the
# commit carries an explicit expire timestamp (OffsetCommit v2-v4 retention_time_ms);
# group metadata v3 (with group.instance.id).
OFFSET_COMMIT_VALUE_VERSION = 3
OFFSET_COMMIT_VALUE_VERSION_WITH_EXPIRY = 1
GROUP_METADATA_VALUE_VERSION = 3

NO_TIMESTAMP = -1  # currentStateTimestamp and expireTimestamp default
NO_LEADER_EPOCH = -1

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")


class OffsetsTopicFormatError(DecodeError):
    """A ``__consumer_offsets`` record that does not decode (truncated, bad version)."""


@dataclass(frozen=True, slots=True)
class OffsetCommitKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupMetadataKey:
    group: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupRecordKey:
    """A KIP-848 consumer group or KIP-932 share group key: ``version`` (3-8, 10, 11,
    14, 15) says which record it is; ``member_id`` is None for the group-level ones."""

    version: int
    group: str
    member_id: str | None = None


@dataclass(frozen=True, slots=True)
class OffsetCommitValue:
    offset: int
    leader_epoch: int = NO_LEADER_EPOCH  # v3+
    metadata: str = ""
    commit_timestamp: int = 0
    expire_timestamp: int = NO_TIMESTAMP  # v1 only


@dataclass(frozen=True, slots=True)
class MemberMetadataValue:
    member_id: str
    group_instance_id: str | None  # v3+
    client_id: str
    client_host: str
    rebalance_timeout: int  # v1+ (v0: the session timeout, as Kafka reads it)
    session_timeout: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupMetadataValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int = NO_TIMESTAMP  # v2+
    members: list[MemberMetadataValue] = field(default_factory=list)


def java_string_hashcode(s: str) -> int:
    """Java's ``String.hashCode``: 31-polynomial over UTF-16 code units, as a signed int32."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(group_id: str, num_partitions: int = DEFAULT_OFFSETS_TOPIC_PARTITIONS) -> int:
    """The ``__consumer_offsets`` partition holding ``group_id`` (and so its coordinator)."""
    h = java_string_hashcode(group_id)
    # Kafka's Utils.abs maps Integer.MIN_VALUE to 0 rather than overflowing.
    return (0 if h == -(1 << 31) else abs(h)) % num_partitions


# --- writing ---------------------------------------------------------------------------


def _string(s: str) -> bytes:
    raw = s.encode()
    return _INT16.pack(len(raw)) + raw


def _nullable_string(s: str | None) -> bytes:
    return _INT16.pack(-1) if s is None else _string(s)


def _bytes(b: bytes) -> bytes:
    return _INT32.pack(len(b)) + b


def encode_offset_commit_key(group: str, topic: str, partition: int) -> bytes:
    return (
        _INT16.pack(OFFSET_COMMIT_KEY_VERSION)
        + _string(group)
        + _string(topic)
        + _INT32.pack(partition)
    )


def encode_group_metadata_key(group: str) -> bytes:
    return _INT16.pack(GROUP_METADATA_KEY_VERSION) + _string(group)


def encode_consumer_group_key(version: int, group: str, member_id: str | None = None) -> bytes:
    if version in _MEMBER_LEVEL_KEYS:
        assert member_id is not None
        return _INT16.pack(version) + _string(group) + _string(member_id)
    assert version in _GROUP_LEVEL_KEYS and member_id is None
    return _INT16.pack(version) + _string(group)


def encode_offset_commit_value(value: OffsetCommitValue) -> bytes:
    if value.expire_timestamp != NO_TIMESTAMP:
        # Only v1 has an expire timestamp (Kafka writes v1 for such commits, too).
        return (
            _INT16.pack(OFFSET_COMMIT_VALUE_VERSION_WITH_EXPIRY)
            + _INT64.pack(value.offset)
            + _string(value.metadata)
            + _INT64.pack(value.commit_timestamp)
            + _INT64.pack(value.expire_timestamp)
        )
    return (
        _INT16.pack(OFFSET_COMMIT_VALUE_VERSION)
        + _INT64.pack(value.offset)
        + _INT32.pack(value.leader_epoch)
        + _string(value.metadata)
        + _INT64.pack(value.commit_timestamp)
    )


def encode_group_metadata_value(value: GroupMetadataValue) -> bytes:
    parts = [
        _INT16.pack(GROUP_METADATA_VALUE_VERSION),
        _string(value.protocol_type),
        _INT32.pack(value.generation),
        _nullable_string(value.protocol),
        _nullable_string(value.leader),
        _INT64.pack(value.current_state_timestamp),
        _INT32.pack(len(value.members)),
    ]
    for m in value.members:
        parts += [
            _string(m.member_id),
            _nullable_string(m.group_instance_id),
            _string(m.client_id),
            _string(m.client_host),
            _INT32.pack(m.rebalance_timeout),
            _INT32.pack(m.session_timeout),
            _bytes(m.subscription),
            _bytes(m.assignment),
        ]
    return b"".join(parts)


# --- reading ---------------------------------------------------------------------------


class _Reader(Reader):
    """The shared bounds-checked cursor, with this topic's legacy (int16/int32-length)
    strings and bytes."""

    def __init__(self, data: bytes) -> None:
        super().__init__(memoryview(data), 0, OffsetsTopicFormatError)

    def nullable_string(self) -> str | None:
        return Reader.string(self, self.int16(), nullable=True)

    def string(self) -> str:  # type: ignore[override]
        s = self.nullable_string()
        if s is None:
            raise OffsetsTopicFormatError("null in a non-nullable string field")
        return s

    def bytes_(self) -> bytes:
        n = self.int32()
        return b"" if n == -1 else bytes(self.view(n))


def decode_key(data: bytes) -> OffsetCommitKey | GroupMetadataKey | ConsumerGroupRecordKey | None:
    """The key of a ``__consumer_offsets`` record; None for key versions Odradek does
    not write (Kafka's share group target assignments, 12-13, and the like)."""
    r = _Reader(data)
    version = r.int16()
    if version in (0, 1):
        return OffsetCommitKey(r.string(), r.string(), r.int32())
    if version == 2:
        return GroupMetadataKey(r.string())
    if version in _GROUP_LEVEL_KEYS:
        return ConsumerGroupRecordKey(version, r.string())
    if version in _MEMBER_LEVEL_KEYS:
        return ConsumerGroupRecordKey(version, r.string(), r.string())
    return None


def decode_offset_commit_value(data: bytes) -> OffsetCommitValue:
    r = _Reader(data)
    version = r.int16()
    if not 0 <= version <= 3:
        raise OffsetsTopicFormatError(f"unsupported offset commit value version {version}")
    offset = r.int64()
    leader_epoch = r.int32() if version >= 3 else NO_LEADER_EPOCH
    metadata = r.string()
    commit_timestamp = r.int64()
    expire_timestamp = r.int64() if version == 1 else NO_TIMESTAMP
    return OffsetCommitValue(offset, leader_epoch, metadata, commit_timestamp, expire_timestamp)


def decode_group_metadata_value(data: bytes) -> GroupMetadataValue:
    r = _Reader(data)
    version = r.int16()
    if not 0 <= version <= 3:
        raise OffsetsTopicFormatError(f"unsupported group metadata value version {version}")
    protocol_type = r.string()
    generation = r.int32()
    protocol = r.nullable_string()
    leader = r.nullable_string()
    timestamp = r.int64() if version >= 2 else NO_TIMESTAMP
    count = r.int32()
    if count < 0 or count > len(data):
        raise OffsetsTopicFormatError(f"bad member count {count}")
    members = []
    for _ in range(count):
        member_id = r.string()
        instance_id = r.nullable_string() if version >= 3 else None
        client_id = r.string()
        client_host = r.string()
        rebalance_timeout = r.int32() if version >= 1 else None
        session_timeout = r.int32()
        members.append(
            MemberMetadataValue(
                member_id,
                instance_id,
                client_id,
                client_host,
                # v0 had no rebalance timeout: Kafka uses the session timeout in its place.
                session_timeout if rebalance_timeout is None else rebalance_timeout,
                session_timeout,
                r.bytes_(),
                r.bytes_(),
            )
        )
    return GroupMetadataValue(protocol_type, generation, protocol, leader, timestamp, members)
