"""Log compaction: the latest record per key survives with its offset, tombstones last
delete.retention.ms, the dirty ratio and the compaction lag are honoured, and a crash at
any point of the segment swap loses nothing and shows no duplicates."""

from __future__ import annotations

import os

import pytest

from odradek.records import builder, codecs
from odradek.storage import LogCleaner, LogConfig
from odradek.storage.log import Log

from .conftest import FakeClock

DAY = 86_400_000


def compact_config(**settings) -> LogConfig:
    base = {"segment.bytes": 2048, "index.interval.bytes": 256, "cleanup.policy": "compact"}
    base.update({k.replace("_", "."): v for k, v in settings.items()})
    return LogConfig.from_kafka(base)


class Workload:
    """Writes keyed records and remembers the latest (offset, value) per key."""

    def __init__(self, lg: Log, clock: FakeClock) -> None:
        self.lg = lg
        self.clock = clock
        self.latest: dict[bytes, tuple[int, bytes | None]] = {}
        self.n = 0

    def write(self, keys: list[str], *, tombstone_every: int = 0, codec: int = codecs.NONE):
        records = []
        for i, key in enumerate(keys):
            self.n += 1
            value = None if tombstone_every and self.n % tombstone_every == 0 else (
                f"{key}={self.n}".encode().ljust(30, b"."))
            records.append(builder.Record(i, self.clock.now, key.encode(), value))
        info = self.lg.append(builder.build_batch(records, codec=codec))
        for i, record in enumerate(records):
            self.latest[record.key] = (info.first_offset + i, record.value)


def contents(lg: Log) -> list[tuple[int, bytes | None, bytes | None]]:
    return [(r.offset, r.key, r.value) for d in lg.read_batches(lg.log_start_offset)
            for r in d.records]


def assert_latest_only(lg: Log, latest: dict, *, tombstones: bool = True) -> None:
    seen = {}
    for offset, key, value in contents(lg):
        assert key not in seen, f"key {key!r} appears twice"
        seen[key] = (offset, value)
    expected = {k: v for k, v in latest.items() if tombstones or v[1] is not None}
    assert seen == expected


@pytest.fixture
def cleaner(tmp_path, clock) -> LogCleaner:
    return LogCleaner(str(tmp_path), clock=clock)


def test_compaction_keeps_the_latest_value_per_key_at_its_original_offset(
    open_log, clock, cleaner
):
    lg = open_log(compact_config())
    work = Workload(lg, clock)
    for round_ in range(20):
        work.write([f"user-{(round_ * 7 + i) % 25}" for i in range(10)], codec=round_ % 5)
    lg.roll()
    before = lg.size_bytes
    result = cleaner.clean(("topic", 0), lg)
    assert result.records_removed > 0
    assert lg.size_bytes < before
    assert_latest_only(lg, work.latest)


def test_compaction_preserves_codec_producer_fields_and_offset_span(open_log, clock, cleaner):
    lg = open_log(compact_config())
    recs = [builder.Record(i, clock.now, b"same-key", f"v{i}".encode()) for i in range(5)]
    lg.append(builder.build_batch(recs, codec=codecs.ZSTD, producer_id=42, producer_epoch=3,
                                  base_sequence=0))
    lg.roll()
    cleaner.clean(("topic", 0), lg)
    (decoded,) = lg.read_batches(0)
    header = decoded.header
    assert [r.offset for r in decoded.records] == [4]
    assert (header.base_offset, header.last_offset) == (0, 4)  # span kept: sequences stay right
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (42, 3, 0)
    assert header.compression == codecs.ZSTD


def test_the_active_segment_is_never_cleaned(open_log, clock, cleaner):
    lg = open_log(compact_config(segment_bytes=10**6))
    work = Workload(lg, clock)
    for _ in range(10):
        work.write(["a", "b"])
    assert cleaner.clean(("topic", 0), lg) is None
    assert len(contents(lg)) == 20


