"""The replication rules as a state machine (hypothesis): three replicas of a partition,
each a real ``Partition`` over a real ``Log``, driven through random appends, follower
fetches, time passing (ISR shrinks), ISR expansions, clean leader changes and the
truncations they lead to, checking after every step the invariants Kafka's design rests
on:

- on a leader, the high watermark never moves back, and never passes the log end of an
  ISR member (so every ISR member has every committed record);
- nothing below the highest high watermark any leader has had (what acks=all
  acknowledged) is ever truncated or changed, on any replica that is in the ISR;
- a leader epoch's entry (epoch, start offset) never changes once the high watermark
  has passed its start.

The I/O around it is replaced by direct calls (ISR writes are "stored" at once, a
fetch answer is handed to the follower in the same step): what is tested is the
decisions of ``cluster/replication.py`` as ``Partition`` applies them to logs.
"""

from __future__ import annotations

import shutil
import tempfile

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from odradek.cluster.replication import Role, truncation_point
from odradek.cluster.state import PartitionState
from odradek.records.builder import build_simple, decode_batches
from odradek.server.replication.partition import Partition
from odradek.server.replication.purgatory import Purgatory
from odradek.storage import Log

REPLICAS = (1, 2, 3)
LAG_MS = 1_000
TP = ("orders", 0)


