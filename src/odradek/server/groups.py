"""The group coordinator's runtime: acts on what ``odradek.coordinator`` decides.

The pure ``GroupCoordinator`` returns ``Effects`` (records for ``__consumer_offsets``,
responses keyed by request tokens). This module owns the rest, as DESIGN.md's "decide,
then act" asks:

- a token per request and a future per token: a JoinGroup or SyncGroup that has to wait
  for a rebalance is an ``await`` on its future, completed by whichever later call (another
  member's request, a timer) produces its answer;
- appending: the records of an operation are appended to the group's partition of
  ``__consumer_offsets`` (``partition_for(group_id, offsets.topic.num.partitions)``) as one
  batch, and only once that append has succeeded are the responses released — a commit is
  acknowledged only once it is in the log, as in Kafka;
- one timer task that calls ``tick(now)`` at ``next_deadline()`` (sessions, rebalance and
  initial-delay timeouts, offset expiry), re-armed after every operation;
- ``__consumer_offsets`` itself: created at startup if missing (compacted, internal), and
  replayed from its log start into the coordinator before the broker listens, so
  FindCoordinator never has to answer COORDINATOR_NOT_AVAILABLE for a loading group.

The request plumbing, the timer task and the internal-topic handling are shared with the
transaction runtime (``server/coordinator_runtime.py``).

Everything runs on the broker's event loop; the coordinator is called by one caller at a
time, and appends are synchronous (as produce's are), so an operation and its append are
never interleaved with another operation.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from odradek.coordinator import OFFSETS_TOPIC, Effects, GroupCoordinator, partition_for
from odradek.coordinator.consumer_group import TopicInfo
from odradek.coordinator.offsets_topic import OffsetsTopicFormatError
from odradek.records import builder
from odradek.server.coordinator_runtime import (
    COORDINATOR_NOT_AVAILABLE,
    CoordinatorRuntime,
    CoordinatorUnavailable,
)

if TYPE_CHECKING:
    from odradek.server.broker import Broker
    from odradek.storage import Log

log = logging.getLogger(__name__)

INVALID_TOPIC_EXCEPTION = 17
# Topic-level settings of __consumer_offsets, as Kafka creates it.
OFFSETS_TOPIC_CONFIG = {"cleanup.policy": "compact", "compression.type": "producer"}


class InternalTopicAppendError(Exception):
    """Clients may read ``__consumer_offsets`` but never write it (Kafka's
    ReplicaManager: "Cannot append to internal topic")."""

    kafka_error = "INVALID_TOPIC_EXCEPTION"


class ClientViewOfInternalLog:
    """A partition log of an internal topic as clients see it: readable, not appendable.
    Everything but ``append`` is the log's own."""

    __slots__ = ("_log",)

    def __init__(self, lg: Log) -> None:
        self._log = lg

    def append(self, *args: Any, **kwargs: Any) -> Any:
        raise InternalTopicAppendError(f"Cannot append to internal topic {self._log.name}")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._log, name)


def topic_metadata(broker: Broker) -> dict[str, TopicInfo]:
    """What KIP-848 assignors may hand out: every topic but the internal ones."""
    assert broker.metadata is not None
    return {name: TopicInfo(t.topic_id, t.partitions)
            for name, t in broker.metadata.topics.items() if not t.internal}


