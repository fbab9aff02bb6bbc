"""The values of KIP-848 consumer group records (key versions 3-8) and of KIP-932 share
group records (10, 11, 15) in ``__consumer_offsets`` (keys in ``offsets_topic.py``), in
Kafka's layouts (group-coordinator/src/main/resources/common/message/ConsumerGroup*Value
.json, ShareGroup*Value.json).

Every value is version 0 and *flexible* (KIP-482): an int16 version, then compact
encodings (unsigned varint lengths plus one, 0 for null), uuids as 16 bytes, and a
tagged-field section after every struct. We write no tagged fields and skip any we read
(Kafka 4.x adds some: the metadata hash, assignment timestamps).

- ConsumerGroupMetadataValue (3): the group epoch.
- ConsumerGroupPartitionMetadataValue (4): not written (Kafka 4.1+ stopped too); the
  subscribed topics' metadata is recomputed from the broker's topics after a restart.
- ConsumerGroupMemberMetadataValue (5): instance id, rack, client id and host, the
  subscription (names, regex), rebalance timeout, server assignor.
- ConsumerGroupTargetAssignmentMetadataValue (6): the assignment epoch.
- ConsumerGroupTargetAssignmentMemberValue (7): a member's target partitions.
- ConsumerGroupCurrentMemberAssignmentValue (8): member epoch, previous member epoch,
  state, assigned partitions, partitions pending revocation.
- ShareGroupMemberMetadataValue (10): rack, client id and host, the subscribed topics.
- ShareGroupMetadataValue (11): the group epoch and a metadata hash (written 0: the
  subscribed topics' metadata is recomputed from the broker's topics).
- ShareGroupStatePartitionMetadataValue (15): the topic partitions whose share state
  has been initialized (and those being initialized or deleted, which Odradek writes
  empty: it initializes and deletes in one step).
- ShareGroupCurrentMemberAssignmentValue (14): member epoch, previous member epoch,
  state (0), assigned partitions.
Share groups' target assignments (12, 13) are not written: the simple assignor
recomputes them from the members after a restart.
"""

from __future__ import annotations

import struct
import uuid
from typing import NamedTuple

from odradek.coordinator.offsets_topic import OffsetsTopicFormatError
from odradek.protocol.reader import Reader

Assignment = dict[uuid.UUID, set[int]]

_INT8 = struct.Struct(">b")
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")
VALUE_VERSION = 0
# Kafka's MemberState codes (org.apache.kafka.coordinator.group.modern.MemberState).
STATE_STABLE = 0
STATE_UNREVOKED_PARTITIONS = 1
STATE_UNRELEASED_PARTITIONS = 2


class MemberMetadata(NamedTuple):
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    rebalance_timeout_ms: int
    server_assignor: str | None


class CurrentAssignment(NamedTuple):
    member_epoch: int
    previous_member_epoch: int
    state: int
    assigned: Assignment
    pending_revocation: Assignment


# --- writing -----------------------------------------------------------------------------

def uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def flexible_string(s: str | None) -> bytes:
    if s is None:
        return b"\x00"
    raw = s.encode()
    return uvarint(len(raw) + 1) + raw


NO_TAGS = b"\x00"


def _topic_partitions(a: Assignment) -> bytes:
    out = [uvarint(len(a) + 1)]
    for tid in sorted(a, key=str):
        parts = sorted(a[tid])
        out.append(tid.bytes + uvarint(len(parts) + 1)
                   + b"".join(_INT32.pack(p) for p in parts) + NO_TAGS)
    return b"".join(out)


def flexible_value(*fields: bytes) -> bytes:
    return _INT16.pack(VALUE_VERSION) + b"".join(fields) + NO_TAGS


def encode_group_metadata(epoch: int) -> bytes:
    return flexible_value(_INT32.pack(epoch))


def encode_member_metadata(m: MemberMetadata) -> bytes:
    names = uvarint(len(m.subscribed_topic_names) + 1) + b"".join(
        flexible_string(n) for n in m.subscribed_topic_names)
    return flexible_value(
        flexible_string(m.instance_id), flexible_string(m.rack_id),
        flexible_string(m.client_id), flexible_string(m.client_host), names,
        flexible_string(m.subscribed_topic_regex), _INT32.pack(m.rebalance_timeout_ms),
        flexible_string(m.server_assignor))


def encode_target_assignment_metadata(assignment_epoch: int) -> bytes:
    return flexible_value(_INT32.pack(assignment_epoch))


def encode_target_assignment_member(target: Assignment) -> bytes:
    return flexible_value(_topic_partitions(target))


def encode_current_assignment(a: CurrentAssignment) -> bytes:
    return flexible_value(_INT32.pack(a.member_epoch), _INT32.pack(a.previous_member_epoch),
                  _INT8.pack(a.state), _topic_partitions(a.assigned),
                  _topic_partitions(a.pending_revocation))


def encode_share_member_metadata(rack_id: str | None, client_id: str, client_host: str,
                                 topics: tuple[str, ...]) -> bytes:
    names = uvarint(len(topics) + 1) + b"".join(flexible_string(n) for n in topics)
    return flexible_value(flexible_string(rack_id), flexible_string(client_id),
                          flexible_string(client_host), names)


def encode_share_current_assignment(member_epoch: int, assigned: Assignment) -> bytes:
    return flexible_value(_INT32.pack(member_epoch), _INT32.pack(member_epoch), _INT8.pack(0),
                  _topic_partitions(assigned))


