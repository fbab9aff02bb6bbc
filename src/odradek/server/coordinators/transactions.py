"""The transaction coordinator's runtime: acts on what ``odradek.coordinator.transactions``
decides (KIP-98).

The pure ``TransactionCoordinator`` returns ``TxnEffects``: records for
``__transaction_state``, responses keyed by request tokens, and ``TxnMarkers`` to write.
This module owns the rest, as ``server/coordinators/groups.py`` does for groups:

- one ``TransactionCoordinator`` per ``__transaction_state`` partition coordinated here
  (Kafka's transaction coordinator of an id is the leader of ``partition_for(
  transactional_id, transaction.state.log.num.partitions)``), loaded from that
  partition's log alone; they share the broker's producer id allocator. Which
  partitions those are is the topology's to say (``start_replicas``): a single node
  coordinates every partition from the start (``elect_all``); in a cluster the replica
  manager calls ``elect``/``resign`` (``server/coordinators/coordinator_runtime.py``);
- a token per request and a future per token: an InitProducerId that fences an open
  transaction waits (on its future) for the abort it caused to complete;
- appending: an operation's records go to the transactional id's partition as one
  batch, and only once that append has succeeded (and, in a cluster, is replicated) are
  the responses released;
- markers: each ``TxnMarkers`` becomes a COMMIT or ABORT control batch in every
  partition of the transaction, and then ``markers_written`` completes the transaction.
  On a single node they are local ``Log.append_marker`` calls — what Kafka's
  TransactionMarkerChannelManager sends as WriteTxnMarkers — made in the same step as
  the decision (before the event loop sends the EndTxn answer), so a committed
  transaction is readable once EndTxn is answered; a marker in ``__consumer_offsets``
  also tells the group runtime, so the transaction's TxnOffsetCommits count or go. In a
  cluster they are sent (WriteTxnMarkers to each partition's leader), on a task of the
  runtime, once the record that decided them is replicated; EndTxn is then answered as
  Kafka answers it, once that record is. Which of the two is the topology's
  ``write_txn_markers``;
- one timer task that calls ``tick(now)`` at ``next_deadline()`` of every loaded
  coordinator (timed-out transactions are aborted, expired transactional ids removed);
- ``__transaction_state`` itself on a single node: replayed before the broker listens,
  and the markers of transactions a previous run left prepared (PrepareCommit/
  PrepareAbort) written again then (as at every election). As in Kafka it is created
  (compacted, internal) on first use — a FindCoordinator for a transactional id, or an
  InitProducerId with one — so a broker whose clients never use transactions has no
  such topic; until then a single node's coordinators are empty.

Everything runs on the broker's event loop, one operation at a time; appends are
synchronous, so an operation, its append and (on a single node) its markers never
interleave with another.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from odradek.coordinator import OFFSETS_TOPIC
from odradek.coordinator import transaction_log as tl
from odradek.coordinator.transaction_errors import produce_verification_error
from odradek.coordinator.transaction_log import (
    TRANSACTION_STATE_TOPIC,
    TransactionLogFormatError,
)
from odradek.coordinator.transaction_log import partition_for as txn_partition_for
from odradek.coordinator.transactions import (
    TV_2,
    TopicPartition,
    TransactionCoordinator,
    TxnEffects,
    TxnMarkers,
    TxnState,
)
from odradek.server.coordinators.coordinator_runtime import (
    INTERNAL_TOPIC_CONFIG,
    CoordinatorRuntime,
    CoordinatorUnavailable,
    Replication,
    replication_failure,
)
from odradek.server.errors import error_code
from odradek.server.topology import SINGLE_NODE_LEADER_EPOCH

if TYPE_CHECKING:
    from odradek.server.broker import Broker

log = logging.getLogger(__name__)

# A cluster: how long to wait before asking again whether a Prepare record is
# replicated, or before sending markers again after a failure.
MARKER_RETRY_BACKOFF_S = 0.1


class TxnRuntime(CoordinatorRuntime):
    """The ``TransactionCoordinator`` of every ``__transaction_state`` partition
    coordinated here and everything they need to act; lives as long as the broker
    (``start`` after the group runtime and before the listener, ``stop`` at
    ``Broker.stop``)."""

    topic = TRANSACTION_STATE_TOPIC

    def __init__(self, broker: Broker) -> None:
        cfg = broker.config
        assert broker.metadata is not None and broker.groups is not None
        super().__init__(broker, cfg["transaction.state.log.num.partitions"])
        self.verify_partitions: bool = cfg["transaction.partition.verification.enable"]
        self._topic_ready = False

    def partition_for(self, key: str) -> int:
        """The ``__transaction_state`` partition of transactional id ``key``."""
        return txn_partition_for(key, self.partition_count())

    def _new_coordinator(self, partition: int, leader_epoch: int) -> TransactionCoordinator:
        cfg = self.broker.config
        groups = self.broker.groups
        assert groups is not None
        return TransactionCoordinator(
            allocate_producer_id=self._allocate_producer_id,
            partition_for_group=groups.partition_for,
            max_timeout_ms=cfg["transaction.max.timeout.ms"],
            transactional_id_expiration_ms=cfg["transactional.id.expiration.ms"],
            abort_timed_out_interval_ms=cfg[
                "transaction.abort.timed.out.transaction.cleanup.interval.ms"],
            remove_expired_interval_ms=cfg[
                "transaction.remove.expired.transaction.cleanup.interval.ms"],
            # Kafka's coordinator epoch is the leader epoch of the partition's election
            # (0 on a single node): markers of an older coordinator are fenced by it.
            coordinator_epoch=leader_epoch,
        )

    def _allocate_producer_id(self) -> int:
        """A fresh producer id, from the broker's allocator: every coordinator here (and
        InitProducerId without a transactional id) draws from it. An allocator that
        cannot hand one out now (a cluster's next block not reserved yet) says why in
        ``kafka_error``; the request is answered that error (the client retries). The
        coordinator allocates before it changes the id's state (one exception: an
        InitProducerId parked behind the abort it fenced, answered by
        ``markers_written``, with the epoch exhausted; a single node's allocator never
        fails)."""
        assert self.broker.metadata is not None
        allocate = self.broker.metadata.next_producer_id
        # A cluster's allocator is set by ClusterNode.start, before the broker serves.
        assert allocate is not None
        try:
            return allocate()
        except Exception as exc:
            if getattr(exc, "kafka_error", None) is None:
                raise
            raise CoordinatorUnavailable(int(error_code(exc)), str(exc)) from exc

    @staticmethod
    def _size(coordinator: TransactionCoordinator) -> int:
        return len(coordinator.transactions)

    # --- lifecycle ---------------------------------------------------------------------

    def start(self) -> None:
        """Start the timer task. Which partitions are coordinated here is the
        topology's to say, at ``start_replicas``: a single node's are all of them
        (``elect_all``), a cluster's those its replica manager elects."""
        self._start_timer("transaction-coordinator-timers")

    def elect_all(self) -> None:
        """A single node leads every partition (``SingleNode.start_replicas``): replay
        ``__transaction_state`` if it exists and coordinate every partition (writing the
        markers of prepared transactions), before the broker accepts connections and
        after the group runtime has loaded, so that markers to ``__consumer_offsets``
        find their pending offsets."""
        assert self.broker.metadata is not None
        if TRANSACTION_STATE_TOPIC in self.broker.metadata.topics:
            self.ensure_topic()
        ids, records = self._elect_all()
        log.info("loaded %d transactional id(s) from %d record(s) of %s", ids, records,
                 TRANSACTION_STATE_TOPIC)

    def elect(self, partition: int) -> None:
        """Become the transaction coordinator of ``__transaction_state`` partition
        ``partition``: its transactional ids are loaded from its log, and the markers of
        its prepared transactions are written again. In a cluster the replica manager
        calls this once this broker leads the partition (and its log is open here)."""
        super().elect(partition)

    def ensure_topic(self) -> None:
        """Single node: create ``__transaction_state`` if it does not exist yet (and open
        its logs): at ``elect_all`` if it exists, else at its first use
        (``SingleNode.open_internal_topic``). In a cluster it is created through
        ZooKeeper at the first FindCoordinator that needs it, and the replica manager
        opens its logs; nothing calls this there."""
        if self._topic_ready:
            return
        self._create_topic(
            dict(INTERNAL_TOPIC_CONFIG, **{"segment.bytes": str(
                self.broker.config["transaction.state.log.segment.bytes"])}),
            "transaction.state.log.num.partitions")
        self._topic_ready = True

    def _replay(self, partition: int, coordinator: TransactionCoordinator,
                only: set[str] | None = None) -> int:
        """Feed every record of the partition, in log order, to ``load`` (only those of
        the transactional ids ``only``, when given)."""
        count = 0
        for record in self._keyed_records(partition):
            assert record.key is not None
            if only is not None and tl.decode_key(record.key) not in only:
                continue
            try:
                coordinator.load(record.key, record.value)
            except TransactionLogFormatError as exc:
                log.warning("%s-%d offset %d: skipping a record that does not decode: %s",
                            TRANSACTION_STATE_TOPIC, partition, record.offset, exc)
            count += 1
        return count

    def _finish_load(self, coordinator: TransactionCoordinator) -> TxnEffects:
        return coordinator.finish_load(self.clock())

    def _revert(self, partition: int, transactional_ids: set[str]) -> None:
        """After a failed append: these ids go back to what the log holds (Kafka reverts
        a transaction's metadata when its append fails), so that a client's retry is
        decided again from the stored state rather than from one never stored."""
        coordinator = self.coordinators.get(partition)
        if coordinator is None:
            return
        for tid in transactional_ids:
            coordinator.transactions.pop(tid, None)
        try:
            self._replay(partition, coordinator, only=transactional_ids)
        except Exception:
            log.exception("could not reread %s-%d after a failed append",
                          TRANSACTION_STATE_TOPIC, partition)

    # --- operations --------------------------------------------------------------------

    def _act(self, partition: int, fx: TxnEffects) -> None:
        """Append the records, release the responses (errors instead if the append
        failed), write the markers (each completed set acts in turn), re-arm the timer.
        In a cluster the responses and markers wait for the records' replication."""
        failure: CoordinatorUnavailable | None = None
        end: int | None = None
        if fx.records:
            try:
                end = self._append(partition, fx)
            except Exception as exc:
                log.exception("appending transaction state to %s-%d failed",
                              TRANSACTION_STATE_TOPIC, partition)
                failure = CoordinatorUnavailable(
                    ErrorCode.coordinator_not_available,
                    f"transaction state could not be stored: {exc}")
                self._revert(partition, {r.transactional_id for r in fx.records})
        replication = None
        if failure is None and (end is not None or fx.responses or fx.markers):
            replication = self._replicated(partition, end)
        if replication is not None:
            self._spawn(partition, self._after_replication(
                partition, self.coordinators.get(partition), replication,
                list(fx.responses), list(fx.markers)),
                f"{TRANSACTION_STATE_TOPIC}-{partition}-replication")
        else:
            self._release(fx.responses, failure)
            if failure is None:
                for markers in fx.markers:
                    self._send_markers(partition, markers)
        self._rearm.set()

    def _append(self, partition: int, fx: TxnEffects) -> int:
        """One batch of the effects' records in ``partition``; the offset after it."""
        # Every record of a coordinator's effects is about one of its ids.
        assert all(self.partition_for(r.transactional_id) == partition for r in fx.records), (
            "records for a transactional id of another partition")
        return self._append_records(partition, fx.records)

    async def _after_replication(self, partition: int, coordinator: TransactionCoordinator | None,
                                 replication: Replication, responses: list[tuple[int, Any]],
                                 markers: list[TxnMarkers]) -> None:
        """A cluster: once the records are replicated, answer and send the markers."""
        code = await self._replication_code(partition, replication)
        self._release(responses, replication_failure(code, "transaction state"))
        if not markers:
            return
        # The markers go out only once the Prepare record that decided them is committed:
        # a new leader of the partition without it would not know that the transaction
        # ends, and might end it the other way. The record is in this leader's log, so
        # it is waited for again (the client, told COORDINATOR_NOT_AVAILABLE, retries
        # EndTxn and hears CONCURRENT_TRANSACTIONS meanwhile) until it is replicated or
        # the partition moves (then the next coordinator sends the markers at its load).
        while code != 0:
            if code == ErrorCode.not_leader_or_follower:
                return
            await asyncio.sleep(MARKER_RETRY_BACKOFF_S)
            if self.coordinators.get(partition) is not coordinator:
                return
            again = self._replicated(partition, replication[1])
            code = 0 if again is None else await self._replication_code(partition, again)
        if self.coordinators.get(partition) is not coordinator:
            return
        for m in markers:
            self._send_markers(partition, m)

    def _send_markers(self, partition: int, markers: TxnMarkers) -> None:
        """Write a transaction's markers (the topology's ``write_txn_markers``: here and
        now, or a send to await), then complete it (``markers_written``)."""
        coordinator = self.coordinators.get(partition)
        if coordinator is None:
            return
        send = self.broker.topology.write_txn_markers(markers)
        if send is not None:
            self._spawn(partition, self._send_markers_then_complete(
                partition, coordinator, markers, send),
                f"{TRANSACTION_STATE_TOPIC}-{partition}-markers-{markers.producer_id}")
            return
        self._act(partition, coordinator.markers_written(
            markers.transactional_id, markers.producer_id, markers.producer_epoch,
            now_ms=self.clock()))

    async def _send_markers_then_complete(self, partition: int,
                                          coordinator: TransactionCoordinator,
                                          markers: TxnMarkers,
                                          send: Callable[[], Awaitable[None]]) -> None:
        """Await ``send`` (a cluster's WriteTxnMarkers to the leaders of the
        transaction's partitions, wherever they are, which also tells the group
        coordinators of ``__consumer_offsets`` partitions), then complete the
        transaction — if this broker still coordinates it: after a resignation the new
        coordinator sends the markers of the prepared transaction again at its load."""
        while True:
            try:
                await send()
                break
            except asyncio.CancelledError:
                raise
            except Exception:
                # As Kafka's marker channel manager, retry until done or no longer ours.
                log.exception("writing the markers of %s (producer %d) failed; retrying",
                              markers.transactional_id, markers.producer_id)
                await asyncio.sleep(MARKER_RETRY_BACKOFF_S)
                if self.coordinators.get(partition) is not coordinator:
                    return
        if self.closed:
            return  # the broker stops: the next coordinator completes the transaction
        if self.coordinators.get(partition) is not coordinator:
            log.info("markers of %s (producer %d) written after %s-%d resigned: left to "
                     "its new coordinator", markers.transactional_id, markers.producer_id,
                     TRANSACTION_STATE_TOPIC, partition)
            return
        self._act(partition, coordinator.markers_written(
            markers.transactional_id, markers.producer_id, markers.producer_epoch,
            now_ms=self.clock()))

    def write_markers_locally(self, markers: TxnMarkers) -> None:
        """Single node (``SingleNode.write_txn_markers``): one control batch per
        partition of the transaction, in this broker's own logs (WriteTxnMarkers,
        local)."""
        assert self.broker.logs is not None
        for topic, partition in markers.partitions:
            lg = self.broker.logs.get_log(topic, partition)
            if lg is None:
                # The topic was deleted while the transaction was open: nothing to mark
                # (Kafka's marker manager drops markers of unknown partitions too).
                log.info("no marker for %s-%d: the partition no longer exists", topic,
                         partition)
                continue
            try:
                lg.append_marker(markers.producer_id, markers.producer_epoch, markers.commit,
                                 coordinator_epoch=markers.coordinator_epoch,
                                 leader_epoch=SINGLE_NODE_LEADER_EPOCH)
            except Exception as exc:
                # INVALID_PRODUCER_EPOCH / TRANSACTION_COORDINATOR_FENCED: the partition
                # already belongs to a newer epoch, whose markers end what this would
                # have (Kafka's completion handler stops sending such markers too).
                log.warning("marker for producer %d epoch %d not written to %s-%d: %s",
                            markers.producer_id, markers.producer_epoch, topic, partition,
                            exc)
                continue
            if topic == OFFSETS_TOPIC and self.broker.groups is not None:
                self.broker.groups.txn_marker_written(partition, markers.producer_id,
                                                      markers.commit)
            self.broker.purgatory.notify((topic, partition))

    # --- produce-side check (KIP-890's verification) ------------------------------------

    def coordinated_here(self, transactional_id: str) -> bool:
        """Whether this broker coordinates (and has loaded) the transactional id."""
        return self.partition_for(transactional_id) in self.coordinators

    async def check_transaction(self, transactional_id: str, producer_id: int,
                                producer_epoch: int, partitions: list[TopicPartition], *,
                                add: bool) -> dict[TopicPartition, int]:
        """KIP-890, asked by a partition leader or group coordinator here of the
        transaction's coordinator, here or on another broker: does the producer's open
        transaction hold these partitions (``add`` False: verification, transaction
        version 1), or add them to it (``add``: transaction version 2, whose clients
        leave that to the brokers they write to). The coordinator's code for each."""
        if not self.coordinated_here(transactional_id):
            return await self.broker.topology.ask_transaction_coordinator(
                transactional_id, producer_id, producer_epoch, partitions, add=add)
        return await self.add_or_verify(transactional_id, producer_id, producer_epoch,
                                        partitions, add=add)

    async def add_or_verify(self, transactional_id: str, producer_id: int,
                            producer_epoch: int, partitions: list[TopicPartition], *,
                            add: bool, client_version: int = TV_2
                            ) -> dict[TopicPartition, int]:
        """The coordinator here: add the partitions to the producer's transaction (for a
        client of ``client_version``), or (not ``add``) verify that it holds them; each
        one's code (NOT_COORDINATOR and the like for all, if it is not here)."""
        try:
            if not add:
                coordinator: TransactionCoordinator = self.coordinator_for(transactional_id)
                return coordinator.verify_partitions(transactional_id, producer_id,
                                                     producer_epoch, partitions)
            result = await self.call(
                transactional_id, lambda coordinator, token, now: coordinator.add_partitions(
                    transactional_id, producer_id, producer_epoch, partitions, token=token,
                    now_ms=now, client_version=client_version))
            code = result.error_code
        except CoordinatorUnavailable as exc:
            code = exc.error_code
        return dict.fromkeys(partitions, code)

    def check_produce(self, transactional_id: str, producer_id: int, producer_epoch: int,
                      topic: str, partition: int) -> tuple[int, str] | None:
        """Why a transactional batch may not be written to this partition (a Kafka error
        code and a message), or None: its transaction must be open under this producer
        id and epoch with the partition added. A batch that passed without that would
        open a transaction no marker ever ends (a "hanging transaction", holding
        read_committed consumers forever). The answers are those of Kafka's
        verification (TransactionCoordinator.handleVerifyPartitionsInTransaction) as the
        produce path maps them."""
        if not self.verify_partitions:
            return None
        coordinator = self.coordinators.get(self.partition_for(transactional_id))
        if coordinator is None:
            # The transactional id is coordinated by another broker (a cluster): the
            # produce handler asks that coordinator (AddPartitionsToTxn, verify only).
            return None
        code = coordinator.verify_partitions(transactional_id, producer_id, producer_epoch,
                                             [(topic, partition)])[(topic, partition)]
        return verification_refusal(code, transactional_id, producer_id, producer_epoch,
                                    topic, partition)
        coordinator = self.coordinators.get(self.partition_for(transactional_id))
        if coordinator is None:
            # The transactional id is coordinated by another broker (a cluster). KIP-890
            # verifies across brokers with an AddPartitionsToTxn verify-only request to
            # that coordinator, which is not built yet: the batch goes unverified.
            return None
        txn = coordinator.transactions.get(transactional_id)
        if txn is None or txn.producer_id != producer_id:
            return ErrorCode.invalid_producer_id_mapping, (
                f"producer {producer_id} is not the producer of {transactional_id!r}")
        if txn.producer_epoch != producer_epoch:
            # A fenced producer (a newer one has the id, or its transaction timed out).
            return ErrorCode.invalid_producer_epoch, (
                f"producer {producer_id} epoch {producer_epoch} of {transactional_id!r} is "
                f"fenced by epoch {txn.producer_epoch}")
        if txn.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            # Markers are on their way: retriable (Kafka answers NOT_ENOUGH_REPLICAS).
            return (ErrorCode.not_enough_replicas,
                    f"the transaction of {transactional_id!r} is ending")
        if txn.state != TxnState.ONGOING or (topic, partition) not in txn.partitions:
            # Kafka's coordinator says TRANSACTION_ABORTABLE (KIP-890); Produce before
            # v11 hears INVALID_TXN_STATE (coordinator/transaction_errors.py).
            return ErrorCode.transaction_abortable, (
                f"{topic}-{partition} was not added to the transaction of "
                f"{transactional_id!r}")
        return None


def verification_refusal(code: int, transactional_id: str, producer_id: int,
                         producer_epoch: int, topic: str, partition: int
                         ) -> tuple[int, str] | None:
    """A verification's code (the coordinator's, here or on another broker) as the
    produce's refusal: (error code, message), or None if the batch may be written."""
    if code == ErrorCode.none:
        return None
    reasons: dict[int, str] = {
        ErrorCode.invalid_producer_id_mapping:
            f"producer {producer_id} is not the producer of {transactional_id!r}",
        ErrorCode.producer_fenced:
            f"producer {producer_id} epoch {producer_epoch} of {transactional_id!r} is fenced",
        ErrorCode.concurrent_transactions:
            f"the transaction of {transactional_id!r} is ending",
        ErrorCode.transaction_abortable:
            f"{topic}-{partition} was not added to the transaction of {transactional_id!r}",
    }
    why = reasons.get(code, f"the transaction of {transactional_id!r} could not be verified "
                            f"(error {code})")
    return produce_verification_error(code), why
