"""The consumer-group coordinator (Kafka's classic GroupCoordinator) as a pure state
machine: groups, their rebalances, and their committed offsets.

Every operation takes plain arguments and the current time (``now_ms``) and returns
``Effects``: records for ``__consumer_offsets`` and responses keyed by the opaque token
each request came with. The runtime appends the records, then sends the responses
(Kafka answers a SyncGroup or OffsetCommit only once its record is in the log).
JoinGroup and SyncGroup requests that must wait are parked under their token and
answered by a later call: another member's join or sync, ``tick`` when a timer fires,
a leave. Nothing here reads a clock, starts a task or touches a socket or a file.

``GroupCoordinator`` is the facade the runtime calls (as Kafka's GroupCoordinatorShard
is). It delegates to two managers, as Kafka's group coordinator does:

- ``GroupManager`` (``group_manager.py``; with its mixins ``classic_rebalance.py`` and
  ``consumer_protocol.py``): the groups, classic and KIP-848, their membership,
  rebalances and sessions;
- ``OffsetManager`` (``offset_manager.py``): committed and transactional offsets, and
  their expiry;

and keeps here what spans both: the timers, DeleteGroups (the offsets go, then the
group), and the dispatch of replayed records.

Timers, as in Kafka's purgatories: a member's session (or, while it is new in a
rebalance, the 5-minute new-member join timeout), a KIP-394 pending member's expiry,
the rebalance timeout / ``group.initial.rebalance.delay.ms`` of a join phase, the
pending-sync timeout after a join phase, and the periodic offset expiry
(``offsets.retention.check.interval.ms``). ``next_deadline`` says when ``tick`` is due.
Both managers arm theirs in the one heap kept here, so that all fire in deadline order
(ties in the order they were armed), whichever manager they belong to.

State is rebuilt after a restart by ``load``-ing every ``__consumer_offsets`` record in
log order, then ``finish_load`` (fresh sessions for the loaded members, as Kafka's
onGroupLoaded gives them). ``load`` hands offset commits to the offset manager and
group records to the group manager.

Departures from Kafka for parked requests: see ``classic_rebalance.py``. Group state
changes as soon as the decision is made; the runtime is expected not to fail an append
(Kafka reverts on a failed append; here that is a broker failure).
"""

from __future__ import annotations

import heapq
import itertools
import uuid
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any

from kio.schema.errors import ErrorCode

from odradek.coordinator import offsets_topic as ot
from odradek.coordinator.classic_rebalance import NEW_MEMBER_JOIN_TIMEOUT_MS, Protocols
from odradek.coordinator.consumer_group import DEFAULT_ASSIGNORS, ConsumerGroup, TopicInfo
from odradek.coordinator.consumer_protocol import (
    GROUP_CONSUMER_HEARTBEAT_INTERVAL_MS,
    GROUP_CONSUMER_SESSION_TIMEOUT_MS,
)
from odradek.coordinator.consumer_records import InitializedTopics
from odradek.coordinator.group import CommittedOffset, Group
from odradek.coordinator.group_manager import AnyGroup, GroupManager
from odradek.coordinator.offset_manager import OFFSET_EXPIRY_TIMER, OffsetManager
from odradek.coordinator.results import (
    ConsumerGroupDescription,
    DeletedGroup,
    DeleteGroupsResult,
    Effects,
    GroupDescription,
    GroupOverview,
    MemberIdentity,
    OffsetCommitRequestPartition,
    OffsetFetchResult,
)
from odradek.coordinator.share_group import (
    DEFAULT_SHARE_SETTINGS,
    ShareGroup,
    ShareGroupDescription,
    ShareOffsetsCheck,
    ShareSettings,
)
from odradek.coordinator.streams_state import (
    DEFAULT_STREAMS_SETTINGS,
    StreamsGroup,
    StreamsGroupDescription,
    StreamsSettings,
)

