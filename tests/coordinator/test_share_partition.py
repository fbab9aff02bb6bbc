"""A share-partition's delivery state (KIP-932): stories first, then the state machine
against a per-offset model under random sequences of operations, restarts included."""

from __future__ import annotations

import itertools
import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.coordinator import share_records as sr
from odradek.coordinator.share_partition import (
    ACCEPT,
    ACKNOWLEDGED,
    ACQUIRED,
    ARCHIVED,
    AVAILABLE,
    GAP,
    INVALID_RECORD_STATE,
    INVALID_REQUEST,
    NONE,
    REJECT,
    RELEASE,
    RENEW,
    AcquiredRange,
    SharePartition,
)
from odradek.coordinator.share_records import StateBatch

LOCK = 30_000


def partition(start: int = 0, limit: int = 5, window: int = 200) -> SharePartition:
    return SharePartition(start, delivery_limit=limit, max_in_flight=window)


def test_a_released_record_comes_back_with_delivery_count_2():
    sp = partition()
    assert sp.acquire("a", [(0, 9)], 500, LOCK, 0) == [AcquiredRange(0, 9, 1)]
    assert sp.end_offset == 10
    assert sp.acknowledge("a", [(0, 9, [ACCEPT] * 3 + [RELEASE] + [ACCEPT] * 6)], 10) == NONE
    assert sp.start_offset == 3  # 0..2 done; 3 is to deliver again
    assert sp.next_fetch_offset() == 3
    # The log returns the whole batch 0..9 again; only 3 is available.
    assert sp.acquire("b", [(0, 9), (10, 14)], 500, LOCK, 20) == [
        AcquiredRange(3, 3, 2), AcquiredRange(10, 14, 1)]


def test_a_rejected_record_never_returns():
    sp = partition()
    sp.acquire("a", [(0, 4)], 500, LOCK, 0)
    assert sp.acknowledge("a", [(2, 2, [REJECT]), (3, 4, [RELEASE])], 1) == NONE
    assert sp.acknowledge("a", [(0, 1, [RELEASE])], 1) == NONE
    assert sp.acquire("a", [(0, 4)], 500, LOCK, 2) == [
        AcquiredRange(0, 1, 2), AcquiredRange(3, 4, 2)]
    assert sp.acknowledge("a", [(0, 1, [ACCEPT]), (3, 4, [ACCEPT])], 3) == NONE
    assert (sp.start_offset, sp.end_offset, sp.ranges()) == (5, 5, [])


def test_the_delivery_limit_archives_a_poison_record():
    sp = partition(limit=3)
    for delivery in (1, 2, 3):
        assert sp.acquire("a", [(0, 0)], 10, LOCK, delivery) == [AcquiredRange(0, 0, delivery)]
        assert sp.acknowledge("a", [(0, 0, [RELEASE])], delivery) == NONE
    # the third release archives it: done, and the start moves past it
    assert sp.start_offset == 1
    assert sp.acquire("a", [(0, 0)], 10, LOCK, 9) == []


def test_a_lock_expiry_redelivers_to_another_member():
    sp = partition()
    sp.acquire("a", [(0, 4)], 500, 1000, now_ms=0)
    assert sp.next_deadline() == 1000
    assert not sp.expire_locks(999)
    assert sp.expire_locks(1000)
    assert sp.next_deadline() is None
    assert sp.acquire("b", [(0, 4)], 500, 1000, now_ms=1000) == [AcquiredRange(0, 4, 2)]
    # a's acknowledgement comes too late
    assert sp.acknowledge("a", [(0, 4, [ACCEPT])], 1001) == INVALID_RECORD_STATE


