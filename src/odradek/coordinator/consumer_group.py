"""Consumer groups of the next-generation protocol (KIP-848): their members, the
server-side assignors, and the reconciliation of each member towards its target.

A group of type ``consumer`` has a *group epoch* (bumped whenever something the
assignment depends on changes: a member joins, leaves or changes its subscription, a
subscribed topic gains partitions), a *target assignment* computed by a server-side
assignor for the group epoch (its *assignment epoch*), and per member a *member epoch*
and a *current assignment* that moves towards the member's target one heartbeat at a
time. The rule that keeps a partition from having two owners (Kafka's
CurrentAssignmentBuilder): a member first gives up what it must lose (it stays at its
epoch, state UNREVOKED_PARTITIONS, until its heartbeat no longer reports them), and is
given a partition only once no other member still holds it, assigned or pending
revocation (UNRELEASED_PARTITIONS until then).

Partitions are named by topic id (uuid), as on the wire. Nothing here does I/O; the
group manager (``group_manager.py``, ``consumer_protocol.py``) drives these objects and
returns ``Effects``.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import NamedTuple, Protocol, TypeVar

from odradek.coordinator.group import CommittedOffset

# Member epochs with a meaning (ConsumerGroupHeartbeatRequest).
JOIN_GROUP_MEMBER_EPOCH = 0
LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2

UNIFORM = "uniform"
RANGE = "range"
DEFAULT_ASSIGNORS = (UNIFORM, RANGE)  # group.consumer.assignors: the first is the default

Assignment = dict[uuid.UUID, set[int]]  # topic id -> partitions


class TopicInfo(NamedTuple):
    """What the coordinator needs to know of a topic: its id and partition count."""

    topic_id: uuid.UUID
    partitions: int


class MemberState(Enum):
    STABLE = "stable"
    UNREVOKED_PARTITIONS = "unrevoked_partitions"
    UNRELEASED_PARTITIONS = "unreleased_partitions"


class ConsumerGroupState(Enum):
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(slots=True)
class ConsumerMember:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    rebalance_timeout_ms: int = 0
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    member_epoch: int = 0
    previous_member_epoch: int = -1
    state: MemberState = MemberState.STABLE
    assigned: Assignment = field(default_factory=dict)
    pending_revocation: Assignment = field(default_factory=dict)
    # Timers (absolute ms): the session, and the revocation deadline while the member
    # has partitions to give up (the epoch it was set for, so a later epoch cancels it).
    session_deadline: int | None = None
    rebalance_deadline: int | None = None
    rebalance_deadline_epoch: int = -1

    def subscribes_to(self, topic: str) -> bool:
        if topic in self.subscribed_topic_names:
            return True
        return self.subscribed_topic_regex is not None and _regex(
            self.subscribed_topic_regex).fullmatch(topic) is not None

    def subscribed(self, topics: Iterable[str]) -> set[str]:
        return {t for t in topics if self.subscribes_to(t)}


_REGEX_CACHE: dict[str, re.Pattern[str]] = {}


def _regex(pattern: str) -> re.Pattern[str]:
    compiled = _REGEX_CACHE.get(pattern)
    if compiled is None:
        compiled = _REGEX_CACHE[pattern] = re.compile(pattern)
    return compiled


def valid_regex(pattern: str) -> bool:
    """KIP-848 regexes are RE2/J; Python's ``re`` reads the common subset the same way."""
    try:
        _regex(pattern)
    except re.error:
        return False
    return True


