"""Faults: a full disk, a second process on the same data directory, and SIGKILL in the
middle of a stream of appends. The log stays consistent and nothing acknowledged is lost."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from odradek.storage import KafkaStorageError, LogConfig, LogDirLockedError, LogManager
from odradek.storage.log import Log

from .conftest import make_batch, values_in


def test_a_failed_write_leaves_no_partial_batch_and_the_log_keeps_working(open_log, monkeypatch):
    lg = open_log()
    lg.append(make_batch(5))
    size = lg.active.size
    real_writev = os.writev

    def full_disk(fd, buffers):
        # Write part of the data, as a filling disk does, then fail on the rest.
        os.write(fd, bytes(buffers[0])[:7])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "writev", full_disk)
    with pytest.raises(KafkaStorageError, match="disk is full"):
        lg.append(make_batch(5, start=5))
    monkeypatch.setattr(os, "writev", real_writev)
    assert lg.active.size == size == os.path.getsize(lg.active.log_path)
    assert lg.log_end_offset == 5
    assert lg.append(make_batch(2, start=5)).first_offset == 5
    assert [o for o, _ in values_in(lg)] == list(range(7))


def test_a_failed_fsync_is_reported_as_a_storage_error(open_log, monkeypatch):
    lg = open_log(LogConfig.from_kafka({"flush.messages": 1}))

    def broken_fsync(fd):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "fsync", broken_fsync)
    with pytest.raises(KafkaStorageError, match="fsync"):
        lg.append(make_batch(1))


@pytest.fixture
def tiny_filesystem(tmp_path):
    """A real 1 MiB tmpfs: the kernel, not a mock, says ENOSPC. Needs root (as CI has)."""
    mount_point = tmp_path / "tiny"
    mount_point.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount_point)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def test_a_really_full_disk_refuses_appends_and_keeps_what_was_acknowledged(tiny_filesystem):
    lg = Log.open(str(tiny_filesystem / "topic-0"))
    acked = 0
    with pytest.raises(KafkaStorageError, match="disk is full"):
        for i in range(10_000):
            info = lg.append(make_batch(10, start=10 * i, value_size=200))
            acked = info.last_offset + 1
    assert acked > 0
    assert os.path.getsize(lg.active.log_path) == lg.active.size
    assert [o for o, _ in values_in(lg)] == list(range(acked))
    for segment in lg.segments:
        os.close(segment.fd)  # die without a clean shutdown
    reopened = Log.open(str(tiny_filesystem / "topic-0"), recovery_point=0)
    assert reopened.log_end_offset == acked
    reopened.close()


def test_a_second_process_on_the_same_data_directory_is_refused(tmp_path):
    with LogManager.open(str(tmp_path)):
        with pytest.raises(LogDirLockedError, match=f"pid {os.getpid()}"):
            LogManager.open(str(tmp_path))
        other = subprocess.run(
            [sys.executable, "-c",
             f"from odradek.storage import LogManager; LogManager.open({str(tmp_path)!r})"],
            capture_output=True, text=True, timeout=60,
        )
        assert other.returncode != 0
        assert "LogDirLockedError" in other.stderr
    LogManager.open(str(tmp_path)).close()  # free again once the first one closed


CRASH_CHILD = textwrap.dedent(
    """
    import os, sys
    from odradek.records import builder
    from odradek.storage import LogConfig, LogManager

    data_dir = sys.argv[1]
    config = LogConfig.from_kafka({"segment.bytes": 64 * 1024, "index.interval.bytes": 512})
    manager = LogManager.open(data_dir, default_config=config)
    lg = manager.get_or_create_log("orders", 0)
    i = 0
    while True:
        batch = builder.build_simple([b"order-%d" % (i + j) for j in range(10)],
                                     codec=i % 5)
        info = lg.append(batch)
        os.write(1, b"%d\\n" % info.last_offset)  # the acknowledgement
        i += 10
        if i == 2000:
            os.write(2, b"ready\\n")
    """
)


@pytest.mark.slow
@pytest.mark.parametrize("round_", range(3))
def test_sigkill_during_appends_loses_no_acknowledged_record(tmp_path, round_):
    child = subprocess.Popen(
        [sys.executable, "-c", CRASH_CHILD, str(tmp_path)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    try:
        assert child.stderr.readline() == b"ready\n"
        # Let it run a little longer, at a different moment each round.
        for _ in range(50 * (round_ + 1)):
            child.stdout.readline()
        child.send_signal(signal.SIGKILL)
        out, _ = child.communicate(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    acked = [int(line) for line in out.split()] if out else []
    assert child.returncode == -signal.SIGKILL
    with LogManager.open(str(tmp_path)) as manager:
        assert not manager.had_clean_shutdown
        lg = manager.get_log("orders", 0)
        assert lg is not None
        records = [r for d in lg.read_batches(0) for r in d.records]
        offsets = [r.offset for r in records]
        assert offsets == list(range(len(offsets)))
        highest = max(acked) if acked else 0
        assert len(offsets) >= highest + 1  # every acknowledged record is there
        assert all(r.value == b"order-%d" % r.offset for r in records)
        # The log takes appends again right where it ends.
        assert lg.append(make_batch(1)).first_offset == len(offsets)
