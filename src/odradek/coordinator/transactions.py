"""The transaction coordinator (Kafka's TransactionCoordinator and TransactionMetadata,
KIP-98, with KIP-360's epoch bumps and KIP-588's PRODUCER_FENCED) as a pure state machine.

For every transactional id: its producer id and epoch, the partitions of its open
transaction, its timeout and its state::

    Empty --AddPartitions/AddOffsets--> Ongoing --EndTxn--> PrepareCommit | PrepareAbort
      ^                                                        | markers written
      +-- InitProducerId <-- CompleteCommit | CompleteAbort <--+

Every operation takes plain arguments, an opaque request token and ``now_ms`` and returns
``TxnEffects`` ("decide, then act"): records for ``__transaction_state`` (append them to
``partition_for(transactional_id)``, in order), then the responses to send, then the
control markers to write (``TxnMarkers``: one COMMIT or ABORT control batch for the
producer id and epoch in each partition of the transaction). Once a ``TxnMarkers`` is
written to all its partitions the runtime calls ``markers_written``, which completes the
transaction (CompleteCommit/CompleteAbort record) — Kafka's
TransactionMarkerChannelManager does that last step when the WriteTxnMarkers answers come
back. The state changes as soon as the decision is made; the runtime is expected not to
fail an append (Kafka reverts on a failed append; here that is a broker failure).

Fencing a zombie: an InitProducerId for a transactional id whose transaction is Ongoing
bumps the epoch (Kafka's PrepareEpochFence), writes PrepareAbort with it and lists the
abort markers; the request is parked under its token and answered by the
``markers_written`` that completes the abort, as if the client had retried at that moment
(Kafka answers CONCURRENT_TRANSACTIONS and the client retries; parking saves the round
trips, and the answer is the one the retry would get, a second epoch bump included).

Timers: every ``transaction.abort.timed.out.transaction.cleanup.interval.ms`` an Ongoing
transaction older than its timeout is aborted with a bumped epoch (so its producer is
fenced); every ``transaction.remove.expired.transaction.cleanup.interval.ms`` a
transactional id idle for ``transactional.id.expiration.ms`` is removed (tombstone).
``next_deadline`` says when ``tick`` is due.

State is rebuilt after a restart by ``load``-ing every ``__transaction_state`` record in
log order, then ``finish_load``, whose effects list the markers of every transaction left
in PrepareCommit/PrepareAbort (they must be written again). As in Kafka the log does not
hold the last epoch / last producer id (value version 0), so a KIP-360 retry of an
InitProducerId whose answer was lost across a restart is fenced.

Errors are Kafka's codes. ``PRODUCER_FENCED`` and ``TRANSACTION_ABORTABLE`` are answered
to every version; the handlers downgrade them for older clients
(``transaction_errors.error_for_version``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, NamedTuple

from kio.schema.errors import ErrorCode

from odradek.coordinator import offsets_topic
from odradek.coordinator import transaction_log as tl
from odradek.coordinator.results import Responses

log = logging.getLogger(__name__)

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
# Transaction versions (the finalized feature ``transaction.version``, KIP-890): 1 adds
# the partition leaders' verification, 2 an epoch bump at every end and partitions added
# by the brokers their clients write to.
TV_1 = 1
TV_2 = 2
# Epochs are int16. A client is never given Short.MaxValue, so that the coordinator can
# always fence it with one more bump (TransactionMetadata.isEpochExhausted).
MAX_EPOCH = 32767

# Kafka's defaults for the broker settings this coordinator takes.
TRANSACTION_MAX_TIMEOUT_MS = 900_000  # transaction.max.timeout.ms
TRANSACTIONAL_ID_EXPIRATION_MS = 7 * 24 * 60 * 60 * 1000  # transactional.id.expiration.ms
# transaction.abort.timed.out.transaction.cleanup.interval.ms
ABORT_TIMED_OUT_TRANSACTIONS_INTERVAL_MS = 10_000
# transaction.remove.expired.transaction.cleanup.interval.ms
REMOVE_EXPIRED_TRANSACTIONAL_IDS_INTERVAL_MS = 3_600_000


class TxnState(IntEnum):
    """Kafka's TransactionState; the value is the status byte of the log record."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def kafka_name(self) -> str:
        """The name DescribeTransactions and ListTransactions show (and filter on)."""
        return _NAMES[self]


