"""Opening a partition log's directory (Kafka's LogLoader): the work of ``Log.open``, whose
docstring says what an open guarantees.

In order (``load``):

1. Complete or undo the file operations a crash interrupted (Kafka's swap protocol, see
   ``cleaner``): retired ``.deleted`` files and unfinished ``.cleaned`` cleaner outputs
   go, a finished ``.swap`` replaces the segment of its base offset, and orphan indexes
   and the temporary files of interrupted rewrites go.
2. Load the segments and recover what may not be on disk: after an unclean stop every
   segment from the one holding the recovery point on is validated batch by batch (CRC
   included) and its indexes rebuilt, and the log is cut at the first torn or corrupt
   batch; a segment below the point whose indexes fail to load is validated too. Work
   is proportional to the data after the recovery point.
3. Open the segments' aborted-transaction indexes, then derive the producer state: the
   latest snapshot that fits the recovered log, plus the batch headers after it.
4. Load the leader epochs from ``leader-epoch-checkpoint``, re-derived from the batch
   headers where the file cannot be trusted (``epoch_starts_from_headers``).

The functions take the ``Log`` being opened. Two are bound as its methods (``log.py``):
``Log._epoch_starts_from_headers``, which ``load`` looks up on the log (tests replace it
to see whether an open walks headers), and ``Log._load_producer_state``, which a
truncation (``local_log``) runs again to bring back open transactions.
"""

from __future__ import annotations

import bisect
import logging
import os
import struct
from typing import TYPE_CHECKING

from odradek.records import batch as rb
from odradek.records.errors import CorruptRecordError
from odradek.storage.errors import KafkaStorageError
from odradek.storage.index import IndexCorruptError
from odradek.storage.leader_epoch import LEADER_EPOCH_CHECKPOINT_FILE, LeaderEpochCache
from odradek.storage.local_log import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    SWAP_SUFFIX,
    add_segment,
    drop_snapshots_after,
)
from odradek.storage.producer_state import ProducerStateManager
from odradek.storage.segment import LOG_SUFFIX, LogSegment, parse_base_offset
from odradek.storage.txn_index import TXN_INDEX_SUFFIX, TransactionIndex

if TYPE_CHECKING:
    from odradek.storage.log import Log

# The partition log's logger, whichever of its modules speaks: the lines read as before
# the split, and ``log.level.odradek.storage.log`` still sets their level.
log = logging.getLogger("odradek.storage.log")

LEADER_EPOCH_TMP = LEADER_EPOCH_CHECKPOINT_FILE + ".tmp"  # a write a crash interrupted

# The leader epoch walk at open reads segments this much at a time (a few small batches,
# or one large batch's header, per read).
_HEADER_WALK_CHUNK = 4096

# baseOffset, batchLength, partitionLeaderEpoch: a batch's first 16 bytes as the leader
# writes them (the same struct as the append's in log.py).
_OFFSET_LENGTH_EPOCH = struct.Struct(">qii")


