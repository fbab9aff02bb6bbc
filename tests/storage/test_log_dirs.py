"""Several log directories (Kafka's log.dirs, JBOD): where logs go, each directory's own
checkpoints, and moving a log from one directory to another while it is written to
(Kafka's AlterReplicaLogDirs), including stops at every point of a move."""

from __future__ import annotations

import os

import pytest

from odradek.records import builder
from odradek.storage import LogConfig, LogManager, StorageError
from odradek.storage.checkpoint import read_checkpoint
from odradek.storage.errors import LogDirNotFoundError
from odradek.storage.layout import CLEAN_SHUTDOWN_FILE, RECOVERY_POINT_FILE

from .conftest import make_batch, values_in

SMALL = LogConfig.from_kafka({"segment.bytes": 4096, "index.interval.bytes": 256})


@pytest.fixture
def dirs(tmp_path) -> list[str]:
    return [str(tmp_path / "disk-a"), str(tmp_path / "disk-b")]


def test_new_logs_go_to_the_directory_with_the_fewest(dirs):
    with LogManager.open(dirs) as manager:
        for partition in range(4):
            manager.get_or_create_log("orders", partition)
        placed = [manager.dir_of("orders", p) for p in range(4)]
        assert placed == [dirs[0], dirs[1], dirs[0], dirs[1]]
        for p, directory in enumerate(placed):
            assert os.path.isdir(os.path.join(directory, f"orders-{p}"))
    for directory in dirs:  # each directory has its own checkpoints and marker
        assert os.path.exists(os.path.join(directory, CLEAN_SHUTDOWN_FILE))
        entries = read_checkpoint(os.path.join(directory, RECOVERY_POINT_FILE))
        assert {t for t, _ in entries} == {"orders"}
        assert all(manager.dir_of(*tp) == directory for tp in entries)
    with LogManager.open(dirs) as again:
        assert again.had_clean_shutdown
        assert [again.dir_of("orders", p) for p in range(4)] == placed


def test_a_preferred_directory_must_be_a_log_directory(dirs, tmp_path):
    with LogManager.open(dirs) as manager:
        manager.prefer_dir("orders", 0, dirs[1])
        manager.get_or_create_log("orders", 0)
        assert manager.dir_of("orders", 0) == dirs[1]
        with pytest.raises(LogDirNotFoundError):
            manager.prefer_dir("orders", 1, str(tmp_path / "elsewhere"))


def test_a_partition_in_two_directories_is_refused_at_start(dirs):
    for directory in dirs:
        os.makedirs(os.path.join(directory, "orders-0"))
    with pytest.raises(StorageError, match="both the log of orders-0"):
        LogManager.open(dirs)
    for directory in dirs:  # the locks were let go
        LogManager.open(directory).close()


def _idempotent(producer_id: int, sequence: int, count: int = 5) -> bytes:
    return builder.build_simple([f"p{sequence + i}".encode() for i in range(count)],
                                producer_id=producer_id, producer_epoch=0,
                                base_sequence=sequence)


def _fill(lg, batches: int, start: int = 0, epoch: int = 0) -> None:
    for i in range(batches):
        lg.append(make_batch(10, start=start + 10 * i, value_size=100), leader_epoch=epoch)


def _move(manager: LogManager, topic: str, partition: int, to: str,
          during=lambda step: None) -> None:
    assert manager.start_future(topic, partition, to) is not None
    step = 0
    while not manager.copy_to_future(topic, partition, max_bytes=2000):
        during(step)
        step += 1
    manager.finish_move(topic, partition)


def test_a_moved_log_keeps_its_data_epochs_producers_and_offsets(dirs):
    with LogManager.open(dirs, default_config=SMALL) as manager:
        manager.prefer_dir("orders", 0, dirs[0])
        lg = manager.get_or_create_log("orders", 0)
        _fill(lg, 6, epoch=3)
        lg.append(_idempotent(7, 0), leader_epoch=3)
        lg.assign_leader_epoch(5)
        _fill(lg, 6, start=100, epoch=5)
        lg.delete_records_before(23)  # the log starts inside a batch
        before = values_in(lg, 23)
        epochs = lg.leader_epochs.entries

        def produce(step: int) -> None:  # the partition is written to while it moves
            lg.append(make_batch(2, start=1000 + 2 * step), leader_epoch=5)

        _move(manager, "orders", 0, dirs[1], during=produce)
        moved = manager.get_log("orders", 0)
        assert moved is not lg and lg.closed
        assert manager.dir_of("orders", 0) == dirs[1]
        assert not os.path.exists(os.path.join(dirs[0], "orders-0"))
        assert not any(name.startswith("orders-0") for name in os.listdir(dirs[0]))
        assert moved.log_start_offset == 23
        assert values_in(moved, 23)[: len(before)] == before
        assert len(values_in(moved, 23)) > len(before)  # and what came during the move
        assert moved.log_end_offset == lg.log_end_offset
        assert moved.leader_epochs.entries[: len(epochs)] == epochs
        # The producer's state came along: its retry is a duplicate, not new records.
        assert moved.append(_idempotent(7, 0), leader_epoch=5).duplicate
        moved.append(make_batch(3, start=5000), leader_epoch=5)
        end = moved.log_end_offset
    with LogManager.open(dirs, default_config=SMALL) as again:
        assert again.dir_of("orders", 0) == dirs[1]
        assert again.get_log("orders", 0).log_end_offset == end
        assert again.get_log("orders", 0).log_start_offset == 23