def test_renew_extends_the_lock_by_its_lock_period():
    sp = partition()
    sp.acquire("a", [(0, 4)], 500, 1000, now_ms=0)
    assert sp.acknowledge("a", [(0, 1, [RENEW])], 800) == NONE
    assert sp.next_deadline() == 1000  # 2..4 keep theirs
    assert sp.expire_locks(1000)
    assert [(r.first_offset, r.last_offset, r.state, r.deadline_ms) for r in sp.ranges()] == [
        (0, 1, ACQUIRED, 1800), (2, 4, AVAILABLE, 0)]


def test_another_members_acknowledgement_is_invalid_record_state_and_changes_nothing():
    sp = partition()
    sp.acquire("a", [(0, 4)], 500, LOCK, 0)
    sp.acquire("b", [(5, 9)], 500, LOCK, 0)
    before = sp.ranges()
    # the first batch is a's own, the second is b's: nothing at all is applied
    assert sp.acknowledge("a", [(0, 4, [ACCEPT]), (5, 5, [ACCEPT])], 1) == INVALID_RECORD_STATE
    assert sp.ranges() == before
    assert sp.acknowledge("a", [(0, 4, [ACCEPT])], 1) == NONE
    assert sp.acknowledge("a", [(0, 0, [ACCEPT])], 1) == INVALID_RECORD_STATE  # already acked
    assert sp.acknowledge("a", [(10, 10, [ACCEPT])], 1) == INVALID_RECORD_STATE  # beyond end


def test_malformed_acknowledgements_are_invalid_request():
    sp = partition()
    sp.acquire("a", [(0, 4)], 500, LOCK, 0)
    assert sp.acknowledge("a", [(3, 2, [ACCEPT])], 1) == INVALID_REQUEST
    assert sp.acknowledge("a", [(0, 4, [ACCEPT, ACCEPT])], 1) == INVALID_REQUEST
    assert sp.acknowledge("a", [(0, 4, [])], 1) == INVALID_REQUEST
    assert sp.acknowledge("a", [(0, 4, [7])], 1) == INVALID_REQUEST
    assert sp.acknowledge("a", [(2, 4, [ACCEPT]), (0, 1, [ACCEPT])], 1) == INVALID_REQUEST
    # a malformed batch wins over another batch's bad offsets
    assert sp.acknowledge("a", [(50, 50, [ACCEPT]), (60, 59, [ACCEPT])], 1) == INVALID_REQUEST
    assert sp.acquired_count("a") == 5


def test_the_start_advances_over_acknowledged_and_gap_offsets():
    sp = partition()
    # offsets 5..9 were compacted away: a log gap between the batches
    assert sp.acquire("a", [(0, 4), (10, 14), (15, 19)], 500, LOCK, 0) == [
        AcquiredRange(0, 4, 1), AcquiredRange(10, 19, 1)]
    assert sp.end_offset == 20
    # 15 is a control record (a transaction marker): the client acks it as GAP
    assert sp.acknowledge("a", [(10, 19, [ACCEPT] * 5 + [GAP] + [ACCEPT] * 4)], 1) == NONE
    assert sp.start_offset == 0
    assert sp.acknowledge("a", [(0, 4, [ACCEPT])], 1) == NONE
    assert (sp.start_offset, sp.end_offset) == (20, 20)


def test_batch_mode_takes_whole_batches_record_mode_splits():
    batches = [(0, 3), (4, 7), (8, 11)]
    sp = partition()
    # the second batch reaches 5 records: it is taken whole, the third is not
    assert sp.acquire("a", batches, 5, LOCK, 0) == [AcquiredRange(0, 7, 1)]
    sp = partition()
    assert sp.acquire("a", batches, 5, LOCK, 0, record_limit=True) == [AcquiredRange(0, 4, 1)]
    assert (sp.end_offset, sp.next_fetch_offset()) == (5, 5)
    # the next fetch reads from 5, in the middle of the batch 4..7
    assert sp.acquire("b", [(4, 7), (8, 11)], 5, LOCK, 0, record_limit=True) == [
        AcquiredRange(5, 9, 1)]


