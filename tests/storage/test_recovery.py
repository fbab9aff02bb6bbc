"""Opening a log again: trusted after a clean stop, validated from the recovery point
after an unclean one, with torn or corrupt tails cut and indexes rebuilt."""

from __future__ import annotations

import os

from odradek.records import batch as rb

from .conftest import make_batch, values_in


def abandon(lg) -> None:
    """Drop a log as a killed process would: no flush, no index write, no close."""
    for segment in lg.segments:
        os.close(segment.fd)
    lg.closed = True


def fill(lg, batches: int = 60, size: int = 5) -> list[tuple[int, bytes]]:
    for i in range(batches):
        lg.append(make_batch(size, start=size * i, value_size=20))
    return [(i, f"v{i}".encode().ljust(20, b".")) for i in range(batches * size)]


def test_a_clean_stop_reopens_with_everything_readable(open_log, small_config):
    lg = open_log(small_config)
    expected = fill(lg)
    segments = len(lg.segments)
    lg.close()
    lg = open_log(small_config, clean_shutdown=True)
    assert len(lg.segments) == segments
    assert lg.log_end_offset == len(expected)
    assert values_in(lg) == expected
    assert lg.append(make_batch(1, start=len(expected))).first_offset == len(expected)


def test_an_unclean_stop_keeps_every_append_and_rebuilds_unwritten_indexes(
    open_log, small_config, tmp_path
):
    lg = open_log(small_config)
    expected = fill(lg)
    active_index = lg.active.offset_index.path
    abandon(lg)  # the active segment's index entries were never written
    assert os.path.getsize(active_index) == 0
    lg = open_log(small_config, recovery_point=0)
    assert values_in(lg) == expected
    assert len(lg.active.offset_index) > 0  # rebuilt in memory...
    lg.flush()
    assert os.path.getsize(active_index) > 0  # ...and written by the next flush


def test_a_torn_tail_is_cut_at_the_last_whole_batch(open_log, small_config):
    lg = open_log(small_config)
    expected = fill(lg)
    path = lg.active.log_path
    size = lg.active.size
    abandon(lg)
    with open(path, "ab") as f:
        f.write(make_batch(5, start=999)[:40])  # half a batch, as a crash mid-write leaves
    lg = open_log(small_config, recovery_point=0)
    assert os.path.getsize(path) == size
    assert values_in(lg) == expected
    assert lg.append(make_batch(1, start=len(expected))).first_offset == len(expected)


def test_garbage_after_the_last_batch_is_cut(open_log, small_config):
    lg = open_log(small_config)
    expected = fill(lg, 10)
    path = lg.active.log_path
    abandon(lg)
    with open(path, "ab") as f:
        f.write(os.urandom(3000))
    lg = open_log(small_config, recovery_point=0)
    assert values_in(lg) == expected


def test_a_corrupt_batch_cuts_the_log_there_and_drops_later_segments(open_log, small_config):
    lg = open_log(small_config)
    fill(lg, 80)
    assert len(lg.segments) >= 4
    victim = lg.segments[1]
    first_bad = victim.base_offset
    path = victim.log_path
    abandon(lg)
    with open(path, "r+b") as f:  # flip a byte inside the first batch's records
        f.seek(rb.HEADER_SIZE + 3)
        byte = f.read(1)
        f.seek(rb.HEADER_SIZE + 3)
        f.write(bytes([byte[0] ^ 0x55]))
    lg = open_log(small_config, recovery_point=0)
    assert lg.log_end_offset == first_bad
    assert len(lg.segments) == 2
    assert [o for o, _ in values_in(lg)] == list(range(first_bad))
    assert lg.append(make_batch(1)).first_offset == first_bad


