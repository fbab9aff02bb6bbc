"""The partition log: an ordered list of segments with one active segment at the end.

It owns offsets (assigning them on append, finding them on read), segment rolls, the
flush policy, recovery after an unclean stop, truncation, DeleteRecords and time/size
retention. It deals in whole record batches and file regions; it never decodes records
on append or read, and it knows nothing of requests, sockets or topic metadata.

Its code is split by responsibility, as Kafka splits its log into UnifiedLog, LocalLog
and LogLoader:

- this module: ``Log``, the class callers use, with what runs per request: append
  (validation, offsets, leader epochs, producer state), read and read_committed, the
  high watermark and the last stable offset; and the types its answers come in;
- ``local_log``: the segment list and its files: roll, the flush policy and the
  recovery point, lookups by timestamp, truncation, DeleteRecords, retention, the
  cleaner's swap, close and delete;
- ``log_loader``: the work of ``Log.open``: file operations a crash interrupted,
  recovery of unflushed segments, index rebuilds, and the producer state and leader
  epochs derived at open.

The functions of those two take the log and are bound here as its methods
(``flush = local_log.flush``): callers call ``Log.flush`` as before, with no call in
between, and the hot paths here were not touched by the split.

Transactions (KIP-98): the producer state tracks each producer id's open transaction;
``append_marker`` writes the COMMIT/ABORT control batch that ends one. The last stable
offset (``last_stable_offset``) is the first offset of the earliest open transaction, or
the log end; read_committed fetches (``read_committed``) stop there and get the aborted
transactions of the range from the segments' aborted-transaction indexes (``.txnindex``).

Replication (KIP-101, KIP-279): ``leader_epochs`` (``leader_epoch.LeaderEpochCache``,
the file ``leader-epoch-checkpoint``) records where each leader epoch's data starts; the
appends, truncations and log start moves keep it in step with the batches, and
``end_offset_for_epoch`` answers OffsetsForLeaderEpoch from it. Its file is written
unsynced when it changes and synced by the flushes, before the recovery point moves;
recovery re-derives the entries of the data it validates from the batch headers (see
``open``, ``log_loader`` and ``leader_epoch``). The high watermark is the
log end while the log is not ``replicated`` (one copy: whatever is appended is committed);
a replicated log keeps the one replication sets (``set_high_watermark``), which the log
manager checkpoints in ``replication-offset-checkpoint``.

Threading: every method runs on the broker's event loop thread, except the cleaner's
heavy work, which reads immutable old segments from a worker thread and then swaps its
result in under ``lock`` (see ``cleaner``).
"""

from __future__ import annotations

import bisect
import os
import struct
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

from odradek.records import batch as rb
from odradek.records import builder, codecs
from odradek.records.batch import BatchHeader
from odradek.records.errors import (
    CorruptRecordError,
    RecordTooLargeError,
    RecordValidationError,
)
from odradek.storage import local_log, log_loader
from odradek.storage.config import LogConfig
from odradek.storage.errors import (
    InvalidOffsetError,
    OffsetMovedToTieredStorageError,
    OffsetOutOfRangeError,
)
from odradek.storage.leader_epoch import LEADER_EPOCH_CHECKPOINT_FILE, LeaderEpochCache

# Moved to the modules that use them; still importable from here.
from odradek.storage.local_log import CLEANED_SUFFIX as CLEANED_SUFFIX
from odradek.storage.local_log import DELETED_SUFFIX as DELETED_SUFFIX
from odradek.storage.local_log import SWAP_SUFFIX as SWAP_SUFFIX
from odradek.storage.log_loader import LEADER_EPOCH_TMP as LEADER_EPOCH_TMP
from odradek.storage.producer_state import CompletedTxn, ProducerStateManager

# What the append and read paths answer with (results.py); importable from here too.
from odradek.storage.results import AppendInfo as AppendInfo
from odradek.storage.results import BytesRegion as BytesRegion
from odradek.storage.results import CommittedRead as CommittedRead
from odradek.storage.results import FileRegion as FileRegion
from odradek.storage.results import ReadResult as ReadResult
from odradek.storage.segment import LogSegment, segment_name
from odradek.storage.txn_index import TXN_INDEX_SUFFIX, AbortedTxn, TransactionIndex

