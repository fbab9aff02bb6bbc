"""The partition log's segment list and its files (Kafka's LocalLog): rolling a segment,
the flush policy and the recovery point, lookups by timestamp, truncation, DeleteRecords,
time/size retention, the cleaner's swap of a segment, closing and deleting the log.

These are functions of the ``Log`` (``log.py``), bound there as its methods
(``Log.flush = local_log.flush``): callers and tests call and replace ``Log.flush`` and
the rest as before, and no call stands in between. They are the log's cold part, run once
per roll, flush, truncation or duty pass, never per batch appended or read. Each takes
``lg.lock`` where the method did; calls between them that were ``self.method()`` calls
of a public method still go through the log.

Rolls: ``Log._maybe_roll`` decides (it runs on every append, so it stays in ``log.py``);
``roll`` starts the new segment, replacing an empty active segment rather than leaving it
behind.

Flushing: everything below the recovery point is on disk. ``flush`` syncs under the
lock; ``sync`` (the group commit of ``flush=False`` appends) and ``flush_rolled`` (rolled
segments, by the duties thread) sync without it, so appends go on meanwhile, and do not
move the recovery point past a truncation made meanwhile (``lg._truncations``). The
leader epoch file is synced before the recovery point covers the data: recovery trusts
the file below it.

Retired segments: a segment that leaves the log (retention, DeleteRecords, truncation,
the cleaner's removal) has its files renamed ``.deleted``; one the cleaner replaced has
had its files replaced under the same names. Either way its descriptors stay open for
``file.delete.delay.ms`` (``close_retired``), so a region already handed to ``sendfile``
stays valid, and longer while the cleaner runs (``lg.cleaning``): it reads them.

Compaction (Kafka's swap protocol, see ``cleaner``): a cleaner output is written as
``.cleaned``, renamed ``.swap`` (the commit point) and then over the segment's files;
``replace_segment`` puts it in the list, ``remove_segment`` drops a segment found fully
obsolete. ``log_loader`` completes or undoes a swap a crash interrupted.
"""

from __future__ import annotations

import bisect
import logging
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from odradek.records import builder
from odradek.storage.config import LONG_MAX
from odradek.storage.errors import KafkaStorageError, OffsetOutOfRangeError
from odradek.storage.producer_state import SNAPSHOT_SUFFIX, ProducerStateManager
from odradek.storage.segment import LogSegment

if TYPE_CHECKING:
    from odradek.storage.log import Log

# The partition log's logger, whichever of its modules speaks: the lines read as before
# the split, and ``log.level.odradek.storage.log`` still sets their level.
log = logging.getLogger("odradek.storage.log")

DELETED_SUFFIX = ".deleted"  # retired files, closed after file.delete.delay.ms
CLEANED_SUFFIX = ".cleaned"  # a cleaner's output being written: discarded on recovery
SWAP_SUFFIX = ".swap"  # a finished, synced cleaner output: swapped in on recovery


# --- rolling -----------------------------------------------------------------------------


def roll(lg: Log, base_offset: int | None = None) -> LogSegment:
    """Close the active segment for writes and start a new one.

    The old segment is not synced here: an fsync of up to a segment's worth of dirty
    pages would stall every append behind it (0.6 s for 1 GiB measured here). As in
    Kafka, it is synced in the background (``flush_rolled``, run by the duties
    thread); until then it stays above the recovery point and is validated after an
    unclean stop."""
    with lg.lock:
        base = lg.log_end_offset if base_offset is None else base_offset
        if lg.active.size == 0 and lg.active.base_offset == base:
            return lg.active
        lg.active.offset_index.flush(fsync=False)  # entries out of memory: written
        lg.active.time_index.flush(fsync=False)
        if lg.config.remote_storage_enable:
            lg.roll_snapshots[base] = lg.producer_state.snapshot_bytes()
        return add_segment(lg, base)


