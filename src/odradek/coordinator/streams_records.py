"""The values of KIP-1071 streams group records in ``__consumer_offsets`` (keys 17, 19-23;
keys in ``offsets_topic.py``), in Kafka 4.4's layouts (group-coordinator's
StreamsGroup*Value.json). Every value is version 0 and flexible, as the consumer group
ones (``consumer_records.py``, whose writers and reader are shared); tagged fields are
not written (Kafka's defaults: no validated topology epoch, no last assignment configs,
no assignment epochs per task) and skipped when read, but for KIP-1331's two.

- StreamsGroupMetadataValue (17): the group epoch, a metadata hash (written 0), and
  KIP-1331's StoredDescriptionTopologyEpoch (tag 2) and FailedDescriptionTopologyEpoch
  (tag 3): the topology epoch whose description the topology description plugin holds
  (-2: a push under way) and the one it refused for good, each -1 for none (Kafka's
  default, then not written).
- StreamsGroupMemberMetadataValue (19): instance and rack ids, client id and host,
  rebalance timeout, topology epoch, process id, user endpoint, client tags.
- StreamsGroupTargetAssignmentMetadataValue (20): the assignment epoch.
- StreamsGroupTargetAssignmentMemberValue (21): a member's target active, standby and
  warm-up tasks.
- StreamsGroupCurrentMemberAssignmentValue (22): member epoch, previous epoch, state,
  the tasks held and those pending revocation (active, standby, warm-up each).
- StreamsGroupTopologyValue (23): the group's topology.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from odradek.coordinator.consumer_records import (
    ValueReader,
    flexible_string,
    flexible_value,
    uvarint,
)
from odradek.coordinator.streams_assignor import Tasks
from odradek.coordinator.streams_topology import (
    CopartitionGroup,
    InternalTopic,
    Subtopology,
    Topology,
)

_INT8 = struct.Struct(">b")
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")
_UINT16 = struct.Struct(">H")
_NO_TAGS = b"\x00"


class MemberMetadata(NamedTuple):
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    topology_epoch: int
    process_id: str
    user_endpoint: tuple[str, int] | None
    client_tags: tuple[tuple[str, str], ...]


class CurrentAssignment(NamedTuple):
    member_epoch: int
    previous_member_epoch: int
    state: int
    active: Tasks
    standby: Tasks
    warmup: Tasks
    pending_active: Tasks


# --- writing -----------------------------------------------------------------------------

def _array(items: list[bytes]) -> bytes:
    return uvarint(len(items) + 1) + b"".join(items)


def _strings(values: tuple[str, ...]) -> bytes:
    return _array([flexible_string(v) for v in values])


def _task_ids(tasks: Tasks) -> bytes:
    return _array([flexible_string(s) + _array([_INT32.pack(p) for p in sorted(ps)])
                   + _NO_TAGS for s, ps in sorted(tasks.items()) if ps])


def _key_values(pairs: tuple[tuple[str, str], ...]) -> bytes:
    return _array([flexible_string(k) + flexible_string(v) + _NO_TAGS for k, v in pairs])


NO_DESCRIPTION_EPOCH = -1


def encode_group_metadata(epoch: int, stored_description_epoch: int = NO_DESCRIPTION_EPOCH,
                          failed_description_epoch: int = NO_DESCRIPTION_EPOCH) -> bytes:
    # Tagged fields, in tag order, each only when not its default (-1), as Kafka's
    # generated writer does: a count, then per field its tag, size and value.
    tagged = [uvarint(tag) + uvarint(_INT32.size) + _INT32.pack(value)
              for tag, value in ((2, stored_description_epoch),
                                 (3, failed_description_epoch))
              if value != NO_DESCRIPTION_EPOCH]
    value = flexible_value(_INT32.pack(epoch), _INT64.pack(0))
    if not tagged:
        return value
    return value[:-1] + uvarint(len(tagged)) + b"".join(tagged)


def encode_member_metadata(m: MemberMetadata) -> bytes:
    # A nullable struct: a marker byte, -1 for null, 1 before the struct.
    endpoint = _INT8.pack(-1) if m.user_endpoint is None else (
        _INT8.pack(1) + flexible_string(m.user_endpoint[0])
        + _UINT16.pack(m.user_endpoint[1]) + _NO_TAGS)
    return flexible_value(
        flexible_string(m.instance_id), flexible_string(m.rack_id),
        flexible_string(m.client_id), flexible_string(m.client_host),
        _INT32.pack(m.rebalance_timeout_ms), _INT32.pack(m.topology_epoch),
        flexible_string(m.process_id), endpoint, _key_values(m.client_tags))


def encode_target_assignment_metadata(assignment_epoch: int) -> bytes:
    return flexible_value(_INT32.pack(assignment_epoch))


def encode_target_assignment_member(active: Tasks, standby: Tasks, warmup: Tasks) -> bytes:
    return flexible_value(_task_ids(active), _task_ids(standby), _task_ids(warmup))


def encode_current_assignment(a: CurrentAssignment) -> bytes:
    return flexible_value(
        _INT32.pack(a.member_epoch), _INT32.pack(a.previous_member_epoch),
        _INT8.pack(a.state), _task_ids(a.active), _task_ids(a.standby),
        _task_ids(a.warmup), _task_ids(a.pending_active), _task_ids({}), _task_ids({}))


def _topic_info(t: InternalTopic) -> bytes:
    return (flexible_string(t.name) + _INT32.pack(t.partitions)
            + _INT16.pack(t.replication_factor) + _key_values(t.configs) + _NO_TAGS)


def encode_topology(topology: Topology) -> bytes:
    subtopologies = []
    for s in topology.subtopologies:
        groups = [_array([_INT16.pack(i) for i in g.source_topics])
                  + _array([_INT16.pack(i) for i in g.source_topic_regex])
                  + _array([_INT16.pack(i) for i in g.repartition_source_topics]) + _NO_TAGS
                  for g in s.copartition_groups]
        subtopologies.append(
            flexible_string(s.subtopology_id) + _strings(s.source_topics)
            + _strings(s.source_topic_regex)
            + _array([_topic_info(t) for t in s.changelog_topics])
            + _strings(s.repartition_sink_topics)
            + _array([_topic_info(t) for t in s.repartition_source_topics])
            + _array(groups) + _NO_TAGS)
    return flexible_value(_INT32.pack(topology.epoch), _array(subtopologies))


# --- reading -----------------------------------------------------------------------------

class _Reader(ValueReader):
    def many(self) -> int:
        return max(self.count(), 0)

    def strings(self) -> tuple[str, ...]:
        return tuple(self.string() or "" for _ in range(self.many()))

    def task_ids(self) -> Tasks:
        out: Tasks = {}
        for _ in range(self.many()):
            subtopology = self.string() or ""
            parts = {self.fixed(_INT32) for _ in range(self.many())}
            self.tags()  # AssignmentEpochs (tagged) among them
            if parts:
                out[subtopology] = parts
        return out

    def key_values(self) -> tuple[tuple[str, str], ...]:
        out = []
        for _ in range(self.many()):
            out.append((self.string() or "", self.string() or ""))
            self.tags()
        return tuple(out)

    def int16s(self) -> tuple[int, ...]:
        return tuple(self.fixed(_INT16) for _ in range(self.many()))

    def topic_info(self) -> InternalTopic:
        name = self.string() or ""
        partitions, factor = self.fixed(_INT32), self.fixed(_INT16)
        configs = self.key_values()
        self.tags()
        return InternalTopic(name, partitions, factor, configs)


class GroupMetadata(NamedTuple):
    epoch: int
    stored_description_epoch: int = NO_DESCRIPTION_EPOCH
    failed_description_epoch: int = NO_DESCRIPTION_EPOCH


def decode_group_metadata(data: bytes) -> GroupMetadata:
    r = _Reader(data)
    epoch = r.fixed(_INT32)
    r.fixed(_INT64)
    tagged = r.tagged_fields()
    stored, failed = (_INT32.unpack(tagged[tag])[0] if len(tagged.get(tag, b"")) == 4
                      else NO_DESCRIPTION_EPOCH for tag in (2, 3))
    return GroupMetadata(epoch, stored, failed)


def decode_member_metadata(data: bytes) -> MemberMetadata:
    r = _Reader(data)
    instance_id, rack_id = r.string(), r.string()
    client_id, client_host = r.string() or "", r.string() or ""
    timeout, topology_epoch = r.fixed(_INT32), r.fixed(_INT32)
    process_id = r.string() or ""
    endpoint = None
    if r.fixed(_INT8) >= 0:
        endpoint = (r.string() or "", r.fixed(_UINT16))
        r.tags()
    tags = r.key_values()
    r.tags()
    return MemberMetadata(instance_id, rack_id, client_id, client_host, timeout,
                          topology_epoch, process_id, endpoint, tags)


def decode_target_assignment_metadata(data: bytes) -> int:
    r = _Reader(data)
    epoch = r.fixed(_INT32)
    r.tags()
    return epoch


def decode_target_assignment_member(data: bytes) -> tuple[Tasks, Tasks, Tasks]:
    r = _Reader(data)
    out = (r.task_ids(), r.task_ids(), r.task_ids())
    r.tags()
    return out


def decode_current_assignment(data: bytes) -> CurrentAssignment:
    r = _Reader(data)
    epoch, previous, state = r.fixed(_INT32), r.fixed(_INT32), r.fixed(_INT8)
    active, standby, warmup = r.task_ids(), r.task_ids(), r.task_ids()
    pending_active = r.task_ids()
    r.task_ids()
    r.task_ids()
    r.tags()
    return CurrentAssignment(epoch, previous, state, active, standby, warmup, pending_active)


def decode_topology(data: bytes) -> Topology:
    r = _Reader(data)
    epoch = r.fixed(_INT32)
    subtopologies = []
    for _ in range(r.many()):
        sid = r.string() or ""
        sources, regexes = r.strings(), r.strings()
        changelogs = tuple(r.topic_info() for _ in range(r.many()))
        sinks = r.strings()
        repartition = tuple(r.topic_info() for _ in range(r.many()))
        groups = []
        for _ in range(r.many()):
            groups.append(CopartitionGroup(r.int16s(), r.int16s(), r.int16s()))
            r.tags()
        r.tags()
        subtopologies.append(Subtopology(sid, sources, regexes, changelogs, sinks,
                                         repartition, tuple(groups)))
    r.tags()
    return Topology(epoch, tuple(subtopologies))
