"""The group coordinator's runtime: acts on what ``odradek.coordinator`` decides.

The pure ``GroupCoordinator`` returns ``Effects`` (records for ``__consumer_offsets``,
responses keyed by request tokens). This module owns the rest, as DESIGN.md's "decide,
then act" asks:

- one ``GroupCoordinator`` per ``__consumer_offsets`` partition coordinated here (Kafka's
  group coordinator is the leader of ``partition_for(group_id,
  offsets.topic.num.partitions)``), loaded from that partition's log alone: its groups,
  their offsets, and the TxnOffsetCommits still pending on a marker. Which partitions
  those are is the topology's to say (``start_replicas``): a single node coordinates
  every partition from the start (``elect_all``); in a cluster the replica manager
  calls ``elect``/``resign`` (``server/coordinators/coordinator_runtime.py``);
- a token per request and a future per token: a JoinGroup or SyncGroup that has to wait
  for a rebalance is an ``await`` on its future, completed by whichever later call (another
  member's request, a timer) produces its answer, or NOT_COORDINATOR if its partition
  resigns meanwhile;
- appending: the records of an operation are appended to its group's partition as one
  batch, and only once that append has succeeded (and, in a cluster, is replicated) are
  the responses released — a commit is acknowledged only once it is in the log, as in
  Kafka;
- transaction markers in ``__consumer_offsets`` (``txn_marker_written``): written by this
  broker's transaction runtime on a single node, or, in a cluster, by whichever broker
  coordinates the transaction (a WriteTxnMarkers request to the partition's leader): the
  transaction's TxnOffsetCommits in that partition count, or go;
- one timer task for every loaded coordinator (sessions, rebalance and initial-delay
  timeouts, offset expiry);
- ``__consumer_offsets`` itself on a single node: created at startup if missing
  (compacted, internal), and replayed from its log start into the coordinators before
  the broker listens, so FindCoordinator never has to answer COORDINATOR_NOT_AVAILABLE
  for a loading group.

The request plumbing, the coordinators per partition, the timer task and the
internal-topic handling are shared with the transaction runtime
(``server/coordinators/coordinator_runtime.py``).

Everything runs on the broker's event loop; a coordinator is called by one caller at a
time, and appends are synchronous (as produce's are), so an operation and its append are
never interleaved with another operation.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from odradek.coordinator import OFFSETS_TOPIC, Effects, GroupCoordinator, partition_for
from odradek.coordinator.consumer_group import TopicInfo
from odradek.coordinator.offsets_topic import OffsetsTopicFormatError
from odradek.coordinator.share_group import ShareSettings
from odradek.coordinator.streams_state import StreamsSettings
from odradek.records import builder
from odradek.server.coordinators.coordinator_runtime import (
    INTERNAL_TOPIC_CONFIG,
    CoordinatorRuntime,
    CoordinatorUnavailable,
)
from odradek.server.errors import InternalTopicAppendError

if TYPE_CHECKING:
    from odradek.server.broker import Broker
    from odradek.storage import Log

log = logging.getLogger(__name__)



class ClientViewOfInternalLog:
    """A partition log of an internal topic as clients see it: readable, not appendable.
    Everything but ``append`` is the log's own."""

    __slots__ = ("_log",)

    def __init__(self, lg: Log) -> None:
        self._log = lg

    def append(self, *args: Any, **kwargs: Any) -> Any:
        raise InternalTopicAppendError(f"Cannot append to internal topic {self._log.name}")

    # Kafka refuses a write to an internal topic before validating its records
    # (ReplicaManager before LogValidator): the compacted topics' key check refuses too.
    check_keys = append

    def __getattr__(self, name: str) -> Any:
        return getattr(self._log, name)


def topic_metadata(broker: Broker) -> dict[str, TopicInfo]:
    """What KIP-848 assignors may hand out: every topic but the internal ones."""
    assert broker.metadata is not None
    return {name: TopicInfo(t.topic_id, t.partitions)
            for name, t in broker.metadata.topics.items() if not t.internal}


