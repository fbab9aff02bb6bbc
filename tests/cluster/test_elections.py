"""The controller's leadership decisions: Kafka's election rules, and the safety rules
every decision keeps over random histories of brokers dying, bouncing and returning."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.cluster.elections import (
    after_broker_change,
    imbalanced_brokers,
    initial_state,
    offline_leader,
    preferred_leader,
)
from odradek.cluster.state import NO_LEADER, PartitionState

EPOCHS = {1: 101, 2: 102, 3: 103}  # broker id -> its current registration


def state(leader: int, isr: tuple[int, ...], epoch: int = 0) -> PartitionState:
    return PartitionState(leader, epoch, isr, 1, EPOCHS.get(leader, -1), version=3)


def test_a_new_partition_is_led_by_its_first_live_replica() -> None:
    first = initial_state([2, 3, 1], {1, 3}, 7, EPOCHS)
    assert (first.leader, first.isr, first.leader_epoch, first.controller_epoch) == (
        3, (3, 1), 0, 7)
    assert first.leader_broker_epoch == 103
    offline = initial_state([2], {1}, 7, EPOCHS)
    assert offline.leader == NO_LEADER and offline.isr == (2,)


def test_offline_election_prefers_assignment_order_within_the_isr() -> None:
    assert offline_leader([3, 1, 2], {1, 2}, {1, 2, 3}, False) == 1
    assert offline_leader([3, 1, 2], {3}, {1, 2}, False) is None
    assert offline_leader([3, 1, 2], {3}, {1, 2}, True) == 1


def test_a_dead_leader_is_replaced_from_the_isr_and_the_epoch_bumps() -> None:
    new = after_broker_change(state(1, (1, 2, 3), 4), [1, 2, 3], {2, 3}, EPOCHS, 9, False)
    assert new is not None
    assert (new.leader, new.isr, new.leader_epoch, new.controller_epoch) == (2, (2, 3), 5, 9)
    assert new.leader_broker_epoch == 102
    assert new.version == 3  # the version read: the write is conditional on it


def test_a_dead_follower_leaves_the_isr_and_the_leader_stays() -> None:
    new = after_broker_change(state(1, (1, 2, 3)), [1, 2, 3], {1, 3}, EPOCHS, 2, False)
    assert new is not None and (new.leader, new.isr, new.leader_epoch) == (1, (1, 3), 1)
    assert after_broker_change(state(1, (1, 3)), [1, 2, 3], {1, 3}, EPOCHS, 2, False) is None


def test_with_no_live_isr_member_the_partition_goes_offline_keeping_its_isr() -> None:
    new = after_broker_change(state(1, (1, 2)), [1, 2, 3], {3}, EPOCHS, 2, False)
    assert new is not None and new.leader == NO_LEADER and new.isr == (1, 2)
    # ... and returns with the first ISR member that comes back.
    back = after_broker_change(new, [1, 2, 3], {2, 3}, EPOCHS, 2, False)
    assert back is not None and back.leader == 2 and back.isr == (2,)


def test_unclean_election_takes_any_live_replica_only_when_allowed() -> None:
    old = state(1, (1,))
    assert after_broker_change(old, [1, 2, 3], {2, 3}, EPOCHS, 2, False).leader == NO_LEADER
    unclean = after_broker_change(old, [1, 2, 3], {2, 3}, EPOCHS, 2, True)
    assert unclean is not None and unclean.leader == 2 and unclean.isr == (2,)


def test_a_bounced_leader_is_replaced_and_leaves_the_isr() -> None:
    # Broker 1 restarted (a new registration): it may have lost an unsynced tail.
    old = state(1, (1, 2, 3))
    new = after_broker_change(old, [1, 2, 3], {1, 2, 3}, EPOCHS, 2, False, bounced={1})
    assert new is not None and new.leader == 2 and new.isr == (2, 3)


def test_a_leader_elected_under_an_old_registration_is_replaced() -> None:
    # No controller saw the bounce, but the state names the old registration.
    old = PartitionState(1, 3, (1, 2), 1, 99, version=0)
    new = after_broker_change(old, [1, 2], {1, 2}, EPOCHS, 2, False)
    assert new is not None and new.leader == 2


def test_a_bounced_sole_isr_member_may_lead_again() -> None:
    new = after_broker_change(state(1, (1,)), [1, 2], {1, 2}, EPOCHS, 2, False, bounced={1})
    assert new is not None and new.leader == 1 and new.isr == (1,)
    assert new.leader_broker_epoch == EPOCHS[1]


def test_controlled_shutdown_moves_leadership_and_drops_the_follower() -> None:
    new = after_broker_change(state(1, (1, 2, 3)), [1, 2, 3], {1, 2, 3}, EPOCHS, 2, False,
                              excluded={1})
    assert new is not None and new.leader == 2 and new.isr == (2, 3)
    # With nobody to take over, the stopping leader keeps the partition.
    assert after_broker_change(state(1, (1,)), [1, 2], {1, 2}, EPOCHS, 2, False,
                               excluded={1}) is None


def test_preferred_leader_returns_when_in_sync() -> None:
    assert preferred_leader(state(2, (1, 2)), [1, 2], {1, 2}, EPOCHS, 3).leader == 1
    assert preferred_leader(state(2, (2,)), [1, 2], {1, 2}, EPOCHS, 3) is None
    assert preferred_leader(state(1, (1, 2)), [1, 2], {1, 2}, EPOCHS, 3) is None


def test_imbalance_counts_partitions_led_away_from_their_preferred_broker() -> None:
    states = {("t", 0): state(2, (1, 2)), ("t", 1): state(2, (1, 2)),
              ("t", 2): state(2, (2, 1))}
    replicas = {("t", 0): [1, 2], ("t", 1): [1, 2], ("t", 2): [2, 1]}
    assert imbalanced_brokers(states, replicas, 10) == {1: [("t", 0), ("t", 1)]}
    assert imbalanced_brokers(states, replicas, 100) == {}


@settings(max_examples=300, deadline=None)
@given(seed=st.integers(0, 2**32), replicas=st.integers(1, 5), steps=st.integers(1, 60),
       unclean=st.booleans())
def test_random_histories_keep_the_safety_rules(seed: int, replicas: int, steps: int,
                                                unclean: bool) -> None:
    """Brokers die, bounce, return and shut down at random; after each change the
    controller's decision keeps: a leader is live, usable and (clean) in the ISR; the ISR
    is never empty and only loses members that are gone, bounced or stopping; the
    leader epoch only grows; and a clean election never leads with a broker that was
    out of the ISR."""
    rng = random.Random(seed)
    brokers = list(range(1, replicas + 1))
    epochs = {b: 1000 + b for b in brokers}
    live = set(brokers)
    current = initial_state(brokers, live, 1, epochs)
    for _ in range(steps):
        bounced: set[int] = set()
        excluded: set[int] = set()
        move = rng.random()
        b = rng.choice(brokers)
        if move < 0.35:
            live.discard(b)
        elif move < 0.7:
            live.add(b)
        elif move < 0.85 and b in live:
            epochs[b] += 100
            bounced = {b}
        elif b in live:
            excluded = {b}
        new = after_broker_change(current, brokers, live, epochs, 1, unclean,
                                  excluded=excluded, bounced=bounced)
        if new is None:
            continue
        assert new.isr, "the ISR is never empty"
        assert new.leader_epoch > current.leader_epoch
        gone = (set(brokers) - live) | bounced | excluded
        assert set(current.isr) - set(new.isr) <= gone | set(current.isr) - {new.leader}
        if new.leader != NO_LEADER:
            assert new.leader in live and new.leader not in excluded
            assert new.leader_broker_epoch == epochs[new.leader]
            if not unclean or new.leader in current.isr:
                assert new.leader in current.isr, "a clean leader comes from the ISR"
            assert new.leader in new.isr
        current = new
