"""The high watermark: the log end for a log on its own, the replicated one (moved by
replication, cut by truncation, raised by log start moves) for a replicated log, and
its checkpoint ``replication-offset-checkpoint`` in the data directory."""

from __future__ import annotations

import dataclasses
import os

import pytest

from odradek.records import builder
from odradek.storage import LogConfig, LogManager, OffsetOutOfRangeError
from odradek.storage.checkpoint import read_checkpoint
from odradek.storage.log import Log

from .conftest import make_batch

HW_FILE = "replication-offset-checkpoint"


def fill(lg: Log, batches: int, size: int = 5) -> None:
    for _ in range(batches):
        lg.append(make_batch(size, value_size=30), leader_epoch=0)


def kill(manager: LogManager) -> None:
    """The process dies: no flush, no checkpoint, no clean-shutdown marker."""
    for lg in manager.logs.values():
        for segment in lg.segments:
            os.close(segment.fd)
        lg.closed = True
    manager._release_locks()


# --- one log ---------------------------------------------------------------------------------


def test_a_log_on_its_own_commits_everything_it_appends(open_log):
    lg = open_log()
    assert not lg.replicated
    fill(lg, 3)
    assert lg.high_watermark == lg.log_end_offset == lg.last_stable_offset == 15
    assert lg.set_high_watermark(4) == 4  # kept for later, not used while unreplicated
    assert lg.high_watermark == 15


def test_a_replicated_log_waits_for_replication(open_log):
    lg = open_log(replicated=True)
    fill(lg, 4)
    assert lg.high_watermark == 0  # nothing replicated yet
    assert lg.last_stable_offset == 0
    assert lg.set_high_watermark(7) == 7
    assert lg.high_watermark == 7
    assert lg.set_high_watermark(5) == 5  # it may go down (a follower takes the leader's)
    assert lg.set_high_watermark(99) == 20  # never past the log end
    assert lg.set_high_watermark(-3) == 0  # nor below the log start
    assert lg.high_watermark == 0


def test_read_committed_stops_at_the_replicated_high_watermark(open_log):
    lg = open_log(replicated=True)
    lg.append(make_batch(5))
    lg.set_high_watermark(5)
    lg.append(builder.build_simple([b"t"], producer_id=7, producer_epoch=0, base_sequence=0,
                                   transactional=True))  # a transaction opens at 5
    fill(lg, 1)
    assert lg.last_stable_offset == 5
    lg.append_marker(7, 0, True, coordinator_epoch=0)
    assert lg.last_stable_offset == 5  # committed, but not replicated yet
    lg.set_high_watermark(lg.log_end_offset)
    assert lg.last_stable_offset == lg.log_end_offset == 12


def test_truncation_lowers_it_and_a_full_truncation_restarts_it(open_log):
    lg = open_log(replicated=True)
    fill(lg, 4)
    lg.set_high_watermark(18)
    lg.truncate_to(12)  # the batch holding 12 goes whole: the log ends at 10
    assert lg.log_end_offset == 10 and lg.high_watermark == 10
    lg.set_high_watermark(3)
    lg.truncate_to(8)
    assert lg.high_watermark == 3  # below the new end: unchanged
    lg.truncate_fully_and_start_at(40)
    assert lg.log_start_offset == lg.log_end_offset == lg.high_watermark == 40


def test_log_start_moves_never_pass_it_and_raise_it_when_unreplicated(open_log, small_config):
    lg = open_log(small_config, replicated=True)
    fill(lg, 30)  # several segments
    lg.set_high_watermark(52)
    with pytest.raises(OffsetOutOfRangeError):
        lg.delete_records_before(53)  # Kafka: not past the high watermark
    assert lg.delete_records_before(52) == 52
    # Retention deletes whole segments below the high watermark only.
    lg.config = dataclasses.replace(small_config, retention_bytes=0)
    lg.apply_retention()
    assert lg.log_start_offset <= lg.high_watermark == 52
    assert len(lg.segments) > 1
    lg.set_high_watermark(lg.log_end_offset)
    lg.apply_retention()
    assert len(lg.segments) == 1 and lg.log_start_offset == lg.active.base_offset