def test_the_in_flight_window_bounds_new_records():
    sp = partition(window=6)
    # 0..3 leaves the window at 4 < 6, so 4..7 is taken whole; then it is full
    assert sp.acquire("a", [(0, 3), (4, 7), (8, 11)], 500, LOCK, 0) == [AcquiredRange(0, 7, 1)]
    assert sp.acquire("b", [(8, 11)], 500, LOCK, 0) == []
    sp.acknowledge("a", [(0, 3, [ACCEPT])], 1)
    assert sp.in_flight_count() == 4
    assert sp.acquire("b", [(8, 11)], 500, LOCK, 0, record_limit=True) == [
        AcquiredRange(8, 9, 1)]
    assert sp.in_flight_count() == 6


def test_released_records_are_acquired_even_when_the_window_is_full():
    sp = partition(window=4)
    sp.acquire("a", [(0, 3)], 500, LOCK, 0)
    sp.acknowledge("a", [(1, 1, [RELEASE])], 1)
    assert sp.acquire("b", [(0, 3), (4, 7)], 500, LOCK, 2) == [AcquiredRange(1, 1, 2)]


def test_a_member_leaving_releases_its_locks():
    sp = partition()
    sp.acquire("a", [(0, 4)], 500, LOCK, 0)
    sp.acquire("b", [(5, 9)], 500, LOCK, 0)
    assert sp.release_member("a")
    assert not sp.release_member("a")
    assert sp.acquired_count() == 5 and sp.acquired_count("b") == 5
    assert sp.next_fetch_offset() == 0


def test_the_log_start_moving_drops_the_state_below_it():
    sp = partition()
    sp.acquire("a", [(0, 9)], 500, LOCK, 0)
    assert sp.advance_to(5)
    assert sp.acknowledge("a", [(3, 3, [ACCEPT])], 1) == INVALID_RECORD_STATE
    assert sp.acquired_count("a") == 5
    assert sp.advance_to(30)
    assert (sp.start_offset, sp.end_offset, sp.ranges()) == (30, 30, [])
    assert not sp.advance_to(10)
    sp.reset(10)  # AlterShareGroupOffsets may move it back
    assert (sp.start_offset, sp.end_offset, sp.next_fetch_offset()) == (10, 10, 10)


def test_a_snapshot_round_trips_through_share_group_state_bytes():
    sp = partition(start=100, limit=3)
    sp.acquire("a", [(100, 104), (110, 119)], 500, LOCK, 0)
    sp.acknowledge("a", [(100, 104, [ACCEPT, RELEASE, REJECT, ACCEPT, ACCEPT])], 1)
    sp.acknowledge("a", [(115, 119, [ACCEPT])], 1)
    start, batches = sp.snapshot()
    assert start == 101
    # 110..114 still acquired: written as available, with the delivery count it had
    assert batches == [StateBatch(101, 101, AVAILABLE, 1), StateBatch(102, 102, ARCHIVED, 1),
                       StateBatch(103, 104, ACKNOWLEDGED, 1), StateBatch(110, 114, AVAILABLE, 1),
                       StateBatch(115, 119, ACKNOWLEDGED, 1)]
    key = sr.ShareSnapshotKey("g", uuid.uuid4(), 0)
    value = sr.ShareSnapshotValue(0, 0, 0, start, 5, 5, tuple(batches))
    read = sr.decode_value(sr.decode_key(sr.encode_key(key)) or key, sr.encode_value(value))
    rebuilt = SharePartition(read.start_offset, delivery_limit=3, max_in_flight=200,
                             state_batches=read.state_batches)
    assert rebuilt.snapshot() == (start, batches)
    assert (rebuilt.end_offset, rebuilt.next_fetch_offset()) == (120, 101)
    assert rebuilt.acquire("b", [(100, 104), (110, 119), (120, 120)], 500, LOCK, 0) == [
        AcquiredRange(101, 101, 2), AcquiredRange(110, 114, 2), AcquiredRange(120, 120, 1)]