def load(
    lg: Log,
    *,
    log_start_offset: int,
    recovery_point: int,
    clean_shutdown: bool,
    high_watermark: int | None,
    replicated: bool | None,
) -> Log:
    """Open ``lg``'s directory into the new, empty ``lg`` (``Log.open``)."""
    directory = lg.directory
    os.makedirs(directory, exist_ok=True)
    _finish_interrupted_operations(directory)
    bases = sorted(
        base
        for name in os.listdir(directory)
        if name.endswith(LOG_SUFFIX) and (base := parse_base_offset(name)) is not None
    )
    interval = lg.config.index_interval_bytes
    for base in bases:
        lg.segments.append(
            LogSegment(directory, base, index_interval_bytes=interval, create=False)
        )
    lg._bases = bases
    if not lg.segments:
        add_segment(lg, log_start_offset)
    recovered_from = _recover(lg, recovery_point, clean_shutdown)
    _load_txn_indexes(lg)
    lg.active.ensure_indexes()  # appends extend them
    if lg.tiered:
        # The checkpointed start may lie below the local segments: in the remote tier
        # (the remote log manager moves it on as remote segments expire).
        lg.log_start_offset = min(log_start_offset, lg.log_end_offset)
    else:
        lg.log_start_offset = max(log_start_offset, lg.segments[0].base_offset)
        lg.log_start_offset = min(lg.log_start_offset, lg.log_end_offset)
    if clean_shutdown:
        lg.recovery_point = lg.log_end_offset  # the clean stop synced everything
    else:
        # Recovery validated the data after the recovery point but did not sync it
        # (Kafka's LogLoader.recoverLog does not either): the point stays where the
        # checkpoint had it, cut to the log end, and moves only when a flush syncs.
        # Were it moved to the log end here, a crash after the next checkpoint would
        # skip validating data that may never have reached the disk. Nothing lies
        # below the first segment, so the point never needs to be lower than that.
        lg.recovery_point = max(min(recovery_point, lg.log_end_offset),
                                lg.segments[0].base_offset)
    load_producer_state(lg)
    # Headers are walked for a log with batches and no readable file (written before
    # leader epochs were kept, or lost or torn by a crash), and after an unclean stop
    # for the segments recovery validated (their pages are in the cache: it has just
    # read them). Opening a cleanly closed log reads one small file at most.
    has_batches = any(segment.size for segment in lg.segments)
    lg.leader_epochs = LeaderEpochCache.open(
        directory, log_start_offset=lg.local_log_start_offset,
        log_end_offset=lg.log_end_offset,
        rebuild=lg._epoch_starts_from_headers if has_batches else None,
        recovered_from=recovered_from, durable=clean_shutdown)
    lg.replicated = high_watermark is not None if replicated is None else replicated
    local_start = lg.local_log_start_offset
    hw = local_start if high_watermark is None else high_watermark
    lg._high_watermark = min(max(hw, local_start), lg.log_end_offset)
    return lg


def _finish_interrupted_operations(directory: str) -> None:
    """Complete or undo file operations a crash interrupted (Kafka's swap protocol)."""
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        if name.endswith(DELETED_SUFFIX) or name.endswith(CLEANED_SUFFIX):
            os.unlink(path)  # retired files, or a cleaner output never finished
        elif name.endswith(LOG_SUFFIX + SWAP_SUFFIX):
            # A finished cleaner output: it replaces the segment of the same base.
            # Its indexes may or may not have been swapped too: they are derived
            # data, so drop them and let the segment rebuild them on load.
            target = path[: -len(SWAP_SUFFIX)]
            os.replace(path, target)
            stem = target[: -len(LOG_SUFFIX)]
            for suffix in (".index", ".timeindex"):
                if os.path.exists(stem + suffix):
                    os.unlink(stem + suffix)
        elif name.endswith(SWAP_SUFFIX):
            os.unlink(path)  # an index swap file: indexes are rebuilt anyway
    # Index files whose segment is gone (a removal interrupted between renames), and
    # temporary files of rewrites a crash interrupted.
    for name in os.listdir(directory):
        stem, _, suffix = name.partition(".")
        orphan = suffix in ("index", "timeindex") and not os.path.exists(
            os.path.join(directory, stem + LOG_SUFFIX)
        )
        if orphan or suffix == "txnindex.tmp" or name == LEADER_EPOCH_TMP:
            os.unlink(os.path.join(directory, name))


def _recover(lg: Log, recovery_point: int, clean_shutdown: bool) -> int | None:
    """Validate what may not be on disk; returns the base offset of the first
    segment validated as such (None: none, a clean stop), from which the leader
    epochs are re-derived."""
    # Segments from the one holding the recovery point on are validated in full.
    first_unsafe = len(lg.segments)
    if not clean_shutdown:
        first_unsafe = max(0, bisect.bisect_right(lg._bases, recovery_point) - 1)
    recovered_from = (lg.segments[first_unsafe].base_offset
                      if first_unsafe < len(lg.segments) else None)
    for i, segment in enumerate(lg.segments):
        must_rebuild = i >= first_unsafe
        if not must_rebuild:
            try:
                segment.load()
            except (IndexCorruptError, CorruptRecordError) as exc:
                log.warning("%s: %s; validating it and rebuilding its index",
                            segment.log_path, exc)
                must_rebuild = True
        if must_rebuild:
            cut = segment.recover()
            # A segment after the recovery point is not synced here: the recovery
            # point stays below it (see load), so a crash before the next flush
            # validates it again. That was 3 fsyncs per partition, most of an
            # unclean start with 10,000 partitions. Synced: a segment before the
            # recovery point whose indexes had to be rebuilt (the point says it is
            # on disk, indexes included), and a cut (rare; the torn bytes are gone
            # from disk before anything is appended where they were).
            if i < first_unsafe or cut:
                try:
                    segment.flush()
                except KafkaStorageError as exc:
                    # e.g. a full disk: the data is validated; the rebuilt indexes
                    # stay in memory and are written at the next flush that succeeds.
                    log.warning("%s; the rebuilt indexes stay in memory for now", exc)
            if cut:
                log.warning("%s: cut %d bytes of torn or corrupt data at the end",
                            segment.log_path, cut)
                # Nothing after a corrupt batch can be trusted (Kafka does the same).
                for later in lg.segments[i + 1 :]:
                    later.close(flush_indexes=False)
                    later.delete_files()
                    log.warning("%s: deleted, it followed corrupt data", later.log_path)
                del lg.segments[i + 1 :]
                del lg._bases[i + 1 :]
                break
    return recovered_from


