"""The log's read shortcuts must never change what a read returns: the read cursor (the
batch after the last read, so the next sequential read skips the index search) and each
segment's positions of its recent batches (where followers and consumers at the tail
read). After appends, rolls, truncations, DeleteRecords, retention and compaction, a
read that uses them gives the same region, bytes and offsets as the same read without."""

from __future__ import annotations

import os
import shutil
import tempfile

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, rule

from odradek.records import builder
from odradek.storage import LogCleaner, LogConfig
from odradek.storage.errors import OffsetOutOfRangeError
from odradek.storage.log import Log
from odradek.storage.segment import LogSegment

from .conftest import FakeClock, make_batch

CONFIG = LogConfig.from_kafka({
    "segment.bytes": 12000,
    "index.interval.bytes": 128,
    "cleanup.policy": "compact,delete",
    "retention.ms": -1,
    "delete.retention.ms": 10**12,
})


def _read(lg: Log, offset: int, max_bytes: int, committed: bool,
          min_one: bool) -> tuple | type:
    """What a read returns, as comparable values (region bytes, not its fd)."""
    try:
        if committed:
            c = lg.read_committed(offset, max_bytes, min_one=min_one)
            r, extra = c.result, (c.last_stable_offset, tuple(c.aborted))
        else:
            r, extra = lg.read(offset, max_bytes, min_one=min_one), ()
    except OffsetOutOfRangeError:
        return OffsetOutOfRangeError
    data = None if r.region is None else r.region.read()
    return data, r.first_offset, r.log_start_offset, r.log_end_offset, extra


def _read_without_shortcuts(lg: Log, offset: int, max_bytes: int, committed: bool,
                            min_one: bool) -> tuple | type:
    kept = lg._cursor, [(s._tail_last, s._tail_pos) for s in lg.segments]
    lg._cursor = None
    for segment in lg.segments:
        segment._tail_last, segment._tail_pos = [], []
    try:
        return _read(lg, offset, max_bytes, committed, min_one)
    finally:
        lg._cursor = kept[0]
        for segment, (last, pos) in zip(lg.segments, kept[1], strict=True):
            segment._tail_last, segment._tail_pos = last, pos


class CursorMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="odradek-cursor-")
        self.clock = FakeClock()
        self.log = Log.open(os.path.join(self.dir, "t-0"), CONFIG, clock=self.clock)
        self.cleaner = LogCleaner(self.dir, clock=self.clock)
        self.position = 0  # where the sequential reader goes next
        self.counter = 0

    def teardown(self) -> None:
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    @initialize()
    def start(self) -> None:
        pass

    @rule(counts=st.lists(st.integers(1, 6), min_size=1, max_size=4),
          size=st.integers(0, 120),
          keys=st.lists(st.sampled_from([b"a", b"b", b"c", None]), min_size=6, max_size=6))
    def append(self, counts: list[int], size: int, keys: list) -> None:
        for count in counts:
            records = []
            for i in range(count):
                self.counter += 1
                records.append(builder.Record(i, self.clock.now, keys[i],
                                              b"%d" % self.counter + b"." * size))
            self.log.append(builder.build_batch(records))

    @rule()
    def roll(self) -> None:
        self.log.roll()

    @rule(back=st.integers(0, 20), count=st.integers(1, 5))
    def truncate_and_append_anew(self, back: int, count: int) -> None:
        """Cut the tail and write different batches where it was: a stale cursor would
        name a header that is no longer there."""
        self.log.truncate_to(max(self.log.log_start_offset, self.log.log_end_offset - back))
        self.log.append(make_batch(count, start=self.counter, value_size=7 * count))
        self.counter += count

    @rule(count=st.integers(1, 9))
    def rewrite_where_the_reader_is(self, count: int) -> None:
        """Cut the log at the reader's next offset (where the cursor points) and write a
        batch of another size there: the cursor's header is then stale."""
        lg = self.log
        if lg.log_start_offset <= self.position < lg.log_end_offset:
            lg.truncate_to(self.position)
            lg.append(make_batch(count, start=self.counter, value_size=11 * count))
            self.counter += count

    @rule(ahead=st.integers(0, 15))
    def delete_records(self, ahead: int) -> None:
        self.log.delete_records_before(min(self.log.log_end_offset,
                                           self.log.log_start_offset + ahead))

    @rule()
    def compact(self) -> None:
        self.clock.advance(1000)
        self.cleaner.clean(("t", 0), self.log)

    @rule(where=st.floats(0, 1.2))
    def reader_jumps(self, where: float) -> None:
        """To anywhere in the log (or a little past its end)."""
        start, end = self.log.log_start_offset, self.log.log_end_offset
        self.position = start + int(where * (end - start))

    @rule(reads=st.lists(st.tuples(st.sampled_from([0, 1, 150, 400, 700, 1500, 10_000]),
                                   st.booleans(), st.booleans()), min_size=1, max_size=5))
    def sequential_reads(self, reads: list[tuple[int, bool, bool]]) -> None:
        """Read on from where the last read ended (what a consumer does), each read
        compared with the same read made without the cursor."""
        lg = self.log
        for max_bytes, committed, min_one in reads:
            expected = _read_without_shortcuts(lg, self.position, max_bytes, committed,
                                               min_one)
            got = _read(lg, self.position, max_bytes, committed, min_one)
            assert got == expected
            if got is not OffsetOutOfRangeError and got[0] is not None:
                self.position = builder.decode_batches(got[0])[-1].header.next_offset

    @rule(where=st.floats(0, 1.1), max_bytes=st.sampled_from([1, 150, 10_000]))
    def read_anywhere(self, where: float, max_bytes: int) -> None:
        """A read at any offset (a follower or a consumer near the tail, or far back)."""
        lg = self.log
        offset = lg.log_start_offset + int(where * (lg.log_end_offset - lg.log_start_offset))
        assert (_read(lg, offset, max_bytes, False, True)
                == _read_without_shortcuts(lg, offset, max_bytes, False, True))


