"""The data directory: logs per partition, checkpoints, clean-shutdown marker, deletion,
and the periodic duties (flush.ms, retention, compaction)."""

from __future__ import annotations

import os
import uuid

import pytest

from odradek.records import builder
from odradek.storage import Log, LogConfig, LogManager, partition_metadata
from odradek.storage.checkpoint import read_checkpoint, write_checkpoint
from odradek.storage.layout import parse_log_dir_name

from .conftest import FakeClock, make_batch, values_in


def test_checkpoint_files_use_kafkas_format(tmp_path):
    path = str(tmp_path / "recovery-point-offset-checkpoint")
    write_checkpoint(path, {("orders", 0): 42, ("my-topic", 11): 7})
    with open(path) as f:
        assert f.read() == "0\n2\nmy-topic 11 7\norders 0 42\n"
    assert read_checkpoint(path) == {("orders", 0): 42, ("my-topic", 11): 7}
    assert read_checkpoint(str(tmp_path / "missing")) == {}


def test_partition_directory_names_parse_like_kafkas():
    assert parse_log_dir_name("orders-0") == ("orders", 0)
    assert parse_log_dir_name("my-dashed-topic-12") == ("my-dashed-topic", 12)
    assert parse_log_dir_name("orders") is None
    assert parse_log_dir_name("orders-x") is None
    assert parse_log_dir_name(".hidden-1") is None


def test_logs_are_found_again_after_a_clean_restart(tmp_path):
    with LogManager.open(str(tmp_path)) as manager:
        assert not manager.had_clean_shutdown
        for partition in range(3):
            lg = manager.get_or_create_log("page-views", partition)
            lg.append(make_batch(partition + 1))
        manager.get_or_create_log("other-topic", 0).append(make_batch(4))
    assert os.path.exists(tmp_path / ".kafka_cleanshutdown")
    with LogManager.open(str(tmp_path)) as manager:
        assert manager.had_clean_shutdown
        assert not os.path.exists(tmp_path / ".kafka_cleanshutdown")  # a crash now is unclean
        assert sorted(manager.logs) == [("other-topic", 0), ("page-views", 0),
                                        ("page-views", 1), ("page-views", 2)]
        assert [manager.get_log("page-views", p).log_end_offset for p in range(3)] == [1, 2, 3]


def test_the_start_log_line_says_whether_the_directory_is_new_clean_or_recovered(
        tmp_path, caplog):
    """A first start says the directory is new (there was no shutdown before it), a start
    after close() that the stop was clean, one after a crash (no close) that logs were
    recovered."""
    import logging

    def opened() -> str:
        return [r.getMessage() for r in caplog.records if r.getMessage().startswith("opened")][-1]

    with caplog.at_level(logging.INFO, logger="odradek.storage.manager"):
        manager = LogManager.open(str(tmp_path))
        assert opened().endswith("(a new data directory)")
        manager.get_or_create_log("t", 0).append(make_batch(1))
        manager.close()
        manager = LogManager.open(str(tmp_path))
        assert opened() == f"opened 1 logs in {tmp_path} (clean shutdown before)"
        manager._release_locks()  # a crash: the lock goes with the process, no marker
        LogManager.open(str(tmp_path)).close()
        assert opened().endswith("(unclean shutdown before: logs recovered)")


def test_recovery_points_and_log_starts_are_checkpointed(tmp_path):
    with LogManager.open(str(tmp_path)) as manager:
        lg = manager.get_or_create_log("events", 0)
        for i in range(10):
            lg.append(make_batch(5, start=5 * i))
        lg.delete_records_before(17)
    assert read_checkpoint(str(tmp_path / "recovery-point-offset-checkpoint")) == {
        ("events", 0): 50}
    assert read_checkpoint(str(tmp_path / "log-start-offset-checkpoint")) == {("events", 0): 17}
    with LogManager.open(str(tmp_path)) as manager:
        assert manager.get_log("events", 0).log_start_offset == 17