class ConsumerGroup:
    """One KIP-848 consumer group: epochs, members, target assignment, offsets."""

    def __init__(self, group_id: str, now_ms: int) -> None:
        self.group_id = group_id
        self.group_epoch = 0
        self.assignment_epoch = 0
        self.members: dict[str, ConsumerMember] = {}
        self.static_members: dict[str, str] = {}  # instance id -> member id
        self.target: dict[str, Assignment] = {}  # member id -> target assignment
        # Topics the members subscribe to as last seen: name -> (id, partition count).
        # A difference from the current metadata bumps the group epoch.
        self.subscription_metadata: dict[str, TopicInfo] = {}
        self.offsets: dict[tuple[str, int], CommittedOffset] = {}
        self.state_timestamp: int = now_ms  # when it last became empty
        self.assignor_name = ""

    @property
    def state(self) -> ConsumerGroupState:
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        for m in self.members.values():
            if m.member_epoch != self.assignment_epoch or m.state is not MemberState.STABLE:
                return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    def is_subscribed_to(self, topic: str) -> bool:
        return any(m.subscribes_to(topic) for m in self.members.values())

    def owned_by_others(self, member_id: str) -> set[tuple[uuid.UUID, int]]:
        """Partitions some other member holds, assigned or still to be revoked (Kafka's
        partition epochs): not to be given to ``member_id`` yet."""
        taken: set[tuple[uuid.UUID, int]] = set()
        for mid, m in self.members.items():
            if mid == member_id:
                continue
            for holding in (m.assigned, m.pending_revocation):
                for tid, parts in holding.items():
                    taken.update((tid, p) for p in parts)
        return taken

    def add(self, member: ConsumerMember) -> None:
        self.members[member.member_id] = member
        if member.instance_id is not None:
            self.static_members[member.instance_id] = member.member_id

    def remove(self, member_id: str, now_ms: int) -> ConsumerMember | None:
        member = self.members.pop(member_id, None)
        if (member is not None and member.instance_id is not None
                and self.static_members.get(member.instance_id) == member_id):
            del self.static_members[member.instance_id]
        self.target.pop(member_id, None)
        if not self.members:
            self.state_timestamp = now_ms
        return member

    def preferred_assignor(self, assignors: tuple[str, ...]) -> str:
        """The assignor most members ask for (ties: the configured order), else the
        default (the first of ``group.consumer.assignors``)."""
        votes: dict[str, int] = {}
        for m in self.members.values():
            if m.server_assignor:
                votes[m.server_assignor] = votes.get(m.server_assignor, 0) + 1
        if not votes:
            return assignors[0]
        return max(assignors, key=lambda name: (votes.get(name, 0), -assignors.index(name)))


# --- assignors ---------------------------------------------------------------------------

def _partitions(topics: Mapping[str, TopicInfo], names: Iterable[str]
                ) -> list[tuple[str, uuid.UUID, int]]:
    out: list[tuple[str, uuid.UUID, int]] = []
    for name in sorted(set(names)):
        info = topics.get(name)
        if info is not None:
            out.extend((name, info.topic_id, p) for p in range(info.partitions))
    return out


