"""Partition reassignment (KIP-455) as pure decisions: the replica sets a reassignment
moves through, when it is complete, and the partition state it ends with.

Kafka's ``KafkaController.onPartitionReassignment``, with its names:

- ORS: the replicas before the reassignment (origin), TRS: the target, RS = TRS + ORS
  (target first, order kept, no repeats), AR = TRS - ORS (adding), RR = ORS - TRS
  (removing).
- Start: the assignment becomes RS with AR and RR recorded, and the leader epoch is
  bumped, so the leader counts the new replicas as followers and they start fetching.
- The new replicas catch up and join the ISR by the ordinary rule (the leader adds a
  follower that has reached its high watermark).
- Complete, once every TRS replica is in the ISR: the leader stays if it is in TRS
  (and usable), else the first usable TRS replica in the ISR leads; RR leave the ISR;
  the assignment becomes TRS alone; RR replicas delete their logs.

A new reassignment of a partition already moving starts from the same ORS (replicas
that were being added and are not in the new target are dropped), and cancelling is a
reassignment back to ORS, as in Kafka.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from odradek.cluster.state import PartitionState, TopicAssignment


class ReassignmentError(Exception):
    """A reassignment the controller refuses; ``kafka_error`` names Kafka's error code."""

    def __init__(self, kafka_error: str, message: str) -> None:
        super().__init__(message)
        self.kafka_error = kafka_error


def check_target(target: Sequence[int], registered: Collection[int]) -> None:
    """Kafka's checks of a requested replica list (INVALID_REPLICA_ASSIGNMENT)."""
    if not target:
        raise ReassignmentError("INVALID_REPLICA_ASSIGNMENT", "the replica list is empty")
    if len(set(target)) != len(target):
        raise ReassignmentError("INVALID_REPLICA_ASSIGNMENT",
                                f"the replica list {list(target)} repeats a broker")
    unknown = sorted(b for b in target if b not in registered)
    if unknown:
        raise ReassignmentError("INVALID_REPLICA_ASSIGNMENT",
                                f"brokers {unknown} are not registered (not alive)")


def plan(assignment: TopicAssignment, partition: int, target: Sequence[int]
         ) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """(RS, AR, RR) for moving ``partition`` to ``target`` from its origin."""
    origin = assignment.origin(partition)
    full = tuple(dict.fromkeys([*target, *origin]))
    adding = tuple(r for r in target if r not in origin)
    removing = tuple(r for r in origin if r not in target)
    return full, adding, removing


def started(state: PartitionState, controller_epoch: int) -> PartitionState:
    """The partition state written with the RS assignment: a new epoch, nothing else,
    so the leader takes up the new replica set."""
    return state.changed(leader_epoch=state.leader_epoch + 1, controller_epoch=controller_epoch)


def is_complete(state: PartitionState, target: Collection[int]) -> bool:
    """Every target replica is in the ISR: the reassignment can finish."""
    return set(target) <= set(state.isr)


def completed(state: PartitionState, target: Sequence[int], usable: Collection[int],
              broker_epochs: Mapping[int, int], controller_epoch: int
              ) -> PartitionState | None:
    """The state the reassignment ends with (None: no target replica can lead yet).
    ``usable`` are the brokers alive and not shutting down."""
    isr = tuple(r for r in state.isr if r in target)
    leader = state.leader
    if leader not in target or leader not in usable or leader not in isr:
        leader = next((r for r in target if r in isr and r in usable), -1)
        if leader < 0:
            return None
    return state.changed(leader=leader, isr=isr, leader_epoch=state.leader_epoch + 1,
                         controller_epoch=controller_epoch,
                         leader_broker_epoch=broker_epochs.get(leader, -1)
                         if leader != state.leader else state.leader_broker_epoch)