__all__ = [
    "GROUP_INITIAL_REBALANCE_DELAY_MS",
    "GROUP_MAX_SESSION_TIMEOUT_MS",
    "GROUP_MAX_SIZE",
    "GROUP_MIN_SESSION_TIMEOUT_MS",
    "NEW_MEMBER_JOIN_TIMEOUT_MS",
    "OFFSETS_RETENTION_CHECK_INTERVAL_MS",
    "OFFSETS_RETENTION_MS",
    "OFFSET_METADATA_MAX_BYTES",
    "GroupCoordinator",
    "Protocols",
]

# Kafka's defaults for the broker settings this coordinator takes.
GROUP_INITIAL_REBALANCE_DELAY_MS = 3000  # group.initial.rebalance.delay.ms
GROUP_MIN_SESSION_TIMEOUT_MS = 6000  # group.min.session.timeout.ms
GROUP_MAX_SESSION_TIMEOUT_MS = 1_800_000  # group.max.session.timeout.ms
GROUP_MAX_SIZE = 2**31 - 1  # group.max.size
OFFSET_METADATA_MAX_BYTES = 4096  # offset.metadata.max.bytes
OFFSETS_RETENTION_MS = 7 * 24 * 60 * 60 * 1000  # offsets.retention.minutes = 10080
OFFSETS_RETENTION_CHECK_INTERVAL_MS = 600_000  # offsets.retention.check.interval.ms

# (deadline, seq, kind, group, member id): a classic group's timers carry the Group, the
# KIP-848 ones (CG_SESSION, CG_REBALANCE) the ConsumerGroup, the offset expiry None.
_Timer = tuple[int, int, str, AnyGroup | None, str]


def _new_uuid() -> str:
    return str(uuid.uuid4())


