"""The pure rules of partition reassignment (KIP-455), leader elections on request
(KIP-460) and replication throttles (KIP-73): cluster/reassignment.py, elections.py and
quota.py, with Kafka's examples."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from odradek.cluster import elections, reassignment
from odradek.cluster.quota import LONG_MAX, ReplicationQuota, is_throttled
from odradek.cluster.reassignment import ReassignmentError
from odradek.cluster.state import PartitionState, TopicAssignment


def topic(*replicas: tuple[int, ...]) -> TopicAssignment:
    return TopicAssignment("t", uuid.UUID(int=1), tuple(replicas))


def test_a_move_lists_target_then_origin_and_what_is_added_and_removed() -> None:
    # Kafka's example: ORS [1,2,3] -> TRS [4,5,6]: RS [4,5,6,1,2,3], AR [4,5,6], RR [1,2,3].
    assert reassignment.plan(topic((1, 2, 3)), 0, (4, 5, 6)) == (
        (4, 5, 6, 1, 2, 3), (4, 5, 6), (1, 2, 3))
    assert reassignment.plan(topic((1, 2, 3)), 0, (2, 3, 4)) == ((2, 3, 4, 1), (4,), (1,))


def test_the_assignment_round_trips_through_json_with_the_move_in_progress() -> None:
    moving = topic((1, 2, 3)).with_partition(0, (2, 3, 4, 1), (4,), (1,))
    again = TopicAssignment.from_json("t", moving.to_json())
    assert again == moving
    assert again.reassigning(0)
    assert again.origin(0) == (2, 3, 1) and again.target(0) == (2, 3, 4)
    done = again.with_partition(0, again.target(0))
    assert not done.reassigning(0) and TopicAssignment.from_json("t", done.to_json()) == done


def test_a_second_move_starts_from_the_same_origin_and_cancel_goes_back_to_it() -> None:
    moving = topic((1, 2, 3)).with_partition(0, *reassignment.plan(topic((1, 2, 3)), 0, (2, 3, 4)))
    # Re-targeted to [5,2,3]: 4 (being added) is dropped, 1 is still removed.
    assert reassignment.plan(moving, 0, (5, 2, 3)) == ((5, 2, 3, 1), (5,), (1,))
    # Cancelled: back to the origin, nothing added or removed.
    assert reassignment.plan(moving, 0, moving.origin(0)) == ((2, 3, 1), (), ())


def test_requested_replica_lists_are_checked() -> None:
    for bad, why in (((), "empty"), ((1, 1), "repeats"), ((1, 9), "not registered")):
        with pytest.raises(ReassignmentError, match=why) as info:
            reassignment.check_target(bad, {1, 2, 3})
        assert info.value.kafka_error == "INVALID_REPLICA_ASSIGNMENT"
    reassignment.check_target((3, 1), {1, 2, 3})


def state(leader: int, isr: tuple[int, ...], epoch: int = 5) -> PartitionState:
    return PartitionState(leader, epoch, isr, 1, leader_broker_epoch=100 + leader)


def test_completion_waits_for_every_target_replica_in_the_isr() -> None:
    assert not reassignment.is_complete(state(1, (1, 2, 3)), (2, 3, 4))
    assert reassignment.is_complete(state(1, (1, 2, 3, 4)), (2, 3, 4))


def test_completion_keeps_a_target_leader_and_drops_the_removed_from_the_isr() -> None:
    usable = {1: 101, 2: 102, 3: 103, 4: 104}
    done = reassignment.completed(state(2, (1, 2, 3, 4)), (2, 3, 4), usable, usable, 7)
    assert done is not None
    assert (done.leader, done.isr, done.leader_epoch) == (2, (2, 3, 4), 6)
    assert done.leader_broker_epoch == 102


def test_completion_moves_leadership_off_a_removed_leader() -> None:
    usable = {1: 101, 2: 102, 3: 103, 4: 104}
    done = reassignment.completed(state(1, (1, 2, 3, 4)), (4, 3, 2), usable, usable, 7)
    assert done is not None
    assert (done.leader, done.isr, done.leader_broker_epoch) == (4, (2, 3, 4), 104)
    # No usable target replica in the ISR: not yet.
    assert reassignment.completed(state(1, (1, 2, 3, 4)), (4,), {1: 101}, {1: 101}, 7) is None


@given(st.lists(st.integers(1, 6), min_size=1, max_size=4, unique=True),
       st.lists(st.integers(1, 6), min_size=1, max_size=4, unique=True),
       st.sets(st.integers(1, 6)))
def test_a_completed_move_is_led_from_the_target_and_its_isr_is_inside_it(
        origin: list[int], target: list[int], live: set[int]) -> None:
    full, _, _ = reassignment.plan(topic(tuple(origin)), 0, target)
    assert set(full) == set(origin) | set(target) and list(full[:len(target)]) == target
    isr = tuple(full)  # every replica caught up
    usable = {b: b for b in live}
    done = reassignment.completed(state(full[0], isr), target, usable, usable, 1)
    if done is None:
        assert not set(target) & live
    else:
        assert done.leader in target and done.leader in live
        assert set(done.isr) <= set(target) and done.leader in done.isr


def test_an_unclean_election_on_request_prefers_the_isr() -> None:
    offline = PartitionState(-1, 4, (1,), 1)
    # An ISR member is back: it leads, the ISR stays.
    new = elections.unclean_leader(offline, (1, 2, 3), {1: 11, 2: 12}, {1: 11, 2: 12}, 2)
    assert new is not None and (new.leader, new.isr, new.leader_epoch) == (1, (1,), 5)
    # Only a replica outside the ISR is alive: it leads alone.
    new = elections.unclean_leader(offline, (1, 2, 3), {3: 13}, {3: 13}, 2)
    assert new is not None and (new.leader, new.isr, new.leader_broker_epoch) == (3, (3,), 13)
    assert elections.unclean_leader(offline, (1, 2, 3), {7: 1}, {7: 1}, 2) is None


def test_throttled_replica_lists() -> None:
    assert not is_throttled("", 0, 1)
    assert is_throttled("*", 3, 9)
    assert is_throttled("0:1,0:2,1:3", 0, 2)
    assert not is_throttled("0:1,0:2,1:3", 1, 2)


def test_the_quota_holds_its_rate_after_a_tenth_of_a_second_of_burst() -> None:
    quota = ReplicationQuota(1000)
    assert not quota.exceeded(0.0)
    quota.record(100, 0.0)  # the burst is spent
    assert quota.exceeded(0.0)
    assert quota.wait_s(0.0) == pytest.approx(0.001, abs=1e-3)
    assert not quota.exceeded(0.05)
    quota.record(5000, 0.05)  # a large fetch overshoots: owed for ~5 s
    assert quota.exceeded(4.9) and not quota.exceeded(5.1)
    # Over a long run, what passes is the rate (plus the burst).
    quota, now, moved = ReplicationQuota(1000), 0.0, 0
    while now < 60:
        if not quota.exceeded(now):
            quota.record(300, now)
            moved += 300
        now += 0.01
    assert 60_000 <= moved <= 60_400


def test_an_unlimited_quota_is_never_exceeded() -> None:
    quota = ReplicationQuota()
    assert quota.unlimited and quota.rate == LONG_MAX
    quota.record(10**12, 0.0)
    assert not quota.exceeded(0.0)
