"""Transactions on the partition log (KIP-98): open transactions in the producer state,
markers, the last stable offset, the aborted-transaction index (``.txnindex``) and
read_committed reads, across rolls, restarts (clean, killed, torn) and truncation."""

from __future__ import annotations

import json
import os
import signal
import struct
import subprocess
import sys
import textwrap

import pytest

from odradek.records import builder
from odradek.storage import LogConfig
from odradek.storage.log import Log
from odradek.storage.producer_state import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    TransactionCoordinatorFencedError,
)
from odradek.storage.txn_index import ENTRY_SIZE, AbortedTxn

from .conftest import make_batch
from .test_recovery import abandon


class Producer:
    """A transactional producer's batches with running sequences."""

    def __init__(self, pid: int, epoch: int = 0) -> None:
        self.pid, self.epoch, self.seq = pid, epoch, 0

    def batch(self, count: int = 3, *, transactional: bool = True) -> bytes:
        data = builder.build_simple(
            [b"p%d-%d" % (self.pid, self.seq + i) for i in range(count)],
            producer_id=self.pid, producer_epoch=self.epoch, base_sequence=self.seq,
            transactional=transactional, timestamp=1_700_000_000_000)
        self.seq += count
        return data


def committed_values(lg, offset: int = 0) -> list[tuple[int, bytes | None]]:
    """What a read_committed consumer sees: records below the LSO, minus control batches
    and the records of aborted transactions (using the fetch's aborted list, as clients do)."""
    out = []
    while True:
        read = lg.read_committed(offset, 1 << 30)
        if read.result.region is None:
            return out
        aborted = {(a.producer_id, a.first_offset, a.last_offset) for a in read.aborted}
        for decoded in builder.decode_batches(read.result.region.read()):
            h = decoded.header
            offset = h.next_offset
            if h.is_control:
                continue
            if any(pid == h.producer_id and first <= h.base_offset <= last
                   for pid, first, last in aborted):
                continue
            out.extend((r.offset, r.value) for r in decoded.records)


def test_an_open_transaction_holds_the_lso_at_its_first_offset(open_log):
    lg = open_log()
    lg.append(make_batch(2))
    assert lg.last_stable_offset == 2
    p = Producer(1)
    lg.append(p.batch())
    lg.append(p.batch())
    lg.append(make_batch(1))
    assert lg.log_end_offset == 9
    assert lg.last_stable_offset == 2
    info = lg.append_marker(1, 0, True, coordinator_epoch=0)
    assert (info.first_offset, info.last_offset) == (9, 9)
    assert lg.last_stable_offset == 10
    assert lg.aborted_transactions(0, 10) == []


def test_interleaved_transactions_the_lso_is_the_earliest_open_one(open_log):
    lg = open_log()
    a, b, c = Producer(1), Producer(2), Producer(3)
    lg.append(a.batch())  # 0-2
    lg.append(b.batch())  # 3-5
    lg.append(a.batch())  # 6-8
    lg.append(c.batch())  # 9-11
    assert lg.last_stable_offset == 0
    lg.append_marker(2, 0, False, coordinator_epoch=0)  # 12: b aborted, a still open
    assert lg.last_stable_offset == 0
    lg.append_marker(1, 0, True, coordinator_epoch=0)  # 13: a committed
    assert lg.last_stable_offset == 9
    assert lg.aborted_transactions(0, 100) == [AbortedTxn(2, 3, 12, 0)]
    lg.append_marker(3, 0, False, coordinator_epoch=0)  # 14
    assert lg.last_stable_offset == 15
    assert lg.aborted_transactions(0, 100) == [AbortedTxn(2, 3, 12, 0), AbortedTxn(3, 9, 14, 15)]
    # A new transaction of the same producer starts at its next transactional batch.
    lg.append(a.batch())
    assert lg.last_stable_offset == 15
    assert committed_values(lg) == [(o, b"p1-%d" % i) for i, o in enumerate([0, 1, 2, 6, 7, 8])]


def test_the_txnindex_file_is_kafkas_format_byte_for_byte(open_log, tmp_path):
    lg = open_log()
    p = Producer(0x0102030405060708)
    lg.append(p.batch(2))
    lg.append_marker(p.pid, 0, False, coordinator_epoch=5)
    path = tmp_path / "topic-0" / "00000000000000000000.txnindex"
    assert path.read_bytes() == (
        b"\x00\x00" + bytes.fromhex("0102030405060708") + struct.pack(">qqq", 0, 2, 3)
    )
    assert ENTRY_SIZE == 34
    lg.append(p.batch(1))
    lg.append_marker(p.pid, 0, True, coordinator_epoch=5)  # commits are not indexed
    assert path.stat().st_size == 34