_NAMES = {
    TxnState.EMPTY: "Empty",
    TxnState.ONGOING: "Ongoing",
    TxnState.PREPARE_COMMIT: "PrepareCommit",
    TxnState.PREPARE_ABORT: "PrepareAbort",
    TxnState.COMPLETE_COMMIT: "CompleteCommit",
    TxnState.COMPLETE_ABORT: "CompleteAbort",
    TxnState.DEAD: "Dead",
    TxnState.PREPARE_EPOCH_FENCE: "PrepareEpochFence",
}
_BY_NAME = {name: state for state, name in _NAMES.items()}
_PREPARED = (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)
_COMPLETE = (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)
# TransactionState.isExpirationAllowed: no transaction in flight.
_AT_REST = (TxnState.EMPTY, *_COMPLETE)

TopicPartition = tuple[str, int]


def is_epoch_exhausted(epoch: int) -> bool:
    return epoch >= MAX_EPOCH - 1


# --- what a call hands back ---------------------------------------------------------------


class TxnRecord(NamedTuple):
    """One record for ``__transaction_state``: append it to partition
    ``partition_for(transactional_id)``. ``value`` None is a tombstone."""

    transactional_id: str
    key: bytes
    value: bytes | None


class TxnMarkers(NamedTuple):
    """Control batches to write: one COMMIT (``commit``) or ABORT marker from
    ``producer_id``/``producer_epoch`` in each of ``partitions``. Once all are written,
    call ``markers_written(transactional_id, producer_id, producer_epoch, ...)``."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    commit: bool
    coordinator_epoch: int
    partitions: tuple[TopicPartition, ...]


@dataclass(slots=True)
class TxnEffects(Responses):
    """The outcome of one call: append ``records`` (in order), then send ``responses``,
    then write ``markers``. ``responses`` may answer requests parked by earlier calls
    (an InitProducerId waiting for the abort of the transaction it fenced)."""

    records: list[TxnRecord] = field(default_factory=list)
    markers: list[TxnMarkers] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class InitProducerIdResult:
    error_code: int
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


@dataclass(frozen=True, slots=True)
class TxnResult:
    """AddPartitionsToTxn (the error of every partition asked for), AddOffsetsToTxn,
    EndTxn (v5, transaction version 2: with the producer id and epoch the producer goes
    on with, its epoch bumped by the end)."""

    error_code: int
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


@dataclass(frozen=True, slots=True)
class TransactionDescription:
    transactional_id: str
    error_code: int
    state: str = ""
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    transaction_timeout_ms: int = 0
    transaction_start_time_ms: int = tl.NO_TIMESTAMP
    topics: list[tuple[str, list[int]]] = field(default_factory=list)


class TransactionListing(NamedTuple):
    transactional_id: str
    producer_id: int
    state: str


@dataclass(frozen=True, slots=True)
class ListTransactionsResult:
    error_code: int
    unknown_state_filters: list[str]
    transactions: list[TransactionListing]


# --- state ----------------------------------------------------------------------------


class _ParkedInit(NamedTuple):
    token: Any
    timeout_ms: int
    expected: tuple[int, int] | None


@dataclass(slots=True)
class TransactionMetadata:
    """One transactional id. ``last_producer_id``/``last_producer_epoch`` let a KIP-360
    retry of a successful InitProducerId get the same answer; they are not in the log."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    last_update_ms: int
    last_producer_id: int = NO_PRODUCER_ID
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    partitions: set[TopicPartition] = field(default_factory=set)
    start_ms: int = tl.NO_TIMESTAMP
    # The InitProducerId that fenced this transaction, waiting for its abort to complete.
    fencing: _ParkedInit | None = None
    # KIP-890 part 2: the transaction version its client speaks (2: every end bumps the
    # epoch), and the producer id it moves to once this end completes (an epoch that
    # would be exhausted rotates the id), written in the log (value version 1).
    client_version: int = TV_1
    next_producer_id: int = NO_PRODUCER_ID
    previous_producer_id: int = NO_PRODUCER_ID

    def log_value(self) -> tl.TransactionLogValue:
        partitions: dict[str, list[int]] | None = None
        if self.state != TxnState.EMPTY:
            partitions = {}
            for topic, p in self.partitions:
                partitions.setdefault(topic, []).append(p)
        return tl.TransactionLogValue(
            self.producer_id, self.producer_epoch, self.timeout_ms, int(self.state),
            partitions, self.last_update_ms, self.start_ms,
            previous_producer_id=self.previous_producer_id,
            next_producer_id=self.next_producer_id, client_version=self.client_version)

    def persisted(self) -> tuple:
        """What the log reproduces of this transactional id (tests compare it)."""
        return (self.producer_id, self.producer_epoch, self.timeout_ms, self.state,
                frozenset(self.partitions), self.start_ms, self.last_update_ms)


