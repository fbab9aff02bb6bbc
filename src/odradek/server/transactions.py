"""The transaction coordinator's runtime: acts on what ``odradek.coordinator.transactions``
decides (KIP-98).

The pure ``TransactionCoordinator`` returns ``TxnEffects``: records for
``__transaction_state``, responses keyed by request tokens, and ``TxnMarkers`` to write.
This module owns the rest, as ``server/groups.py`` does for groups:

- a token per request and a future per token: an InitProducerId that fences an open
  transaction waits (on its future) for the abort it caused to complete;
- appending: an operation's records go to the transactional id's partition of
  ``__transaction_state`` (``partition_for(transactional_id,
  transaction.state.log.num.partitions)``), one batch per partition, and only once that
  append has succeeded are the responses released;
- markers: each ``TxnMarkers`` becomes a COMMIT or ABORT control batch
  (``Log.append_marker``) in every partition of the transaction — what Kafka's
  TransactionMarkerChannelManager sends as WriteTxnMarkers, here a local append — and
  then ``markers_written`` completes the transaction. A marker in ``__consumer_offsets``
  also tells the group runtime, so the transaction's TxnOffsetCommits count or go.
  Markers are written in the same step as the decision (before the event loop sends the
  EndTxn answer), so a committed transaction is readable once EndTxn is answered;
- one timer task that calls ``tick(now)`` at ``next_deadline()`` (timed-out transactions
  are aborted, expired transactional ids removed);
- ``__transaction_state`` itself: replayed before the broker listens, and the markers of
  transactions a previous run left prepared (PrepareCommit/PrepareAbort) written again
  then. As in Kafka it is created (compacted, internal) on first use — a FindCoordinator
  for a transactional id, or an InitProducerId with one — so a broker whose clients never
  use transactions has no such topic.

Everything runs on the broker's event loop, one operation at a time; appends are
synchronous, so an operation, its append and its markers never interleave with another.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING

from odradek.coordinator import OFFSETS_TOPIC
from odradek.coordinator import partition_for as group_partition_for
from odradek.coordinator import transaction_log as tl
from odradek.coordinator.transaction_log import (
    TRANSACTION_STATE_TOPIC,
    TransactionLogFormatError,
)
from odradek.coordinator.transaction_log import partition_for as txn_partition_for
from odradek.coordinator.transactions import (
    TransactionCoordinator,
    TxnEffects,
    TxnMarkers,
    TxnState,
)
from odradek.records import builder
from odradek.server.coordinator_runtime import (
    COORDINATOR_NOT_AVAILABLE,
    CoordinatorRuntime,
    CoordinatorUnavailable,
)
from odradek.server.handlers.base import LEADER_EPOCH

if TYPE_CHECKING:
    from odradek.server.broker import Broker

log = logging.getLogger(__name__)

# Kafka's errors for a transactional produce that fails the check of check_produce.
NOT_ENOUGH_REPLICAS = 19
INVALID_PRODUCER_EPOCH = 47
INVALID_TXN_STATE = 48
INVALID_PRODUCER_ID_MAPPING = 49
# Topic-level settings of __transaction_state, as Kafka creates it (min.insync.replicas
# and unclean leader election do not apply to one node).
TRANSACTION_STATE_TOPIC_CONFIG = {"cleanup.policy": "compact", "compression.type": "producer"}


class TxnRuntime(CoordinatorRuntime):
    """One ``TransactionCoordinator`` and everything it needs to act; lives as long as
    the broker (``start`` after the group runtime and before the listener, ``stop`` at
    ``Broker.stop``)."""

    topic = TRANSACTION_STATE_TOPIC

    def __init__(self, broker: Broker) -> None:
        cfg = broker.config
        assert broker.metadata is not None and broker.groups is not None
        super().__init__(broker, cfg["transaction.state.log.num.partitions"])
        groups = broker.groups
        self.coordinator = TransactionCoordinator(
            allocate_producer_id=broker.metadata.next_producer_id,
            partition_for_group=lambda group_id: group_partition_for(
                group_id, groups.num_partitions),
            max_timeout_ms=cfg["transaction.max.timeout.ms"],
            transactional_id_expiration_ms=cfg["transactional.id.expiration.ms"],
            abort_timed_out_interval_ms=cfg[
                "transaction.abort.timed.out.transaction.cleanup.interval.ms"],
            remove_expired_interval_ms=cfg[
                "transaction.remove.expired.transaction.cleanup.interval.ms"],
        )
        self.verify_partitions: bool = cfg["transaction.partition.verification.enable"]
        self._topic_ready = False

    # --- lifecycle ---------------------------------------------------------------------

    def start(self) -> None:
        """Replay ``__transaction_state`` if it exists, write the markers of prepared
        transactions, start the timer task. Runs before the broker accepts connections
        (and after the group runtime has loaded, so that markers to
        ``__consumer_offsets`` find their pending offsets)."""
        assert self.broker.metadata is not None
        records = 0
        if TRANSACTION_STATE_TOPIC in self.broker.metadata.topics:
            self.ensure_topic()
            records = self._replay()
        self._act(self.coordinator.finish_load(self.clock()))
        log.info("loaded %d transactional id(s) from %d record(s) of %s",
                 len(self.coordinator.transactions), records, TRANSACTION_STATE_TOPIC)
        self._start_timer("transaction-coordinator-timers")

    def ensure_topic(self) -> None:
        """Create ``__transaction_state`` if it does not exist yet (and open its logs)."""
        if self._topic_ready:
            return
        self._create_topic(
            dict(TRANSACTION_STATE_TOPIC_CONFIG, **{"segment.bytes": str(
                self.broker.config["transaction.state.log.segment.bytes"])}),
            "transaction.state.log.num.partitions")
        self._topic_ready = True

    def _replay(self, only: set[str] | None = None) -> int:
        """Feed every record of ``__transaction_state``, in log order, to ``load`` (only
        those of the transactional ids ``only``, when given, from their partitions)."""
        count = 0
        partitions: Iterable[int] = range(self.num_partitions)
        if only is not None:
            partitions = sorted({txn_partition_for(tid, self.num_partitions) for tid in only})
        for partition, batch in self._batches(partitions):
            if batch.header.is_control:
                continue
            for record in batch.records:
                if record.key is None:
                    continue
                if only is not None and tl.decode_key(record.key) not in only:
                    continue
                try:
                    self.coordinator.load(record.key, record.value)
                except TransactionLogFormatError as exc:
                    log.warning("%s-%d offset %d: skipping a record that does not decode: %s",
                                TRANSACTION_STATE_TOPIC, partition, record.offset, exc)
                count += 1
        return count

    def _revert(self, transactional_ids: set[str]) -> None:
        """After a failed append: these ids go back to what the log holds (Kafka reverts
        a transaction's metadata when its append fails), so that a client's retry is
        decided again from the stored state rather than from one never stored."""
        for tid in transactional_ids:
            self.coordinator.transactions.pop(tid, None)
        try:
            self._replay(only=transactional_ids)
        except Exception:
            log.exception("could not reread %s after a failed append",
                          TRANSACTION_STATE_TOPIC)

    # --- operations --------------------------------------------------------------------

    def _act(self, fx: TxnEffects) -> None:
        """Append the records, release the responses (errors instead if the append
        failed), write the markers (each completed set acts in turn), re-arm the timer."""
        failure: CoordinatorUnavailable | None = None
        if fx.records:
            try:
                self._append(fx)
            except Exception as exc:
                log.exception("appending transaction state to %s failed",
                              TRANSACTION_STATE_TOPIC)
                failure = CoordinatorUnavailable(
                    COORDINATOR_NOT_AVAILABLE, f"transaction state could not be stored: {exc}")
                self._revert({r.transactional_id for r in fx.records})
        self._release(fx.responses, failure)
        if failure is None:
            for markers in fx.markers:
                self._write_markers(markers)
                self._act(self.coordinator.markers_written(
                    markers.transactional_id, markers.producer_id, markers.producer_epoch,
                    now_ms=self.clock()))
        self._rearm.set()

    def _append(self, fx: TxnEffects) -> None:
        by_partition: dict[int, list[builder.Record]] = {}
        now = self.clock()
        for record in fx.records:
            batch = by_partition.setdefault(
                txn_partition_for(record.transactional_id, self.num_partitions), [])
            batch.append(builder.Record(len(batch), now, record.key, record.value))
        for partition, records in by_partition.items():
            self._log(partition).append(builder.build_batch(records),
                                              leader_epoch=LEADER_EPOCH)
            self.broker.purgatory.notify((TRANSACTION_STATE_TOPIC, partition))

    def _write_markers(self, markers: TxnMarkers) -> None:
        """One control batch per partition of the transaction (WriteTxnMarkers, local)."""
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
                                 leader_epoch=LEADER_EPOCH)
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

    # --- produce-side check (KIP-890's verification, answered locally) ----------------

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
        txn = self.coordinator.transactions.get(transactional_id)
        if txn is None or txn.producer_id != producer_id:
            return INVALID_PRODUCER_ID_MAPPING, (
                f"producer {producer_id} is not the producer of {transactional_id!r}")
        if txn.producer_epoch != producer_epoch:
            # A fenced producer (a newer one has the id, or its transaction timed out).
            return INVALID_PRODUCER_EPOCH, (
                f"producer {producer_id} epoch {producer_epoch} of {transactional_id!r} is "
                f"fenced by epoch {txn.producer_epoch}")
        if txn.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            # Markers are on their way: retriable (Kafka answers NOT_ENOUGH_REPLICAS).
            return NOT_ENOUGH_REPLICAS, f"the transaction of {transactional_id!r} is ending"
        if txn.state != TxnState.ONGOING or (topic, partition) not in txn.partitions:
            return INVALID_TXN_STATE, (
                f"{topic}-{partition} was not added to the transaction of "
                f"{transactional_id!r}")
        return None