def test_aborted_transactions_across_segments_and_rolls(open_log):
    lg = open_log(LogConfig.from_kafka({"segment.bytes": 400}))
    p, q = Producer(1), Producer(2)
    expected = []
    for round_ in range(12):
        first = lg.append(p.batch(2)).first_offset
        lg.append(q.batch(1))
        marker = lg.append_marker(1, 0, round_ % 3 != 0, coordinator_epoch=0).first_offset
        if round_ % 3 == 0:
            expected.append((1, first, marker))
        lg.append_marker(2, 0, True, coordinator_epoch=0)
    assert len(lg.segments) > 3
    got = [(a.producer_id, a.first_offset, a.last_offset)
           for a in lg.aborted_transactions(0, 10**9)]
    assert got == expected
    e1, e2, e3 = expected[1], expected[2], expected[3]
    for start, end in [(0, 5), (e1[1], e1[1] + 1), (e1[2], 10**9), (e1[2] + 1, e3[1]),
                       (e2[1] + 1, e3[1] + 1)]:
        want = [e for e in expected if e[2] >= start and e[1] < end]
        got = [(a.producer_id, a.first_offset, a.last_offset)
               for a in lg.aborted_transactions(start, end)]
        assert got == want, (start, end)
    # The indexes live with their segments: retention deletes them with the segment.
    first_segment = lg.segments[0]
    txn_path = first_segment.log_path[:-4] + ".txnindex"
    assert os.path.exists(txn_path)
    lg.delete_records_before(lg.segments[1].base_offset)
    assert not os.path.exists(txn_path)
    assert all(a.last_offset >= lg.log_start_offset for a in lg.aborted_transactions(0, 10**9))


def test_read_committed_stops_at_the_lso(open_log):
    lg = open_log()
    lg.append(make_batch(3))  # 0-2
    p = Producer(1)
    lg.append(p.batch())  # 3-5 open
    lg.append(make_batch(2, start=3))  # 6-7
    read = lg.read_committed(0, 1 << 20)
    assert read.last_stable_offset == 3
    decoded = builder.decode_batches(read.result.region.read())
    assert [d.header.base_offset for d in decoded] == [0]
    assert lg.read_committed(3, 1 << 20).result.region is None
    lg.append_marker(1, 0, False, coordinator_epoch=0)
    read = lg.read_committed(3, 1 << 20)
    assert read.last_stable_offset == 9
    assert [(a.producer_id, a.first_offset) for a in read.aborted] == [(1, 3)]
    assert committed_values(lg) == [(0, b"v0"), (1, b"v1"), (2, b"v2"), (6, b"v3"), (7, b"v4")]
    # read_uncommitted is unchanged: everything, the marker included.
    assert lg.read(0, 1 << 20).region.length == lg.active.size


def test_a_marker_with_a_newer_epoch_fences_the_old_one(open_log):
    lg = open_log()
    p = Producer(1, epoch=3)
    lg.append(p.batch())
    lg.append_marker(1, 4, False, coordinator_epoch=1)  # coordinator fenced epoch 3
    assert lg.last_stable_offset == lg.log_end_offset
    with pytest.raises(InvalidProducerEpochError):
        lg.append(p.batch())
    with pytest.raises(InvalidProducerEpochError):
        lg.append_marker(1, 3, True, coordinator_epoch=1)
    with pytest.raises(TransactionCoordinatorFencedError):
        lg.append_marker(1, 4, True, coordinator_epoch=0)
    fresh = Producer(1, epoch=5)
    assert lg.append(fresh.batch()).first_offset == 4


def test_a_plain_batch_inside_an_open_transaction_is_refused(open_log):
    lg = open_log()
    p = Producer(1)
    lg.append(p.batch())
    with pytest.raises(InvalidTxnStateError):
        lg.append(p.batch(transactional=False))


def test_a_clean_restart_keeps_open_transactions_and_the_index(open_log):
    lg = open_log()
    p, q = Producer(1), Producer(2)
    lg.append(p.batch())
    lg.append(q.batch())
    lg.append_marker(2, 0, False, coordinator_epoch=0)
    lso, aborted = lg.last_stable_offset, lg.aborted_transactions(0, 100)
    lg.close()
    snapshot = [n for n in os.listdir(lg.directory) if n.endswith(".snapshot")]
    with open(os.path.join(lg.directory, snapshot[0]), encoding="utf-8") as f:
        assert json.load(f)["version"] == 2
    lg = open_log(clean_shutdown=True)
    assert (lg.last_stable_offset, lg.aborted_transactions(0, 100)) == (lso, aborted)
    assert lso == 0
    lg.append_marker(1, 0, True, coordinator_epoch=0)
    assert lg.last_stable_offset == lg.log_end_offset