def test_deleting_a_log_removes_its_directory_and_it_stays_gone(tmp_path):
    with LogManager.open(str(tmp_path)) as manager:
        manager.get_or_create_log("doomed", 0).append(make_batch(3))
        manager.get_or_create_log("kept", 0).append(make_batch(3))
        assert manager.delete_log("doomed", 0)
        assert not manager.delete_log("doomed", 0)
        assert not [n for n in os.listdir(tmp_path) if n.startswith("doomed")]
    # A deletion interrupted after the rename is finished at the next start.
    os.makedirs(tmp_path / "half-0.abc-delete")
    with LogManager.open(str(tmp_path)) as manager:
        assert list(manager.logs) == [("kept", 0)]
    assert not os.path.exists(tmp_path / "half-0.abc-delete")


def test_flush_ms_syncs_logs_whose_unflushed_data_is_old_enough(tmp_path, monkeypatch):
    clock = FakeClock()
    config = LogConfig.from_kafka({"flush.ms": 1000})
    with LogManager.open(str(tmp_path), default_config=config, clock=clock) as manager:
        lg = manager.get_or_create_log("events", 0)
        lg.append(make_batch(3))
        assert lg.recovery_point == 0
        assert manager.flush_due() == 0
        clock.advance(1000)
        assert manager.flush_due() == 1
        assert lg.recovery_point == 3


def test_flush_messages_one_syncs_before_the_append_returns(tmp_path, monkeypatch):
    synced = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real(fd)))
    config = LogConfig.from_kafka({"flush.messages": 1})
    with LogManager.open(str(tmp_path), default_config=config) as manager:
        lg = manager.get_or_create_log("events", 0)
        synced.clear()
        lg.append(make_batch(3))
        assert lg.active.fd in synced
        assert lg.recovery_point == lg.log_end_offset == 3


def test_the_default_flush_policy_leaves_syncing_to_the_page_cache(tmp_path, monkeypatch):
    synced = []
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(fd))
    with LogManager.open(str(tmp_path)) as manager:
        lg = manager.get_or_create_log("events", 0)
        synced.clear()
        for i in range(100):
            lg.append(make_batch(3, start=3 * i))
        assert synced == []
        assert lg.recovery_point == 0


def test_periodic_duties_apply_retention_and_compaction_per_topic_config(tmp_path):
    clock = FakeClock()
    configs = {
        "metrics": LogConfig.from_kafka({"segment.bytes": 1024, "retention.ms": 3_600_000}),
        "profiles": LogConfig.from_kafka({"segment.bytes": 1024, "cleanup.policy": "compact"}),
    }
    with LogManager.open(str(tmp_path), topic_config=configs.__getitem__,
                         clock=clock) as manager:
        metrics = manager.get_or_create_log("metrics", 0)
        profiles = manager.get_or_create_log("profiles", 0)
        for i in range(40):
            metrics.append(make_batch(5, start=5 * i, timestamp=clock.now - 7_200_000,
                                      value_size=30))
            profiles.append(builder.build_batch(
                [builder.Record(j, clock.now, b"user-%d" % (j % 3), b"x" * 30)
                 for j in range(5)]))
        metrics.append(make_batch(1, start=200))
        profiles.roll()
        assert manager.apply_retention() > 0
        assert metrics.log_start_offset > 0
        assert profiles.log_start_offset == 0  # compact only: no time retention
        assert [tp for tp, _ in manager.clean()] == [("profiles", 0)]
        assert len(values_in(profiles)) == 3