def test_tombstones_stay_for_delete_retention_ms_then_go(open_log, clock, cleaner):
    lg = open_log(compact_config(delete_retention_ms=DAY))
    work = Workload(lg, clock)
    for _ in range(10):
        work.write([f"k{i}" for i in range(10)], tombstone_every=3)
    lg.roll()
    cleaner.clean(("topic", 0), lg)
    assert_latest_only(lg, work.latest, tombstones=True)
    assert any(v is None for _, _, v in contents(lg))
    clock.advance(DAY - 1)
    cleaner.clean(("topic", 0), lg)
    assert any(v is None for _, _, v in contents(lg))  # not yet past the horizon
    clock.advance(2)
    cleaner.clean(("topic", 0), lg)
    assert_latest_only(lg, work.latest, tombstones=False)


def test_a_cleaner_pass_waits_for_min_cleanable_dirty_ratio(open_log, clock, cleaner, tmp_path):
    lg = open_log(compact_config(min_cleanable_dirty_ratio=0.5))
    work = Workload(lg, clock)
    for i in range(40):
        work.write([f"k{i * 10 + j}" for j in range(10)])  # unique keys: nothing to drop
    lg.roll()
    assert cleaner.clean_once([(("topic", 0), lg)]) != []  # all dirty: ratio 1.0
    assert cleaner.dirty_ratio(("topic", 0), lg) == 0.0
    work.write(["k1"])
    lg.roll()
    assert 0 < cleaner.dirty_ratio(("topic", 0), lg) < 0.5
    assert cleaner.clean_once([(("topic", 0), lg)]) == []
    # the progress survives in cleaner-offset-checkpoint
    again = LogCleaner(str(tmp_path), clock=clock)
    assert again.first_dirty == cleaner.first_dirty


def test_records_younger_than_min_compaction_lag_are_left_alone(open_log, clock, cleaner):
    lg = open_log(compact_config(min_compaction_lag_ms=60_000))
    work = Workload(lg, clock)
    for _ in range(30):
        work.write(["a", "b", "c"])
    lg.roll()
    assert cleaner.clean(("topic", 0), lg) is None
    clock.advance(60_001)
    assert cleaner.clean(("topic", 0), lg) is not None
    assert_latest_only(lg, work.latest)


def test_a_small_offset_map_cleans_in_several_passes(tmp_path, open_log, clock):
    lg = open_log(compact_config())
    work = Workload(lg, clock)
    for round_ in range(6):
        for i in range(10):
            work.write([f"r{round_}-k{j}" for j in range(5)] + [f"r{round_}-k{i % 5}"])
    lg.roll()
    cleaner = LogCleaner(str(tmp_path), clock=clock, max_map_entries=5)
    passes = 0
    while cleaner.clean(("topic", 0), lg) is not None:
        passes += 1
        assert passes < 100
    assert passes > 1
    assert_latest_only(lg, work.latest)


def test_compact_and_delete_applies_both_policies(open_log, clock, cleaner):
    lg = open_log(compact_config(cleanup_policy="compact,delete", retention_ms=3_600_000))
    work = Workload(lg, clock)
    for _ in range(20):
        work.write(["x", "y"])
    clock.advance(2 * 3_600_000)
    for _ in range(20):
        work.write(["x", "z"])
    assert lg.apply_retention() > 0
    lg.roll()
    cleaner.clean(("topic", 0), lg)
    keys = [k for _, k, _ in contents(lg)]
    assert sorted(keys) == [b"x", b"z"] or sorted(keys) == [b"x", b"y", b"z"]
    assert len(keys) == len(set(keys))


def test_reads_during_cleaning_see_either_old_or_new_data_never_a_mix(open_log, clock, cleaner):
    lg = open_log(compact_config())
    work = Workload(lg, clock)
    for _ in range(30):
        work.write(["a", "b", "c", "d"])
    lg.roll()
    region = lg.read(0, 10_000).region  # handed out before the swap
    before = region.read()
    cleaner.clean(("topic", 0), lg)
    assert region.read() == before  # the old file stays valid for its reader
    assert_latest_only(lg, work.latest)


