"""Random lives of transactional producers, checking what must always hold: every request
is answered exactly once (an InitProducerId waiting on a fence at most until its abort's
markers are written), epochs never go back for a producer id, a commit or abort lists
markers for exactly the partitions its producer added, and replaying the records written
so far rebuilds the live state.

Producers are instances of two transactional ids: they init (plainly or KIP-360 style with
what they hold), add partitions or a group's offsets, commit or abort, with whatever epoch
they last got (so fenced zombies keep trying). The runtime writes outstanding markers in
random order; time jumps fire timeouts and expiry; the coordinator restarts from its log."""

from __future__ import annotations

import itertools

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from odradek.coordinator import transaction_log as tl
from odradek.coordinator.transactions import (
    InitProducerIdResult,
    TransactionCoordinator,
    TxnEffects,
    TxnMarkers,
    TxnRecord,
    TxnResult,
    TxnState,
)

IDS = ["a", "b"]
INSTANCES = 2  # per transactional id
PARTITIONS = [("x", 0), ("x", 1), ("y", 0)]

instance = st.tuples(st.sampled_from(IDS), st.integers(0, INSTANCES - 1))
op = st.one_of(
    st.tuples(st.just("init"), instance, st.booleans(), st.sampled_from([20_000, 60_000])),
    st.tuples(st.just("add"), instance, st.sets(st.sampled_from(PARTITIONS), min_size=1)),
    st.tuples(st.just("add"), instance, st.sets(st.sampled_from(PARTITIONS), min_size=1)),
    st.tuples(st.just("offsets"), instance, st.sampled_from(["g1", "g2"])),
    st.tuples(st.just("end"), instance, st.booleans()),
    st.tuples(st.just("end"), instance, st.booleans()),
    st.tuples(st.just("markers"), st.integers(0, 5)),
    st.tuples(st.just("markers"), st.integers(0, 5)),
    st.tuples(st.just("time"), st.sampled_from([1_000, 1_000, 15_000, 40_000, 8 * 86_400_000])),
    st.tuples(st.just("restart")),
)