def decode_share_current_assignment(data: bytes) -> tuple[int, Assignment]:
    """(member epoch, assigned partitions)."""
    r = ValueReader(data)
    epoch = r.fixed(_INT32)
    r.fixed(_INT32)
    r.fixed(_INT8)
    assigned = r.topic_partitions()
    r.tags()
    return epoch, assigned


def encode_share_group_metadata(epoch: int) -> bytes:
    return flexible_value(_INT32.pack(epoch), _INT64.pack(0))


# A topic's initialized partitions: topic id -> (name, partitions).
InitializedTopics = dict[uuid.UUID, tuple[str, frozenset[int]]]


def encode_share_state_partitions(initialized: InitializedTopics) -> bytes:
    topics = [uvarint(len(initialized) + 1)]
    for tid in sorted(initialized, key=str):
        name, parts = initialized[tid]
        topics.append(tid.bytes + flexible_string(name) + uvarint(len(parts) + 1)
                      + b"".join(_INT32.pack(p) for p in sorted(parts)) + NO_TAGS)
    empty = uvarint(1)
    return flexible_value(empty, b"".join(topics), empty)


# --- reading -----------------------------------------------------------------------------

class ValueReader(Reader):
    """The shared bounds-checked cursor over a flexible value, its version checked (also
    the streams group records', ``streams_records.py``)."""

    def __init__(self, data: bytes) -> None:
        super().__init__(memoryview(data), 0, OffsetsTopicFormatError)
        version = self.int16()
        if version != VALUE_VERSION:
            raise OffsetsTopicFormatError(f"unsupported consumer group value version {version}")

    def fixed(self, s: struct.Struct) -> int:
        return self.unpack(s)[0]

    def count(self) -> int:  # type: ignore[override]
        """A compact array's count; -1 for null (read as empty by the callers)."""
        n = self.uvarint() - 1
        return n if n < 0 else self.check_count(n, 1)

    def string(self) -> str | None:  # type: ignore[override]
        return Reader.string(self, self.uvarint() - 1, nullable=True)

    def tags(self) -> None:
        self.skip_tagged_fields()

    def topic_partitions(self) -> Assignment:
        out: Assignment = {}
        for _ in range(max(self.count(), 0)):
            tid = uuid.UUID(bytes=bytes(self.view(16)))
            out[tid] = {self.fixed(_INT32) for _ in range(max(self.count(), 0))}
            self.tags()
        return out


def decode_group_metadata(data: bytes) -> int:
    r = ValueReader(data)
    epoch = r.fixed(_INT32)
    r.tags()
    return epoch


def decode_member_metadata(data: bytes) -> MemberMetadata:
    r = ValueReader(data)
    instance_id, rack_id = r.string(), r.string()
    client_id, client_host = r.string() or "", r.string() or ""
    names = tuple(r.string() or "" for _ in range(max(r.count(), 0)))
    regex = r.string()
    timeout = r.fixed(_INT32)
    assignor = r.string()
    r.tags()
    return MemberMetadata(instance_id, rack_id, client_id, client_host, names, regex, timeout,
                          assignor)


def decode_target_assignment_metadata(data: bytes) -> int:
    return decode_group_metadata(data)  # the same shape: one int32


def decode_target_assignment_member(data: bytes) -> Assignment:
    r = ValueReader(data)
    target = r.topic_partitions()
    r.tags()
    return target


def decode_current_assignment(data: bytes) -> CurrentAssignment:
    r = ValueReader(data)
    epoch, previous = r.fixed(_INT32), r.fixed(_INT32)
    state = r.fixed(_INT8)
    assigned = r.topic_partitions()
    pending = r.topic_partitions()
    r.tags()
    return CurrentAssignment(epoch, previous, state, assigned, pending)


def decode_share_member_metadata(data: bytes) -> tuple[str | None, str, str, tuple[str, ...]]:
    """(rack id, client id, client host, subscribed topic names)."""
    r = ValueReader(data)
    rack_id, client_id, client_host = r.string(), r.string() or "", r.string() or ""
    names = tuple(r.string() or "" for _ in range(max(r.count(), 0)))
    r.tags()
    return rack_id, client_id, client_host, names


def decode_share_group_metadata(data: bytes) -> int:
    """The group epoch (the metadata hash is not used)."""
    r = ValueReader(data)
    epoch = r.fixed(_INT32)
    r.fixed(_INT64)
    r.tags()
    return epoch


def decode_share_state_partitions(data: bytes) -> InitializedTopics:
    """The initialized topic partitions (initializing ones count as initialized: their
    state, if any was written, is found by a read; deleting ones are left out)."""
    r = ValueReader(data)
    out: InitializedTopics = {}
    for _ in range(2):  # InitializingTopics, InitializedTopics
        for _ in range(max(r.count(), 0)):
            tid = uuid.UUID(bytes=bytes(r.view(16)))
            name = r.string() or ""
            parts = frozenset(r.fixed(_INT32) for _ in range(max(r.count(), 0)))
            r.tags()
            old = out.get(tid)
            out[tid] = (name, parts | old[1] if old else parts)
    for _ in range(max(r.count(), 0)):  # DeletingTopics
        out.pop(uuid.UUID(bytes=bytes(r.view(16))), None)
        r.string()
        r.tags()
    r.tags()
    return out
