"""Replica placement: Kafka's assignReplicasToBrokers, its own test cases and its goals."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.cluster.placement import (
    PlacementError,
    assign_replicas,
    check_assignment,
    rack_alternated,
)
from odradek.devcluster import host_racks


def test_rack_unaware_matches_kafkas_own_example() -> None:
    # AdminUtilsTest.testReplicaAssignment: 5 brokers, 10 partitions, RF 3, start index 0.
    assignment = assign_replicas({b: None for b in range(5)}, 10, 3, start_index=0)
    assert assignment == {
        0: [0, 1, 2], 1: [1, 2, 3], 2: [2, 3, 4], 3: [3, 4, 0], 4: [4, 0, 1],
        5: [0, 2, 3], 6: [1, 3, 4], 7: [2, 4, 0], 8: [3, 0, 1], 9: [4, 1, 2],
    }


def test_rack_alternated_broker_list_matches_kafka() -> None:
    # AdminRackAwareTest.testGetRackAlternatedBrokerListAndAssignReplicasToBrokers
    racks = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}
    assert rack_alternated(racks) == [0, 3, 1, 5, 4, 2]
    assert rack_alternated({b: r for b, r in racks.items() if b != 5}) == [0, 3, 1, 4, 2]
    assert assign_replicas(racks, 7, 3, start_index=0) == {
        0: [0, 3, 1], 1: [3, 1, 5], 2: [1, 5, 4], 3: [5, 4, 2], 4: [4, 2, 0],
        5: [2, 0, 3], 6: [0, 4, 2],
    }


def test_a_replication_factor_above_the_live_brokers_is_refused() -> None:
    with pytest.raises(PlacementError, match="larger than the 2 available"):
        assign_replicas({1: None, 2: None}, 3, 3)


def test_new_partitions_continue_the_numbering() -> None:
    added = assign_replicas({b: None for b in range(3)}, 2, 2, first_partition=4,
                            rng=random.Random(1))
    assert sorted(added) == [4, 5]


@settings(max_examples=200, deadline=None)
@given(brokers=st.integers(1, 9), partitions=st.integers(1, 40), rf=st.integers(1, 9),
       racks=st.integers(0, 4), seed=st.integers(0, 2**32))
def test_every_placement_keeps_kafkas_goals(brokers: int, partitions: int, rf: int,
                                             racks: int, seed: int) -> None:
    rf = min(rf, brokers)
    rack_of = {b: (f"r{b % racks}" if racks else None) for b in range(brokers)}
    assignment = assign_replicas(rack_of, partitions, rf, rng=random.Random(seed))
    assert sorted(assignment) == list(range(partitions))
    for replicas in assignment.values():
        assert len(replicas) == rf and len(set(replicas)) == rf  # distinct brokers
        used_racks = {rack_of[b] for b in replicas}
        if racks > 1:
            # As many racks as the replicas can cover.
            assert len(used_racks) == min(rf, len(set(rack_of.values())))
    # Leaders and replicas spread evenly: no broker has more than its share plus one.
    leaders = Counter(r[0] for r in assignment.values())
    if racks <= 1:
        assert max(leaders.values()) - min(leaders.get(b, 0) for b in range(brokers)) <= 1
        load = Counter(b for r in assignment.values() for b in r)
        assert max(load.values()) - min(load.get(b, 0) for b in range(brokers)) <= rf


@settings(max_examples=200, deadline=None)
@given(per_host=st.integers(1, 8), hosts=st.integers(1, 5), partitions=st.integers(1, 60),
       rf=st.integers(1, 3), seed=st.integers(0, 2**32))
def test_brokers_laid_out_per_host_keep_replicas_on_different_hosts(
        per_host: int, hosts: int, partitions: int, rf: int, seed: int) -> None:
    # `odradek cluster up --brokers-per-host K` (and the rule for many-core hosts): one
    # rack per host, so losing a host loses at most one replica of a partition when
    # there are at least RF hosts; and every host leads its share of partitions.
    brokers = per_host * hosts
    rf = min(rf, brokers)
    rack_of = {b: s["broker.rack"] for b, s in host_racks(brokers, per_host).items()}
    assert sorted(set(rack_of.values())) == [f"host-{h}" for h in range(1, hosts + 1)]
    assignment = assign_replicas(rack_of, partitions, rf, rng=random.Random(seed))
    for replicas in assignment.values():
        assert len({rack_of[b] for b in replicas}) == min(rf, hosts)
    led = Counter(rack_of[r[0]] for r in assignment.values())
    share = partitions / hosts
    assert all(abs(led.get(f"host-{h}", 0) - share) <= 1 for h in range(1, hosts + 1))


def test_explicit_assignments_are_checked() -> None:
    check_assignment({0: [1, 2], 1: [2, 3]}, [1, 2, 3])
    with pytest.raises(PlacementError, match="unknown broker"):
        check_assignment({0: [1, 9]}, [1, 2])
    with pytest.raises(PlacementError, match="twice"):
        check_assignment({0: [1, 1]}, [1, 2])
    with pytest.raises(PlacementError, match="same number"):
        check_assignment({0: [1, 2], 1: [1]}, [1, 2])