def add_segment(lg: Log, base_offset: int) -> LogSegment:
    if lg.segments and lg.active.size == 0:
        # An empty active segment is replaced rather than left behind.
        empty = lg.segments.pop()
        lg._bases.pop()
        empty.close(flush_indexes=False)
        empty.delete_files()
    segment = LogSegment(
        lg.directory,
        base_offset,
        index_interval_bytes=lg.config.index_interval_bytes,
        create=True,
    )
    lg.segments.append(segment)
    lg._bases.append(base_offset)
    return segment


# --- flushing ----------------------------------------------------------------------------


def flush_deadline(lg: Log) -> int | None:
    """When ``maybe_flush`` has work next (this log's clock, ms; a time already past
    means now), or None while it has none: nothing unsynced, or only what
    ``flush.ms`` (default: never) leaves to the page cache. Under the lock: the
    duties thread asks too, and a truncation empties the segment list for a moment."""
    with lg.lock:
        if lg.recovery_point < lg.segments[-1].base_offset:
            return lg._last_flush_ms  # rolled segments to sync: due at once
        if lg.config.flush_ms >= LONG_MAX:
            return None
        if lg._unflushed_messages or lg.recovery_point < lg.log_end_offset:
            return lg._last_flush_ms + lg.config.flush_ms
        return None


def flush(lg: Log) -> None:
    """fsync everything not yet synced, the leader epoch file included, and move the
    recovery point to the log end."""
    with lg.lock:
        end = lg.log_end_offset
        if lg.recovery_point >= end and lg._unflushed_messages == 0:
            # No data to sync; a changed epoch file still is (an election's entry, a
            # truncation): close() relies on this for a clean stop.
            lg.leader_epochs.flush()
            return
        start = max(0, bisect.bisect_right(lg._bases, lg.recovery_point) - 1)
        started = time.perf_counter()
        for segment in lg.segments[start:]:
            segment.flush()
        # Before the recovery point covers the data: recovery trusts the file below it.
        lg.leader_epochs.flush()
        if lg.flush_timer is not None:
            lg.flush_timer(time.perf_counter() - started)
        lg.recovery_point = end
        lg._unflushed_messages = 0
        lg._last_flush_ms = lg.clock()


def sync(lg: Log) -> int:
    """Make everything appended so far durable, and return the offset it is durable
    to (the new recovery point). The fsyncs run without the log's lock, so appends go
    on meanwhile; they are covered by the next call. Rolled segments not yet synced
    are synced whole (indexes too: they no longer change); the active segment's data
    only — its index is rebuilt by recovery, which starts in the segment that holds
    the recovery point. One call at a time per log."""
    with lg._sync_lock:
        with lg.lock:
            end = lg.log_end_offset
            if lg.recovery_point >= end:
                return lg.recovery_point
            start = max(0, bisect.bisect_right(lg._bases, lg.recovery_point) - 1)
            pending = lg.segments[start:]
            covered = lg._unflushed_messages
            truncations = lg._truncations
        started = time.perf_counter()
        for segment in pending[:-1]:
            segment.flush()
        last = pending[-1]
        last.sync_data()
        # The epoch file too, off the lock like the segments: flush writes the entries
        # still only in memory, which cover the data below ``end``, and syncs them.
        lg.leader_epochs.flush()
        if lg.flush_timer is not None:
            lg.flush_timer(time.perf_counter() - started)
        with lg.lock:
            if truncations != lg._truncations:
                # Cut meanwhile: what was synced may be gone, and the data written
                # again in its place is not synced. truncate_to lowered the point.
                return lg.recovery_point
            if last is not lg.active:
                # It rolled meanwhile and its index is not synced: the recovery point
                # stays in it, so recovery would rebuild that index (the next sync
                # syncs it whole).
                end = min(end, last.base_offset)
            lg.recovery_point = max(lg.recovery_point, end)
            lg._unflushed_messages = max(0, lg._unflushed_messages - covered)
            lg._last_flush_ms = lg.clock()
        return end


