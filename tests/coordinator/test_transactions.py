"""The transaction coordinator's decisions, as a producer lives them: a transaction begins
with its first partition, commits or aborts through markers written to every partition of
it, a second producer with the same transactional id fences the first, a forgotten
transaction is aborted by its timeout, and a restarted coordinator carries on from its log."""

from __future__ import annotations

import itertools

import pytest
from kio.schema.errors import ErrorCode

from odradek.coordinator import offsets_topic
from odradek.coordinator import transaction_log as tl
from odradek.coordinator.transaction_errors import error_for_version
from odradek.coordinator.transactions import (
    InitProducerIdResult,
    TransactionCoordinator,
    TxnEffects,
    TxnMarkers,
    TxnRecord,
    TxnResult,
    TxnState,
)

TIMEOUT = 60_000
T0 = 1_000_000


class World:
    """A coordinator, its clock, its log, and the runtime's duty of writing markers."""

    def __init__(self, first_producer_id: int = 1000, **config) -> None:
        self.ids = itertools.count(first_producer_id)
        self.config = config
        self.coordinator = TransactionCoordinator(
            allocate_producer_id=lambda: next(self.ids), **config)
        self.now = T0
        self.log: list[TxnRecord] = []
        self.tokens = itertools.count()

    def run(self, fx: TxnEffects) -> TxnEffects:
        self.log += fx.records
        return fx

    def call(self, op: str, *args, **kwargs):
        token = next(self.tokens)
        fx = self.run(getattr(self.coordinator, op)(*args, token=token, now_ms=self.now,
                                                    **kwargs))
        return fx.response_to(token), fx

    def init(self, tid: str = "t", pid: int = -1, epoch: int = -1, timeout: int = TIMEOUT):
        return self.call("init_producer_id", tid, timeout, pid, epoch)

    def add(self, pid: int, epoch: int, *parts: tuple[str, int], tid: str = "t"):
        return self.call("add_partitions", tid, pid, epoch, list(parts))

    def end(self, pid: int, epoch: int, commit: bool, tid: str = "t"):
        return self.call("end_txn", tid, pid, epoch, commit)

    def write_markers(self, markers: TxnMarkers) -> TxnEffects:
        return self.run(self.coordinator.markers_written(
            markers.transactional_id, markers.producer_id, markers.producer_epoch,
            now_ms=self.now))

    def tick(self, advance_ms: int) -> TxnEffects:
        self.now += advance_ms
        return self.run(self.coordinator.tick(self.now))

    def state(self, tid: str = "t"):
        return self.coordinator.transactions[tid]

    def restarted(self) -> tuple[TransactionCoordinator, TxnEffects]:
        fresh = TransactionCoordinator(allocate_producer_id=lambda: next(self.ids),
                                       **self.config)
        for record in self.log:
            fresh.load(record.key, record.value)
        return fresh, fresh.finish_load(self.now)


def persisted(c: TransactionCoordinator) -> dict:
    return {tid: txn.persisted() for tid, txn in c.transactions.items()}


def test_a_committed_transaction_writes_commit_markers_to_each_of_its_partitions():
    w = World()
    answer, fx = w.init()
    assert answer == InitProducerIdResult(ErrorCode.none, 1000, 0)
    assert len(fx.records) == 1 and w.state().state == TxnState.EMPTY
    w.now += 10
    answer, fx = w.add(1000, 0, ("out", 0), ("out", 1))
    assert answer == TxnResult(ErrorCode.none)
    assert w.state().state == TxnState.ONGOING and w.state().start_ms == T0 + 10
    answer, _ = w.call("add_offsets", "t", 1000, 0, "my-group")
    assert answer == TxnResult(ErrorCode.none)
    offsets_partition = ("__consumer_offsets", offsets_topic.partition_for("my-group"))
    w.now += 10
    answer, fx = w.end(1000, 0, commit=True)
    assert answer == TxnResult(ErrorCode.none)
    assert w.state().state == TxnState.PREPARE_COMMIT
    assert fx.markers == [TxnMarkers("t", 1000, 0, True, 0,
                                     tuple(sorted([("out", 0), ("out", 1), offsets_partition])))]
    assert [r.key for r in fx.records] == [tl.encode_key("t")]
    done = w.write_markers(fx.markers[0])
    assert w.state().state == TxnState.COMPLETE_COMMIT and not w.state().partitions
    assert len(done.records) == 1 and not done.responses and not done.markers
    # The next transaction starts from CompleteCommit, with a new start time.
    w.now += 10
    assert w.add(1000, 0, ("out", 2))[0] == TxnResult(ErrorCode.none)
    assert w.state().partitions == {("out", 2)} and w.state().start_ms == w.now