class Life:
    def __init__(self) -> None:
        self.ids = itertools.count(100)
        self.coordinator = self._new()
        self.now = 1_000_000
        self.log: list[TxnRecord] = []
        self.tokens = itertools.count()
        self.parked: dict[int, str] = {}  # token -> transactional id
        self.outstanding: list[TxnMarkers] = []
        # What each instance holds: (producer id, epoch) or None before its first init.
        self.held: dict[tuple[str, int], tuple[int, int] | None] = {
            (tid, i): None for tid in IDS for i in range(INSTANCES)}
        self.max_epoch: dict[int, int] = {}  # producer id -> highest epoch in the log
        self.pid_owner: dict[int, str] = {}  # producer id -> transactional id
        self.added: dict[str, set] = {tid: set() for tid in IDS}  # the open txn's partitions

    def _new(self) -> TransactionCoordinator:
        return TransactionCoordinator(allocate_producer_id=lambda: next(self.ids))

    def apply(self, fx: TxnEffects, asked: int | None = None) -> None:
        for record in fx.records:
            self.log.append(record)
            self.check_record(record)
        answered = [t for t, _ in fx.responses]
        assert len(answered) == len(set(answered)), "a token answered twice"
        for token in answered:
            assert token == asked or token in self.parked, f"unexpected answer to {token}"
            self.parked.pop(token, None)
        for markers in fx.markers:
            self.check_markers(markers)
            self.outstanding.append(markers)
        if asked is not None and asked not in answered:
            # Only an InitProducerId that fenced an open transaction may wait.
            tid = self.coordinator_tid_of_fence(fx)
            self.parked[asked] = tid

    def coordinator_tid_of_fence(self, fx: TxnEffects) -> str:
        assert len(fx.markers) == 1 and not fx.markers[0].commit, "parked without a fence"
        tid = fx.markers[0].transactional_id
        assert tid not in self.parked.values(), "two InitProducerIds parked on one fence"
        return tid

    def check_record(self, record: TxnRecord) -> None:
        tid = record.transactional_id
        assert record.key == tl.encode_key(tid)
        if record.value is None:
            self.added[tid] = set()
            return
        v = tl.decode_value(record.value)
        owner = self.pid_owner.setdefault(v.producer_id, tid)
        assert owner == tid, f"producer id {v.producer_id} given to {owner} and {tid}"
        last = self.max_epoch.get(v.producer_id, -1)
        assert v.producer_epoch >= last, f"epoch of {v.producer_id} went back"
        assert v.producer_epoch <= 32767
        self.max_epoch[v.producer_id] = v.producer_epoch
        if v.status in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT):
            self.added[tid] = set()  # no transaction open: the next one starts afresh

    def check_markers(self, markers: TxnMarkers) -> None:
        tid = markers.transactional_id
        assert set(markers.partitions) == self.added[tid], "markers for other partitions"
        assert len(markers.partitions) == len(set(markers.partitions))
        txn = self.coordinator.transactions[tid]
        assert (markers.producer_id, markers.producer_epoch) == (
            txn.producer_id, txn.producer_epoch)
        expected = TxnState.PREPARE_COMMIT if markers.commit else TxnState.PREPARE_ABORT
        assert txn.state == expected

    def call(self, method: str, *args) -> tuple[int, object]:
        token = next(self.tokens)
        fx = getattr(self.coordinator, method)(*args, token=token, now_ms=self.now)
        self.apply(fx, asked=token)
        return token, fx.response_to(token)

    def step(self, action: tuple) -> None:
        kind = action[0]
        if kind == "init":
            _, who, kip360, timeout = action
            held = self.held[who]
            pid, epoch = held if (kip360 and held) else (-1, -1)
            _, answer = self.call("init_producer_id", who[0], timeout, pid, epoch)
            if isinstance(answer, InitProducerIdResult) and answer.error_code == ErrorCode.none:
                self.held[who] = (answer.producer_id, answer.producer_epoch)
            return
        if kind in ("add", "offsets", "end"):
            who = action[1]
            held = self.held[who]
            if held is None:
                return
            pid, epoch = held
            if kind == "add":
                parts = action[2]
                _, answer = self.call("add_partitions", who[0], pid, epoch, sorted(parts))
                if answer == TxnResult(ErrorCode.none):
                    self.added[who[0]] |= parts
            elif kind == "offsets":
                before = set(self.coordinator.transactions[who[0]].partitions) if (
                    who[0] in self.coordinator.transactions) else set()
                _, answer = self.call("add_offsets", who[0], pid, epoch, action[2])
                if answer == TxnResult(ErrorCode.none):
                    after = self.coordinator.transactions[who[0]].partitions
                    assert len(after - before) <= 1
                    self.added[who[0]] |= {p for p in after if p[0] == "__consumer_offsets"}
            else:
                self.call("end_txn", who[0], pid, epoch, action[2])
            return
        if kind == "markers":
            if self.outstanding:
                m = self.outstanding.pop(action[1] % len(self.outstanding))
                self.apply(self.coordinator.markers_written(
                    m.transactional_id, m.producer_id, m.producer_epoch, now_ms=self.now))
            return
        if kind == "time":
            self.now += action[1]
            self.apply(self.coordinator.tick(self.now))
            return
        assert kind == "restart"
        self.coordinator = self._new()
        for record in self.log:
            self.coordinator.load(record.key, record.value)
        self.parked.clear()  # their connections died with the broker
        self.outstanding.clear()
        self.apply(self.coordinator.finish_load(self.now))

    def check_state(self) -> None:
        replayed = self._new()
        for record in self.log:
            replayed.load(record.key, record.value)
        live = {tid: txn.persisted() for tid, txn in self.coordinator.transactions.items()}
        assert {tid: txn.persisted() for tid, txn in replayed.transactions.items()} == live
        for tid, txn in self.coordinator.transactions.items():
            assert txn.state not in (TxnState.DEAD, TxnState.PREPARE_EPOCH_FENCE)
            assert (txn.state in (TxnState.ONGOING, TxnState.PREPARE_COMMIT,
                                  TxnState.PREPARE_ABORT)) == bool(txn.partitions)
            assert txn.partitions == self.added[tid]
            waiting = tid in self.parked.values()
            assert waiting == (txn.fencing is not None)
            if waiting:
                assert txn.state == TxnState.PREPARE_ABORT
            if txn.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
                # Its markers are still to be written: nothing may be lost.
                assert any(m.transactional_id == tid and m.producer_epoch == txn.producer_epoch
                           for m in self.outstanding)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(op, max_size=40))
def test_random_transactional_lives_keep_the_invariants(actions):
    life = Life()
    for action in actions:
        life.step(action)
        life.check_state()
    # Let the runtime finish its work: every parked request gets its answer.
    while life.outstanding:
        life.step(("markers", 0))
        life.check_state()
    assert life.parked == {}
