"""Share groups' membership (KIP-932, "queues for Kafka"): ShareGroupHeartbeat (76) and
ShareGroupDescribe (77) on the group coordinator, and the simple assignor.

A share group's members share partitions: unlike a consumer group, two members may be
assigned the same partition, and the records themselves are handed out one acquisition
at a time by the partition's leader (``share_partition.py``, served by
``server/share/``). So the coordinator's part is small, as in Kafka's
GroupMetadataManager.shareGroupHeartbeat:

1. validate the request (a group id, the client's own member id, a first heartbeat
   naming its topics, an epoch >= -1);
2. find or create the group and the member (epoch 0 joins, -1 leaves); a member epoch
   that is not the member's is FENCED_MEMBER_EPOCH, an unknown member
   UNKNOWN_MEMBER_ID (the client rejoins with epoch 0);
3. a new member, a changed subscription or changed topic metadata bumps the group
   epoch, and the simple assignor gives the group a new assignment at once. There is
   nothing to revoke: the member's epoch becomes the group's at its next heartbeat and
   its assignment is replaced.

A member silent for ``share.session.timeout.ms`` (the group's config, else the broker's
``group.share.session.timeout.ms``) is removed. Members that leave, or are removed, are
named in ``Effects.share_members_left``, so the broker releases the records they still
hold (``server/share/``).

The assignor is Kafka's SimpleAssignor in its homogeneous form: per topic, with fewer
members than partitions each partition goes to one member, spread evenly; with more
members than partitions each member gets one partition and the partitions are shared
as evenly as the counts allow. (Kafka's is also sticky and rack-free; moving a share
partition between members costs nothing here, since no member owns records.)

Persistence, in ``__consumer_offsets`` with Kafka's record layouts
(``consumer_records.py``): the group epoch (ShareGroupMetadata), each member's
subscription (ShareGroupMemberMetadata; a tombstone when it leaves), and the share
partitions the group has been assigned and so has state for
(ShareGroupStatePartitionMetadata: what DescribeShareGroupOffsets lists and
DeleteGroups deletes). The assignments (Kafka's records 12-14) are not written: after a
replay the simple assignor gives the loaded members the same assignment again, at the
group epoch they knew, so their heartbeats go on without a rejoin. What a share group
has consumed is the share coordinator's (``share_coordinator.py``), not here.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from kio.schema.errors import ErrorCode

from odradek.coordinator import consumer_records as cr
from odradek.coordinator import offsets_topic as ot
from odradek.coordinator.consumer_group import TopicInfo
from odradek.coordinator.results import (
    ConsumerHeartbeatResult,
    DescribedPartitions,
    Effects,
    Record,
)

log = logging.getLogger(__name__)

SHARE_SESSION = "share-session"  # the timer kind of a member's session
SIMPLE = "simple"  # group.share.assignors: Kafka 4.4 ships this one

JOIN_EPOCH = 0
LEAVE_EPOCH = -1

Assignment = dict[uuid.UUID, set[int]]


class ShareSettings(NamedTuple):
    """The broker's group.share.* settings the coordinator applies (a group's own
    share.* group configs override the first two)."""

    session_timeout_ms: int = 45_000  # group.share.session.timeout.ms
    heartbeat_interval_ms: int = 5_000  # group.share.heartbeat.interval.ms
    max_size: int = 200  # group.share.max.size


DEFAULT_SHARE_SETTINGS = ShareSettings()


@dataclass(slots=True)
class ShareMember:
    member_id: str
    member_epoch: int = 0
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    assigned: Assignment = field(default_factory=dict)
    session_deadline: int | None = None


@dataclass(slots=True)
class ShareGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ShareMember] = field(default_factory=dict)
    # The partition counts the last assignment used: a topic made, grown or deleted
    # since bumps the group epoch.
    subscribed: dict[str, TopicInfo] = field(default_factory=dict)
    target: dict[str, Assignment] = field(default_factory=dict)
    # The share partitions ever assigned (and so with state, or about to have it):
    # topic id -> (name, partitions).
    initialized: cr.InitializedTopics = field(default_factory=dict)

    @property
    def state(self) -> str:
        """Kafka's ShareGroupState names: Empty, Stable (no reconciliation in share
        groups: a group with members is Stable once its assignment is current)."""
        if not self.members:
            return "Empty"
        return "Stable" if self.assignment_epoch == self.group_epoch else "Assigning"

    def topic_names(self) -> set[str]:
        return {t for m in self.members.values() for t in m.subscribed_topic_names}


class ShareMemberDescription(NamedTuple):
    member_id: str
    rack_id: str | None
    member_epoch: int
    client_id: str
    client_host: str
    subscribed_topic_names: list[str]
    assignment: list[DescribedPartitions]


@dataclass(frozen=True, slots=True)
class ShareGroupDescription:
    error_code: int
    group_id: str
    error_message: str | None = None
    state: str = ""
    group_epoch: int = 0
    assignment_epoch: int = 0
    assignor_name: str = ""
    members: list[ShareMemberDescription] = field(default_factory=list)


def assign_simple(subscriptions: Mapping[str, Iterable[str]], topics: Mapping[str, TopicInfo]
                  ) -> dict[str, Assignment]:
    """Kafka's SimpleAssignor, homogeneous case, per topic: see the module docstring.
    Members are taken in id order and each topic starts where the last one stopped,
    so that the remainders of several topics do not all land on the first member."""
    out: dict[str, Assignment] = {m: {} for m in subscriptions}
    start = 0
    for name in sorted({t for ts in subscriptions.values() for t in ts}):
        info = topics.get(name)
        if info is None or info.partitions <= 0:
            continue
        members = sorted(m for m, ts in subscriptions.items() if name in ts)
        n, p = len(members), info.partitions
        if n <= p:
            for partition in range(p):
                member = members[(start + partition) % n]
                out[member].setdefault(info.topic_id, set()).add(partition)
            start += p
        else:
            for i, member in enumerate(members):
                out[member].setdefault(info.topic_id, set()).add((start + i) % p)
            start += n
    return out


# What is persisted of a group: its epoch, its members' metadata and current
# assignments, its initialized share partitions.
_Persisted = tuple[int, dict[str, tuple[str | None, str, str, tuple[str, ...]]],
                   dict[str, tuple[int, dict[uuid.UUID, frozenset[int]]]],
                   cr.InitializedTopics]
_NONE: _Persisted = (-1, {}, {}, {})


def _persisted(group: ShareGroup | None) -> _Persisted:
    if group is None:
        return _NONE
    members = group.members.values()
    return (group.group_epoch,
            {m.member_id: (m.rack_id, m.client_id, m.client_host, m.subscribed_topic_names)
             for m in members},
            {m.member_id: (m.member_epoch, {t: frozenset(p) for t, p in m.assigned.items()})
             for m in members},
            dict(group.initialized))


def missing_share_group(manager: Any, group_id: str) -> str:
    """Kafka's message for a group id that names no share group: another kind of group,
    or none at all."""
    if (group_id in manager.groups or group_id in manager.consumer_groups
            or group_id in manager.streams_groups):
        return f"Group {group_id} is not a share group."
    return f"Group {group_id} not found."


class _HeartbeatError(Exception):
    def __init__(self, error_code: int, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code


class ShareProtocol:
    """Mixed into ``GroupManager``; see the module docstring. A group id names a classic,
    a consumer or a share group, never two."""

    # Provided by GroupManager (and ConsumerProtocol).
    groups: dict[str, Any]
    consumer_groups: dict[str, Any]
    streams_groups: dict[str, Any]
    topics: Mapping[str, TopicInfo]
    group_configs: Callable[[str], Mapping[str, str]]
    _effects: Callable[[int], Effects]
    def _schedule(self, deadline: int, kind: str, group: Any, member_id: str = ""
                  ) -> None: ...  # pragma: no cover

    def _init_share_protocol(self, settings: ShareSettings) -> None:
        self.share_groups: dict[str, ShareGroup] = {}
        self.share_settings = settings

    def share_session_timeout_ms(self, group_id: str) -> int:
        value = self.group_configs(group_id).get("share.session.timeout.ms")
        return self.share_settings.session_timeout_ms if value is None else int(value)

    def share_heartbeat_interval_ms(self, group_id: str) -> int:
        value = self.group_configs(group_id).get("share.heartbeat.interval.ms")
        return self.share_settings.heartbeat_interval_ms if value is None else int(value)

    # --- ShareGroupHeartbeat ---------------------------------------------------------

    def share_heartbeat(
        self,
        group_id: str,
        member_id: str,
        member_epoch: int,
        *,
        rack_id: str | None = None,
        subscribed_topic_names: Iterable[str] | None = None,
        client_id: str = "",
        client_host: str = "",
        topics: Mapping[str, TopicInfo] | None = None,
        token: Any,
        now_ms: int,
    ) -> Effects:
        """ShareGroupHeartbeat (API 76, v1: the client names its member). Fields left
        None are "unchanged", as on the wire; ``topics`` is the broker's topic metadata
        now (name -> id and partition count)."""
        fx = self._effects(now_ms)
        if topics is not None:
            self.topics = topics
        names = None if subscribed_topic_names is None else tuple(subscribed_topic_names)
        before = _persisted(self.share_groups.get(group_id))
        try:
            if not group_id:
                raise _HeartbeatError(ErrorCode.invalid_request, "GroupId can't be empty.")
            if not member_id:
                raise _HeartbeatError(ErrorCode.invalid_request, "MemberId can't be empty.")
            if member_epoch < LEAVE_EPOCH:
                raise _HeartbeatError(ErrorCode.invalid_request, f"MemberEpoch is "
                                      f"{member_epoch}, but must be greater than or equal "
                                      "to -1.")
            if member_epoch == JOIN_EPOCH and not names:
                raise _HeartbeatError(ErrorCode.invalid_request, "SubscribedTopicNames must "
                                      "be set in first request.")
            if member_epoch == LEAVE_EPOCH:
                result = self._share_leave(group_id, member_id, now_ms, fx)
            else:
                result = self._share_heartbeat(group_id, member_id, member_epoch, rack_id,
                                               names, client_id, client_host, now_ms)
        except _HeartbeatError as exc:
            result = ConsumerHeartbeatResult(exc.error_code, str(exc))
        self._share_records(group_id, before, fx)
        fx.respond(token, result)
        return fx

    def _share_group_for(self, group_id: str, create: bool) -> ShareGroup:
        group = self.share_groups.get(group_id)
        if group is not None:
            return group
        if (group_id in self.groups or group_id in self.consumer_groups
                or group_id in self.streams_groups):
            raise _HeartbeatError(ErrorCode.group_id_not_found,
                                  f"Group {group_id} is not a share group.")
        if not create:
            raise _HeartbeatError(ErrorCode.unknown_member_id,
                                  f"Group {group_id} has no member of that id.")
        group = self.share_groups[group_id] = ShareGroup(group_id)
        return group

    def _share_heartbeat(self, group_id: str, member_id: str, member_epoch: int,
                         rack_id: str | None, names: tuple[str, ...] | None, client_id: str,
                         client_host: str, now_ms: int) -> ConsumerHeartbeatResult:
        joining = member_epoch == JOIN_EPOCH
        group = self._share_group_for(group_id, joining)
        member = group.members.get(member_id)
        bump = False
        if member is None:
            if not joining:
                raise _HeartbeatError(ErrorCode.unknown_member_id, f"Member {member_id} is "
                                      f"not a member of group {group_id}.")
            if len(group.members) >= self.share_settings.max_size:
                raise _HeartbeatError(ErrorCode.group_max_size_reached, f"The share group "
                                      f"has reached its maximum capacity of "
                                      f"{self.share_settings.max_size} members.")
            member = group.members[member_id] = ShareMember(member_id)
            bump = True
            log.info("Share group %s: member %s joins", group_id, member_id)
        elif member_epoch not in (JOIN_EPOCH, member.member_epoch):
            raise _HeartbeatError(ErrorCode.fenced_member_epoch, (
                f"The share group member has a {'greater' if member_epoch > member.member_epoch else 'smaller'} "  # noqa: E501
                f"member epoch ({member_epoch}) than the one known by the group "
                f"coordinator ({member.member_epoch}). The member must rejoin."))
        was = (member.member_epoch, {t: set(p) for t, p in member.assigned.items()})
        member.client_id, member.client_host = client_id, client_host
        if rack_id is not None:
            member.rack_id = rack_id
        if names is not None and sorted(names) != sorted(member.subscribed_topic_names):
            member.subscribed_topic_names = tuple(names)
            bump = True
        if self._share_metadata_changed(group):
            bump = True
        if bump:
            group.group_epoch += 1
        if group.group_epoch > group.assignment_epoch:
            self._assign_share_group(group)
        member.member_epoch = group.assignment_epoch
        member.assigned = group.target.get(member_id, {})
        member.session_deadline = now_ms + self.share_session_timeout_ms(group_id)
        self._schedule(member.session_deadline, SHARE_SESSION, group, member_id)
        assignment = None
        if joining or (member.member_epoch, member.assigned) != was:
            assignment = {t: sorted(ps) for t, ps in member.assigned.items()}
        return ConsumerHeartbeatResult(
            ErrorCode.none, None, member_id, member.member_epoch,
            self.share_heartbeat_interval_ms(group_id), assignment)

    def _share_leave(self, group_id: str, member_id: str, now_ms: int, fx: Effects
                     ) -> ConsumerHeartbeatResult:
        group = self.share_groups.get(group_id)
        if group is None or member_id not in group.members:
            if group is None and (group_id in self.groups or group_id in self.consumer_groups
                                  or group_id in self.streams_groups):
                raise _HeartbeatError(ErrorCode.group_id_not_found,
                                      f"Group {group_id} is not a share group.")
            raise _HeartbeatError(ErrorCode.unknown_member_id, f"Member {member_id} is not a "
                                  f"member of group {group_id}.")
        self._remove_share_member(group, member_id, fx)
        log.info("Share group %s: member %s left", group_id, member_id)
        return ConsumerHeartbeatResult(ErrorCode.none, None, member_id, LEAVE_EPOCH,
                                       self.share_heartbeat_interval_ms(group_id), None)

    def _remove_share_member(self, group: ShareGroup, member_id: str, fx: Effects) -> None:
        del group.members[member_id]
        group.group_epoch += 1
        self._share_metadata_changed(group)
        self._assign_share_group(group)
        fx.share_members_left.append((group.group_id, member_id))

    def _share_metadata_changed(self, group: ShareGroup) -> bool:
        """Whether the partition counts of the group's topics changed since the last
        assignment (and remember the new ones)."""
        now = {t: self.topics[t] for t in group.topic_names() if t in self.topics}
        if now == group.subscribed:
            return False
        group.subscribed = now
        return True

    def _assign_share_group(self, group: ShareGroup) -> None:
        group.target = assign_simple(
            {m.member_id: m.subscribed_topic_names for m in group.members.values()},
            group.subscribed)
        group.assignment_epoch = group.group_epoch
        names = {info.topic_id: name for name, info in group.subscribed.items()}
        for assignment in group.target.values():
            for tid, parts in assignment.items():
                name, known = group.initialized.get(tid, (names[tid], frozenset()))
                if not parts <= known:
                    group.initialized[tid] = (name, known | parts)

    # --- persistence -----------------------------------------------------------------

    def _share_records(self, group_id: str, before: _Persisted, fx: Effects) -> None:
        """The records of what changed in a group since ``before``."""
        after = _persisted(self.share_groups.get(group_id))
        if after == before:
            return
        epoch, members, assignments, initialized = after

        def rec(version: int, value: bytes | None, member_id: str | None = None) -> None:
            fx.records.append(Record(group_id, ot.encode_consumer_group_key(
                version, group_id, member_id), value))

        for member_id in before[1].keys() - members.keys():
            rec(ot.SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT_KEY, None, member_id)
            rec(ot.SHARE_GROUP_MEMBER_METADATA_KEY, None, member_id)
        for member_id, meta in members.items():
            if before[1].get(member_id) != meta:
                rec(ot.SHARE_GROUP_MEMBER_METADATA_KEY,
                    cr.encode_share_member_metadata(*meta), member_id)
            if before[2].get(member_id) != assignments[member_id]:
                member_epoch, assigned = assignments[member_id]
                rec(ot.SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT_KEY,
                    cr.encode_share_current_assignment(
                        member_epoch, {t: set(p) for t, p in assigned.items()}), member_id)
        if initialized != before[3]:
            rec(ot.SHARE_GROUP_STATE_PARTITION_METADATA_KEY,
                cr.encode_share_state_partitions(initialized))
        if epoch != before[0]:
            rec(ot.SHARE_GROUP_METADATA_KEY, cr.encode_share_group_metadata(epoch))

    def share_group_deleted(self, group_id: str, fx: Effects) -> None:
        """DeleteGroups of an (empty) share group: it goes, with its share partitions'
        state; tombstones for its state partitions record, then itself."""
        group = self.share_groups.pop(group_id)
        fx.share_groups_deleted.append(group_id)
        fx.share_states_deleted.extend(
            (group_id, tid, p) for tid, (_, parts) in group.initialized.items()
            for p in sorted(parts))
        for version in (ot.SHARE_GROUP_STATE_PARTITION_METADATA_KEY,
                        ot.SHARE_GROUP_METADATA_KEY):
            fx.records.append(Record(group_id, ot.encode_consumer_group_key(
                version, group_id), None))

    def share_topics_deleted(self, topics: Collection[str], fx: Effects) -> None:
        """Topics were deleted: their share partitions leave every share group, and their
        state goes (as Kafka deletes a deleted topic's share state)."""
        for group in self.share_groups.values():
            gone = [tid for tid, (name, _) in group.initialized.items() if name in topics]
            if not gone:
                continue
            before = _persisted(group)
            for tid in gone:
                _, parts = group.initialized.pop(tid)
                fx.share_states_deleted.extend((group.group_id, tid, p) for p in sorted(parts))
            self._share_records(group.group_id, before, fx)

    def _load_share_record(self, key: ot.ConsumerGroupRecordKey, value: bytes | None
                           ) -> None:
        """Replay one share group record (in log order)."""
        group = self.share_groups.get(key.group)
        if key.version == ot.SHARE_GROUP_METADATA_KEY:
            if value is None:
                self.share_groups.pop(key.group, None)
                return
            if group is None:
                group = self.share_groups[key.group] = ShareGroup(key.group)
            group.group_epoch = cr.decode_share_group_metadata(value)
            return
        if group is None:
            if value is None:
                return
            # Kafka writes a group's member and partition records before its epoch.
            group = self.share_groups[key.group] = ShareGroup(key.group)
        if key.version == ot.SHARE_GROUP_STATE_PARTITION_METADATA_KEY:
            group.initialized = {} if value is None else cr.decode_share_state_partitions(
                value)
            return
        assert key.member_id is not None
        if value is None:
            group.members.pop(key.member_id, None)
            return
        member = group.members.setdefault(key.member_id, ShareMember(key.member_id))
        if key.version == ot.SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT_KEY:
            member.member_epoch, member.assigned = cr.decode_share_current_assignment(value)
            return
        rack_id, client_id, client_host, names = cr.decode_share_member_metadata(value)
        member.rack_id, member.client_id, member.client_host = rack_id, client_id, client_host
        member.subscribed_topic_names = names

    def _finish_share_load(self, now_ms: int, topics: Mapping[str, TopicInfo] | None
                           ) -> None:
        """After replay: each group's target assignment again at its epoch (a member
        behind it gets it at its next heartbeat, as before), and a fresh session for
        every loaded member."""
        if topics is not None:
            self.topics = topics
        for group in self.share_groups.values():
            self._share_metadata_changed(group)
            self._assign_share_group(group)
            for member in group.members.values():
                member.session_deadline = now_ms + self.share_session_timeout_ms(
                    group.group_id)
                self._schedule(member.session_deadline, SHARE_SESSION, group,
                               member.member_id)

    # --- timers and topic changes ----------------------------------------------------

    def share_timer_is_current(self, group: ShareGroup, member_id: str, deadline: int) -> bool:
        if self.share_groups.get(group.group_id) is not group:
            return False
        member = group.members.get(member_id)
        return member is not None and member.session_deadline == deadline

    def on_share_timer(self, group: ShareGroup, member_id: str, fx: Effects) -> None:
        log.info("Member %s of share group %s has failed (session expired), removing it",
                 member_id, group.group_id)
        before = _persisted(group)
        self._remove_share_member(group, member_id, fx)
        self._share_records(group.group_id, before, fx)

    def share_topics_changed(self, topics: Mapping[str, TopicInfo], fx: Effects) -> None:
        """After CreateTopics/CreatePartitions/DeleteTopics: share groups subscribed to a
        changed topic get a new assignment now (members see it at their next
        heartbeat)."""
        self.topics = topics
        for group in self.share_groups.values():
            if group.members and self._share_metadata_changed(group):
                before = _persisted(group)
                group.group_epoch += 1
                self._assign_share_group(group)
                self._share_records(group.group_id, before, fx)

    # --- describe, list, delete ------------------------------------------------------

    def share_group_describe(self, group_ids: Iterable[str]) -> list[ShareGroupDescription]:
        """ShareGroupDescribe (77): an unknown group is GROUP_ID_NOT_FOUND, another kind of
        group too ("Group X is not a share group.")."""
        names = {info.topic_id: name for name, info in self.topics.items()}

        def described(a: Assignment) -> list[DescribedPartitions]:
            return [DescribedPartitions(tid, names.get(tid, ""), sorted(ps))
                    for tid, ps in a.items() if tid in names]

        out = []
        for group_id in group_ids:
            group = self.share_groups.get(group_id)
            if group is None:
                # The state is the schema's default (""), as Kafka answers it.
                out.append(ShareGroupDescription(ErrorCode.group_id_not_found, group_id,
                                                 missing_share_group(self, group_id)))
                continue
            out.append(ShareGroupDescription(
                ErrorCode.none, group_id, None, group.state, group.group_epoch,
                group.assignment_epoch, SIMPLE,
                [ShareMemberDescription(m.member_id, m.rack_id, m.member_epoch, m.client_id,
                                        m.client_host, list(m.subscribed_topic_names),
                                        described(m.assigned))
                 for m in group.members.values()]))
        return out


class ShareOffsetsCheck(NamedTuple):
    """The coordinator's answer to AlterShareGroupOffsets / DeleteShareGroupOffsets: the
    group-level error, and the share partitions concerned (for a delete: those the
    group had state for, now forgotten)."""

    error_code: int
    error_message: str | None
    partitions: cr.InitializedTopics


class ShareAdmin:
    """The share-group offsets admin operations (KIP-932), on ``GroupManager``."""

    share_groups: dict[str, ShareGroup]
    groups: dict[str, Any]
    consumer_groups: dict[str, Any]
    streams_groups: dict[str, Any]
    _effects: Callable[[int], Effects]
    def _share_records(self, group_id: str, before: _Persisted, fx: Effects
                       ) -> None: ...  # pragma: no cover

    def _empty_share_group(self, group_id: str, *, create: bool
                           ) -> ShareGroup | ShareOffsetsCheck:
        group = self.share_groups.get(group_id)
        if group is None:
            if not create or (group_id in self.groups or group_id in self.consumer_groups
                              or group_id in self.streams_groups):
                return ShareOffsetsCheck(ErrorCode.group_id_not_found,
                                         missing_share_group(self, group_id), {})
            group = self.share_groups[group_id] = ShareGroup(group_id)
        if group.members:
            return ShareOffsetsCheck(ErrorCode.non_empty_group,
                                     f"Share group {group_id} is not empty.", {})
        return group

    def share_alter_offsets(self, group_id: str, partitions: cr.InitializedTopics, *,
                            token: Any, now_ms: int) -> Effects:
        """AlterShareGroupOffsets' check: the group must be empty (made if it does not
        exist, as Kafka makes it); the partitions join its initialized ones."""
        fx = self._effects(now_ms)
        before = _persisted(self.share_groups.get(group_id))
        group = self._empty_share_group(group_id, create=True)
        if isinstance(group, ShareOffsetsCheck):
            fx.respond(token, group)
            return fx
        for tid, (name, parts) in partitions.items():
            old = group.initialized.get(tid, (name, frozenset()))[1]
            group.initialized[tid] = (name, old | parts)
        self._share_records(group_id, before, fx)
        fx.respond(token, ShareOffsetsCheck(ErrorCode.none, None, partitions))
        return fx

    def share_delete_offsets(self, group_id: str, topic_ids: Iterable[uuid.UUID], *,
                             token: Any, now_ms: int) -> Effects:
        """DeleteShareGroupOffsets' check: the group must exist and be empty; the topics
        leave its initialized partitions (their state is then deleted)."""
        fx = self._effects(now_ms)
        before = _persisted(self.share_groups.get(group_id))
        group = self._empty_share_group(group_id, create=False)
        if isinstance(group, ShareOffsetsCheck):
            fx.respond(token, group)
            return fx
        removed = {tid: group.initialized.pop(tid) for tid in topic_ids
                   if tid in group.initialized}
        self._share_records(group_id, before, fx)
        fx.respond(token, ShareOffsetsCheck(ErrorCode.none, None, removed))
        return fx

    def share_state_partitions(self, group_id: str) -> ShareOffsetsCheck:
        """DescribeShareGroupOffsets: the group's initialized share partitions."""
        group = self.share_groups.get(group_id)
        if group is None:
            return ShareOffsetsCheck(ErrorCode.group_id_not_found,
                                     missing_share_group(self, group_id), {})
        return ShareOffsetsCheck(ErrorCode.none, None, dict(group.initialized))
