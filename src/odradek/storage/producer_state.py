"""Idempotent producer state of one partition (Kafka's ProducerStateManager, KIP-98).

For each producer id: its epoch and the (first sequence, last sequence, first offset,
last offset) of its last five batches — the most a producer has in flight — so that a
retried batch is recognised and answered with the offsets it got the first time, and a
gap is refused. Works on batch headers only.

The state is rebuilt on open from a snapshot (``<offset>.snapshot``, written at clean
close, as Kafka names them) plus the batch headers after it, or from all batch headers
when there is no usable snapshot.
"""

from __future__ import annotations

import json
import os
from collections import deque
from collections.abc import Iterable
from typing import NamedTuple

from odradek.records.batch import NO_SEQUENCE, BatchHeader

SNAPSHOT_SUFFIX = ".snapshot"
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


class BatchMetadata(NamedTuple):
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


class ProducerEntry:
    __slots__ = ("batches", "epoch")

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch
        self.batches: deque[BatchMetadata] = deque(maxlen=BATCHES_KEPT)

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

    def update(self, header: BatchHeader, first_offset: int) -> None:
        """Record an appended batch (also used to rebuild state from the log)."""
        if header.producer_id < 0:
            return
        entry = self.producers.get(header.producer_id)
        if entry is None or header.producer_epoch > entry.epoch:
            entry = self.producers[header.producer_id] = ProducerEntry(header.producer_epoch)
        if header.base_sequence < 0:
            return  # a transaction marker: no sequence
        entry.batches.append(BatchMetadata(
            header.base_sequence, _last_seq(header), first_offset,
            first_offset + header.last_offset_delta, header.max_timestamp))

    def rebuild(self, headers: Iterable[BatchHeader]) -> None:
        for header in headers:
            self.update(header, header.base_offset)

    def truncate_to(self, offset: int) -> None:
        """Forget batches at or after ``offset`` (the log was truncated)."""
        for pid in list(self.producers):
            entry = self.producers[pid]
            kept = [b for b in entry.batches if b.last_offset < offset]
            entry.batches.clear()
            entry.batches.extend(kept)

    # --- snapshots ---------------------------------------------------------------------

    def write_snapshot(self, directory: str, offset: int) -> None:
        data = {str(pid): [e.epoch, [list(b) for b in e.batches]]
                for pid, e in self.producers.items()}
        path = os.path.join(directory, f"{offset:020d}{SNAPSHOT_SUFFIX}")
        tmp = path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(data, f)
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
            producers = {}
            for pid, (epoch, batches) in data.items():
                entry = ProducerEntry(int(epoch))
                entry.batches.extend(BatchMetadata(*map(int, b)) for b in batches)
                producers[int(pid)] = entry
        except (OSError, ValueError, TypeError):
            return False
        self.producers = producers
        return True