def maybe_flush(lg: Log, now: int | None = None) -> bool:
    """Apply ``flush.ms`` (fsync when the oldest unflushed data is older than that),
    and sync segments rolled since the last flush."""
    now = lg.clock() if now is None else now
    with lg.lock:  # the log end is read on the duties thread
        # Data left unsynced by recovery counts too (no new record since): Kafka's
        # flush.ms flushes whatever is above the recovery point.
        unsynced = lg._unflushed_messages or lg.recovery_point < lg.log_end_offset
        if unsynced and now - lg._last_flush_ms >= lg.config.flush_ms:
            lg.flush()
            return True
    return lg.flush_rolled()


def flush_rolled(lg: Log) -> bool:
    """fsync segments that rolled and are not synced yet, and move the recovery point
    to the active segment's base. The fsyncs run without the log's lock: appends go
    to the active segment meanwhile, and a segment that leaves the log keeps its
    descriptor open for file.delete.delay.ms."""
    with lg.lock:
        target = lg.active.base_offset
        if lg.recovery_point >= target:
            return False
        start = max(0, bisect.bisect_right(lg._bases, lg.recovery_point) - 1)
        pending = lg.segments[start:-1]
        truncations = lg._truncations
    started = time.perf_counter()
    for segment in pending:
        segment.flush()
    lg.leader_epochs.flush()  # before the recovery point covers the rolled data
    if lg.flush_timer is not None:
        lg.flush_timer(time.perf_counter() - started)
    with lg.lock:
        if truncations == lg._truncations:  # else see sync()
            lg.recovery_point = max(lg.recovery_point,
                                    min(target, lg.log_end_offset))
    return True


# --- lookups (ListOffsets, tools) --------------------------------------------------------


def read_batches(lg: Log, offset: int, max_bytes: int = 2**31 - 1
                 ) -> list[builder.DecodedBatch]:
    """Decode whole batches from ``offset`` (for tools and tests, not the broker)."""
    out: list[builder.DecodedBatch] = []
    while offset < lg.log_end_offset:
        result = lg.read(offset, max_bytes)
        if result.region is None:
            break
        batches = builder.decode_batches(result.region.read())
        out.extend(batches)
        offset = batches[-1].header.next_offset
        max_bytes -= result.region.length
        if max_bytes <= 0:
            break
    return out


def offset_for_timestamp(lg: Log, timestamp: int) -> tuple[int, int] | None:
    """(offset, timestamp) of the first record with timestamp >= ``timestamp`` (the
    ListOffsets lookup), or None. Batches are found by their max timestamp through
    the time index; only the one batch that holds the answer is decoded."""
    with lg.lock:
        for segment in lg.segments:
            if segment.max_timestamp < timestamp or segment.size == 0:
                continue
            segment.ensure_indexes()
            start = max(segment.time_index.start_offset_for(timestamp), lg.log_start_offset)
            found = segment.find(start)
            if found is None:
                continue
            for pos, header in segment.headers_from(found[0]):
                if header.max_timestamp >= timestamp:
                    decoded = builder.decode_batch(segment.read_bytes(pos, header.size))
                    for r in decoded.records:
                        if r.timestamp >= timestamp and r.offset >= lg.log_start_offset:
                            return r.offset, r.timestamp
        return None


def offset_of_max_timestamp(lg: Log) -> tuple[int, int] | None:
    """(offset, timestamp) of the record with the largest timestamp (KIP-734)."""
    with lg.lock:
        best = max(
            (s for s in lg.segments if s.size), key=lambda s: s.max_timestamp, default=None
        )
        if best is None or lg.log_start_offset >= lg.log_end_offset:
            return None
        found = best.find(best.offset_of_max_timestamp)
        if found is not None:
            pos, header = found
            decoded = builder.decode_batch(best.read_bytes(pos, header.size))
            for record in decoded.records:
                if record.timestamp == best.max_timestamp:
                    return record.offset, record.timestamp
        return None


# --- changing the range ------------------------------------------------------------------