def test_an_aborted_transaction_writes_abort_markers_and_completes_as_aborted():
    w = World()
    w.init()
    w.add(1000, 0, ("out", 0))
    answer, fx = w.end(1000, 0, commit=False)
    assert answer == TxnResult(ErrorCode.none)
    assert fx.markers == [TxnMarkers("t", 1000, 0, False, 0, (("out", 0),))]
    w.write_markers(fx.markers[0])
    assert w.state().state == TxnState.COMPLETE_ABORT
    assert w.state().producer_epoch == 0  # a client's own abort does not bump the epoch


def test_adding_partitions_already_in_the_transaction_writes_nothing():
    w = World()
    w.init()
    w.add(1000, 0, ("out", 0), ("out", 1))
    answer, fx = w.add(1000, 0, ("out", 1))
    assert answer == TxnResult(ErrorCode.none) and fx.records == []


def test_a_second_producer_with_the_same_id_fences_the_first_and_aborts_its_transaction():
    w = World()
    w.init()
    w.add(1000, 0, ("out", 0), ("out", 3))
    # The new instance's InitProducerId waits for the abort of the zombie's transaction.
    answer, fx = w.init()
    assert answer is None
    assert fx.markers == [TxnMarkers("t", 1000, 1, False, 0, (("out", 0), ("out", 3)))]
    assert w.state().state == TxnState.PREPARE_ABORT and w.state().producer_epoch == 1
    # Meanwhile the zombie is refused, and so is a third instance (it must retry).
    assert w.end(1000, 0, commit=True)[0] == TxnResult(ErrorCode.producer_fenced)
    assert w.add(1000, 0, ("out", 5))[0] == TxnResult(ErrorCode.producer_fenced)
    assert w.init()[0] == InitProducerIdResult(ErrorCode.concurrent_transactions)
    done = w.write_markers(fx.markers[0])
    # The abort completes, and the waiting producer gets the epoch after the fence's.
    assert done.responses == [(2, InitProducerIdResult(ErrorCode.none, 1000, 2))]
    states = [tl.decode_value(r.value).status for r in done.records]
    assert states == [TxnState.COMPLETE_ABORT, TxnState.EMPTY]
    assert w.state().state == TxnState.EMPTY and w.state().producer_epoch == 2
    # The zombie's old epoch stays refused.
    assert w.add(1000, 0, ("out", 0))[0] == TxnResult(ErrorCode.producer_fenced)
    assert w.end(1000, 1, commit=False)[0] == TxnResult(ErrorCode.producer_fenced)
    assert w.add(1000, 2, ("out", 0))[0] == TxnResult(ErrorCode.none)


def test_a_new_producer_of_an_idle_id_bumps_the_epoch_without_markers():
    w = World()
    w.init()
    answer, fx = w.init()
    assert answer == InitProducerIdResult(ErrorCode.none, 1000, 1) and fx.markers == []
    assert w.add(1000, 0, ("out", 0))[0] == TxnResult(ErrorCode.producer_fenced)


def test_a_transaction_older_than_its_timeout_is_aborted_and_its_producer_fenced():
    w = World()
    w.init(timeout=20_000)
    w.add(1000, 0, ("out", 0))
    assert w.coordinator.next_deadline() == T0 + 10_000
    assert w.tick(10_000).markers == []  # 10 s old: within its 20 s
    fx = w.tick(10_000)  # exactly 20 s: Kafka aborts only past the timeout
    assert fx.markers == []
    fx = w.tick(10_000)
    assert fx.markers == [TxnMarkers("t", 1000, 1, False, 0, (("out", 0),))]
    assert w.state().state == TxnState.PREPARE_ABORT
    w.write_markers(fx.markers[0])
    assert w.state().state == TxnState.COMPLETE_ABORT
    assert w.end(1000, 0, commit=True)[0] == TxnResult(ErrorCode.producer_fenced)
    assert w.init()[0] == InitProducerIdResult(ErrorCode.none, 1000, 2)