Clock = Callable[[], int]

# A segment's offsets are stored relative to its base in int32 (index files).
MAX_RELATIVE_OFFSET = 2**31 - 1


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


# Appends at least this large check their batches' CRC-32C on a helper thread while the
# bytes are being written (both release the GIL): the check costs ~0.2 of a page-cache
# write, so overlapping it shortens a big append, but the hand-off costs CPU (waking the
# thread, passing the GIL back: ~10% of the broker's CPU under a produce load of ~300 KB
# requests, measured with py-spy). A producer's request is at most message.max.bytes
# (1,000,000 in librdkafka and Kafka), so requests are checked inline, where CPU per
# record is what counts, and only larger appends (a follower's, a replay's) overlap.
# A batch that fails is cut off the file before anything about it is recorded.
OVERLAP_CRC_BYTES = 1024 * 1024
_crc_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="odradek-crc")


# compression.type other than "producer": the codec stored batches must have. A batch
# produced with another codec is decoded and re-encoded (records, offsets, timestamps,
# headers and producer fields kept), as Kafka does; this is the one append path that
# touches records, and only for topics configured so.
TARGET_CODECS = {"uncompressed": codecs.NONE, "none": codecs.NONE, "gzip": codecs.GZIP,
                 "snappy": codecs.SNAPPY, "lz4": codecs.LZ4, "zstd": codecs.ZSTD}


def _recompress(view: memoryview, codec: int) -> memoryview:
    if all(h.compression == codec for _, h in rb.iter_headers(view, crc=False)):
        return view
    out = []
    for pos, header in rb.iter_headers(view):  # CRCs checked before re-encoding
        raw = view[pos : pos + header.size]
        if header.compression == codec or header.is_control:
            out.append(bytes(raw))
            continue
        decoded = builder.decode_batch(bytes(raw))
        out.append(builder.rebuild_batch(header, decoded.records, codec=codec))
    return memoryview(b"".join(out))


_I64 = struct.Struct(">q")
# baseOffset, batchLength, partitionLeaderEpoch: a batch's first 16 bytes as the leader
# writes them (batchLength as received; the CRC starts after them).
_OFFSET_LENGTH_EPOCH = struct.Struct(">qii")


def _check_crcs(view: memoryview, batches: Sequence[tuple[int, BatchHeader]]) -> None:
    for pos, header in batches:
        rb.check_crc(view, pos, header)