def truncate_to(lg: Log, offset: int) -> None:
    """Remove every batch at or after ``offset`` (whole batches: a batch holding
    ``offset`` goes entirely, and the log end becomes its base offset). Replication
    uses this to drop a diverged tail."""
    with lg.lock:
        if offset >= lg.log_end_offset:
            # No data to cut, but an epoch entry at the log end may be: this replica,
            # as leader, assigned its epoch there and appended nothing before another
            # leader took over (Kafka's UnifiedLog.truncateTo does the same).
            lg.leader_epochs.truncate_from_end(lg.log_end_offset)
            return
        lg._cursor = None  # the batches it names may be cut and written anew
        lg._truncations += 1
        if offset < lg.segments[0].base_offset:
            lg.truncate_fully_and_start_at(offset)
            return
        while len(lg.segments) > 1 and lg.active.base_offset >= offset:
            _retire(lg, lg.segments.pop())
            lg._bases.pop()
        active = lg.active
        removed_base = active.truncate_to(offset)
        new_end = offset if removed_base is None else min(offset, removed_base)
        if active.next_offset < new_end:
            # Compaction removed the batches between what is left and the cut: the log
            # ends at the cut, and a segment based there records it (a segment's name
            # is its base offset), so that a restart finds the same end. (Keeping the
            # end in memory only, as before, lost it at the next start, and a later
            # truncation below it could not bring the end down: found by
            # tests/storage/test_log_properties.py.)
            add_segment(lg, new_end)
        end = lg.log_end_offset
        lg.producer_state.truncate_to(end)
        for index in lg._txn_indexes.values():
            index.truncate_to(end)
        drop_snapshots_after(lg, end)
        if lg.producer_state.has_transactions:
            # A marker may have gone: open transactions come back only by replaying
            # the log (from the last snapshot below the new end), as Kafka does.
            lg.producer_state = ProducerStateManager()
            lg._load_producer_state()  # log_loader's, through the log: it imports us
        lg.recovery_point = min(lg.recovery_point, lg.log_end_offset)
        lg.log_start_offset = min(lg.log_start_offset, lg.log_end_offset)
        lg._high_watermark = min(lg._high_watermark, end)
        lg.leader_epochs.truncate_from_end(end)


def truncate_fully_and_start_at(lg: Log, offset: int) -> None:
    """Drop everything; the log restarts empty at ``offset`` (a follower too far
    behind the leader's log start), with no leader epoch history."""
    with lg.lock:
        lg._truncations += 1
        old = lg.segments
        lg.segments, lg._bases = [], []
        for segment in old:
            _retire(lg, segment)
        drop_snapshots_after(lg, -1)
        if lg.producer_state.has_transactions:
            lg.producer_state = ProducerStateManager()
        add_segment(lg, offset)
        lg.log_start_offset = offset
        lg.recovery_point = offset
        lg._high_watermark = offset
        lg.leader_epochs.clear()


def delete_records_before(lg: Log, offset: int) -> int:
    """DeleteRecords: make ``offset`` the log start; whole segments below it go.
    Returns the new log start offset. Not past the high watermark (Kafka's
    maybeIncrementLogStartOffset: uncommitted data may still be truncated and
    rewritten); that is the log end unless the log is replicated."""
    with lg.lock:
        if offset > lg.high_watermark:
            raise OffsetOutOfRangeError(offset, lg.log_start_offset, lg.log_end_offset)
        if offset > lg.log_start_offset:
            lg.log_start_offset = offset
            _delete_leading(lg, lambda seg, nxt: nxt <= offset)
            _log_start_moved(lg)
        return lg.log_start_offset