def _compacted_copy(tmp_path, clock, name: str):
    """A log with a cleaned first segment written as cleaner output files, not swapped."""
    lg = Log.open(str(tmp_path / name), compact_config(), clock=clock)
    work = Workload(lg, clock)
    for _ in range(30):
        work.write(["a", "b", "c", "d"])
    lg.roll()
    return lg, work


@pytest.mark.parametrize("stage", ["cleaned-written", "swap-renamed", "indexes-swapped"])
def test_a_crash_at_any_stage_of_the_swap_recovers_old_or_new_but_never_both(
    tmp_path, clock, stage, monkeypatch
):
    lg, work = _compacted_copy(tmp_path, clock, "topic-0")
    expected_all = contents(lg)
    directory = lg.directory
    cleaner = LogCleaner(str(tmp_path), clock=clock)

    real_replace = os.replace
    calls = {"n": 0}
    stop_after = {"cleaned-written": 0, "swap-renamed": 1, "indexes-swapped": 3}[stage]

    class Crash(Exception):
        pass

    def crashing_replace(src, dst):
        if str(src).endswith((".cleaned", ".swap")):
            if calls["n"] >= stop_after:
                raise Crash(stage)
            calls["n"] += 1
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", crashing_replace)
    with pytest.raises(Crash):
        cleaner.clean(("topic", 0), lg)
    monkeypatch.setattr(os, "replace", real_replace)
    for segment in lg.segments:  # the process dies here
        os.close(segment.fd)
    leftovers = [n for n in os.listdir(directory) if n.endswith((".log.cleaned", ".log.swap"))]
    assert leftovers
    if stage != "cleaned-written":  # past the commit point: recovery must finish the swap
        assert any(n.endswith(".log.swap") for n in leftovers)

    reopened = Log.open(directory, compact_config(), clock=clock)
    got = contents(reopened)
    offsets = [o for o, _, _ in got]
    assert offsets == sorted(set(offsets))  # no record visible twice
    assert set(got) <= set(expected_all)  # nothing invented, offsets preserved
    latest = {(offset, key, value) for key, (offset, value) in work.latest.items()}
    assert latest <= set(got)  # nothing that matters lost
    segment_files = [n for n in os.listdir(directory) if n.endswith(".log")]
    assert len(segment_files) == len(reopened.segments)
    assert not [n for n in os.listdir(directory) if n.endswith((".cleaned", ".swap"))]
    reopened.close()


def test_a_truncation_into_a_compacted_away_tail_ends_at_the_cut_and_keeps_it(
        tmp_path, clock, cleaner):
    """Truncating to an offset whose batches compaction removed ends the log at that
    offset, durably: a restart finds the same end, and a later truncation below it
    brings the end down (found by test_log_properties: the end was kept in memory only,
    above the segment's data)."""
    path = str(tmp_path / "t-0")
    lg = Log.open(path, compact_config(), clock=clock)
    work = Workload(lg, clock)
    work.write(["a"])  # offset 0, superseded by
    work.write(["a"])  # offset 1
    lg.roll()
    cleaner.clean(("t", 0), lg)
    assert [offset for offset, _, _ in contents(lg)] == [1]
    lg.truncate_to(1)  # offset 1 goes; offset 0 was compacted away: nothing is left
    assert lg.log_end_offset == 1
    lg.close()
    lg = Log.open(path, compact_config(), clock=clock, clean_shutdown=True)
    try:
        assert lg.log_end_offset == 1
        lg.truncate_to(0)
        assert lg.log_end_offset == 0
        assert lg.append(builder.build_simple([b"again"])).first_offset == 0
    finally:
        lg.close()