def test_background_duties_apply_retention_and_compaction_without_being_called(tmp_path):
    import time

    from odradek.storage import DutyIntervals, LogDuties

    configs = {
        "metrics": LogConfig.from_kafka({"segment.bytes": 1024, "retention.ms": 3_600_000}),
        "profiles": LogConfig.from_kafka({"segment.bytes": 1024, "cleanup.policy": "compact"}),
    }
    intervals = DutyIntervals(retention_check_ms=50, flush_check_ms=50, checkpoint_ms=50,
                              cleaner_backoff_ms=50)
    with LogManager.open(str(tmp_path), topic_config=configs.__getitem__) as manager:
        metrics = manager.get_or_create_log("metrics", 0)
        profiles = manager.get_or_create_log("profiles", 0)
        old = int(time.time() * 1000) - 7_200_000
        for i in range(40):
            metrics.append(make_batch(5, start=5 * i, timestamp=old, value_size=30))
            profiles.append(builder.build_batch(
                [builder.Record(j, old, b"user-%d" % (j % 3), b"x" * 30) for j in range(5)]))
        metrics.append(make_batch(1, start=200))
        profiles.roll()
        with LogDuties(manager, intervals) as duties:
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and (
                metrics.log_start_offset == 0 or len(values_in(profiles)) != 3
            ):
                time.sleep(0.05)
        assert metrics.log_start_offset > 0
        assert len(values_in(profiles)) == 3
        assert {"retention", "cleaner", "checkpoint"} <= set(duties.runs)


def test_rolling_does_not_fsync_but_the_flush_duty_syncs_rolled_segments(tmp_path, monkeypatch):
    synced = []
    real = os.fsync
    config = LogConfig.from_kafka({"segment.bytes": 1024})
    with LogManager.open(str(tmp_path), default_config=config) as manager:
        lg = manager.get_or_create_log("events", 0)
        monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real(fd)))
        for i in range(40):
            lg.append(make_batch(5, start=5 * i, value_size=30))
        assert len(lg.segments) > 3
        assert synced == []  # no append waited for a disk sync
        assert lg.recovery_point == 0
        assert manager.flush_due() == 1
        assert {s.fd for s in lg.segments[:-1]} <= set(synced)
        assert lg.recovery_point == lg.active.base_offset
        assert lg.active.fd not in synced  # the active segment follows flush.ms


def test_a_deleted_logs_files_stay_readable_by_open_regions_until_the_delay(tmp_path):
    clock = FakeClock()
    with LogManager.open(str(tmp_path), clock=clock) as manager:
        lg = manager.get_or_create_log("doomed", 0)
        lg.append(make_batch(3))
        region = lg.read(0, 10_000).region
        expected = region.read()
        manager.delete_log("doomed", 0)
        assert not os.path.exists(lg.directory)
        assert region.read() == expected  # a fetch in flight still sends the right bytes
        clock.advance(60_001)
        manager.apply_retention()
        assert all(segment.closed for segment in lg.segments)


def _crash(manager: LogManager) -> None:
    """Drop a manager as a killed process would: no flush, no marker, no close."""
    for lg in manager.logs.values():
        for segment in lg.segments:
            os.close(segment.fd)
        lg.closed = True
    manager._release_locks()


def test_an_unclean_restart_recovers_every_log_and_closes_them_on_several_threads(tmp_path):
    config = LogConfig.from_kafka({"segment.bytes": 4096, "index.interval.bytes": 256})
    manager = LogManager.open(str(tmp_path), default_config=config, recovery_threads=4)
    for partition in range(12):
        lg = manager.get_or_create_log("many", partition)
        for i in range(partition + 1):
            lg.append(make_batch(5, start=5 * i, value_size=200))
    expected = {p: values_in(manager.get_log("many", p)) for p in range(12)}
    _crash(manager)
    # A torn tail in one log: recovery cuts it there, the others keep everything.
    torn = max((tmp_path / "many-11").glob("*.log"))
    size = os.path.getsize(torn)
    with open(torn, "ab") as f:
        f.write(b"\x00\x00\x00\x00\x00\x00\x00\x05\x00\x00\x01\x00partial")
    with LogManager.open(str(tmp_path), default_config=config,
                         recovery_threads=4) as manager:
        assert not manager.had_clean_shutdown
        assert sorted(manager.logs) == [("many", p) for p in range(12)]
        assert {p: values_in(manager.get_log("many", p)) for p in range(12)} == expected
        assert os.path.getsize(torn) == size  # the torn batch was cut
        assert manager.get_log("many", 11).log_end_offset == 60
    with LogManager.open(str(tmp_path), default_config=config) as manager:
        assert manager.had_clean_shutdown
        assert {p: values_in(manager.get_log("many", p)) for p in range(12)} == expected