def test_an_idle_transactional_id_expires_after_seven_days_with_a_tombstone():
    w = World()
    w.init()
    week = 7 * 24 * 3600 * 1000
    assert w.tick(week - 3_600_000).records == []
    fx = w.tick(3_600_000)
    assert fx.records == [TxnRecord("t", tl.encode_key("t"), None)]
    assert "t" not in w.coordinator.transactions
    assert w.coordinator.next_deadline() is None
    # A producer coming back after expiry is told its id mapping is gone.
    assert w.add(1000, 0, ("out", 0))[0] == TxnResult(ErrorCode.invalid_producer_id_mapping)
    assert w.coordinator.describe_transactions(["t"])[0].error_code == (
        ErrorCode.transactional_id_not_found)


def test_an_open_transaction_never_expires():
    w = World(transactional_id_expiration_ms=1000, remove_expired_interval_ms=1000)
    w.init(timeout=900_000)
    w.add(1000, 0, ("out", 0))
    assert w.tick(5000).records == []
    assert "t" in w.coordinator.transactions


# --- KIP-360 and epochs -----------------------------------------------------------------


def test_kip360_init_with_the_current_id_and_epoch_bumps_it_and_a_lost_answer_is_retried():
    w = World()
    w.init()
    w.add(1000, 0, ("out", 0))
    w.write_markers(w.end(1000, 0, commit=False)[1].markers[0])
    answer, _ = w.init(pid=1000, epoch=0)
    assert answer == InitProducerIdResult(ErrorCode.none, 1000, 1)
    # The same request again (its answer was lost): the same answer, no second bump.
    answer, fx = w.init(pid=1000, epoch=0)
    assert answer == InitProducerIdResult(ErrorCode.none, 1000, 1) and fx.records == []
    # An epoch that is neither the current nor the last one is a zombie's.
    assert w.init(pid=1000, epoch=5)[0] == InitProducerIdResult(ErrorCode.producer_fenced)
    assert w.init(pid=77, epoch=1)[0] == InitProducerIdResult(ErrorCode.producer_fenced)


def test_kip360_producer_id_of_an_unknown_transactional_id_gets_a_fresh_id():
    w = World()
    assert w.init(pid=5, epoch=3)[0] == InitProducerIdResult(ErrorCode.none, 1000, 0)


def test_a_new_producer_after_a_kip360_bump_forgets_the_last_epoch():
    w = World()
    w.init()
    w.init(pid=1000, epoch=0)  # -> epoch 1, last epoch 0
    w.init()  # another instance -> epoch 2, last epoch -1
    assert w.init(pid=1000, epoch=0)[0] == InitProducerIdResult(ErrorCode.producer_fenced)


def test_an_exhausted_epoch_rotates_to_a_new_producer_id():
    w = World()
    w.init()
    w.state().producer_epoch = 32765
    assert w.init()[0] == InitProducerIdResult(ErrorCode.none, 1000, 32766)
    answer, fx = w.init()
    assert answer == InitProducerIdResult(ErrorCode.none, 1001, 0)
    assert w.state().last_producer_id == 1000
    assert tl.decode_value(fx.records[0].value).producer_id == 1001


def test_kip360_rotation_retried_with_the_old_id_gets_the_same_new_id():
    w = World()
    w.init()
    w.state().producer_epoch = 32766
    assert w.init(pid=1000, epoch=32766)[0] == InitProducerIdResult(ErrorCode.none, 1001, 0)
    assert w.init(pid=1000, epoch=32766)[0] == InitProducerIdResult(ErrorCode.none, 1001, 0)


def test_fencing_at_the_last_epoch_uses_short_max_and_the_new_producer_gets_a_new_id():
    w = World()
    w.init()
    w.state().producer_epoch = 32766
    w.add(1000, 32766, ("out", 0))
    answer, fx = w.init()
    assert answer is None and fx.markers[0].producer_epoch == 32767
    done = w.write_markers(fx.markers[0])
    assert done.responses[0][1] == InitProducerIdResult(ErrorCode.none, 1001, 0)


