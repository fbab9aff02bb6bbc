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

Everything runs on the broker's event loop; the coordinator is called by one caller at a
time, and appends are synchronous (as produce's are), so an operation and its append are
never interleaved with another operation.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from odradek.coordinator import OFFSETS_TOPIC, Effects, GroupCoordinator, partition_for
from odradek.coordinator.consumer_group import TopicInfo
from odradek.coordinator.offsets_topic import OffsetsTopicFormatError
from odradek.records import builder

if TYPE_CHECKING:
    from odradek.server.broker import Broker
    from odradek.storage import Log

log = logging.getLogger(__name__)

# Bytes read per step when replaying a partition of __consumer_offsets (at least one
# batch is always returned, however large).
REPLAY_READ_BYTES = 1 << 20
# Kafka's errors for "ask again, maybe elsewhere": the coordinator is shutting down, or
# an append of its state failed.
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
INVALID_TOPIC_EXCEPTION = 17
# Topic-level settings of __consumer_offsets, as Kafka creates it.
OFFSETS_TOPIC_CONFIG = {"cleanup.policy": "compact", "compression.type": "producer"}


class CoordinatorUnavailable(Exception):
    """The coordinator cannot answer this request; ``error_code`` is the Kafka error the
    client gets (it rediscovers the coordinator and retries)."""

    def __init__(self, error_code: int, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code


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


class GroupRuntime:
    """One ``GroupCoordinator`` and everything it needs to act; lives as long as the
    broker (``start`` before the listener, ``stop`` at ``Broker.stop``)."""

    def __init__(self, broker: Broker) -> None:
        cfg = broker.config
        self.broker = broker
        self.clock: Callable[[], int] = broker.clock
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
        self.num_partitions: int = cfg["offsets.topic.num.partitions"]
        self.closed = False
        self._tokens = itertools.count(1)
        self._waiting: dict[int, asyncio.Future[Any]] = {}
        self._rearm = asyncio.Event()
        self._timer: asyncio.Task[None] | None = None

    # --- lifecycle ---------------------------------------------------------------------

    def start(self) -> None:
        """Create ``__consumer_offsets`` if missing, replay it, start the timer task.
        Runs before the broker accepts connections."""
        self._ensure_offsets_topic()
        records = self._replay()
        self._act(self.coordinator.finish_load(self.clock(), topic_metadata(self.broker)))
        log.info("loaded %d group(s) from %d record(s) of %s",
                 len(self.coordinator.groups), records, OFFSETS_TOPIC)
        self._timer = asyncio.get_running_loop().create_task(
            self._run_timers(), name="group-coordinator-timers")

    async def stop(self) -> None:
        """Stop the timers and answer every waiting JoinGroup/SyncGroup with
        NOT_COORDINATOR (as Kafka does when a coordinator resigns), so that no request
        holds the broker's shutdown up."""
        self.closed = True
        timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()
            await asyncio.gather(timer, return_exceptions=True)
        for future in self._waiting.values():
            if not future.done():
                future.set_exception(CoordinatorUnavailable(
                    NOT_COORDINATOR, "the broker is shutting down"))

    def _ensure_offsets_topic(self) -> None:
        broker = self.broker
        assert broker.metadata is not None and broker.logs is not None
        topic = broker.metadata.topics.get(OFFSETS_TOPIC)
        if topic is None:
            configs = dict(OFFSETS_TOPIC_CONFIG,
                           **{"segment.bytes": str(broker.config["offsets.topic.segment.bytes"])})
            topic = broker.metadata.create_topic(OFFSETS_TOPIC, self.num_partitions, configs,
                                                 internal=True)
            log.info("created %s with %d partitions", OFFSETS_TOPIC, topic.partitions)
        elif topic.partitions != self.num_partitions:
            # Groups live where partition_for puts them: the count is fixed at creation.
            log.warning("%s has %d partitions; offsets.topic.num.partitions=%d is ignored",
                        OFFSETS_TOPIC, topic.partitions, self.num_partitions)
        self.num_partitions = topic.partitions
        for partition in range(topic.partitions):
            broker.logs.get_or_create_log(OFFSETS_TOPIC, partition)

    def _offsets_log(self, partition: int) -> Log:
        assert self.broker.logs is not None
        lg = self.broker.logs.get_log(OFFSETS_TOPIC, partition)
        assert lg is not None, f"{OFFSETS_TOPIC}-{partition} has no log"
        return lg

    def _replay(self) -> int:
        """Feed every record of ``__consumer_offsets``, in log order, to ``load``."""
        count = 0
        for partition in range(self.num_partitions):
            lg = self._offsets_log(partition)
            offset = lg.log_start_offset
            while offset < lg.log_end_offset:
                region = lg.read(offset, REPLAY_READ_BYTES).region
                if region is None:
                    break
                for batch in builder.decode_batches(region.read()):
                    header = batch.header
                    offset = header.next_offset
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
                                self.coordinator.load_txn_offset(header.producer_id,
                                                                 record.key, record.value)
                            else:
                                self.coordinator.load(record.key, record.value)
                        except OffsetsTopicFormatError as exc:
                            log.warning("%s-%d offset %d: skipping a record that does not "
                                        "decode: %s", OFFSETS_TOPIC, partition, record.offset,
                                        exc)
                        count += 1
        return count

    # --- operations ----------------------------------------------------------------------

    async def call(self, operation: Callable[[int, int], Effects]) -> Any:
        """Run ``operation(token, now_ms)`` (a coordinator method bound to a request's
        arguments), act on its effects, and wait for the answer to ``token`` (at once,
        or when a later operation or timer produces it)."""
        if self.closed:
            raise CoordinatorUnavailable(NOT_COORDINATOR, "the broker is shutting down")
        token = next(self._tokens)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiting[token] = future
        try:
            self._act(operation(token, self.clock()))
            return await future
        finally:
            # A cancelled wait (the client went away, the broker stops) leaves the token
            # parked in the coordinator; its answer, when it comes, is dropped.
            del self._waiting[token]

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
        for token, response in fx.responses:
            future = self._waiting.get(token)
            if future is None or future.done():
                continue
            if failure is not None:
                future.set_exception(failure)
            else:
                future.set_result(response)
        self._rearm.set()

    def _append(self, fx: Effects) -> None:
        by_partition: dict[int, list[builder.Record]] = {}
        now = self.clock()
        for record in fx.records:
            batch = by_partition.setdefault(partition_for(record.group_id, self.num_partitions), [])
            batch.append(builder.Record(len(batch), now, record.key, record.value))
        for partition, records in by_partition.items():
            lg = self._offsets_log(partition)
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

    async def _run_timers(self) -> None:
        while True:
            self._rearm.clear()
            deadline = self.coordinator.next_deadline()
            now = self.clock()
            if deadline is not None and deadline <= now:
                try:
                    self._act(self.coordinator.tick(now))
                except Exception:
                    # A bug in a timer must not stop every later timer.
                    log.exception("group coordinator timer failed")
                    await asyncio.sleep(1)
                continue
            timeout = None if deadline is None else (deadline - now) / 1000
            try:
                async with asyncio.timeout(timeout):
                    await self._rearm.wait()
            except TimeoutError:
                pass