def assign_uniform(subscriptions: Mapping[str, set[str]], topics: Mapping[str, TopicInfo],
                   current: Mapping[str, Assignment]) -> dict[str, Assignment]:
    """Kafka's UniformAssignor in spirit: every member gets as many partitions as the
    others (within one), each only from topics it subscribes to, and partitions stay
    where they were in the previous target whenever balance allows (so a member joining
    or leaving moves as few partitions as possible)."""
    members = sorted(subscriptions)
    result: dict[str, Assignment] = {m: {} for m in members}
    counts = dict.fromkeys(members, 0)
    if not members:
        return result
    all_parts = _partitions(topics, set().union(*subscriptions.values()))
    eligible = {(tid, p): [m for m in members if name in subscriptions[m]]
                for name, tid, p in all_parts}
    quota = -(-len(all_parts) // len(members))  # ceil: nobody keeps more than this
    owner: dict[tuple[uuid.UUID, int], str] = {}
    for m in members:  # 1. stickiness
        for tid, parts in sorted(current.get(m, {}).items()):
            for p in sorted(parts):
                if counts[m] < quota and m in eligible.get((tid, p), ()) and (tid, p) not in owner:
                    owner[(tid, p)] = m
                    counts[m] += 1
    for _, tid, p in all_parts:  # 2. the rest to the least loaded eligible member
        if (tid, p) in owner or not eligible[(tid, p)]:
            continue
        m = min(eligible[(tid, p)], key=lambda x: (counts[x], x))
        owner[(tid, p)] = m
        counts[m] += 1
    moved = True  # 3. balance across differing subscriptions
    while moved:
        moved = False
        for key in sorted(owner, key=lambda k: (str(k[0]), k[1])):
            m = owner[key]
            target = min(eligible[key], key=lambda x: (counts[x], x))
            if counts[m] > counts[target] + 1:
                owner[key] = target
                counts[m] -= 1
                counts[target] += 1
                moved = True
    for (tid, p), m in owner.items():
        result[m].setdefault(tid, set()).add(p)
    return result


def assign_range(subscriptions: Mapping[str, set[str]], topics: Mapping[str, TopicInfo],
                 current: Mapping[str, Assignment]) -> dict[str, Assignment]:
    """Kafka's RangeAssignor (server side): per topic, its subscribers in member id order
    get consecutive ranges, the first ones one partition more; co-partitioned topics
    are assigned alike."""
    del current  # ranges depend only on membership
    result: dict[str, Assignment] = {m: {} for m in subscriptions}
    for name in sorted(set().union(*subscriptions.values()) if subscriptions else ()):
        info = topics.get(name)
        if info is None:
            continue
        subscribers = sorted(m for m, subs in subscriptions.items() if name in subs)
        share, extra = divmod(info.partitions, len(subscribers))
        start = 0
        for i, m in enumerate(subscribers):
            n = share + (1 if i < extra else 0)
            if n:
                result[m][info.topic_id] = set(range(start, start + n))
            start += n
    return result


ASSIGNORS: dict[str, Callable[..., dict[str, Assignment]]] = {
    UNIFORM: assign_uniform,
    RANGE: assign_range,
}


# --- reconciliation (Kafka's CurrentAssignmentBuilder) -----------------------------------

K = TypeVar("K", bound=Hashable)  # what partitions are of: a topic id, a subtopology id


class Reconciling(Protocol[K]):
    """A member that moves towards a target one step at a time: a KIP-848 consumer
    (partitions by topic id) or a KIP-1071 streams member (active tasks by subtopology
    id), both by ``reconcile``'s rule."""

    member_epoch: int
    previous_member_epoch: int
    state: MemberState
    assigned: dict[K, set[int]]
    pending_revocation: dict[K, set[int]]


def _copy(a: Mapping[K, Iterable[int]]) -> dict[K, set[int]]:
    return {t: set(ps) for t, ps in a.items() if ps}


def reconcile(member: Reconciling[K], target_epoch: int, target: Mapping[K, set[int]],
              owned: Mapping[K, set[int]] | None, taken: set[tuple[K, int]]) -> None:
    """Move ``member`` one step towards ``target`` (in place). ``owned`` is what the
    member says it owns (None: it did not say, so it is assumed to still own what it
    was asked to give up); ``taken`` the partitions other members still hold."""

    def owns_any(revoking: Mapping[K, set[int]]) -> bool:
        if owned is None:
            return True
        return any(p in owned.get(t, ()) for t, ps in revoking.items() for p in ps)

    def next_assignment(epoch: int, assigned: Mapping[K, set[int]]) -> None:
        keep: dict[K, set[int]] = {}
        revoke: dict[K, set[int]] = {}
        add: dict[K, set[int]] = {}
        unreleased = False
        for tid in set(assigned) | set(target):
            cur = assigned.get(tid, set())
            tgt = target.get(tid, set())
            if cur & tgt:
                keep[tid] = cur & tgt
            if cur - tgt:
                revoke[tid] = cur - tgt
            free = {p for p in tgt - cur if (tid, p) not in taken}
            if len(free) < len(tgt - cur):
                unreleased = True
            if free:
                add[tid] = free
        if revoke and owns_any(revoke):
            # Give up first, at the current epoch; nothing new until then.
            _set(member, epoch, MemberState.UNREVOKED_PARTITIONS, keep, revoke)
        else:
            for tid, ps in add.items():
                keep.setdefault(tid, set()).update(ps)
            state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
            _set(member, target_epoch, state, keep, {})

    if member.state is MemberState.STABLE:
        if member.member_epoch != target_epoch:
            next_assignment(member.member_epoch, member.assigned)
    elif member.state is MemberState.UNREVOKED_PARTITIONS:
        if not owns_any(member.pending_revocation):
            next_assignment(min(member.member_epoch + 1, target_epoch), member.assigned)
    else:  # UNRELEASED_PARTITIONS: take whatever has been released since
        next_assignment(member.member_epoch, member.assigned)


def _set(member: Reconciling[K], epoch: int, state: MemberState,
         assigned: Mapping[K, set[int]], revoking: Mapping[K, set[int]]) -> None:
    if epoch != member.member_epoch:
        member.previous_member_epoch = member.member_epoch
        member.member_epoch = epoch
    member.state = state
    member.assigned = _copy(assigned)
    member.pending_revocation = _copy(revoking)


def is_subset(owned: Assignment | None, assigned: Assignment) -> bool:
    if owned is None:
        return True
    return all(set(ps) <= assigned.get(t, set()) for t, ps in owned.items())