# --- errors -----------------------------------------------------------------------------


@pytest.mark.parametrize("timeout", [0, -1, 900_001])
def test_a_transaction_timeout_outside_the_allowed_range_is_refused(timeout):
    w = World()
    assert w.init(timeout=timeout)[0] == InitProducerIdResult(ErrorCode.invalid_transaction_timeout)
    assert w.coordinator.transactions == {}


def test_the_maximum_timeout_is_the_brokers_setting():
    w = World(max_timeout_ms=1000)
    assert w.init(timeout=1001)[0].error_code == ErrorCode.invalid_transaction_timeout
    assert w.init(timeout=1000)[0].error_code == ErrorCode.none


def test_an_empty_transactional_id_is_an_invalid_request():
    w = World()
    assert w.init(tid="")[0] == InitProducerIdResult(ErrorCode.invalid_request)
    assert w.add(1, 0, ("a", 0), tid="")[0] == TxnResult(ErrorCode.invalid_request)
    assert w.end(1, 0, True, tid="")[0] == TxnResult(ErrorCode.invalid_request)
    assert w.call("add_offsets", "", 1, 0, "g")[0] == TxnResult(ErrorCode.invalid_request)


def test_half_a_kip360_producer_id_and_epoch_is_an_invalid_request():
    w = World()
    assert w.init(pid=5, epoch=-1)[0] == InitProducerIdResult(ErrorCode.invalid_request)
    assert w.init(pid=-1, epoch=0)[0] == InitProducerIdResult(ErrorCode.invalid_request)


def test_a_producer_without_transactional_id_gets_a_fresh_id_at_epoch_0():
    w = World()
    answer, fx = w.call("init_producer_id", None, TIMEOUT)
    assert answer == InitProducerIdResult(ErrorCode.none, 1000, 0) and fx.records == []


def test_unknown_transactional_id_or_producer_id_is_an_invalid_mapping():
    w = World()
    assert w.add(1000, 0, ("a", 0))[0] == TxnResult(ErrorCode.invalid_producer_id_mapping)
    assert w.end(1000, 0, True)[0] == TxnResult(ErrorCode.invalid_producer_id_mapping)
    w.init()
    assert w.add(999, 0, ("a", 0))[0] == TxnResult(ErrorCode.invalid_producer_id_mapping)
    assert w.call("add_offsets", "t", 999, 0, "g")[0] == TxnResult(
        ErrorCode.invalid_producer_id_mapping)
    assert w.end(999, 0, True)[0] == TxnResult(ErrorCode.invalid_producer_id_mapping)


def test_a_newer_epoch_than_the_coordinators_is_fenced_too():
    w = World()
    w.init()
    assert w.add(1000, 1, ("a", 0))[0] == TxnResult(ErrorCode.producer_fenced)
    assert w.end(1000, 1, True)[0] == TxnResult(ErrorCode.producer_fenced)


def test_ending_a_transaction_that_never_began_is_an_invalid_state():
    w = World()
    w.init()
    assert w.end(1000, 0, True)[0] == TxnResult(ErrorCode.invalid_txn_state)
    assert w.end(1000, 0, False)[0] == TxnResult(ErrorCode.invalid_txn_state)


def test_end_txn_retries_while_markers_are_written_and_after():
    w = World()
    w.init()
    w.add(1000, 0, ("a", 0))
    _, fx = w.end(1000, 0, True)
    assert w.end(1000, 0, True)[0] == TxnResult(ErrorCode.concurrent_transactions)
    assert w.end(1000, 0, False)[0] == TxnResult(ErrorCode.invalid_txn_state)
    assert w.add(1000, 0, ("a", 1))[0] == TxnResult(ErrorCode.concurrent_transactions)
    assert w.init()[0] == InitProducerIdResult(ErrorCode.concurrent_transactions)
    w.write_markers(fx.markers[0])
    answer, again = w.end(1000, 0, True)
    assert answer == TxnResult(ErrorCode.none) and again.records == [] and again.markers == []
    assert w.end(1000, 0, False)[0] == TxnResult(ErrorCode.invalid_txn_state)