def test_state_batches_below_the_start_are_ignored_and_done_ones_advance_it():
    sp = SharePartition(10, delivery_limit=5, max_in_flight=100, state_batches=[
        StateBatch(5, 12, ACKNOWLEDGED, 1), StateBatch(13, 14, AVAILABLE, 2)])
    assert (sp.start_offset, sp.end_offset) == (13, 15)


def test_many_batches_stay_a_few_ranges():
    sp = partition(window=100_000)
    batches = [(i, i + 99) for i in range(0, 50_000, 100)]
    assert sp.acquire("a", batches, 100_000, LOCK, 0) == [AcquiredRange(0, 49_999, 1)]
    assert len(sp.ranges()) == 1
    sp.acknowledge("a", [(100, 199, [RELEASE])], 1)
    assert len(sp.ranges()) == 3


# --- the model -------------------------------------------------------------------------


class Model:
    """The rules, one offset at a time: offset -> [state, count, member, deadline, lock]."""

    def __init__(self, start: int, limit: int, window: int) -> None:
        self.start = self.end = start
        self.limit, self.window = limit, window
        self.st: dict[int, list] = {}

    def normalize(self) -> None:
        while self.start < self.end and (self.start not in self.st
                                         or self.st[self.start][0] in (ACKNOWLEDGED, ARCHIVED)):
            self.st.pop(self.start, None)
            self.start += 1

    def next_fetch_offset(self) -> int:
        return min((o for o, s in self.st.items() if s[0] == AVAILABLE), default=self.end)

    def acquire(self, member, batches, max_records, lock, now, record_limit):
        got: list[tuple[int, int]] = []
        pos = self.start
        for base, last in batches:
            if len(got) >= max_records:
                break
            lo = max(base, pos)
            if lo > last:
                continue
            pos = last + 1
            for o in range(lo, min(last, self.end - 1) + 1):
                if record_limit and len(got) >= max_records:
                    break
                s = self.st.get(o)
                if s and s[0] == AVAILABLE:
                    self.st[o] = [ACQUIRED, s[1] + 1, member, now + lock, lock]
                    got.append((o, s[1] + 1))
            if record_limit and len(got) >= max_records:
                break
            new_first = max(lo, self.end)
            if new_first > last:
                continue
            window = self.end - self.start
            if window >= self.window:
                break
            split = False
            for o in range(new_first, last + 1):
                if record_limit and (len(got) >= max_records or o - new_first >= self.window
                                     - window):
                    split = True
                    break
                self.st[o] = [ACQUIRED, 1, member, now + lock, lock]
                got.append((o, 1))
                self.end = o + 1
            if split:
                break
        self.normalize()
        out: list[AcquiredRange] = []
        for o, c in got:
            if out and out[-1].last_offset + 1 == o and out[-1].delivery_count == c:
                out[-1] = out[-1]._replace(last_offset=o)
            else:
                out.append(AcquiredRange(o, o, c))
        return out

    def release(self, o):
        s = self.st[o]
        self.st[o] = [ARCHIVED if s[1] >= self.limit else AVAILABLE, s[1], None, 0, 0]

    def acknowledge(self, member, batches, now):
        prev = None
        for first, last, types in batches:
            if (first > last or len(types) not in (1, last - first + 1)
                    or any(t not in (0, 1, 2, 3, 4) for t in types)
                    or (prev is not None and first <= prev)):
                return INVALID_REQUEST
            prev = last
        for first, last, _ in batches:
            for o in range(first, last + 1):
                s = self.st.get(o)
                if not s or s[0] != ACQUIRED or s[2] != member:
                    return INVALID_RECORD_STATE
        for first, last, types in batches:
            for o in range(first, last + 1):
                t = types[0] if len(types) == 1 else types[o - first]
                s = self.st[o]
                if t == RENEW:
                    s[3] = now + s[4]
                elif t == ACCEPT:
                    self.st[o] = [ACKNOWLEDGED, s[1], None, 0, 0]
                elif t == RELEASE:
                    self.release(o)
                else:
                    self.st[o] = [ARCHIVED, s[1], None, 0, 0]
        self.normalize()
        return NONE

    def release_where(self, due) -> bool:
        hit = [o for o, s in self.st.items() if s[0] == ACQUIRED and due(s)]
        for o in hit:
            self.release(o)
        self.normalize()
        return bool(hit)

    def advance_to(self, offset) -> bool:
        if offset <= self.start:
            return False
        self.st = {o: s for o, s in self.st.items() if o >= offset}
        self.start, self.end = offset, max(self.end, offset)
        self.normalize()
        return True

    def restart(self) -> None:
        for o, s in self.st.items():
            if s[0] == ACQUIRED:
                self.st[o] = [AVAILABLE, s[1], None, 0, 0]