def test_a_log_that_cannot_be_opened_fails_the_start_and_frees_the_directory(
        tmp_path, monkeypatch):
    manager = LogManager.open(str(tmp_path))
    for partition in range(6):
        manager.get_or_create_log("t", partition).append(make_batch(2))
    _crash(manager)
    real_open = Log.open
    opened = []

    def failing_open(directory, *args, **kwargs):
        if directory.endswith("t-3"):
            raise PermissionError(f"{directory}: denied")
        lg = real_open(directory, *args, **kwargs)
        opened.append(lg)
        return lg

    monkeypatch.setattr(Log, "open", failing_open)
    with pytest.raises(PermissionError, match="t-3"):
        LogManager.open(str(tmp_path), recovery_threads=3)
    assert len(opened) == 3  # one opening thread: the start stops at the first failure
    for lg in opened:
        lg.close()
    monkeypatch.setattr(Log, "open", real_open)
    with LogManager.open(str(tmp_path), recovery_threads=3) as manager:  # lock released
        assert [manager.get_log("t", p).log_end_offset for p in range(6)] == [2] * 6


def test_a_new_log_syncs_only_the_data_directory_and_skips_recovery(tmp_path, monkeypatch):
    synced = []
    real = os.fsync
    with LogManager.open(str(tmp_path)) as manager:
        monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(os.readlink(
            f"/proc/self/fd/{fd}")), real(fd)))
        lg = manager.get_or_create_log("fresh", 0)
        # The new directory entry is made durable; its empty segment needs no validation.
        assert synced == [str(tmp_path)]
        assert lg.log_end_offset == 0 and lg.recovery_point == 0
        lg.append(make_batch(3))
        assert values_in(lg) == [(i, f"v{i}".encode()) for i in range(3)]
    # A directory that exists but is not open yet (say, restored by hand while the broker
    # ran) is still validated: its torn tail is cut.
    with LogManager.open(str(tmp_path)) as manager:
        os.makedirs(tmp_path / "other-0")
        segment = tmp_path / "other-0" / "00000000000000000000.log"
        with open(segment, "wb") as f:
            f.write(make_batch(2) + b"\x00\x00\x00\x00\x00\x00\x00\x02\x00\x00\x00")
        lg = manager.get_or_create_log("other", 0)
        assert lg.log_end_offset == 2
        assert os.path.getsize(segment) == len(make_batch(2))


@pytest.fixture
def visits(monkeypatch):
    """The logs the flush duty looks at (Log.maybe_flush calls)."""
    seen: list[Log] = []
    real = Log.maybe_flush
    monkeypatch.setattr(Log, "maybe_flush", lambda lg, now=None: (seen.append(lg),
                                                                   real(lg, now))[1])
    return seen