def test_a_version_1_snapshot_still_loads(open_log, tmp_path):
    lg = open_log()
    p = Producer(1)
    lg.append(p.batch(transactional=False))
    lg.close()
    directory = tmp_path / "topic-0"
    (name,) = [n for n in os.listdir(directory) if n.endswith(".snapshot")]
    old = {"1": [0, [[0, 2, 0, 2, 1_700_000_000_000]]]}  # the format before transactions
    (directory / name).write_text(json.dumps(old))
    lg = open_log(clean_shutdown=True)
    assert lg.append(p.batch(transactional=False)).first_offset == 3
    retry = lg.append(Producer(1).batch(transactional=False))
    assert retry.duplicate and retry.first_offset == 0


@pytest.mark.parametrize("torn", [False, True])
def test_a_killed_log_rebuilds_open_transactions_and_the_index(open_log, tmp_path, torn):
    lg = open_log(LogConfig.from_kafka({"segment.bytes": 300}))
    p, q = Producer(1), Producer(2)
    lg.append(p.batch())
    lg.close()  # a snapshot from before the transactions' end
    lg = open_log(LogConfig.from_kafka({"segment.bytes": 300}), clean_shutdown=True)
    lg.append(q.batch())
    lg.append_marker(1, 0, False, coordinator_epoch=0)
    for _ in range(4):
        lg.append(make_batch(3))
    lg.append(q.batch())
    lg.append_marker(2, 0, False, coordinator_epoch=0)
    lg.append(p.batch())  # p's next transaction, open
    expected = lg.aborted_transactions(0, 10**9)
    lso, end = lg.last_stable_offset, lg.log_end_offset
    assert len(expected) == 2 and len(lg.segments) > 1
    txn_files = sorted(n for n in os.listdir(lg.directory) if n.endswith(".txnindex"))
    abandon(lg)
    for name in txn_files:  # the index is derived data: lose it entirely
        os.unlink(os.path.join(lg.directory, name))
    if torn:
        with open(lg.active.log_path, "ab") as f:
            f.write(Producer(3).batch()[:30])
    lg = open_log(LogConfig.from_kafka({"segment.bytes": 300}), recovery_point=0)
    assert lg.log_end_offset == end
    assert lg.aborted_transactions(0, 10**9) == expected
    assert lg.last_stable_offset == lso
    assert sorted(n for n in os.listdir(lg.directory) if n.endswith(".txnindex")) == txn_files


def test_a_torn_marker_reopens_its_transaction_and_leaves_no_index_entry(open_log):
    lg = open_log()
    p = Producer(1)
    lg.append(p.batch())
    lg.append_marker(1, 0, False, coordinator_epoch=0)
    assert lg.aborted_transactions(0, 10) != []
    path, size = lg.active.log_path, lg.active.size
    abandon(lg)
    os.truncate(path, size - 5)
    lg = open_log(recovery_point=0)
    assert lg.log_end_offset == 3
    assert lg.last_stable_offset == 0
    assert lg.aborted_transactions(0, 10) == []
    assert not [n for n in os.listdir(lg.directory) if n.endswith(".txnindex")]


def test_truncation_rolls_back_markers_open_transactions_and_the_index(open_log):
    lg = open_log()
    p, q = Producer(1), Producer(2)
    lg.append(p.batch())  # 0-2
    lg.append(q.batch())  # 3-5
    lg.append_marker(1, 0, False, coordinator_epoch=0)  # 6
    lg.append_marker(2, 0, True, coordinator_epoch=0)  # 7
    assert lg.last_stable_offset == 8
    lg.truncate_to(7)  # q's commit goes: q's transaction is open again
    assert lg.last_stable_offset == 3
    assert [a.last_offset for a in lg.aborted_transactions(0, 10)] == [6]
    lg.truncate_to(6)  # p's abort goes too
    assert lg.last_stable_offset == 0
    assert lg.aborted_transactions(0, 10) == []
    lg.append_marker(1, 0, False, coordinator_epoch=0)
    assert [a.last_offset for a in lg.aborted_transactions(0, 10)] == [6]
    lg.truncate_to(3)  # q's batch goes; p's transaction is still open
    assert lg.last_stable_offset == 0
    assert lg.aborted_transactions(0, 10) == []
    lg.truncate_fully_and_start_at(50)
    assert lg.last_stable_offset == 50


# --- compaction -------------------------------------------------------------------------