def test_abort_retries_mirror_commit_retries():
    w = World()
    w.init()
    w.add(1000, 0, ("a", 0))
    _, fx = w.end(1000, 0, False)
    assert w.end(1000, 0, False)[0] == TxnResult(ErrorCode.concurrent_transactions)
    assert w.end(1000, 0, True)[0] == TxnResult(ErrorCode.invalid_txn_state)
    w.write_markers(fx.markers[0])
    assert w.end(1000, 0, False)[0] == TxnResult(ErrorCode.none)
    assert w.end(1000, 0, True)[0] == TxnResult(ErrorCode.invalid_txn_state)


def test_producer_fenced_is_invalid_producer_epoch_for_clients_before_kip588():
    assert error_for_version(ErrorCode.producer_fenced, 26, 1) == ErrorCode.invalid_producer_epoch
    assert error_for_version(ErrorCode.producer_fenced, 26, 2) == ErrorCode.producer_fenced
    assert error_for_version(ErrorCode.producer_fenced, 22, 3) == ErrorCode.invalid_producer_epoch
    assert error_for_version(ErrorCode.producer_fenced, 22, 4) == ErrorCode.producer_fenced
    assert error_for_version(ErrorCode.producer_fenced, 24, 1) == ErrorCode.invalid_producer_epoch
    assert error_for_version(ErrorCode.producer_fenced, 25, 0) == ErrorCode.invalid_producer_epoch
    assert error_for_version(ErrorCode.concurrent_transactions, 26, 0) == \
        ErrorCode.concurrent_transactions


def test_stale_markers_are_ignored():
    w = World()
    w.init()
    w.add(1000, 0, ("a", 0))
    _, fx = w.end(1000, 0, True)
    w.write_markers(fx.markers[0])
    again = w.write_markers(fx.markers[0])
    assert again.records == [] and w.state().state == TxnState.COMPLETE_COMMIT
    assert w.coordinator.markers_written("nope", 1, 0, now_ms=w.now).records == []


def test_a_transaction_with_no_partitions_completes_without_markers():
    w = World()
    w.init()
    w.add(1000, 0)  # AddPartitionsToTxn with an empty list still begins a transaction
    answer, fx = w.end(1000, 0, True)
    assert answer == TxnResult(ErrorCode.none) and fx.markers == []
    assert w.state().state == TxnState.COMPLETE_COMMIT


# --- describe and list ------------------------------------------------------------------


def test_describe_shows_state_producer_and_partitions():
    w = World()
    w.init(timeout=30_000)
    w.add(1000, 0, ("b", 1), ("a", 2), ("b", 0))
    [d, missing, empty] = w.coordinator.describe_transactions(["t", "x", ""])
    assert (d.error_code, d.state, d.producer_id, d.producer_epoch) == (
        ErrorCode.none, "Ongoing", 1000, 0)
    assert d.transaction_timeout_ms == 30_000 and d.transaction_start_time_ms == T0
    assert d.topics == [("a", [2]), ("b", [0, 1])]
    assert missing.error_code == ErrorCode.transactional_id_not_found
    assert empty.error_code == ErrorCode.invalid_request


def test_list_filters_by_state_producer_id_and_duration():
    w = World()
    w.init("t1")
    w.init("t2")
    w.add(1001, 0, ("a", 0), tid="t2")
    c = w.coordinator
    assert [t.transactional_id for t in c.list_transactions().transactions] == ["t1", "t2"]
    ongoing = c.list_transactions(["Ongoing", "Bogus"])
    assert ongoing.unknown_state_filters == ["Bogus"]
    assert [(t.transactional_id, t.producer_id, t.state) for t in ongoing.transactions] == [
        ("t2", 1001, "Ongoing")]
    assert [t.transactional_id for t in c.list_transactions(
        producer_id_filters=[1000]).transactions] == ["t1"]
    assert c.list_transactions(duration_filter_ms=5000, now_ms=T0 + 5000).transactions == []
    assert [t.transactional_id for t in c.list_transactions(
        duration_filter_ms=5000, now_ms=T0 + 5001).transactions] == ["t2"]


# --- restart ----------------------------------------------------------------------------


