"""The consumer-group coordinator (Kafka's classic GroupCoordinator) as a pure state
machine: groups, their rebalances, and their committed offsets.

Every operation takes plain arguments and the current time (``now_ms``) and returns
``Effects``: records for ``__consumer_offsets`` and responses keyed by the opaque token
each request came with. The runtime appends the records, then sends the responses
(Kafka answers a SyncGroup or OffsetCommit only once its record is in the log).
JoinGroup and SyncGroup requests that must wait are parked under their token and
answered by a later call: another member's join or sync, ``tick`` when a timer fires,
a leave. Nothing here reads a clock, starts a task or touches a socket or a file.

Timers, as in Kafka's purgatories: a member's session (or, while it is new in a
rebalance, the 5-minute new-member join timeout), a KIP-394 pending member's expiry,
the rebalance timeout / ``group.initial.rebalance.delay.ms`` of a join phase, the
pending-sync timeout after a join phase, and the periodic offset expiry
(``offsets.retention.check.interval.ms``). ``next_deadline`` says when ``tick`` is due.

State is rebuilt after a restart by ``load``-ing every ``__consumer_offsets`` record in
log order, then ``finish_load`` (fresh sessions for the loaded members, as Kafka's
onGroupLoaded gives them).

Departures from Kafka, each so that every token gets exactly one answer: a parked
JoinGroup/SyncGroup that is superseded by a newer one from the same member is answered
REBALANCE_IN_PROGRESS (Kafka drops it), and a member that leaves or is removed while
its SyncGroup is parked gets UNKNOWN_MEMBER_ID (Kafka drops it). Group state changes
as soon as the decision is made; the runtime is expected not to fail an append (Kafka
reverts on a failed append; here that is a broker failure).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any

from kio.schema.errors import ErrorCode

from odradek.coordinator import offsets_topic as ot
from odradek.coordinator.consumer_group import (
    DEFAULT_ASSIGNORS,
    ConsumerGroup,
    ConsumerGroupState,
)
from odradek.coordinator.consumer_protocol import (
    CG_REBALANCE,
    CG_SESSION,
    GROUP_CONSUMER_HEARTBEAT_INTERVAL_MS,
    GROUP_CONSUMER_SESSION_TIMEOUT_MS,
    ConsumerProtocol,
)
from odradek.coordinator.group import (
    CommittedOffset,
    Group,
    GroupState,
    Member,
    Waiting,
)
from odradek.coordinator.results import (
    NO_OFFSET,
    UNKNOWN_MEMBER,
    DeletedGroup,
    DeleteGroupsResult,
    Effects,
    FetchedOffset,
    GroupDescription,
    GroupOverview,
    HeartbeatResult,
    JoinMember,
    JoinResult,
    LeaveMemberResult,
    LeaveResult,
    MemberDescription,
    MemberIdentity,
    OffsetCommitRequestPartition,
    OffsetCommitResult,
    OffsetDeleteResult,
    OffsetFetchResult,
    PartitionResult,
    Record,
    SyncResult,
)

log = logging.getLogger(__name__)

# Kafka's defaults for the broker settings this coordinator takes.
GROUP_INITIAL_REBALANCE_DELAY_MS = 3000  # group.initial.rebalance.delay.ms
GROUP_MIN_SESSION_TIMEOUT_MS = 6000  # group.min.session.timeout.ms
GROUP_MAX_SESSION_TIMEOUT_MS = 1_800_000  # group.max.session.timeout.ms
GROUP_MAX_SIZE = 2**31 - 1  # group.max.size
OFFSET_METADATA_MAX_BYTES = 4096  # offset.metadata.max.bytes
OFFSETS_RETENTION_MS = 7 * 24 * 60 * 60 * 1000  # offsets.retention.minutes = 10080
OFFSETS_RETENTION_CHECK_INTERVAL_MS = 600_000  # offsets.retention.check.interval.ms
# A member that joins has no session until the join phase ends (it cannot heartbeat, and
# its socket is muted while the JoinGroup waits); this bounds how long it may hold the
# rebalance up before it is dropped (GroupCoordinator.NewMemberJoinTimeoutMs).
NEW_MEMBER_JOIN_TIMEOUT_MS = 5 * 60 * 1000

# Timer kinds in the heap.
_HEARTBEAT = "heartbeat"
_PENDING = "pending-member"
_JOIN = "join"
_SYNC = "sync"
_EXPIRY = "offset-expiry"
# (deadline, seq, kind, group, member id): a classic group's timers carry the Group, the
# KIP-848 ones (CG_SESSION, CG_REBALANCE) the ConsumerGroup, the offset expiry None.
_Timer = tuple[int, int, str, Group | ConsumerGroup | None, str]

Protocols = list[tuple[str, bytes]]


@dataclass(frozen=True, slots=True)
class _Join:
    """What a JoinGroup request says about the joining member."""

    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: Protocols
    supports_skip_assignment: bool
    why: str  # for the log: the client's reason (KIP-800)
    token: Any


def _new_uuid() -> str:
    return str(uuid.uuid4())


class GroupCoordinator(ConsumerProtocol):
    """The groups it coordinates and their offsets (the server keeps one per
    ``__consumer_offsets`` partition it coordinates). Not thread-safe: one caller at a time
    (the broker's event loop). Classic groups are in ``groups``; KIP-848 ``consumer``
    groups (``consumer_protocol.py``) in ``consumer_groups``; a group id is in one or
    the other."""

    def __init__(
        self,
        *,
        initial_rebalance_delay_ms: int = GROUP_INITIAL_REBALANCE_DELAY_MS,
        min_session_timeout_ms: int = GROUP_MIN_SESSION_TIMEOUT_MS,
        max_session_timeout_ms: int = GROUP_MAX_SESSION_TIMEOUT_MS,
        max_group_size: int = GROUP_MAX_SIZE,
        offset_metadata_max_bytes: int = OFFSET_METADATA_MAX_BYTES,
        offsets_retention_ms: int = OFFSETS_RETENTION_MS,
        offsets_retention_check_interval_ms: int | None = OFFSETS_RETENTION_CHECK_INTERVAL_MS,
        new_uuid: Callable[[], str] = _new_uuid,
        consumer_session_timeout_ms: int = GROUP_CONSUMER_SESSION_TIMEOUT_MS,
        consumer_heartbeat_interval_ms: int = GROUP_CONSUMER_HEARTBEAT_INTERVAL_MS,
        consumer_assignors: Iterable[str] = DEFAULT_ASSIGNORS,
    ) -> None:
        self.initial_rebalance_delay_ms = initial_rebalance_delay_ms
        self.min_session_timeout_ms = min_session_timeout_ms
        self.max_session_timeout_ms = max_session_timeout_ms
        self.max_group_size = max_group_size
        self.offset_metadata_max_bytes = offset_metadata_max_bytes
        self.offsets_retention_ms = offsets_retention_ms
        self.offsets_retention_check_interval_ms = offsets_retention_check_interval_ms
        self._new_uuid = new_uuid
        self.groups: dict[str, Group] = {}
        # (deadline, seq, kind, group, member id). Entries are never removed when a
        # deadline moves; a popped entry counts only if it still matches the state.
        self._timers: list[_Timer] = []
        self._seq = itertools.count()
        self._next_expiry_check: int | None = None
        # Transactional offset commits waiting for their transaction's marker (Kafka's
        # GroupMetadata.pendingTransactionalOffsetCommits): group id -> producer id ->
        # offsets. Kept apart from the groups so that a group's deletion or a rebalance
        # does not lose what an open transaction still has to decide.
        self.pending_txn_offsets: dict[str, dict[int, dict[tuple[str, int], CommittedOffset]]] = {}
        # The order of offset commits, for groups with pending transactional ones: when a
        # transaction commits, its offset replaces a plain commit only if it was written
        # after it (Kafka compares the records' log offsets; commits are written in the
        # order they are decided, and replayed in log order, so a counter orders them
        # the same way). (group, producer id, topic, partition) -> order of the pending
        # offset; (group, topic, partition) -> order of the last plain commit made while
        # the group had pending ones.
        self._commit_order = itertools.count()
        self._pending_order: dict[tuple[str, int, str, int], int] = {}
        self._plain_order: dict[tuple[str, str, int], int] = {}
        self._init_consumer_protocol(
            consumer_session_timeout_ms, consumer_heartbeat_interval_ms, consumer_assignors)

    # --- JoinGroup -------------------------------------------------------------------

    def join(
        self,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        client_id: str,
        client_host: str,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        protocol_type: str,
        protocols: Iterable[tuple[str, bytes]],
        *,
        require_known_member_id: bool,
        supports_skip_assignment: bool = False,
        reason: str | None = None,
        token: Any,
        now_ms: int,
    ) -> Effects:
        """JoinGroup. ``require_known_member_id`` is true from v4 (KIP-394),
        ``supports_skip_assignment`` from v9 (KIP-814); ``reason`` is v8's (KIP-800).
        v0 has no rebalance timeout: pass the session timeout, as Kafka does.
        The answer usually comes later, when the join phase completes."""
        fx = self._effects(now_ms)
        if not group_id:
            fx.respond(token, JoinResult(ErrorCode.invalid_group_id, member_id=member_id))
            return fx
        if not self.min_session_timeout_ms <= session_timeout_ms <= self.max_session_timeout_ms:
            fx.respond(token, JoinResult(ErrorCode.invalid_session_timeout, member_id=member_id))
            return fx
        req = _Join(
            group_instance_id, client_id, client_host, session_timeout_ms, rebalance_timeout_ms,
            protocol_type, [(name, bytes(metadata)) for name, metadata in protocols],
            supports_skip_assignment, f"client reason: {reason or 'not provided'}", token,
        )
        cg = self.consumer_groups.get(group_id)
        if cg is not None:
            if cg.members:
                # A live KIP-848 group: classic members cannot join it (no online
                # migration here). Kafka 3.7, which has none either: "Group X is not a
                # classic group", GROUP_ID_NOT_FOUND.
                fx.respond(token, JoinResult(ErrorCode.group_id_not_found, member_id=member_id))
                return fx
            # An empty consumer group becomes a classic one, offsets and all (as Kafka).
            del self.consumer_groups[group_id]
            self._cg_deleted(group_id, fx)
            self.groups[group_id] = Group(group_id, now_ms)
            self.groups[group_id].offsets = cg.offsets
        group = self.groups.get(group_id)
        if group is None:
            if member_id != UNKNOWN_MEMBER:
                # A member id for a group we do not know: the member must start over.
                fx.respond(token, JoinResult(ErrorCode.unknown_member_id, member_id=member_id))
                return fx
            group = self.groups[group_id] = Group(group_id, now_ms)

        if not self._accept_joining_member(group, member_id):
            self._drop_member(group, member_id, fx)
            fx.respond(token, JoinResult(ErrorCode.group_max_size_reached,
                                         member_id=UNKNOWN_MEMBER))
        elif member_id == UNKNOWN_MEMBER:
            self._new_member_join(group, req, require_known_member_id, now_ms, fx)
        else:
            self._current_member_join(group, member_id, req, now_ms, fx)
        if group.is_(GroupState.PREPARING_REBALANCE):
            self._try_complete_join(group, now_ms, fx)
        return fx

    def _accept_joining_member(self, group: Group, member_id: str) -> bool:
        """group.max.size."""
        if group.state in (GroupState.EMPTY, GroupState.DEAD):
            return True
        if group.is_(GroupState.PREPARING_REBALANCE):
            # Count members awaiting join, not the group size: the size may exceed a
            # lowered limit, and this lets the last rejoiners be the ones turned away.
            member = group.members.get(member_id)
            return (member is not None and member.join is not None) or (
                group.num_awaiting_join < self.max_group_size
            )
        return group.has(member_id) or len(group.members) < self.max_group_size

    def _new_member_join(
        self, group: Group, req: _Join, require_known_member_id: bool, now_ms: int, fx: Effects
    ) -> None:
        if not group.supports_protocols(req.protocol_type, req.protocols):
            fx.respond(req.token, JoinResult(ErrorCode.inconsistent_group_protocol))
            return
        prefix = req.client_id if req.group_instance_id is None else req.group_instance_id
        new_id = f"{prefix}-{self._new_uuid()}"
        if req.group_instance_id is not None:
            old_id = group.current_static_member(req.group_instance_id)
            if old_id is not None:
                self._replace_static_member(group, old_id, new_id, req, now_ms, fx)
            else:
                self._add_member_and_rebalance(group, new_id, req, now_ms, fx)
        elif require_known_member_id:
            # KIP-394: hand out the id and have the client join again with it, so that a
            # client that times out and retries does not leave a ghost member behind.
            deadline = group.pending_members[new_id] = now_ms + req.session_timeout_ms
            self._schedule(deadline, _PENDING, group, new_id)
            fx.respond(req.token, JoinResult(ErrorCode.member_id_required, member_id=new_id))
        else:
            self._add_member_and_rebalance(group, new_id, req, now_ms, fx)

    def _current_member_join(
        self, group: Group, member_id: str, req: _Join, now_ms: int, fx: Effects
    ) -> None:
        token = req.token
        if not group.supports_protocols(req.protocol_type, req.protocols):
            fx.respond(token, JoinResult(ErrorCode.inconsistent_group_protocol,
                                         member_id=member_id))
            return
        if member_id in group.pending_members:
            if req.group_instance_id is not None:
                # Static members never get MEMBER_ID_REQUIRED: not a member id we gave it.
                fx.respond(token, JoinResult(ErrorCode.unknown_member_id, member_id=member_id))
            else:
                self._add_member_and_rebalance(group, member_id, req, now_ms, fx)
            return
        error = self._validate_member(group, member_id, req.group_instance_id)
        if error is not None:
            fx.respond(token, JoinResult(error, member_id=member_id))
            return
        member = group.members[member_id]
        if group.is_(GroupState.PREPARING_REBALANCE):
            self._update_member_and_rebalance(group, member, req, now_ms, fx, "member rejoins")
        elif group.is_(GroupState.COMPLETING_REBALANCE):
            if member.matches(req.protocols):
                # Probably a retry after a lost JoinGroup answer: the same answer again.
                leader = group.is_leader(member_id)
                fx.respond(token, self._join_result(group, member, with_members=leader))
            else:
                self._update_member_and_rebalance(
                    group, member, req, now_ms, fx, f"member {member_id} changed its metadata"
                )
        elif group.is_(GroupState.STABLE):
            if group.is_leader(member_id) or not member.matches(req.protocols):
                # The leader rejoining is how it asks for a rebalance for reasons the
                # coordinator cannot see (e.g. a topic's partition count changed).
                self._update_member_and_rebalance(
                    group, member, req, now_ms, fx, f"member {member_id} rejoins a stable group"
                )
            else:
                fx.respond(token, self._join_result(group, member, with_members=False))
        else:
            fx.respond(token, JoinResult(ErrorCode.unknown_member_id, member_id=member_id))

    def _add_member_and_rebalance(
        self, group: Group, member_id: str, req: _Join, now_ms: int, fx: Effects
    ) -> None:
        member = Member(
            member_id, req.group_instance_id, req.client_id, req.client_host,
            req.rebalance_timeout_ms, req.session_timeout_ms, req.protocol_type, req.protocols,
        )
        member.is_new = True
        if group.is_(GroupState.PREPARING_REBALANCE) and group.generation_id == 0:
            # Lets the initial delayed join wait another round for more members.
            group.new_member_added = True
        group.add(member)
        member.join = Waiting(req.token)
        self._set_heartbeat(group, member, now_ms + NEW_MEMBER_JOIN_TIMEOUT_MS)
        self._maybe_prepare_rebalance(
            group, now_ms, fx,
            f"adding member {member_id} (instance {req.group_instance_id}); {req.why}",
        )

    def _update_member_and_rebalance(
        self, group: Group, member: Member, req: _Join, now_ms: int, fx: Effects, why: str
    ) -> None:
        group.update_protocols(
            member, req.protocols, req.rebalance_timeout_ms, req.session_timeout_ms
        )
        self._park_join(member, req.token, fx)
        self._maybe_prepare_rebalance(group, now_ms, fx, f"{why}; {req.why}")

    def _replace_static_member(
        self, group: Group, old_id: str, new_id: str, req: _Join, now_ms: int, fx: Effects
    ) -> None:
        """KIP-345: a static member restarted (it lost its member id). The new id takes
        the old one's place; the old id is fenced."""
        instance = req.group_instance_id
        assert instance is not None
        current_leader = group.leader_id
        member = group.members[old_id]
        if member.join is not None:
            fx.respond(member.join.token,
                       JoinResult(ErrorCode.fenced_instance_id, member_id=old_id))
            member.join = None
        if member.sync is not None:
            fx.respond(member.sync.token, SyncResult(ErrorCode.fenced_instance_id))
            member.sync = None
        group.replace_static_member(instance, old_id, new_id)
        self._set_heartbeat(group, member, now_ms + member.session_timeout_ms)
        group.update_protocols(
            member, req.protocols, req.rebalance_timeout_ms, req.session_timeout_ms
        )
        member.join = Waiting(req.token)

        if group.is_(GroupState.STABLE):
            if group.protocol_name == group.select_protocol():
                # Nothing the assignment depends on changed: no rebalance. Persist the new
                # member id (so a restart of the broker fences the old one too) and give
                # the member the current generation.
                assignment = {m.member_id: m.assignment for m in group.members.values()}
                fx.records.append(self._group_record(group, assignment))
                member.join = None
                if req.supports_skip_assignment:
                    # v9+: a restarted leader learns it leads but must not reassign.
                    leader = group.is_leader(new_id)
                    result = replace(
                        self._join_result(group, member, with_members=leader),
                        skip_assignment=leader,
                    )
                else:
                    # Before v9: name the old leader id so that a restarted leader does
                    # not run an assignment a stable group would never hand out.
                    result = replace(
                        self._join_result(group, member, with_members=False),
                        leader=current_leader or "",
                    )
                fx.respond(req.token, result)
            else:
                self._maybe_prepare_rebalance(
                    group, now_ms, fx,
                    f"static member {instance} changed the group's protocol; {req.why}",
                )
        elif group.is_(GroupState.COMPLETING_REBALANCE):
            # The leader may already be assigning to the old member id: start over.
            self._prepare_rebalance(
                group, now_ms, fx, f"static member {instance} rejoined; {req.why}"
            )
        # PreparingRebalance: it simply waits with the others.

    def _park_join(self, member: Member, token: Any, fx: Effects) -> None:
        if member.join is not None:
            superseded = JoinResult(ErrorCode.rebalance_in_progress, member_id=member.member_id)
            fx.respond(member.join.token, superseded)
        member.join = Waiting(token)

    def _join_result(self, group: Group, member: Member, *, with_members: bool) -> JoinResult:
        members = []
        if with_members:
            assert group.protocol_name is not None
            members = [
                JoinMember(m.member_id, m.group_instance_id, m.metadata(group.protocol_name))
                for m in group.members.values()
            ]
        return JoinResult(
            ErrorCode.none,
            generation_id=group.generation_id,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
            leader=group.leader_id or "",
            member_id=member.member_id,
            members=members,
        )

    # --- rebalance -------------------------------------------------------------------

    def _maybe_prepare_rebalance(self, group: Group, now_ms: int, fx: Effects, why: str) -> None:
        if group.can_rebalance:
            self._prepare_rebalance(group, now_ms, fx, why)

    def _prepare_rebalance(self, group: Group, now_ms: int, fx: Effects, why: str) -> None:
        if group.is_(GroupState.COMPLETING_REBALANCE):
            # Members waiting for the assignment of a generation that will not be: rejoin.
            self._propagate_assignment(group, ErrorCode.rebalance_in_progress, now_ms, fx,
                                       reset=True)
        group.pending_sync.clear()
        group.sync_deadline = None
        if group.is_(GroupState.EMPTY):
            # The first join of an empty group waits group.initial.rebalance.delay.ms, and
            # again while members keep arriving, up to the rebalance timeout, so that a
            # whole fleet starting together gets one rebalance rather than one each.
            delay = self.initial_rebalance_delay_ms
            group.initial_delay_ms = delay
            group.initial_delay_remaining = max(group.rebalance_timeout_ms - delay, 0)
            group.new_member_added = False
        else:
            delay = group.rebalance_timeout_ms
            group.initial_delay_remaining = None
        group.transition(GroupState.PREPARING_REBALANCE, now_ms)
        group.join_deadline = now_ms + delay
        self._schedule(group.join_deadline, _JOIN, group)
        log.info(
            "Preparing to rebalance group %s with old generation %d (%s)",
            group.group_id, group.generation_id, why,
        )
        self._try_complete_join(group, now_ms, fx)

    def _try_complete_join(self, group: Group, now_ms: int, fx: Effects) -> None:
        # The initial delayed join never completes early: it is a delay on purpose.
        if group.initial_delay_remaining is None and group.has_all_members_joined:
            self._complete_join(group, now_ms, fx)

    def _on_join_deadline(self, group: Group, now_ms: int, fx: Effects) -> None:
        remaining = group.initial_delay_remaining
        if remaining is not None and group.new_member_added and remaining != 0:
            group.new_member_added = False
            delay = min(self.initial_rebalance_delay_ms, remaining)
            group.initial_delay_remaining = max(remaining - group.initial_delay_ms, 0)
            group.initial_delay_ms = delay
            group.join_deadline = now_ms + delay
            self._schedule(group.join_deadline, _JOIN, group)
            return
        self._complete_join(group, now_ms, fx)

    def _complete_join(self, group: Group, now_ms: int, fx: Effects) -> None:
        group.join_deadline = None
        group.initial_delay_remaining = None
        # Dynamic members that did not rejoin in time are gone; static ones stay (their
        # instance may be restarting) and are in the new generation without having joined.
        for member in list(group.members.values()):
            if member.join is None and not member.is_static:
                self._drop_member(group, member.member_id, fx)
        if not group.elect_joined_leader() and group.members:
            # Only static members that have not rejoined are left: wait for them, or for
            # their sessions to end.
            log.warning("Group %s: no member rejoined, waiting longer", group.group_id)
            group.join_deadline = now_ms + group.rebalance_timeout_ms
            self._schedule(group.join_deadline, _JOIN, group)
            return
        group.init_next_generation(now_ms)
        if group.is_(GroupState.EMPTY):
            log.info("Group %s is empty at generation %d", group.group_id, group.generation_id)
            fx.records.append(self._group_record(group, {}))
            return
        log.info(
            "Group %s stabilized at generation %d with %d members",
            group.group_id, group.generation_id, len(group.members),
        )
        for member in group.members.values():
            if member.join is not None:
                leader = group.is_leader(member.member_id)
                fx.respond(member.join.token, self._join_result(group, member, with_members=leader))
                member.join = None
            self._set_heartbeat(group, member, now_ms + member.session_timeout_ms)
            member.is_new = False
            group.pending_sync.add(member.member_id)
        # Members that never follow up with SyncGroup are removed after the rebalance
        # timeout, so one dead member cannot keep the others without an assignment.
        group.sync_deadline = now_ms + group.rebalance_timeout_ms
        self._schedule(group.sync_deadline, _SYNC, group)

    def _on_sync_deadline(self, group: Group, now_ms: int, fx: Effects) -> None:
        group.sync_deadline = None
        if group.state not in (GroupState.COMPLETING_REBALANCE, GroupState.STABLE):
            return
        missing = sorted(group.pending_sync)
        if not missing:
            return
        for member_id in missing:
            self._drop_member(group, member_id, fx)
        self._prepare_rebalance(
            group, now_ms, fx, f"members {missing} did not sync before the rebalance timeout"
        )

    def _drop_member(self, group: Group, member_id: str, fx: Effects) -> Member | None:
        """Remove a member, answering whatever it had parked."""
        member = group.remove(member_id)
        if member is None:
            return None
        if member.join is not None:
            # UNKNOWN_MEMBER_ID makes a still-alive client join again from scratch.
            fx.respond(member.join.token,
                       JoinResult(ErrorCode.unknown_member_id, member_id=UNKNOWN_MEMBER))
            member.join = None
        if member.sync is not None:
            fx.respond(member.sync.token, SyncResult(ErrorCode.unknown_member_id))
            member.sync = None
        member.heartbeat_deadline = None
        return member

    def _remove_member_and_update_group(
        self, group: Group, member: Member, now_ms: int, fx: Effects, why: str
    ) -> None:
        self._drop_member(group, member.member_id, fx)
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance(group, now_ms, fx, why)
        elif group.is_(GroupState.PREPARING_REBALANCE):
            self._try_complete_join(group, now_ms, fx)

    # --- SyncGroup -------------------------------------------------------------------

    def sync(
        self,
        group_id: str,
        member_id: str,
        generation_id: int,
        group_instance_id: str | None,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: Iterable[tuple[str, bytes]],
        *,
        token: Any,
        now_ms: int,
    ) -> Effects:
        """SyncGroup. ``protocol_type``/``protocol_name`` are v5's (None before). The
        leader's assignments complete every member's SyncGroup of this generation;
        followers that come first are parked until then."""
        fx = self._effects(now_ms)
        if not group_id:
            fx.respond(token, SyncResult(ErrorCode.invalid_group_id))
            return fx
        group = self.groups.get(group_id)
        if group is None:
            fx.respond(token, SyncResult(ErrorCode.unknown_member_id))
            return fx
        error = self._validate_member(group, member_id, group_instance_id)
        if error is None and generation_id != group.generation_id:
            error = ErrorCode.illegal_generation
        if error is None and (
            (protocol_type is not None and protocol_type != group.protocol_type)
            or (protocol_name is not None and protocol_name != group.protocol_name)
        ):
            error = ErrorCode.inconsistent_group_protocol
        if error is not None:
            fx.respond(token, SyncResult(error))
        elif group.is_(GroupState.EMPTY):
            fx.respond(token, SyncResult(ErrorCode.unknown_member_id))
        elif group.is_(GroupState.PREPARING_REBALANCE):
            fx.respond(token, SyncResult(ErrorCode.rebalance_in_progress))
        elif group.is_(GroupState.COMPLETING_REBALANCE):
            member = group.members[member_id]
            if member.sync is not None:
                fx.respond(member.sync.token, SyncResult(ErrorCode.rebalance_in_progress))
            member.sync = Waiting(token)
            self._synced(group, member_id)
            if group.is_leader(member_id):
                given = {mid: bytes(a) for mid, a in assignments}
                # Members the leader left out get an empty assignment, as in Kafka.
                assignment = {mid: given.get(mid, b"") for mid in group.members}
                log.info(
                    "Assignment from leader %s for group %s generation %d",
                    member_id, group_id, group.generation_id,
                )
                # Stored with the CompletingRebalance timestamp, as Kafka's storeGroup
                # runs before the group moves to Stable.
                fx.records.append(self._group_record(group, assignment))
                for m in group.members.values():
                    m.assignment = assignment[m.member_id]
                self._propagate_assignment(group, ErrorCode.none, now_ms, fx)
                group.transition(GroupState.STABLE, now_ms)
        else:  # Stable: a late follower, or a retry; the assignment is known.
            member = group.members[member_id]
            self._synced(group, member_id)
            fx.respond(
                token,
                SyncResult(ErrorCode.none, group.protocol_type, group.protocol_name,
                           member.assignment),
            )
            self._set_heartbeat(group, member, now_ms + member.session_timeout_ms)
        return fx

    def _synced(self, group: Group, member_id: str) -> None:
        group.pending_sync.discard(member_id)
        if not group.pending_sync:
            group.sync_deadline = None

    def _propagate_assignment(
        self, group: Group, error: int, now_ms: int, fx: Effects, *, reset: bool = False
    ) -> None:
        for member in group.members.values():
            if reset:
                member.assignment = b""
            if member.sync is None:
                continue
            result = (
                SyncResult(ErrorCode.none, group.protocol_type, group.protocol_name,
                           member.assignment)
                if error == ErrorCode.none
                else SyncResult(error)
            )
            fx.respond(member.sync.token, result)
            member.sync = None
            # Its session restarts now: it could not heartbeat while its sync was parked.
            self._set_heartbeat(group, member, now_ms + member.session_timeout_ms)

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

    def _validate_member(
        self, group: Group, member_id: str, group_instance_id: str | None
    ) -> int | None:
        """KIP-345 fencing: a group.instance.id must map to this very member id."""
        if group_instance_id is not None:
            current = group.current_static_member(group_instance_id)
            if current is None:
                return ErrorCode.unknown_member_id
            if current != member_id:
                return ErrorCode.fenced_instance_id
        return None if group.has(member_id) else ErrorCode.unknown_member_id

    # --- offsets ---------------------------------------------------------------------

    def commit_offsets(
        self,
        group_id: str,
        member_id: str,
        generation_id: int,
        group_instance_id: str | None,
        offsets: Iterable[OffsetCommitRequestPartition | tuple],
        *,
        retention_ms: int | None = None,
        group_not_found: bool = False,
        token: Any,
        now_ms: int,
    ) -> Effects:
        """OffsetCommit. Generation -1 with no member id is a commit from outside group
        management (admin tools, assign()-mode consumers, and every v0 request): allowed
        while the group has no members. ``retention_ms`` is v2-v4's retention_time_ms
        (-1 or None: the broker's offsets.retention.minutes). The commit time is now.
        ``group_not_found``: a commit from a generation of a group that does not exist is
        answered GROUP_ID_NOT_FOUND (OffsetCommit v9+, as Kafka's validateOffsetCommit),
        else ILLEGAL_GENERATION (older versions)."""
        fx = self._effects(now_ms)
        parts = [OffsetCommitRequestPartition(*p) for p in offsets]
        cg = self.consumer_groups.get(group_id)
        if cg is not None:
            # A KIP-848 group: generation_id is the member epoch (OffsetCommit v9+).
            error = self._validate_consumer_offset_commit(cg, member_id, generation_id)
            if error is not None:
                fx.respond(token, self._commit_error(parts, error))
            else:
                fx.respond(token, OffsetCommitResult(
                    self._store_offsets(group_id, cg.offsets, parts, retention_ms, now_ms, fx)))
            return fx
        group = self.groups.get(group_id)
        if group is None:
            if generation_id >= 0:
                # A commit from a generation of a group we do not know: reject.
                fx.respond(token, self._commit_error(
                    parts, ErrorCode.group_id_not_found if group_not_found
                    else ErrorCode.illegal_generation))
                return fx
            group = self.groups[group_id] = Group(group_id, now_ms)
        error = self._validate_offset_commit(group, member_id, generation_id, group_instance_id)
        if error is None and group.is_(GroupState.COMPLETING_REBALANCE):
            # The member has the new generation but not yet its assignment.
            error = ErrorCode.rebalance_in_progress
        if error is not None:
            fx.respond(token, self._commit_error(parts, error))
            return fx
        if group.state in (GroupState.STABLE, GroupState.PREPARING_REBALANCE):
            member = group.members[member_id]
            self._set_heartbeat(group, member, now_ms + member.session_timeout_ms)
        fx.respond(token, OffsetCommitResult(
            self._store_offsets(group_id, group.offsets, parts, retention_ms, now_ms, fx)))
        return fx

    def _store_offsets(
        self,
        group_id: str,
        offsets: dict[tuple[str, int], CommittedOffset],
        parts: list[OffsetCommitRequestPartition],
        retention_ms: int | None,
        now_ms: int,
        fx: Effects,
        producer_id: int | None = None,
    ) -> list[PartitionResult]:
        expire = now_ms + retention_ms if retention_ms is not None and retention_ms >= 0 else -1
        results = []
        for p in parts:
            metadata = p.metadata or ""
            # Kafka compares Java's String.length(): UTF-16 code units.
            if len(metadata.encode("utf-16-le")) // 2 > self.offset_metadata_max_bytes:
                results.append(PartitionResult(p.topic, p.partition,
                                               ErrorCode.offset_metadata_too_large))
                continue
            committed = CommittedOffset(p.offset, p.leader_epoch, metadata, now_ms, expire)
            offsets[(p.topic, p.partition)] = committed
            self._note_commit(group_id, p.topic, p.partition, producer_id)
            fx.records.append(self._offset_record(group_id, p.topic, p.partition, committed))
            results.append(PartitionResult(p.topic, p.partition, ErrorCode.none))
        return results

    @staticmethod
    def _commit_error(parts: list[OffsetCommitRequestPartition], error: int) -> OffsetCommitResult:
        return OffsetCommitResult([PartitionResult(p.topic, p.partition, error) for p in parts])

    def _validate_offset_commit(
        self, group: Group, member_id: str, generation_id: int, group_instance_id: str | None
    ) -> int | None:
        if generation_id < 0 and group.is_(GroupState.EMPTY):
            return None
        if generation_id >= 0 or member_id != UNKNOWN_MEMBER or group_instance_id is not None:
            error = self._validate_member(group, member_id, group_instance_id)
            if error is None and generation_id != group.generation_id:
                error = ErrorCode.illegal_generation
            return error
        # Once the group has members, only they may commit.
        return None if group.is_(GroupState.EMPTY) else ErrorCode.unknown_member_id

    # --- transactional offsets (TxnOffsetCommit, KIP-98) -----------------------------

    def commit_txn_offsets(
        self,
        group_id: str,
        producer_id: int,
        producer_epoch: int,
        member_id: str,
        generation_id: int,
        group_instance_id: str | None,
        offsets: Iterable[OffsetCommitRequestPartition | tuple],
        *,
        token: Any,
        now_ms: int,
    ) -> Effects:
        """TxnOffsetCommit: the offsets are written now, in the producer's transaction
        (``Effects.transactional``), and become the group's committed offsets when its
        COMMIT marker is written to the group's ``__consumer_offsets`` partition
        (``complete_txn``); an ABORT drops them. The transaction coordinator has already
        checked the producer (AddOffsetsToTxn); here the member is checked as Kafka's
        doTxnCommitOffsets does: a commit from outside the group (no member id,
        generation -1) is accepted whatever the group's state."""
        fx = self._effects(now_ms)
        fx.transactional = (producer_id, producer_epoch)
        parts = [OffsetCommitRequestPartition(*p) for p in offsets]
        cg = self.consumer_groups.get(group_id)
        group = self.groups.get(group_id)
        error: int | None = None
        if cg is not None:
            if member_id != UNKNOWN_MEMBER and member_id not in cg.members:
                error = ErrorCode.unknown_member_id
            elif generation_id >= 0 and member_id in cg.members and (
                    generation_id != cg.members[member_id].member_epoch):
                error = ErrorCode.illegal_generation
        elif group is not None:
            if group_instance_id is not None and group.static_members.get(
                    group_instance_id, member_id) != member_id:
                error = ErrorCode.fenced_instance_id
            elif member_id != UNKNOWN_MEMBER and not group.has(member_id):
                error = ErrorCode.unknown_member_id
            elif generation_id >= 0 and generation_id != group.generation_id:
                error = ErrorCode.illegal_generation
        elif member_id != UNKNOWN_MEMBER or generation_id >= 0:
            error = (ErrorCode.unknown_member_id if member_id != UNKNOWN_MEMBER
                     else ErrorCode.illegal_generation)
        if error is not None:
            fx.respond(token, self._commit_error(parts, error))
            return fx
        pending = self.pending_txn_offsets.setdefault(group_id, {}).setdefault(producer_id, {})
        fx.respond(token, OffsetCommitResult(
            self._store_offsets(group_id, pending, parts, None, now_ms, fx, producer_id)))
        if not pending:
            self._drop_pending(group_id, producer_id)
        return fx

    def complete_txn(self, producer_id: int, commit: bool,
                     in_partition: Callable[[str], bool]) -> None:
        """A COMMIT (``commit``) or ABORT marker of ``producer_id`` was written to a
        ``__consumer_offsets`` partition (``in_partition(group_id)`` says which groups
        live there): its pending offsets there become committed, or are dropped. Nothing
        is appended: the marker is the record."""
        for group_id in [g for g, by_pid in self.pending_txn_offsets.items()
                         if producer_id in by_pid and in_partition(g)]:
            pending = self.pending_txn_offsets[group_id].pop(producer_id)
            # A plain commit written after the transactional one stays (Kafka's
            # CommitRecordMetadataAndOffset.olderThan).
            newer = {tp for tp in pending if self._plain_order.get((group_id, *tp), -1)
                     > self._pending_order.pop((group_id, producer_id, *tp), -1)}
            if not self.pending_txn_offsets[group_id]:
                del self.pending_txn_offsets[group_id]
                for key in [k for k in self._plain_order if k[0] == group_id]:
                    del self._plain_order[key]
            if not commit:
                continue
            settled = {tp: c for tp, c in pending.items() if tp not in newer}
            cg = self.consumer_groups.get(group_id)
            if cg is not None:
                cg.offsets.update(settled)
                continue
            group = self.groups.get(group_id)
            if group is None:
                group = self.groups[group_id] = Group(group_id, now_ms=0)
                group.state_timestamp = None
            group.offsets.update(settled)

    def has_pending_txn_offsets(self, group_id: str, topic: str, partition: int) -> bool:
        """Whether an open transaction has an offset for this partition of the group
        (OffsetFetch's require_stable answers UNSTABLE_OFFSET_COMMIT then)."""
        return any((topic, partition) in offsets
                   for offsets in self.pending_txn_offsets.get(group_id, {}).values())

    def _note_commit(self, group_id: str, topic: str, partition: int,
                     producer_id: int | None) -> None:
        """Remember the order of a commit, while it can matter (see _commit_order)."""
        if producer_id is not None:
            self._pending_order[(group_id, producer_id, topic, partition)] = next(
                self._commit_order)
        elif group_id in self.pending_txn_offsets:
            self._plain_order[(group_id, topic, partition)] = next(self._commit_order)

    def _drop_pending(self, group_id: str, producer_id: int) -> None:
        by_pid = self.pending_txn_offsets.get(group_id)
        if by_pid is not None:
            by_pid.pop(producer_id, None)
            if not by_pid:
                del self.pending_txn_offsets[group_id]
                for key in [k for k in self._plain_order if k[0] == group_id]:
                    del self._plain_order[key]

    def load_txn_offset(self, producer_id: int, key: bytes, value: bytes | None) -> None:
        """Replay a record of a transactional batch of ``__consumer_offsets`` (only
        TxnOffsetCommit writes those): an offset commit is pending until the producer's
        marker (``complete_txn``) is replayed."""
        k = ot.decode_key(key)
        if not isinstance(k, ot.OffsetCommitKey) or value is None:
            self.load(key, value)
            return
        v = ot.decode_offset_commit_value(value)
        pending = self.pending_txn_offsets.setdefault(k.group, {}).setdefault(producer_id, {})
        pending[(k.topic, k.partition)] = CommittedOffset(
            v.offset, v.leader_epoch, v.metadata, v.commit_timestamp, v.expire_timestamp)
        self._note_commit(k.group, k.topic, k.partition, producer_id)

    def fetch_offsets(
        self,
        group_id: str,
        partitions: Iterable[tuple[str, int]] | None = None,
        *,
        member_id: str | None = None,
        member_epoch: int = -1,
        require_stable: bool = False,
    ) -> OffsetFetchResult:
        """OffsetFetch: the committed offsets of ``partitions`` (all the group has when
        None); a partition without one answers offset -1. Answered in any group state:
        the group may use Kafka only to store offsets. ``member_id``/``member_epoch``
        (v9+) are checked for a KIP-848 group when given (a consumer asking for its
        offsets must be a member at its current epoch). ``require_stable`` (v7+,
        KIP-447; read_committed consumers set it): a partition with an offset pending in
        an open transaction answers UNSTABLE_OFFSET_COMMIT, so the consumer waits for
        that transaction instead of starting from an offset about to change."""
        cg = self.consumer_groups.get(group_id)
        if cg is not None:
            if member_id is not None and member_epoch >= 0:
                error = self._validate_consumer_member_epoch(cg, member_id, member_epoch)
                if error is not None:
                    return OffsetFetchResult(error, [])
            offsets = cg.offsets
        else:
            group = self.groups.get(group_id)
            offsets = group.offsets if group is not None else {}
        if partitions is None:
            keys = sorted(offsets)
        else:
            keys = [(topic, partition) for topic, partition in partitions]
        result = []
        for topic, partition in keys:
            committed = offsets.get((topic, partition))
            if require_stable and self.has_pending_txn_offsets(group_id, topic, partition):
                result.append(FetchedOffset(topic, partition, NO_OFFSET, -1, "",
                                            ErrorCode.unstable_offset_commit))
            elif committed is None:
                result.append(FetchedOffset(topic, partition, NO_OFFSET, -1, ""))
            else:
                result.append(
                    FetchedOffset(
                        topic, partition, committed.offset, committed.leader_epoch,
                        committed.metadata,
                    )
                )
        return OffsetFetchResult(ErrorCode.none, result)

    def delete_offsets(
        self,
        group_id: str,
        partitions: Iterable[tuple[str, int]],
        *,
        token: Any,
        now_ms: int,
    ) -> Effects:
        """OffsetDelete (KIP-496): an empty group loses any offsets; an active consumer
        group only those of topics it is not subscribed to."""
        fx = self._effects(now_ms)
        wanted = [(topic, partition) for topic, partition in partitions]
        group = self.groups.get(group_id) if group_id else None
        if not group_id:
            fx.respond(token, OffsetDeleteResult(ErrorCode.invalid_group_id))
            return fx
        cg = self.consumer_groups.get(group_id)
        if cg is not None:
            results = [
                PartitionResult(t, p, ErrorCode.group_subscribed_to_topic if cg.is_subscribed_to(t)
                                else ErrorCode.none)
                for t, p in wanted
            ]
            self._remove_consumer_offsets(
                cg, [(r.topic, r.partition) for r in results if r.error_code == ErrorCode.none],
                now_ms, fx)
            fx.respond(token, OffsetDeleteResult(ErrorCode.none, results))
            return fx
        if group is None:
            fx.respond(token, OffsetDeleteResult(ErrorCode.group_id_not_found))
            return fx
        if group.is_(GroupState.EMPTY):
            results = [PartitionResult(t, p, ErrorCode.none) for t, p in wanted]
        elif group.is_consumer_group:
            # Deleting the offsets of a topic the members consume would rewind them.
            results = [
                PartitionResult(
                    t, p, ErrorCode.group_subscribed_to_topic if group.is_subscribed_to(t)
                    else ErrorCode.none
                )
                for t, p in wanted
            ]
        else:
            fx.respond(token, OffsetDeleteResult(ErrorCode.non_empty_group))
            return fx
        eligible = [(r.topic, r.partition) for r in results if r.error_code == ErrorCode.none]
        self._remove_offsets(group, eligible, now_ms, fx)
        fx.respond(token, OffsetDeleteResult(ErrorCode.none, results))
        return fx

    def _remove_offsets(
        self, group: Group, keys: Iterable[tuple[str, int]], now_ms: int, fx: Effects
    ) -> None:
        """Tombstone the given offsets; an empty group left without offsets is over
        (Kafka's cleanupGroupMetadata)."""
        for key in keys:
            if group.offsets.pop(key, None) is not None:
                fx.records.append(Record(
                    group.group_id, ot.encode_offset_commit_key(group.group_id, *key), None
                ))
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

    def _remove_consumer_offsets(
        self, group: ConsumerGroup, keys: Iterable[tuple[str, int]], now_ms: int, fx: Effects
    ) -> None:
        """Tombstone offsets of a KIP-848 group; an empty one left without offsets goes."""
        for key in keys:
            if group.offsets.pop(key, None) is not None:
                fx.records.append(Record(
                    group.group_id, ot.encode_offset_commit_key(group.group_id, *key), None
                ))
        if (not group.members and not group.offsets
                and self.consumer_groups.get(group.group_id) is group):
            del self.consumer_groups[group.group_id]
            self._cg_deleted(group.group_id, fx)

    def expire_offsets(self, now_ms: int) -> Effects:
        """offsets.retention.minutes: drop offsets nobody will come back for, and the
        empty groups left without offsets. ``tick`` runs this every
        offsets.retention.check.interval.ms; it may also be called directly."""
        fx = Effects()
        for group in list(self.groups.values()):
            self._remove_offsets(group, self._expired_offsets(group, now_ms), now_ms, fx)
        for cg in list(self.consumer_groups.values()):
            expired = []
            for key, committed in cg.offsets.items():
                if cg.members and cg.is_subscribed_to(key[0]):
                    continue  # in use (KIP-211)
                base = cg.state_timestamp if not cg.members else committed.commit_timestamp
                if committed.expire_timestamp >= 0:
                    if now_ms >= committed.expire_timestamp:
                        expired.append(key)
                elif now_ms - base >= self.offsets_retention_ms:
                    expired.append(key)
            self._remove_consumer_offsets(cg, expired, now_ms, fx)
        return fx

    def _expired_offsets(self, group: Group, now_ms: int) -> list[tuple[str, int]]:
        # Kafka 2.1+ (KIP-211): an offset does not expire while its group is using it.
        if group.protocol_type is not None and group.is_(GroupState.EMPTY):
            # Retention counts from the moment the group became empty.
            base, skip = group.state_timestamp, frozenset[str]()
        elif group.is_consumer_group and group.subscribed is not None and group.is_(
            GroupState.STABLE
        ):
            # A stable consumer group keeps the offsets of topics it subscribes to.
            base, skip = None, frozenset(group.subscribed)
        elif group.protocol_type is None:
            # Offsets-only group (no group management): from each commit.
            base, skip = None, frozenset()
        else:
            return []
        expired = []
        for key, committed in group.offsets.items():
            if key[0] in skip:
                continue
            if committed.expire_timestamp >= 0:
                # Committed with an explicit retention (OffsetCommit v2-v4).
                if now_ms >= committed.expire_timestamp:
                    expired.append(key)
            elif now_ms - (committed.commit_timestamp if base is None else base) >= (
                self.offsets_retention_ms
            ):
                expired.append(key)
        return expired

    # --- admin -----------------------------------------------------------------------

    def delete_groups(self, group_ids: Iterable[str], *, token: Any, now_ms: int) -> Effects:
        """DeleteGroups: only a group without members can go; its offsets go with it."""
        fx = self._effects(now_ms)
        results = []
        for group_id in group_ids:
            group = self.groups.get(group_id)
            cg = self.consumer_groups.get(group_id)
            if cg is not None:
                if cg.members:
                    results.append(DeletedGroup(group_id, ErrorCode.non_empty_group))
                else:
                    self._remove_consumer_offsets(cg, list(cg.offsets), now_ms, fx)
                    self.consumer_groups.pop(group_id, None)
                    results.append(DeletedGroup(group_id, ErrorCode.none))
            elif group is None:
                results.append(DeletedGroup(group_id, ErrorCode.group_id_not_found))
            elif group.is_(GroupState.EMPTY):
                group.transition(GroupState.DEAD, now_ms)
                self._remove_offsets(group, list(group.offsets), now_ms, fx)
                results.append(DeletedGroup(group_id, ErrorCode.none))
            else:
                results.append(DeletedGroup(group_id, ErrorCode.non_empty_group))
        fx.respond(token, DeleteGroupsResult(results))
        return fx

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
        return classic + consumer

    def describe_groups(
        self, group_ids: Iterable[str], *, not_found_error: bool = False
    ) -> list[GroupDescription]:
        """DescribeGroups. An unknown group is described as Dead with no error, as before
        v6; ``not_found_error`` (v6+) answers GROUP_ID_NOT_FOUND for it instead.
        Member metadata and assignments are shown only for a Stable group."""
        out = []
        for group_id in group_ids:
            group = self.groups.get(group_id)
            if group_id in self.consumer_groups:
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

    def next_deadline(self) -> int | None:
        """When ``tick`` next has something to do (absolute ms), or None."""
        while self._timers and not self._is_current(self._timers[0]):
            heapq.heappop(self._timers)
        return self._timers[0][0] if self._timers else None

    def tick(self, now_ms: int) -> Effects:
        """Fire every timer due by ``now_ms``, earliest first, each as if at its own
        deadline: a late tick does the same as punctual ones would have (a timer that
        re-arms, like the initial delayed join, fires again within this tick if due)."""
        fx = self._effects(now_ms)
        while self._timers and self._timers[0][0] <= now_ms:
            entry = heapq.heappop(self._timers)
            if not self._is_current(entry):
                continue
            at, _, kind, group, member_id = entry
            if kind == _EXPIRY:
                self._next_expiry_check = None
                fx.records += self.expire_offsets(at).records
                self._schedule_expiry(at)
                continue
            assert group is not None
            if kind in (CG_SESSION, CG_REBALANCE):
                assert isinstance(group, ConsumerGroup)  # what _arm_consumer_timers schedules
                self._on_consumer_timer(kind, group, member_id, at, fx)
                continue
            assert isinstance(group, Group)  # _is_current found it in self.groups
            if kind == _HEARTBEAT:
                self._on_heartbeat_deadline(group, group.members[member_id], at, fx)
            elif kind == _PENDING:
                # A KIP-394 member that never came back with its id.
                del group.pending_members[member_id]
                if group.is_(GroupState.PREPARING_REBALANCE):
                    self._try_complete_join(group, at, fx)
            elif kind == _JOIN:
                self._on_join_deadline(group, at, fx)
            elif kind == _SYNC:
                self._on_sync_deadline(group, at, fx)
        return fx

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

    def _is_current(self, entry: _Timer) -> bool:
        deadline, _, kind, group, member_id = entry
        if kind == _EXPIRY:
            return self._next_expiry_check == deadline
        assert group is not None
        if kind in (CG_SESSION, CG_REBALANCE):
            assert isinstance(group, ConsumerGroup)  # what _arm_consumer_timers schedules
            return self._consumer_timer_is_current(kind, group, member_id, deadline)
        if self.groups.get(group.group_id) is not group:
            return False
        if kind == _HEARTBEAT:
            member = group.members.get(member_id)
            return member is not None and member.heartbeat_deadline == deadline
        if kind == _PENDING:
            return group.pending_members.get(member_id) == deadline
        if kind == _JOIN:
            return group.join_deadline == deadline and group.is_(GroupState.PREPARING_REBALANCE)
        return group.sync_deadline == deadline

    def _schedule(self, deadline: int, kind: str, group: Group | ConsumerGroup | None,
                  member_id: str = "") -> None:
        heapq.heappush(self._timers, (deadline, next(self._seq), kind, group, member_id))

    def _set_heartbeat(self, group: Group, member: Member, deadline: int) -> None:
        member.heartbeat_deadline = deadline
        self._schedule(deadline, _HEARTBEAT, group, member.member_id)

    def _schedule_expiry(self, now_ms: int) -> None:
        if self.offsets_retention_check_interval_ms is not None and self._next_expiry_check is None:
            self._next_expiry_check = now_ms + self.offsets_retention_check_interval_ms
            self._schedule(self._next_expiry_check, _EXPIRY, None)

    def _effects(self, now_ms: int) -> Effects:
        # The first call tells us the time: the periodic offset expiry starts from it.
        self._schedule_expiry(now_ms)
        return Effects()

    # --- persistence -----------------------------------------------------------------

    def _group_record(self, group: Group, assignment: dict[str, bytes]) -> Record:
        protocol = group.protocol_name
        members = []
        for m in group.members.values():
            assert protocol is not None, "a group with members has a protocol"
            members.append(
                ot.MemberMetadataValue(
                    m.member_id, m.group_instance_id, m.client_id, m.client_host,
                    m.rebalance_timeout_ms, m.session_timeout_ms, m.metadata(protocol),
                    assignment.get(m.member_id, b""),
                )
            )
        value = ot.GroupMetadataValue(
            group.protocol_type or "",
            group.generation_id,
            protocol,
            group.leader_id,
            ot.NO_TIMESTAMP if group.state_timestamp is None else group.state_timestamp,
            members,
        )
        return Record(
            group.group_id,
            ot.encode_group_metadata_key(group.group_id),
            ot.encode_group_metadata_value(value),
        )

    @staticmethod
    def _offset_record(group_id: str, topic: str, partition: int, c: CommittedOffset) -> Record:
        value = ot.OffsetCommitValue(
            c.offset, c.leader_epoch, c.metadata, c.commit_timestamp, c.expire_timestamp
        )
        return Record(
            group_id,
            ot.encode_offset_commit_key(group_id, topic, partition),
            ot.encode_offset_commit_value(value),
        )

    def load(self, key: bytes, value: bytes | None) -> None:
        """Replay one ``__consumer_offsets`` record (in log order) into the state.
        Call ``finish_load`` once the partition has been read."""
        k = ot.decode_key(key)
        if isinstance(k, ot.ConsumerGroupRecordKey):
            self._load_consumer_record(k, value)
            return
        if isinstance(k, ot.OffsetCommitKey) and k.group in self.consumer_groups:
            cg = self.consumer_groups[k.group]
            if value is None:
                cg.offsets.pop((k.topic, k.partition), None)
            else:
                v = ot.decode_offset_commit_value(value)
                cg.offsets[(k.topic, k.partition)] = CommittedOffset(
                    v.offset, v.leader_epoch, v.metadata, v.commit_timestamp, v.expire_timestamp)
                self._note_commit(k.group, k.topic, k.partition, None)
            return
        if isinstance(k, ot.GroupMetadataKey) and value is not None and (
                k.group in self.consumer_groups):
            # The group became a classic one: its offsets go with it.
            offsets_only = Group(k.group, now_ms=0)
            offsets_only.offsets = self.consumer_groups.pop(k.group).offsets
            self.groups[k.group] = offsets_only
        if isinstance(k, ot.OffsetCommitKey):
            group = self.groups.get(k.group)
            if value is None:
                if group is not None:
                    group.offsets.pop((k.topic, k.partition), None)
                    if group.generation_id == 0 and not group.offsets and not group.members:
                        # It existed only through these offsets.
                        del self.groups[k.group]
                return
            v = ot.decode_offset_commit_value(value)
            if group is None:
                group = self.groups[k.group] = Group(k.group, now_ms=0)
                group.state_timestamp = None
            group.offsets[(k.topic, k.partition)] = CommittedOffset(
                v.offset, v.leader_epoch, v.metadata, v.commit_timestamp, v.expire_timestamp
            )
            self._note_commit(k.group, k.topic, k.partition, None)
        elif isinstance(k, ot.GroupMetadataKey):
            old = self.groups.pop(k.group, None)
            offsets = old.offsets if old is not None else {}
            if value is None:
                if offsets:
                    group = self.groups[k.group] = Group(k.group, now_ms=0)
                    group.state_timestamp = None
                    group.offsets = offsets
                return
            group = self._group_from_record(k.group, ot.decode_group_metadata_value(value))
            group.offsets = offsets
            self.groups[k.group] = group

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
        for group in list(self.groups.values()):
            for member in group.members.values():
                self._set_heartbeat(group, member, now_ms + member.session_timeout_ms)
            if len(group.members) > self.max_group_size:
                self._prepare_rebalance(group, now_ms, fx, "loaded group is over group.max.size")
        return fx
