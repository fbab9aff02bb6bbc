"""Log compaction: keep the latest record per key, with offsets preserved.

For logs with ``cleanup.policy`` ``compact`` (or ``compact,delete``) the cleaner, like
Kafka's LogCleaner:

1. splits the log into a *clean* head (already compacted, below the first dirty offset
   kept in ``cleaner-offset-checkpoint``), a *dirty* part (up to the active segment, and
   not younger than ``min.compaction.lag.ms``) and the active segment (never touched);
2. cleans only when dirty bytes / (clean + dirty) >= ``min.cleanable.dirty.ratio``;
3. maps every key in the dirty part to its last offset (bounded by ``max_map_entries``;
   when the map fills, this pass stops at a segment boundary and the next goes on);
4. rewrites each segment from the log start to the end of the mapped part, keeping a
   record when no later record has its key, and dropping tombstones once their batch's
   delete horizon (``delete.retention.ms`` after the pass that first kept them, KIP-534)
   has passed. Batches keep their base offset and offset span, producer id, epoch and
   sequence, codec and leader epoch; untouched batches are copied byte for byte.

Crash safety (Kafka's swap protocol): a cleaned segment is written as ``X.log.cleaned``
(+ indexes), fsynced, renamed to ``X.log.swap`` — the commit point — and then renamed
over ``X.log``. On start the log discards ``.cleaned`` files and completes ``.swap``
files, so a crash at any moment leaves either the old or the new segment, never both
and never neither. A segment whose records are all obsolete is removed instead.

Reads are never blocked: the work reads old segments (immutable) outside the log's lock;
only the renames and the in-memory swap take it. Readers holding the old file keep a
valid descriptor until ``file.delete.delay.ms`` has passed.

Transactions (Kafka's CleanedTransactionMetadata): only segments wholly below the last
stable offset are cleaned (an open transaction's outcome is unknown). Records of aborted
transactions (the log's ``.txnindex`` entries) neither enter the offset map nor survive
a pass. A marker (control batch) gets a delete horizon like a tombstone and is removed
once the horizon has passed and none of its transaction's records remain before it;
until then it stays, so replaying the log never finds a transaction's records without
the marker that ends it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from odradek.records import builder
from odradek.records.batch import BatchHeader, read_header
from odradek.storage import checkpoint
from odradek.storage.local_log import CLEANED_SUFFIX, SWAP_SUFFIX
from odradek.storage.log import Clock, Log, wall_clock_ms
from odradek.storage.segment import LOG_SUFFIX, LogSegment
from odradek.storage.txn_index import AbortedTxn

log = logging.getLogger(__name__)

CHECKPOINT_FILE = "cleaner-offset-checkpoint"

# Kafka bounds its offset map by log.cleaner.dedupe.buffer.size (128 MiB of 24-byte
# slots). Python keeps exact keys in a dict (no hash collisions can drop a live record),
# at roughly 100-200 bytes an entry: a million keys is of the same order of memory.
DEFAULT_MAX_MAP_ENTRIES = 1_000_000

NO_HORIZON = 2**63 - 1

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class CleanResult:
    first_dirty_offset: int
    end_offset: int  # the new first dirty offset
    segments_rewritten: int
    segments_removed: int
    bytes_before: int
    bytes_after: int
    records_removed: int


class LogCleaner:
    """Compacts the logs of one data directory; its progress lives in a checkpoint."""

    def __init__(
        self,
        data_dir: str,
        *,
        clock: Clock = wall_clock_ms,
        max_map_entries: int = DEFAULT_MAX_MAP_ENTRIES,
    ) -> None:
        self.data_dir = data_dir
        self.clock = clock
        self.max_map_entries = max_map_entries
        self.path = os.path.join(data_dir, CHECKPOINT_FILE)
        self.first_dirty: dict[TopicPartition, int] = checkpoint.read_checkpoint(self.path)
        # Earliest tombstone delete horizon seen in each log's last pass (KIP-534): a log
        # whose horizon has passed is cleaned even with no dirty data, or its tombstones
        # would stay forever. Unknown after a start: one pass finds out.
        self._horizons: dict[TopicPartition, int] = {}

    def forget(self, tp: TopicPartition) -> None:
        """A deleted topic partition's progress is dropped."""
        if self.first_dirty.pop(tp, None) is not None:
            checkpoint.write_checkpoint(self.path, self.first_dirty)

    # --- choosing what to clean --------------------------------------------------------

    def _cleanable(self, tp: TopicPartition, lg: Log, now: int) -> tuple[int, list[LogSegment],
                                                                           int, int]:
        """(first dirty offset, segments that may be rewritten, index of the first dirty
        one among them, dirty bytes)."""
        with lg.lock:
            segments = list(lg.segments[:-1])  # never the active segment
            first_dirty = max(self.first_dirty.get(tp, 0), lg.log_start_offset)
            lso = lg.last_stable_offset
        for i, seg in enumerate(segments):  # nothing at or past an open transaction
            if seg.next_offset > lso:
                segments = segments[:i]
                break
        lag = lg.config.min_compaction_lag_ms
        if lag > 0:
            # Records younger than the lag stay as they are: stop at the first young one.
            for i, seg in enumerate(segments):
                if seg.max_timestamp > now - lag:
                    segments = segments[:i]
                    break
        first_dirty_index = len(segments)
        for i, seg in enumerate(segments):
            if seg.next_offset > first_dirty:
                first_dirty_index = i
                break
        dirty_bytes = sum(s.size for s in segments[first_dirty_index:])
        return first_dirty, segments, first_dirty_index, dirty_bytes

    def dirty_ratio(self, tp: TopicPartition, lg: Log, now: int | None = None) -> float:
        now = self.clock() if now is None else now
        _, segments, _, dirty = self._cleanable(tp, lg, now)
        total = sum(s.size for s in segments)
        return dirty / total if total else 0.0

    def clean_once(self, logs: Iterable[tuple[TopicPartition, Log]],
                   now: int | None = None) -> list[tuple[TopicPartition, CleanResult]]:
        """One pass: clean every compacted log whose dirty ratio reaches its minimum."""
        now = self.clock() if now is None else now
        done = []
        for tp, lg in logs:
            if not lg.config.compacts or lg.closed:
                continue
            due = self._horizons.get(tp, 0) <= now
            if due or self.dirty_ratio(tp, lg, now) >= lg.config.min_cleanable_dirty_ratio:
                result = self.clean(tp, lg, now)
                if result is not None:
                    done.append((tp, result))
        return done

    # --- cleaning ----------------------------------------------------------------------

    def clean(self, tp: TopicPartition, lg: Log, now: int | None = None) -> CleanResult | None:
        """Clean one log now, whatever its dirty ratio. None when nothing is cleanable."""
        now = self.clock() if now is None else now
        first_dirty, segments, dirty_index, _ = self._cleanable(tp, lg, now)
        if not segments or (dirty_index >= len(segments) and self._horizons.get(tp, 0) > now):
            return None
        end_offset = segments[-1].next_offset
        aborted = _Aborted(lg.aborted_transactions(0, end_offset))
        latest, end_index = self._build_offset_map(segments, dirty_index, aborted)
        to_clean = segments[:end_index]
        end_offset = segments[end_index].base_offset if end_index < len(segments) else (
            min(lg.active.base_offset, end_offset)
        )
        retained: dict[int, bool] = {}  # producer id -> its transaction kept records
        lg.cleaning = True
        horizon = NO_HORIZON
        try:
            rewritten = removed = records_removed = 0
            before = after = 0
            for segment in to_clean:
                outcome = self._clean_segment(lg, segment, latest, now, aborted, retained)
                if outcome is None:
                    continue  # the segment left the log meanwhile
                kind, kept_bytes, dropped, segment_horizon = outcome
                horizon = min(horizon, segment_horizon)
                before += segment.size
                after += kept_bytes
                records_removed += dropped
                rewritten += kind == "rewritten"
                removed += kind == "removed"
        finally:
            lg.cleaning = False
        self._horizons[tp] = horizon
        self.first_dirty[tp] = end_offset
        checkpoint.write_checkpoint(self.path, self.first_dirty)
        result = CleanResult(first_dirty, end_offset, rewritten, removed, before, after,
                             records_removed)
        log.info("%s: cleaned offsets up to %d: %d -> %d bytes, %d records removed",
                 lg.name, end_offset, before, after, records_removed)
        return result

    def _build_offset_map(self, segments: list[LogSegment], dirty_index: int,
                          aborted: _Aborted) -> tuple[dict[bytes, int], int]:
        """Key -> last offset over the dirty segments, stopping at a segment boundary
        when the map would exceed its bound. Returns the map and the index of the first
        segment it does not cover."""
        latest: dict[bytes, int] = {}
        end = dirty_index
        for i in range(dirty_index, len(segments)):
            if len(latest) >= self.max_map_entries and i > dirty_index:
                break
            for decoded in _decode_segment(segments[i]):
                if decoded.header.is_control or aborted.holds(decoded.header):
                    continue
                for record in decoded.records:
                    if record.key is not None:
                        latest[record.key] = record.offset
            end = i + 1
        return latest, end

    def _clean_segment(self, lg: Log, segment: LogSegment, latest: dict[bytes, int],
                       now: int, aborted: _Aborted, retained: dict[int, bool],
                       ) -> tuple[str, int, int, int] | None:
        """Rewrite one segment; returns (what happened, bytes kept, records dropped,
        earliest delete horizon of the tombstones it kept)."""
        horizon_for_new = now + lg.config.delete_retention_ms
        out: list[tuple[bytes, BatchHeader]] = []
        dropped = 0
        changed = False
        earliest = NO_HORIZON
        for decoded, raw in _decode_segment_raw(segment):
            header = decoded.header
            if header.is_control:
                kept_data = retained.pop(header.producer_id, False)
                if header.has_delete_horizon:
                    if now >= header.base_timestamp and not kept_data:
                        changed = True  # a marker past its horizon, its records gone
                        continue
                    earliest = min(earliest, header.base_timestamp)
                    out.append((raw, header))
                else:
                    new = builder.rebuild_batch(header, decoded.records,
                                                delete_horizon=horizon_for_new)
                    earliest = min(earliest, horizon_for_new)
                    changed = True
                    out.append((new, read_header(new)))
                continue
            if header.is_transactional and aborted.holds(header):
                dropped += len(decoded.records)
                changed = True
                continue
            horizon = header.base_timestamp if header.has_delete_horizon else None
            kept = []
            for record in decoded.records:
                if record.key is not None and latest.get(record.key, -1) > record.offset:
                    continue  # a later record has this key
                if record.value is None and horizon is not None and now >= horizon:
                    continue  # a tombstone past its delete horizon
                kept.append(record)
            dropped += len(decoded.records) - len(kept)
            if kept and header.is_transactional:
                retained[header.producer_id] = True
            has_tombstone = any(r.value is None for r in kept)
            if has_tombstone:
                horizon = horizon_for_new if horizon is None else horizon
                earliest = min(earliest, horizon)
            if len(kept) == len(decoded.records) and (
                header.has_delete_horizon or not has_tombstone
            ):
                out.append((raw, header))  # untouched: copy byte for byte
                continue
            changed = True
            if not kept:
                continue
            new = builder.rebuild_batch(header, kept,
                                        delete_horizon=horizon if has_tombstone else None)
            out.append((new, read_header(new)))
        if not changed:
            return "unchanged", segment.size, 0, earliest
        if not out:
            return ("removed", 0, dropped, earliest) if lg.remove_segment(segment) else None
        swapped = self._swap_in(lg, segment, out)
        return None if swapped is None else ("rewritten", swapped, dropped, earliest)

    def _swap_in(self, lg: Log, old: LogSegment,
                 batches: list[tuple[bytes, BatchHeader]]) -> int | None:
        """Swap a cleaned copy in for ``old``; returns its size, None if ``old`` left."""
        directory = lg.directory
        cleaned = LogSegment(directory, old.base_offset, create=True, suffix=CLEANED_SUFFIX,
                             index_interval_bytes=lg.config.index_interval_bytes)
        try:
            cleaned.append([raw for raw, _ in batches],
                           [(h.base_offset, h) for _, h in batches])
            cleaned.flush()
            size = cleaned.size
            cleaned.close()
        except BaseException:
            cleaned.close(flush_indexes=False)
            cleaned.delete_files()
            raise
        stem = os.path.join(directory, f"{old.base_offset:020d}")
        with lg.lock:
            # Gone meanwhile: the segment (retention, truncation) or the whole log
            # (deleted, or moved to another log directory).
            if old not in lg.segments or old is lg.active or lg.closed:
                cleaned.delete_files()
                return None
            # The commit point: once the .swap exists, recovery completes the swap.
            os.replace(stem + LOG_SUFFIX + CLEANED_SUFFIX, stem + LOG_SUFFIX + SWAP_SUFFIX)
            checkpoint.fsync_dir(directory)
            os.replace(stem + ".index" + CLEANED_SUFFIX, stem + ".index")
            os.replace(stem + ".timeindex" + CLEANED_SUFFIX, stem + ".timeindex")
            os.replace(stem + LOG_SUFFIX + SWAP_SUFFIX, stem + LOG_SUFFIX)
            checkpoint.fsync_dir(directory)
            new = LogSegment(directory, old.base_offset, create=False,
                             index_interval_bytes=lg.config.index_interval_bytes)
            new.load()
            lg.replace_segment(old, new)
        return size


class _Aborted:
    """Which batches belong to aborted transactions, from the log's ``.txnindex``."""

    def __init__(self, entries: Iterable[AbortedTxn]) -> None:
        self.ranges: dict[int, list[tuple[int, int]]] = {}
        for e in entries:
            self.ranges.setdefault(e.producer_id, []).append((e.first_offset, e.last_offset))

    def holds(self, header: BatchHeader) -> bool:
        if not header.is_transactional or header.is_control:
            return False
        return any(first <= header.base_offset < last
                   for first, last in self.ranges.get(header.producer_id, ()))


def _decode_segment(segment: LogSegment) -> Iterator[builder.DecodedBatch]:
    for decoded, _ in _decode_segment_raw(segment):
        yield decoded


def _decode_segment_raw(segment: LogSegment) -> Iterator[tuple[builder.DecodedBatch, bytes]]:
    """Every batch of an (immutable) segment, decoded, with its raw bytes: one batch in
    memory at a time, however large the segment."""
    for position, header in segment.headers_from(0):
        raw = segment.read_bytes(position, header.size)
        yield builder.decode_batch(raw), raw