class Replication(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.root = tempfile.mkdtemp(prefix="odradek-replication-model-")
        self.now = 1_000_000
        self.fetches, self.produces = Purgatory(), Purgatory()
        self.parts: dict[int, Partition] = {}
        for r in REPLICAS:
            lg = Log.open(f"{self.root}/{r}/{TP[0]}-{TP[1]}", replicated=True)
            part = Partition(TP, lg, fetches=self.fetches, produces=self.produces)
            part.set_replicas(REPLICAS)
            self.parts[r] = part
        self.epoch = 0
        self.leader = 1
        self.next_value = 0
        # What was committed: the values at offsets below the highest high watermark.
        self.committed: list[bytes] = []
        self.leader_hw = 0  # the current leader's high watermark, last seen
        self.committed_epochs: dict[int, int] = {}  # epoch -> start offset, once committed
        self._elect(1, REPLICAS)

    def teardown(self) -> None:
        for part in self.parts.values():
            part.log.close()
        shutil.rmtree(self.root, ignore_errors=True)

    # --- the moves -----------------------------------------------------------------------

    def _elect(self, leader: int, isr: tuple[int, ...]) -> None:
        """The controller's clean election: ``leader`` (an ISR member) at the next epoch;
        the others follow, each truncating where it diverges from the new leader."""
        self.epoch += 1
        self.leader = leader
        state = PartitionState(leader, self.epoch, tuple(sorted(isr)), 1, 0)
        for r, part in self.parts.items():
            if r != leader:
                part.make_follower(state)
        new = self.parts[leader]
        new.make_leader(state, leader, self.now)
        self.leader_hw = new.log.high_watermark
        for r, part in self.parts.items():
            if r != leader:
                self._truncate(part, new)

    def _truncate(self, follower: Partition, leader: Partition) -> None:
        """OffsetsForLeaderEpoch until final (the fetcher's loop, without the wire)."""
        for _ in range(20):
            lg = follower.log
            latest = lg.latest_epoch
            if latest < 0:
                return
            leader_epoch, leader_end = leader.log.end_offset_for_epoch(latest)
            follower_epoch, follower_end = lg.end_offset_for_epoch(leader_epoch)
            target, done = truncation_point(lg.log_end_offset, lg.high_watermark,
                                            leader_epoch, leader_end, follower_epoch,
                                            follower_end)
            if target < lg.log_end_offset:
                follower.truncate_to(target)
            if done:
                return
        raise AssertionError("truncation did not settle")

    @property
    def lead(self) -> Partition:
        return self.parts[self.leader]

    @rule(count=st.integers(1, 3))
    def produce(self, count: int) -> None:
        values = []
        for _ in range(count):
            values.append(b"v%d" % self.next_value)
            self.next_value += 1
        self.lead.append_as_leader(build_simple(values), require_min_isr=False)

    @rule(replica=st.sampled_from(REPLICAS), max_batches=st.integers(1, 3),
          answer_lost=st.booleans())
    def follower_fetches(self, replica: int, max_batches: int, answer_lost: bool = False
                         ) -> None:
        """A follower's fetch, recorded by the leader; its answer reaches the follower
        unless lost (a cut connection, the leader gone before it was sent)."""
        if replica == self.leader:
            return
        follower, lead = self.parts[replica], self.lead
        offset = follower.log.log_end_offset
        end = lead.log.log_end_offset
        records = None
        if offset < end:
            read = lead.log.read(offset, 1 << 20, min_one=True)
            assert read.region is not None
            data = read.region.read()
            records = _prefix(data, min(max_batches, len(decode_batches(data))))
            end = read.log_end_offset
        grown = lead.record_follower_fetch(replica, offset, end, self.now, 0, True)
        if grown is not None:
            self._store_isr(grown)
        if not answer_lost:
            hw = lead.log.high_watermark
            follower.append_as_follower(offset, records, hw, lead.log.log_start_offset)

    @rule(ms=st.integers(0, 2 * LAG_MS))
    def time_passes(self, ms: int) -> None:
        self.now += ms
        repl = self.lead.repl
        assert repl is not None
        shrunk = repl.shrink(self.now, LAG_MS)
        if shrunk is not None:
            self._store_isr(shrunk)

    def _store_isr(self, isr: frozenset[int]) -> None:
        """The leader asks for an ISR change: pending (counted for the high watermark
        only if it grows the ISR) until ``isr_write_lands`` or ``isr_write_fails``."""
        repl = self.lead.repl
        assert repl is not None
        repl.begin_isr_change(isr)
        self.lead.advance_high_watermark()  # an expansion counts at once

    @precondition(lambda self: self.lead.repl is not None
                  and self.lead.repl.pending_isr is not None)
    @rule()
    def isr_write_lands(self) -> None:
        repl = self.lead.repl
        assert repl is not None and repl.pending_isr is not None
        repl.isr_change_stored(repl.pending_isr)
        self.lead.advance_high_watermark()

    @precondition(lambda self: self.lead.repl is not None
                  and self.lead.repl.pending_isr is not None)
    @rule()
    def isr_write_fails(self) -> None:
        repl = self.lead.repl
        assert repl is not None
        repl.isr_change_failed()

    @precondition(lambda self: self.lead.repl is not None)
    @rule(data=st.data())
    def leader_changes(self, data: st.DataObject) -> None:
        """The controller elects from the ISR in the store: a change still pending at
        the old leader is not there (and is lost with its leadership)."""
        repl = self.lead.repl
        assert repl is not None
        isr = tuple(sorted(repl.isr))
        self._elect(data.draw(st.sampled_from(isr)), isr)

    # --- the invariants ----------------------------------------------------------------------

    @invariant()
    def high_watermark_rules(self) -> None:
        lead = self.lead
        repl = lead.repl
        assert lead.role is Role.LEADER and repl is not None
        hw = lead.log.high_watermark
        assert hw >= self.leader_hw, "the leader's high watermark moved back"
        self.leader_hw = hw
        for r in repl.isr:  # the stored ISR: what the controller elects from
            assert hw <= self.parts[r].log.log_end_offset, (
                f"high watermark {hw} past ISR member {r}'s log end")
        # What it commits is what every ISR member has.
        values = _values(lead.log, hw)
        # (a new leader's high watermark may be below what its predecessor committed
        # until its followers fetch: it learns it then, as in Kafka)
        n = min(len(values), len(self.committed))
        assert values[:n] == self.committed[:n], "committed records changed"
        if len(values) > len(self.committed):
            self.committed = values
        for r in repl.isr:
            have = _values(self.parts[r].log, self.parts[r].log.log_end_offset)
            assert have[:len(self.committed)] == self.committed, (
                f"ISR member {r} lacks or changed committed records")

    @invariant()
    def committed_epochs_never_change(self) -> None:
        committed_end = len(self.committed)
        for entry in self.lead.log.leader_epochs.entries:
            if entry.start_offset < committed_end:
                start = self.committed_epochs.setdefault(entry.epoch, entry.start_offset)
                assert start == entry.start_offset, f"epoch {entry.epoch} moved"


def _values(lg: Log, end: int) -> list[bytes]:
    """The values at offsets [log start, end) of ``lg``."""
    out: list[bytes] = []
    if end <= lg.log_start_offset:
        return out
    read = lg.read(lg.log_start_offset, 1 << 24, max_offset=end, min_one=True)
    if read.region is None:
        return out
    for batch in decode_batches(read.region.read()):
        for record in batch.records:
            if record.offset < end:
                assert record.value is not None
                out.append(record.value)
    return out


def _prefix(data: bytes, batches: int) -> bytes:
    """The first ``batches`` whole batches of ``data`` (a follower's partial fetch)."""
    pos = 0
    for _ in range(batches):
        length = int.from_bytes(data[pos + 8:pos + 12], "big")
        pos += 12 + length
    return data[:pos]


def test_a_follower_joins_a_new_leaders_isr_only_past_the_start_of_its_epoch() -> None:
    """KIP-101's rule for joining the ISR, in the one sequence that needs it: a new
    leader's high watermark lags what its predecessor committed, and a follower between
    the two asks to join. Were it let in by the high watermark alone, the stored ISR
    would name a replica lacking a committed record (found by mutating the rule)."""
    m = Replication()
    try:
        m.produce(1)  # v0 at 0
        for r in (2, 3, 2, 3):
            m.follower_fetches(r, 1)
        assert m.lead.log.high_watermark == 1
        m.produce(1)  # v1 at 1
        m.follower_fetches(2, 1)
        m.follower_fetches(2, 1)  # broker 2 has both; broker 3 only v0
        m.time_passes(LAG_MS * 6 // 10)
        m.follower_fetches(2, 1)
        m.time_passes(LAG_MS * 6 // 10)  # broker 3 lags: out
        m.isr_write_lands()
        assert m.lead.repl is not None and m.lead.repl.isr == {1, 2}
        m.high_watermark_rules()
        assert m.committed == [b"v0", b"v1"]
        assert m.parts[2].log.high_watermark == 1  # it has not heard of offset 2 yet
        m._elect(2, (1, 2))
        m.follower_fetches(3, 1, answer_lost=True)  # from offset 1: not past the epoch start
        assert m.lead.repl is not None and m.lead.repl.pending_isr is None
        m.high_watermark_rules()
        m.follower_fetches(3, 1)
        m.follower_fetches(3, 1)  # now it has v1: it may join
        m.isr_write_lands()
        assert m.lead.repl is not None and m.lead.repl.isr == {1, 2, 3}
        m.high_watermark_rules()
    finally:
        m.teardown()


Replication.TestCase.settings = settings(
    max_examples=60, stateful_step_count=40, deadline=None,
    suppress_health_check=[HealthCheck.too_slow])
TestReplication = Replication.TestCase
