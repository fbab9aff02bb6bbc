"""Streams groups (KIP-1071, Kafka Streams' own group protocol): StreamsGroupHeartbeat
(88) and StreamsGroupDescribe (89) on the group coordinator, a mixin of ``GroupManager``.

A Kafka Streams application with ``group.protocol=streams`` sends its topology with its
first heartbeat; the coordinator works out its tasks and internal topics
(``streams_topology.py``), asks the broker to create the internal topics that are
missing (the heartbeat's result names them: the handler creates them, as Kafka's
KafkaApis does), and once the topology is configured assigns the tasks with the sticky
assignor (``streams_assignor.py``). Members move to their target as KIP-848 consumers
do (``consumer_group.reconcile``: an active task is given up before anyone else gets
it); standby tasks are handed out at once.

The flow of one heartbeat, as Kafka's GroupMetadataManager.streamsGroupHeartbeat:

1. validate the request (a group id, the client's member id, an epoch >= -2; a join
   carries its topology and a rebalance timeout, and owns no tasks yet);
2. find or create the group and the member (epoch 0 joins, -1 and -2 leave); an
   unknown member is UNKNOWN_MEMBER_ID, an epoch that is neither the member's nor (with
   what it owns still assigned) its previous one FENCED_MEMBER_EPOCH;
3. a new member, changed member metadata, a new topology or changed topics bump the
   group epoch; a group epoch ahead of the assignment epoch gets a new target
   assignment (empty while the topology is not configured);
4. reconcile the member one step; answer with its epoch, its tasks when they changed,
   and the group's status (missing source or internal topics, topics incorrectly
   partitioned, a shutdown requested by a member).

Timers: each member's session (``streams.session.timeout.ms``, the group's config, else
``group.streams.session.timeout.ms``) and, while it has active tasks to give up, its
rebalance timeout; either removes it from the group.

Committed offsets are the group's (``StreamsGroup.offsets``), checked as a consumer
group's: a member commits at its current epoch.

Persistence, in ``__consumer_offsets`` with Kafka 4.4's record layouts
(``streams_records.py``): after every operation the group's persistent state is
compared with what it was before, and the differences become records - the topology
(23), each member's metadata (19), target tasks (21) and current tasks and epochs (22),
the assignment epoch (20) and the group epoch (17); tombstones for members that left
and groups that are gone. A coordinator that loads them (after a restart, or in a
cluster when the partition moves) knows the members, their epochs and tasks: they
heartbeat on without rejoining.

Topology descriptions (KIP-1331, ``streams_descriptions.py``): with the topology
description plugin configured, a v1 heartbeat of a member in the group asks for the
description of the group's topology (TopologyDescriptionRequired) while the plugin has
none for the current topology epoch (backed off per group); the member pushes it with
StreamsGroupTopologyDescriptionUpdate (``streams_topology_description_update``), and
StreamsGroupDescribe v1 returns it when asked to.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kio.schema.errors import ErrorCode

from odradek.coordinator import offsets_topic as ot
from odradek.coordinator import streams_descriptions as sd
from odradek.coordinator import streams_records as sr
from odradek.coordinator.consumer_group import MemberState, reconcile
from odradek.coordinator.group import Group
from odradek.coordinator.results import Effects, Record
from odradek.coordinator.streams_assignor import MemberSpec, Tasks, assign
from odradek.coordinator.streams_state import (
    StreamsGroup,
    StreamsGroupDescription,
    StreamsHeartbeatResult,
    StreamsMember,
    StreamsMemberDescription,
    StreamsSettings,
    StreamsTarget,
)
from odradek.coordinator.streams_topology import (
    SHUTDOWN_APPLICATION,
    STALE_TOPOLOGY,
    ConfiguredTopology,
    CopartitionGroup,
    InternalTopic,
    Status,
    Subtopology,
    Topology,
    TopologyError,
    configure,
)

log = logging.getLogger(__name__)

STREAMS_SESSION = "streams-session"
STREAMS_REBALANCE = "streams-rebalance"

JOIN_EPOCH = 0
LEAVE_EPOCH = -1
LEAVE_STATIC_EPOCH = -2


class _HeartbeatError(Exception):
    def __init__(self, error_code: int, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code


def _tasks(items: Iterable[Any] | None) -> Tasks | None:
    """The wire's TaskIds list as Tasks (None stays None: "unchanged")."""
    if items is None:
        return None
    out: Tasks = {}
    for t in items:
        if t.partitions:
            out.setdefault(t.subtopology_id, set()).update(t.partitions)
    return out