def follower_batches(base: int, count: int, size: int = 5) -> bytes:
    """``count`` batches of ``size`` records from ``base``, as a leader sends them."""
    return b"".join(
        builder.build_batch([builder.Record(b + i, 1_700_000_000_000, None, b"r")
                             for i in range(size)], partition_leader_epoch=0)
        for b in range(base, base + count * size, size))


def test_a_follower_takes_the_leaders_high_watermark_then_its_log_start(open_log,
                                                                       small_config):
    """Kafka's ReplicaFetcherThread.processPartitionData: append, maybeUpdateHighWatermark
    (the leader's, bounded by [log start, log end]), then maybeIncrementLogStartOffset
    with the leader's log start, which refuses only an offset past the high watermark.
    A consistent leader answer (KAFKA-7104: the log start read with the records) never
    is: it is <= the fetch offset <= the follower's new log end, and <= the leader's
    high watermark, hence <= the follower's new one."""
    lg = open_log(small_config, replicated=True)
    lg.append(follower_batches(0, 10), assign_offsets=False)  # 0..49
    # The leader is ahead (high watermark 80) and deleted records up to 37, mid-batch.
    assert lg.set_high_watermark(80) == 50  # bounded by our log end
    assert lg.delete_records_before(37) == 37
    assert lg.log_start_offset == 37 and lg.high_watermark == 50
    # It deleted up to exactly our log end: still not past our high watermark.
    lg.append(follower_batches(50, 2), assign_offsets=False)  # 50..59
    assert lg.set_high_watermark(60) == 60
    assert lg.delete_records_before(60) == 60
    assert lg.log_start_offset == lg.log_end_offset == lg.high_watermark == 60
    # A leader log start behind ours changes nothing (only increments, as Kafka).
    assert lg.delete_records_before(40) == 60
    # Past our high watermark is refused, as Kafka's maybeIncrementLogStartOffset does
    # (OffsetOutOfRangeException); the follower code caps the leader's at it.
    lg.append(follower_batches(60, 2), assign_offsets=False)  # 60..69
    lg.set_high_watermark(65)
    with pytest.raises(OffsetOutOfRangeError):
        lg.delete_records_before(66)
    assert lg.delete_records_before(min(68, lg.high_watermark)) == 65


def test_an_unreplicated_log_keeps_its_high_watermark_at_or_after_the_log_start(
    open_log, small_config
):
    lg = open_log(small_config)
    fill(lg, 30)
    lg.delete_records_before(61)  # unreplicated: up to the log end
    lg.set_replicated(True)
    assert lg.high_watermark == 61  # the kept value followed the log start


def test_becoming_replicated_starts_from_the_log_start_without_a_checkpoint(open_log):
    lg = open_log()
    fill(lg, 2)
    lg.delete_records_before(3)
    lg.set_replicated(True)
    assert lg.high_watermark == 3
    lg.set_replicated(False)
    assert lg.high_watermark == 10


def test_open_clamps_the_checkpointed_high_watermark_to_the_recovered_log(
    open_log, small_config
):
    lg = open_log(small_config)
    fill(lg, 4)
    lg.close()
    lg = open_log(small_config, clean_shutdown=True, high_watermark=12)
    assert lg.replicated and lg.high_watermark == 12
    lg.close()
    lg = open_log(small_config, clean_shutdown=True, high_watermark=12, replicated=False)
    assert not lg.replicated and lg.high_watermark == 20
    lg.close()
    lg = open_log(small_config, clean_shutdown=True, high_watermark=500)
    assert lg.replicated and lg.high_watermark == 20
    lg.close()
    lg = open_log(small_config, clean_shutdown=True, log_start_offset=10, high_watermark=2)
    assert lg.high_watermark == 10
    # A torn tail: recovery cuts the log below the checkpointed high watermark.
    path, size = lg.active.log_path, lg.active.size
    for segment in lg.segments:
        os.close(segment.fd)
    lg.closed = True
    os.truncate(path, size - 5)
    lg = open_log(small_config, recovery_point=0, high_watermark=20)
    assert lg.log_end_offset == 15 and lg.high_watermark == 15


