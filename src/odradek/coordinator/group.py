"""One consumer group's membership bookkeeping (Kafka's GroupMetadata/MemberMetadata).

A ``Group`` holds its state, generation, chosen protocol, leader, members (in join order),
the group.instance.id -> member id map of static members (KIP-345), members that were
handed an id and must rejoin with it (KIP-394), its committed offsets, and the deadlines
of its timers. It knows the rules that do not involve other requests: which protocols
every member supports, which one wins the vote, who leads, which transitions are legal.
The group manager (``group_manager.py``, ``classic_rebalance.py``) drives it.

A request that has to wait is represented by its ``token`` on the member
(``join_token``/``sync_token``); ``_WAITING`` objects wrap them because a token may be
any value, None included.
"""

from __future__ import annotations

import struct
from collections import Counter
from dataclasses import dataclass
from enum import Enum
from typing import Any

CONSUMER_PROTOCOL_TYPE = "consumer"


class GroupState(Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


# Kafka's GroupState.validPreviousStates.
_VALID_PREVIOUS: dict[GroupState, frozenset[GroupState]] = {
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.PREPARING_REBALANCE: frozenset(
        {GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY}
    ),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    GroupState.DEAD: frozenset(GroupState),
}


@dataclass(frozen=True, slots=True)
class Waiting:
    """A parked request: its response goes to ``token`` later."""

    token: Any


@dataclass(slots=True)
class CommittedOffset:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int
    expire_timestamp: int = -1  # only from OffsetCommit v2-v4 retention_time_ms


class Member:
    __slots__ = (
        "assignment",
        "client_host",
        "client_id",
        "group_instance_id",
        "heartbeat_deadline",
        "is_new",
        "join",
        "member_id",
        "protocol_type",
        "protocols",
        "rebalance_timeout_ms",
        "session_timeout_ms",
        "sync",
    )

    def __init__(
        self,
        member_id: str,
        group_instance_id: str | None,
        client_id: str,
        client_host: str,
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
    ) -> None:
        self.member_id = member_id
        self.group_instance_id = group_instance_id
        self.client_id = client_id
        self.client_host = client_host
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.session_timeout_ms = session_timeout_ms
        self.protocol_type = protocol_type
        self.protocols = protocols
        self.assignment = b""
        self.join: Waiting | None = None
        self.sync: Waiting | None = None
        # A member added by this rebalance: it has no session yet, only the
        # new-member join timeout (Kafka's MemberMetadata.isNew).
        self.is_new = False
        self.heartbeat_deadline: int | None = None

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    def metadata(self, protocol: str) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        raise ValueError(f"member {self.member_id} does not support protocol {protocol}")

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        """Same protocols, same order, same metadata: a rejoin that changes nothing."""
        return list(protocols) == list(self.protocols)

    def vote(self, candidates: set[str]) -> str:
        """The member's most preferred protocol among those every member supports."""
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise ValueError(f"member {self.member_id} supports none of {sorted(candidates)}")

    def __repr__(self) -> str:
        return f"Member({self.member_id!r}, instance={self.group_instance_id!r})"


def subscribed_topics(metadata: bytes) -> set[str] | None:
    """Topics of a consumer-protocol Subscription (every version starts with v0's
    version, topics), or None when it does not parse (then Kafka assumes "all")."""
    try:
        (count,) = struct.unpack_from(">i", metadata, 2)
        pos, topics = 6, set()
        if count < 0 or count > len(metadata):
            return None
        for _ in range(count):
            (n,) = struct.unpack_from(">h", metadata, pos)
            if n < 0 or pos + 2 + n > len(metadata):
                return None
            topics.add(metadata[pos + 2 : pos + 2 + n].decode())
            pos += 2 + n
        return topics
    except (struct.error, UnicodeDecodeError):
        return None


class Group:
    def __init__(self, group_id: str, now_ms: int, state: GroupState = GroupState.EMPTY) -> None:
        self.group_id = group_id
        self.state = state
        # When the group entered its state: the base of offset expiry once it is Empty.
        self.state_timestamp: int | None = now_ms
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.generation_id = 0
        self.leader_id: str | None = None
        self.members: dict[str, Member] = {}
        self.static_members: dict[str, str] = {}  # group.instance.id -> member id
        # KIP-394: member ids handed out with MEMBER_ID_REQUIRED, with their expiry.
        self.pending_members: dict[str, int] = {}
        # Members that got the current generation's JoinGroup answer but have not synced.
        self.pending_sync: set[str] = set()
        self._supported: Counter[str] = Counter()
        # Topics the members subscribe to (consumer protocol); None = unknown.
        self.subscribed: set[str] | None = None
        self.offsets: dict[tuple[str, int], CommittedOffset] = {}
        # InitialDelayedJoin: a member joined the empty group during the delay.
        self.new_member_added = False
        # Timers (absolute ms). join: the rebalance completes then at the latest;
        # initial_delay_remaining is not None while that is the initial delayed join.
        self.join_deadline: int | None = None
        self.initial_delay_ms = 0
        self.initial_delay_remaining: int | None = None
        self.sync_deadline: int | None = None

    # --- queries ---------------------------------------------------------------------

    def is_(self, state: GroupState) -> bool:
        return self.state is state

    def has(self, member_id: str) -> bool:
        return member_id in self.members

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    @property
    def is_consumer_group(self) -> bool:
        return self.protocol_type == CONSUMER_PROTOCOL_TYPE

    @property
    def num_awaiting_join(self) -> int:
        return sum(1 for m in self.members.values() if m.join is not None)

    @property
    def has_all_members_joined(self) -> bool:
        return self.num_awaiting_join == len(self.members) and not self.pending_members

    @property
    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    @property
    def can_rebalance(self) -> bool:
        return self.state in _VALID_PREVIOUS[GroupState.PREPARING_REBALANCE]

    def current_static_member(self, group_instance_id: str) -> str | None:
        return self.static_members.get(group_instance_id)

    def is_subscribed_to(self, topic: str) -> bool:
        return self.subscribed is None or topic in self.subscribed

    def candidate_protocols(self) -> set[str]:
        n = len(self.members)
        return {name for name, votes in self._supported.items() if votes == n}

    def supports_protocols(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        """May a member with these protocols join? An empty group takes any non-empty
        offer; otherwise the type must match and one protocol must be common to all."""
        names = {name for name, _ in protocols}
        if self.is_(GroupState.EMPTY):
            return bool(protocol_type) and bool(names)
        return self.protocol_type == protocol_type and any(
            self._supported[name] == len(self.members) for name in names
        )

    def select_protocol(self) -> str:
        """Each member votes for its first protocol that all members support; most votes
        wins (ties go to the protocol whose voter joined first)."""
        candidates = self.candidate_protocols()
        votes = Counter(m.vote(candidates) for m in self.members.values())
        return max(votes, key=lambda name: votes[name])

    # --- membership ------------------------------------------------------------------

    def transition(self, state: GroupState, now_ms: int) -> None:
        if self.state not in _VALID_PREVIOUS[state]:
            raise AssertionError(f"group {self.group_id}: illegal {self.state} -> {state}")
        self.state = state
        self.state_timestamp = now_ms

    def add(self, member: Member) -> None:
        if member.group_instance_id is not None:
            if member.group_instance_id in self.static_members:
                raise AssertionError(f"static member {member.group_instance_id} already in group")
            self.static_members[member.group_instance_id] = member.member_id
        if not self.members:
            self.protocol_type = member.protocol_type
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        self._supported.update(name for name, _ in member.protocols)
        self.pending_members.pop(member.member_id, None)

    def remove(self, member_id: str) -> Member | None:
        member = self.members.pop(member_id, None)
        if member is not None:
            self._supported.subtract(name for name, _ in member.protocols)
            if member.group_instance_id is not None:
                self.static_members.pop(member.group_instance_id, None)
        if self.is_leader(member_id):
            self.leader_id = next(iter(self.members), None)
        self.pending_members.pop(member_id, None)
        self.pending_sync.discard(member_id)
        return member

    def update_protocols(
        self,
        member: Member,
        protocols: list[tuple[str, bytes]],
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
    ) -> None:
        self._supported.subtract(name for name, _ in member.protocols)
        member.protocols = list(protocols)
        self._supported.update(name for name, _ in member.protocols)
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms

    def replace_static_member(self, group_instance_id: str, old_id: str, new_id: str) -> Member:
        """Give a static member its new member id; the caller fences the old id's
        parked requests."""
        member = self.members[old_id]
        member.member_id = new_id
        # Same place in the join order (which decides the next leader, and the order of
        # the members the leader sees).
        self.members = {(new_id if k == old_id else k): m for k, m in self.members.items()}
        if self.is_leader(old_id):
            self.leader_id = new_id
        if old_id in self.pending_sync:
            self.pending_sync.discard(old_id)
            self.pending_sync.add(new_id)
        self.static_members[group_instance_id] = new_id
        return member

    def elect_joined_leader(self) -> bool:
        """Keep the leader if it rejoined, else pick a member that did. False when there
        is no leader or nobody rejoined (Kafka's maybeElectNewJoinedLeader)."""
        if self.leader_id is None:
            return False
        if self.members[self.leader_id].join is not None:
            return True
        for member_id, member in self.members.items():
            if member.join is not None:
                self.leader_id = member_id
                return True
        return False

    def init_next_generation(self, now_ms: int) -> None:
        self.generation_id += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.subscribed = self.compute_subscribed_topics()
            self.transition(GroupState.COMPLETING_REBALANCE, now_ms)
        else:
            self.protocol_name = None
            self.subscribed = self.compute_subscribed_topics()
            self.transition(GroupState.EMPTY, now_ms)
        self.pending_sync.clear()

    def compute_subscribed_topics(self) -> set[str] | None:
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return None
        if not self.members:
            return set()
        if self.protocol_name is None:
            return None
        topics: set[str] = set()
        for member in self.members.values():
            member_topics = subscribed_topics(member.metadata(self.protocol_name))
            if member_topics is None:
                return None
            topics |= member_topics
        return topics
