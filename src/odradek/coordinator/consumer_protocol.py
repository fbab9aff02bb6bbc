"""The coordinator's side of KIP-848: ConsumerGroupHeartbeat, ConsumerGroupDescribe, and
the member-epoch checks of offset commits and fetches for ``consumer`` groups.

A mixin of ``GroupCoordinator`` (it shares its timers, clock-less ``Effects`` and uuid
source); the groups themselves and the assignors are in ``consumer_group.py``. The flow
of one heartbeat, as in Kafka's GroupMetadataManager.consumerGroupHeartbeat:

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

Departure from Kafka: the group state is not yet written to ``__consumer_offsets`` (only
offsets are): after a broker restart a consumer group starts empty and its members,
answered UNKNOWN_MEMBER_ID, rejoin with epoch 0 and get their partitions again; their
committed offsets are where they resume.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

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
from odradek.coordinator.results import (
    FENCED_INSTANCE_ID,
    FENCED_MEMBER_EPOCH,
    GROUP_ID_NOT_FOUND,
    INVALID_REGULAR_EXPRESSION,
    INVALID_REQUEST,
    NONE,
    STALE_MEMBER_EPOCH,
    UNKNOWN_MEMBER_ID,
    UNRELEASED_INSTANCE_ID,
    UNSUPPORTED_ASSIGNOR,
    ConsumerGroupDescription,
    ConsumerHeartbeatResult,
    ConsumerMemberDescription,
    DescribedPartitions,
    Effects,
)

if TYPE_CHECKING:
    from odradek.coordinator.group import Group

log = logging.getLogger(__name__)

GROUP_CONSUMER_SESSION_TIMEOUT_MS = 45_000  # group.consumer.session.timeout.ms
GROUP_CONSUMER_HEARTBEAT_INTERVAL_MS = 5_000  # group.consumer.heartbeat.interval.ms

CG_SESSION = "consumer-session"
CG_REBALANCE = "consumer-rebalance"


class _HeartbeatError(Exception):
    def __init__(self, error_code: int, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code


class ConsumerProtocol:
    """Mixed into ``GroupCoordinator``; see the module docstring."""

    # Provided by GroupCoordinator.
    groups: dict[str, Group]
    consumer_groups: dict[str, ConsumerGroup]
    consumer_session_timeout_ms: int
    consumer_heartbeat_interval_ms: int
    consumer_assignors: tuple[str, ...]
    topics: Mapping[str, TopicInfo]

    def _new_uuid(self) -> str: ...  # pragma: no cover
    def _effects(self, now_ms: int) -> Effects: ...  # pragma: no cover
    def _schedule(self, deadline: int, kind: str, group: Any, member_id: str = "") -> None: ...  # pragma: no cover  # noqa: E501

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
        unknown = [a for a in self.consumer_assignors if a not in ASSIGNORS]
        if unknown or not self.consumer_assignors:
            raise ValueError(f"unknown assignors {unknown}; known: {sorted(ASSIGNORS)}")
        self.topics = {}

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
        fx.respond(token, result)
        return fx

    def _validate_heartbeat(
        self, group_id: str, member_id: str, member_epoch: int, instance_id: str | None,
        rebalance_timeout_ms: int, names: tuple[str, ...] | None, regex: str | None,
        assignor: str | None, owned: Assignment | None, member_id_from_client: bool,
    ) -> None:
        """Kafka's throwIfConsumerGroupHeartbeatRequestIsInvalid."""
        if not group_id:
            raise _HeartbeatError(INVALID_REQUEST, "GroupId can't be empty.")
        if member_id_from_client and not member_id:
            raise _HeartbeatError(INVALID_REQUEST, "MemberId can't be empty.")
        if member_epoch == JOIN_GROUP_MEMBER_EPOCH:
            if rebalance_timeout_ms == -1:
                raise _HeartbeatError(INVALID_REQUEST,
                                      "RebalanceTimeoutMs must be provided in first request.")
            if owned:
                raise _HeartbeatError(INVALID_REQUEST,
                                      "TopicPartitions must be empty when (re-)joining.")
            if names is None and regex is None:
                raise _HeartbeatError(INVALID_REQUEST, "SubscribedTopicNames or "
                                      "SubscribedTopicRegex must be set in first request.")
        elif member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            if instance_id is None:
                raise _HeartbeatError(INVALID_REQUEST, "InstanceId can't be null.")
        elif member_epoch < LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            raise _HeartbeatError(INVALID_REQUEST, f"MemberEpoch is {member_epoch}, "
                                  "but must be greater than or equal to -2.")
        if member_epoch != JOIN_GROUP_MEMBER_EPOCH and not member_id:
            raise _HeartbeatError(INVALID_REQUEST, "MemberId can't be empty.")
        if assignor is not None and assignor not in self.consumer_assignors:
            raise _HeartbeatError(UNSUPPORTED_ASSIGNOR,
                                  f"ServerAssignor {assignor} is not supported. Supported "
                                  f"assignors: {', '.join(self.consumer_assignors)}.")
        if regex is not None and not valid_regex(regex):
            raise _HeartbeatError(INVALID_REGULAR_EXPRESSION,
                                  f"SubscribedTopicRegex {regex} is not a valid regular "
                                  "expression.")

    def _consumer_group_for(self, group_id: str, create: bool, now_ms: int) -> ConsumerGroup:
        group = self.consumer_groups.get(group_id)
        if group is not None:
            return group
        classic = self.groups.get(group_id)
        if classic is not None and (classic.members or classic.protocol_type not in (
                None, "consumer")):
            # Online upgrade of a live classic group is not served.
            raise _HeartbeatError(GROUP_ID_NOT_FOUND,
                                  f"Group {group_id} is not a consumer group.")
        if not create:
            # The group is gone (expired, or the broker restarted): the member rejoins.
            raise _HeartbeatError(UNKNOWN_MEMBER_ID,
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
        if joining:
            member, bump = self._joining_member(group, member_id, instance_id)
        else:
            member = group.members.get(member_id)
            if member is None:
                raise _HeartbeatError(UNKNOWN_MEMBER_ID,
                                      f"Member {member_id} is not a member of group {group_id}.")
            if instance_id is not None and group.static_members.get(instance_id) != member_id:
                raise _HeartbeatError(FENCED_INSTANCE_ID,
                                      f"Static member {instance_id} has another member id.")
            if member_epoch > member.member_epoch:
                raise _HeartbeatError(FENCED_MEMBER_EPOCH, (
                    f"The consumer group member has a greater member epoch ({member_epoch}) "
                    f"than the one known by the group coordinator ({member.member_epoch}). "
                    "The member must abandon all its partitions and rejoin."))
            if member_epoch < member.member_epoch and (
                    member_epoch != member.previous_member_epoch
                    or not is_subset(owned, member.assigned)):
                # The previous epoch with a subset of the assignment is a lost response.
                raise _HeartbeatError(FENCED_MEMBER_EPOCH, (
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
            NONE, None, member.member_id, member.member_epoch,
            self.consumer_heartbeat_interval_ms, assignment)

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
                    raise _HeartbeatError(UNRELEASED_INSTANCE_ID, (
                        f"Static member {current_id} with instance id {instance_id} is "
                        "present in the consumer group."))
                # KIP-345 under KIP-848: the restarted instance takes the place of the
                # one that left with epoch -2, assignment and epoch included.
                group.remove(current_id, 0)
                current.member_id = member_id
                current.member_epoch = current.previous_member_epoch
                target = group.target.pop(current_id, None)
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
            raise _HeartbeatError(GROUP_ID_NOT_FOUND, f"Group {group_id} not found.")
        if instance_id is not None:
            current = group.static_members.get(instance_id)
            if current is None:
                raise _HeartbeatError(UNKNOWN_MEMBER_ID,
                                      f"Instance id {instance_id} is unknown.")
            if current != member_id:
                raise _HeartbeatError(FENCED_INSTANCE_ID,
                                      f"Static member {instance_id} has another member id.")
        member = group.members.get(member_id)
        if member is None:
            raise _HeartbeatError(UNKNOWN_MEMBER_ID,
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
        return ConsumerHeartbeatResult(NONE, None, member_id, member_epoch, 0)

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
        member.session_deadline = now_ms + self.consumer_session_timeout_ms
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
                           now_ms: int) -> None:
        member = group.members[member_id]
        if kind == CG_SESSION:
            log.info("Member %s of group %s has failed (session expired), removing it",
                     member_id, group.group_id)
        else:
            log.info("Member %s of group %s did not revoke its partitions within its "
                     "rebalance timeout, removing it", member_id, group.group_id)
        self._remove_consumer_member(group, member, now_ms)

    def consumer_topics_changed(self, topics: Mapping[str, TopicInfo], now_ms: int) -> Effects:
        """The runtime's hook after CreateTopics/CreatePartitions/DeleteTopics: groups
        subscribed to a changed topic get a new group epoch and target assignment now
        (their members learn it at their next heartbeat)."""
        fx = self._effects(now_ms)
        self.topics = topics
        for group in self.consumer_groups.values():
            if group.members and self._refresh_subscription_metadata(group):
                group.group_epoch += 1
                self._compute_target_assignment(group)
        return fx

    # --- offsets ---------------------------------------------------------------------

    def _validate_consumer_offset_commit(self, group: ConsumerGroup, member_id: str,
                                         member_epoch: int) -> int | None:
        """Kafka's ConsumerGroup.validateOffsetCommit: from outside the group only while
        it is empty; from a member only at its current epoch."""
        if member_epoch < 0 and not group.members:
            return None
        return self._validate_consumer_member_epoch(group, member_id, member_epoch)

    @staticmethod
    def _validate_consumer_member_epoch(group: ConsumerGroup, member_id: str | None,
                                        member_epoch: int) -> int | None:
        member = group.members.get(member_id or "")
        if member is None:
            return UNKNOWN_MEMBER_ID
        if member_epoch > member.member_epoch:
            return FENCED_MEMBER_EPOCH
        if member_epoch < member.member_epoch:
            return STALE_MEMBER_EPOCH
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
                out.append(ConsumerGroupDescription(GROUP_ID_NOT_FOUND, group_id, message))
                continue
            out.append(ConsumerGroupDescription(
                NONE, group_id, None, group.state.value, group.group_epoch,
                group.assignment_epoch, group.assignor_name or self.consumer_assignors[0],
                [ConsumerMemberDescription(
                    m.member_id, m.instance_id, m.rack_id, m.member_epoch, m.client_id,
                    m.client_host, sorted(m.subscribed_topic_names), m.subscribed_topic_regex,
                    described(m.assigned), described(group.target.get(m.member_id, {})))
                 for m in group.members.values()]))
        return out