def test_the_flush_duty_visits_only_logs_with_work_due_not_every_log(tmp_path, visits):
    clock = FakeClock()
    config = LogConfig.from_kafka({"flush.ms": 1000, "segment.bytes": 1024})
    with LogManager.open(str(tmp_path), default_config=config, clock=clock) as manager:
        logs = [manager.get_or_create_log("many", p) for p in range(100)]
        clock.advance(5000)
        assert manager.flush_due() == 0
        assert visits == []  # an idle pass costs nothing per log
        # flush.ms counts from the last flush (Kafka's lastFlushTime), here the opening:
        # long enough ago that the first records are due at once.
        logs[3].append(make_batch(3))
        logs[7].append(make_batch(3))
        assert manager.flush_due() == 2
        assert visits == [logs[3], logs[7]]
        assert logs[3].recovery_point == logs[7].recovery_point == 3
        visits.clear()
        logs[3].append(make_batch(3, start=3))
        clock.advance(999)
        assert manager.flush_due() == 0 and visits == []  # not due yet
        clock.advance(1)
        assert manager.flush_due() == 1
        assert visits == [logs[3]] and logs[3].recovery_point == 6
        visits.clear()
        clock.advance(5000)
        assert manager.flush_due() == 0 and visits == []
        for i in range(40):  # rolls: the rolled segments are synced at the next pass
            logs[9].append(make_batch(5, start=5 * i, value_size=30))
        assert manager.flush_due() == 1
        assert visits == [logs[9]]
        assert logs[9].recovery_point >= logs[9].active.base_offset > 0


def test_flush_ms_counts_from_the_last_flush_for_records_appended_since(tmp_path):
    clock = FakeClock()
    config = LogConfig.from_kafka({"flush.ms": 1000})
    with LogManager.open(str(tmp_path), default_config=config, clock=clock) as manager:
        lg = manager.get_or_create_log("events", 0)
        lg.append(make_batch(3))
        clock.advance(600)
        lg.append(make_batch(3, start=3))
        clock.advance(400)
        assert manager.flush_due() == 1
        assert lg.recovery_point == 6
        clock.advance(200)
        lg.append(make_batch(3, start=6))
        clock.advance(799)
        assert manager.flush_due() == 0
        clock.advance(1)
        assert manager.flush_due() == 1
        assert lg.recovery_point == 9


def test_a_group_commit_sync_postpones_the_flush_ms_deadline(tmp_path, visits):
    clock = FakeClock()
    config = LogConfig.from_kafka({"flush.ms": 1000})
    with LogManager.open(str(tmp_path), default_config=config, clock=clock) as manager:
        lg = manager.get_or_create_log("events", 0)
        lg.append(make_batch(3))
        clock.advance(500)
        lg.sync()
        lg.append(make_batch(3, start=3))
        clock.advance(500)
        assert manager.flush_due() == 0  # visited, not due: 500 ms since the sync
        clock.advance(500)
        assert manager.flush_due() == 1
        assert lg.recovery_point == 6


def test_a_shorter_flush_ms_set_on_a_topic_applies_to_records_already_unsynced(tmp_path):
    clock = FakeClock()
    with LogManager.open(str(tmp_path), clock=clock) as manager:
        lg = manager.get_or_create_log("events", 0)
        lg.append(make_batch(3))
        clock.advance(10_000)
        assert manager.flush_due() == 0  # flush.ms defaults to never
        manager.update_config("events", LogConfig.from_kafka({"flush.ms": 100}))
        clock.advance(100)
        assert manager.flush_due() == 1
        assert lg.recovery_point == 3


def test_flush_ms_syncs_what_recovery_left_unsynced_without_a_new_record(tmp_path):
    clock = FakeClock()
    config = LogConfig.from_kafka({"flush.ms": 1000})
    manager = LogManager.open(str(tmp_path), default_config=config, clock=clock)
    manager.get_or_create_log("events", 0).append(make_batch(3))
    for lg in manager.logs.values():  # killed: nothing synced, nothing closed
        for segment in lg.segments:
            os.close(segment.fd)
        lg.closed = True
    manager._release_locks()
    with LogManager.open(str(tmp_path), default_config=config, clock=clock) as manager:
        lg = manager.get_log("events", 0)
        assert lg.recovery_point == 0 and lg.log_end_offset == 3
        clock.advance(1000)
        assert manager.flush_due() == 1
        assert lg.recovery_point == 3


