"""Property: any sequence of appends, rolls, truncations, DeleteRecords, retention passes,
compactions and restarts (clean or killed) reads back exactly what was acknowledged.

A model keeps every acknowledged record; after each step the log must hold the model's
records from the log start on, at the same offsets, with the same keys and values.
Compaction may drop superseded records only: the model then checks that every kept record
was acknowledged and that the newest record of every key is still there.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from odradek.records import builder, codecs
from odradek.storage import LogCleaner, LogConfig
from odradek.storage.log import Log

from .conftest import FakeClock

Rec = tuple[int, bytes | None, bytes | None]  # offset, key, value

CONFIG = LogConfig.from_kafka({
    "segment.bytes": 1500,
    "index.interval.bytes": 128,
    "cleanup.policy": "compact,delete",
    "retention.ms": -1,
    "delete.retention.ms": 10**12,
})


class LogMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="odradek-prop-")
        self.clock = FakeClock()
        self.path = os.path.join(self.dir, "t-0")
        self.log = Log.open(self.path, CONFIG, clock=self.clock)
        self.cleaner = LogCleaner(self.dir, clock=self.clock)
        self.records: list[Rec] = []  # acknowledged and not removed
        self.batches: list[tuple[int, int]] = []  # (base, last) of acknowledged batches
        self.counter = 0

    def teardown(self) -> None:
        if not self.log.closed:
            self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    @initialize()
    def start(self) -> None:
        pass

    # --- operations ----------------------------------------------------------------------

    @rule(count=st.integers(1, 12), codec=st.sampled_from(sorted(codecs.NAMES)),
          keys=st.lists(st.sampled_from([b"a", b"b", b"c", b"d", None]), min_size=12,
                        max_size=12),
          tombstone=st.booleans())
    def append(self, count: int, codec: int, keys: list, tombstone: bool) -> None:
        records = []
        for i in range(count):
            self.counter += 1
            value = None if tombstone and i == 0 and keys[i] else (
                b"value-%d" % self.counter)
            records.append(builder.Record(i, self.clock.now, keys[i], value))
        info = self.log.append(builder.build_batch(records, codec=codec))
        assert info.first_offset == self.log.log_end_offset - count
        self.batches.append((info.first_offset, info.last_offset))
        self.records += [(info.first_offset + i, r.key, r.value) for i, r in enumerate(records)]

    @rule()
    def roll(self) -> None:
        self.log.roll()

    @rule(data=st.data())
    def truncate(self, data: st.DataObject) -> None:
        start, end = self.log.log_start_offset, self.log.log_end_offset
        target = data.draw(st.integers(start, end))
        self.log.truncate_to(target)
        # The batch that holds the target goes whole.
        cut = target
        for base, last in self.batches:
            if base <= target <= last:
                cut = base
        self.records = [r for r in self.records if r[0] < cut]
        self.batches = [(b, la) for b, la in self.batches if la < cut]
        assert self.log.log_end_offset == min(cut, end)

    @rule(data=st.data())
    def delete_records(self, data: st.DataObject) -> None:
        start, end = self.log.log_start_offset, self.log.log_end_offset
        target = data.draw(st.integers(start, end))
        assert self.log.delete_records_before(target) == target

    @rule(keep=st.integers(0, 4000))
    def size_retention(self, keep: int) -> None:
        self.log.config = dataclasses.replace(CONFIG, retention_bytes=keep)
        self.log.apply_retention()
        self.log.config = CONFIG

    @rule()
    def compact(self) -> None:
        self.cleaner.clean(("t", 0), self.log)
        kept = self._visible()
        expected = self._expected()
        assert set(kept) <= set(expected), "compaction invented or altered a record"
        newest = {}
        for rec in expected:
            if rec[1] is not None:
                newest[rec[1]] = rec
        for rec in newest.values():
            assert rec in kept, f"compaction lost the newest record of {rec[1]!r}"
        self.records = [r for r in self.records if r[0] < self.log.log_start_offset] + kept
        # Compaction drops whole batches whose records all went: truncation cuts at the
        # batches that are left, so the model keeps those (found by this test: a
        # truncation into a batch compacted away ends at the target, not its base).
        start = self.log.log_start_offset
        self.batches = [(b, la) for b, la in self.batches if la < start] + [
            (d.header.base_offset, d.header.base_offset + d.header.last_offset_delta)
            for d in self.log.read_batches(start)]

    @rule()
    def restart_clean(self) -> None:
        start = self.log.log_start_offset
        self.log.close()
        self.log = Log.open(self.path, CONFIG, clock=self.clock, clean_shutdown=True,
                            log_start_offset=start)

    @precondition(lambda self: not self.log.closed)
    @rule(from_checkpoint=st.booleans())
    def restart_killed(self, from_checkpoint: bool) -> None:
        start = self.log.log_start_offset
        recovery_point = self.log.recovery_point if from_checkpoint else 0
        for segment in self.log.segments:
            os.close(segment.fd)
        self.log.close_retired(everything=True)
        self.log = Log.open(self.path, CONFIG, clock=self.clock, recovery_point=recovery_point,
                            log_start_offset=start)

    # --- the property ----------------------------------------------------------------------

    def _visible(self) -> list[Rec]:
        return [(r.offset, r.key, r.value)
                for d in self.log.read_batches(self.log.log_start_offset) for r in d.records
                if r.offset >= self.log.log_start_offset]

    def _expected(self) -> list[Rec]:
        return [r for r in self.records if r[0] >= self.log.log_start_offset]

    @invariant()
    def reads_back_exactly_what_was_acknowledged(self) -> None:
        assert self._visible() == self._expected()

    @invariant()
    def log_end_is_past_every_record(self) -> None:
        if self.records:
            assert self.log.log_end_offset > self.records[-1][0]


LogMachine.TestCase.settings = settings(
    max_examples=int(os.environ.get("ODRADEK_PROPERTY_EXAMPLES", "60")),
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestLogProperties = LogMachine.TestCase