def _copy(tasks: Mapping[str, Iterable[int]]) -> Tasks:
    return {s: set(p) for s, p in tasks.items() if p}


class StreamsProtocol:
    """Mixed into ``GroupManager``; see the module docstring. A group id names one kind
    of group only."""

    # Provided by GroupManager (and the other protocols).
    groups: dict[str, Any]
    consumer_groups: dict[str, Any]
    share_groups: dict[str, Any]
    group_configs: Callable[[str], Mapping[str, str]]
    _effects: Callable[[int], Effects]
    def _schedule(self, deadline: int, kind: str, group: Any, member_id: str = ""
                  ) -> None: ...  # pragma: no cover

    def _init_streams_protocol(self, settings: StreamsSettings) -> None:
        self.streams_groups: dict[str, StreamsGroup] = {}
        self.streams_settings = settings
        # The broker's topics as last given: name -> partition count.
        self.streams_topics: Mapping[str, int] = {}
        # KIP-1331's topology description plugin (None: not configured) and back-off.
        self.description_plugin = (sd.InMemoryPlugin()
                                   if settings.topology_description_plugin else None)
        self.description_backoff = sd.Backoff()

    def _another_kind(self, group_id: str) -> bool:
        """Whether the id names a classic, consumer or share group."""
        return (group_id in self.groups or group_id in self.consumer_groups
                or group_id in self.share_groups)

    def _streams_config(self, group_id: str, name: str, default: int) -> int:
        value = self.group_configs(group_id).get(name)
        return default if value is None else int(value)

    def streams_session_timeout_ms(self, group_id: str) -> int:
        return self._streams_config(group_id, "streams.session.timeout.ms",
                                    self.streams_settings.session_timeout_ms)

    def streams_heartbeat_interval_ms(self, group_id: str) -> int:
        return self._streams_config(group_id, "streams.heartbeat.interval.ms",
                                    self.streams_settings.heartbeat_interval_ms)

    def _standby_replicas(self, group_id: str) -> int:
        return self._streams_config(group_id, "streams.num.standby.replicas",
                                    self.streams_settings.num_standby_replicas)

    # --- StreamsGroupHeartbeat -------------------------------------------------------

    def streams_heartbeat(self, request: Any, *, client_id: str = "", client_host: str = "",
                          topics: Mapping[str, int] | None = None, token: Any,
                          now_ms: int, api_version: int = 0) -> Effects:
        """StreamsGroupHeartbeat (API 88). ``request`` is the request body (its fields
        as on the wire: None for "unchanged"); ``topics`` the broker's topics now
        (name -> partition count)."""
        fx = self._effects(now_ms)
        if topics is not None:
            self.streams_topics = topics
        before = _persisted(self.streams_groups.get(request.group_id))
        try:
            self._validate_streams_heartbeat(request)
            if request.member_epoch in (LEAVE_EPOCH, LEAVE_STATIC_EPOCH):
                result = self._streams_leave(request.group_id, request.member_id,
                                             request.member_epoch, now_ms)
            else:
                result = self._streams_heartbeat(request, client_id, client_host, now_ms)
                if api_version >= 1 and self._wants_description(
                        self.streams_groups[request.group_id], result, now_ms):
                    result = dataclasses.replace(result, topology_description_required=True)
        except _HeartbeatError as exc:
            result = StreamsHeartbeatResult(exc.error_code, str(exc),
                                            member_id=request.member_id)
        self._streams_records(request.group_id, before, fx)
        fx.respond(token, result)
        return fx

    @staticmethod
    def _validate_streams_heartbeat(request: Any) -> None:
        def invalid(message: str) -> _HeartbeatError:
            return _HeartbeatError(ErrorCode.invalid_request, message)

        if not request.group_id:
            raise invalid("GroupId can't be empty.")
        if not request.member_id:
            raise invalid("MemberId can't be empty.")
        if request.member_epoch < LEAVE_STATIC_EPOCH:
            raise invalid(f"MemberEpoch is {request.member_epoch}, but must be greater "
                          "than or equal to -2.")
        if request.member_epoch == JOIN_EPOCH:
            if request.topology is None:
                raise invalid("Topology must be non-null when joining the group.")
            if request.rebalance_timeout.total_seconds() <= 0:
                raise invalid("RebalanceTimeoutMs must be provided when joining the group.")
            for name, tasks in (("ActiveTasks", request.active_tasks),
                                ("StandbyTasks", request.standby_tasks),
                                ("WarmupTasks", request.warmup_tasks)):
                if tasks:
                    raise invalid(f"{name} must be empty when (re-)joining.")

    def _streams_group_for(self, group_id: str, create: bool, now_ms: int) -> StreamsGroup:
        group = self.streams_groups.get(group_id)
        if group is not None:
            return group
        if self._another_kind(group_id):
            if group_id in self.groups and not self.groups[group_id].members:
                # A classic group that only keeps offsets becomes a streams group with
                # them (as Kafka converts an empty classic group).
                group = StreamsGroup(group_id, now_ms)
                group.offsets = self.groups.pop(group_id).offsets
                self.streams_groups[group_id] = group
                return group
            raise _HeartbeatError(ErrorCode.group_id_not_found,
                                  f"Group {group_id} is not a streams group.")
        if not create:
            raise _HeartbeatError(ErrorCode.unknown_member_id,
                                  f"Group {group_id} has no member of that id.")
        group = self.streams_groups[group_id] = StreamsGroup(group_id, now_ms)
        return group

    def _streams_heartbeat(self, request: Any, client_id: str, client_host: str,
                           now_ms: int) -> StreamsHeartbeatResult:
        group_id, member_id, epoch = request.group_id, request.member_id, request.member_epoch
        joining = epoch == JOIN_EPOCH
        group = self._streams_group_for(group_id, joining, now_ms)
        member = group.members.get(member_id)
        bump = False
        owned = _tasks(request.active_tasks)
        if member is None or joining:
            if not joining:
                raise _HeartbeatError(ErrorCode.unknown_member_id, f"Member {member_id} is "
                                      f"not a member of group {group_id}.")
            if member is None and len(group.members) >= self.streams_settings.max_size:
                raise _HeartbeatError(ErrorCode.group_max_size_reached, "The streams group "
                                      "has reached its maximum capacity of "
                                      f"{self.streams_settings.max_size} members.")
            if member is not None:  # rejoining after losing its tasks: starts afresh
                group.members.pop(member_id)
            member = group.members[member_id] = StreamsMember(member_id)
            bump = True
            log.info("Streams group %s: member %s joins", group_id, member_id)
        elif epoch != member.member_epoch:
            held = owned if owned is not None else {}
            if not (epoch == member.previous_member_epoch and all(
                    p in member.assigned.get(s, ()) for s, ps in held.items() for p in ps)):
                raise _HeartbeatError(ErrorCode.fenced_member_epoch, (
                    f"The streams group member has a "
                    f"{'greater' if epoch > member.member_epoch else 'smaller'} member epoch "
                    f"({epoch}) than the one known by the group coordinator "
                    f"({member.member_epoch}). The member must abandon all its tasks and "
                    "rejoin."))
        statuses: list[Status] = []
        if request.topology is not None:
            bump |= self._apply_topology(group, request.topology, statuses)
        bump |= self._update_member(member, request, client_id, client_host)
        if request.shutdown_application:
            group.shutdown_requested = True
        configured, changed = self._configure(group)
        bump |= changed
        if bump:
            group.group_epoch += 1
        if group.group_epoch > group.assignment_epoch:
            self._compute_streams_target(group)
        was = (member.member_epoch, _copy(member.assigned), _copy(member.standby),
               _copy(member.warmup))
        self._reconcile_streams_member(group, member, owned)
        self._arm_streams_timers(group, member, now_ms)
        if configured is not None:
            statuses.extend(configured.statuses)
        if group.shutdown_requested:
            statuses.append(Status(SHUTDOWN_APPLICATION, "A KafkaStreams instance "
                                   "encountered a fatal error and requested a shutdown for "
                                   "the entire application."))
        changed_tasks = joining or was != (member.member_epoch, member.assigned,
                                           member.standby, member.warmup)
        return StreamsHeartbeatResult(
            ErrorCode.none, None, member_id, member.member_epoch,
            self.streams_heartbeat_interval_ms(group_id),
            self.streams_settings.acceptable_recovery_lag,
            self.streams_settings.task_offset_interval_ms, tuple(statuses),
            _copy(member.assigned) if changed_tasks else None,
            _copy(member.standby) if changed_tasks else None,
            _copy(member.warmup) if changed_tasks else None,
            dict(configured.to_create) if configured is not None else {})

    def _wants_description(self, group: StreamsGroup, result: StreamsHeartbeatResult,
                           now_ms: int) -> bool:
        """KIP-1331 (Kafka's maybeSetTopologyDescriptionRequired): whether a member's
        successful v1 heartbeat asks for the topology's description - the plugin is
        configured, the group has a topology whose description the plugin neither holds
        nor refused, the member's topology is not stale, and the group's back-off lets
        it ask now."""
        if self.description_plugin is None or group.topology is None:
            return False
        epoch = group.topology.epoch
        if (epoch < 0 or epoch in (group.stored_description_epoch,
                                   group.failed_description_epoch)
                or any(s.code == STALE_TOPOLOGY for s in result.statuses)):
            return False
        return self.description_backoff.arm_if_not_active(group.group_id, epoch, now_ms)

    # --- StreamsGroupTopologyDescriptionUpdate (KIP-1331) ------------------------------

    def streams_topology_description_update(self, request: Any, *, token: Any,
                                            now_ms: int) -> Effects:
        """StreamsGroupTopologyDescriptionUpdate (API 93), after the handler's checks
        (plugin configured, ids not empty). Answers (error code, message). As Kafka's
        GroupCoordinatorService: the member must be in the group and name the group's
        topology epoch; the description must convert; the stored epoch is marked
        uncertain (-2) before the plugin is called and set to the epoch after."""
        fx = self._effects(now_ms)
        group_id = request.group_id
        group = self.streams_groups.get(group_id)
        try:
            if group is None:
                raise _HeartbeatError(
                    ErrorCode.group_id_not_found,
                    f"Group {group_id} is not a streams group." if self._another_kind(
                        group_id) else f"Group {group_id} not found.")
            if request.member_id not in group.members:
                raise _HeartbeatError(ErrorCode.unknown_member_id, f"Member "
                                      f"{request.member_id} is not a member of group "
                                      f"{group_id}.")
            current = group.topology.epoch if group.topology is not None else -1
            if request.topology_epoch != current:
                raise _HeartbeatError(ErrorCode.invalid_request, (
                    f"Topology epoch {request.topology_epoch} does not match the group's "
                    f"current topology epoch {current}."))
            try:
                description = sd.description_from_wire(request.topology_description)
            except sd.InvalidDescription as exc:
                raise _HeartbeatError(ErrorCode.invalid_request, str(exc)) from None
        except _HeartbeatError as exc:
            fx.respond(token, (int(exc.error_code), str(exc)))
            return fx
        assert self.description_plugin is not None
        epoch = request.topology_epoch
        if group.stored_description_epoch != sd.UNCERTAIN:
            before = _persisted(group)
            group.stored_description_epoch = sd.UNCERTAIN
            self._streams_records(group_id, before, fx)
        self.description_plugin.set_topology(group_id, epoch, description)
        before = _persisted(group)
        stored = group.stored_description_epoch
        group.stored_description_epoch = (sd.UNCERTAIN if stored == sd.NONE_STORED
                                          else max(stored, epoch))
        self._streams_records(group_id, before, fx)
        self.description_backoff.clear(group_id, epoch)
        log.info("Streams group %s: topology description stored at topology epoch %d",
                 group_id, epoch)
        fx.respond(token, (int(ErrorCode.none), None))
        return fx

    def _apply_topology(self, group: StreamsGroup, wire: Any, statuses: list[Status]
                        ) -> bool:
        """A joining member's topology: the group's if it has none or this one is newer
        (a bump); an older one is STALE_TOPOLOGY for this member."""
        topology = topology_from_wire(wire)
        if group.topology is None or topology.epoch > group.topology.epoch:
            if group.topology is not None:
                log.info("Streams group %s: topology epoch %d -> %d", group.group_id,
                         group.topology.epoch, topology.epoch)
            group.topology = topology
            group.configured = None
            group.topic_partitions = {}
            return True
        if topology.epoch < group.topology.epoch:
            statuses.append(Status(STALE_TOPOLOGY, f"The member's topology epoch "
                                   f"{topology.epoch} is behind the group's "
                                   f"{group.topology.epoch}."))
        return False

    @staticmethod
    def _update_member(member: StreamsMember, request: Any, client_id: str,
                       client_host: str) -> bool:
        """Apply what the request changes; whether the assignment depends on it."""
        member.client_id, member.client_host = client_id, client_host
        bump = False
        if request.rebalance_timeout.total_seconds() > 0:
            member.rebalance_timeout_ms = int(request.rebalance_timeout.total_seconds() * 1000)
        if request.instance_id is not None:
            member.instance_id = request.instance_id
        if request.rack_id is not None and request.rack_id != member.rack_id:
            member.rack_id = request.rack_id
        if request.topology is not None:
            member.topology_epoch = request.topology.epoch
        if request.process_id is not None and request.process_id != member.process_id:
            member.process_id = request.process_id
            bump = True
        if request.user_endpoint is not None:
            endpoint = (request.user_endpoint.host, int(request.user_endpoint.port))
            if endpoint != member.user_endpoint:
                member.user_endpoint = endpoint
        if request.client_tags is not None:
            tags = {kv.key: kv.value for kv in request.client_tags}
            if tags != member.client_tags:
                member.client_tags = tags
                bump = True
        return bump

    def _configure(self, group: StreamsGroup) -> tuple[ConfiguredTopology | None, bool]:
        """The topology configured against the broker's topics now; whether that changed
        anything the assignment depends on (the tasks, or the topics' partitions)."""
        if group.topology is None:
            return None, False
        names = group.topology.topic_names() | {
            t for s in group.topology.subtopologies if s.source_topic_regex
            for t in self.streams_topics}
        relevant = {t: n for t, n in self.streams_topics.items() if t in names}
        if group.configured is not None and relevant == group.topic_partitions:
            return group.configured, False
        try:
            configured = configure(group.topology, self.streams_topics)
        except TopologyError as exc:
            raise _HeartbeatError(ErrorCode.streams_invalid_topology, str(exc)) from None
        before = group.configured
        group.configured, group.topic_partitions = configured, relevant
        return configured, before is None or before.tasks != configured.tasks

    def _compute_streams_target(self, group: StreamsGroup) -> None:
        tasks = group.configured.tasks if group.configured is not None else {}
        # A member that named no process is a process of its own.
        specs = [MemberSpec(m.member_id, m.process_id or m.member_id, m.assigned, m.standby)
                 for m in group.members.values()]
        assigned = assign(tasks, specs, self._standby_replicas(group.group_id))
        group.target = {mid: StreamsTarget(a.active, a.standby) for mid, a in assigned.items()}
        group.assignment_epoch = group.group_epoch

    def _reconcile_streams_member(self, group: StreamsGroup, member: StreamsMember,
                                  owned: Tasks | None) -> None:
        target = group.target.get(member.member_id, StreamsTarget())
        reconcile(member, group.assignment_epoch, target.active, owned,
                  group.active_owned_by_others(member.member_id))
        # Standby tasks come at once, but not one the member still runs as active.
        pending = member.pending_revocation
        member.standby = _copy({s: {p for p in ps if p not in pending.get(s, ())}
                                for s, ps in target.standby.items()})
        member.warmup = {}

    def _arm_streams_timers(self, group: StreamsGroup, member: StreamsMember,
                            now_ms: int) -> None:
        member.session_deadline = now_ms + self.streams_session_timeout_ms(group.group_id)
        self._schedule(member.session_deadline, STREAMS_SESSION, group, member.member_id)
        if member.pending_revocation:
            if member.rebalance_deadline_epoch != member.member_epoch:
                member.rebalance_deadline = now_ms + member.rebalance_timeout_ms
                member.rebalance_deadline_epoch = member.member_epoch
                self._schedule(member.rebalance_deadline, STREAMS_REBALANCE, group,
                               member.member_id)
        else:
            member.rebalance_deadline = None
            member.rebalance_deadline_epoch = -1

    def _streams_leave(self, group_id: str, member_id: str, epoch: int, now_ms: int
                       ) -> StreamsHeartbeatResult:
        group = self.streams_groups.get(group_id)
        if group is None or member_id not in group.members:
            if group is None and self._another_kind(group_id):
                raise _HeartbeatError(ErrorCode.group_id_not_found,
                                      f"Group {group_id} is not a streams group.")
            raise _HeartbeatError(ErrorCode.unknown_member_id, f"Member {member_id} is not a "
                                  f"member of group {group_id}.")
        self._remove_streams_member(group, member_id, now_ms)
        log.info("Streams group %s: member %s left", group_id, member_id)
        return StreamsHeartbeatResult(ErrorCode.none, None, member_id, epoch,
                                      self.streams_heartbeat_interval_ms(group_id))

    def _remove_streams_member(self, group: StreamsGroup, member_id: str, now_ms: int
                               ) -> None:
        group.members.pop(member_id, None)
        group.target.pop(member_id, None)
        group.group_epoch += 1
        if not group.members:
            group.state_timestamp = now_ms
            group.shutdown_requested = False
        self._compute_streams_target(group)

    # --- timers ----------------------------------------------------------------------

    def streams_timer_is_current(self, kind: str, group: StreamsGroup, member_id: str,
                                 deadline: int) -> bool:
        if self.streams_groups.get(group.group_id) is not group:
            return False
        member = group.members.get(member_id)
        if member is None:
            return False
        if kind == STREAMS_SESSION:
            return member.session_deadline == deadline
        return member.rebalance_deadline == deadline

    def on_streams_timer(self, kind: str, group: StreamsGroup, member_id: str,
                         now_ms: int, fx: Effects) -> None:
        why = ("its session expired" if kind == STREAMS_SESSION
               else "it did not give up its tasks within its rebalance timeout")
        log.info("Streams group %s: member %s removed: %s", group.group_id, member_id, why)
        before = _persisted(group)
        self._remove_streams_member(group, member_id, now_ms)
        self._streams_records(group.group_id, before, fx)

    # --- offsets, describe, delete ---------------------------------------------------

    def maybe_delete_streams_group(self, group: StreamsGroup, fx: Effects) -> None:
        """After some of its offsets were removed: an empty group left without offsets
        goes, with its records' tombstones."""
        if (not group.members and not group.offsets
                and self.streams_groups.get(group.group_id) is group):
            before = _persisted(group)
            del self.streams_groups[group.group_id]
            self._streams_records(group.group_id, before, fx)
            # KIP-1331: the group's description goes with it (Kafka deletes it from the
            # plugin when the group is deleted).
            if self.description_plugin is not None:
                self.description_plugin.delete_topology(group.group_id)
            self.description_backoff.clear_group(group.group_id)

    # --- persistence -----------------------------------------------------------------

    def _streams_records(self, group_id: str, before: _Persisted, fx: Effects) -> None:
        """The records of what changed in a group since ``before`` (Kafka's order:
        members' records before the group-level ones; a gone group's metadata last)."""
        after = _persisted(self.streams_groups.get(group_id))
        if after == before:
            return

        def rec(version: int, value: bytes | None, member_id: str | None = None) -> None:
            fx.records.append(Record(group_id, ot.encode_consumer_group_key(
                version, group_id, member_id), value))

        epoch, assignment_epoch, topology, members, targets, current, descriptions = after
        for member_id in before[3].keys() - members.keys():
            rec(ot.STREAMS_GROUP_CURRENT_MEMBER_ASSIGNMENT_KEY, None, member_id)
            rec(ot.STREAMS_GROUP_TARGET_ASSIGNMENT_MEMBER_KEY, None, member_id)
            rec(ot.STREAMS_GROUP_MEMBER_METADATA_KEY, None, member_id)
        for member_id, meta in members.items():
            if before[3].get(member_id) != meta:
                rec(ot.STREAMS_GROUP_MEMBER_METADATA_KEY, sr.encode_member_metadata(meta),
                    member_id)
        if (epoch != before[0] or descriptions != before[6]) and epoch >= 0:
            rec(ot.STREAMS_GROUP_METADATA_KEY, sr.encode_group_metadata(epoch, *descriptions))
        if topology != before[2] and topology is not None:
            rec(ot.STREAMS_GROUP_TOPOLOGY_KEY, sr.encode_topology(topology))
        for member_id, target in targets.items():
            if before[4].get(member_id) != target:
                rec(ot.STREAMS_GROUP_TARGET_ASSIGNMENT_MEMBER_KEY,
                    sr.encode_target_assignment_member(*target), member_id)
        if assignment_epoch != before[1] and assignment_epoch >= 0:
            rec(ot.STREAMS_GROUP_TARGET_ASSIGNMENT_METADATA_KEY,
                sr.encode_target_assignment_metadata(assignment_epoch))
        for member_id, assignment in current.items():
            if before[5].get(member_id) != assignment:
                rec(ot.STREAMS_GROUP_CURRENT_MEMBER_ASSIGNMENT_KEY,
                    sr.encode_current_assignment(assignment), member_id)
        if epoch < 0 <= before[0]:  # the group is gone
            rec(ot.STREAMS_GROUP_TARGET_ASSIGNMENT_METADATA_KEY, None)
            rec(ot.STREAMS_GROUP_TOPOLOGY_KEY, None)
            rec(ot.STREAMS_GROUP_METADATA_KEY, None)

    def _load_streams_record(self, key: ot.ConsumerGroupRecordKey, value: bytes | None
                             ) -> None:
        """Replay one streams group record (in log order)."""
        group = self.streams_groups.get(key.group)
        if group is None:
            if value is None:
                return
            group = self.streams_groups[key.group] = StreamsGroup(key.group, 0)
            classic = self.groups.pop(key.group, None)
            if classic is not None:  # offsets replayed before the group's first record
                group.offsets = classic.offsets
        if key.version == ot.STREAMS_GROUP_METADATA_KEY:
            if value is None:
                del self.streams_groups[key.group]
                if group.offsets:  # offsets outlive the group (a classic one keeps them)
                    offsets_only = self.groups[key.group] = Group(key.group, now_ms=0)
                    offsets_only.state_timestamp = None
                    offsets_only.offsets = group.offsets
            else:
                meta = sr.decode_group_metadata(value)
                group.group_epoch = meta.epoch
                group.stored_description_epoch = meta.stored_description_epoch
                group.failed_description_epoch = meta.failed_description_epoch
            return
        if key.version == ot.STREAMS_GROUP_TOPOLOGY_KEY:
            group.topology = None if value is None else sr.decode_topology(value)
            group.configured = None
            return
        if key.version == ot.STREAMS_GROUP_TARGET_ASSIGNMENT_METADATA_KEY:
            group.assignment_epoch = 0 if value is None else \
                sr.decode_target_assignment_metadata(value)
            return
        assert key.member_id is not None
        if value is None:
            group.members.pop(key.member_id, None)
            group.target.pop(key.member_id, None)
            return
        if key.version == ot.STREAMS_GROUP_TARGET_ASSIGNMENT_MEMBER_KEY:
            active, standby, _ = sr.decode_target_assignment_member(value)
            group.target[key.member_id] = StreamsTarget(active, standby)
            return
        member = group.members.setdefault(key.member_id, StreamsMember(key.member_id))
        if key.version == ot.STREAMS_GROUP_CURRENT_MEMBER_ASSIGNMENT_KEY:
            a = sr.decode_current_assignment(value)
            member.member_epoch, member.previous_member_epoch = a.member_epoch, \
                a.previous_member_epoch
            member.state = _MEMBER_STATES.get(a.state, MemberState.STABLE)
            member.assigned, member.standby, member.warmup = a.active, a.standby, a.warmup
            member.pending_revocation = a.pending_active
            return
        m = sr.decode_member_metadata(value)
        member.instance_id, member.rack_id = m.instance_id, m.rack_id
        member.client_id, member.client_host = m.client_id, m.client_host
        member.rebalance_timeout_ms, member.topology_epoch = (m.rebalance_timeout_ms,
                                                              m.topology_epoch)
        member.process_id, member.user_endpoint = m.process_id, m.user_endpoint
        member.client_tags = dict(m.client_tags)

    def _finish_streams_load(self, now_ms: int, topics: Mapping[str, int] | None) -> None:
        """After replay: each group's topology configured against the broker's topics
        as they are (no epoch bump: the target assignment loaded stays), and a fresh
        session for every loaded member."""
        if topics is not None:
            self.streams_topics = topics
        for group in self.streams_groups.values():
            if group.topology is not None:
                # A topology that cannot run: its members hear why at their heartbeat.
                with contextlib.suppress(_HeartbeatError):
                    self._configure(group)
            if not group.members:
                group.state_timestamp = now_ms
            for member in group.members.values():
                member.rebalance_deadline_epoch = -1
                self._arm_streams_timers(group, member, now_ms)

    def streams_group_describe(self, group_ids: Iterable[str],
                               include_description: bool = False
                               ) -> list[StreamsGroupDescription]:
        """StreamsGroupDescribe (API 89); v1 may ask for the topology descriptions
        (KIP-1331, Kafka's attachTopologyDescriptions: NOT_STORED without a plugin, a
        topology, or a description stored for the topology's epoch)."""
        out = []
        for group_id in group_ids:
            group = self.streams_groups.get(group_id)
            if group is None:
                known = self._another_kind(group_id)
                out.append(StreamsGroupDescription(
                    ErrorCode.group_id_not_found, group_id,
                    f"Group {group_id} is not a streams group." if known
                    else f"Group {group_id} not found."))
                continue
            members = []
            for m in group.members.values():
                target = group.target.get(m.member_id, StreamsTarget())
                members.append(StreamsMemberDescription(
                    m.member_id, m.member_epoch, m.instance_id, m.rack_id, m.client_id,
                    m.client_host, m.topology_epoch, m.process_id, m.user_endpoint,
                    dict(m.client_tags), (_copy(m.assigned), _copy(m.standby),
                                          _copy(m.warmup)),
                    (_copy(target.active), _copy(target.standby), {})))
            status, description = sd.NOT_REQUESTED, None
            if include_description:
                status = sd.NOT_STORED
                if (self.description_plugin is not None and group.topology is not None
                        and group.stored_description_epoch >= 0
                        and group.stored_description_epoch == group.topology.epoch):
                    description = self.description_plugin.get_topology(
                        group_id, group.topology.epoch)
                    if description is not None:
                        status = sd.AVAILABLE
            out.append(StreamsGroupDescription(
                ErrorCode.none, group_id, None, group.state, group.group_epoch,
                group.assignment_epoch, group.topology, members,
                # Kafka names the assignor it would use next: its only built-in one.
                assignor_name="sticky", description_status=status,
                description=description))
        return out