def _new_producer_id_unavailable() -> int:
    raise RuntimeError("no producer id allocator given to the TransactionCoordinator")


class TransactionCoordinator:
    """The transactional ids it coordinates (the server keeps one per
    ``__transaction_state`` partition it coordinates). Not thread-safe: one caller at a
    time (the broker's event loop).

    ``allocate_producer_id`` hands out a fresh producer id (the broker's producer id
    blocks); ``partition_for_group`` names the ``__consumer_offsets`` partition of a group
    (AddOffsetsToTxn adds it to the transaction)."""

    def __init__(
        self,
        *,
        allocate_producer_id: Callable[[], int] = _new_producer_id_unavailable,
        partition_for_group: Callable[[str], int] = offsets_topic.partition_for,
        max_timeout_ms: int = TRANSACTION_MAX_TIMEOUT_MS,
        transactional_id_expiration_ms: int = TRANSACTIONAL_ID_EXPIRATION_MS,
        abort_timed_out_interval_ms: int = ABORT_TIMED_OUT_TRANSACTIONS_INTERVAL_MS,
        remove_expired_interval_ms: int = REMOVE_EXPIRED_TRANSACTIONAL_IDS_INTERVAL_MS,
        coordinator_epoch: int = 0,
    ) -> None:
        self._allocate_producer_id = allocate_producer_id
        self._partition_for_group = partition_for_group
        self.max_timeout_ms = max_timeout_ms
        self.transactional_id_expiration_ms = transactional_id_expiration_ms
        self.abort_timed_out_interval_ms = abort_timed_out_interval_ms
        self.remove_expired_interval_ms = remove_expired_interval_ms
        self.coordinator_epoch = coordinator_epoch
        self.transactions: dict[str, TransactionMetadata] = {}
        self._next_abort_check: int | None = None
        self._next_expiry_check: int | None = None

    # --- InitProducerId ------------------------------------------------------------------

    def init_producer_id(
        self,
        transactional_id: str | None,
        transaction_timeout_ms: int,
        producer_id: int = NO_PRODUCER_ID,
        producer_epoch: int = NO_PRODUCER_EPOCH,
        *,
        token: Any,
        now_ms: int,
    ) -> TxnEffects:
        """InitProducerId. ``producer_id``/``producer_epoch`` are v3+'s (KIP-360): -1/-1,
        or the id and epoch the producer has, asking for a bump of that very epoch."""
        fx = self._effects(now_ms)
        if transactional_id is None:
            # An idempotent producer: a fresh id, whatever it had (Kafka does the same).
            fx.respond(token, InitProducerIdResult(ErrorCode.none, self._allocate_producer_id(), 0))
            return fx
        if not transactional_id:
            fx.respond(token, InitProducerIdResult(ErrorCode.invalid_request))
            return fx
        if (producer_id == NO_PRODUCER_ID) != (producer_epoch == NO_PRODUCER_EPOCH):
            fx.respond(token, InitProducerIdResult(ErrorCode.invalid_request))
            return fx
        if not 0 < transaction_timeout_ms <= self.max_timeout_ms:
            fx.respond(token, InitProducerIdResult(ErrorCode.invalid_transaction_timeout))
            return fx
        expected = None if producer_id == NO_PRODUCER_ID else (producer_id, producer_epoch)
        txn = self.transactions.get(transactional_id)
        if txn is None:
            txn = TransactionMetadata(
                transactional_id, self._allocate_producer_id(), NO_PRODUCER_EPOCH,
                transaction_timeout_ms, TxnState.EMPTY, now_ms)
            self.transactions[transactional_id] = txn
        self._init(txn, _ParkedInit(token, transaction_timeout_ms, expected), now_ms, fx)
        return fx

    def _init(self, txn: TransactionMetadata, req: _ParkedInit, now_ms: int,
              fx: TxnEffects) -> None:
        if txn.fencing is not None or txn.state in _PREPARED:
            # Markers are being written: the client backs off and retries.
            fx.respond(req.token, InitProducerIdResult(ErrorCode.concurrent_transactions))
            return
        if req.expected is not None and not self._is_valid_producer_id(txn, req.expected):
            fx.respond(req.token, InitProducerIdResult(ErrorCode.producer_fenced))
            return
        if txn.state == TxnState.ONGOING:
            # Fence the producer of the open transaction: abort it under a bumped epoch
            # (never handed to a client), and answer once the abort is complete.
            txn.fencing = req
            self._fence_and_abort(txn, now_ms, fx)
            return
        assert txn.state in _AT_REST, txn.state
        expected_epoch = None if req.expected is None else req.expected[1]
        if is_epoch_exhausted(txn.producer_epoch) and expected_epoch in (
                None, txn.producer_epoch):
            # No epochs left: a new producer id, epoch 0 (KIP-360).
            new_id = self._allocate_producer_id()
            last_epoch = txn.producer_epoch if req.expected is not None else NO_PRODUCER_EPOCH
            next_id, next_epoch = new_id, 0
        elif expected_epoch is None:
            next_id, next_epoch, last_epoch = txn.producer_id, txn.producer_epoch + 1, \
                NO_PRODUCER_EPOCH
        elif txn.producer_epoch == NO_PRODUCER_EPOCH or expected_epoch == txn.producer_epoch:
            # The producer's own epoch (not exhausted: that rotated the id above), or a
            # brand new id: bump it, remembering the old one.
            next_id, next_epoch, last_epoch = txn.producer_id, txn.producer_epoch + 1, \
                txn.producer_epoch
        elif expected_epoch == txn.last_producer_epoch:
            # A retry of the bump that answered it last time (its answer was lost).
            fx.respond(req.token, InitProducerIdResult(ErrorCode.none, txn.producer_id,
                                                       txn.producer_epoch))
            return
        else:
            fx.respond(req.token, InitProducerIdResult(ErrorCode.producer_fenced))
            return
        txn.last_producer_id = txn.producer_id
        txn.producer_id = next_id
        txn.producer_epoch = next_epoch
        txn.last_producer_epoch = last_epoch
        txn.timeout_ms = req.timeout_ms
        txn.state = TxnState.EMPTY
        txn.partitions = set()
        txn.start_ms = tl.NO_TIMESTAMP
        txn.last_update_ms = now_ms
        fx.records.append(self._record(txn))
        fx.respond(req.token, InitProducerIdResult(ErrorCode.none, next_id, next_epoch))

    @staticmethod
    def _is_valid_producer_id(txn: TransactionMetadata, expected: tuple[int, int]) -> bool:
        # A KIP-360 producer may continue if the id is new (epoch -1: it recovers from
        # UNKNOWN_PRODUCER_ID), if it names the current producer id (its epoch is checked
        # when bumping), or if it names the previous one with an exhausted epoch (a retry
        # of the InitProducerId that rotated the id).
        producer_id, epoch = expected
        return (txn.producer_epoch == NO_PRODUCER_EPOCH
                or producer_id == txn.producer_id
                or (producer_id == txn.last_producer_id and is_epoch_exhausted(epoch)))

    # --- AddPartitionsToTxn / AddOffsetsToTxn -------------------------------------------

    def add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[TopicPartition],
        *,
        token: Any,
        now_ms: int,
        client_version: int = TV_1,
    ) -> TxnEffects:
        """AddPartitionsToTxn: one answer for all the partitions asked for (the handler
        answers unknown topics itself, OPERATION_NOT_ATTEMPTED for the rest). A client's
        (v0-3) is transaction version 1; a broker adding for its client (v4+, not
        verify-only: Produce v12, TxnOffsetCommit v5) transaction version 2."""
        fx = self._effects(now_ms)
        fx.respond(token, TxnResult(self._add(transactional_id, producer_id, producer_epoch,
                                              set(partitions), now_ms, fx, client_version)))
        return fx

    def add_offsets(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        group_id: str,
        *,
        token: Any,
        now_ms: int,
    ) -> TxnEffects:
        """AddOffsetsToTxn: the group's ``__consumer_offsets`` partition joins the
        transaction, so its TxnOffsetCommits get the transaction's markers."""
        fx = self._effects(now_ms)
        partition = (offsets_topic.OFFSETS_TOPIC, self._partition_for_group(group_id))
        fx.respond(token, TxnResult(self._add(transactional_id, producer_id, producer_epoch,
                                              {partition}, now_ms, fx)))
        return fx

    def _producer_of(self, transactional_id: str, producer_id: int, producer_epoch: int
                     ) -> TransactionMetadata | int:
        """The transaction this producer id and epoch may act on, or the error why not."""
        if not transactional_id:
            return ErrorCode.invalid_request
        txn = self.transactions.get(transactional_id)
        if txn is None or txn.producer_id != producer_id:
            return ErrorCode.invalid_producer_id_mapping
        if txn.producer_epoch != producer_epoch:
            return ErrorCode.producer_fenced
        return txn

    def _add(self, transactional_id: str, producer_id: int, producer_epoch: int,
             partitions: set[TopicPartition], now_ms: int, fx: TxnEffects,
             client_version: int = TV_1) -> int:
        txn = self._producer_of(transactional_id, producer_id, producer_epoch)
        if isinstance(txn, int):
            return txn
        if txn.fencing is not None or txn.state in _PREPARED:
            return ErrorCode.concurrent_transactions
        if txn.state == TxnState.ONGOING and partitions <= txn.partitions:
            return ErrorCode.none  # nothing new: no record (Kafka's shortcut)
        if txn.state != TxnState.ONGOING:
            txn.start_ms = now_ms  # the transaction begins
            txn.partitions = set()
            txn.client_version = client_version
        txn.state = TxnState.ONGOING
        txn.partitions |= partitions
        txn.last_update_ms = now_ms
        fx.records.append(self._record(txn))
        return ErrorCode.none

    def verify_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                          partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """KIP-890's verification (Kafka's handleVerifyPartitionsInTransaction, asked by
        a partition leader before it writes a transaction's first batch there): NONE
        for each partition of this producer's open transaction, TRANSACTION_ABORTABLE
        for one not in it; INVALID_PRODUCER_ID_MAPPING, PRODUCER_FENCED or (its markers
        are being written) CONCURRENT_TRANSACTIONS for all. Nothing changes."""
        wanted = list(partitions)
        txn = self.transactions.get(transactional_id)
        if txn is None or txn.producer_id != producer_id:
            return dict.fromkeys(wanted, ErrorCode.invalid_producer_id_mapping)
        if txn.producer_epoch != producer_epoch:
            return dict.fromkeys(wanted, ErrorCode.producer_fenced)
        if txn.state in _PREPARED:
            return dict.fromkeys(wanted, ErrorCode.concurrent_transactions)
        return {tp: ErrorCode.none if tp in txn.partitions else ErrorCode.transaction_abortable
                for tp in wanted}

    # --- EndTxn ------------------------------------------------------------------------

    def end_txn(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        *,
        token: Any,
        now_ms: int,
        client_version: int = TV_1,
    ) -> TxnEffects:
        """EndTxn: PrepareCommit/PrepareAbort is written and answered, then the markers
        go out; ``markers_written`` completes the transaction. A retry of the same end
        while markers are written gets CONCURRENT_TRANSACTIONS, after: NONE.

        Transaction version 2 (EndTxn v5, KIP-890 part 2): the end bumps the epoch (the
        prepare record and the markers carry the new one, which fences the producer's
        old epoch on every partition of the transaction), and the answer names the
        producer id and epoch to go on with; a retry with the epoch before the bump is
        answered as the end was; an abort with no transaction open is allowed (it bumps
        the epoch)."""
        fx = self._effects(now_ms)
        if client_version >= TV_2:
            fx.respond(token, self._end_v2(transactional_id, producer_id, producer_epoch,
                                           commit, now_ms, fx))
            return fx
        fx.respond(token, TxnResult(self._end(transactional_id, producer_id, producer_epoch,
                                              commit, now_ms, fx)))
        return fx

    def _end_v2(self, transactional_id: str, producer_id: int, producer_epoch: int,
                commit: bool, now_ms: int, fx: TxnEffects) -> TxnResult:
        """Kafka's endTransaction for a transaction version 2 client: which epochs are
        valid depends on the state (the open transaction's own; after a bump, the one
        before it, a retry), and a retry is answered as the end was."""
        txn = self.transactions.get(transactional_id) if transactional_id else None
        if txn is None:
            return TxnResult(ErrorCode.invalid_request if not transactional_id
                             else ErrorCode.invalid_producer_id_mapping)
        state = txn.state
        retry_on_bump = producer_epoch == txn.producer_epoch - 1
        retry_on_overflow = (txn.previous_producer_id == producer_id
                             and producer_epoch == MAX_EPOCH - 1 and txn.producer_epoch == 0)
        if txn.client_version >= TV_2 and state in _PREPARED:
            valid = retry_on_bump
        elif txn.client_version >= TV_2 and state in _COMPLETE:
            # A retry, or (as Kafka 4.4 allows) an abort with nothing open at the epoch
            # the last end gave.
            valid = retry_on_bump or retry_on_overflow or producer_epoch == txn.producer_epoch
        else:
            valid = producer_epoch == txn.producer_epoch
        if txn.producer_id != producer_id and not retry_on_overflow:
            return TxnResult(ErrorCode.invalid_producer_id_mapping)
        if not valid:
            return TxnResult(ErrorCode.producer_fenced)
        if txn.fencing is not None:
            return TxnResult(ErrorCode.concurrent_transactions)
        same = (TxnState.PREPARE_COMMIT, TxnState.COMPLETE_COMMIT) if commit else (
            TxnState.PREPARE_ABORT, TxnState.COMPLETE_ABORT)
        if state in _PREPARED:
            return TxnResult(ErrorCode.concurrent_transactions if state in same
                             else ErrorCode.invalid_txn_state)
        if state in _COMPLETE and producer_epoch != txn.producer_epoch:  # a retry
            return (TxnResult(ErrorCode.none, txn.producer_id, txn.producer_epoch)
                    if state in same else TxnResult(ErrorCode.invalid_txn_state))
        if state != TxnState.ONGOING:
            if commit:
                return TxnResult(ErrorCode.invalid_txn_state)  # nothing to commit
            txn.partitions = set()  # an abort of nothing: bumps the epoch all the same
        txn.client_version = TV_2
        self._bump_for_end(txn)
        self._prepare(txn, commit, now_ms, fx)
        if txn.state in _COMPLETE:  # nothing to mark: completed at once
            return TxnResult(ErrorCode.none, txn.producer_id, txn.producer_epoch)
        if txn.next_producer_id != NO_PRODUCER_ID:
            return TxnResult(ErrorCode.none, txn.next_producer_id, 0)
        return TxnResult(ErrorCode.none, txn.producer_id, txn.producer_epoch)

    def _bump_for_end(self, txn: TransactionMetadata) -> None:
        """Transaction version 2's bump at an end: the next epoch (the prepare record's
        and the markers'); when the producer's epoch was the last a client may hold, the
        id it moves to once the end completes (Kafka's nextProducerId)."""
        exhausted = is_epoch_exhausted(txn.producer_epoch)
        txn.producer_epoch += 1
        txn.last_producer_epoch = NO_PRODUCER_EPOCH
        txn.previous_producer_id = NO_PRODUCER_ID
        if exhausted:
            txn.next_producer_id = self._allocate_producer_id()

    def _end(self, transactional_id: str, producer_id: int, producer_epoch: int,
             commit: bool, now_ms: int, fx: TxnEffects) -> int:
        txn = self._producer_of(transactional_id, producer_id, producer_epoch)
        if isinstance(txn, int):
            return txn
        state = txn.state
        if state == TxnState.ONGOING:
            self._prepare(txn, commit, now_ms, fx)
            return ErrorCode.none
        if state in _COMPLETE:
            # A retry of an end whose answer was lost: fine if it asks for the same end.
            return (ErrorCode.none if (state == TxnState.COMPLETE_COMMIT) == commit
                    else ErrorCode.invalid_txn_state)
        if state in _PREPARED:
            same = (state == TxnState.PREPARE_COMMIT) == commit
            return ErrorCode.concurrent_transactions if same else ErrorCode.invalid_txn_state
        return ErrorCode.invalid_txn_state  # Empty: no transaction to end

    def _prepare(self, txn: TransactionMetadata, commit: bool, now_ms: int,
                 fx: TxnEffects) -> None:
        txn.state = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        txn.last_update_ms = now_ms
        fx.records.append(self._record(txn))
        self._send_markers(txn, now_ms, fx)

    def _fence_and_abort(self, txn: TransactionMetadata, now_ms: int, fx: TxnEffects) -> None:
        # PrepareEpochFence is never written: the bumped epoch goes straight into the
        # PrepareAbort record, and into the markers, which fence the old epoch on every
        # partition of the transaction.
        assert txn.producer_epoch < MAX_EPOCH, "a client never holds Short.MaxValue"
        txn.producer_epoch += 1
        txn.last_producer_epoch = NO_PRODUCER_EPOCH
        self._prepare(txn, False, now_ms, fx)

    def _send_markers(self, txn: TransactionMetadata, now_ms: int, fx: TxnEffects) -> None:
        if not txn.partitions:
            # Nothing to mark (Kafka's marker manager completes such a transaction at once).
            self._complete(txn, now_ms, fx)
            return
        fx.markers.append(TxnMarkers(
            txn.transactional_id, txn.producer_id, txn.producer_epoch,
            txn.state == TxnState.PREPARE_COMMIT, self.coordinator_epoch,
            tuple(sorted(txn.partitions))))

    def markers_written(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        *,
        now_ms: int,
    ) -> TxnEffects:
        """The runtime wrote every marker of the ``TxnMarkers`` with these ids: the
        transaction completes (CompleteCommit/CompleteAbort), and an InitProducerId that
        waited for this abort is answered. Markers of a transaction that is no longer
        being completed (the id expired or was replaced) are ignored."""
        fx = self._effects(now_ms)
        txn = self.transactions.get(transactional_id)
        if (txn is None or txn.producer_id != producer_id
                or txn.producer_epoch != producer_epoch or txn.state not in _PREPARED):
            log.debug("stale markers for %s (%d, %d) ignored", transactional_id, producer_id,
                      producer_epoch)
            return fx
        self._complete(txn, now_ms, fx)
        return fx

    def _complete(self, txn: TransactionMetadata, now_ms: int, fx: TxnEffects) -> None:
        txn.state = (TxnState.COMPLETE_COMMIT if txn.state == TxnState.PREPARE_COMMIT
                     else TxnState.COMPLETE_ABORT)
        txn.partitions = set()
        if txn.next_producer_id != NO_PRODUCER_ID:
            # Transaction version 2 at an exhausted epoch: the producer goes on under
            # the id this end allocated, at epoch 0.
            txn.previous_producer_id = txn.producer_id
            txn.producer_id, txn.producer_epoch = txn.next_producer_id, 0
            txn.next_producer_id = NO_PRODUCER_ID
        txn.last_update_ms = now_ms
        fx.records.append(self._record(txn))
        parked, txn.fencing = txn.fencing, None
        if parked is not None:
            self._init(txn, parked, now_ms, fx)

    # --- timers ------------------------------------------------------------------------

    def next_deadline(self) -> int | None:
        """When ``tick`` is next due (None: no transactional ids, nothing to time)."""
        if not self.transactions:
            return None
        due = [t for t in (self._next_abort_check, self._next_expiry_check) if t is not None]
        return min(due) if due else None

    def tick(self, now_ms: int) -> TxnEffects:
        """Run the periodic checks due by ``now_ms``: abort transactions older than their
        timeout (with a bumped epoch, fencing their producer, as Kafka's
        abortTimedOutTransactions does), and remove transactional ids idle for
        ``transactional.id.expiration.ms`` (a tombstone each)."""
        fx = self._effects(now_ms)
        if self._next_abort_check is not None and self._next_abort_check <= now_ms:
            self._next_abort_check = now_ms + self.abort_timed_out_interval_ms
            for txn in list(self.transactions.values()):
                if (txn.state == TxnState.ONGOING and txn.fencing is None
                        and txn.start_ms + txn.timeout_ms < now_ms):
                    log.info("aborting transaction of %s: older than its timeout of %d ms",
                             txn.transactional_id, txn.timeout_ms)
                    self._fence_and_abort(txn, now_ms, fx)
        if self._next_expiry_check is not None and self._next_expiry_check <= now_ms:
            self._next_expiry_check = now_ms + self.remove_expired_interval_ms
            horizon = now_ms - self.transactional_id_expiration_ms
            for tid, txn in list(self.transactions.items()):
                if txn.state in _AT_REST and txn.last_update_ms <= horizon:
                    del self.transactions[tid]
                    fx.records.append(TxnRecord(tid, tl.encode_key(tid), None))
        return fx

    def _effects(self, now_ms: int) -> TxnEffects:
        if self._next_abort_check is None:
            self._next_abort_check = now_ms + self.abort_timed_out_interval_ms
        if self._next_expiry_check is None:
            self._next_expiry_check = now_ms + self.remove_expired_interval_ms
        return TxnEffects()

    # --- DescribeTransactions / ListTransactions ----------------------------------------

    def describe_transactions(self, transactional_ids: Iterable[str]) -> list[
            TransactionDescription]:
        out = []
        for tid in transactional_ids:
            if not tid:
                out.append(TransactionDescription(tid, ErrorCode.invalid_request))
                continue
            txn = self.transactions.get(tid)
            if txn is None:
                out.append(TransactionDescription(tid, ErrorCode.transactional_id_not_found))
                continue
            topics: dict[str, list[int]] = {}
            for topic, p in sorted(txn.partitions):
                topics.setdefault(topic, []).append(p)
            out.append(TransactionDescription(
                tid, ErrorCode.none, txn.state.kafka_name, txn.producer_id, txn.producer_epoch,
                txn.timeout_ms, txn.start_ms, list(topics.items())))
        return out

    def list_transactions(
        self,
        state_filters: Iterable[str] = (),
        producer_id_filters: Iterable[int] = (),
        duration_filter_ms: int = -1,
        *,
        now_ms: int = 0,
    ) -> ListTransactionsResult:
        """ListTransactions: filters by state name and producer id (empty: all), and v1's
        KIP-994 duration (transactions that started longer ago than that; an id that never
        began one is left out; -1: all). Unknown state names are answered back, as Kafka
        does."""
        unknown = [s for s in state_filters if s not in _BY_NAME]
        states = {_BY_NAME[s] for s in state_filters if s in _BY_NAME}
        pids = set(producer_id_filters)
        listed = []
        for tid, txn in sorted(self.transactions.items()):
            if states and txn.state not in states:
                continue
            if pids and txn.producer_id not in pids:
                continue
            if duration_filter_ms >= 0 and (
                    txn.start_ms == tl.NO_TIMESTAMP or now_ms - txn.start_ms <= duration_filter_ms):
                continue
            listed.append(TransactionListing(tid, txn.producer_id, txn.state.kafka_name))
        return ListTransactionsResult(ErrorCode.none, unknown, listed)

    # --- the log -----------------------------------------------------------------------

    @staticmethod
    def _record(txn: TransactionMetadata) -> TxnRecord:
        return TxnRecord(txn.transactional_id, tl.encode_key(txn.transactional_id),
                         tl.encode_value(txn.log_value()))

    def load(self, key: bytes, value: bytes | None) -> None:
        """Replay one ``__transaction_state`` record (in log order) into the state. Call
        ``finish_load`` once the partitions have been read."""
        tid = tl.decode_key(key)
        if tid is None:
            return
        if value is None:
            self.transactions.pop(tid, None)
            return
        v = tl.decode_value(value)
        try:
            state = TxnState(v.status)
        except ValueError:
            raise tl.TransactionLogFormatError(
                f"unknown transaction status {v.status} for {tid!r}") from None
        if state in (TxnState.DEAD, TxnState.PREPARE_EPOCH_FENCE):
            # Neither is ever written; a Dead id is on its way out.
            self.transactions.pop(tid, None)
            return
        partitions: set[TopicPartition] = set()
        if state != TxnState.EMPTY and v.partitions:
            partitions = {(topic, p) for topic, ids in v.partitions.items() for p in ids}
        self.transactions[tid] = TransactionMetadata(
            tid, v.producer_id, v.producer_epoch, v.transaction_timeout_ms, state,
            v.last_update_timestamp_ms, partitions=partitions,
            start_ms=v.start_timestamp_ms, client_version=max(v.client_version, TV_1),
            next_producer_id=v.next_producer_id,
            previous_producer_id=v.previous_producer_id)

    def finish_load(self, now_ms: int) -> TxnEffects:
        """After the last ``load``: the markers of every transaction the previous
        coordinator left in PrepareCommit/PrepareAbort, to be written again (writing a
        marker twice is harmless: the second finds no open transaction)."""
        fx = self._effects(now_ms)
        for txn in self.transactions.values():
            if txn.state in _PREPARED:
                self._send_markers(txn, now_ms, fx)
        return fx


__all__ = [
    "TV_1",
    "TV_2",
    "InitProducerIdResult",
    "ListTransactionsResult",
    "TransactionCoordinator",
    "TransactionDescription",
    "TransactionListing",
    "TransactionMetadata",
    "TxnEffects",
    "TxnMarkers",
    "TxnRecord",
    "TxnResult",
    "TxnState",
]