class GroupRuntime(CoordinatorRuntime):
    """One ``GroupCoordinator`` and everything it needs to act; lives as long as the
    broker (``start`` before the listener, ``stop`` at ``Broker.stop``)."""

    topic = OFFSETS_TOPIC

    def __init__(self, broker: Broker) -> None:
        cfg = broker.config
        super().__init__(broker, cfg["offsets.topic.num.partitions"])
        self.coordinator = GroupCoordinator(
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
        )

    # --- lifecycle ---------------------------------------------------------------------

    def start(self) -> None:
        """Create ``__consumer_offsets`` if missing, replay it, start the timer task.
        Runs before the broker accepts connections."""
        self._create_topic(
            dict(OFFSETS_TOPIC_CONFIG,
                 **{"segment.bytes": str(self.broker.config["offsets.topic.segment.bytes"])}),
            "offsets.topic.num.partitions")
        records = self._replay()
        self._act(self.coordinator.finish_load(self.clock(), topic_metadata(self.broker)))
        log.info("loaded %d group(s) from %d record(s) of %s",
                 len(self.coordinator.groups), records, OFFSETS_TOPIC)
        self._start_timer("group-coordinator-timers")

    def _replay(self) -> int:
        """Feed every record of ``__consumer_offsets``, in log order, to ``load``."""
        count = 0
        for partition, batch in self._batches(range(self.num_partitions)):
            header = batch.header
            if header.is_control:
                # A transaction's marker: its pending offsets here commit or go.
                for record in batch.records:
                    kind = builder.control_type(record)
                    if kind in (builder.CONTROL_ABORT, builder.CONTROL_COMMIT):
                        self.coordinator.complete_txn(
                            header.producer_id, kind == builder.CONTROL_COMMIT,
                            self._in_partition(partition))
                continue
            for record in batch.records:
                if record.key is None:
                    continue
                try:
                    if header.is_transactional:
                        self.coordinator.load_txn_offset(header.producer_id, record.key,
                                                         record.value)
                    else:
                        self.coordinator.load(record.key, record.value)
                except OffsetsTopicFormatError as exc:
                    log.warning("%s-%d offset %d: skipping a record that does not decode: %s",
                                OFFSETS_TOPIC, partition, record.offset, exc)
                count += 1
        return count

    # --- operations ----------------------------------------------------------------------

    def _act(self, fx: Effects) -> None:
        """Append the records, then release the responses (errors instead, if the append
        failed), and re-arm the timer."""
        failure: CoordinatorUnavailable | None = None
        if fx.records:
            try:
                self._append(fx)
            except Exception as exc:
                log.exception("appending group state to %s failed", OFFSETS_TOPIC)
                failure = CoordinatorUnavailable(
                    COORDINATOR_NOT_AVAILABLE, f"group state could not be stored: {exc}")
        self._release(fx.responses, failure)
        self._rearm.set()

    def _append(self, fx: Effects) -> None:
        by_partition: dict[int, list[builder.Record]] = {}
        now = self.clock()
        for record in fx.records:
            batch = by_partition.setdefault(partition_for(record.group_id, self.num_partitions), [])
            batch.append(builder.Record(len(batch), now, record.key, record.value))
        for partition, records in by_partition.items():
            lg = self._log(partition)
            if fx.transactional is None:
                lg.append(builder.build_batch(records), leader_epoch=0)
            else:
                # TxnOffsetCommit: a batch of the producer's transaction, so that the
                # partition's producer state holds it open until the marker (and a
                # replay can tell pending offsets from committed ones). Written as the
                # coordinator, not the producer: no sequence number (Kafka's
                # AppendOrigin.COORDINATOR), so it goes in at the offsets given here.
                producer_id, producer_epoch = fx.transactional
                base = lg.log_end_offset
                records = [builder.Record(base + r.offset, r.timestamp, r.key, r.value)
                           for r in records]
                lg.append(builder.build_batch(
                    records, base_offset=base, producer_id=producer_id,
                    producer_epoch=producer_epoch, transactional=True,
                    partition_leader_epoch=0), assign_offsets=False)
            self.broker.purgatory.notify((OFFSETS_TOPIC, partition))

    def _in_partition(self, partition: int) -> Callable[[str], bool]:
        return lambda group_id: partition_for(group_id, self.num_partitions) == partition

    def txn_marker_written(self, partition: int, producer_id: int, commit: bool) -> None:
        """The transaction runtime wrote a COMMIT/ABORT marker of ``producer_id`` to
        ``__consumer_offsets`` partition ``partition``: its TxnOffsetCommits there now
        count, or are dropped."""
        self.coordinator.complete_txn(producer_id, commit, self._in_partition(partition))

    def topics_changed(self) -> None:
        """After CreateTopics/CreatePartitions/DeleteTopics: KIP-848 groups subscribed to
        a changed topic get a new target assignment at once (rather than at their next
        heartbeat, which would also notice)."""
        if not self.closed:
            self._act(self.coordinator.consumer_topics_changed(
                topic_metadata(self.broker), self.clock()))