def apply_retention(lg: Log, now: int | None = None) -> int:
    """Delete whole old segments by ``retention.ms`` and ``retention.bytes`` (never the
    active one). Returns how many were deleted.

    A tiered log (``remote.storage.enable``) keeps locally what ``local.retention.*``
    says, and deletes a segment only once the remote tier holds all of it
    (``highest_remote_offset``), so an unreachable store makes the disk grow rather
    than lose data; the total retention applies to the remote tier (the remote log
    manager's), and the log start stays where the remote part begins."""
    cfg = lg.config
    if not cfg.deletes:
        return 0
    now = lg.clock() if now is None else now
    deleted = 0
    with lg.lock:
        if lg.closed:  # deleted, or moved to another log directory, meanwhile
            return 0
        tiered = lg.tiered
        retention_ms, retention_bytes = (cfg.local_retention if tiered
                                         else (cfg.retention_ms, cfg.retention_bytes))
        remote_end = lg.highest_remote_offset + 1 if tiered else LONG_MAX
        if retention_ms >= 0:
            deleted += _delete_leading(
                lg,
                lambda seg, nxt: nxt <= remote_end and (
                    seg.max_timestamp < now - retention_ms if seg.size else True),
                move_start=not tiered,
            )
        if retention_bytes >= 0:
            excess = lg.size_bytes - retention_bytes

            def over(seg: LogSegment, nxt: int) -> bool:
                nonlocal excess
                if excess - seg.size < 0 or nxt > remote_end:
                    return False
                excess -= seg.size
                return True

            deleted += _delete_leading(lg, over, move_start=not tiered)
    return deleted


def pending_upload_bytes(lg: Log) -> int:
    """Bytes of a tiered log's rolled segments the remote tier does not hold yet (what
    local retention must keep however old: the metric an unreachable store grows)."""
    with lg.lock:
        remote_end = lg.highest_remote_offset + 1
        return sum(seg.size for seg, nxt in zip(lg.segments[:-1], lg._bases[1:], strict=True)
                   if nxt > remote_end)


def _delete_leading(lg: Log, predicate: Callable[[LogSegment, int], bool], *,
                    move_start: bool = True) -> int:
    """Delete segments from the oldest while ``predicate(segment, next segment's base)``
    holds; the active segment always stays, and so does any segment with offsets at
    or above the high watermark (Kafka's deletableSegments: the log start never
    passes it; unreplicated, the high watermark is the log end and this never
    binds). ``move_start`` False: the log start stays (a tiered log's local
    retention: what is deleted here is still in the remote tier)."""
    deleted = 0
    hw = lg.high_watermark
    while (len(lg.segments) > 1 and lg._bases[1] <= hw
           and predicate(lg.segments[0], lg._bases[1])):
        _retire(lg, lg.segments.pop(0))
        lg._bases.pop(0)
        deleted += 1
    if deleted:
        if move_start:
            lg.log_start_offset = max(lg.log_start_offset, lg.segments[0].base_offset)
        _log_start_moved(lg)
        log.info("%s: deleted %d segment(s); log start offset is now %d%s",
                 lg.name, deleted, lg.log_start_offset,
                 "" if move_start else f", local log start {lg.local_log_start_offset}")
    return deleted


def _log_start_moved(lg: Log) -> None:
    """Keep the high watermark and the leader epochs at or after a new log start."""
    lg._high_watermark = max(lg._high_watermark, lg.log_start_offset)
    lg.leader_epochs.truncate_from_start(lg.local_log_start_offset)


def _retire(lg: Log, segment: LogSegment) -> None:
    """Take a segment out of service: rename its files ``.deleted`` and close them
    after ``file.delete.delay.ms``, so regions already handed out stay valid."""
    lg._cursor = None
    segment.rename_files(DELETED_SUFFIX)
    index = lg._txn_indexes.pop(segment.base_offset, None)
    if index is not None:
        index.delete()
    lg._retired.append((lg.clock() + lg.config.file_delete_delay_ms, segment, True))


def drop_snapshots_after(lg: Log, offset: int) -> None:
    """Delete producer-state snapshots past ``offset`` (the log was cut below them:
    they describe data that is gone)."""
    for name in os.listdir(lg.directory):
        stem = name[: -len(".snapshot")]
        if name.endswith(".snapshot") and stem.isdigit() and int(stem) > offset:
            os.unlink(os.path.join(lg.directory, name))


