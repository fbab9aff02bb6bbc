"""Idempotent producer state of one partition (Kafka's ProducerStateManager, KIP-98).

For each producer id: its epoch and the (first sequence, last sequence, first offset,
last offset) of its last five batches — the most a producer has in flight — so that a
retried batch is recognised and answered with the offsets it got the first time, and a
gap is refused. Works on batch headers only.

The state is rebuilt on open from a snapshot (``<offset>.snapshot``, written at clean
close, as Kafka names them) plus the batch headers after it, or from all batch headers
when there is no usable snapshot.

Transactions (KIP-98): a batch with the transactional bit opens a transaction for its
producer id at its first offset (or continues the open one); a control batch (COMMIT or
ABORT marker) from that producer id closes it. A marker carries the coordinator's epoch
for the producer, which may be higher than the batches' (the coordinator fences a
producer by bumping its epoch): it becomes the producer's epoch, so later batches with
the old one are refused. The first offsets of the open transactions give the last stable
offset (``first_unstable_offset``); the snapshot keeps them (format version 2; version 1
snapshots, which had none, still load).
"""

from __future__ import annotations

import json
import os
from collections import deque
from typing import NamedTuple

from odradek.records.batch import NO_SEQUENCE, BatchHeader

SNAPSHOT_SUFFIX = ".snapshot"
SNAPSHOT_VERSION = 2  # 1: {pid: [epoch, batches]}; 2 adds coordinator epoch, open txn
BATCHES_KEPT = 5  # Kafka's ProducerStateEntry.NUM_BATCHES_TO_RETAIN (max in-flight)
INT32_MAX = 2**31 - 1


class ProducerStateError(Exception):
    kafka_error = "OUT_OF_ORDER_SEQUENCE_NUMBER"


class OutOfOrderSequenceError(ProducerStateError):
    """A batch whose sequence does not follow the last one (OUT_OF_ORDER_SEQUENCE_NUMBER)."""

    kafka_error = "OUT_OF_ORDER_SEQUENCE_NUMBER"


class InvalidProducerEpochError(ProducerStateError):
    """A batch from an older epoch of a producer id (INVALID_PRODUCER_EPOCH)."""

    kafka_error = "INVALID_PRODUCER_EPOCH"


class TransactionCoordinatorFencedError(ProducerStateError):
    """A marker from an older coordinator epoch (TRANSACTION_COORDINATOR_FENCED)."""

    kafka_error = "TRANSACTION_COORDINATOR_FENCED"


class InvalidTxnStateError(ProducerStateError):
    """A non-transactional batch while the producer's transaction is open."""

    kafka_error = "INVALID_TXN_STATE"


class CompletedTxn(NamedTuple):
    """A transaction a marker ended: its first offset and the marker's offset."""

    producer_id: int
    first_offset: int
    last_offset: int
    aborted: bool


class BatchMetadata(NamedTuple):
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


class ProducerEntry:
    __slots__ = ("batches", "coordinator_epoch", "epoch", "txn_first_offset")

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch
        self.batches: deque[BatchMetadata] = deque(maxlen=BATCHES_KEPT)
        self.coordinator_epoch = -1
        self.txn_first_offset = -1  # first offset of the open transaction, -1 if none

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE


def _last_seq(header: BatchHeader) -> int:
    # Sequences wrap at Int.MAX (DefaultRecordBatch.incrementSequence).
    return (header.base_sequence + header.last_offset_delta) % (INT32_MAX + 1)


def _in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (last_seq == INT32_MAX and next_seq == 0)