def per_offset(sp: SharePartition) -> dict[int, tuple]:
    return {o: (r.state, r.delivery_count, r.member_id, r.deadline_ms)
            for r in sp.ranges() for o in range(r.first_offset, r.last_offset + 1)}


def assert_same(sp: SharePartition, model: Model) -> None:
    assert (sp.start_offset, sp.end_offset) == (model.start, model.end)
    assert per_offset(sp) == {o: tuple(s[:4]) for o, s in model.st.items()}
    assert sp.next_fetch_offset() == model.next_fetch_offset()
    ranges = sp.ranges()
    # sorted, disjoint, inside [start, end), and equal neighbours merged (acquired ones
    # also differ by their lock period, which the view does not show)
    for a, b in itertools.pairwise(ranges):
        assert a.last_offset < b.first_offset
        assert a.state == ACQUIRED or not (a.last_offset + 1 == b.first_offset
                                           and a[2:] == b[2:])
    assert all(sp.start_offset <= r.first_offset <= r.last_offset < sp.end_offset
               for r in ranges)


def rebuild(sp: SharePartition, limit: int, window: int) -> SharePartition:
    """A restart: the snapshot through __share_group_state bytes, then a new partition."""
    start, batches = sp.snapshot()
    value = sr.decode_snapshot_value(sr.encode_value(
        sr.ShareSnapshotValue(1, 0, 0, start, 0, 0, tuple(batches))))
    return SharePartition(value.start_offset, delivery_limit=limit, max_in_flight=window,
                          state_batches=value.state_batches)


MEMBERS = ["a", "b", "c"]


@st.composite
def logs(draw) -> list[tuple[int, int]]:
    """A partition's record batches: sizes 1..5, sometimes a compacted gap before one."""
    batches, offset = [], draw(st.integers(0, 3))
    for _ in range(draw(st.integers(1, 12))):
        offset += draw(st.sampled_from([0, 0, 0, 1, 3]))
        size = draw(st.integers(1, 5))
        batches.append((offset, offset + size - 1))
        offset += size
    return batches


