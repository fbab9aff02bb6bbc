"""The groups of one coordinator (Kafka's GroupMetadataManager): classic groups and
KIP-848 ``consumer`` groups, their membership, sessions and timers, and their records.

``GroupManager`` is built from two mixins, each a protocol: ``ClassicRebalance``
(``classic_rebalance.py``: JoinGroup, SyncGroup and the rebalances of classic groups)
and ``ConsumerProtocol`` (``consumer_protocol.py``: ConsumerGroupHeartbeat and
ConsumerGroupDescribe). Here: the groups themselves, Heartbeat and LeaveGroup of classic
groups, ListGroups and DescribeGroups, the groups' timers, and the replay of the
groups' own records. Like the rest of the package it does no I/O: operations take
``now_ms`` and return ``Effects``.

Timers live in the coordinator's one heap (``GroupCoordinator`` owns it, so that they
fire in deadline order with the offset expiry); ``_schedule`` arms one there and the
coordinator's ``tick`` hands each due one to ``on_timer``, after ``timer_is_current``
says it still matches the state.

Committed offsets are kept on their group (``Group.offsets``, ``ConsumerGroup.offsets``,
as Kafka's GroupMetadata kept them), so that a group changing kind takes them along.
``OffsetManager`` (``offset_manager.py``) reads and writes them there, and asks this
manager what only it knows: whether a member may commit (``validate_offset_commit``,
``validate_txn_offset_commit``, and ``ConsumerProtocol``'s checks for KIP-848 groups),
a member's session restarting on a commit, and whether a group left without offsets is
over (``maybe_delete_group``, ``maybe_delete_consumer_group``).

State is rebuilt after a restart by replaying every ``__consumer_offsets`` record in log
order: the coordinator hands group records to ``load`` and offset commits to the offset
manager; then ``finish_load`` gives the loaded members fresh sessions (as Kafka's
onGroupLoaded gives them).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

from kio.schema.errors import ErrorCode

from odradek.coordinator import offsets_topic as ot
from odradek.coordinator.classic_rebalance import (
    HEARTBEAT_TIMER,
    JOIN_TIMER,
    PENDING_MEMBER_TIMER,
    SYNC_TIMER,
    ClassicRebalance,
)
from odradek.coordinator.consumer_group import ConsumerGroup, ConsumerGroupState
from odradek.coordinator.consumer_protocol import CG_REBALANCE, CG_SESSION, ConsumerProtocol
from odradek.coordinator.group import Group, GroupState, Member
from odradek.coordinator.results import (
    UNKNOWN_MEMBER,
    Effects,
    GroupDescription,
    GroupOverview,
    HeartbeatResult,
    LeaveMemberResult,
    LeaveResult,
    MemberDescription,
    MemberIdentity,
    Record,
)
from odradek.coordinator.share_group import (
    DEFAULT_SHARE_SETTINGS,
    SHARE_SESSION,
    ShareAdmin,
    ShareGroup,
    ShareProtocol,
    ShareSettings,
)
from odradek.coordinator.streams_group import (
    STREAMS_REBALANCE,
    STREAMS_SESSION,
    StreamsProtocol,
)
from odradek.coordinator.streams_state import (
    DEFAULT_STREAMS_SETTINGS,
    StreamsGroup,
    StreamsSettings,
)

log = logging.getLogger(__name__)

# Arms a timer in the coordinator's heap: (deadline, kind, group, member id); the
# offset expiry has no group.
Schedule = Callable[[int, str, Group | ConsumerGroup | ShareGroup | StreamsGroup | None, str],
                    None]
AnyGroup = Group | ConsumerGroup | ShareGroup | StreamsGroup


class GroupManager(ClassicRebalance, ConsumerProtocol, ShareProtocol, ShareAdmin,
                   StreamsProtocol):
    """The groups a ``GroupCoordinator`` coordinates. Not thread-safe: one caller at a
    time. Classic groups are in ``groups``; KIP-848 ``consumer`` groups
    (``consumer_protocol.py``) in ``consumer_groups``; a group id is in one or the
    other."""

    def __init__(
        self,
        *,
        initial_rebalance_delay_ms: int,
        min_session_timeout_ms: int,
        max_session_timeout_ms: int,
        max_group_size: int,
        new_uuid: Callable[[], str],
        effects: Callable[[int], Effects],
        schedule: Schedule,
        consumer_session_timeout_ms: int,
        consumer_heartbeat_interval_ms: int,
        consumer_assignors: Iterable[str],
        share_settings: ShareSettings = DEFAULT_SHARE_SETTINGS,
        streams_settings: StreamsSettings = DEFAULT_STREAMS_SETTINGS,
    ) -> None:
        self.initial_rebalance_delay_ms = initial_rebalance_delay_ms
        self.min_session_timeout_ms = min_session_timeout_ms
        self.max_session_timeout_ms = max_session_timeout_ms
        self.max_group_size = max_group_size
        self._new_uuid = new_uuid
        # The coordinator's: every operation starts its Effects there, since the first
        # one also starts the periodic offset expiry.
        self._effects = effects
        self._schedule_timer = schedule
        self.groups: dict[str, Group] = {}
        self._init_consumer_protocol(
            consumer_session_timeout_ms, consumer_heartbeat_interval_ms, consumer_assignors)
        self._init_share_protocol(share_settings)
        self._init_streams_protocol(streams_settings)

    def _schedule(self, deadline: int, kind: str, group: AnyGroup | None,
                  member_id: str = "") -> None:
        # A method rather than the coordinator's callable itself: the mixins leave out
        # the member id of group-wide timers.
        self._schedule_timer(deadline, kind, group, member_id)

    # --- Heartbeat and LeaveGroup ----------------------------------------------------

    def heartbeat(
        self,
        group_id: str,
        member_id: str,
        generation_id: int,
        group_instance_id: str | None,
        *,
        token: Any,
        now_ms: int,
    ) -> Effects:
        fx = self._effects(now_ms)
        fx.respond(
            token,
            HeartbeatResult(
                self._heartbeat(group_id, member_id, generation_id, group_instance_id, now_ms)
            ),
        )
        return fx

    def _heartbeat(
        self,
        group_id: str,
        member_id: str,
        generation_id: int,
        group_instance_id: str | None,
        now_ms: int,
    ) -> int:
        if not group_id:
            return ErrorCode.invalid_group_id
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.unknown_member_id
        error = self._validate_member(group, member_id, group_instance_id)
        if error is not None:
            return error
        if generation_id != group.generation_id:
            return ErrorCode.illegal_generation
        if group.is_(GroupState.EMPTY):
            return ErrorCode.unknown_member_id
        member = group.members[member_id]
        self._set_heartbeat(group, member, now_ms + member.session_timeout_ms)
        # During a join phase the heartbeat answer is how members learn to rejoin.
        if group.is_(GroupState.PREPARING_REBALANCE):
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    def leave(
        self,
        group_id: str,
        members: Iterable[MemberIdentity | tuple[str, str | None]],
        *,
        token: Any,
        now_ms: int,
    ) -> Effects:
        """LeaveGroup: v0-v2 name one member by id (their response has only the top-level
        error: use that member's); v3+ (KIP-345) a batch, each by member id or, with
        member id "", by group.instance.id (an admin removing a static member)."""
        fx = self._effects(now_ms)
        identities = [MemberIdentity(*m) for m in members]
        if not group_id:
            fx.respond(token, LeaveResult(ErrorCode.invalid_group_id))
            return fx
        group = self.groups.get(group_id)
        if group is None:
            fx.respond(
                token,
                LeaveResult(ErrorCode.none, [
                    LeaveMemberResult(m.member_id, m.group_instance_id, ErrorCode.unknown_member_id)
                    for m in identities
                ]),
            )
            return fx
        results = []
        error: int | None  # _validate_member's None is answered as NONE
        for ident in identities:
            why = f"member left the group; client reason: {ident.reason or 'not provided'}"
            if ident.member_id == UNKNOWN_MEMBER:
                target = (
                    group.current_static_member(ident.group_instance_id)
                    if ident.group_instance_id is not None
                    else None
                )
                if target is None:
                    error = ErrorCode.unknown_member_id
                else:
                    self._remove_member_and_update_group(
                        group, group.members[target], now_ms, fx, why
                    )
                    error = ErrorCode.none
            elif ident.member_id in group.pending_members:
                del group.pending_members[ident.member_id]
                if group.is_(GroupState.PREPARING_REBALANCE):
                    self._try_complete_join(group, now_ms, fx)
                error = ErrorCode.none
            else:
                error = self._validate_member(group, ident.member_id, ident.group_instance_id)
                if error is None:
                    self._remove_member_and_update_group(
                        group, group.members[ident.member_id], now_ms, fx, why
                    )
                    error = ErrorCode.none
            results.append(LeaveMemberResult(ident.member_id, ident.group_instance_id, error))
        fx.respond(token, LeaveResult(ErrorCode.none, results))
        return fx

    # --- asked by the offset manager ------------------------------------------------

    def validate_offset_commit(
        self, group: Group, member_id: str, generation_id: int, group_instance_id: str | None
    ) -> int | None:
        """OffsetCommit's member check for a classic group. Generation -1 with no member
        id is a commit from outside group management."""
        if generation_id < 0 and group.is_(GroupState.EMPTY):
            return None
        if generation_id >= 0 or member_id != UNKNOWN_MEMBER or group_instance_id is not None:
            error = self._validate_member(group, member_id, group_instance_id)
            if error is None and generation_id != group.generation_id:
                error = ErrorCode.illegal_generation
            return error
        # Once the group has members, only they may commit.
        return None if group.is_(GroupState.EMPTY) else ErrorCode.unknown_member_id

    def validate_txn_offset_commit(
        self, group_id: str, member_id: str, generation_id: int, group_instance_id: str | None,
        *, group_id_not_found: bool = False, stale_member_epoch: bool = False,
    ) -> int | None:
        """TxnOffsetCommit's member check, as Kafka's doTxnCommitOffsets: a commit from
        outside the group (no member id, generation -1) is accepted whatever the group's
        state. A group that does not exist takes a commit from outside it (Kafka 4.4
        makes an empty group for it) and refuses one from a generation: GROUP_ID_NOT_FOUND
        where the version can say it (``group_id_not_found``: v6+, KIP-1319), else
        ILLEGAL_GENERATION. A KIP-848 (or streams) member at another epoch is
        STALE_MEMBER_EPOCH where the version can say it (``stale_member_epoch``: v6+),
        else ILLEGAL_GENERATION."""
        cg = self.modern_group(group_id)
        group = self.groups.get(group_id)
        error: int | None = None
        if cg is not None:
            if member_id != UNKNOWN_MEMBER and member_id not in cg.members:
                error = ErrorCode.unknown_member_id
            elif generation_id >= 0 and member_id in cg.members and (
                    generation_id != cg.members[member_id].member_epoch):
                error = (ErrorCode.stale_member_epoch if stale_member_epoch
                         else ErrorCode.illegal_generation)
        elif group is not None:
            if group_instance_id is not None and group.static_members.get(
                    group_instance_id, member_id) != member_id:
                error = ErrorCode.fenced_instance_id
            elif member_id != UNKNOWN_MEMBER and not group.has(member_id):
                error = ErrorCode.unknown_member_id
            elif generation_id >= 0 and generation_id != group.generation_id:
                error = ErrorCode.illegal_generation
        elif generation_id >= 0:
            error = (ErrorCode.group_id_not_found if group_id_not_found
                     else ErrorCode.illegal_generation)
        return error

    def reschedule_heartbeat(self, group: Group, member: Member, now_ms: int) -> None:
        """A member's session restarts: an offset commit is a sign of life too (Kafka's
        rescheduleClassicGroupMemberHeartbeat)."""
        self._set_heartbeat(group, member, now_ms + member.session_timeout_ms)

    def maybe_delete_group(self, group: Group, now_ms: int, fx: Effects) -> None:
        """After some of its offsets were removed: an empty group left without offsets
        is over (Kafka's cleanupGroupMetadata), and a Dead one goes."""
        if group.is_(GroupState.EMPTY) and not group.offsets:
            group.transition(GroupState.DEAD, now_ms)
        if group.is_(GroupState.DEAD):
            if self.groups.get(group.group_id) is group:
                del self.groups[group.group_id]
            # Generation 0: the group only ever stored offsets, it has no metadata record.
            if group.generation_id > 0:
                fx.records.append(
                    Record(group.group_id, ot.encode_group_metadata_key(group.group_id), None)
                )

    def modern_group(self, group_id: str) -> ConsumerGroup | StreamsGroup | None:
        """The KIP-848 consumer group or KIP-1071 streams group of that id: the groups
        whose members commit offsets at their member epoch."""
        return self.consumer_groups.get(group_id) or self.streams_groups.get(group_id)

    def modern_groups(self) -> list[ConsumerGroup | StreamsGroup]:
        """Every consumer and streams group (a copy: callers may delete some)."""
        return [*self.consumer_groups.values(), *self.streams_groups.values()]

    def maybe_delete_consumer_group(self, group: ConsumerGroup | StreamsGroup, fx: Effects
                                    ) -> None:
        """After some of its offsets were removed: an empty KIP-848 (or streams) group
        left without offsets goes."""
        if isinstance(group, StreamsGroup):
            self.maybe_delete_streams_group(group, fx)
            return
        if (not group.members and not group.offsets
                and self.consumer_groups.get(group.group_id) is group):
            del self.consumer_groups[group.group_id]
            self._cg_deleted(group.group_id, fx)

    # --- admin -----------------------------------------------------------------------

    def prepare_delete(self, group_id: str, now_ms: int) -> int:
        """DeleteGroups' check (Kafka's validateDeleteGroup): only a group without
        members can go. A classic group that can is Dead from now; it goes, and a
        KIP-848 one too, when the offset manager has removed its offsets."""
        cg = self.consumer_groups.get(group_id)
        if cg is not None:
            return ErrorCode.non_empty_group if cg.members else ErrorCode.none
        share = self.share_groups.get(group_id)
        if share is not None:
            return ErrorCode.non_empty_group if share.members else ErrorCode.none
        streams = self.streams_groups.get(group_id)
        if streams is not None:
            return ErrorCode.non_empty_group if streams.members else ErrorCode.none
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.group_id_not_found
        if group.is_(GroupState.EMPTY):
            group.transition(GroupState.DEAD, now_ms)
            return ErrorCode.none
        return ErrorCode.non_empty_group

    def list_groups(self, states_filter: Iterable[str] | None = None) -> list[GroupOverview]:
        """ListGroups; ``states_filter`` (v4+, KIP-518) matches state names ignoring case."""
        wanted = {s.lower() for s in states_filter or ()}
        classic = [
            GroupOverview(g.group_id, g.protocol_type or "", g.state.value)
            for g in self.groups.values()
            if not wanted or g.state.value.lower() in wanted
        ]
        consumer = [
            GroupOverview(g.group_id, "consumer", g.state.value, "consumer")
            for g in self.consumer_groups.values()
            if not wanted or g.state.value.lower() in wanted
        ]
        share = [
            GroupOverview(g.group_id, "share", g.state, "share")
            for g in self.share_groups.values()
            if not wanted or g.state.lower() in wanted
        ]
        streams = [
            GroupOverview(g.group_id, "streams", g.state, "streams")
            for g in self.streams_groups.values()
            if not wanted or g.state.lower() in wanted
        ]
        return classic + consumer + share + streams

    def describe_groups(
        self, group_ids: Iterable[str], *, not_found_error: bool = False
    ) -> list[GroupDescription]:
        """DescribeGroups. An unknown group is described as Dead with no error, as before
        v6; ``not_found_error`` (v6+) answers GROUP_ID_NOT_FOUND for it instead.
        Member metadata and assignments are shown only for a Stable group."""
        out = []
        for group_id in group_ids:
            group = self.groups.get(group_id)
            if (group_id in self.consumer_groups or group_id in self.share_groups
                    or group_id in self.streams_groups):
                # Kafka: "Group X is not a classic group."; described as Dead before v6.
                error = ErrorCode.group_id_not_found if not_found_error else ErrorCode.none
                out.append(GroupDescription(error, group_id, ConsumerGroupState.DEAD.value,
                                            "", ""))
                continue
            if group is None:
                error = ErrorCode.group_id_not_found if not_found_error else ErrorCode.none
                out.append(GroupDescription(error, group_id, GroupState.DEAD.value, "", ""))
                continue
            stable = group.is_(GroupState.STABLE) and group.protocol_name is not None
            members = [
                MemberDescription(
                    m.member_id, m.group_instance_id, m.client_id, m.client_host,
                    m.metadata(group.protocol_name) if stable and group.protocol_name else b"",
                    m.assignment if stable else b"",
                )
                for m in group.members.values()
            ]
            out.append(
                GroupDescription(
                    ErrorCode.none, group_id, group.state.value, group.protocol_type or "",
                    (group.protocol_name or "") if stable else "", members,
                )
            )
        return out

    # --- timers ----------------------------------------------------------------------

    def timer_is_current(self, kind: str, group: AnyGroup, member_id: str, deadline: int
                         ) -> bool:
        """Whether a timer popped from the heap still matches the state (entries are
        never removed when a deadline moves)."""
        if kind in (STREAMS_SESSION, STREAMS_REBALANCE):
            assert isinstance(group, StreamsGroup)
            return self.streams_timer_is_current(kind, group, member_id, deadline)
        if kind == SHARE_SESSION:
            assert isinstance(group, ShareGroup)
            return self.share_timer_is_current(group, member_id, deadline)
        if kind in (CG_SESSION, CG_REBALANCE):
            assert isinstance(group, ConsumerGroup)  # what _arm_consumer_timers schedules
            return self._consumer_timer_is_current(kind, group, member_id, deadline)
        if self.groups.get(group.group_id) is not group:
            return False
        if kind == HEARTBEAT_TIMER:
            member = group.members.get(member_id)
            return member is not None and member.heartbeat_deadline == deadline
        if kind == PENDING_MEMBER_TIMER:
            return group.pending_members.get(member_id) == deadline
        if kind == JOIN_TIMER:
            return group.join_deadline == deadline and group.is_(GroupState.PREPARING_REBALANCE)
        return group.sync_deadline == deadline

    def on_timer(self, kind: str, group: AnyGroup, member_id: str, now_ms: int,
                 fx: Effects) -> None:
        """A current timer is due: ``now_ms`` is its deadline."""
        if kind in (STREAMS_SESSION, STREAMS_REBALANCE):
            assert isinstance(group, StreamsGroup)
            self.on_streams_timer(kind, group, member_id, now_ms, fx)
            return
        if kind == SHARE_SESSION:
            assert isinstance(group, ShareGroup)
            self.on_share_timer(group, member_id, fx)
            return
        if kind in (CG_SESSION, CG_REBALANCE):
            assert isinstance(group, ConsumerGroup)  # what _arm_consumer_timers schedules
            self._on_consumer_timer(kind, group, member_id, now_ms, fx)
            return
        assert isinstance(group, Group)  # timer_is_current found it in self.groups
        if kind == HEARTBEAT_TIMER:
            self._on_heartbeat_deadline(group, group.members[member_id], now_ms, fx)
        elif kind == PENDING_MEMBER_TIMER:
            # A KIP-394 member that never came back with its id.
            del group.pending_members[member_id]
            if group.is_(GroupState.PREPARING_REBALANCE):
                self._try_complete_join(group, now_ms, fx)
        elif kind == JOIN_TIMER:
            self._on_join_deadline(group, now_ms, fx)
        elif kind == SYNC_TIMER:
            self._on_sync_deadline(group, now_ms, fx)

    def _on_heartbeat_deadline(
        self, group: Group, member: Member, now_ms: int, fx: Effects
    ) -> None:
        member.heartbeat_deadline = None
        if not member.is_new and (member.join is not None or member.sync is not None):
            # Parked in a join or sync: it cannot heartbeat, and its session restarts
            # when the parked request is answered.
            return
        log.info("Member %s of group %s has failed, removing it", member.member_id, group.group_id)
        self._remove_member_and_update_group(
            group, member, now_ms, fx, f"member {member.member_id}'s session expired"
        )

    # --- replay ----------------------------------------------------------------------

    def load(self, key: ot.GroupMetadataKey | ot.ConsumerGroupRecordKey, value: bytes | None
             ) -> None:
        """Replay one group record (``GroupCoordinator.load`` hands them over in log
        order; offset commits go to the offset manager)."""
        if isinstance(key, ot.ConsumerGroupRecordKey):
            if key.version in ot.SHARE_GROUP_KEYS:
                self._load_share_record(key, value)
            elif key.version in ot.STREAMS_GROUP_KEYS:
                self._load_streams_record(key, value)
            else:
                self._load_consumer_record(key, value)
            return
        if value is not None and key.group in self.consumer_groups:
            # The group became a classic one: its offsets go with it.
            offsets_only = Group(key.group, now_ms=0)
            offsets_only.offsets = self.consumer_groups.pop(key.group).offsets
            self.groups[key.group] = offsets_only
        old = self.groups.pop(key.group, None)
        offsets = old.offsets if old is not None else {}
        if value is None:
            if offsets:
                group = self.groups[key.group] = Group(key.group, now_ms=0)
                group.state_timestamp = None
                group.offsets = offsets
            return
        group = self._group_from_record(key.group, ot.decode_group_metadata_value(value))
        group.offsets = offsets
        self.groups[key.group] = group

    @staticmethod
    def _group_from_record(group_id: str, v: ot.GroupMetadataValue) -> Group:
        state = GroupState.STABLE if v.members else GroupState.EMPTY
        group = Group(group_id, now_ms=0, state=state)
        group.state_timestamp = None if v.current_state_timestamp < 0 else v.current_state_timestamp
        group.protocol_type = v.protocol_type or None
        group.generation_id = v.generation
        group.protocol_name = v.protocol
        for m in v.members:
            member = Member(
                m.member_id, m.group_instance_id, m.client_id, m.client_host,
                m.rebalance_timeout, m.session_timeout, v.protocol_type,
                [(v.protocol or "", m.subscription)],
            )
            member.assignment = m.assignment
            group.add(member)
        group.protocol_type = v.protocol_type or None
        group.leader_id = v.leader if v.leader in group.members else next(iter(group.members), None)
        group.subscribed = group.compute_subscribed_topics()
        return group

    def finish_load(self, now_ms: int, topics: Any = None) -> Effects:
        """After replay: loaded members get a full session from now (they were alive a
        moment ago, and cannot have heartbeated to a coordinator that was loading); a
        group above group.max.size is rebalanced so members beyond it are turned away.
        ``topics`` (name -> TopicInfo) is the broker's topic metadata, which KIP-848
        groups assign from."""
        fx = self._effects(now_ms)
        self._finish_consumer_load(now_ms, topics)
        self._finish_share_load(now_ms, topics)
        self._finish_streams_load(now_ms, None if topics is None else {
            name: info.partitions for name, info in topics.items()})
        for group in list(self.groups.values()):
            for member in group.members.values():
                self._set_heartbeat(group, member, now_ms + member.session_timeout_ms)
            if len(group.members) > self.max_group_size:
                self._prepare_rebalance(group, now_ms, fx, "loaded group is over group.max.size")
        return fx