class Log:
    """One topic partition's log in its own directory ``<topic>-<partition>/``."""

    def __init__(self, directory: str, config: LogConfig, *, clock: Clock = wall_clock_ms) -> None:
        self.directory = directory
        self.config = config
        self.clock = clock
        self.lock = threading.RLock()
        self._sync_lock = threading.Lock()  # one sync() at a time
        self.segments: list[LogSegment] = []
        self._bases: list[int] = []  # first offset of every segment, for bisect
        self.log_start_offset = 0
        self.recovery_point = 0  # every offset below this is known to be on disk
        # Bumped by every truncation (under the lock): sync() and flush_rolled() sync
        # without the lock and must not move the recovery point past a cut made
        # meanwhile (data written again there since is not synced).
        self._truncations = 0
        self._unflushed_messages = 0
        self._last_flush_ms = clock()
        # (close deadline, segment, unlink its files): closed after file.delete.delay.ms
        self._retired: list[tuple[int, LogSegment, bool]] = []
        self.producer_state = ProducerStateManager()
        self._txn_indexes: dict[int, TransactionIndex] = {}  # segment base -> its index
        self.cleaning = False  # while set, retired files stay open: the cleaner reads them
        self.closed = False
        # Where each leader epoch starts; Log.open loads it from its file.
        self.leader_epochs = LeaderEpochCache(
            os.path.join(directory, LEADER_EPOCH_CHECKPOINT_FILE))
        # While False, the high watermark is the log end (nothing to wait for) and
        # _high_watermark is only kept in range, ready for when it becomes True.
        self.replicated = False
        self._high_watermark = 0  # in [log_start_offset, log_end_offset]
        # Tiered storage (remote.storage.enable): the last offset the remote tier holds
        # (-1: none), set by the remote log manager; local retention deletes only
        # segments at or below it. ``log_start_offset`` is then the start of the whole
        # log, remote part included (Kafka's logStartOffset), and
        # ``local_log_start_offset`` the first offset on this disk.
        self.highest_remote_offset = -1
        # A tiered log's producer state at each roll, by the new segment's base offset:
        # copied with the segment before it (Kafka's LogSegmentData producer snapshot),
        # then dropped. In memory only: after a restart the newest snapshot file is used.
        self.roll_snapshots: dict[int, bytes] = {}
        # The read cursor: (segment, position, header, offset) of the batch right after
        # what the last read returned, and the offset a sequential reader asks for next.
        # The header is the one that read had to look at anyway, or None when the read
        # ended at the segment's end (a consumer at the tail: the next batch is not
        # written yet, but it will start there). A consumer's next fetch starts there,
        # and the cursor spares it the index search and the walk from the index entry.
        # Checked before use (same segment still in the log, the batch inside it) and
        # dropped whenever batches are removed or replaced (_retire, truncate_to,
        # replace_segment).
        self._cursor: tuple[LogSegment, int, BatchHeader | None, int] | None = None

    # --- opening -----------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        directory: str,
        config: LogConfig | None = None,
        *,
        log_start_offset: int = 0,
        recovery_point: int = 0,
        clean_shutdown: bool = False,
        clock: Clock = wall_clock_ms,
        high_watermark: int | None = None,
        replicated: bool | None = None,
    ) -> Log:
        """Open (or create) the log in ``directory``.

        After a clean shutdown the files are trusted. Otherwise every segment from the
        one holding ``recovery_point`` on is validated batch by batch (CRC included) and
        its indexes rebuilt; the log is cut at the first torn or corrupt batch and any
        later segments are deleted. Work is proportional to data after the recovery point.

        Leader epochs come from ``leader-epoch-checkpoint``; after an unclean stop the
        entries from the first validated segment on are re-derived from the headers of
        its batches (the file is only synced with the data below the recovery point).

        ``high_watermark`` is the checkpointed one (``replication-offset-checkpoint``),
        clamped to the recovered log; without it a replicated log starts from its log
        start, as a Kafka replica restarting without a checkpoint does. ``replicated``
        defaults to whether a checkpointed high watermark was given: only replicated logs
        are checkpointed, so a log found in that file was one when it was written.
        """
        return log_loader.load(
            cls(directory, config or LogConfig(), clock=clock),
            log_start_offset=log_start_offset, recovery_point=recovery_point,
            clean_shutdown=clean_shutdown, high_watermark=high_watermark,
            replicated=replicated)

    # Bound from log_loader: the header walk, which the open looks up on the log (tests
    # replace it to see whether an open walks), and the producer-state replay, which a
    # truncation (local_log) runs again.
    _epoch_starts_from_headers = log_loader.epoch_starts_from_headers
    _load_producer_state = log_loader.load_producer_state

    # --- producer state (appends, markers, and the replay at open) --------------------

    def _txn_index(self, base: int) -> TransactionIndex:
        index = self._txn_indexes.get(base)
        if index is None:
            path = os.path.join(self.directory, segment_name(base) + TXN_INDEX_SUFFIX)
            index = self._txn_indexes[base] = TransactionIndex(path)
        return index

    def _complete_txn(self, done: CompletedTxn | None, segment_base: int) -> None:
        """Index an aborted transaction (once: replays after a snapshot meet markers
        that may already be indexed)."""
        if done is None or not done.aborted:
            return
        index = self._txn_index(segment_base)
        if done.last_offset <= index.last_offset:
            return
        lso = self.producer_state.first_unstable_offset()
        index.append(AbortedTxn(done.producer_id, done.first_offset, done.last_offset,
                                done.last_offset + 1 if lso is None else lso))

    def _update_producer_state(self, data: bytes | bytearray | memoryview, header: BatchHeader,
                               base: int, segment_base: int) -> None:
        """Record one appended (or replayed) batch of a producer; ``data`` holds the
        batch, only decoded for a control batch (a marker)."""
        if not header.is_control:
            self.producer_state.update(header, base)
            return
        decoded = builder.decode_batch(bytes(data))
        kind, coordinator_epoch = -1, -1
        if decoded.records:
            record = decoded.records[0]
            try:
                kind = builder.control_type(record)
                if record.value is not None and len(record.value) >= 6:
                    coordinator_epoch = int.from_bytes(record.value[2:6], "big", signed=True)
            except CorruptRecordError:
                kind = -1
        done = self.producer_state.update(header, base, control_type=kind,
                                          coordinator_epoch=coordinator_epoch)
        self._complete_txn(done, segment_base)


    # --- properties --------------------------------------------------------------------

    @property
    def active(self) -> LogSegment:
        return self.segments[-1]

    @property
    def log_end_offset(self) -> int:
        # Read on every produce, fetch and replica step (a dozen times per replicated
        # produce on the leader): the active segment once, no call to max().
        active = self.segments[-1]
        end, base = active.next_offset, active.base_offset
        return end if end >= base else base

    @property
    def local_log_start_offset(self) -> int:
        """The first offset on the local disk: the log start, or above it where a
        tiered log's oldest segments are only in the remote tier."""
        if not self.config.remote_storage_enable:
            return self.log_start_offset
        base = self._bases[0]
        start = self.log_start_offset
        return base if base > start else start

    @property
    def tiered(self) -> bool:
        """Whether rolled segments go to the remote tier (``remote.storage.enable``)."""
        return self.config.remote_storage_enable

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    @property
    def name(self) -> str:
        return os.path.basename(self.directory)

    # --- appending ---------------------------------------------------------------------

    def append(
        self,
        records: bytes | bytearray | memoryview,
        *,
        leader_epoch: int | None = None,
        assign_offsets: bool = True,
        flush: bool = True,
    ) -> AppendInfo:
        """Validate and append one or more whole batches.

        As leader (``assign_offsets``) the batches get consecutive offsets from the log
        end, written into their headers on the way to disk (outside the CRC, so no byte
        is copied or checksummed again); the producer rules of Kafka's LogValidator
        apply. As follower the batches keep their offsets, which must continue the log.
        Nothing is written unless every batch passes.

        Leader epochs: as leader, ``leader_epoch`` is stamped on every batch and, when it
        is above the latest known epoch, recorded as starting at the first offset; as
        follower, each batch's own partition leader epoch is recorded at its base offset
        when it is above every epoch before it. The entry is recorded in memory before the
        data is written; the flushes write and sync the file before the recovery point
        covers the data, and recovery re-derives what lies above it from the headers.

        ``flush=False`` leaves ``flush.messages`` to the caller: the append never waits
        for an fsync, and when ``flush_due`` the caller calls ``sync()`` (off the event
        loop), so that requests arriving meanwhile share the next fsync (group commit).
        """
        view = memoryview(records)
        cfg = self.config
        log_append_time = (
            self.clock() if cfg.message_timestamp_type == "LogAppendTime" and assign_offsets
            else -1
        )
        target_codec = TARGET_CODECS.get(cfg.compression_type)
        if target_codec is not None and assign_offsets:
            view = _recompress(view, target_codec)
        if log_append_time >= 0:
            view = memoryview(bytearray(view))  # the header changes under the CRC: copy
        end = len(view)
        # Big appends check CRCs on the helper thread during the write (not when the
        # header must change under the CRC: that has to be checked before it is redone).
        overlap = end >= OVERLAP_CRC_BYTES and log_append_time < 0
        # The loop below runs once per batch of every produce request (with many
        # partitions, a batch of a few records each), so it is written out flat: no
        # generator, one list per purpose, and the 16 bytes before the leader epoch's
        # end packed in one go.
        batches: list[tuple[int, BatchHeader]] = []  # (new base offset, header)
        positions: list[int] = []  # where each batch starts in ``view``
        buffers: list[bytes | memoryview] = []
        pending: dict[int, tuple[int, int]] = {}  # producer id -> (epoch, last sequence)
        state = self.producer_state
        max_message_bytes = cfg.max_message_bytes
        check_frame, check_crc = rb.check_frame, rb.check_crc
        with self.lock:
            next_offset = self.log_end_offset
            first_offset = next_offset
            # A follower's batches carry their epochs: (epoch, start offset) of those
            # above every epoch before them. The leader path leaves both alone.
            latest_epoch = -1 if assign_offsets else self.leader_epochs.latest_epoch
            new_epochs: list[tuple[int, int]] | None = None
            record_count = 0
            max_timestamp = rb.NO_TIMESTAMP
            producers = False  # any batch with a producer id: its state moves too
            pos = 0
            while pos < end:
                header = check_frame(view, pos, end)
                if not overlap:
                    check_crc(view, pos, header)
                size = header.batch_length + rb.LOG_OVERHEAD_SIZE
                if size > max_message_bytes:
                    raise RecordTooLargeError(
                        f"batch of {size} bytes exceeds max.message.bytes "
                        f"({max_message_bytes})"
                    )
                if header.producer_id >= 0:
                    producers = True
                if assign_offsets:
                    rb.check_producer_batch(header)
                    if header.producer_id >= 0:
                        duplicate = state.find_duplicate(header)
                        if duplicate is not None and pos == 0 and size == end:
                            if overlap:  # a retry is answered only if it is intact
                                check_crc(view, pos, header)
                            return AppendInfo(duplicate.first_offset, duplicate.last_offset,
                                              header.max_timestamp, log_append_time,
                                              header.record_count, self.log_start_offset,
                                              (header,), True)
                        state.check(header, pending)
                    base = next_offset
                    if log_append_time >= 0:
                        rb.set_log_append_time(view, log_append_time, pos)
                        header = header._replace(max_timestamp=log_append_time)
                    if leader_epoch is None:
                        buffers.append(_I64.pack(base))
                        buffers.append(view[pos + 8 : pos + size])
                    else:
                        buffers.append(_OFFSET_LENGTH_EPOCH.pack(base, header.batch_length,
                                                                 leader_epoch))
                        buffers.append(view[pos + 16 : pos + size])
                else:
                    base = header.base_offset
                    if base < next_offset:
                        raise InvalidOffsetError(
                            f"batch at offset {base} does not continue the log at {next_offset}"
                        )
                    if not batches:
                        first_offset = base
                    if header.is_control and header.producer_id >= 0:
                        # A marker is decoded after the write (its producer's state
                        # moves): one that does not decode is refused now, before anything
                        # is written, not after (the fuzz tier's follower_batches found
                        # a refused append that had moved the log end). Markers are rare:
                        # this costs nothing on the hot path.
                        builder.decode_batch(bytes(view[pos : pos + size]))
                    if header.partition_leader_epoch > latest_epoch:
                        latest_epoch = header.partition_leader_epoch
                        if new_epochs is None:
                            new_epochs = []
                        new_epochs.append((latest_epoch, base))
                    buffers.append(view[pos : pos + size])
                batches.append((base, header))
                positions.append(pos)
                next_offset = base + header.last_offset_delta + 1
                record_count += header.record_count
                if header.max_timestamp > max_timestamp:
                    max_timestamp = header.max_timestamp
                pos += size
            if not batches:
                raise CorruptRecordError("no record batch in the appended data")
            # Once per append (a new epoch is rare: a leader change), before the data: if
            # the data's write fails, the entry stays at the log end, describing no data,
            # and is replaced or cut by whatever comes next there.
            if assign_offsets:
                if leader_epoch is not None and leader_epoch > self.leader_epochs.latest_epoch:
                    self.leader_epochs.assign(leader_epoch, first_offset)
            elif new_epochs is not None:
                self.leader_epochs.assign_all(new_epochs)
            self._maybe_roll(end, first_offset, next_offset - 1, max_timestamp)
            active = self.segments[-1]
            if overlap:
                located = [(p, h) for p, (_, h) in zip(positions, batches, strict=True)]
                crc_check: Future[None] = _crc_pool.submit(_check_crcs, view, located)
                active.append(buffers, batches, before_commit=crc_check.result)
            else:
                active.append(buffers, batches)
            if producers:
                segment_base = active.base_offset
                for (base, header), pos in zip(batches, positions, strict=True):
                    if header.producer_id >= 0:
                        if header.is_control:  # a follower copying a marker
                            self._update_producer_state(view[pos : pos + header.size],
                                                        header, base, segment_base)
                        else:
                            state.update(header, base)
            self._count_unflushed(record_count)
            if flush and self._unflushed_messages >= cfg.flush_messages:
                self.flush()
            return AppendInfo(first_offset, next_offset - 1, max_timestamp, log_append_time,
                              record_count, self.log_start_offset,
                              tuple([h for _, h in batches]))

    def check_keys(self, records: bytes | bytearray | memoryview) -> None:
        """What Kafka's LogValidator requires of produced records in a compacted topic
        (the produce path calls this when ``config.compacts``): a key on each. A batch
        with keyless records raises RecordValidationError (INVALID_RECORD) with an error
        per keyless record, in Kafka's words. Corrupt batches raise CorruptRecordError."""
        view = memoryview(records)
        end = len(view)
        pos = 0
        while pos < end:
            header = rb.check_frame(view, pos, end)
            keyless = builder.keyless_records(view[pos : pos + header.size])
            if keyless:
                text = ("Compacted topic cannot accept message without key in topic "
                        f"partition {self.name}")
                errors = [(index, text) for index in keyless]
                shown = ", ".join(f"RecordError(batchIndex={i}, message='{m}')"
                                  for i, m in errors[:3])
                raise RecordValidationError(
                    f"One or more records have been rejected due to {len(errors)} record "
                    f"errors in total, and only showing the first three errors at most: "
                    f"[{shown}]", errors)
            pos += header.size

    def append_marker(
        self,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        *,
        coordinator_epoch: int,
        leader_epoch: int | None = None,
        timestamp: int | None = None,
    ) -> AppendInfo:
        """Write a COMMIT or ABORT control batch for ``producer_id`` at the log end (what
        a WriteTxnMarkers request does in each partition). Ends the producer's open
        transaction, if any: an aborted one is indexed in the active segment's
        ``.txnindex``. A marker of a newer producer epoch fences the older epoch;
        one of an older producer epoch raises InvalidProducerEpochError, of an older
        coordinator epoch TransactionCoordinatorFencedError."""
        state = self.producer_state
        now = self.clock() if timestamp is None else timestamp
        with self.lock:
            state.check_marker(producer_id, producer_epoch, coordinator_epoch)
            base = self.log_end_offset
            data = bytearray(builder.build_control_batch(
                builder.CONTROL_COMMIT if commit else builder.CONTROL_ABORT,
                producer_id=producer_id, producer_epoch=producer_epoch,
                coordinator_epoch=coordinator_epoch, timestamp=now, base_offset=base))
            if leader_epoch is not None:
                rb.set_partition_leader_epoch(data, leader_epoch)
                if leader_epoch > self.leader_epochs.latest_epoch:
                    self.leader_epochs.assign(leader_epoch, base)
            header = rb.read_header(data)
            self._maybe_roll(header.size, base, base, header.max_timestamp)
            self.active.append([bytes(data)], [(base, header)])
            self._update_producer_state(data, header, base, self.active.base_offset)
            self._count_unflushed(1)
            if self._unflushed_messages >= self.config.flush_messages:
                self.flush()
            return AppendInfo(base, base, header.max_timestamp, -1, 1,
                              self.log_start_offset, (header,))

    # --- high watermark ----------------------------------------------------------------

    @property
    def high_watermark(self) -> int:
        """The end of the committed data: the log end while the log is not replicated
        (one copy: everything appended is committed), else the one replication set
        (``set_high_watermark``), which is never above the log end."""
        if not self.replicated:
            return self.log_end_offset
        return self._high_watermark

    def set_high_watermark(self, offset: int) -> int:
        """Set the replicated high watermark (Kafka's updateHighWatermark: a follower
        takes the leader's, cut to its own log end), clamped to [log start, log end];
        returns the value set. It may move down here, and through truncation, only.
        While the log is not replicated the value is kept for when it becomes so."""
        with self.lock:
            hw = min(max(offset, self.log_start_offset), self.log_end_offset)
            self._high_watermark = hw
            return hw

    def set_replicated(self, replicated: bool) -> None:
        """Make the log replicated (its high watermark then waits for replication,
        starting from the checkpointed one it was opened with, else its log start) or a
        single copy again (the high watermark is the log end)."""
        with self.lock:
            self.replicated = replicated

    # --- leader epochs -----------------------------------------------------------------

    @property
    def latest_epoch(self) -> int:
        """The latest leader epoch with data in this log (-1: none recorded)."""
        return self.leader_epochs.latest_epoch

    def assign_leader_epoch(self, epoch: int) -> int:
        """Record ``epoch`` as starting at the log end, at the moment this replica
        becomes its leader, and return that offset (the epoch's start offset). Kafka's
        makeLeader does this (maybeAssignEpochStartOffset), so the entry is written at
        the election rather than by the first produce; an epoch that is not above the
        latest is left as it is (``LeaderEpochCache.assign``)."""
        with self.lock:
            start = self.log_end_offset
            self.leader_epochs.assign(epoch, start)
            return start

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """(epoch, end offset) for an OffsetsForLeaderEpoch request: the largest epoch
        <= ``epoch`` and the offset where it ended (the log end for the latest epoch);
        (-1, -1) when unknown. See ``LeaderEpochCache.end_offset_for``."""
        with self.lock:
            return self.leader_epochs.end_offset_for(epoch, self.log_end_offset)

    # --- transactions ------------------------------------------------------------------

    @property
    def last_stable_offset(self) -> int:
        """The first offset of the earliest open transaction (not below the log start),
        else the high watermark: read_committed consumers read up to, not including, it."""
        hw = self.high_watermark
        first = self.producer_state.first_unstable_offset()
        if first is None:
            return hw
        return min(hw, max(first, self.log_start_offset))

    def aborted_transactions(self, start_offset: int, end_offset: int) -> list[AbortedTxn]:
        """The aborted transactions that overlap offsets [start_offset, end_offset), in
        marker order: (producer id, first offset, ...) for a read_committed fetch."""
        with self.lock:
            i = max(0, bisect.bisect_right(self._bases, start_offset) - 1)
            out: list[AbortedTxn] = []
            for base in self._bases[i:]:
                index = self._txn_indexes.get(base)
                if index is not None:
                    out.extend(index.overlapping(start_offset, end_offset))
            return out

    def read_committed(self, offset: int, max_bytes: int, *, min_one: bool = True
                       ) -> CommittedRead:
        """A read_committed read: whole batches from ``offset`` that end below the last
        stable offset, the LSO, and the aborted transactions overlapping what is
        returned (the fetch response's AbortedTransactions: the consumer drops those
        producers' records from each transaction's first offset to its marker)."""
        with self.lock:
            lso = self.last_stable_offset
            result = self.read(offset, max_bytes, max_offset=lso, min_one=min_one)
            aborted = (self.aborted_transactions(result.first_offset, lso)
                       if result.region is not None else [])
            return CommittedRead(result, lso, aborted)

    def _maybe_roll(
        self, incoming: int, first_offset: int, last_offset: int, max_timestamp: int
    ) -> None:
        active = self.active
        cfg = self.config
        if active.size == 0:
            if active.base_offset != first_offset and first_offset > active.base_offset:
                # A follower append that skips offsets into an empty segment: start a
                # segment at the new base so offsets stay relative-addressable.
                self.roll(first_offset)
            return
        full = active.size + incoming > cfg.segment_bytes
        # segment.ms compares the incoming batch's timestamp with the segment's first
        # batch, as Kafka does (LogSegment.shouldRoll), not the wall clock.
        old = (
            active.rolling_timestamp is not None
            and max_timestamp - active.rolling_timestamp > cfg.segment_ms
        )
        index_full = len(active.offset_index) >= cfg.segment_index_bytes // 8 - 1
        overflow = last_offset - active.base_offset > MAX_RELATIVE_OFFSET
        if full or old or index_full or overflow:
            self.roll(first_offset)

    # --- rolling and flushing (local_log.py) -------------------------------------------

    roll = local_log.roll

    # Told (with the log) when the log gets work for ``maybe_flush``: its first records
    # not yet synced since a flush (flush.ms starts counting), or records after a roll
    # whose segment is not synced yet. The log manager sets it, so that its flush duty
    # visits the logs with work due instead of every log every second (with 10,000
    # partitions that walk cost 14-40 ms a second on an idle broker). None for a log
    # used on its own.
    flush_watcher: Callable[[Log], None] | None = None
    # Told the seconds each flush of data took (its segments' fsyncs and the epoch
    # file's: Kafka's LogFlushStats LogFlushRateAndTimeMs), on the flushing thread. The
    # log manager sets it (the broker's metrics); None costs one test per flush.
    flush_timer: Callable[[float], None] | None = None

    def _count_unflushed(self, count: int) -> None:
        """Add appended records to what ``flush.messages`` counts (under the log's lock);
        the first since a flush, or any after a roll whose segment is not synced yet,
        tells the watcher."""
        first = not self._unflushed_messages
        self._unflushed_messages += count
        if self.flush_watcher is not None and (
            first or self.recovery_point < self.segments[-1].base_offset
        ):
            self.flush_watcher(self)

    @property
    def flush_due(self) -> bool:
        """More messages than ``flush.messages`` are not yet synced."""
        return self._unflushed_messages >= self.config.flush_messages

    flush_deadline = local_log.flush_deadline
    flush = local_log.flush
    sync = local_log.sync
    maybe_flush = local_log.maybe_flush
    flush_rolled = local_log.flush_rolled

    # --- reading -----------------------------------------------------------------------

    def read(
        self,
        offset: int,
        max_bytes: int,
        *,
        max_offset: int | None = None,
        min_one: bool = True,
    ) -> ReadResult:
        """Whole batches from the one holding ``offset``, up to ``max_bytes`` (at least
        one batch when ``min_one``, as Kafka returns for the first partition of a fetch),
        none at or past ``max_offset`` (the high watermark or last stable offset)."""
        with self.lock:
            start, end = self.log_start_offset, self.log_end_offset
            if offset < start or offset > end:
                raise OffsetOutOfRangeError(offset, start, end)
            if offset < self._bases[0] and self.config.remote_storage_enable:
                # Below the local disk, in the remote tier. (A compacted log's first
                # segment may start above its log start too: the cleaner removed the
                # segments whose records were all obsolete; a read goes on past them.)
                raise OffsetMovedToTieredStorageError(offset, start, end, self._bases[0])
            limit = end if max_offset is None else min(max_offset, end)
            if offset >= limit:
                return ReadResult(None, offset, start, end)
            i = max(0, bisect.bisect_right(self._bases, offset) - 1)
            cursor = self._cursor
            hint = None
            if cursor is not None and cursor[3] == offset and cursor[0] is self.segments[i]:
                segment, position, header, _ = cursor
                if header is None and position < segment.size:
                    # Appended since: batches go on whole and in offset order, so the one
                    # starting here is the first whose last offset is >= ``offset``.
                    header = segment.read_header(position)
                if header is not None and position + header.size <= segment.size:
                    hint = position, header
            for segment in self.segments[i:]:
                if segment.base_offset >= limit:
                    break
                found = segment.read(offset, max_bytes, limit, min_one, hint)
                hint = None  # only for the segment it was taken from
                if found is not None:
                    position, length, first, after = found
                    if after is not None:
                        self._cursor = segment, after[0], after[1], after[1].base_offset
                    elif position + length == segment.size:
                        self._cursor = segment, segment.size, None, segment.next_offset
                    else:
                        self._cursor = None
                    return ReadResult(
                        FileRegion(segment.fd, position, length), first.base_offset, start, end
                    )
                if segment.next_offset > offset and segment.size:
                    # A batch exists but does not fit max_bytes and min_one is off.
                    return ReadResult(None, offset, start, end)
            return ReadResult(None, offset, start, end)

    # Lookups for ListOffsets and tools (local_log.py).
    read_batches = local_log.read_batches
    offset_for_timestamp = local_log.offset_for_timestamp
    offset_of_max_timestamp = local_log.offset_of_max_timestamp

    # --- changing the range, compaction, closing (local_log.py) ------------------------

    truncate_to = local_log.truncate_to
    truncate_fully_and_start_at = local_log.truncate_fully_and_start_at
    delete_records_before = local_log.delete_records_before
    apply_retention = local_log.apply_retention
    pending_upload_bytes = local_log.pending_upload_bytes
    close_retired = local_log.close_retired
    replace_segment = local_log.replace_segment
    remove_segment = local_log.remove_segment
    close = local_log.close
    delete = local_log.delete