@settings(max_examples=200, deadline=None)
@given(st.data(), logs(), st.integers(1, 4), st.integers(1, 20), st.integers(0, 3))
def test_matches_the_per_offset_model(data, log, limit, window, start):
    sp = SharePartition(start, delivery_limit=limit, max_in_flight=window)
    model = Model(start, limit, window)
    now = 0
    for _ in range(data.draw(st.integers(1, 25))):
        op = data.draw(st.sampled_from(
            ["acquire", "acquire", "ack", "ack", "ack", "leave", "expire", "advance", "restart"]))
        if op == "ack" and not sp.acquired_count() and data.draw(st.integers(0, 3)):
            op = "acquire"  # mostly acknowledge something held
        member = data.draw(st.sampled_from(MEMBERS))
        if op == "acquire":
            fetch = sp.next_fetch_offset()
            read = [b for b in log if b[1] >= fetch][: data.draw(st.integers(1, 4))]
            if not data.draw(st.integers(0, 4)):  # a caller handing arbitrary batches
                read = data.draw(st.lists(st.tuples(st.integers(0, 40), st.integers(0, 40)),
                                          max_size=3))
            args = (member, read, data.draw(st.integers(0, 12)), data.draw(st.integers(1, 50)),
                    now)
            mode = data.draw(st.booleans())
            assert sp.acquire(*args, record_limit=mode) == model.acquire(*args, mode)
        elif op == "ack":
            held = [r for r in sp.ranges() if r.state == ACQUIRED]
            if held and data.draw(st.integers(0, 5)):  # mostly a member acking its own
                member = data.draw(st.sampled_from(held)).member_id or member
                held = [r for r in held if r.member_id == member]
            batches = []
            count = data.draw(st.sampled_from([1, 1, 1, 2, 2, 3, 0]))
            pool = data.draw(st.permutations(held))[:count]  # distinct ranges: no overlap
            for i in range(count):
                if i < len(pool) and data.draw(st.integers(0, 7)):
                    r = pool[i]
                    first = data.draw(st.integers(r.first_offset, r.last_offset))
                    last = data.draw(st.integers(first, r.last_offset))
                else:
                    first = data.draw(st.integers(0, 40))
                    last = first + data.draw(st.integers(-1, 4))
                n = max(1, last - first + 1)
                kind = data.draw(st.integers(0, 9))  # mostly one type, some per offset
                types = data.draw(
                    st.lists(st.integers(0, 4), min_size=1, max_size=1) if kind < 6 else
                    st.lists(st.integers(0, 4), min_size=n, max_size=n) if kind < 9 else
                    st.lists(st.integers(0, 5), max_size=4))
                batches.append((first, last, types))
            if data.draw(st.integers(0, 5)):  # mostly in order, as clients send them
                batches.sort(key=lambda b: b[0])
            assert sp.acknowledge(member, batches, now) == model.acknowledge(member, batches, now)
        elif op == "leave":
            assert sp.release_member(member) == model.release_where(lambda s, m=member: s[2] == m)
        elif op == "expire":
            assert sp.expire_locks(now) == model.release_where(lambda s, t=now: s[3] <= t)
            assert sp.next_deadline() == min(
                (s[3] for s in model.st.values() if s[0] == ACQUIRED), default=None)
        elif op == "advance":
            offset = data.draw(st.integers(0, 45))
            assert sp.advance_to(offset) == model.advance_to(offset)
        else:
            sp = rebuild(sp, limit, window)
            model.restart()
        assert_same(sp, model)
        now += data.draw(st.integers(0, 30))


@settings(max_examples=200, deadline=None)
@given(st.data(), logs(), st.integers(1, 4))
def test_a_rebuilt_partition_behaves_the_same_but_for_locks(data, log, limit):
    sp = SharePartition(0, delivery_limit=limit, max_in_flight=1000)
    for now in range(data.draw(st.integers(1, 10))):
        member = data.draw(st.sampled_from(MEMBERS))
        read = [b for b in log if b[1] >= sp.next_fetch_offset()][:2]
        for r in sp.acquire(member, read, data.draw(st.integers(1, 8)), 5, now):
            types = data.draw(st.lists(st.integers(0, 3), min_size=1, max_size=1))
            if data.draw(st.booleans()):
                sp.acknowledge(member, [(r.first_offset, r.last_offset, types)], now)
    rebuilt = rebuild(sp, limit, 1000)
    assert rebuilt.snapshot() == sp.snapshot()
    assert (rebuilt.start_offset, rebuilt.end_offset) == (sp.start_offset, sp.end_offset)
    unlocked = {o: (AVAILABLE if s == ACQUIRED else s, c)
                for o, (s, c, _, _) in per_offset(sp).items()}
    assert {o: (s, c) for o, (s, c, _, _) in per_offset(rebuilt).items()} == unlocked