def _load_txn_indexes(lg: Log) -> None:
    """Open the segments' aborted-transaction indexes; drop those of segments that
    are gone and entries past the log end (a torn tail was cut)."""
    bases = set(lg._bases)
    end = lg.log_end_offset
    for name in os.listdir(lg.directory):
        if not name.endswith(TXN_INDEX_SUFFIX):
            continue
        path = os.path.join(lg.directory, name)
        base = parse_base_offset(name)
        if base is None or base not in bases:
            os.unlink(path)
            continue
        try:
            index = TransactionIndex(path)
        except (OSError, ValueError) as exc:
            log.warning("%s: %s; rebuilding it", path, exc)
            os.unlink(path)
            continue
        index.truncate_to(end)
        if index.entries:
            lg._txn_indexes[base] = index


def load_producer_state(lg: Log) -> None:
    """Snapshot (if one fits the recovered log) plus the batch headers after it."""
    end = lg.log_end_offset
    snapshot = ProducerStateManager.latest_snapshot(lg.directory)
    if snapshot is not None and snapshot[0] > end:
        # Recovery cut the log below it: it describes data that is gone.
        drop_snapshots_after(lg, end)
        snapshot = ProducerStateManager.latest_snapshot(lg.directory)
    start = lg.segments[0].base_offset
    if snapshot is not None and snapshot[0] <= end and lg.producer_state.load_snapshot(
        snapshot[1]
    ):
        start = snapshot[0]
    if start >= end:
        return
    i = max(0, bisect.bisect_right(lg._bases, start) - 1)
    for segment in lg.segments[i:]:
        found = segment.find(start)
        if found is None:
            continue
        for pos, header in segment.headers_from(found[0]):
            if header.producer_id >= 0:
                data = segment.read_bytes(pos, header.size) if header.is_control else b""
                lg._update_producer_state(data, header, header.base_offset,
                                          segment.base_offset)


def epoch_starts_from_headers(lg: Log, start: int = 0) -> list[tuple[int, int]]:
    """(epoch, base offset) of every batch in the segments from the first based at
    or after ``start`` (0: all of them) whose partition leader epoch is above all
    before it from there: what the appends would have assigned (batches without an
    epoch, -1, assign nothing). Only at open: for a log without a usable file, and
    for the segments recovery has just validated (their pages are cached).

    Reads only each batch's first 16 bytes (base offset, length, leader epoch), from
    page-sized reads: with 20 small batches per log, walking them through
    read_header cost ~22 us a log (a sixth of its unclean open), this ~4 us."""
    starts: list[tuple[int, int]] = []
    latest = -1
    unpack = _OFFSET_LENGTH_EPOCH.unpack_from
    min_length = rb.HEADER_SIZE - rb.LOG_OVERHEAD_SIZE
    for segment in lg.segments[bisect.bisect_left(lg._bases, start):]:
        fd, size, position = segment.fd, segment.size, 0
        while position < size:
            chunk = os.pread(fd, min(_HEADER_WALK_CHUNK, size - position), position)
            at, available = 0, len(chunk)
            while at + _OFFSET_LENGTH_EPOCH.size <= available:
                base, length, epoch = unpack(chunk, at)
                if length < min_length:  # never in a loaded or recovered segment
                    raise CorruptRecordError(
                        f"{segment.log_path}: no batch at {position + at}")
                if epoch > latest:
                    latest = epoch
                    starts.append((epoch, base))
                at += length + rb.LOG_OVERHEAD_SIZE
            if at == 0:
                raise CorruptRecordError(f"{segment.log_path}: batch header cut "
                                         f"short at {position}")
            position += at
    return starts
