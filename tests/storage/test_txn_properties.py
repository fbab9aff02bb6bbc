"""Property: any sequence of plain and transactional appends, COMMIT/ABORT markers,
rolls, truncations and restarts (clean, or killed, with the ``.txnindex`` files and the
snapshot lost or not) keeps
the last stable offset, the aborted transactions and what read_committed returns equal to
a simple model that replays the acknowledged batches in order."""

from __future__ import annotations

import os
import shutil
import tempfile

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from odradek.records import builder
from odradek.storage import LogConfig
from odradek.storage.log import Log

from .conftest import FakeClock

CONFIG = LogConfig.from_kafka({"segment.bytes": 700, "index.interval.bytes": 128})
PIDS = (1, 2, 3)

# (base, last, kind, pid): kind "plain", "txn", "commit" or "abort"
Event = tuple[int, int, str, int]


def replay(events: list[Event], end: int):
    """(LSO, aborted (pid, first, last) in marker order, committed record offsets)."""
    open_txn: dict[int, int] = {}
    members: dict[int, list[tuple[int, int]]] = {}
    aborted, visible = [], []
    for base, last, kind, pid in events:
        if kind == "plain":
            visible.append((base, last))
        elif kind == "txn":
            open_txn.setdefault(pid, base)
            members.setdefault(pid, []).append((base, last))
        else:  # a marker; one with no open transaction ends an empty one (as in Kafka)
            first = open_txn.pop(pid, base)
            if kind == "abort":
                aborted.append((pid, first, base))
            else:
                visible += members.get(pid, [])
            members.pop(pid, None)
    lso = min(open_txn.values(), default=end)
    offsets = sorted(o for b, la in visible if la < lso for o in range(b, la + 1))
    return lso, aborted, offsets


class TxnLogMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="odradek-txn-prop-")
        self.clock = FakeClock()
        self.path = os.path.join(self.dir, "t-0")
        self.log = Log.open(self.path, CONFIG, clock=self.clock)
        self.events: list[Event] = []

    def teardown(self) -> None:
        if not self.log.closed:
            self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def _next_seq(self, pid: int) -> int:
        return sum(la - b + 1 for b, la, kind, p in self.events if p == pid and kind == "txn")

    # --- operations ------------------------------------------------------------------------

    @rule(count=st.integers(1, 5))
    def append_plain(self, count: int) -> None:
        info = self.log.append(builder.build_simple([b"x" * 20] * count,
                                                    timestamp=self.clock.now))
        self.events.append((info.first_offset, info.last_offset, "plain", -1))

    @rule(pid=st.sampled_from(PIDS), count=st.integers(1, 5))
    def append_transactional(self, pid: int, count: int) -> None:
        data = builder.build_simple([b"t%d" % pid] * count, timestamp=self.clock.now,
                                    producer_id=pid, producer_epoch=0,
                                    base_sequence=self._next_seq(pid), transactional=True)
        info = self.log.append(data)
        assert not info.duplicate
        self.events.append((info.first_offset, info.last_offset, "txn", pid))

    @rule(pid=st.sampled_from(PIDS), commit=st.booleans())
    def marker(self, pid: int, commit: bool) -> None:
        info = self.log.append_marker(pid, 0, commit, coordinator_epoch=0)
        self.events.append((info.first_offset, info.first_offset,
                            "commit" if commit else "abort", pid))

    @rule()
    def roll(self) -> None:
        self.log.roll()

    @rule(data=st.data())
    def truncate(self, data: st.DataObject) -> None:
        target = data.draw(st.integers(self.log.log_start_offset, self.log.log_end_offset))
        self.log.truncate_to(target)
        cut = target
        for base, last, _, _ in self.events:
            if base <= target <= last:
                cut = base
        self.events = [e for e in self.events if e[1] < cut]

    @rule()
    def restart_clean(self) -> None:
        self.log.close()
        self.log = Log.open(self.path, CONFIG, clock=self.clock, clean_shutdown=True)

    @precondition(lambda self: not self.log.closed)
    @rule(lose_txn_indexes=st.booleans(), from_checkpoint=st.booleans())
    def restart_killed(self, lose_txn_indexes: bool, from_checkpoint: bool) -> None:
        recovery_point = self.log.recovery_point if from_checkpoint else 0
        for segment in self.log.segments:
            os.close(segment.fd)
        self.log.close_retired(everything=True)
        if lose_txn_indexes:
            # Derived data, rebuilt from the markers after the producer-state snapshot:
            # losing every index (and the snapshot) means a full replay rebuilds them.
            for name in os.listdir(self.path):
                if name.endswith((".txnindex", ".snapshot")):
                    os.unlink(os.path.join(self.path, name))
        self.log = Log.open(self.path, CONFIG, clock=self.clock, recovery_point=recovery_point)

    # --- the property ------------------------------------------------------------------------

    @invariant()
    def lso_aborted_and_committed_reads_match_the_model(self) -> None:
        end = self.log.log_end_offset
        lso, aborted, offsets = replay(self.events, end)
        assert self.log.last_stable_offset == lso
        got = [(a.producer_id, a.first_offset, a.last_offset)
               for a in self.log.aborted_transactions(0, 2**62)]
        assert got == aborted
        for start, stop in [(0, lso), (lso // 2, lso), (lso // 3, lso // 2 + 1)]:
            want = [a for a in aborted if a[2] >= start and a[1] < stop]
            got = [(a.producer_id, a.first_offset, a.last_offset)
                   for a in self.log.aborted_transactions(start, stop)]
            assert got == want, (start, stop)
        seen, offset = [], 0
        while True:
            read = self.log.read_committed(offset, 1 << 30)
            assert read.last_stable_offset == lso
            if read.result.region is None:
                break
            ranges = {(a.producer_id, a.first_offset, a.last_offset) for a in read.aborted}
            for d in builder.decode_batches(read.result.region.read()):
                h = d.header
                assert h.last_offset < lso
                offset = h.next_offset
                if h.is_control or any(p == h.producer_id and f <= h.base_offset <= la
                                       for p, f, la in ranges):
                    continue
                seen += [r.offset for r in d.records]
        assert seen == offsets


TxnLogMachine.TestCase.settings = settings(
    max_examples=int(os.environ.get("ODRADEK_PROPERTY_EXAMPLES", "60")),
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestTxnLogProperties = TxnLogMachine.TestCase


# --- compaction --------------------------------------------------------------------------

OPS = st.lists(st.tuples(st.sampled_from(["txn", "commit", "abort", "plain", "roll"]),
                         st.sampled_from(PIDS), st.sampled_from([b"a", b"b", b"c"])),
               min_size=1, max_size=40)


def _committed(lg: Log) -> list[tuple[int, bytes | None]]:
    out, offset = [], lg.log_start_offset
    while True:
        read = lg.read_committed(offset, 1 << 30)
        if read.result.region is None:
            return out
        ranges = [(a.producer_id, a.first_offset, a.last_offset) for a in read.aborted]
        for d in builder.decode_batches(read.result.region.read()):
            h = d.header
            offset = h.next_offset
            if h.is_control or any(p == h.producer_id and f <= h.base_offset <= la
                                   for p, f, la in ranges):
                continue
            out += [(r.offset, r.key) for r in d.records]


@settings(max_examples=int(os.environ.get("ODRADEK_PROPERTY_EXAMPLES", "60")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS, passes=st.integers(1, 3))
def test_compaction_never_leaves_transaction_records_without_their_marker(ops, passes):
    from hypothesis import assume

    from odradek.storage import LogCleaner

    config = LogConfig.from_kafka({"segment.bytes": 400, "cleanup.policy": "compact",
                                   "delete.retention.ms": 1000})
    root = tempfile.mkdtemp(prefix="odradek-txn-compact-")
    clock = FakeClock()
    path = os.path.join(root, "t-0")
    try:
        lg = Log.open(path, config, clock=clock)
        seqs = dict.fromkeys(PIDS, 0)
        for kind, pid, key in ops:
            if kind == "roll":
                lg.roll()
            elif kind == "plain":
                lg.append(builder.build_simple([b"v"], keys=[key], timestamp=clock.now))
            elif kind == "txn":
                lg.append(builder.build_simple([b"v"], keys=[key], timestamp=clock.now,
                                               producer_id=pid, producer_epoch=0,
                                               base_sequence=seqs[pid], transactional=True))
                seqs[pid] += 1
            else:
                lg.append_marker(pid, 0, kind == "commit", coordinator_epoch=0)
        lg.roll()
        assume(len(lg.segments) > 1)
        lso = lg.last_stable_offset
        cleaner = LogCleaner(root, clock=clock)
        visible_keys = {}
        for offset, key in _committed(lg):
            visible_keys[key] = offset
        for _ in range(passes):
            cleaner.clean(("t", 0), lg)
            clock.advance(1001)
        assert lg.last_stable_offset == lso
        after = _committed(lg)
        # Compaction keeps the newest committed record of every key.
        for key, offset in visible_keys.items():
            assert (offset, key) in after
        # Every transactional batch left is followed by its producer's marker, unless its
        # transaction is still open: a replay of the log alone finds the same LSO.
        open_first: dict[int, int] = {}
        for d in lg.read_batches(lg.log_start_offset):
            h = d.header
            if h.is_control:
                open_first.pop(h.producer_id, None)
            elif h.is_transactional:
                open_first.setdefault(h.producer_id, h.base_offset)
        assert min(open_first.values(), default=lg.log_end_offset) == lso
        lg.close()
        for name in os.listdir(path):
            if name.endswith(".snapshot"):
                os.unlink(os.path.join(path, name))
        lg = Log.open(path, config, clock=clock, clean_shutdown=True)
        assert lg.last_stable_offset == lso
        assert _committed(lg) == after
        lg.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