def test_recovery_starts_at_the_recovery_point_not_the_beginning(open_log, small_config):
    lg = open_log(small_config)
    fill(lg, 80)
    lg.flush()
    recovery_point = lg.recovery_point
    assert recovery_point == lg.log_end_offset
    lg.append(make_batch(5, start=400, value_size=20))  # unflushed
    early = lg.segments[0]
    early_path = early.log_path
    abandon(lg)
    # Corrupt a record byte in the first (flushed) segment: a full scan would cut there.
    with open(early_path, "r+b") as f:
        f.seek(rb.HEADER_SIZE + 3)
        f.write(b"\xee")
    lg = open_log(small_config, recovery_point=recovery_point)
    assert lg.log_end_offset == 405  # nothing before the recovery point was re-validated


def test_a_missing_index_is_rebuilt(open_log, small_config):
    lg = open_log(small_config)
    expected = fill(lg, 80)
    lg.close()
    victim = lg.segments[1].offset_index.path
    os.unlink(victim)
    lg = open_log(small_config, clean_shutdown=True)
    assert values_in(lg) == expected
    assert os.path.getsize(victim) > 0


def test_a_damaged_index_is_rebuilt_on_first_use(open_log, small_config):
    lg = open_log(small_config)
    expected = fill(lg, 80)
    lg.close()
    victim = lg.segments[1].offset_index.path
    with open(victim, "ab") as f:
        f.write(b"\x01\x02\x03")  # not a whole entry
    lg = open_log(small_config, clean_shutdown=True)
    assert values_in(lg) == expected
    assert os.path.getsize(victim) % 8 == 0


def test_an_index_pointing_past_its_log_is_rebuilt(open_log, small_config):
    lg = open_log(small_config)
    expected = fill(lg, 80)
    lg.close()
    victim = lg.segments[0].offset_index.path
    with open(victim, "ab") as f:
        f.write((5).to_bytes(4, "big") + (10**6).to_bytes(4, "big"))
    lg = open_log(small_config, clean_shutdown=True)
    assert values_in(lg) == expected


def test_leftover_deleted_and_cleaned_files_are_removed_on_open(open_log, small_config, tmp_path):
    lg = open_log(small_config)
    expected = fill(lg, 20)
    lg.close()
    directory = tmp_path / "topic-0"
    (directory / f"{0:020d}.log.cleaned").write_bytes(b"partial cleaner output")
    (directory / f"{7:020d}.log.deleted").write_bytes(b"old")
    (directory / f"{99999:020d}.index").write_bytes(b"")  # an index without its log
    lg = open_log(small_config, clean_shutdown=True)
    names = os.listdir(directory)
    assert not [n for n in names if n.endswith((".cleaned", ".deleted"))]
    assert f"{99999:020d}.index" not in names
    assert values_in(lg) == expected


def test_recovery_validates_without_fsync_and_keeps_the_recovery_point_of_the_checkpoint(
    open_log, small_config, monkeypatch
):
    lg = open_log(small_config)
    fill(lg, 40)
    lg.flush()
    durable = lg.recovery_point
    for i in range(40, 80):  # acknowledged, in the page cache, never synced
        lg.append(make_batch(5, start=5 * i, value_size=20))
    expected = values_in(lg)
    abandon(lg)
    synced = []
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(fd))
    monkeypatch.setattr(os, "fdatasync", lambda fd: synced.append(fd))
    lg = open_log(small_config, recovery_point=durable)
    assert values_in(lg) == expected
    assert synced == []  # validated, not synced...
    assert lg.recovery_point == durable  # ...so the point claims no more than before
    monkeypatch.undo()
    lg.flush()
    assert lg.recovery_point == lg.log_end_offset == 400


def test_a_checkpoint_past_a_cut_tail_is_lowered_to_the_log_end(open_log, small_config):
    lg = open_log(small_config)
    fill(lg, 10)
    lg.flush()
    path, size = lg.active.log_path, lg.active.size
    abandon(lg)
    os.truncate(path, size - 7)  # the last batch lost its end, although once synced
    lg = open_log(small_config, recovery_point=50)
    assert lg.log_end_offset == 45
    assert lg.recovery_point == 45
    assert os.path.getsize(path) < size - 7  # the cut is on disk
