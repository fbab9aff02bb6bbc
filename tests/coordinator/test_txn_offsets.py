"""Transactional offset commits (TxnOffsetCommit, KIP-98/447) in the group coordinator:
offsets sent with a transaction are pending until its marker, commit or vanish with it,
never mix between producers or groups, are checked against the group's members like
Kafka's doTxnCommitOffsets, and a replay of the log (records of transactional batches,
then markers) rebuilds exactly that."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from odradek.coordinator import GroupCoordinator
from odradek.coordinator import offsets_topic as ot
from odradek.coordinator.results import (
    OffsetCommitRequestPartition,
)

from .harness import Harness

PRODUCER, OTHER = 1000, 2000
NOW = 1_000_000


def everywhere(_group_id: str) -> bool:
    return True


def txn_commit(c: GroupCoordinator, group: str, producer: int, offsets, *,
               member: str = "", generation: int = -1):
    token = object()
    fx = c.commit_txn_offsets(group, producer, 0, member, generation, None,
                              [OffsetCommitRequestPartition(t, p, o) for t, p, o in offsets],
                              token=token, now_ms=NOW)
    result = fx.response_to(token)
    return fx, {(r.topic, r.partition): r.error_code for r in result.partitions}


def committed(c: GroupCoordinator, group: str, topic: str = "t", partition: int = 0) -> int:
    return c.fetch_offsets(group, [(topic, partition)]).partitions[0].offset


def test_offsets_of_a_transaction_count_only_once_it_commits():
    c = GroupCoordinator()
    fx, errors = txn_commit(c, "g", PRODUCER, [("t", 0, 5), ("t", 1, 8)])
    assert errors == {("t", 0): ErrorCode.none, ("t", 1): ErrorCode.none}
    # Written now, as the producer's transaction, in Kafka's offset commit layout.
    assert fx.transactional == (PRODUCER, 0)
    assert [ot.decode_key(r.key) for r in fx.records] == [
        ot.OffsetCommitKey("g", "t", 0), ot.OffsetCommitKey("g", "t", 1)]
    assert committed(c, "g") == -1
    assert c.has_pending_txn_offsets("g", "t", 0)
    c.complete_txn(PRODUCER, True, everywhere)
    assert committed(c, "g") == 5 and committed(c, "g", "t", 1) == 8
    assert not c.has_pending_txn_offsets("g", "t", 0)
    assert c.pending_txn_offsets == {}


def test_an_aborted_transaction_leaves_the_committed_offsets_as_they_were():
    c = GroupCoordinator()
    txn_commit(c, "g", PRODUCER, [("t", 0, 5)])
    c.complete_txn(PRODUCER, True, everywhere)
    txn_commit(c, "g", PRODUCER, [("t", 0, 9)])
    c.complete_txn(PRODUCER, False, everywhere)
    assert committed(c, "g") == 5
    assert c.pending_txn_offsets == {}


def test_a_marker_settles_only_its_producer_and_the_groups_of_its_partition():
    c = GroupCoordinator()
    txn_commit(c, "g1", PRODUCER, [("t", 0, 1)])
    txn_commit(c, "g2", PRODUCER, [("t", 0, 2)])
    txn_commit(c, "g1", OTHER, [("t", 1, 3)])
    # The marker went to g1's __consumer_offsets partition only.
    c.complete_txn(PRODUCER, True, lambda group_id: group_id == "g1")
    assert committed(c, "g1") == 1
    assert committed(c, "g2") == -1 and c.has_pending_txn_offsets("g2", "t", 0)
    assert committed(c, "g1", "t", 1) == -1 and c.has_pending_txn_offsets("g1", "t", 1)


def test_a_member_of_a_live_group_must_be_current_but_an_outside_producer_may_commit():
    h = Harness()
    ids, gen = h.stable_group("c1")
    c = h.coordinator
    assert txn_commit(c, "g", PRODUCER, [("t", 0, 1)], member=ids["c1"],
                      generation=gen)[1] == {("t", 0): ErrorCode.none}
    assert txn_commit(c, "g", PRODUCER, [("t", 0, 1)], member=ids["c1"],
                      generation=gen + 1)[1] == {("t", 0): ErrorCode.illegal_generation}
    assert txn_commit(c, "g", PRODUCER, [("t", 0, 1)], member="stranger",
                      generation=gen)[1] == {("t", 0): ErrorCode.unknown_member_id}
    # No member id and no generation: a producer outside the group (assign() mode),
    # accepted whatever the group's state, as Kafka does.
    assert txn_commit(c, "g", PRODUCER, [("t", 0, 1)])[1] == {("t", 0): ErrorCode.none}


def test_a_replay_keeps_open_transactions_pending_and_applies_the_markers_it_meets():
    live = GroupCoordinator()
    log: list[tuple[int | None, object]] = []  # (producer of a txn batch, record|marker)

    def commit(group: str, producer: int, offsets) -> None:
        fx, _ = txn_commit(live, group, producer, offsets)
        log.extend((producer, r) for r in fx.records)

    def marker(producer: int, commit: bool) -> None:
        live.complete_txn(producer, commit, everywhere)
        log.append((producer, commit))

    commit("g", PRODUCER, [("t", 0, 5)])
    marker(PRODUCER, True)
    commit("g", PRODUCER, [("t", 0, 7)])
    marker(PRODUCER, False)
    commit("g", OTHER, [("t", 1, 4)])  # still open at the "restart"
    commit("g", PRODUCER, [("t", 0, 11)])  # open too

    restarted = GroupCoordinator()
    for producer, entry in log:
        if isinstance(entry, bool):
            restarted.complete_txn(producer, entry, everywhere)
        else:
            restarted.load_txn_offset(producer, entry.key, entry.value)
    assert committed(restarted, "g") == 5
    assert restarted.pending_txn_offsets == live.pending_txn_offsets
    # Markers written after the restart settle what the replay left pending.
    restarted.complete_txn(OTHER, True, everywhere)
    restarted.complete_txn(PRODUCER, True, everywhere)
    assert committed(restarted, "g", "t", 1) == 4 and committed(restarted, "g") == 11


def plain_commit(c: GroupCoordinator, group: str, offset: int):
    token = object()
    fx = c.commit_offsets(group, "", -1, None, [("t", 0, offset)], token=token, now_ms=NOW)
    assert fx.response_to(token).partitions[0].error_code == ErrorCode.none
    return fx


def test_a_plain_commit_made_after_the_transactional_one_is_kept_when_it_commits():
    # Kafka keeps whichever commit was written last (CommitRecordMetadataAndOffset).
    c = GroupCoordinator()
    txn_commit(c, "g", PRODUCER, [("t", 0, 5)])
    plain_commit(c, "g", 9)
    c.complete_txn(PRODUCER, True, everywhere)
    assert committed(c, "g") == 9
    # ... and one made before it is replaced.
    plain_commit(c, "g", 20)
    txn_commit(c, "g", PRODUCER, [("t", 0, 25)])
    c.complete_txn(PRODUCER, True, everywhere)
    assert committed(c, "g") == 25


def test_a_replay_orders_plain_and_transactional_commits_as_the_log_does():
    live = GroupCoordinator()
    records = []
    fx, _ = txn_commit(live, "g", PRODUCER, [("t", 0, 5)])
    records += [(PRODUCER, r) for r in fx.records]
    records += [(None, r) for r in plain_commit(live, "g", 9).records]
    restarted = GroupCoordinator()
    for producer, r in records:
        if producer is None:
            restarted.load(r.key, r.value)
        else:
            restarted.load_txn_offset(producer, r.key, r.value)
    restarted.complete_txn(PRODUCER, True, everywhere)
    assert committed(restarted, "g") == 9


def test_a_stable_fetch_waits_out_a_pending_offset_and_a_plain_fetch_does_not():
    # KIP-447: read_committed consumers ask with require_stable; a partition whose offset
    # an open transaction may still change answers UNSTABLE_OFFSET_COMMIT (they retry).
    c = GroupCoordinator()
    txn_commit(c, "g", PRODUCER, [("t", 0, 5)])
    c.complete_txn(PRODUCER, True, everywhere)
    txn_commit(c, "g", PRODUCER, [("t", 0, 9)])
    stable = c.fetch_offsets("g", [("t", 0), ("t", 1)], require_stable=True).partitions
    assert [(p.offset, p.error_code) for p in stable] == [
        (-1, ErrorCode.unstable_offset_commit), (-1, ErrorCode.none)]
    assert c.fetch_offsets("g", [("t", 0)]).partitions[0].offset == 5
    c.complete_txn(PRODUCER, True, everywhere)
    [settled] = c.fetch_offsets("g", [("t", 0)], require_stable=True).partitions
    assert (settled.offset, settled.error_code) == (9, ErrorCode.none)
