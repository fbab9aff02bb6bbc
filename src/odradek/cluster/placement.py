"""Where a new topic's (or new partitions') replicas go: Kafka's
``AdminUtils.assignReplicasToBrokers``, rack-aware and rack-unaware.

The goals, as Kafka states them: spread replicas evenly over brokers; put each
partition's replicas on different brokers; with racks, on different racks where there
are enough; and spread each broker's *leaders* (a partition's first replica) evenly too.
The first replica of partition p goes to broker (start + p) mod n; the followers are
shifted from it by an amount that grows every time p wraps around the broker list, so
the followers of one broker's leaders land on different brokers. The start index and the
first shift are random in Kafka (so that topics do not all start on broker 0); here they
come from the caller's ``random.Random``, so that tests can fix them.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence


class PlacementError(ValueError):
    """A placement that cannot be made; ``kafka_error`` names Kafka's error."""

    kafka_error = "INVALID_REPLICATION_FACTOR"


def assign_replicas(
    brokers: Mapping[int, str | None],
    partitions: int,
    replication_factor: int,
    *,
    first_partition: int = 0,
    rng: random.Random | None = None,
    start_index: int | None = None,
) -> dict[int, list[int]]:
    """Replicas for partitions ``first_partition .. first_partition + partitions - 1``.

    ``brokers`` maps each live broker id to its rack (or None). Rack-aware placement is
    used when every broker has a rack (Kafka's RackAwareMode.Safe: with some brokers
    unracked it falls back to ignoring racks)."""
    if partitions <= 0:
        raise PlacementError("the number of partitions must be larger than 0")
    if replication_factor <= 0:
        raise PlacementError("the replication factor must be larger than 0")
    if replication_factor > len(brokers):
        raise PlacementError(
            f"replication factor {replication_factor} is larger than the {len(brokers)} "
            f"available broker(s)")
    rng = rng or random.Random()
    ids = sorted(brokers)
    if all(brokers[b] is not None for b in ids) and len({brokers[b] for b in ids}) > 1:
        return _rack_aware(dict(brokers), partitions, replication_factor, first_partition,
                           rng, start_index)
    return _rack_unaware(ids, partitions, replication_factor, first_partition, rng,
                         start_index)


def _replica_index(first: int, shift: int, j: int, n: int) -> int:
    """Kafka's replicaIndex: the j-th follower of the replica at ``first``."""
    return (first + 1 + (shift + j) % (n - 1)) % n


def _place(arranged: Sequence[int], partitions: int, rf: int, first_partition: int,
           rng: random.Random, start_index: int | None,
           followers: Callable[[int, int], list[int]]) -> dict[int, list[int]]:
    """The loop both of Kafka's placements share: partition p's first replica is
    ``arranged[(p + start) % n]``; the shift grows each time p wraps the list;
    ``followers(first index, shift)`` picks the rest."""
    n = len(arranged)
    start = rng.randrange(n) if start_index is None else start_index
    shift = rng.randrange(n) if start_index is None else start_index
    out: dict[int, list[int]] = {}
    partition = max(0, first_partition)
    for _ in range(partitions):
        if partition > 0 and partition % n == 0:
            shift += 1
        first = (partition + start) % n
        out[partition] = [arranged[first], *(followers(first, shift) if rf > 1 else [])]
        partition += 1
    return out


def _rack_unaware(ids: Sequence[int], partitions: int, rf: int, first_partition: int,
                  rng: random.Random, start_index: int | None) -> dict[int, list[int]]:
    n = len(ids)
    return _place(ids, partitions, rf, first_partition, rng, start_index,
                  lambda first, shift: [ids[_replica_index(first, shift, j, n)]
                                        for j in range(rf - 1)])


def rack_alternated(brokers: Mapping[int, str | None]) -> list[int]:
    """Brokers ordered rack by rack in turn (Kafka's getRackAlternatedBrokerList):
    racks sorted, brokers of a rack sorted, one from each rack at a time."""
    by_rack: dict[str, list[int]] = {}
    for broker, rack in sorted(brokers.items()):
        by_rack.setdefault(str(rack), []).append(broker)
    racks = sorted(by_rack)
    iters = {rack: iter(by_rack[rack]) for rack in racks}
    out: list[int] = []
    i = 0
    while len(out) < len(brokers):
        nxt = next(iters[racks[i]], None)
        if nxt is not None:
            out.append(nxt)
        i = (i + 1) % len(racks)
    return out


def _rack_aware(brokers: dict[int, str | None], partitions: int, rf: int,
                first_partition: int, rng: random.Random,
                start_index: int | None) -> dict[int, list[int]]:
    arranged = rack_alternated(brokers)
    n = len(arranged)
    num_racks = len(set(brokers.values()))

    def followers(first: int, shift: int) -> list[int]:
        leader = arranged[first]
        chosen: list[int] = []
        racks_used = {brokers[leader]}
        brokers_used = {leader}
        k = 0
        while len(chosen) < rf - 1:
            broker = arranged[_replica_index(first, shift * num_racks, k, n)]
            rack = brokers[broker]
            k += 1
            # Skip a broker whose rack already has a replica while some rack has none,
            # or a broker that has one while some broker has none.
            if ((rack not in racks_used or len(racks_used) == num_racks)
                    and (broker not in brokers_used or len(brokers_used) == n)):
                chosen.append(broker)
                racks_used.add(rack)
                brokers_used.add(broker)
        return chosen

    return _place(arranged, partitions, rf, first_partition, rng, start_index, followers)


def check_assignment(assignment: Mapping[int, Sequence[int]], live: Sequence[int]) -> None:
    """A CreateTopics/CreatePartitions request's explicit assignment: every partition
    needs the same number of distinct replicas, all of them registered brokers
    (Kafka: INVALID_REPLICA_ASSIGNMENT otherwise)."""
    sizes = {len(r) for r in assignment.values()}
    for partition, replicas in assignment.items():
        if not replicas:
            raise _invalid(f"partition {partition} has no replicas")
        if len(set(replicas)) != len(replicas):
            raise _invalid(f"partition {partition} names a broker twice: {list(replicas)}")
        unknown = [b for b in replicas if b not in live]
        if unknown:
            raise _invalid(f"partition {partition} is assigned to unknown broker(s) {unknown}")
    if len(sizes) > 1:
        raise _invalid("every partition must have the same number of replicas")


def _invalid(message: str) -> PlacementError:
    err = PlacementError(message)
    err.kafka_error = "INVALID_REPLICA_ASSIGNMENT"
    return err
