"""The classic rebalance protocol: JoinGroup and SyncGroup, and how a classic group goes
from one generation to the next (join phase, leader's assignment, sync phase).

A mixin of ``GroupManager`` (``group_manager.py``), which owns the groups, answers
Heartbeat and LeaveGroup and fires the timers; kept apart for size, as
``consumer_protocol.py`` is for KIP-848 groups. Its methods take the current time
(``now_ms``) and add to the ``Effects`` of the request being answered.

JoinGroup and SyncGroup requests that must wait are parked under their token and
answered by a later call: another member's join or sync, a timer firing, a leave.

Timers, as in Kafka's purgatories (scheduled here, fired by ``GroupManager.on_timer``):
a member's session (or, while it is new in a rebalance, the 5-minute new-member join
timeout), a KIP-394 pending member's expiry, the rebalance timeout /
``group.initial.rebalance.delay.ms`` of a join phase, and the pending-sync timeout
after a join phase.

Departures from Kafka, each so that every token gets exactly one answer: a parked
JoinGroup/SyncGroup that is superseded by a newer one from the same member is answered
REBALANCE_IN_PROGRESS (Kafka drops it), and a member that leaves or is removed while
its SyncGroup is parked gets UNKNOWN_MEMBER_ID (Kafka drops it).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any

from kio.schema.errors import ErrorCode

from odradek.coordinator import offsets_topic as ot
from odradek.coordinator.consumer_group import ConsumerGroup
from odradek.coordinator.group import Group, GroupState, Member, Waiting
from odradek.coordinator.results import (
    UNKNOWN_MEMBER,
    Effects,
    JoinMember,
    JoinResult,
    Record,
    SyncResult,
)

log = logging.getLogger(__name__)

# A member that joins has no session until the join phase ends (it cannot heartbeat, and
# its socket is muted while the JoinGroup waits); this bounds how long it may hold the
# rebalance up before it is dropped (GroupCoordinator.NewMemberJoinTimeoutMs).
NEW_MEMBER_JOIN_TIMEOUT_MS = 5 * 60 * 1000

# Timer kinds of classic groups (GroupManager.on_timer fires them).
HEARTBEAT_TIMER = "heartbeat"
PENDING_MEMBER_TIMER = "pending-member"
JOIN_TIMER = "join"
SYNC_TIMER = "sync"

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


class ClassicRebalance:
    """Mixed into ``GroupManager``; see the module docstring."""

    # Provided by GroupManager, and _cg_deleted by ConsumerProtocol: annotations, since a
    # stub method here would shadow a sibling mixin's real one. _schedule, which has a
    # default argument, is a stub as in ConsumerProtocol: GroupManager's own comes first.
    groups: dict[str, Group]
    consumer_groups: dict[str, ConsumerGroup]
    share_groups: dict[str, Any]
    streams_groups: dict[str, Any]
    initial_rebalance_delay_ms: int
    min_session_timeout_ms: int
    max_session_timeout_ms: int
    max_group_size: int
    _new_uuid: Callable[[], str]
    _effects: Callable[[int], Effects]
    _cg_deleted: Callable[[str, Effects], None]
    def _schedule(self, deadline: int, kind: str, group: Group | ConsumerGroup | None,
                  member_id: str = "") -> None: ...  # pragma: no cover

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
        if group_id in self.share_groups or group_id in self.streams_groups:
            # A share or streams group's id: "Group X is not a classic group."
            fx.respond(token, JoinResult(ErrorCode.group_id_not_found, member_id=member_id))
            return fx
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
            self._schedule(deadline, PENDING_MEMBER_TIMER, group, new_id)
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
        self._schedule(group.join_deadline, JOIN_TIMER, group)
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
            self._schedule(group.join_deadline, JOIN_TIMER, group)
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
            self._schedule(group.join_deadline, JOIN_TIMER, group)
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
        self._schedule(group.sync_deadline, SYNC_TIMER, group)

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

    # --- members (also Heartbeat's, LeaveGroup's and OffsetCommit's) -----------------

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

    def _set_heartbeat(self, group: Group, member: Member, deadline: int) -> None:
        member.heartbeat_deadline = deadline
        self._schedule(deadline, HEARTBEAT_TIMER, group, member.member_id)

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

