"""Segment files, rolls and the sparse offset and time indexes, as Kafka lays them out."""

from __future__ import annotations

import os
import struct

from odradek.storage import LogConfig

from .conftest import make_batch, values_in


def test_a_partition_is_a_directory_of_20_digit_segment_files(open_log, tmp_path, small_config):
    lg = open_log(small_config)
    for i in range(40):
        lg.append(make_batch(5, start=5 * i, value_size=20))
    names = sorted(os.listdir(tmp_path / "topic-0"))
    logs = [n for n in names if n.endswith(".log")]
    assert len(logs) == len(lg.segments) > 1
    for seg in lg.segments:
        stem = f"{seg.base_offset:020d}"
        assert {stem + ".log", stem + ".index", stem + ".timeindex"} <= set(names)
    assert logs[0] == "00000000000000000000.log"


def test_segments_roll_at_segment_bytes_and_start_at_the_next_offset(open_log, small_config):
    lg = open_log(small_config)
    for i in range(40):
        lg.append(make_batch(5, start=5 * i, value_size=20))
    for prev, seg in zip(lg.segments, lg.segments[1:], strict=False):
        assert prev.size <= small_config.segment_bytes
        assert seg.base_offset == prev.next_offset
    assert values_in(lg) == [(i, f"v{i}".encode().ljust(20, b".")) for i in range(200)]


def test_segments_roll_when_batch_timestamps_pass_segment_ms(open_log):
    lg = open_log(LogConfig.from_kafka({"segment.ms": 1000}))
    lg.append(make_batch(1, timestamp=10_000))
    lg.append(make_batch(1, timestamp=10_500))
    assert len(lg.segments) == 1
    lg.append(make_batch(1, timestamp=11_001))
    assert len(lg.segments) == 2
    assert lg.active.base_offset == 2


def test_a_full_offset_index_rolls_the_segment(open_log):
    lg = open_log(LogConfig.from_kafka({"segment.index.bytes": 32, "index.interval.bytes": 0}))
    for i in range(20):
        lg.append(make_batch(1, start=i))
    assert len(lg.segments) > 3
    assert all(len(s.offset_index) <= 4 for s in lg.segments)


def test_offset_index_has_kafka_layout_and_an_entry_per_interval(open_log, tmp_path):
    lg = open_log(LogConfig.from_kafka({"index.interval.bytes": 1000}))
    batch_size = len(make_batch(5, value_size=50))
    for i in range(100):
        lg.append(make_batch(5, start=5 * i, value_size=50))
    lg.flush()
    data = (tmp_path / "topic-0" / f"{0:020d}.index").read_bytes()
    entries = list(struct.iter_unpack(">ii", data))
    assert len(entries) == len(lg.active.offset_index)
    expected = 100 // (1000 // batch_size + 1)  # an entry once more than 1000 bytes passed
    assert abs(len(entries) - expected) <= 2
    for relative_offset, position in entries:
        assert relative_offset % 5 == 0  # entries name the base offset of a batch
        assert position == relative_offset // 5 * batch_size


def test_lookups_use_the_index_then_walk_a_few_headers(open_log):
    lg = open_log(LogConfig.from_kafka({"index.interval.bytes": 200}))
    for i in range(300):
        lg.append(make_batch(2, start=2 * i, value_size=30))
    segment = lg.active
    calls = 0
    real = segment.read_header

    def counting(position):
        nonlocal calls
        calls += 1
        return real(position)

    segment.read_header = counting
    result = lg.read(451, 1)
    assert result.first_offset == 450
    assert calls <= 4


def test_offset_for_timestamp_finds_the_first_record_at_or_after_it(open_log, small_config):
    lg = open_log(small_config)
    for i in range(100):
        lg.append(make_batch(3, start=3 * i, timestamp=1000 + 10 * i, value_size=10))
    assert lg.offset_for_timestamp(0) == (0, 1000)
    assert lg.offset_for_timestamp(1000) == (0, 1000)
    assert lg.offset_for_timestamp(1001) == (3, 1010)
    assert lg.offset_for_timestamp(1500) == (150, 1500)
    assert lg.offset_for_timestamp(1990) == (297, 1990)
    assert lg.offset_for_timestamp(1991) is None


def test_offset_for_timestamp_picks_the_record_inside_a_batch(open_log):
    from odradek.records import builder

    lg = open_log()
    recs = [builder.Record(i, 100 + i * 10, None, b"x") for i in range(5)]
    lg.append(builder.build_batch(recs))
    assert lg.offset_for_timestamp(125) == (3, 130)


def test_offset_of_max_timestamp_is_the_newest_record_even_out_of_order(open_log, small_config):
    lg = open_log(small_config)
    for i in range(60):
        ts = 5000 if i == 17 else 1000 + i
        lg.append(make_batch(3, start=3 * i, timestamp=ts, value_size=10))
    assert lg.offset_of_max_timestamp() == (51, 5000)


def test_indexes_of_old_segments_are_loaded_only_when_needed(open_log, small_config):
    lg = open_log(small_config)
    for i in range(60):
        lg.append(make_batch(5, start=5 * i, value_size=20))
    lg.close()
    lg = open_log(small_config, clean_shutdown=True)
    old = lg.segments[0]
    assert not old.offset_index._loaded
    lg.read(1, 100)
    assert old.offset_index._loaded