def test_a_restarted_coordinator_rebuilds_every_transactional_id_from_its_log():
    w = World()
    w.init("committed")
    w.add(1000, 0, ("a", 0), tid="committed")
    w.write_markers(w.end(1000, 0, True, tid="committed")[1].markers[0])
    w.init("ongoing")
    w.add(1001, 0, ("a", 1), ("b", 0), tid="ongoing")
    w.init("idle")
    w.init("gone")
    w.tick(7 * 24 * 3600 * 1000 + 3_600_000)  # everything idle expires...
    w.init("fresh")
    fresh, fx = w.restarted()
    assert persisted(fresh) == persisted(w.coordinator)
    assert set(fresh.transactions) == {"ongoing", "fresh"}
    # ...the open transaction timed out and its abort markers are still to be written.
    assert fresh.transactions["ongoing"].state == TxnState.PREPARE_ABORT
    assert fx.markers == [TxnMarkers("ongoing", 1001, 1, False, 0, (("a", 1), ("b", 0)))]


def test_markers_of_a_transaction_left_prepared_are_written_again_after_a_restart():
    w = World()
    w.init("c")
    w.add(1000, 0, ("a", 0), tid="c")
    _, committing = w.end(1000, 0, True, tid="c")
    w.init("z")
    w.add(1001, 0, ("b", 0), tid="z")
    _, fencing = w.init("z")
    fresh, fx = w.restarted()
    assert persisted(fresh) == persisted(w.coordinator)
    assert sorted(fx.markers) == sorted(committing.markers + fencing.markers)
    done = fresh.markers_written("c", 1000, 0, now_ms=w.now)
    assert fresh.transactions["c"].state == TxnState.COMPLETE_COMMIT and done.records
    # The parked InitProducerId died with the old coordinator: its client retries.
    fresh.markers_written("z", 1001, 1, now_ms=w.now)
    assert fresh.transactions["z"].state == TxnState.COMPLETE_ABORT
    retry = fresh.init_producer_id("z", TIMEOUT, token="r", now_ms=w.now)
    assert retry.response_to("r") == InitProducerIdResult(ErrorCode.none, 1001, 2)


def test_a_transaction_restored_ongoing_still_times_out():
    w = World()
    w.init(timeout=10_000)
    w.add(1000, 0, ("a", 0))
    fresh, _ = w.restarted()
    fx = fresh.tick(w.now + 10_000)
    assert fx.markers == [] and fresh.next_deadline() == w.now + 20_000
    fx = fresh.tick(w.now + 20_000)
    assert fx.markers == [TxnMarkers("t", 1000, 1, False, 0, (("a", 0),))]


def test_records_of_other_coordinator_types_are_skipped_and_tombstones_remove():
    c = TransactionCoordinator()
    c.load(b"\x00\x01" + b"\x00\x01x", b"whatever")
    assert c.transactions == {}
    c.load(tl.encode_key("t"), tl.encode_value(tl.TransactionLogValue(5, 0, 100, 0)))
    assert c.transactions["t"].state == TxnState.EMPTY
    c.load(tl.encode_key("t"), None)
    assert c.transactions == {}


def test_a_record_with_an_unknown_status_is_a_format_error():
    c = TransactionCoordinator()
    with pytest.raises(tl.TransactionLogFormatError):
        c.load(tl.encode_key("t"), tl.encode_value(tl.TransactionLogValue(5, 0, 100, 9)))


def test_add_offsets_adds_the_groups_partition_named_by_the_injected_function():
    w = World(partition_for_group=lambda group: {"g": 7}[group])
    w.init()
    assert w.call("add_offsets", "t", 1000, 0, "g")[0] == TxnResult(ErrorCode.none)
    assert w.state().partitions == {("__consumer_offsets", 7)}


def test_fencing_a_transaction_with_no_partitions_answers_the_new_producer_at_once():
    w = World()
    w.init()
    w.add(1000, 0)
    answer, fx = w.init()
    assert answer == InitProducerIdResult(ErrorCode.none, 1000, 2) and fx.markers == []
    states = [tl.decode_value(r.value).status for r in fx.records]
    assert states == [TxnState.PREPARE_ABORT, TxnState.COMPLETE_ABORT, TxnState.EMPTY]


# --- transaction version 2 (KIP-890 part 2) ------------------------------------------------