def test_a_truncation_of_the_log_during_a_move_starts_the_copy_again(dirs):
    with LogManager.open(dirs, default_config=SMALL) as manager:
        manager.prefer_dir("orders", 0, dirs[0])
        lg = manager.get_or_create_log("orders", 0)
        _fill(lg, 8, epoch=1)
        lg.set_replicated(True)

        def diverge(step: int) -> None:
            if step == 2:  # a follower drops a diverged tail and takes the leader's
                lg.truncate_to(45)
                lg.append(make_batch(10, start=9000), leader_epoch=2)

        _move(manager, "orders", 0, dirs[1], during=diverge)
        moved = manager.get_log("orders", 0)
        assert [v for _, v in values_in(moved)] == [v for _, v in values_in(lg)]
        assert values_in(moved)[-1] == (49, b"v9009")  # the batch at 40 went whole


def test_a_stop_during_the_copy_starts_the_move_again_at_the_next_start(dirs):
    with LogManager.open(dirs, default_config=SMALL) as manager:
        manager.prefer_dir("orders", 0, dirs[0])
        _fill(manager.get_or_create_log("orders", 0), 4)
        manager.start_future("orders", 0, dirs[1])
        manager.copy_to_future("orders", 0, max_bytes=1000)
        assert manager.future_dir_of("orders", 0) == dirs[1]
    assert any(name.endswith("-future") for name in os.listdir(dirs[1]))
    with LogManager.open(dirs, default_config=SMALL) as again:
        assert again.dir_of("orders", 0) == dirs[0]
        assert again.pending_moves == {("orders", 0): dirs[1]}
        assert not any(name.endswith("-future") for name in os.listdir(dirs[1]))
        assert len(values_in(again.get_log("orders", 0))) == 40


def test_a_stop_inside_the_swap_keeps_the_complete_copy(dirs):
    """The current directory was renamed (the commit point), the future not yet: the
    next start makes the future the log, with every record."""
    with LogManager.open(dirs, default_config=SMALL) as manager:
        manager.prefer_dir("orders", 0, dirs[0])
        _fill(manager.get_or_create_log("orders", 0), 4)
        manager.start_future("orders", 0, dirs[1])
        while not manager.copy_to_future("orders", 0):
            pass
    os.replace(os.path.join(dirs[0], "orders-0"),
               os.path.join(dirs[0], "orders-0.0123456789abcdef-delete"))
    with LogManager.open(dirs, default_config=SMALL) as again:
        assert again.dir_of("orders", 0) == dirs[1]
        assert len(values_in(again.get_log("orders", 0))) == 40
        assert again.pending_moves == {}
        assert os.listdir(os.path.join(dirs[1])).count("orders-0") == 1
        assert not any("orders-0" in name for name in os.listdir(dirs[0]))


def test_moving_back_or_deleting_abandons_a_move(dirs):
    with LogManager.open(dirs, default_config=SMALL) as manager:
        manager.prefer_dir("orders", 0, dirs[0])
        _fill(manager.get_or_create_log("orders", 0), 2)
        manager.start_future("orders", 0, dirs[1])
        assert manager.start_future("orders", 0, dirs[0]) is None  # back home: cancelled
        assert manager.future_dir_of("orders", 0) is None
        assert not any(name.endswith("-future") for name in os.listdir(dirs[1]))
        manager.start_future("orders", 0, dirs[1])
        assert manager.delete_log("orders", 0)
        assert manager.future_dir_of("orders", 0) is None
        assert not any(name.startswith("orders-0") for name in os.listdir(dirs[1]))
        with pytest.raises(LogDirNotFoundError):
            manager.start_future("orders", 1, "/not/a/log/dir")
