"""Where a log starts and ends: time and size retention, DeleteRecords, truncation, and
the delayed close that keeps regions valid after their segment is gone."""

from __future__ import annotations

import os

import pytest

from odradek.records import builder
from odradek.storage import LogConfig, OffsetOutOfRangeError

from .conftest import make_batch, values_in

HOUR = 3_600_000


def config(**settings) -> LogConfig:
    base = {"segment.bytes": 2048, "index.interval.bytes": 256}
    base.update({k.replace("_", "."): v for k, v in settings.items()})
    return LogConfig.from_kafka(base)


def fill_aged(lg, clock, ages_hours: list[int], per_batch: int = 5) -> None:
    offset = 0
    for age in ages_hours:
        lg.append(make_batch(per_batch, start=offset, timestamp=clock.now - age * HOUR,
                             value_size=40))
        offset += per_batch


def test_time_retention_deletes_whole_old_segments_and_moves_the_log_start(open_log, clock,
                                                                             tmp_path):
    lg = open_log(config(retention_ms=24 * HOUR))
    fill_aged(lg, clock, [48] * 30 + [1] * 30)
    old_segments = [s for s in lg.segments if s.max_timestamp < clock.now - 24 * HOUR]
    assert old_segments
    deleted = lg.apply_retention()
    assert deleted == len(old_segments)
    assert lg.log_start_offset == lg.segments[0].base_offset > 0
    assert all(s.max_timestamp >= clock.now - 24 * HOUR for s in lg.segments[:-1])
    with pytest.raises(OffsetOutOfRangeError):
        lg.read(0, 100)
    assert values_in(lg, lg.log_start_offset)[-1][0] == 299
    # Kafka's .deleted files, then gone after file.delete.delay.ms
    names = os.listdir(tmp_path / "topic-0")
    assert sum(n.endswith(".log.deleted") for n in names) == deleted
    clock.advance(60_001)
    lg.close_retired()
    assert not [n for n in os.listdir(tmp_path / "topic-0") if n.endswith(".deleted")]


def test_retention_never_deletes_the_active_segment(open_log, clock):
    lg = open_log(config(retention_ms=HOUR))
    fill_aged(lg, clock, [5] * 50)
    lg.apply_retention()
    assert len(lg.segments) == 1
    assert lg.active.size > 0
    assert lg.log_end_offset == 250


def test_size_retention_keeps_the_newest_segments_within_retention_bytes(open_log, clock):
    lg = open_log(config(retention_bytes=5000, retention_ms=-1))
    fill_aged(lg, clock, [0] * 100)
    assert lg.apply_retention() > 0
    # Kafka's rule: drop the oldest segment while the rest still holds retention.bytes.
    assert lg.size_bytes >= 5000
    assert lg.size_bytes - lg.segments[0].size < 5000
    assert values_in(lg, lg.log_start_offset)[-1][0] == 499


def test_retention_ms_minus_one_keeps_everything(open_log, clock):
    lg = open_log(config(retention_ms=-1))
    fill_aged(lg, clock, [10_000] * 50)
    assert lg.apply_retention() == 0
    assert lg.log_start_offset == 0


def test_compact_only_topics_are_not_subject_to_time_retention(open_log, clock):
    lg = open_log(config(retention_ms=HOUR, cleanup_policy="compact"))
    fill_aged(lg, clock, [48] * 50)
    assert lg.apply_retention() == 0


def test_a_region_stays_readable_after_retention_deleted_its_segment(open_log, clock):
    lg = open_log(config(retention_ms=HOUR))
    fill_aged(lg, clock, [48] * 40 + [0])
    region = lg.read(0, 1000).region
    expected = region.read()
    lg.apply_retention()
    assert region.read() == expected  # fd still open for file.delete.delay.ms
    os.sendfile(os.open(os.devnull, os.O_WRONLY), region.fd, region.position, region.length)


def test_delete_records_moves_the_log_start_and_drops_segments_below_it(open_log):
    lg = open_log(config())
    for i in range(60):
        lg.append(make_batch(5, start=5 * i, value_size=40))
    segments = len(lg.segments)
    target = lg.segments[3].base_offset + 2
    assert lg.delete_records_before(target) == target
    assert lg.log_start_offset == target
    assert len(lg.segments) == segments - 3
    with pytest.raises(OffsetOutOfRangeError):
        lg.read(target - 1, 100)
    # A read at the log start returns the batch holding it (Kafka does the same).
    assert lg.read(target, 100).first_offset == target - 2
    assert lg.delete_records_before(1) == target  # never moves backwards
    with pytest.raises(OffsetOutOfRangeError):
        lg.delete_records_before(lg.log_end_offset + 1)


def test_the_log_start_survives_a_restart(open_log):
    lg = open_log(config())
    for i in range(40):
        lg.append(make_batch(5, start=5 * i, value_size=40))
    lg.delete_records_before(77)
    lg.close()
    lg = open_log(config(), clean_shutdown=True, log_start_offset=77)
    assert lg.log_start_offset == 77


def test_truncation_removes_whole_batches_at_and_after_the_offset(open_log):
    lg = open_log(config())
    for i in range(60):
        lg.append(make_batch(5, start=5 * i, value_size=40))
    lg.truncate_to(150)
    assert lg.log_end_offset == 150
    assert values_in(lg)[-1][0] == 149
    lg.truncate_to(123)  # inside the batch 120..124: the whole batch goes
    assert lg.log_end_offset == 120
    assert lg.append(make_batch(2)).first_offset == 120
    assert [o for o, _ in values_in(lg)] == list(range(122))


def test_truncation_into_an_earlier_segment_deletes_the_later_ones(open_log):
    lg = open_log(config())
    for i in range(60):
        lg.append(make_batch(5, start=5 * i, value_size=40))
    target = lg.segments[1].base_offset + 5
    lg.truncate_to(target)
    assert len(lg.segments) == 2
    assert lg.log_end_offset == target
    lg.close()
    lg = open_log(config(), clean_shutdown=True)
    assert lg.log_end_offset == target


def test_truncation_below_the_first_segment_restarts_the_log_there(open_log):
    lg = open_log(config())
    for i in range(40):
        lg.append(make_batch(5, start=5 * i, value_size=40))
    lg.delete_records_before(lg.segments[2].base_offset)
    start = lg.log_start_offset
    lg.truncate_to(start - 3)
    assert lg.log_end_offset == start - 3 == lg.log_start_offset
    assert lg.append(make_batch(1)).first_offset == start - 3


def test_truncation_in_a_compaction_gap_keeps_the_offset_as_log_end(open_log):
    lg = open_log(config())
    recs = [builder.Record(o, 0, b"k", b"v") for o in (0, 1, 2)]
    lg.append(builder.build_batch(recs))
    gap = builder.build_batch([builder.Record(10, 0, b"k", b"v")])
    lg.append(gap, assign_offsets=False)
    lg.truncate_to(6)
    assert lg.log_end_offset == 6