DAY = 86_400_000


def keyed_txn(pid: int, seq: int, items: list[tuple[bytes, bytes]], ts: int) -> bytes:
    records = [builder.Record(i, ts, k, v) for i, (k, v) in enumerate(items)]
    return builder.build_batch(records, producer_id=pid, producer_epoch=0, base_sequence=seq,
                               transactional=True)


def batches_in(lg):
    return [(d.header.base_offset, d.header.is_control, d.header.producer_id,
             [(r.key, r.value) for r in d.records])
            for d in lg.read_batches(lg.log_start_offset)]


def test_compaction_drops_aborted_records_and_markers_after_the_horizon(open_log, clock,
                                                                           tmp_path):
    from odradek.storage import LogCleaner

    config = LogConfig.from_kafka({"cleanup.policy": "compact", "delete.retention.ms": DAY,
                                   "segment.bytes": 1 << 20})
    lg = open_log(config)
    cleaner = LogCleaner(str(tmp_path), clock=clock)
    now = clock.now
    lg.append(keyed_txn(1, 0, [(b"k", b"committed")], now))  # 0
    lg.append_marker(1, 0, True, coordinator_epoch=0)  # 1
    lg.append(keyed_txn(2, 0, [(b"k", b"aborted"), (b"j", b"aborted")], now))  # 2-3
    lg.append_marker(2, 0, False, coordinator_epoch=0)  # 4
    lg.roll()
    lg.append(keyed_txn(3, 0, [(b"x", b"open")], now))  # 5: open, beyond the LSO
    lg.roll()
    lg.append(make_batch(1, timestamp=now))
    assert lg.last_stable_offset == 5
    cleaner.clean(("topic", 0), lg)
    got = batches_in(lg)
    # The aborted records are gone and did not shadow the committed value of k.
    assert [(o, c, p) for o, c, p, _ in got][:3] == [(0, False, 1), (1, True, 1), (4, True, 2)]
    assert got[0][3] == [(b"k", b"committed")]
    assert any(p == 3 for _, _, p, _ in got)  # the open transaction is untouched
    clock.advance(DAY + 1)
    cleaner.clean(("topic", 0), lg)
    got = batches_in(lg)
    # Past the horizon the abort marker goes (its records are gone); the commit marker
    # stays while a record of its transaction is kept.
    assert [(o, c, p) for o, c, p, _ in got][:2] == [(0, False, 1), (1, True, 1)]
    assert 4 not in [o for o, *_ in got]
    # A restart rebuilding producer state from the log alone still finds no open
    # transaction but producer 3's.
    lg.close()
    for name in os.listdir(lg.directory):
        if name.endswith(".snapshot"):
            os.unlink(os.path.join(lg.directory, name))
    lg = open_log(config, clean_shutdown=True)
    assert lg.last_stable_offset == 5


def test_a_commit_marker_goes_once_its_records_are_compacted_away(open_log, clock, tmp_path):
    from odradek.storage import LogCleaner

    config = LogConfig.from_kafka({"cleanup.policy": "compact", "delete.retention.ms": DAY})
    lg = open_log(config)
    cleaner = LogCleaner(str(tmp_path), clock=clock)
    lg.append(keyed_txn(1, 0, [(b"k", b"old")], clock.now))  # 0
    lg.append_marker(1, 0, True, coordinator_epoch=0)  # 1
    lg.append(make_batch(1, timestamp=clock.now, keys=[b"k"]))  # 2 supersedes k
    lg.roll()
    lg.append(make_batch(1, timestamp=clock.now))
    cleaner.clean(("topic", 0), lg)
    assert [o for o, *_ in batches_in(lg)][:2] == [1, 2]  # marker kept until the horizon
    clock.advance(DAY + 1)
    cleaner.clean(("topic", 0), lg)
    assert [o for o, *_ in batches_in(lg)][:1] == [2]


# --- SIGKILL ----------------------------------------------------------------------------

