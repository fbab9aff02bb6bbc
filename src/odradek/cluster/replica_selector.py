"""Which replica a consumer should fetch from (KIP-392, fetch from follower): the
``replica.selector.class`` setting and Kafka's rack-aware rule, as pure functions.

A partition's leader decides, for a consumer fetch that names the client's rack
(``client.rack``, Fetch v11+ ``rack_id``): if the selector picks another replica, the
answer carries its id as ``preferred_read_replica`` instead of records and the client
fetches from there until that replica fails it (then it goes back to the leader).

The rules are Kafka's:
- ``ReplicaManager.findPreferredReadReplica`` (the candidates): the leader, and every
  follower that is alive, in the ISR, and whose log holds the fetch offset (log start
  <= offset <= log end). Out-of-sync followers are left out: a lagging follower picked
  again at every metadata refresh would keep its consumers behind indefinitely.
- ``RackAwareReplicaSelector.select``: no client rack, or no candidate in it: the
  leader. The leader when it is in the client's rack. Otherwise the most caught-up
  replica of that rack (``ReplicaView.comparator``: highest log end offset, then most
  recently caught up, then highest broker id).
- A pick of the leader is no preference: the answer carries records as usual.

No I/O and no clock: the caller gives what its leader replication knows.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

# The one selector Kafka ships (clients/.../common/replica/RackAwareReplicaSelector.java),
# under the class name Kafka's brokers are configured with.
RACK_AWARE_SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
# Kafka's default (the setting unset): consumers fetch from the leader only.
NO_SELECTOR = ""
SELECTORS = (NO_SELECTOR, RACK_AWARE_SELECTOR)


def check_selector_class(name: str) -> str:
    """The ``replica.selector.class`` value, stripped; ValueError for a class this broker
    does not have (only Kafka's RackAwareReplicaSelector is built)."""
    value = name.strip()
    if value not in SELECTORS:
        raise ValueError(f"unknown replica selector class {name!r}: the one available is "
                         f"{RACK_AWARE_SELECTOR} (or empty: consumers read from the leader)")
    return value


@dataclass(frozen=True, slots=True)
class ReplicaView:
    """Kafka's ReplicaView: a replica as the selector sees it."""

    broker_id: int
    rack: str | None
    log_end_offset: int
    time_since_caught_up_ms: int  # 0 for the leader

    def rank(self) -> tuple[int, int, int]:
        """Kafka's ``ReplicaView.comparator`` as a key: larger is more caught up."""
        return (self.log_end_offset, -self.time_since_caught_up_ms, self.broker_id)


@dataclass(frozen=True, slots=True)
class FollowerInfo:
    """What the leader knows of one follower replica."""

    broker_id: int
    rack: str | None
    alive: bool  # registered (Kafka: the metadata cache has its endpoint)
    in_sync: bool  # in the stored ISR
    log_start_offset: int  # -1 while unknown (Kafka's UnknownOffset: does not exclude)
    log_end_offset: int  # -1 while unknown
    last_caught_up_ms: int


def select_rack_aware(client_rack: str, leader: ReplicaView,
                      replicas: Iterable[ReplicaView]) -> ReplicaView:
    """Kafka's ``RackAwareReplicaSelector.select`` over ``replicas`` (the leader among
    them or not: it is always a candidate)."""
    if not client_rack:
        return leader
    if leader.rack == client_rack:
        return leader  # the leader if it is in the client's rack
    same_rack = [r for r in replicas if r.rack == client_rack]
    if not same_rack:
        return leader
    return max(same_rack, key=ReplicaView.rank)


def preferred_read_replica(client_rack: str, leader_id: int, leader_rack: str | None,
                           leader_end: int, followers: Iterable[FollowerInfo],
                           fetch_offset: int, now_ms: int) -> int | None:
    """Kafka's ``findPreferredReadReplica`` with the rack-aware selector: the broker id
    the consumer should fetch ``fetch_offset`` from, or None for the leader itself."""
    if not client_rack or leader_rack == client_rack:
        return None  # the selector would pick the leader: no need to look further
    leader = ReplicaView(leader_id, leader_rack, leader_end, 0)
    candidates = [
        ReplicaView(f.broker_id, f.rack, f.log_end_offset, now_ms - f.last_caught_up_ms)
        for f in followers
        if f.alive and f.in_sync and f.log_start_offset <= fetch_offset <= f.log_end_offset
    ]
    chosen = select_rack_aware(client_rack, leader, candidates)
    return None if chosen.broker_id == leader_id else chosen.broker_id