TestReadCursor = CursorMachine.TestCase
TestReadCursor.settings = settings(max_examples=200, stateful_step_count=40, deadline=None,
                                   suppress_health_check=[HealthCheck.too_slow])


def test_a_consumer_reading_on_skips_the_index_search(tmp_path, monkeypatch):
    lg = Log.open(str(tmp_path / "t-0"), LogConfig.from_kafka({"index.interval.bytes": 128}))
    for i in range(50):
        lg.append(make_batch(10, start=10 * i, value_size=90))
    searches = []
    real_find = LogSegment.find
    monkeypatch.setattr(LogSegment, "find",
                        lambda self, offset: searches.append(offset) or real_find(self, offset))
    offset, reads = 0, 0
    while offset < lg.log_end_offset:
        region = lg.read(offset, 5_000).region
        offset = builder.decode_batches(region.read())[-1].header.next_offset
        reads += 1
    assert reads > 5
    assert searches == [0]  # only the first read searched the index
    lg.truncate_to(250)
    lg.append(make_batch(3, start=999, value_size=5))
    assert builder.decode_batches(lg.read(250, 5_000).region.read())[0].records[0].value == (
        b"v999.")
    lg.close()


def test_a_consumer_at_the_tail_skips_the_index_search_for_each_new_batch(tmp_path, monkeypatch):
    """A long-polling consumer reads to the log end, then the batch appended next: the
    cursor remembers where that batch will start, so no read after the first searches."""
    lg = Log.open(str(tmp_path / "t-0"), LogConfig.from_kafka({"index.interval.bytes": 128}))
    lg.append(make_batch(10, start=0, value_size=90))
    searches = []
    real_find = LogSegment.find
    monkeypatch.setattr(LogSegment, "find",
                        lambda self, offset: searches.append(offset) or real_find(self, offset))
    offset = 0
    for i in range(1, 30):
        decoded = builder.decode_batches(lg.read(offset, 1_000_000).region.read())
        assert decoded[0].records[0].value.rstrip(b".") == b"v%d" % (10 * (i - 1))
        offset = decoded[-1].header.next_offset
        assert lg.read(offset, 1_000_000).region is None  # at the end: nothing yet
        lg.append(make_batch(10, start=10 * i, value_size=90))
    assert searches == [0]
    lg.close()


def test_a_batch_rewritten_where_the_cursor_points_is_read_as_it_is_now(tmp_path):
    lg = Log.open(str(tmp_path / "t-0"), LogConfig.from_kafka({"index.interval.bytes": 128}))
    for i in range(10):
        lg.append(make_batch(10, start=10 * i, value_size=90))
    region = lg.read(0, 3_000).region
    following = builder.decode_batches(region.read())[-1].header.next_offset
    assert lg._cursor is not None and lg._cursor[2].base_offset == following
    # Replication drops the tail from there, and a different batch takes its place.
    lg.truncate_to(following)
    lg.append(make_batch(2, start=500, value_size=3))
    decoded = builder.decode_batches(lg.read(following, 3_000).region.read())
    assert [r.value for b in decoded for r in b.records] == [b"v500", b"v501"]
    lg.close()


def test_a_compacted_segment_is_read_as_it_is_now(tmp_path):
    clock = FakeClock()
    config = LogConfig.from_kafka({"index.interval.bytes": 128, "segment.bytes": 4000,
                                   "cleanup.policy": "compact"})
    lg = Log.open(str(tmp_path / "t-0"), config, clock=clock)
    for i in range(30):
        lg.append(make_batch(5, start=5 * i, keys=[b"k%d" % (j % 2) for j in range(5)],
                             value_size=40))
    region = lg.read(0, 1_000).region
    following = builder.decode_batches(region.read())[-1].header.next_offset
    assert lg._cursor is not None
    clock.advance(1000)
    assert LogCleaner(str(tmp_path), clock=clock).clean(("t", 0), lg) is not None
    kept = lg._cursor
    lg._cursor = None
    expected = _read(lg, following, 1_000, False, True)
    lg._cursor = kept
    assert _read(lg, following, 1_000, False, True) == expected
    lg.close()