TXN_CRASH_CHILD = textwrap.dedent(
    """
    import os, random, sys
    from odradek.records import builder
    from odradek.storage import LogConfig
    from odradek.storage.log import Log

    path = sys.argv[1]
    config = LogConfig.from_kafka({"segment.bytes": 16 * 1024, "index.interval.bytes": 512})
    lg = Log.open(path, config)
    rnd = random.Random(int(sys.argv[2]))
    seqs = {1: 0, 2: 0, 3: 0}
    i = 0
    while True:
        pid = rnd.choice((1, 2, 3))
        if rnd.random() < 0.3:
            commit = rnd.random() < 0.5
            info = lg.append_marker(pid, 0, commit, coordinator_epoch=0)
            os.write(1, b"%s %d %d %d\\n" % (b"commit" if commit else b"abort", pid,
                                              info.first_offset, info.last_offset))
        else:
            count = rnd.randint(1, 4)
            info = lg.append(builder.build_simple([b"r"] * count, producer_id=pid,
                                                  producer_epoch=0, base_sequence=seqs[pid],
                                                  transactional=True))
            seqs[pid] += count
            os.write(1, b"txn %d %d %d\\n" % (pid, info.first_offset, info.last_offset))
        i += 1
        if i == 300:  # a clean restart: later recoveries start from its snapshot
            lg.close()
            lg = Log.open(path, config, clean_shutdown=True)
        if i == 600:
            os.write(2, b"ready\\n")
    """
)


@pytest.mark.slow
@pytest.mark.parametrize("round_", range(3))
def test_sigkill_during_transactions_recovers_open_transactions_and_the_index(
        tmp_path, round_):
    from .test_txn_properties import replay

    path = str(tmp_path / "t-0")
    child = subprocess.Popen([sys.executable, "-c", TXN_CRASH_CHILD, path, str(round_)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    lines = []
    try:
        assert child.stderr.readline() == b"ready\n"
        while len(lines) < 600 + 150 * (round_ + 1):  # a different moment each round
            lines.append(child.stdout.readline())
        child.send_signal(signal.SIGKILL)
        lines += child.stdout.read().splitlines()  # what the reader buffered, too
        child.wait(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == -signal.SIGKILL
    acked = [(int(b), int(la), kind.decode(), int(p))
             for kind, p, b, la in (line.split() for line in lines if line.strip())]
    assert len(acked) > 600
    lg = Log.open(path, LogConfig.from_kafka({"segment.bytes": 16 * 1024}))
    try:
        events = []
        for d in lg.read_batches(0):
            h = d.header
            kind = (("commit" if builder.control_type(d.records[0]) else "abort")
                    if h.is_control else "txn")
            events.append((h.base_offset, h.last_offset, kind, h.producer_id))
        assert set(acked) <= set(events)
        lso, aborted, _ = replay(events, lg.log_end_offset)
        assert lg.last_stable_offset == lso
        assert [(a.producer_id, a.first_offset, a.last_offset)
                for a in lg.aborted_transactions(0, 2**62)] == aborted
        assert len(lg.segments) > 2 and aborted
    finally:
        lg.close()


def test_the_log_start_may_pass_an_open_transaction_and_the_lso_follows_it(open_log):
    # Kafka's UnifiedLog.updateFirstUnstableOffset: never below the log start.
    lg = open_log(LogConfig.from_kafka({"segment.bytes": 300}))
    p = Producer(1)
    lg.append(p.batch())  # 0-2, open
    for i in range(10):
        lg.append(make_batch(3, start=3 * i))
    assert lg.last_stable_offset == 0
    lg.delete_records_before(10)
    assert lg.last_stable_offset == 10
    assert lg.read_committed(10, 1 << 20).result.region is None  # still held at the LSO
    lg.append_marker(1, 0, True, coordinator_epoch=0)
    assert lg.last_stable_offset == lg.log_end_offset
    assert lg.read_committed(10, 1 << 20).result.region is not None


def test_an_abort_with_no_open_transaction_indexes_an_empty_one_at_the_marker(open_log):
    # Kafka's ProducerAppendInfo.appendEndTxnMarker: the first offset is the marker's.
    lg = open_log()
    lg.append(make_batch(2))
    lg.append_marker(7, 0, False, coordinator_epoch=0)
    lg.append_marker(7, 0, True, coordinator_epoch=0)
    assert lg.aborted_transactions(0, 10) == [AbortedTxn(7, 2, 2, 3)]
    assert lg.last_stable_offset == 4


def test_a_follower_copying_batches_and_markers_tracks_transactions_too(open_log, tmp_path):
    leader = open_log()
    p = Producer(1)
    leader.append(p.batch())
    leader.append_marker(1, 0, False, coordinator_epoch=2)
    leader.append(p.batch())
    copied = leader.read(0, 1 << 20).region.read()
    follower = Log.open(str(tmp_path / "follower-0"), LogConfig())
    try:
        follower.append(copied, assign_offsets=False)
        assert follower.aborted_transactions(0, 10) == leader.aborted_transactions(0, 10)
        assert follower.last_stable_offset == leader.last_stable_offset == 4
        with pytest.raises(TransactionCoordinatorFencedError):
            follower.append_marker(1, 0, True, coordinator_epoch=1)
    finally:
        follower.close()