def test_a_failed_flush_is_retried_at_the_next_pass(tmp_path):
    from odradek.storage.errors import KafkaStorageError

    clock = FakeClock()
    config = LogConfig.from_kafka({"flush.ms": 1000})
    with LogManager.open(str(tmp_path), default_config=config, clock=clock) as manager:
        failing = manager.get_or_create_log("events", 0)
        other = manager.get_or_create_log("events", 1)
        failing.append(make_batch(3))
        other.append(make_batch(3))
        real = failing.active.flush

        def broken() -> None:
            raise KafkaStorageError("fsync failed: no space left on device")

        failing.active.flush = broken
        clock.advance(1000)
        with pytest.raises(KafkaStorageError):
            manager.flush_due()
        assert other.recovery_point == 3  # the failure did not stop the others
        assert failing.recovery_point == 0
        failing.active.flush = real
        assert manager.flush_due() == 1
        assert failing.recovery_point == 3


def test_a_deleted_log_is_dropped_from_the_flush_agenda(tmp_path, visits):
    clock = FakeClock()
    config = LogConfig.from_kafka({"flush.ms": 1000})
    with LogManager.open(str(tmp_path), default_config=config, clock=clock) as manager:
        manager.get_or_create_log("doomed", 0).append(make_batch(3))
        manager.delete_log("doomed", 0)
        clock.advance(1000)
        assert manager.flush_due() == 0
        assert visits == []


def test_a_log_records_its_topic_id_in_kafkas_partition_metadata_file(tmp_path, monkeypatch):
    topic_id = uuid.UUID("6c1a5f07-2b1d-4a0a-9a53-1c3f5e6d7b8a")
    synced = []
    real = os.fsync
    with LogManager.open(str(tmp_path)) as manager:
        monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(os.readlink(
            f"/proc/self/fd/{fd}")), real(fd)))
        manager.get_or_create_log("orders", 0, topic_id=topic_id).append(make_batch(2))
        # Not synced on its own: 10,000 new partitions must not cost 10,000 more fsyncs.
        assert synced == [str(tmp_path)]
    text = (tmp_path / "orders-0" / "partition.metadata").read_text()
    assert text == "version: 0\ntopic_id: bBpfBysdSgqaUxw_Xm17ig\n"  # Kafka's Uuid.toString
    assert partition_metadata.read(str(tmp_path / "orders-0")) == topic_id
    with LogManager.open(str(tmp_path)) as manager:
        assert manager.get_or_create_log("orders", 0, topic_id=topic_id).log_end_offset == 2


def test_a_log_of_an_earlier_topic_of_the_same_name_is_deleted_not_served(tmp_path):
    """A topic deleted while a broker was away and created again under its name: the
    broker's old directory has the name but not the topic id. Its records must not be
    served (or followed) as the new topic's: the log is replaced by an empty one."""
    old_id, new_id = uuid.uuid4(), uuid.uuid4()
    with LogManager.open(str(tmp_path)) as manager:
        manager.get_or_create_log("orders", 0, topic_id=old_id).append(make_batch(5))
    with LogManager.open(str(tmp_path)) as manager:
        lg = manager.get_or_create_log("orders", 0, topic_id=new_id)
        assert lg.log_end_offset == 0 and values_in(lg) == []
        assert partition_metadata.read(lg.directory) == new_id
        assert manager.get_or_create_log("orders", 0, topic_id=new_id) is lg


def test_a_log_from_before_topic_ids_is_adopted_by_its_topic(tmp_path):
    topic_id = uuid.uuid4()
    with LogManager.open(str(tmp_path)) as manager:
        manager.get_or_create_log("orders", 0).append(make_batch(3))  # no id known
    assert not (tmp_path / "orders-0" / "partition.metadata").exists()
    with LogManager.open(str(tmp_path)) as manager:
        assert manager.get_or_create_log("orders", 0, topic_id=topic_id).log_end_offset == 3
    assert partition_metadata.read(str(tmp_path / "orders-0")) == topic_id