# What is persisted of a group: group epoch, assignment epoch, topology, per member its
# metadata, target and current assignment; the stored and failed description epochs.
_Persisted = tuple[int, int, Topology | None, dict[str, sr.MemberMetadata],
                   dict[str, tuple[Tasks, Tasks, Tasks]], dict[str, sr.CurrentAssignment],
                   tuple[int, int]]
_NONE: _Persisted = (-1, -1, None, {}, {}, {}, (sd.NONE_STORED, sd.NONE_STORED))
_STATE_CODES = {MemberState.STABLE: 0, MemberState.UNREVOKED_PARTITIONS: 1,
                MemberState.UNRELEASED_PARTITIONS: 2}
_MEMBER_STATES = {code: state for state, code in _STATE_CODES.items()}


def _persisted(group: StreamsGroup | None) -> _Persisted:
    if group is None:
        return _NONE
    members = group.members.values()
    return (
        group.group_epoch, group.assignment_epoch, group.topology,
        {m.member_id: sr.MemberMetadata(
            m.instance_id, m.rack_id, m.client_id, m.client_host, m.rebalance_timeout_ms,
            m.topology_epoch, m.process_id, m.user_endpoint, tuple(sorted(
                m.client_tags.items()))) for m in members},
        {mid: (_copy(t.active), _copy(t.standby), {}) for mid, t in group.target.items()},
        {m.member_id: sr.CurrentAssignment(
            m.member_epoch, m.previous_member_epoch, _STATE_CODES[m.state], _copy(m.assigned),
            _copy(m.standby), _copy(m.warmup), _copy(m.pending_revocation))
         for m in members},
        (group.stored_description_epoch, group.failed_description_epoch))


def topology_from_wire(wire: Any) -> Topology:
    """The heartbeat's Topology as ``streams_topology.Topology``."""
    def internal(t: Any) -> InternalTopic:
        return InternalTopic(t.name, int(t.partitions), int(t.replication_factor),
                             tuple((kv.key, kv.value) for kv in t.topic_configs))

    return Topology(int(wire.epoch), tuple(Subtopology(
        s.subtopology_id, tuple(s.source_topics), tuple(s.source_topic_regex),
        tuple(internal(t) for t in s.state_changelog_topics),
        tuple(s.repartition_sink_topics),
        tuple(internal(t) for t in s.repartition_source_topics),
        tuple(CopartitionGroup(tuple(g.source_topics), tuple(g.source_topic_regex),
                               tuple(g.repartition_source_topics))
              for g in s.copartition_groups))
        for s in wire.subtopologies or ()))