def close_retired(lg: Log, now: int | None = None, *, everything: bool = False) -> int:
    """Close and unlink retired segments whose delay has passed."""
    now = lg.clock() if now is None else now
    if lg.cleaning and not everything:
        return 0
    keep, done = [], 0
    for deadline, segment, unlink in lg._retired:
        if everything or deadline <= now:
            segment.close(flush_indexes=False)
            if unlink:
                segment.delete_files()
            done += 1
        else:
            keep.append((deadline, segment, unlink))
    lg._retired = keep
    return done


# --- compaction support ------------------------------------------------------------------


def replace_segment(lg: Log, old: LogSegment, new: LogSegment) -> bool:
    """Put a cleaned segment in place of ``old`` (same base offset). Returns False if
    ``old`` is no longer in the log (truncated or deleted meanwhile)."""
    with lg.lock:
        i = bisect.bisect_left(lg._bases, old.base_offset)
        if i >= len(lg.segments) or lg.segments[i] is not old or old is lg.active:
            return False
        lg.segments[i] = new
        lg._cursor = None
        # Its files were replaced on disk by the new ones (same names): close the old
        # inodes later, but unlink nothing.
        lg._retired.append((lg.clock() + lg.config.file_delete_delay_ms, old, False))
        return True


def remove_segment(lg: Log, old: LogSegment) -> bool:
    """Drop a segment the cleaner found fully obsolete (offsets stay reserved)."""
    with lg.lock:
        i = bisect.bisect_left(lg._bases, old.base_offset)
        if i >= len(lg.segments) or lg.segments[i] is not old or old is lg.active:
            return False
        del lg.segments[i]
        del lg._bases[i]
        _retire(lg, old)
        return True


# --- closing -----------------------------------------------------------------------------


def close(lg: Log) -> bool:
    """Flush everything and close every file. Returns whether the flush succeeded,
    i.e. whether this was a clean shutdown of the log; the files are closed either
    way, and an unclean one is recovered at the next open."""
    with lg.lock:
        if lg.closed:
            return True
        clean = True
        try:
            lg.flush()
            for index in lg._txn_indexes.values():
                index.flush()  # entries before the snapshot are not replayed
            _write_snapshot_at_close(lg)
        except (KafkaStorageError, OSError) as exc:
            log.error("%s: closing without a complete flush: %s", lg.name, exc)
            clean = False
        for segment in lg.segments:
            segment.close()
        lg.close_retired(everything=True)
        lg.leader_epochs.close()
        lg.closed = True
        return clean


def _write_snapshot_at_close(lg: Log) -> None:
    """Write the producer state at the log end, so the next open reads it instead
    of every batch header (even an empty one saves that scan) — unless a snapshot
    at the log end is already there. One there describes this very state: producer
    state changes only with the log end (appends move it up; a truncation moves it
    down and deletes every snapshot above the new end, so the end cannot come back
    to a snapshot's offset with other batches below it while that snapshot stays).
    Skipping it spares most of a clean stop with many idle partitions one file
    write and fsync each."""
    end = lg.log_end_offset
    path = os.path.join(lg.directory, f"{end:020d}{SNAPSHOT_SUFFIX}")
    if not os.path.exists(path):
        lg.producer_state.write_snapshot(lg.directory, end)


def delete(lg: Log) -> None:
    """Close without flushing and remove the whole directory (topic deletion), the
    leader epoch checkpoint with it (the cache holds no descriptor; it only stops
    writing)."""
    with lg.lock:
        for segment in lg.segments:
            segment.close(flush_indexes=False)
        lg.close_retired(everything=True)
        lg.leader_epochs.delete()
        lg.closed = True
    for name in os.listdir(lg.directory):
        os.unlink(os.path.join(lg.directory, name))
    os.rmdir(lg.directory)
