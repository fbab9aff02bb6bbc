"""The leader epoch cache (KIP-101, KIP-279): its file, Kafka's rules for assign,
endOffsetFor and truncation, and the log keeping it in step with its batches.

Cases named ``kafka_...`` are taken from Kafka's LeaderEpochFileCacheTest
(storage/src/test/java/org/apache/kafka/storage/internals/epoch/LeaderEpochFileCacheTest.java),
one test method each, with Kafka's numbers.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import os
import sys
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from odradek.records import builder
from odradek.records.batch import BatchHeader
from odradek.records.errors import CorruptRecordError
from odradek.storage import KafkaStorageError, LogConfig, checkpoint
from odradek.storage.leader_epoch import (
    LEADER_EPOCH_CHECKPOINT_FILE,
    UNDEFINED_EPOCH,
    UNDEFINED_EPOCH_OFFSET,
    EpochEntry,
    LeaderEpochCache,
)
from odradek.storage.log import Log

from .conftest import FakeClock, make_batch

UNDEFINED = (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)


def new_cache(tmp_path) -> LeaderEpochCache:
    return LeaderEpochCache.open(str(tmp_path), log_start_offset=0, log_end_offset=2**62)


def cache_with(tmp_path, *pairs: tuple[int, int]) -> LeaderEpochCache:
    cache = new_cache(tmp_path)
    for epoch, start in pairs:
        cache.assign(epoch, start)
    return cache


def follower_batch(base: int, count: int, epoch: int) -> bytes:
    """A batch as a leader wrote it: offsets base.., stamped with ``epoch``."""
    records = [builder.Record(base + i, 1_700_000_000_000, None, b"r%d" % (base + i))
               for i in range(count)]
    return builder.build_batch(records, partition_leader_epoch=epoch)


# --- the file ------------------------------------------------------------------------------


def test_the_file_is_kafkas_leader_epoch_checkpoint_byte_for_byte(tmp_path):
    cache = cache_with(tmp_path, (0, 0), (3, 1500))
    path = tmp_path / LEADER_EPOCH_CHECKPOINT_FILE
    cache.flush()  # assignments are written by the next flush
    assert path.read_bytes() == b"0\n2\n0 0\n3 1500\n"
    assert not (tmp_path / (LEADER_EPOCH_CHECKPOINT_FILE + ".tmp")).exists()
    cache.truncate_from_end(1500)
    assert path.read_bytes() == b"0\n1\n0 0\n"
    cache.clear()
    assert path.read_bytes() == b"0\n0\n"


def test_a_kafka_written_file_is_read_and_rewritten_identically(tmp_path):
    written_by_kafka = b"0\n3\n2 6\n3 8\n4 11\n"
    (tmp_path / LEADER_EPOCH_CHECKPOINT_FILE).write_bytes(written_by_kafka)
    cache = new_cache(tmp_path)
    assert cache.entries == [EpochEntry(2, 6), EpochEntry(3, 8), EpochEntry(4, 11)]
    cache.assign(5, 20)
    cache.flush()
    assert (tmp_path / LEADER_EPOCH_CHECKPOINT_FILE).read_bytes() == (
        written_by_kafka.replace(b"\n3\n", b"\n4\n", 1) + b"5 20\n")


def test_kafka_shouldPersistEpochsBetweenInstances(tmp_path):
    cache_with(tmp_path, (2, 6)).flush()  # Kafka's assign syncs; ours waits for flush
    assert new_cache(tmp_path).entries == [EpochEntry(2, 6)]


def test_nothing_is_written_unless_the_entries_change(tmp_path, monkeypatch, fsynced):
    cache = cache_with(tmp_path, (1, 0), (2, 7))
    cache.flush()
    path = tmp_path / LEADER_EPOCH_CHECKPOINT_FILE
    writes = []
    real = cache._write
    monkeypatch.setattr(cache, "_write", lambda **kw: writes.append(kw) or real(**kw))
    fsynced.clear()
    assert not cache.assign(2, 9)  # the latest epoch again, later: every append does this
    assert not cache.assign(-1, 12)  # a batch without an epoch
    assert not cache.truncate_from_end(100)  # nothing starts there
    assert not cache.truncate_from_start(0)  # the first entry starts there already
    cache.flush()
    assert writes == [] and fsynced == [] and not cache.unsynced
    # A change is made in memory: assign writes and syncs nothing...
    assert cache.assign(3, 12)
    assert writes == [] and fsynced == []
    assert path.read_bytes() == b"0\n2\n1 0\n2 7\n"
    assert cache.unsynced
    # ... the next flush writes the file once and syncs it, then its directory ...
    cache.flush()
    assert len(writes) == 1 and fsynced == [str(path), str(tmp_path)]
    assert path.read_bytes() == b"0\n3\n1 0\n2 7\n3 12\n"
    assert not cache.unsynced
    # ... and a flush with nothing changed since does nothing.
    cache.flush()
    assert len(writes) == 1 and len(fsynced) == 2


def test_an_empty_log_without_a_file_opens_without_writing_one(tmp_path):
    cache = LeaderEpochCache.open(str(tmp_path), log_start_offset=0, log_end_offset=0)
    assert cache.entries == [] and cache.latest_epoch == -1 and cache.latest_entry is None
    assert not (tmp_path / LEADER_EPOCH_CHECKPOINT_FILE).exists()


@pytest.mark.parametrize("content", [b"", b"1\n0\n", b"0\n2\n1 0\n", b"0\n1\n1 x\n",
                                     b"0\n1\n1 2 3\n", b"\xff\xfe"])
def test_a_malformed_file_is_rebuilt(tmp_path, content):
    (tmp_path / LEADER_EPOCH_CHECKPOINT_FILE).write_bytes(content)
    cache = LeaderEpochCache.open(str(tmp_path), log_start_offset=0, log_end_offset=50,
                                  rebuild=lambda _start: [(1, 0), (4, 20)])
    assert cache.entries == [(1, 0), (4, 20)]
    assert (tmp_path / LEADER_EPOCH_CHECKPOINT_FILE).read_bytes() == b"0\n2\n1 0\n4 20\n"


def test_open_cuts_entries_outside_the_recovered_log_and_writes_that(tmp_path):
    cache_with(tmp_path, (1, 0), (2, 10), (3, 20), (4, 30)).flush()
    cache = LeaderEpochCache.open(str(tmp_path), log_start_offset=12, log_end_offset=30)
    assert cache.entries == [(2, 12), (3, 20)]
    assert new_cache(tmp_path).entries == [(2, 12), (3, 20)]


def test_a_failed_flush_is_reported_and_leaves_the_file_as_it_was(tmp_path, monkeypatch):
    """A write error (a full disk) in the flush that writes an assignment: reported, the
    file untouched, the entries kept in memory for the next flush to write."""
    cache = cache_with(tmp_path, (1, 0))
    cache.flush()
    path = tmp_path / LEADER_EPOCH_CHECKPOINT_FILE
    assert cache.assign(2, 10)  # in memory: nothing to fail here

    def full_disk(fd, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    with monkeypatch.context() as patch:
        patch.setattr(os, "write", full_disk)  # what checkpoint.write_lines writes with
        with pytest.raises(KafkaStorageError, match="No space"):
            cache.flush()
    assert cache.entries == [(1, 0), (2, 10)] and cache.latest_epoch == 2
    assert path.read_bytes() == b"0\n1\n1 0\n"
    assert not (tmp_path / (LEADER_EPOCH_CHECKPOINT_FILE + ".tmp")).exists()
    assert new_cache(tmp_path).entries == [(1, 0)]
    assert cache.unsynced
    cache.flush()  # the disk has room again
    assert path.read_bytes() == b"0\n2\n1 0\n2 10\n"
    assert not cache.unsynced
    assert new_cache(tmp_path).entries == [(1, 0), (2, 10)]


def test_a_failed_truncation_removes_the_file_rather_than_leave_stale_entries(
    tmp_path, monkeypatch, fsynced
):
    cache = cache_with(tmp_path, (1, 0), (2, 10))
    cache.flush()

    def full_disk(fd, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    with monkeypatch.context() as patch:
        patch.setattr(os, "write", full_disk)
        assert cache.truncate_from_end(10)
    assert cache.entries == [(1, 0)]
    assert not (tmp_path / LEADER_EPOCH_CHECKPOINT_FILE).exists()  # rebuilt at next open
    # The removal is made durable by the next flush, as a write would be.
    assert cache.unsynced
    fsynced.clear()
    cache.flush()
    assert fsynced == [str(tmp_path)] and not cache.unsynced


def test_delete_removes_the_file_and_stops_writing(tmp_path):
    cache = cache_with(tmp_path, (1, 0))
    cache.flush()
    cache.delete()
    assert os.listdir(tmp_path) == []
    cache.assign(2, 5)  # in memory only
    cache.truncate_from_start(1)
    cache.flush()
    assert os.listdir(tmp_path) == []


# --- durability: written when it changes, synced with the log ------------------------------


def test_changes_write_the_file_without_fsync_and_flush_syncs_it(tmp_path, fsynced):
    cache = new_cache(tmp_path)
    path = tmp_path / LEADER_EPOCH_CHECKPOINT_FILE
    assert cache.assign(0, 0) and cache.assign_all([(2, 10), (3, 20)])
    assert cache.truncate_from_end(20) and cache.truncate_from_start(5)
    assert fsynced == []
    assert path.read_bytes() == b"0\n2\n0 5\n2 10\n"  # written all the same
    assert cache.unsynced
    cache.flush()
    assert fsynced == [str(path), str(tmp_path)]  # the file, then its rename
    assert not cache.unsynced
    cache.flush()  # nothing changed since
    assert len(fsynced) == 2


@pytest.mark.parametrize(("side", "offset", "left"), [("end", 20, [(1, 0), (2, 10)]),
                                                       ("start", 15, [(2, 15), (3, 20)])])
def test_a_truncation_after_an_assign_writes_the_assigned_entries_it_keeps(
    tmp_path, monkeypatch, fsynced, side, offset, left
):
    """Assignments wait for the flush, truncations are written at once: the file a
    truncation writes holds every entry in memory, the unflushed assignments included,
    minus what it cut; it stays unsynced until a flush, which then has nothing to
    write."""
    cache = cache_with(tmp_path, (1, 0))
    cache.flush()
    path = tmp_path / LEADER_EPOCH_CHECKPOINT_FILE
    assert cache.assign(2, 10) and cache.assign(3, 20)
    assert path.read_bytes() == b"0\n1\n1 0\n"  # not yet written
    fsynced.clear()
    assert getattr(cache, f"truncate_from_{side}")(offset)
    assert cache.entries == left
    assert new_cache(tmp_path).entries == left  # written at once...
    assert fsynced == [] and cache.unsynced  # ... not synced
    writes = []
    real = cache._write
    monkeypatch.setattr(cache, "_write", lambda **kw: writes.append(kw) or real(**kw))
    cache.flush()
    assert writes == [] and fsynced == [str(path), str(tmp_path)]
    assert not cache.unsynced
    assert new_cache(tmp_path).entries == left


def test_clear_is_synced_at_once_as_kafkas_clearAndFlush(tmp_path, fsynced):
    cache = cache_with(tmp_path, (1, 0), (2, 10))
    fsynced.clear()
    cache.clear()
    assert str(tmp_path) in fsynced and not cache.unsynced


def test_a_flush_that_fails_is_reported_and_tried_again(tmp_path, monkeypatch):
    cache = cache_with(tmp_path, (1, 0))

    def broken_fsync(fd):
        raise OSError(errno.EIO, "Input/output error")

    with monkeypatch.context() as patch:
        patch.setattr(os, "fsync", broken_fsync)
        with pytest.raises(KafkaStorageError, match="Input/output"):
            cache.flush()
    assert cache.unsynced
    cache.flush()
    assert not cache.unsynced


def test_a_write_during_a_flush_is_synced_by_it_too(tmp_path, monkeypatch, fsynced):
    """flush syncs without the log's lock: an assign may replace the file between its
    fsync and its check; the loop then syncs the new file before calling it durable."""
    cache = cache_with(tmp_path, (1, 0))
    real_fsync_dir = checkpoint.fsync_dir
    raced = []

    def fsync_dir_with_a_write_meanwhile(path):
        real_fsync_dir(path)
        if not raced:
            raced.append(cache.assign(2, 10))

    monkeypatch.setattr(checkpoint, "fsync_dir", fsync_dir_with_a_write_meanwhile)
    fsynced.clear()
    cache.flush()
    assert raced == [True] and not cache.unsynced
    assert fsynced.count(str(tmp_path / LEADER_EPOCH_CHECKPOINT_FILE)) == 2


class LockWithAHook:
    """Stands for a cache's ``_file_lock``: runs ``hook`` once, just before the lock is
    taken by ``caller`` (a method of the cache): another thread's change landing
    between what ``caller`` did before the lock and what it does under it."""

    def __init__(self, real, caller: str, hook) -> None:
        self.real, self.caller, self.hook = real, caller, hook

    def __enter__(self):
        if self.hook is not None and sys._getframe(1).f_code.co_name == self.caller:
            hook, self.hook = self.hook, None
            hook()
        return self.real.__enter__()

    def __exit__(self, *exc_info):
        return self.real.__exit__(*exc_info)


@pytest.mark.parametrize("meanwhile", ["assign", "truncate"])
def test_a_change_while_a_flush_writes_the_file_is_not_lost(tmp_path, meanwhile):
    """flush writes an assignment off the log's lock: an assign or a truncation (under
    the log's lock, on another thread) may come just as it writes. The file flush
    calls durable must not miss the one nor bring back what the other cut."""
    cache = cache_with(tmp_path, (1, 0), (2, 10))
    cache.flush()
    cache.assign(3, 20)  # for the flush to write
    change = {"assign": lambda: cache.assign(4, 30),
              "truncate": lambda: cache.truncate_from_end(10)}[meanwhile]
    cache._file_lock = LockWithAHook(cache._file_lock, "_write", change)
    cache.flush()
    assert cache._file_lock.hook is None  # it ran
    expected = {"assign": [(1, 0), (2, 10), (3, 20), (4, 30)],
                "truncate": [(1, 0)]}[meanwhile]
    assert cache.entries == expected
    assert not cache.unsynced
    assert new_cache(tmp_path).entries == expected  # what that flush made durable


def test_a_flush_writing_while_the_log_is_deleted_leaves_nothing_behind(tmp_path):
    """Log.delete deletes the cache under the log's lock, then empties and removes the
    directory, while a sync may be flushing the cache off that lock: no file may be
    written after delete() returns (the directory's removal would fail)."""
    cache = cache_with(tmp_path, (1, 0))
    cache._file_lock = LockWithAHook(cache._file_lock, "_write", cache.delete)
    cache.flush()
    assert cache._file_lock.hook is None
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("pending", ["unwritten", "unsynced"])
def test_flushing_after_the_directory_went_is_not_an_error(tmp_path, pending):
    """Whether the flush has an assignment to write or only a written file to sync."""
    directory = tmp_path / "t-0"
    directory.mkdir()
    cache = LeaderEpochCache.open(str(directory), log_start_offset=0, log_end_offset=100)
    cache.assign(1, 0)
    if pending == "unsynced":
        cache.assign(2, 5)
        cache.truncate_from_end(5)  # written at once
        (directory / LEADER_EPOCH_CHECKPOINT_FILE).unlink()
    directory.rmdir()  # a deletion under way (Kafka's writeIfDirExists tolerates it)
    cache.flush()
    assert not directory.exists()


def test_first_appends_to_new_logs_do_not_write_or_fsync(tmp_path, fsynced):
    """The produce path's first append to a new partition assigns epoch 0: no write, no
    fsync (see LeaderEpochCache.assign); closing the log writes and syncs the file."""
    logs = [Log.open(str(tmp_path / f"t-{p}"), clean_shutdown=True) for p in range(20)]
    fsynced.clear()
    for lg in logs:
        lg.append(make_batch(3), leader_epoch=0, flush=False)
        lg.append(make_batch(3), leader_epoch=0, flush=False)
    assert fsynced == []
    for lg in logs:
        path = os.path.join(lg.directory, LEADER_EPOCH_CHECKPOINT_FILE)
        assert not os.path.exists(path) and lg.leader_epochs.entries == [(0, 0)]
        assert lg.leader_epochs.unsynced
        assert lg.close()
        assert path in fsynced
        with open(path, "rb") as f:
            assert f.read() == b"0\n1\n0 0\n"


@pytest.mark.parametrize("how", ["flush", "sync", "flush_rolled", "close"])
def test_making_the_log_durable_syncs_the_epoch_file_first(open_log, fsynced, how):
    lg = open_log()
    lg.append(make_batch(5), leader_epoch=1)
    lg.append(make_batch(5), leader_epoch=2)
    if how == "flush_rolled":
        lg.roll()
    path = os.path.join(lg.directory, LEADER_EPOCH_CHECKPOINT_FILE)
    assert fsynced == [] and lg.leader_epochs.unsynced
    getattr(lg, how)()
    assert path in fsynced and lg.directory in fsynced
    assert not lg.leader_epochs.unsynced
    if how != "close":
        assert lg.recovery_point == 10


def test_a_clean_stop_syncs_an_entry_without_data(open_log, fsynced):
    lg = open_log()
    lg.append(make_batch(5), leader_epoch=1)
    lg.flush()
    lg.assign_leader_epoch(4)  # elected; nothing appended since
    fsynced.clear()
    lg.close()
    assert os.path.join(lg.directory, LEADER_EPOCH_CHECKPOINT_FILE) in fsynced


@pytest.mark.parametrize("failing", ["fsync", "write"])
@pytest.mark.parametrize("how", ["flush", "sync", "flush_rolled"])
def test_the_recovery_point_stays_when_the_epoch_file_cannot_be_synced(
    open_log, monkeypatch, how, failing
):
    """As Kafka's testRecoveryPointNotIncrementedOnProducerStateSnapshotFlushFailure:
    what recovery trusts below the recovery point must be on disk first. ``write``: the
    flush that writes the assigned entry finds the disk full."""
    lg = open_log()
    lg.append(make_batch(5), leader_epoch=1)
    lg.roll()
    path = os.path.join(lg.directory, LEADER_EPOCH_CHECKPOINT_FILE)
    real_fsync, real_write_lines = os.fsync, checkpoint.write_lines

    def fsync_failing_for_the_epoch_file(fd):
        if os.readlink(f"/proc/self/fd/{fd}") == path:
            raise OSError(errno.EIO, "Input/output error")
        real_fsync(fd)

    def write_failing_for_the_epoch_file(target, lines, **kwargs):
        if target == path:
            raise OSError(errno.ENOSPC, "No space left on device")
        real_write_lines(target, lines, **kwargs)

    if failing == "fsync":
        monkeypatch.setattr(os, "fsync", fsync_failing_for_the_epoch_file)
    else:
        monkeypatch.setattr(checkpoint, "write_lines", write_failing_for_the_epoch_file)
    with pytest.raises(KafkaStorageError):
        getattr(lg, how)()
    assert lg.recovery_point == 0
    assert lg.leader_epochs.unsynced
    monkeypatch.undo()
    getattr(lg, how)()
    assert lg.recovery_point == 5
    assert not lg.leader_epochs.unsynced
    with open(path, "rb") as f:
        assert f.read() == b"0\n1\n1 0\n"


def kill(lg: Log) -> None:
    """The process dies: no flush, no snapshot, nothing closed cleanly."""
    for segment in lg.segments:
        os.close(segment.fd)
    lg.close_retired(everything=True)
    lg.closed = True


@pytest.mark.parametrize("left_behind", ["missing", "synced_version", "torn", "stale_tail",
                                         "current"])
def test_an_unclean_stop_rederives_the_entries_above_the_recovery_point(
    open_log, small_config, left_behind
):
    lg = open_log(small_config)
    path = os.path.join(lg.directory, LEADER_EPOCH_CHECKPOINT_FILE)
    for epoch in (0, 0, 1, 1, 1):
        lg.append(make_batch(5, value_size=120), leader_epoch=epoch)
    lg.flush()  # offsets below 25 and the file saying (0, 0), (1, 10) are durable
    recovery_point = lg.recovery_point
    with open(path, "rb") as f:
        synced = f.read()
    assert synced == b"0\n2\n0 0\n1 10\n"
    # Then, none of it synced: new epochs, a truncation that cuts one, more data,
    # spread over several segments.
    for epoch in (1, 3, 3, 5, 5, 5):
        lg.append(make_batch(5, value_size=120), leader_epoch=epoch)
    lg.truncate_to(45)  # epoch 5 from 40 keeps one batch
    for epoch in (6, 6, 8, 8, 8, 8):
        lg.append(make_batch(5, value_size=120), leader_epoch=epoch)
    expected = lg.leader_epochs.entries
    assert expected == [(0, 0), (1, 10), (3, 30), (5, 40), (6, 45), (8, 55)]
    assert len(lg.segments) > 2 and lg.recovery_point == recovery_point
    kill(lg)
    if left_behind == "missing":
        os.unlink(path)
    elif left_behind == "synced_version":
        with open(path, "wb") as f:
            f.write(synced)
    elif left_behind == "torn":  # written, never synced, and the OS crashed
        with open(path, "wb") as f:
            f.write(b"\0" * 40)
    elif left_behind == "stale_tail":  # entries the truncation cut, and one never made
        with open(path, "wb") as f:
            f.write(b"0\n5\n0 0\n1 10\n3 30\n5 40\n7 50\n")
    # "current": the process died, the page cache kept the last write.
    lg = open_log(small_config, recovery_point=recovery_point)
    assert lg.leader_epochs.entries == expected
    check(lg)  # the entries and every end offset, against a scan of the headers
    # What was derived is written (for the next open) and synced by the next flush.
    assert lg.leader_epochs.unsynced
    lg.flush()
    with open(path, "rb") as f:
        assert f.read() == b"0\n6\n0 0\n1 10\n3 30\n5 40\n6 45\n8 55\n"


def test_a_clean_stop_trusts_the_file_and_walks_no_header(open_log, small_config, monkeypatch):
    lg = open_log(small_config)
    for epoch in (0, 2, 2, 7):
        lg.append(make_batch(5, value_size=30), leader_epoch=epoch)
    lg.close()

    def walked(self, start=0):
        raise AssertionError("headers walked after a clean stop")

    monkeypatch.setattr(Log, "_epoch_starts_from_headers", walked)
    lg = open_log(small_config, clean_shutdown=True)
    assert lg.leader_epochs.entries == [(0, 0), (2, 5), (7, 15)]
    assert not lg.leader_epochs.unsynced  # synced by the close


def test_truncating_at_the_log_end_drops_an_entry_without_data(open_log):
    """Kafka's UnifiedLog.truncateTo: a leader that assigned its epoch at the log end and
    lost the leadership before appending keeps no entry there as a follower."""
    lg = open_log()
    lg.append(make_batch(5), leader_epoch=1)
    lg.assign_leader_epoch(3)
    assert lg.leader_epochs.entries == [(1, 0), (3, 5)]
    lg.truncate_to(5)  # the new leader's epoch 1 ended at 5: nothing to cut but that
    assert lg.leader_epochs.entries == [(1, 0)]
    lg.append(follower_batch(5, 2, 2), assign_offsets=False)
    assert lg.leader_epochs.entries == [(1, 0), (2, 5)]


def test_a_truncation_during_a_sync_keeps_the_recovery_point_below_the_cut(open_log,
                                                                          monkeypatch):
    """sync() syncs without the lock; a follower's truncation (and appends in its place)
    meanwhile must not have the recovery point cover data never synced."""
    lg = open_log()
    for epoch in (1, 1, 2):
        lg.append(make_batch(5), leader_epoch=epoch)
    real_flush = lg.leader_epochs.flush

    def truncate_meanwhile():
        real_flush()
        lg.truncate_to(5)
        lg.append(follower_batch(5, 20, 3), assign_offsets=False)

    monkeypatch.setattr(lg.leader_epochs, "flush", truncate_meanwhile)
    lg.sync()
    assert lg.log_end_offset == 25
    assert lg.recovery_point == 0  # not 15: offsets 5.. were written again, unsynced
    monkeypatch.undo()
    assert lg.sync() == lg.recovery_point == 25


# --- assign ----------------------------------------------------------------------------------

ASSIGN_CASES = [
    # (Kafka test, assignments in order, entries after)
    ("shouldAddEpochAndMessageOffsetToCache", [(2, 10)], [(2, 10)]),
    ("shouldNotOverwriteLogEndOffsetForALeaderEpochOnceItHasBeenAssigned",
     [(2, 9), (2, 10)], [(2, 9)]),
    ("shouldEnforceMonotonicallyIncreasingStartOffsets", [(2, 9), (3, 9)], [(3, 9)]),
    ("shouldNotOverwriteOffsetForALeaderEpochOnceItHasBeenAssigned",
     [(2, 6), (2, 10)], [(2, 6)]),
    ("shouldNotUpdateEpochAndStartOffsetIfItDidNotChange", [(2, 6), (2, 7)], [(2, 6)]),
    ("shouldTruncateIfMatchingEpochButEarlierStartingOffset",
     [(5, 11), (6, 12), (7, 13), (7, 12)], [(5, 11), (7, 12)]),
    ("shouldEnforceMonotonicallyIncreasingEpochs", [(1, 5), (2, 6), (1, 7)], [(1, 7)]),
    ("shouldEnforceOffsetsIncreaseMonotonically", [(2, 6), (3, 5)], [(3, 5)]),
    ("shouldIncreaseAndTrackEpochsAsLeadersChangeManyTimes",
     [(0, 0), (1, 0), (2, 5)], [(1, 0), (2, 5)]),
    ("shouldIncreaseAndTrackEpochsAsFollowerReceivesManyMessages",
     [(0, 0), (0, 1), (0, 2), (1, 3), (1, 4), (1, 5), (2, 6), (2, 7), (2, 8)],
     [(0, 0), (1, 3), (2, 6)]),
    ("negative epochs (batches without one) are ignored", [(1, 0), (-1, 5)], [(1, 0)]),
]


@pytest.mark.parametrize(("name", "assigned", "expected"), ASSIGN_CASES,
                         ids=[c[0] for c in ASSIGN_CASES])
def test_kafka_assign(tmp_path, name, assigned, expected):
    cache = cache_with(tmp_path, *assigned)
    assert cache.entries == expected
    assert cache.latest_epoch == expected[-1][0]
    cache.flush()
    assert new_cache(tmp_path).entries == expected  # what was written is what is held


def test_assign_all_writes_nothing_and_the_next_flush_writes_once(tmp_path, monkeypatch):
    cache = new_cache(tmp_path)
    writes = []
    real = cache._write
    monkeypatch.setattr(cache, "_write", lambda **kw: writes.append(kw) or real(**kw))
    assert cache.assign_all([(1, 0), (2, 5), (4, 9)])
    assert writes == [] and cache.entries == [(1, 0), (2, 5), (4, 9)]
    cache.flush()
    assert len(writes) == 1
    assert new_cache(tmp_path).entries == [(1, 0), (2, 5), (4, 9)]


def test_a_negative_start_offset_is_an_error(tmp_path):
    with pytest.raises(ValueError):
        new_cache(tmp_path).assign(1, -1)


# --- endOffsetFor ---------------------------------------------------------------------------

END_OFFSET_CASES = [
    # (Kafka test, assignments, requested epoch, log end offset, (epoch, end offset))
    ("shouldAddEpochAndMessageOffsetToCache", [(2, 10)], 2, 11, (2, 11)),
    ("shouldReturnLogEndOffsetIfLatestEpochRequested", [(2, 11), (2, 12)], 2, 14, (2, 14)),
    ("shouldReturnUndefinedOffsetIfUndefinedEpochRequested",
     [(2, 11), (3, 12)], UNDEFINED_EPOCH, 0, UNDEFINED),
    ("shouldReturnUnsupportedIfNoEpochRecorded", [], 0, 0, UNDEFINED),
    ("shouldReturnUnsupportedIfNoEpochRecordedAndUndefinedEpochRequested",
     [], UNDEFINED_EPOCH, 73, UNDEFINED),
    ("shouldReturnFirstEpochIfRequestedEpochLessThanFirstEpoch",
     [(5, 11), (6, 12), (7, 13)], 4, 0, (4, 11)),
    ("shouldTruncateIfMatchingEpochButEarlierStartingOffset(5)",
     [(5, 11), (6, 12), (7, 13), (7, 12)], 5, 0, (5, 12)),
    ("shouldTruncateIfMatchingEpochButEarlierStartingOffset(6)",
     [(5, 11), (6, 12), (7, 13), (7, 12)], 6, 0, (5, 12)),
    ("shouldGetFirstOffsetOfSubsequentEpochWhenOffsetRequestedForPreviousEpoch",
     [(1, 11), (1, 12), (2, 13), (2, 14), (3, 15), (3, 16)], 2, 17, (2, 15)),
    ("shouldReturnNextAvailableEpochIfThereIsNoExactEpochForTheOneRequested(1)",
     [(0, 10), (2, 13), (4, 17)], 1, 0, (0, 13)),
    ("shouldReturnNextAvailableEpochIfThereIsNoExactEpochForTheOneRequested(2)",
     [(0, 10), (2, 13), (4, 17)], 2, 0, (2, 17)),
    ("shouldReturnNextAvailableEpochIfThereIsNoExactEpochForTheOneRequested(3)",
     [(0, 10), (2, 13), (4, 17)], 3, 0, (2, 17)),
    ("shouldReturnInvalidOffsetIfEpochIsRequestedWhichIsNotCurrentlyTracked",
     [(2, 100)], 3, 100, UNDEFINED),
    ("shouldSupportEpochsThatDoNotStartFromZero", [(2, 6)], 2, 7, (2, 7)),
    ("shouldEnforceMonotonicallyIncreasingEpochs(1)", [(1, 5), (2, 6), (1, 7)], 1, 8, (1, 8)),
    ("shouldEnforceMonotonicallyIncreasingEpochs(2)",
     [(1, 5), (2, 6), (1, 7)], 2, 8, UNDEFINED),
    ("shouldIncreaseAndTrackEpochsAsLeadersChangeManyTimes(a)", [(0, 0), (1, 0)], 1, 0, (1, 0)),
    ("shouldIncreaseAndTrackEpochsAsLeadersChangeManyTimes(b)", [(0, 0), (1, 0)], 0, 0, (0, 0)),
    ("shouldIncreaseAndTrackEpochsAsLeadersChangeManyTimes(c)", [(0, 0), (1, 0)], 1, 5, (1, 5)),
    ("shouldIncreaseAndTrackEpochsAsLeadersChangeManyTimes(d)", [(0, 0), (1, 0)], 0, 5, (0, 0)),
    ("shouldIncreaseAndTrackEpochsAsLeadersChangeManyTimes(e)",
     [(0, 0), (1, 0), (2, 5)], 2, 10, (2, 10)),
    ("shouldIncreaseAndTrackEpochsAsLeadersChangeManyTimes(f)",
     [(0, 0), (1, 0), (2, 5)], 1, 10, (1, 5)),
    ("shouldIncreaseAndTrackEpochsAsLeadersChangeManyTimes(g)",
     [(0, 0), (1, 0), (2, 5)], 0, 10, (0, 0)),
    ("shouldIncreaseAndTrackEpochsAsFollowerReceivesManyMessages(0)",
     [(0, 0), (0, 1), (0, 2), (1, 3), (1, 4), (1, 5), (2, 6), (2, 7), (2, 8)], 0, 9, (0, 3)),
    ("shouldIncreaseAndTrackEpochsAsFollowerReceivesManyMessages(1)",
     [(0, 0), (0, 1), (0, 2), (1, 3), (1, 4), (1, 5), (2, 6), (2, 7), (2, 8)], 1, 9, (1, 6)),
    ("shouldIncreaseAndTrackEpochsAsFollowerReceivesManyMessages(2)",
     [(0, 0), (0, 1), (0, 2), (1, 3), (1, 4), (1, 5), (2, 6), (2, 7), (2, 8)], 2, 9, (2, 9)),
    ("shouldFetchEndOffsetOfEmptyCache", [], 7, 0, UNDEFINED),
]


@pytest.mark.parametrize(("name", "assigned", "requested", "log_end", "expected"),
                         END_OFFSET_CASES, ids=[c[0] for c in END_OFFSET_CASES])
def test_kafka_end_offset_for(tmp_path, name, assigned, requested, log_end, expected):
    assert cache_with(tmp_path, *assigned).end_offset_for(requested, log_end) == expected


# --- truncation -----------------------------------------------------------------------------

TRUNCATE_CASES = [
    # (Kafka test, "end" or "start", offset, entries after); all start from
    # (2, 6), (3, 8), (4, 11) as Kafka's do
    ("shouldDropEntriesOnEpochBoundaryWhenRemovingLatestEntries", "end", 8, [(2, 6)]),
    ("shouldDropEntriesBetweenEpochBoundaryWhenRemovingNewest", "end", 9, [(2, 6), (3, 8)]),
    ("shouldNotResetEpochHistoryTailIfUndefinedPassed", "end", UNDEFINED_EPOCH_OFFSET,
     [(2, 6), (3, 8), (4, 11)]),
    ("end past every entry", "end", 12, [(2, 6), (3, 8), (4, 11)]),
    ("end before every entry", "end", 0, []),
    ("shouldPreserveResetOffsetOnClearEarliestIfOneExists", "start", 8, [(3, 8), (4, 11)]),
    ("shouldNotClearAnythingIfOffsetTooEarly", "start", 1, [(2, 6), (3, 8), (4, 11)]),
    ("shouldNotClearAnythingIfOffsetIsFirstOffset", "start", 6, [(2, 6), (3, 8), (4, 11)]),
    ("shouldRetainLatestEpochOnClearAllEarliest", "start", 11, [(4, 11)]),
    ("shouldUpdateOffsetBetweenEpochBoundariesOnClearEarliest", "start", 9, [(3, 9), (4, 11)]),
    ("shouldRetainLatestEpochOnClearAllEarliestAndUpdateItsOffset", "start", 15, [(4, 15)]),
    ("shouldNotResetEpochHistoryHeadIfUndefinedPassed", "start", UNDEFINED_EPOCH_OFFSET,
     [(2, 6), (3, 8), (4, 11)]),
]


@pytest.mark.parametrize(("name", "side", "offset", "expected"), TRUNCATE_CASES,
                         ids=[c[0] for c in TRUNCATE_CASES])
def test_kafka_truncate(tmp_path, name, side, offset, expected):
    cache = cache_with(tmp_path, (2, 6), (3, 8), (4, 11))
    cache.flush()  # as Kafka's assign: on disk before the truncation
    if side == "end":
        cache.truncate_from_end(offset)
    else:
        cache.truncate_from_start(offset)
    assert cache.entries == expected
    assert new_cache(tmp_path).entries == expected


def test_kafka_shouldUpdateOffsetBetweenFirstTwoEpochBoundariesOnClearEarliest(tmp_path):
    cache = cache_with(tmp_path, (0, 0), (1, 7), (2, 10))
    cache.truncate_from_start(5)
    assert cache.entries == [(0, 5), (1, 7), (2, 10)]


def test_kafka_shouldWriteCheckpointOnTruncation(tmp_path):
    cache = cache_with(tmp_path, (2, 6), (3, 8), (4, 11))
    cache.truncate_from_end(11)
    cache.truncate_from_start(8)
    assert new_cache(tmp_path).entries == [(3, 8)]


def test_kafka_shouldClearAllEntries_and_empty_caches(tmp_path):
    cache = new_cache(tmp_path)
    assert not cache.truncate_from_start(7)  # shouldClearEarliestOnEmptyCache
    assert not cache.truncate_from_end(7)  # shouldClearLatestOnEmptyCache
    cache.assign_all([(2, 6), (3, 8), (4, 11)])
    cache.clear()
    assert cache.entries == [] and new_cache(tmp_path).entries == []


# --- the log keeps it ---------------------------------------------------------------------


def test_leader_appends_record_an_epoch_where_its_first_append_starts(open_log):
    lg = open_log()
    lg.append(make_batch(5))  # no epoch given: nothing recorded (as before replication)
    assert lg.latest_epoch == -1 and lg.leader_epochs.entries == []
    lg.append(make_batch(5), leader_epoch=0)
    lg.append(make_batch(5), leader_epoch=0)
    lg.append(make_batch(3), leader_epoch=2)
    assert lg.leader_epochs.entries == [(0, 5), (2, 15)]
    assert lg.latest_epoch == 2
    assert lg.end_offset_for_epoch(0) == (0, 15)
    assert lg.end_offset_for_epoch(1) == (0, 15)
    assert lg.end_offset_for_epoch(2) == (2, 18)
    assert lg.end_offset_for_epoch(3) == UNDEFINED
    lg.append(make_batch(1), leader_epoch=1)  # an older leader's late append: not recorded
    assert lg.leader_epochs.entries == [(0, 5), (2, 15)]
    headers = [d.header.partition_leader_epoch for d in lg.read_batches(0)]
    assert headers == [-1, 0, 0, 2, 1]  # stamped as given, as before


def test_a_new_leader_records_its_epoch_at_the_log_end_when_elected(open_log):
    lg = open_log()
    lg.append(make_batch(5), leader_epoch=1)
    assert lg.assign_leader_epoch(3) == 5
    assert lg.leader_epochs.entries == [(1, 0), (3, 5)]
    assert lg.end_offset_for_epoch(1) == (1, 5)
    assert lg.end_offset_for_epoch(3) == (3, 5)
    lg.append(make_batch(5), leader_epoch=3)  # nothing more to record
    assert lg.leader_epochs.entries == [(1, 0), (3, 5)]
    assert lg.end_offset_for_epoch(3) == (3, 10)
    assert lg.assign_leader_epoch(3) == 10  # elected again in the same epoch: unchanged
    assert lg.leader_epochs.entries == [(1, 0), (3, 5)]


def test_follower_appends_record_each_batchs_own_epoch(open_log):
    lg = open_log()
    data = b"".join([follower_batch(0, 3, 0), follower_batch(3, 2, 0),
                     follower_batch(5, 4, 3), follower_batch(9, 1, 5)])
    lg.append(data, assign_offsets=False)
    assert lg.leader_epochs.entries == [(0, 0), (3, 5), (5, 9)]
    lg.append(follower_batch(10, 2, 5), assign_offsets=False)
    lg.append(follower_batch(12, 2, -1), assign_offsets=False)  # no epoch: nothing
    assert lg.leader_epochs.entries == [(0, 0), (3, 5), (5, 9)]
    assert lg.end_offset_for_epoch(4) == (3, 9)
    assert lg.end_offset_for_epoch(5) == (5, 14)


def test_a_rejected_append_records_no_epoch(open_log):
    lg = open_log()
    lg.append(make_batch(2), leader_epoch=1)
    with pytest.raises(CorruptRecordError):
        lg.append(make_batch(2)[:-3], leader_epoch=4)
    assert lg.leader_epochs.entries == [(1, 0)]


def test_markers_record_their_leader_epoch(open_log):
    lg = open_log()
    lg.append(make_batch(2), leader_epoch=1)
    info = lg.append_marker(7, 0, True, coordinator_epoch=0, leader_epoch=3)
    assert lg.leader_epochs.entries == [(1, 0), (3, info.first_offset)]
    lg.append_marker(7, 0, True, coordinator_epoch=0, leader_epoch=3)
    assert lg.leader_epochs.entries == [(1, 0), (3, 2)]


def test_truncation_and_log_start_moves_cut_the_entries(open_log, small_config):
    lg = open_log(small_config)
    for epoch in range(6):
        for _ in range(4):
            lg.append(make_batch(5, value_size=30), leader_epoch=epoch)
    assert lg.leader_epochs.entries == [(e, 20 * e) for e in range(6)]
    lg.truncate_to(87)  # mid-batch: the batch at 85 goes whole
    assert lg.log_end_offset == 85
    assert lg.leader_epochs.entries == [(e, 20 * e) for e in range(5)]
    lg.truncate_to(80)
    assert lg.leader_epochs.entries == [(e, 20 * e) for e in range(4)]
    lg.delete_records_before(33)
    assert lg.leader_epochs.entries == [(1, 33), (2, 40), (3, 60)]
    lg.roll()
    lg.config = dataclasses.replace(small_config, retention_bytes=0)
    lg.apply_retention()
    assert lg.log_start_offset == lg.log_end_offset == 80
    assert lg.leader_epochs.entries == [(3, 80)]  # the latest epoch stays, at the start
    lg.truncate_fully_and_start_at(500)
    assert lg.leader_epochs.entries == [] and lg.latest_epoch == -1
    lg.append(make_batch(1), leader_epoch=9)
    assert lg.leader_epochs.entries == [(9, 500)]


def test_the_cache_survives_a_restart_and_is_rebuilt_from_headers_without_its_file(
    open_log, small_config, tmp_path
):
    lg = open_log(small_config)
    for epoch in (0, 0, 1, 4, 4, 7):
        lg.append(make_batch(5, value_size=30), leader_epoch=epoch)
    expected = lg.leader_epochs.entries
    lg.close()
    lg = open_log(small_config, clean_shutdown=True)
    assert lg.leader_epochs.entries == expected
    lg.close()
    path = tmp_path / "topic-0" / LEADER_EPOCH_CHECKPOINT_FILE
    path.unlink()  # a log written before leader epochs were kept
    lg = open_log(small_config, clean_shutdown=True)
    assert lg.leader_epochs.entries == expected
    assert path.read_bytes() == b"0\n4\n0 0\n1 10\n4 15\n7 25\n"


def test_a_rebuilt_cache_starts_at_the_log_start(open_log, small_config, tmp_path):
    lg = open_log(small_config)
    for epoch in (1, 2, 3):
        lg.append(make_batch(5), leader_epoch=epoch)
    lg.delete_records_before(7)  # inside the first segment: its batches stay on disk
    lg.close()
    (tmp_path / "topic-0" / LEADER_EPOCH_CHECKPOINT_FILE).unlink()
    lg = open_log(small_config, clean_shutdown=True, log_start_offset=7)
    assert lg.leader_epochs.entries == [(2, 7), (3, 10)]


def test_a_checkpointed_log_is_not_walked_at_open(open_log, monkeypatch):
    lg = open_log()
    lg.append(make_batch(5))  # no epochs in the data
    lg.close()
    lg = open_log(clean_shutdown=True)  # no file, batches: walked once, file written
    assert lg.leader_epochs.entries == []
    lg.close()

    def walked(self):
        raise AssertionError("headers walked although the file exists")

    monkeypatch.setattr(Log, "_epoch_starts_from_headers", walked)
    open_log(clean_shutdown=True)


def test_an_unclean_stop_cuts_entries_past_the_recovered_end(open_log, small_config):
    lg = open_log(small_config)
    lg.append(make_batch(5), leader_epoch=1)
    lg.flush()
    lg.append(make_batch(5), leader_epoch=2)
    path, size = lg.active.log_path, lg.active.size
    for segment in lg.segments:
        os.close(segment.fd)
    lg.closed = True
    os.truncate(path, size - 3)  # the epoch-2 batch was torn
    lg = open_log(small_config, recovery_point=5)
    assert lg.log_end_offset == 5
    assert lg.leader_epochs.entries == [(1, 0)]


def test_a_write_a_crash_interrupted_leaves_nothing_behind(open_log, tmp_path):
    lg = open_log()
    lg.append(make_batch(5), leader_epoch=1)
    lg.close()
    (tmp_path / "topic-0" / (LEADER_EPOCH_CHECKPOINT_FILE + ".tmp")).write_bytes(b"0\n")
    lg = open_log(clean_shutdown=True)
    assert lg.leader_epochs.entries == [(1, 0)]
    assert not (tmp_path / "topic-0" / (LEADER_EPOCH_CHECKPOINT_FILE + ".tmp")).exists()


def test_deleting_the_log_removes_the_file_with_the_directory(open_log, tmp_path):
    lg = open_log()
    lg.append(make_batch(5), leader_epoch=1)
    lg.delete()
    assert not (tmp_path / "topic-0").exists()


# --- the property ---------------------------------------------------------------------------

PROPERTY_CONFIG = LogConfig.from_kafka({"segment.bytes": 1200, "index.interval.bytes": 128})

append_op = st.tuples(st.just("append"), st.booleans(),
                      st.lists(st.tuples(st.integers(0, 2), st.integers(1, 4)), min_size=1,
                               max_size=3))
ops = st.lists(st.one_of(
    append_op, append_op, append_op,
    st.tuples(st.just("roll")),
    st.tuples(st.just("truncate"), st.floats(0, 1)),
    st.tuples(st.just("delete_records"), st.floats(0, 1)),
    st.tuples(st.just("retention"), st.integers(0, 3000)),
    st.tuples(st.just("truncate_fully"), st.integers(0, 30)),
    st.tuples(st.just("flush"), st.sampled_from(["flush", "sync", "flush_rolled"])),
    st.tuples(st.just("restart"), st.sampled_from(["clean", "killed", "no_file", "crashed"])),
), max_size=25)


def expected_entries(headers: list[BatchHeader], log_start: int) -> list[tuple[int, int]]:
    """Brute force from the batches at or after the log start: the first batch of each
    epoch above all before it, its start cut to the log start."""
    out: list[tuple[int, int]] = []
    for h in headers:
        if h.partition_leader_epoch > (out[-1][0] if out else -1):
            out.append((h.partition_leader_epoch, max(h.base_offset, log_start)))
    return out


def brute_end_offset(entries: list[tuple[int, int]], requested: int, log_end: int
                     ) -> tuple[int, int]:
    """Kafka's endOffsetFor, by linear scans."""
    if requested == UNDEFINED_EPOCH or not entries:
        return UNDEFINED
    if entries[-1][0] == requested:
        return requested, log_end
    higher = [start for epoch, start in entries if epoch > requested]
    if not higher:
        return UNDEFINED
    floor = [epoch for epoch, _ in entries if epoch <= requested]
    return (floor[-1] if floor else requested), higher[0]


def check(lg: Log) -> None:
    start, end = lg.log_start_offset, lg.log_end_offset
    headers = [d.header for d in lg.read_batches(start)]
    expected = expected_entries(headers, start)
    entries = [tuple(e) for e in lg.leader_epochs.entries]
    if start < end:
        assert entries == expected
    else:
        # An empty log keeps at most the epoch of its last data, at the log start
        # (Kafka's truncateFromStart keeps the latest entry): no batch says so.
        assert len(entries) <= 1 and all(s == start for _, s in entries)
        expected = entries
    top = max((e for e, _ in expected), default=0)
    for epoch in range(-1, top + 3):
        assert lg.end_offset_for_epoch(epoch) == brute_end_offset(expected, epoch, end), epoch
    # And the meaning: an epoch that has data in the log, and is not the latest, ends
    # where the first batch of a later epoch starts.
    for i, h in enumerate(headers):
        later = [x for x in headers[i:] if x.partition_leader_epoch > h.partition_leader_epoch]
        if later:
            assert lg.end_offset_for_epoch(h.partition_leader_epoch)[1] == max(
                later[0].base_offset, start)


PROPERTY_SETTINGS = settings(
    max_examples=int(os.environ.get("ODRADEK_PROPERTY_EXAMPLES", "60")), deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

# Machine crashes between flushes: the epoch file is only synced with the log, so the
# entries of everything appended since the last flush come back from the batch headers.
crash_ops = st.lists(st.one_of(
    append_op, append_op, append_op,
    st.tuples(st.just("roll")),
    st.tuples(st.just("truncate"), st.floats(0, 1)),
    st.tuples(st.just("delete_records"), st.floats(0, 1)),
    st.tuples(st.just("flush"), st.sampled_from(["flush", "sync", "flush_rolled"])),
    st.tuples(st.just("restart"), st.just("crashed")),
), min_size=4, max_size=30)


@PROPERTY_SETTINGS
@given(ops=ops)
def test_end_offsets_agree_with_the_batch_headers_through_any_history(tmp_path, ops):
    run_history(str(tmp_path / f"t-{uuid.uuid4().hex}" / "t-0"), ops)


@PROPERTY_SETTINGS
@given(ops=crash_ops)
def test_end_offsets_agree_with_the_batch_headers_through_crashes(tmp_path, ops):
    run_history(str(tmp_path / f"t-{uuid.uuid4().hex}" / "t-0"), ops)


def run_history(path: str, ops: list[tuple]) -> None:
    """Apply ``ops`` to a new log at ``path``, checking the leader epochs against the
    batch headers after each."""
    clock = FakeClock()
    lg = Log.open(path, PROPERTY_CONFIG, clock=clock)
    epoch_file = os.path.join(path, LEADER_EPOCH_CHECKPOINT_FILE)
    durable: bytes | None = None  # the epoch file as last synced (None: none synced)
    epoch = 0
    try:
        for op in ops:
            kind = op[0]
            if kind == "append":
                _, as_leader, batches = op
                if as_leader:
                    epoch += batches[0][0]
                    lg.append(b"".join(make_batch(n, value_size=40) for _, n in batches),
                              leader_epoch=epoch)
                else:
                    data = []
                    base = lg.log_end_offset
                    for bump, n in batches:
                        epoch += bump
                        data.append(follower_batch(base, n, epoch))
                        base += n
                    lg.append(b"".join(data), assign_offsets=False)
            elif kind == "roll":
                lg.roll()
            elif kind == "truncate":
                start, end = lg.log_start_offset, lg.log_end_offset
                lg.truncate_to(start + int(op[1] * (end - start)))
            elif kind == "delete_records":
                start, end = lg.log_start_offset, lg.log_end_offset
                lg.delete_records_before(start + int(op[1] * (end - start)))
            elif kind == "retention":
                lg.config = dataclasses.replace(PROPERTY_CONFIG, retention_bytes=op[1])
                lg.apply_retention()
                lg.config = PROPERTY_CONFIG
            elif kind == "truncate_fully":
                lg.truncate_fully_and_start_at(lg.log_end_offset + op[1])
            elif kind == "flush":
                getattr(lg, op[1])()
            elif kind == "restart":
                before = lg.leader_epochs.entries
                non_empty = lg.log_start_offset < lg.log_end_offset
                start = lg.log_start_offset
                if op[1] == "killed":
                    kill(lg)
                    lg = Log.open(path, PROPERTY_CONFIG, clock=clock, log_start_offset=start)
                elif op[1] == "crashed":
                    # The machine died: the epoch file is what was last synced (or none),
                    # the data as the page cache had it (segments are cut by torn-tail
                    # tests elsewhere), recovery from the recovery point of that moment.
                    recovery_point = lg.recovery_point
                    kill(lg)
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(epoch_file)
                    if durable is not None:
                        with open(epoch_file, "wb") as f:
                            f.write(durable)
                    lg = Log.open(path, PROPERTY_CONFIG, clock=clock, log_start_offset=start,
                                  recovery_point=recovery_point)
                else:
                    lg.close()
                    if op[1] == "no_file":
                        with contextlib.suppress(FileNotFoundError):
                            os.unlink(os.path.join(path, LEADER_EPOCH_CHECKPOINT_FILE))
                    lg = Log.open(path, PROPERTY_CONFIG, clock=clock, clean_shutdown=True,
                                  log_start_offset=start)
                if non_empty or op[1] not in ("no_file", "crashed"):
                    # As Kafka's log loading (truncateFromEnd(log end)): an entry starting
                    # at the log end describes no data and does not outlive a restart;
                    # only an empty log has one (its latest epoch, kept at the log start).
                    end = lg.log_end_offset
                    assert lg.leader_epochs.entries == [e for e in before
                                                        if e.start_offset < end], op
            check(lg)
            if not lg.leader_epochs.unsynced:
                try:
                    with open(epoch_file, "rb") as f:
                        durable = f.read()
                except FileNotFoundError:
                    durable = None
    finally:
        if not lg.closed:
            lg.close()