class GroupCoordinator:
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
        share_settings: ShareSettings = DEFAULT_SHARE_SETTINGS,
        streams_settings: StreamsSettings = DEFAULT_STREAMS_SETTINGS,
    ) -> None:
        # (deadline, seq, kind, group, member id). Entries are never removed when a
        # deadline moves; a popped entry counts only if it still matches the state.
        self._timers: list[_Timer] = []
        self._seq = itertools.count()
        self._group_manager = GroupManager(
            initial_rebalance_delay_ms=initial_rebalance_delay_ms,
            min_session_timeout_ms=min_session_timeout_ms,
            max_session_timeout_ms=max_session_timeout_ms,
            max_group_size=max_group_size,
            new_uuid=new_uuid,
            effects=self._effects,
            schedule=self._schedule,
            consumer_session_timeout_ms=consumer_session_timeout_ms,
            consumer_heartbeat_interval_ms=consumer_heartbeat_interval_ms,
            consumer_assignors=consumer_assignors,
            share_settings=share_settings,
            streams_settings=streams_settings,
        )
        self._offset_manager = OffsetManager(
            self._group_manager,
            offset_metadata_max_bytes=offset_metadata_max_bytes,
            offsets_retention_ms=offsets_retention_ms,
            offsets_retention_check_interval_ms=offsets_retention_check_interval_ms,
            effects=self._effects,
            schedule=self._schedule,
        )

    # --- state -----------------------------------------------------------------------

    @property
    def groups(self) -> dict[str, Group]:
        """Classic groups by id."""
        return self._group_manager.groups

    @property
    def consumer_groups(self) -> dict[str, ConsumerGroup]:
        """KIP-848 ``consumer`` groups by id."""
        return self._group_manager.consumer_groups

    @property
    def pending_txn_offsets(self) -> dict[str, dict[int, dict[tuple[str, int], CommittedOffset]]]:
        """Transactional offsets waiting for their marker: group id -> producer id ->
        offsets."""
        return self._offset_manager.pending_txn_offsets

    @property
    def group_configs(self) -> Callable[[str], Mapping[str, str]]:
        """A group's own configs (consumer.session.timeout.ms, consumer.heartbeat.interval.ms
        over the broker's); the runtime sets it."""
        return self._group_manager.group_configs

    @group_configs.setter
    def group_configs(self, configs: Callable[[str], Mapping[str, str]]) -> None:
        self._group_manager.group_configs = configs

    # --- classic groups (GroupManager) -----------------------------------------------

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
        """JoinGroup (``classic_rebalance.py``)."""
        return self._group_manager.join(
            group_id, member_id, group_instance_id, client_id, client_host,
            session_timeout_ms, rebalance_timeout_ms, protocol_type, protocols,
            require_known_member_id=require_known_member_id,
            supports_skip_assignment=supports_skip_assignment, reason=reason, token=token,
            now_ms=now_ms,
        )

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
        """SyncGroup (``classic_rebalance.py``)."""
        return self._group_manager.sync(
            group_id, member_id, generation_id, group_instance_id, protocol_type,
            protocol_name, assignments, token=token, now_ms=now_ms,
        )

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
        """Heartbeat (``group_manager.py``)."""
        return self._group_manager.heartbeat(
            group_id, member_id, generation_id, group_instance_id, token=token, now_ms=now_ms)

    def leave(
        self,
        group_id: str,
        members: Iterable[MemberIdentity | tuple[str, str | None]],
        *,
        token: Any,
        now_ms: int,
    ) -> Effects:
        """LeaveGroup (``group_manager.py``)."""
        return self._group_manager.leave(group_id, members, token=token, now_ms=now_ms)

    # --- KIP-848 consumer groups (GroupManager's ConsumerProtocol) -------------------

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
        """ConsumerGroupHeartbeat (``consumer_protocol.py``)."""
        return self._group_manager.consumer_heartbeat(
            group_id, member_id, member_epoch, instance_id=instance_id, rack_id=rack_id,
            rebalance_timeout_ms=rebalance_timeout_ms,
            subscribed_topic_names=subscribed_topic_names,
            subscribed_topic_regex=subscribed_topic_regex, server_assignor=server_assignor,
            owned=owned, client_id=client_id, client_host=client_host,
            member_id_from_client=member_id_from_client, topics=topics, token=token,
            now_ms=now_ms,
        )

    def consumer_topics_changed(self, topics: Mapping[str, TopicInfo], now_ms: int) -> Effects:
        """After CreateTopics/CreatePartitions/DeleteTopics (``consumer_protocol.py``,
        and share groups' assignments, ``share_group.py``)."""
        fx = self._group_manager.consumer_topics_changed(topics, now_ms)
        self._group_manager.share_topics_changed(topics, fx)
        return fx

    def consumer_group_describe(self, group_ids: Iterable[str]
                                ) -> list[ConsumerGroupDescription]:
        """ConsumerGroupDescribe (``consumer_protocol.py``)."""
        return self._group_manager.consumer_group_describe(group_ids)

    # --- share groups (GroupManager's ShareProtocol) ---------------------------------

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
        """ShareGroupHeartbeat (``share_group.py``)."""
        return self._group_manager.share_heartbeat(
            group_id, member_id, member_epoch, rack_id=rack_id,
            subscribed_topic_names=subscribed_topic_names, client_id=client_id,
            client_host=client_host, topics=topics, token=token, now_ms=now_ms)

    def share_group_describe(self, group_ids: Iterable[str]) -> list[ShareGroupDescription]:
        """ShareGroupDescribe (``share_group.py``)."""
        return self._group_manager.share_group_describe(group_ids)

    def share_alter_offsets(self, group_id: str, partitions: InitializedTopics, *,
                            token: Any, now_ms: int) -> Effects:
        """AlterShareGroupOffsets' group check (``share_group.py``)."""
        return self._group_manager.share_alter_offsets(group_id, partitions, token=token,
                                                       now_ms=now_ms)

    def share_delete_offsets(self, group_id: str, topic_ids: Iterable[uuid.UUID], *,
                             token: Any, now_ms: int) -> Effects:
        """DeleteShareGroupOffsets' group check (``share_group.py``)."""
        return self._group_manager.share_delete_offsets(group_id, topic_ids, token=token,
                                                        now_ms=now_ms)

    def share_state_partitions(self, group_id: str) -> ShareOffsetsCheck:
        """A share group's initialized share partitions (``share_group.py``)."""
        return self._group_manager.share_state_partitions(group_id)

    @property
    def share_groups(self) -> dict[str, ShareGroup]:
        """Share groups by id."""
        return self._group_manager.share_groups

    # --- streams groups (GroupManager's StreamsProtocol) -----------------------------

    def streams_heartbeat(self, request: Any, *, client_id: str = "", client_host: str = "",
                          topics: Mapping[str, int] | None = None, token: Any,
                          now_ms: int, api_version: int = 0) -> Effects:
        """StreamsGroupHeartbeat (``streams_group.py``)."""
        return self._group_manager.streams_heartbeat(
            request, client_id=client_id, client_host=client_host, topics=topics,
            token=token, now_ms=now_ms, api_version=api_version)

    def streams_group_describe(self, group_ids: Iterable[str],
                               include_description: bool = False
                               ) -> list[StreamsGroupDescription]:
        """StreamsGroupDescribe (``streams_group.py``)."""
        return self._group_manager.streams_group_describe(group_ids, include_description)

    def streams_topology_description_update(self, request: Any, *, token: Any,
                                            now_ms: int) -> Effects:
        """StreamsGroupTopologyDescriptionUpdate (KIP-1331, ``streams_group.py``)."""
        return self._group_manager.streams_topology_description_update(
            request, token=token, now_ms=now_ms)

    @property
    def streams_groups(self) -> dict[str, StreamsGroup]:
        """Streams groups by id."""
        return self._group_manager.streams_groups

    def session_timeout_ms(self, group_id: str) -> int:
        """The group's consumer.session.timeout.ms, else the broker's."""
        return self._group_manager.session_timeout_ms(group_id)

    def heartbeat_interval_ms(self, group_id: str) -> int:
        """The group's consumer.heartbeat.interval.ms, else the broker's."""
        return self._group_manager.heartbeat_interval_ms(group_id)

    # --- offsets (OffsetManager) -----------------------------------------------------

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
        """OffsetCommit (``offset_manager.py``)."""
        return self._offset_manager.commit_offsets(
            group_id, member_id, generation_id, group_instance_id, offsets,
            retention_ms=retention_ms, group_not_found=group_not_found, token=token,
            now_ms=now_ms,
        )

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
        group_id_not_found: bool = False,
        stale_member_epoch: bool = False,
    ) -> Effects:
        """TxnOffsetCommit (``offset_manager.py``); the two flags: errors v6+ can say."""
        return self._offset_manager.commit_txn_offsets(
            group_id, producer_id, producer_epoch, member_id, generation_id,
            group_instance_id, offsets, token=token, now_ms=now_ms,
            group_id_not_found=group_id_not_found, stale_member_epoch=stale_member_epoch,
        )

    def complete_txn(self, producer_id: int, commit: bool,
                     in_partition: Callable[[str], bool]) -> None:
        """A transaction marker was written (``offset_manager.py``)."""
        self._offset_manager.complete_txn(producer_id, commit, in_partition)

    def has_pending_txn_offsets(self, group_id: str, topic: str, partition: int) -> bool:
        """Whether an open transaction has an offset for this partition of the group."""
        return self._offset_manager.has_pending_txn_offsets(group_id, topic, partition)

    def fetch_offsets(
        self,
        group_id: str,
        partitions: Iterable[tuple[str, int]] | None = None,
        *,
        member_id: str | None = None,
        member_epoch: int = -1,
        require_stable: bool = False,
    ) -> OffsetFetchResult:
        """OffsetFetch (``offset_manager.py``)."""
        return self._offset_manager.fetch_offsets(
            group_id, partitions, member_id=member_id, member_epoch=member_epoch,
            require_stable=require_stable,
        )

    def delete_offsets(
        self,
        group_id: str,
        partitions: Iterable[tuple[str, int]],
        *,
        token: Any,
        now_ms: int,
    ) -> Effects:
        """OffsetDelete (``offset_manager.py``)."""
        return self._offset_manager.delete_offsets(
            group_id, partitions, token=token, now_ms=now_ms)

    def topics_deleted(self, topics: Collection[str], now_ms: int) -> Effects:
        """Deleted topics' offsets go from every group (``offset_manager.py``), and their
        share partitions' state from every share group (``share_group.py``)."""
        fx = self._offset_manager.remove_topics(topics, now_ms)
        self._group_manager.share_topics_deleted(topics, fx)
        return fx

    def expire_offsets(self, now_ms: int) -> Effects:
        """offsets.retention.minutes (``offset_manager.py``); ``tick`` runs it every
        offsets.retention.check.interval.ms."""
        return self._offset_manager.expire_offsets(now_ms)

    # --- admin -----------------------------------------------------------------------

    def delete_groups(self, group_ids: Iterable[str], *, token: Any, now_ms: int) -> Effects:
        """DeleteGroups: only a group without members can go; its offsets go with it."""
        fx = self._effects(now_ms)
        results = []
        for group_id in group_ids:
            error = self._group_manager.prepare_delete(group_id, now_ms)
            if error == ErrorCode.none and group_id in self.share_groups:
                # Its share partitions' state goes too (the broker's, server/share/).
                self._group_manager.share_group_deleted(group_id, fx)
            elif error == ErrorCode.none:
                # Its offsets' tombstones, then (as they leave it empty) the group's own.
                self._offset_manager.delete_all_offsets(group_id, now_ms, fx)
            results.append(DeletedGroup(group_id, error))
        fx.respond(token, DeleteGroupsResult(results))
        return fx

    def list_groups(self, states_filter: Iterable[str] | None = None) -> list[GroupOverview]:
        """ListGroups (``group_manager.py``)."""
        return self._group_manager.list_groups(states_filter)

    def describe_groups(
        self, group_ids: Iterable[str], *, not_found_error: bool = False
    ) -> list[GroupDescription]:
        """DescribeGroups (``group_manager.py``)."""
        return self._group_manager.describe_groups(group_ids, not_found_error=not_found_error)

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
            if kind == OFFSET_EXPIRY_TIMER:
                self._offset_manager.on_expiry_timer(at, fx)
                continue
            assert group is not None
            self._group_manager.on_timer(kind, group, member_id, at, fx)
        return fx

    def _is_current(self, entry: _Timer) -> bool:
        deadline, _, kind, group, member_id = entry
        if kind == OFFSET_EXPIRY_TIMER:
            return self._offset_manager.expiry_is_current(deadline)
        assert group is not None
        return self._group_manager.timer_is_current(kind, group, member_id, deadline)

    def _schedule(self, deadline: int, kind: str,
                  group: AnyGroup | None, member_id: str = ""
                  ) -> None:
        heapq.heappush(self._timers, (deadline, next(self._seq), kind, group, member_id))

    def _effects(self, now_ms: int) -> Effects:
        # Every operation of either manager starts here. The first call tells us the time:
        # the periodic offset expiry starts from it.
        self._offset_manager.schedule_expiry(now_ms)
        return Effects()

    # --- persistence -----------------------------------------------------------------

    def load(self, key: bytes, value: bytes | None) -> None:
        """Replay one ``__consumer_offsets`` record (in log order) into the state.
        Call ``finish_load`` once the partition has been read."""
        self._replay(ot.decode_key(key), value)

    def load_txn_offset(self, producer_id: int, key: bytes, value: bytes | None) -> None:
        """Replay a record of a transactional batch of ``__consumer_offsets`` (only
        TxnOffsetCommit writes those): an offset commit is pending until the producer's
        marker (``complete_txn``) is replayed."""
        k = ot.decode_key(key)
        if not isinstance(k, ot.OffsetCommitKey) or value is None:
            self._replay(k, value)
            return
        self._offset_manager.load_txn_offset(producer_id, k, value)

    def _replay(
        self,
        k: ot.OffsetCommitKey | ot.GroupMetadataKey | ot.ConsumerGroupRecordKey | None,
        value: bytes | None,
    ) -> None:
        if isinstance(k, ot.OffsetCommitKey):
            self._offset_manager.load(k, value)
        elif k is not None:  # None: a key version of share or streams groups, not ours
            self._group_manager.load(k, value)

    def finish_load(self, now_ms: int, topics: Any = None) -> Effects:
        """After replay: loaded members get fresh sessions (``group_manager.py``);
        ``topics`` (name -> TopicInfo) is the broker's topic metadata."""
        return self._group_manager.finish_load(now_ms, topics)