class GroupRuntime(CoordinatorRuntime):
    """The ``GroupCoordinator`` of every ``__consumer_offsets`` partition coordinated
    here and everything they need to act; lives as long as the broker (``start`` before
    the listener, ``stop`` at ``Broker.stop``)."""

    topic = OFFSETS_TOPIC

    def __init__(self, broker: Broker) -> None:
        super().__init__(broker, broker.config["offsets.topic.num.partitions"])

    def partition_for(self, key: str) -> int:
        """The ``__consumer_offsets`` partition of group ``key``."""
        return partition_for(key, self.partition_count())

    def _new_coordinator(self, partition: int, leader_epoch: int) -> GroupCoordinator:
        cfg = self.broker.config
        coordinator = GroupCoordinator(
            initial_rebalance_delay_ms=cfg["group.initial.rebalance.delay.ms"],
            min_session_timeout_ms=cfg["group.min.session.timeout.ms"],
            max_session_timeout_ms=cfg["group.max.session.timeout.ms"],
            max_group_size=cfg["group.max.size"],
            offset_metadata_max_bytes=cfg["offset.metadata.max.bytes"],
            offsets_retention_ms=cfg["offsets.retention.minutes"] * 60_000,
            offsets_retention_check_interval_ms=cfg["offsets.retention.check.interval.ms"],
            consumer_session_timeout_ms=cfg["group.consumer.session.timeout.ms"],
            consumer_heartbeat_interval_ms=cfg["group.consumer.heartbeat.interval.ms"],
            consumer_assignors=cfg["group.consumer.assignors"].split(","),
            share_settings=ShareSettings(
                session_timeout_ms=cfg["group.share.session.timeout.ms"],
                heartbeat_interval_ms=cfg["group.share.heartbeat.interval.ms"]),
            streams_settings=StreamsSettings(
                session_timeout_ms=cfg["group.streams.session.timeout.ms"],
                heartbeat_interval_ms=cfg["group.streams.heartbeat.interval.ms"],
                num_standby_replicas=cfg["group.streams.num.standby.replicas"],
                max_size=cfg["group.streams.max.size"],
                topology_description_plugin=cfg[
                    "group.streams.topology.description.plugin.class"]),
        )
        store = self.broker.group_configs
        if store is not None:  # a group's own session timeout and heartbeat interval
            coordinator.group_configs = store.overrides
        return coordinator

    @staticmethod
    def _size(coordinator: GroupCoordinator) -> int:
        return (len(coordinator.groups) + len(coordinator.consumer_groups)
                + len(coordinator.share_groups) + len(coordinator.streams_groups))

    # --- lifecycle ---------------------------------------------------------------------

    def start(self) -> None:
        """Start the timer task. Which partitions are coordinated here is the
        topology's to say, at ``start_replicas``: a single node's are all of them
        (``elect_all``), a cluster's those its replica manager elects."""
        self._start_timer("group-coordinator-timers")

    def elect_all(self) -> None:
        """A single node leads every partition (``SingleNode.start_replicas``): create
        ``__consumer_offsets`` if missing and coordinate every partition (each
        replayed), before the broker accepts connections. (In a cluster the topic is
        created through ZooKeeper at the first FindCoordinator that needs it.)"""
        self._create_topic(
            dict(INTERNAL_TOPIC_CONFIG, **{"segment.bytes": str(
                self.broker.config["offsets.topic.segment.bytes"])}),
            "offsets.topic.num.partitions")
        groups, records = self._elect_all()
        log.info("loaded %d group(s) from %d record(s) of %s", groups, records,
                 OFFSETS_TOPIC)

    def elect(self, partition: int) -> None:
        """Become the group coordinator of ``__consumer_offsets`` partition
        ``partition`` (its groups and offsets are loaded from its log). In a cluster the
        replica manager calls this once this broker leads the partition (and its log
        is open here)."""
        super().elect(partition)

    def _replay(self, partition: int, coordinator: GroupCoordinator) -> int:
        """Feed every record of the partition, in log order, to ``load``."""
        count = 0
        in_partition = self._in_partition(partition)
        for batch in self._batches(partition):
            header = batch.header
            if header.is_control:
                # A transaction's marker: its pending offsets here commit or go.
                for record in batch.records:
                    kind = builder.control_type(record)
                    if kind in (builder.CONTROL_ABORT, builder.CONTROL_COMMIT):
                        coordinator.complete_txn(
                            header.producer_id, kind == builder.CONTROL_COMMIT, in_partition)
                continue
            for record in batch.records:
                if record.key is None:
                    continue
                try:
                    if header.is_transactional:
                        coordinator.load_txn_offset(header.producer_id, record.key,
                                                    record.value)
                    else:
                        coordinator.load(record.key, record.value)
                except OffsetsTopicFormatError as exc:
                    log.warning("%s-%d offset %d: skipping a record that does not decode: %s",
                                OFFSETS_TOPIC, partition, record.offset, exc)
                count += 1
        return count

    def _finish_load(self, coordinator: GroupCoordinator) -> Effects:
        return coordinator.finish_load(self.clock(), topic_metadata(self.broker))

    # --- operations ----------------------------------------------------------------------

    def _act(self, partition: int, fx: Effects) -> None:
        """Append the records, then release the responses (errors instead, if the append
        failed; in a cluster, once the records are replicated), and re-arm the timer."""
        failure: CoordinatorUnavailable | None = None
        end: int | None = None
        if fx.records:
            try:
                end = self._append(partition, fx)
            except Exception as exc:
                log.exception("appending group state to %s-%d failed", OFFSETS_TOPIC,
                              partition)
                failure = CoordinatorUnavailable(
                    ErrorCode.coordinator_not_available, f"group state could not be stored: {exc}")
        # Share groups' members that left release what they hold; deleted share groups'
        # state goes (server/share/).
        for group_id, member_id in fx.share_members_left:
            self.broker.share_partitions.release_member(group_id, member_id)
        for group_id in fx.share_groups_deleted:
            self.broker.share_partitions.drop_group(group_id)
        if fx.share_states_deleted and self.broker.share_state is not None:
            for key in fx.share_states_deleted:
                self.broker.share_partitions.forget(key)
            self._spawn(partition, self.broker.share_state.delete(fx.share_states_deleted),
                        f"{OFFSETS_TOPIC}-{partition}-share-state-delete")
        # Answers that need no append of their own go at once, as Kafka's heartbeats and
        # reads never wait for the log.
        replication = None if end is None else self._replicated(partition, end)
        if replication is None:
            self._release(fx.responses, failure)
        else:
            self._release_when_replicated(partition, replication, fx.responses,
                                          "group state")
        self._rearm.set()

    def _append(self, partition: int, fx: Effects) -> int:
        """One batch of the effects' records in ``partition``; the offset after it."""
        # Every record of a coordinator's effects is about one of its groups (handlers
        # route by group id, batch APIs split by partition).
        assert all(self.partition_for(r.group_id) == partition for r in fx.records), (
            "records for a group of another partition")
        if fx.transactional is None:
            return self._append_records(partition, fx.records)
        # TxnOffsetCommit: a batch of the producer's transaction, so that the partition's
        # producer state holds it open until the marker (and a replay can tell pending
        # offsets from committed ones). Written as the coordinator, not the producer: no
        # sequence number (Kafka's AppendOrigin.COORDINATOR), so it goes in at the
        # offsets given here.
        producer_id, producer_epoch = fx.transactional
        lg = self._log(partition)
        base = lg.log_end_offset
        now = self.clock()
        records = [builder.Record(base + i, now, r.key, r.value)
                   for i, r in enumerate(fx.records)]
        info = lg.append(builder.build_batch(
            records, base_offset=base, producer_id=producer_id,
            producer_epoch=producer_epoch, transactional=True,
            partition_leader_epoch=self._leader_epoch(partition)), assign_offsets=False)
        self.broker.purgatory.notify((OFFSETS_TOPIC, partition))
        return info.last_offset + 1

    def _in_partition(self, partition: int) -> Callable[[str], bool]:
        return lambda group_id: self.partition_for(group_id) == partition

    def txn_marker_written(self, partition: int, producer_id: int, commit: bool) -> None:
        """A COMMIT (``commit``) or ABORT marker of ``producer_id`` was written to
        ``__consumer_offsets`` partition ``partition``: its TxnOffsetCommits there now
        count, or are dropped. Called by this broker's transaction runtime when it writes
        the marker itself (a single node), and in a cluster by the WriteTxnMarkers
        handler of the partition's leader, whichever broker coordinates the
        transaction. Nothing is appended (the marker is the record); a partition not
        coordinated here is left alone: its coordinator, when elected, replays the
        marker from the log."""
        coordinator = self.coordinators.get(partition)
        if coordinator is not None:
            coordinator.complete_txn(producer_id, commit, self._in_partition(partition))

    def topics_deleted(self, topics: Collection[str]) -> None:
        """Topics were deleted (DeleteTopics here, or in a cluster any broker's, as the
        metadata shows it): every group coordinated here loses its offsets of them."""
        if self.closed:
            return
        for partition, coordinator in list(self.coordinators.items()):
            self._act(partition, coordinator.topics_deleted(topics, self.clock()))

    def topics_changed(self) -> None:
        """After CreateTopics/CreatePartitions/DeleteTopics: KIP-848 groups subscribed to
        a changed topic get a new target assignment at once (rather than at their next
        heartbeat, which would also notice), in every partition coordinated here."""
        if self.closed:
            return
        topics = topic_metadata(self.broker)
        for partition, coordinator in list(self.coordinators.items()):
            self._act(partition, coordinator.consumer_topics_changed(topics, self.clock()))