# --- the data directory ------------------------------------------------------------------------


def test_high_watermarks_of_replicated_logs_are_checkpointed_and_read_back(tmp_path):
    with LogManager.open(str(tmp_path)) as manager:
        for partition in range(3):
            fill(manager.get_or_create_log("orders", partition), 4)
        fill(manager.get_or_create_log("local", 0), 2)
        assert manager.set_replicated("orders", 0)
        assert manager.set_replicated("orders", 1)
        assert not manager.set_replicated("missing", 0)
        manager.get_log("orders", 0).set_high_watermark(15)
        manager.get_log("orders", 1).set_high_watermark(20)
        manager.write_checkpoints()
        assert (tmp_path / HW_FILE).read_text() == "0\n2\norders 0 15\norders 1 20\n"
        manager.get_log("orders", 1).set_high_watermark(18)
    # Written again at the clean stop.
    assert read_checkpoint(str(tmp_path / HW_FILE)) == {("orders", 0): 15, ("orders", 1): 18}
    with LogManager.open(str(tmp_path)) as manager:
        o0, o1, o2 = (manager.get_log("orders", p) for p in range(3))
        assert (o0.replicated, o0.high_watermark) == (True, 15)
        assert (o1.replicated, o1.high_watermark) == (True, 18)
        assert (o2.replicated, o2.high_watermark) == (False, 20)  # not in the file
        assert manager.get_log("local", 0).high_watermark == 10
        manager.set_replicated("orders", 2)  # no checkpoint: from its log start
        assert o2.high_watermark == 0
        manager.set_replicated("orders", 0, False)
        assert manager.delete_log("orders", 1)
    assert read_checkpoint(str(tmp_path / HW_FILE)) == {("orders", 2): 0}


def test_no_file_without_replicated_logs_and_emptied_once_none_is(tmp_path, monkeypatch):
    with LogManager.open(str(tmp_path)) as manager:
        fill(manager.get_or_create_log("local", 0), 2)
        manager.write_checkpoints()
    assert not (tmp_path / HW_FILE).exists()
    with LogManager.open(str(tmp_path)) as manager:
        manager.set_replicated("local", 0)
        manager.write_checkpoints()
        assert read_checkpoint(str(tmp_path / HW_FILE)) == {("local", 0): 0}
        manager.set_replicated("local", 0, False)
        manager.write_checkpoints()
        assert (tmp_path / HW_FILE).read_text() == "0\n0\n"
        written = []
        real = os.replace
        monkeypatch.setattr(os, "replace", lambda a, b: written.append(b) or real(a, b))
        manager.write_checkpoints()
        assert str(tmp_path / HW_FILE) not in written  # emptied once, then left alone


def test_an_unclean_restart_starts_from_the_last_checkpoint_clamped(tmp_path):
    config = LogConfig.from_kafka({"segment.bytes": 4096, "index.interval.bytes": 256})
    manager = LogManager.open(str(tmp_path), default_config=config)
    lg = manager.get_or_create_log("orders", 0)
    fill(lg, 6)
    manager.set_replicated("orders", 0)
    lg.set_high_watermark(30)
    manager.write_checkpoints()
    lg.set_high_watermark(25)  # not checkpointed
    path, size = lg.active.log_path, lg.active.size
    kill(manager)
    os.truncate(path, size - 5)  # the last batch (25..29) is torn
    with LogManager.open(str(tmp_path), default_config=config) as manager:
        lg = manager.get_log("orders", 0)
        assert lg.replicated
        assert lg.log_end_offset == 25 and lg.high_watermark == 25
