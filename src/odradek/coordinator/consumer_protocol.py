"""The coordinator's side of KIP-848: ConsumerGroupHeartbeat, ConsumerGroupDescribe, and
the member-epoch checks of offset commits and fetches for ``consumer`` groups.

A mixin of ``GroupManager`` (``group_manager.py``; it shares its groups, timers,
clock-less ``Effects`` and uuid source); the groups themselves and the assignors are in
``consumer_group.py``. The flow of one heartbeat, as in Kafka's
GroupMetadataManager.consumerGroupHeartbeat:

1. validate the request, find or create the group and the member (epoch 0 joins, -1
   leaves, -2 leaves for now as a static member), fence a stale or future member epoch;
2. apply what changed (subscription, assignor, rebalance timeout); a change, a new
   member or new topic metadata bumps the group epoch;
3. a group epoch ahead of the assignment epoch gets a new target assignment from the
   group's assignor;
4. reconcile the member one step towards its target (revoke before assign);
5. answer with the member epoch and, when it changed or was asked for, its assignment.

Timers: each member's session (``group.consumer.session.timeout.ms``) and, while it
has partitions to give up, its rebalance timeout; either removes it from the group.

Persistence: after every operation the group's persistent state is compared with what
it was before, and the differences become records in Kafka's KIP-848 layouts
(``consumer_records.py``): member metadata, group epoch, target assignment members and
epoch, current member assignments, tombstones for members that left and groups that
are gone. ``load`` replays them; ``finish_load`` gives loaded members a fresh session.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kio.schema.errors import ErrorCode

from odradek.coordinator import consumer_records as cr
from odradek.coordinator import offsets_topic as ot
from odradek.coordinator.consumer_group import (
    ASSIGNORS,
    DEFAULT_ASSIGNORS,
    JOIN_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    Assignment,
    ConsumerGroup,
    ConsumerMember,
    MemberState,
    TopicInfo,
    is_subset,
    reconcile,
    valid_regex,
)
from odradek.coordinator.group import Group
from odradek.coordinator.results import (
    ConsumerGroupDescription,
    ConsumerHeartbeatResult,
    ConsumerMemberDescription,
    DescribedPartitions,
    Effects,
    Record,
)
from odradek.coordinator.streams_state import StreamsGroup

log = logging.getLogger(__name__)

GROUP_CONSUMER_SESSION_TIMEOUT_MS = 45_000  # group.consumer.session.timeout.ms
GROUP_CONSUMER_HEARTBEAT_INTERVAL_MS = 5_000  # group.consumer.heartbeat.interval.ms

CG_SESSION = "consumer-session"
CG_REBALANCE = "consumer-rebalance"

_STATE_CODES = {
    MemberState.STABLE: cr.STATE_STABLE,
    MemberState.UNREVOKED_PARTITIONS: cr.STATE_UNREVOKED_PARTITIONS,
    MemberState.UNRELEASED_PARTITIONS: cr.STATE_UNRELEASED_PARTITIONS,
}
_STATES = {code: state for state, code in _STATE_CODES.items()}
# A group's persistent state: group epoch, assignment epoch, per member its metadata and
# current assignment, per member its target assignment.
_Snapshot = tuple[int, int, dict[str, tuple[cr.MemberMetadata, cr.CurrentAssignment]],
                  dict[str, Assignment]]
_EMPTY: _Snapshot = (0, 0, {}, {})


class _HeartbeatError(Exception):
    def __init__(self, error_code: int, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code


def _no_group_configs(group_id: str) -> Mapping[str, str]:
    return {}


class ConsumerProtocol:
    """Mixed into ``GroupManager``; see the module docstring."""

    # Provided by GroupManager.
    groups: dict[str, Group]
    consumer_groups: dict[str, ConsumerGroup]
    share_groups: dict[str, Any]
    streams_groups: dict[str, Any]
    consumer_session_timeout_ms: int
    consumer_heartbeat_interval_ms: int
    consumer_assignors: tuple[str, ...]
    topics: Mapping[str, TopicInfo]
    # A group's group configs (Kafka's GroupConfig, set by IncrementalAlterConfigs on
    # the group): consumer.session.timeout.ms and consumer.heartbeat.interval.ms over
    # the broker's group.consumer.* settings. Set by the owner; none by default.
    group_configs: Callable[[str], Mapping[str, str]]

    _new_uuid: Callable[[], str]
    _effects: Callable[[int], Effects]
    def _schedule(self, deadline: int, kind: str, group: Group | ConsumerGroup | None,
                  member_id: str = "") -> None: ...  # pragma: no cover

    def _init_consumer_protocol(
        self,
        session_timeout_ms: int = GROUP_CONSUMER_SESSION_TIMEOUT_MS,
        heartbeat_interval_ms: int = GROUP_CONSUMER_HEARTBEAT_INTERVAL_MS,
        assignors: Iterable[str] = DEFAULT_ASSIGNORS,
    ) -> None:
        self.consumer_groups = {}
        self.consumer_session_timeout_ms = session_timeout_ms
        self.consumer_heartbeat_interval_ms = heartbeat_interval_ms
        self.consumer_assignors = tuple(assignors)
        self.group_configs = _no_group_configs
        unknown = [a for a in self.consumer_assignors if a not in ASSIGNORS]
        if unknown or not self.consumer_assignors:
            raise ValueError(f"unknown assignors {unknown}; known: {sorted(ASSIGNORS)}")
        self.topics = {}

    def session_timeout_ms(self, group_id: str) -> int:
        """The group's consumer.session.timeout.ms, else the broker's."""
        value = self.group_configs(group_id).get("consumer.session.timeout.ms")
        return self.consumer_session_timeout_ms if value is None else int(value)

    def heartbeat_interval_ms(self, group_id: str) -> int:
        """The group's consumer.heartbeat.interval.ms, else the broker's."""
        value = self.group_configs(group_id).get("consumer.heartbeat.interval.ms")
        return self.consumer_heartbeat_interval_ms if value is None else int(value)

    # --- ConsumerGroupHeartbeat ------------------------------------------------------

    def consumer_heartbeat(
        self,
        group_id: str,
        member_id: str,
        member_epoch: int,
        *,
        instance_id: str | None = None,
        rack_id: str | None = None,
        rebalance_timeout_ms: int = -1,
        subscribed_topic_names: Iterable[str] | None = None,
        subscribed_topic_regex: str | None = None,
        server_assignor: str | None = None,
        owned: Iterable[tuple[uuid.UUID, Iterable[int]]] | None = None,
        client_id: str = "",
        client_host: str = "",
        member_id_from_client: bool = True,
        topics: Mapping[str, TopicInfo] | None = None,
        token: Any,
        now_ms: int,
    ) -> Effects:
        """ConsumerGroupHeartbeat (API 68). Fields left None (or -1) are "unchanged", as
        on the wire. ``member_id_from_client`` is v1+ (the client generates its member
        id; v0 joins with "" and is given one). ``topics`` is the broker's topic
        metadata now (name -> id and partition count); the previous one is kept when
        None."""
        fx = self._effects(now_ms)
        if topics is not None:
            self.topics = topics
        owned_map: Assignment | None = None
        if owned is not None:
            owned_map = {}
            for tid, parts in owned:
                owned_map.setdefault(tid, set()).update(parts)
        names = None if subscribed_topic_names is None else tuple(subscribed_topic_names)
        before = self._cg_snapshot(self.consumer_groups.get(group_id))
        classic = self.groups.get(group_id)
        try:
            self._validate_heartbeat(group_id, member_id, member_epoch, instance_id,
                                     rebalance_timeout_ms, names, subscribed_topic_regex,
                                     server_assignor, owned_map, member_id_from_client)
            if member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
                result = self._consumer_leave(group_id, member_id, member_epoch, instance_id,
                                              now_ms)
            else:
                result = self._consumer_heartbeat(
                    group_id, member_id, member_epoch, instance_id, rack_id,
                    rebalance_timeout_ms, names, subscribed_topic_regex, server_assignor,
                    owned_map, client_id, client_host, now_ms)
        except _HeartbeatError as exc:
            result = ConsumerHeartbeatResult(exc.error_code, str(exc))
        if classic is not None and group_id not in self.groups and classic.generation_id > 0:
            # The classic group it was made from is gone.
            fx.records.append(Record(group_id, ot.encode_group_metadata_key(group_id), None))
        self._cg_records(group_id, before, fx)
        fx.respond(token, result)
        return fx

    def _validate_heartbeat(
        self, group_id: str, member_id: str, member_epoch: int, instance_id: str | None,
        rebalance_timeout_ms: int, names: tuple[str, ...] | None, regex: str | None,
        assignor: str | None, owned: Assignment | None, member_id_from_client: bool,
    ) -> None:
        """Kafka's throwIfConsumerGroupHeartbeatRequestIsInvalid."""
        if not group_id:
            raise _HeartbeatError(ErrorCode.invalid_request, "GroupId can't be empty.")
        if member_id_from_client and not member_id:
            raise _HeartbeatError(ErrorCode.invalid_request, "MemberId can't be empty.")
        if member_epoch == JOIN_GROUP_MEMBER_EPOCH:
            if rebalance_timeout_ms == -1:
                raise _HeartbeatError(ErrorCode.invalid_request,
                                      "RebalanceTimeoutMs must be provided in first request.")
            if owned is None or owned:  # null too, as Kafka 4.4 checks
                raise _HeartbeatError(ErrorCode.invalid_request,
                                      "TopicPartitions must be empty when (re-)joining.")
            if names is None and regex is None:
                raise _HeartbeatError(ErrorCode.invalid_request, "SubscribedTopicNames or "
                                      "SubscribedTopicRegex must be set in first request.")
        elif member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            if instance_id is None:
                raise _HeartbeatError(ErrorCode.invalid_request, "InstanceId can't be null.")
        elif member_epoch < LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            raise _HeartbeatError(ErrorCode.invalid_request, f"MemberEpoch is {member_epoch}, "
                                  "but must be greater than or equal to -2.")
        if member_epoch != JOIN_GROUP_MEMBER_EPOCH and not member_id:
            raise _HeartbeatError(ErrorCode.invalid_request, "MemberId can't be empty.")
        if assignor is not None and assignor not in self.consumer_assignors:
            raise _HeartbeatError(ErrorCode.unsupported_assignor,
                                  f"ServerAssignor {assignor} is not supported. Supported "
                                  f"assignors: {', '.join(self.consumer_assignors)}.")
        if regex is not None and not valid_regex(regex):
            raise _HeartbeatError(ErrorCode.invalid_regular_expression,
                                  f"SubscribedTopicRegex {regex} is not a valid regular "
                                  "expression.")

    def _consumer_group_for(self, group_id: str, create: bool, now_ms: int) -> ConsumerGroup:
        group = self.consumer_groups.get(group_id)
        if group is not None:
            return group
        classic = self.groups.get(group_id)
        if group_id in self.share_groups or group_id in self.streams_groups:
            raise _HeartbeatError(ErrorCode.group_id_not_found,
                                  f"Group {group_id} is not a consumer group.")
        if classic is not None and (classic.members or classic.protocol_type not in (
                None, "consumer")):
            # Online upgrade of a live classic group is not served.
            raise _HeartbeatError(ErrorCode.group_id_not_found,
                                  f"Group {group_id} is not a consumer group.")
        if not create:
            # The group is gone (expired, or the broker restarted): the member rejoins.
            raise _HeartbeatError(ErrorCode.unknown_member_id,
                                  f"Group {group_id} has no member of that id.")
        group = ConsumerGroup(group_id, now_ms)
        if classic is not None:
            # An empty classic group (offsets only) becomes a consumer group, as in Kafka.
            del self.groups[group_id]
            group.offsets = classic.offsets
        self.consumer_groups[group_id] = group
        return group

    def _consumer_heartbeat(
        self, group_id: str, member_id: str, member_epoch: int, instance_id: str | None,
        rack_id: str | None, rebalance_timeout_ms: int, names: tuple[str, ...] | None,
        regex: str | None, assignor: str | None, owned: Assignment | None, client_id: str,
        client_host: str, now_ms: int,
    ) -> ConsumerHeartbeatResult:
        joining = member_epoch == JOIN_GROUP_MEMBER_EPOCH
        group = self._consumer_group_for(group_id, joining, now_ms)
        bump = False
        member: ConsumerMember | None
        if joining:
            member, bump = self._joining_member(group, member_id, instance_id)
        else:
            member = group.members.get(member_id)
            if member is None:
                raise _HeartbeatError(ErrorCode.unknown_member_id,
                                      f"Member {member_id} is not a member of group {group_id}.")
            if instance_id is not None and group.static_members.get(instance_id) != member_id:
                raise _HeartbeatError(ErrorCode.fenced_instance_id,
                                      f"Static member {instance_id} has another member id.")
            if member_epoch > member.member_epoch:
                raise _HeartbeatError(ErrorCode.fenced_member_epoch, (
                    f"The consumer group member has a greater member epoch ({member_epoch}) "
                    f"than the one known by the group coordinator ({member.member_epoch}). "
                    "The member must abandon all its partitions and rejoin."))
            if member_epoch < member.member_epoch and (
                    member_epoch != member.previous_member_epoch
                    or not is_subset(owned, member.assigned)):
                # The previous epoch with a subset of the assignment is a lost response.
                raise _HeartbeatError(ErrorCode.fenced_member_epoch, (
                    f"The consumer group member has a smaller member epoch ({member_epoch}) "
                    f"than the one known by the group coordinator ({member.member_epoch}). "
                    "The member must abandon all its partitions and rejoin."))
        was = (member.member_epoch, member.state, {t: set(p) for t, p in member.assigned.items()})

        # 2. What changed.
        member.client_id, member.client_host = client_id, client_host
        if rack_id is not None:
            member.rack_id = rack_id
        if rebalance_timeout_ms != -1:
            member.rebalance_timeout_ms = rebalance_timeout_ms
        if names is not None and tuple(sorted(names)) != tuple(sorted(
                member.subscribed_topic_names)):
            member.subscribed_topic_names = tuple(names)
            bump = True
        if regex is not None and (regex or None) != member.subscribed_topic_regex:
            member.subscribed_topic_regex = regex or None
            bump = True
        if assignor is not None and assignor != member.server_assignor:
            member.server_assignor = assignor
            bump = True
        if self._refresh_subscription_metadata(group):
            bump = True
        if bump:
            group.group_epoch += 1
            log.info("Group %s epoch %d (member %s)", group_id, group.group_epoch, member_id)
        # 3. A new target assignment if the group moved on.
        if group.group_epoch > group.assignment_epoch:
            self._compute_target_assignment(group)
        # 4. One reconciliation step.
        reconcile(member, group.assignment_epoch, group.target.get(member.member_id, {}),
                  owned, group.owned_by_others(member.member_id))
        self._arm_consumer_timers(group, member, now_ms)
        changed = (member.member_epoch, member.state, member.assigned) != was
        full = joining or (rebalance_timeout_ms != -1 and names is not None
                           and owned is not None)
        assignment = None
        if full or changed:
            assignment = {t: sorted(ps) for t, ps in member.assigned.items()}
        return ConsumerHeartbeatResult(
            ErrorCode.none, None, member.member_id, member.member_epoch,
            self.heartbeat_interval_ms(group_id), assignment)

    def _joining_member(self, group: ConsumerGroup, member_id: str, instance_id: str | None
                        ) -> tuple[ConsumerMember, bool]:
        """The member a join (epoch 0) is about, and whether it is new to the group."""
        if not member_id:
            member_id = self._new_uuid()  # v0: the coordinator names the member
        if instance_id is not None:
            current_id = group.static_members.get(instance_id)
            if current_id is not None and current_id != member_id:
                current = group.members[current_id]
                if current.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                    raise _HeartbeatError(ErrorCode.unreleased_instance_id, (
                        f"Static member {current_id} with instance id {instance_id} is "
                        "present in the consumer group."))
                # KIP-345 under KIP-848: the restarted instance takes the place of the
                # one that left with epoch -2, assignment and epoch included.
                target = group.target.pop(current_id, None)
                group.remove(current_id, group.state_timestamp)
                current.member_id = member_id
                current.member_epoch = current.previous_member_epoch
                group.add(current)
                if target is not None:
                    group.target[member_id] = target
                return current, False
        member = group.members.get(member_id)
        if member is not None:
            # Rejoining with epoch 0: it has given up its partitions.
            member.assigned, member.pending_revocation = {}, {}
            member.state = MemberState.STABLE
            member.previous_member_epoch, member.member_epoch = member.member_epoch, 0
            return member, False
        member = ConsumerMember(member_id, instance_id=instance_id)
        group.add(member)
        return member, True

    def _consumer_leave(self, group_id: str, member_id: str, member_epoch: int,
                        instance_id: str | None, now_ms: int) -> ConsumerHeartbeatResult:
        group = self.consumer_groups.get(group_id)
        if group is None:
            raise _HeartbeatError(ErrorCode.group_id_not_found, f"Group {group_id} not found.")
        if instance_id is not None:
            current = group.static_members.get(instance_id)
            if current is None:
                raise _HeartbeatError(ErrorCode.unknown_member_id,
                                      f"Instance id {instance_id} is unknown.")
            if current != member_id:
                raise _HeartbeatError(ErrorCode.fenced_instance_id,
                                      f"Static member {instance_id} has another member id.")
        member = group.members.get(member_id)
        if member is None:
            raise _HeartbeatError(ErrorCode.unknown_member_id,
                                  f"Member {member_id} is not a member of group {group_id}.")
        if member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            # A static member leaving for now keeps its place and assignment until its
            # session ends; its instance may come back under a new member id.
            log.info("Static member %s of group %s left temporarily", instance_id, group_id)
            if member.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                member.previous_member_epoch = member.member_epoch
            member.member_epoch = LEAVE_GROUP_STATIC_MEMBER_EPOCH
        else:
            log.info("Member %s left group %s", member_id, group_id)
            self._remove_consumer_member(group, member, now_ms)
        return ConsumerHeartbeatResult(ErrorCode.none, None, member_id, member_epoch, 0)

    def _remove_consumer_member(self, group: ConsumerGroup, member: ConsumerMember,
                                now_ms: int) -> None:
        group.remove(member.member_id, now_ms)
        member.session_deadline = member.rebalance_deadline = None
        group.group_epoch += 1
        self._refresh_subscription_metadata(group)
        self._compute_target_assignment(group)

    def _refresh_subscription_metadata(self, group: ConsumerGroup) -> bool:
        """The subscribed topics' ids and partition counts; True if they changed (a
        topic was created, deleted or given partitions)."""
        wanted = {}
        for name, info in self.topics.items():
            if group.is_subscribed_to(name):
                wanted[name] = info
        if wanted != group.subscription_metadata:
            group.subscription_metadata = wanted
            return True
        return False

    def _compute_target_assignment(self, group: ConsumerGroup) -> None:
        name = group.preferred_assignor(self.consumer_assignors)
        subscriptions = {mid: m.subscribed(group.subscription_metadata)
                         for mid, m in group.members.items()}
        group.target = ASSIGNORS[name](subscriptions, group.subscription_metadata, group.target)
        group.assignor_name = name
        group.assignment_epoch = group.group_epoch
        log.info("Group %s: target assignment for epoch %d by the %s assignor",
                 group.group_id, group.assignment_epoch, name)

    def _arm_consumer_timers(self, group: ConsumerGroup, member: ConsumerMember,
                             now_ms: int) -> None:
        member.session_deadline = now_ms + self.session_timeout_ms(group.group_id)
        self._schedule(member.session_deadline, CG_SESSION, group, member.member_id)
        if member.state is MemberState.UNREVOKED_PARTITIONS:
            if member.rebalance_deadline_epoch != member.member_epoch or (
                    member.rebalance_deadline is None):
                member.rebalance_deadline_epoch = member.member_epoch
                member.rebalance_deadline = now_ms + max(member.rebalance_timeout_ms, 0)
                self._schedule(member.rebalance_deadline, CG_REBALANCE, group,
                               member.member_id)
        else:
            member.rebalance_deadline = None

    def _consumer_timer_is_current(self, kind: str, group: ConsumerGroup, member_id: str,
                                   deadline: int) -> bool:
        if self.consumer_groups.get(group.group_id) is not group:
            return False
        member = group.members.get(member_id)
        if member is None:
            return False
        if kind == CG_SESSION:
            return member.session_deadline == deadline
        return member.rebalance_deadline == deadline

    def _on_consumer_timer(self, kind: str, group: ConsumerGroup, member_id: str,
                           now_ms: int, fx: Effects) -> None:
        before = self._cg_snapshot(group)
        member = group.members[member_id]
        if kind == CG_SESSION:
            log.info("Member %s of group %s has failed (session expired), removing it",
                     member_id, group.group_id)
        else:
            log.info("Member %s of group %s did not revoke its partitions within its "
                     "rebalance timeout, removing it", member_id, group.group_id)
        self._remove_consumer_member(group, member, now_ms)
        self._cg_records(group.group_id, before, fx)

    def consumer_topics_changed(self, topics: Mapping[str, TopicInfo], now_ms: int) -> Effects:
        """The runtime's hook after CreateTopics/CreatePartitions/DeleteTopics: groups
        subscribed to a changed topic get a new group epoch and target assignment now
        (their members learn it at their next heartbeat)."""
        fx = self._effects(now_ms)
        self.topics = topics
        for group in self.consumer_groups.values():
            before = self._cg_snapshot(group)
            if group.members and self._refresh_subscription_metadata(group):
                group.group_epoch += 1
                self._compute_target_assignment(group)
                self._cg_records(group.group_id, before, fx)
        return fx

    # --- persistence -----------------------------------------------------------------

    @staticmethod
    def _cg_snapshot(group: ConsumerGroup | None) -> _Snapshot:
        if group is None:
            return _EMPTY
        members = {}
        for mid, m in group.members.items():
            meta = cr.MemberMetadata(
                m.instance_id, m.rack_id, m.client_id, m.client_host,
                tuple(m.subscribed_topic_names), m.subscribed_topic_regex,
                m.rebalance_timeout_ms, m.server_assignor)
            current = cr.CurrentAssignment(
                m.member_epoch, m.previous_member_epoch, _STATE_CODES[m.state],
                {t: set(p) for t, p in m.assigned.items()},
                {t: set(p) for t, p in m.pending_revocation.items()})
            members[mid] = (meta, current)
        targets = {mid: {t: set(p) for t, p in a.items()} for mid, a in group.target.items()}
        return group.group_epoch, group.assignment_epoch, members, targets

    def _cg_records(self, group_id: str, before: _Snapshot, fx: Effects) -> None:
        """Records for what changed in the group since ``before`` (Kafka's order)."""
        group = self.consumer_groups.get(group_id)
        if group is None and before is _EMPTY:
            return
        epoch0, aepoch0, members0, targets0 = before
        epoch, aepoch, members, targets = self._cg_snapshot(group)
        out = fx.records

        def rec(version: int, value: bytes | None, member_id: str | None = None) -> None:
            out.append(Record(group_id, ot.encode_consumer_group_key(
                version, group_id, member_id), value))

        for mid in members0.keys() - members.keys():
            rec(ot.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT_KEY, None, mid)
            rec(ot.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER_KEY, None, mid)
            rec(ot.CONSUMER_GROUP_MEMBER_METADATA_KEY, None, mid)
        if group is None:
            # The group is gone.
            rec(ot.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA_KEY, None)
            rec(ot.CONSUMER_GROUP_METADATA_KEY, None)
            return
        for mid, (meta, _) in members.items():
            old = members0.get(mid)
            if old is None or old[0] != meta:
                rec(ot.CONSUMER_GROUP_MEMBER_METADATA_KEY, cr.encode_member_metadata(meta), mid)
        if epoch != epoch0 or before is _EMPTY:
            rec(ot.CONSUMER_GROUP_METADATA_KEY, cr.encode_group_metadata(epoch))
        for mid, target in targets.items():
            if targets0.get(mid) != target:
                rec(ot.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER_KEY,
                    cr.encode_target_assignment_member(target), mid)
        if aepoch != aepoch0:
            rec(ot.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA_KEY,
                cr.encode_target_assignment_metadata(aepoch))
        for mid, (_, current) in members.items():
            old = members0.get(mid)
            if old is None or old[1] != current:
                rec(ot.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT_KEY,
                    cr.encode_current_assignment(current), mid)

    def _cg_deleted(self, group_id: str, fx: Effects) -> None:
        """Tombstones for a consumer group that is gone (or became a classic one)."""
        for version in (ot.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA_KEY,
                        ot.CONSUMER_GROUP_METADATA_KEY):
            fx.records.append(Record(
                group_id, ot.encode_consumer_group_key(version, group_id), None))

    def _load_consumer_record(self, key: ot.ConsumerGroupRecordKey, value: bytes | None
                              ) -> None:
        """Replay one KIP-848 record (``GroupManager.load`` dispatches here)."""
        group = self.consumer_groups.get(key.group)
        if group is None:
            if value is None:
                return
            group = ConsumerGroup(key.group, 0)
            classic = self.groups.get(key.group)
            if classic is not None:
                # Offsets replayed before the group's own records belong to it.
                del self.groups[key.group]
                group.offsets = classic.offsets
            self.consumer_groups[key.group] = group
        version, mid = key.version, key.member_id or ""
        if version == ot.CONSUMER_GROUP_METADATA_KEY:
            if value is None:
                del self.consumer_groups[key.group]
                if group.offsets:
                    offsets_only = self.groups[key.group] = Group(key.group, now_ms=0)
                    offsets_only.state_timestamp = None
                    offsets_only.offsets = group.offsets
            else:
                group.group_epoch = cr.decode_group_metadata(value)
        elif version == ot.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA_KEY:
            if value is not None:
                group.assignment_epoch = cr.decode_target_assignment_metadata(value)
        elif version == ot.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER_KEY:
            if value is None:
                group.target.pop(mid, None)
            else:
                group.target[mid] = cr.decode_target_assignment_member(value)
        elif version == ot.CONSUMER_GROUP_MEMBER_METADATA_KEY:
            if value is None:
                group.remove(mid, 0)
                return
            meta = cr.decode_member_metadata(value)
            member = group.members.get(mid)
            if member is None:
                member = ConsumerMember(mid)
                group.add(member)
            member.instance_id, member.rack_id = meta.instance_id, meta.rack_id
            if meta.instance_id is not None:
                group.static_members[meta.instance_id] = mid
            member.client_id, member.client_host = meta.client_id, meta.client_host
            member.subscribed_topic_names = meta.subscribed_topic_names
            member.subscribed_topic_regex = meta.subscribed_topic_regex
            member.rebalance_timeout_ms = meta.rebalance_timeout_ms
            member.server_assignor = meta.server_assignor
        elif version == ot.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT_KEY:
            member = group.members.get(mid)
            if value is None or member is None:
                return  # the member's own tombstone follows, or it was never added
            a = cr.decode_current_assignment(value)
            member.member_epoch, member.previous_member_epoch = (
                a.member_epoch, a.previous_member_epoch)
            member.state = _STATES.get(a.state, MemberState.STABLE)
            member.assigned, member.pending_revocation = a.assigned, a.pending_revocation
        # Key 4 (partition metadata) is recomputed from the topics in finish_load.

    def _finish_consumer_load(self, now_ms: int, topics: Mapping[str, TopicInfo] | None
                              ) -> None:
        if topics is not None:
            self.topics = topics
        for group in self.consumer_groups.values():
            # The topics cannot have changed while the broker was down (it owns them).
            self._refresh_subscription_metadata(group)
            if group.assignor_name == "":
                group.assignor_name = group.preferred_assignor(self.consumer_assignors)
            group.state_timestamp = now_ms
            for member in group.members.values():
                member.rebalance_deadline = None
                self._arm_consumer_timers(group, member, now_ms)

    # --- offsets ---------------------------------------------------------------------

    def validate_consumer_offset_commit(self, group: ConsumerGroup | StreamsGroup, member_id: str,
                                        member_epoch: int) -> int | None:
        """Kafka's ConsumerGroup.validateOffsetCommit: from outside the group only while
        it is empty; from a member only at its current epoch (Kafka 4.4 also takes an
        older epoch at or after the one each partition was assigned in: not done here,
        see docs/compatibility.md)."""
        if member_epoch < 0 and not group.members:
            return None
        return self.validate_consumer_member_epoch(group, member_id, member_epoch)

    @staticmethod
    def validate_consumer_member_epoch(group: ConsumerGroup | StreamsGroup,
                                       member_id: str | None,
                                       member_epoch: int) -> int | None:
        member = group.members.get(member_id or "")
        if member is None:
            return ErrorCode.unknown_member_id
        # Newer or older, Kafka 4.4 answers STALE_MEMBER_EPOCH (4.0 fenced a newer one).
        if member_epoch != member.member_epoch:
            return ErrorCode.stale_member_epoch
        return None

    # --- ConsumerGroupDescribe -------------------------------------------------------

    def consumer_group_describe(self, group_ids: Iterable[str]
                                ) -> list[ConsumerGroupDescription]:
        """ConsumerGroupDescribe (API 69)."""
        names = {info.topic_id: name for name, info in self.topics.items()}

        def described(a: Assignment) -> list[DescribedPartitions]:
            return [DescribedPartitions(tid, names.get(tid, ""), sorted(ps))
                    for tid, ps in sorted(a.items(), key=lambda kv: names.get(kv[0], ""))]

        out = []
        for group_id in group_ids:
            group = self.consumer_groups.get(group_id)
            if group is None:
                message = (f"Group {group_id} is not a consumer group."
                           if group_id in self.groups else f"Group {group_id} not found.")
                out.append(ConsumerGroupDescription(ErrorCode.group_id_not_found, group_id,
                                                    message))
                continue
            out.append(ConsumerGroupDescription(
                ErrorCode.none, group_id, None, group.state.value, group.group_epoch,
                group.assignment_epoch, group.assignor_name or self.consumer_assignors[0],
                [ConsumerMemberDescription(
                    m.member_id, m.instance_id, m.rack_id, m.member_epoch, m.client_id,
                    m.client_host, sorted(m.subscribed_topic_names), m.subscribed_topic_regex,
                    described(m.assigned), described(group.target.get(m.member_id, {})))
                 for m in group.members.values()]))
        return out