def test_v2_every_end_bumps_the_epoch_and_the_markers_carry_the_new_one():
    w = World()
    (init, _fx) = w.init()
    pid, epoch = init.producer_id, init.producer_epoch
    # A broker adds the partition for its client (Produce v12), then the client ends.
    assert w.call("add_partitions", "t", pid, epoch, [("out", 0)], client_version=2)[0] == (
        TxnResult(ErrorCode.none))
    answer, fx = w.call("end_txn", "t", pid, epoch, True, client_version=2)
    assert answer == TxnResult(ErrorCode.none, pid, epoch + 1)
    (markers,) = fx.markers
    assert (markers.producer_id, markers.producer_epoch) == (pid, epoch + 1)
    # The prepare record is value version 1, saying transaction version 2.
    prepared = tl.decode_value(w.log[-1].value)
    assert (prepared.status, prepared.producer_epoch, prepared.client_version) == (
        TxnState.PREPARE_COMMIT, epoch + 1, 2)
    # A retry with the old epoch while the markers are written is told to wait
    # (Kafka's CONCURRENT_TRANSACTIONS), after it is answered as the end was.
    assert w.call("end_txn", "t", pid, epoch, True, client_version=2)[0] == TxnResult(
        ErrorCode.concurrent_transactions)
    w.write_markers(markers)
    assert w.state().state == TxnState.COMPLETE_COMMIT
    assert w.call("end_txn", "t", pid, epoch, True, client_version=2)[0] == answer
    # The other end with the old epoch is not this transaction's (Kafka 4.4's answer);
    # an epoch older still is fenced; the new epoch goes on.
    assert w.call("end_txn", "t", pid, epoch, False, client_version=2)[0].error_code == (
        ErrorCode.invalid_txn_state)
    assert w.call("end_txn", "t", pid, epoch - 1, True, client_version=2)[0].error_code == (
        ErrorCode.producer_fenced)
    assert w.call("add_partitions", "t", pid, epoch + 1, [("out", 1)], client_version=2
                  )[0] == TxnResult(ErrorCode.none)
    # ... and survives a restart of the coordinator mid-way.
    fresh, fx = w.restarted()
    assert fresh.transactions["t"].client_version == 2
    assert fresh.transactions["t"].producer_epoch == epoch + 1


def test_v2_an_abort_with_nothing_open_bumps_the_epoch_and_a_commit_is_refused():
    w = World()
    (init, _fx) = w.init()
    pid, epoch = init.producer_id, init.producer_epoch
    assert w.call("end_txn", "t", pid, epoch, True, client_version=2)[0].error_code == (
        ErrorCode.invalid_txn_state)
    answer, fx = w.call("end_txn", "t", pid, epoch, False, client_version=2)
    assert answer == TxnResult(ErrorCode.none, pid, epoch + 1)
    assert fx.markers == [] and w.state().state == TxnState.COMPLETE_ABORT


def test_v2_the_last_epoch_of_a_producer_id_moves_the_producer_to_a_new_id():
    w = World()
    (init, _fx) = w.init()
    pid = init.producer_id
    w.state().producer_epoch = 32766  # exhausted: the last epoch a client may hold
    w.call("add_partitions", "t", pid, 32766, [("out", 0)], client_version=2)
    answer, fx = w.call("end_txn", "t", pid, 32766, False, client_version=2)
    new_id = answer.producer_id
    assert new_id != pid and answer.producer_epoch == 0
    (markers,) = fx.markers  # the markers fence the old id at its very last epoch
    assert (markers.producer_id, markers.producer_epoch) == (pid, 32767)
    w.write_markers(markers)
    txn = w.state()
    assert (txn.producer_id, txn.producer_epoch, txn.state) == (
        new_id, 0, TxnState.COMPLETE_ABORT)
    # A retry of that end from the old id is answered with the new one.
    assert w.call("end_txn", "t", pid, 32766, False, client_version=2)[0] == answer


def test_v1_clients_keep_v1_ends_beside_v2_ones():
    w = World()
    (init, _fx) = w.init()
    pid, epoch = init.producer_id, init.producer_epoch
    w.add(pid, epoch, ("out", 0))
    answer, fx = w.end(pid, epoch, True)
    assert answer == TxnResult(ErrorCode.none)  # no ids: the epoch stays
    assert fx.markers[0].producer_epoch == epoch
    assert tl.decode_value(w.log[-1].value).client_version == 0  # value version 0
