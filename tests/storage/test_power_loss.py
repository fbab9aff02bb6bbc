"""Crashes that lose what was never synced: the page cache dies with the machine, so a
file keeps only the bytes an fsync covered. Whatever the recovery-point checkpoint
says is on disk must survive that, including a crash right after a recovery (which
validates the unsynced tail but does not sync it)."""

from __future__ import annotations

import os

import pytest

from odradek.storage import LogConfig, LogManager
from odradek.storage.checkpoint import read_checkpoint

from .conftest import make_batch, values_in

CONFIG = LogConfig.from_kafka({"segment.bytes": 4096, "index.interval.bytes": 256})


@pytest.fixture
def disk(monkeypatch):
    """Records, per file, how many bytes an fsync has made durable."""
    durable: dict[str, int] = {}
    real_fsync, real_fdatasync = os.fsync, os.fdatasync

    def tracked(real):
        def sync(fd: int) -> None:
            real(fd)
            path = os.readlink(f"/proc/self/fd/{fd}")
            if os.path.isfile(path):
                durable[path] = os.fstat(fd).st_size
        return sync

    monkeypatch.setattr(os, "fsync", tracked(real_fsync))
    monkeypatch.setattr(os, "fdatasync", tracked(real_fdatasync))
    return durable


def kill(manager: LogManager) -> None:
    """The process dies: no flush, no checkpoint, no clean-shutdown marker."""
    for lg in manager.logs.values():
        for segment in lg.segments:
            os.close(segment.fd)
        lg.closed = True
    manager._release_locks()


def lose_power(data_dir: str, durable: dict[str, int]) -> None:
    """Every segment file keeps only what was synced (a file never synced: nothing)."""
    for root, _, names in os.walk(data_dir):
        for name in names:
            if name.endswith(".log"):
                path = os.path.join(root, name)
                os.truncate(path, min(os.path.getsize(path), durable.get(path, 0)))


def produce(lg, start_batch: int, batches: int) -> None:
    for i in range(start_batch, start_batch + batches):
        lg.append(make_batch(5, start=5 * i, value_size=20))


def test_a_power_loss_right_after_recovery_loses_nothing_the_checkpoint_called_durable(
    tmp_path, disk
):
    data_dir = str(tmp_path)
    manager = LogManager.open(data_dir, default_config=CONFIG)
    lg = manager.get_or_create_log("events", 0)
    produce(lg, 0, 40)
    lg.flush()
    manager.write_checkpoints()
    synced_end = lg.log_end_offset
    synced_values = values_in(lg)
    produce(lg, 40, 60)  # acknowledged, rolled over several segments, never synced
    everything = values_in(lg)
    kill(manager)

    # The process restarts (the machine did not crash: the page cache still has it all).
    manager = LogManager.open(data_dir, default_config=CONFIG)
    lg = manager.get_log("events", 0)
    assert values_in(lg) == everything
    checkpointed = read_checkpoint(os.path.join(data_dir, "recovery-point-offset-checkpoint"))
    assert checkpointed[("events", 0)] == synced_end  # not the log end: nothing new is synced
    kill(manager)

    # Now the machine loses power before anything was flushed.
    lose_power(data_dir, disk)
    manager = LogManager.open(data_dir, default_config=CONFIG)
    lg = manager.get_log("events", 0)
    assert lg.log_end_offset >= synced_end
    assert values_in(lg)[: len(synced_values)] == synced_values
    manager.close()


def test_after_recovery_the_flush_duty_syncs_the_recovered_segments_then_checkpoints_them(
    tmp_path, disk
):
    data_dir = str(tmp_path)
    manager = LogManager.open(data_dir, default_config=CONFIG)
    lg = manager.get_or_create_log("events", 0)
    produce(lg, 0, 60)  # several segments, none synced
    everything = values_in(lg)
    kill(manager)

    manager = LogManager.open(data_dir, default_config=CONFIG)
    lg = manager.get_log("events", 0)
    assert lg.recovery_point == 0
    assert manager.flush_due() == 1  # the rolled segments that recovery validated
    assert lg.recovery_point == lg.active.base_offset > 0
    manager.write_checkpoints()
    kill(manager)

    lose_power(data_dir, disk)  # the active segment was never synced: it is lost
    manager = LogManager.open(data_dir, default_config=CONFIG)
    lg = manager.get_log("events", 0)
    survived = values_in(lg)
    assert len(survived) >= lg.active.base_offset
    assert survived == everything[: len(survived)]
    manager.close()


def test_a_clean_stop_after_recovery_syncs_the_recovered_data(tmp_path, disk):
    data_dir = str(tmp_path)
    manager = LogManager.open(data_dir, default_config=CONFIG)
    produce(manager.get_or_create_log("events", 0), 0, 60)
    everything = values_in(manager.get_log("events", 0))
    kill(manager)
    LogManager.open(data_dir, default_config=CONFIG).close()
    lose_power(data_dir, disk)
    with LogManager.open(data_dir, default_config=CONFIG) as manager:
        assert manager.had_clean_shutdown
        assert values_in(manager.get_log("events", 0)) == everything