class ProducerStateManager:
    def __init__(self) -> None:
        self.producers: dict[int, ProducerEntry] = {}
        # producer id -> first offset of its open transaction (the entries' txn_first_offset,
        # kept apart so the LSO costs the open transactions, not every producer)
        self._ongoing: dict[int, int] = {}

    def find_duplicate(self, header: BatchHeader) -> BatchMetadata | None:
        """The earlier append of this very batch, if it is a retry of one."""
        entry = self.producers.get(header.producer_id)
        if entry is None or entry.epoch != header.producer_epoch:
            return None
        last_seq = _last_seq(header)
        for batch in entry.batches:
            if batch.first_seq == header.base_sequence and batch.last_seq == last_seq:
                return batch
        return None

    def check(self, header: BatchHeader, pending: dict[int, tuple[int, int]]) -> None:
        """Raise unless the batch may be appended after the producer's last one.
        ``pending`` holds (epoch, last sequence) of batches earlier in the same append."""
        pid, epoch, first = header.producer_id, header.producer_epoch, header.base_sequence
        if pid in pending:
            current_epoch, last_seq = pending[pid]
        else:
            entry = self.producers.get(pid)
            current_epoch, last_seq = (entry.epoch, entry.last_seq) if entry else (-1, NO_SEQUENCE)
        if current_epoch >= 0 and epoch < current_epoch:
            raise InvalidProducerEpochError(
                f"producer {pid} epoch {epoch} is older than its current epoch {current_epoch}"
            )
        if not header.is_transactional and pid not in pending:
            entry = self.producers.get(pid)
            if entry is not None and entry.txn_first_offset >= 0 and epoch == entry.epoch:
                raise InvalidTxnStateError(
                    f"producer {pid} wrote a non-transactional batch in its open transaction"
                )
        if epoch != current_epoch or last_seq == NO_SEQUENCE:
            if first != 0:
                raise OutOfOrderSequenceError(
                    f"producer {pid} epoch {epoch} must start at sequence 0, got {first}"
                )
        elif not _in_sequence(last_seq, first):
            raise OutOfOrderSequenceError(
                f"producer {pid}: sequence {first} does not follow {last_seq}"
            )
        pending[pid] = (epoch, _last_seq(header))

    def check_marker(self, producer_id: int, producer_epoch: int,
                     coordinator_epoch: int) -> None:
        """Raise unless a marker from this producer epoch and coordinator epoch may be
        written (Kafka's ProducerAppendInfo.checkProducerEpoch / checkCoordinatorEpoch)."""
        entry = self.producers.get(producer_id)
        if entry is None:
            return
        if producer_epoch < entry.epoch:
            raise InvalidProducerEpochError(
                f"marker for producer {producer_id} with epoch {producer_epoch} older than "
                f"its current epoch {entry.epoch}"
            )
        if coordinator_epoch < entry.coordinator_epoch:
            raise TransactionCoordinatorFencedError(
                f"marker for producer {producer_id} from coordinator epoch "
                f"{coordinator_epoch}, older than {entry.coordinator_epoch}"
            )

    def update(self, header: BatchHeader, first_offset: int, *, control_type: int = -1,
               coordinator_epoch: int = -1) -> CompletedTxn | None:
        """Record an appended batch (also used to rebuild state from the log). For a
        marker, ``control_type`` is its type (0 ABORT, 1 COMMIT) and the transaction it
        ended is returned."""
        if header.producer_id < 0:
            return None
        pid = header.producer_id
        entry = self.producers.get(pid)
        if entry is None or header.producer_epoch > entry.epoch:
            old = entry
            entry = self.producers[pid] = ProducerEntry(header.producer_epoch)
            if old is not None:  # a new epoch keeps the open transaction and coordinator
                entry.txn_first_offset = old.txn_first_offset
                entry.coordinator_epoch = old.coordinator_epoch
        if header.is_control:
            entry.coordinator_epoch = max(entry.coordinator_epoch, coordinator_epoch)
            if control_type not in (0, 1):
                return None  # not a transaction marker
            # A marker with no open transaction ends an empty one at its own offset
            # (Kafka's ProducerAppendInfo.appendEndTxnMarker does the same).
            first = entry.txn_first_offset if entry.txn_first_offset >= 0 else first_offset
            entry.txn_first_offset = -1
            self._ongoing.pop(pid, None)
            return CompletedTxn(pid, first, first_offset, control_type == 0)
        if header.is_transactional and entry.txn_first_offset < 0:
            entry.txn_first_offset = first_offset
            self._ongoing[pid] = first_offset
        if header.base_sequence < 0:
            return None
        entry.batches.append(BatchMetadata(
            header.base_sequence, _last_seq(header), first_offset,
            first_offset + header.last_offset_delta, header.max_timestamp))
        return None

    @property
    def has_transactions(self) -> bool:
        return bool(self._ongoing) or any(e.coordinator_epoch >= 0
                                          for e in self.producers.values())

    def in_transaction(self, producer_id: int, producer_epoch: int) -> bool:
        """Whether this producer, at this epoch, has a transaction open here."""
        entry = self.producers.get(producer_id)
        return (entry is not None and entry.epoch == producer_epoch
                and entry.txn_first_offset >= 0)

    def ongoing(self) -> dict[int, int]:
        """producer id -> first offset of its open transaction."""
        return dict(self._ongoing)

    def first_unstable_offset(self) -> int | None:
        """First offset of the earliest open transaction, or None."""
        return min(self._ongoing.values()) if self._ongoing else None

    def truncate_to(self, offset: int) -> None:
        """Forget batches at or after ``offset`` (the log was truncated)."""
        for pid in list(self.producers):
            entry = self.producers[pid]
            kept = [b for b in entry.batches if b.last_offset < offset]
            entry.batches.clear()
            entry.batches.extend(kept)
            if entry.txn_first_offset >= offset:
                entry.txn_first_offset = -1
                self._ongoing.pop(pid, None)

    # --- snapshots ---------------------------------------------------------------------

    def snapshot_bytes(self) -> bytes:
        """The state as a snapshot file holds it (JSON, version 2)."""
        return json.dumps({"version": SNAPSHOT_VERSION, "producers": {
            str(pid): [e.epoch, [list(b) for b in e.batches], e.coordinator_epoch,
                       e.txn_first_offset]
            for pid, e in self.producers.items()}}).encode()

    def write_snapshot(self, directory: str, offset: int, data: bytes | None = None) -> None:
        """Write the snapshot at ``offset`` (this state's, or ``data``: one read from
        the remote tier) and delete the older ones."""
        path = os.path.join(directory, f"{offset:020d}{SNAPSHOT_SUFFIX}")
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(self.snapshot_bytes() if data is None else data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        for name in os.listdir(directory):  # only the newest snapshot is kept
            if name.endswith(SNAPSHOT_SUFFIX) and name != os.path.basename(path):
                os.unlink(os.path.join(directory, name))

    @staticmethod
    def latest_snapshot(directory: str) -> tuple[int, str] | None:
        found = []
        for name in os.listdir(directory):
            stem = name[: -len(SNAPSHOT_SUFFIX)]
            if name.endswith(SNAPSHOT_SUFFIX) and len(stem) == 20 and stem.isdigit():
                found.append((int(stem), os.path.join(directory, name)))
        return max(found) if found else None

    def load_snapshot(self, path: str) -> bool:
        """Load a snapshot; False (and no state) if it is unreadable."""
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
            if "version" in data:  # version 2
                if data["version"] != SNAPSHOT_VERSION:
                    return False
                data = data["producers"]
            producers = {}
            for pid, fields in data.items():
                epoch, batches = fields[0], fields[1]
                entry = ProducerEntry(int(epoch))
                entry.batches.extend(BatchMetadata(*map(int, b)) for b in batches)
                if len(fields) >= 4:
                    entry.coordinator_epoch = int(fields[2])
                    entry.txn_first_offset = int(fields[3])
                producers[int(pid)] = entry
        except (OSError, ValueError, TypeError, KeyError, IndexError):
            return False
        self.producers = producers
        self._ongoing = {pid: e.txn_first_offset for pid, e in producers.items()
                         if e.txn_first_offset >= 0}
        return True
