"""A partition's replication as its leader keeps it: what each follower has, when it was
last caught up, the high watermark, and when the ISR should shrink or grow.

Kafka's ``Partition`` (leader side) as a pure object: the caller tells it what happened
(a follower fetched from an offset, time passed, an ISR change was stored or refused)
and asks it what follows (the high watermark, an ISR change to store). No I/O, no
clock of its own: times are passed in, so a test runs hours of lag in microseconds.

The rules (Kafka's, with the KIP that set each):
- A follower's log end offset is the offset it fetches from: it has everything before.
- It is *caught up* at a fetch whose offset reached the leader's log end offset, or the
  log end the leader had at the follower's previous fetch (then it was caught up as of
  that previous fetch's time): Kafka's ``Replica.updateFetchState``.
- The high watermark is the smallest log end offset among the ISR members, the leader
  included; it never moves back on the leader. A follower whose log end is not known
  yet (no fetch since this leadership began) holds it where it is.
- ISR changes are stored before they narrow what counts (KIP-497's "maximal ISR"): a
  shrink counts only once stored, an expansion counts at once. So every ISR member in
  the store has every committed record, whichever moment the controller reads it.
- A follower joins the ISR when its log end has reached the high watermark and the
  start of the leader's current epoch (KIP-101: it has caught up past the leader
  change); an ISR member leaves it after ``replica.lag.time.max.ms`` without being
  caught up.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

UNKNOWN_OFFSET = -1
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


class Role(enum.Enum):
    """What a broker does for a partition replica it hosts."""

    NONE = "none"  # neither serves nor fetches: no leader, or ours is not current
    LEADER = "leader"
    FOLLOWER = "follower"


def replica_role(me: int, leader: int | None, leader_registration_current: bool) -> Role:
    """The role broker ``me`` takes for a partition whose state names ``leader`` (None:
    no state yet). Leader only under the registration the state was elected for: a
    broker whose ZooKeeper session was replaced may not lead on an election made for its
    previous session (its log may lack what the ISR was told), so it waits, as none,
    for the controller to elect it again."""
    if leader is None or leader < 0:
        return Role.NONE
    if leader == me:
        return Role.LEADER if leader_registration_current else Role.NONE
    return Role.FOLLOWER


def epoch_error(asked: int, current: int) -> int:
    """KIP-320: a client's view of a partition's leader epoch against the leader's own
    (-1: the client does not say): 0 when they agree, older is FENCED_LEADER_EPOCH,
    newer (the client has heard of a leader this broker has not) UNKNOWN_LEADER_EPOCH."""
    if asked < 0 or asked == current:
        return 0
    return ErrorCode.fenced_leader_epoch if asked < current else ErrorCode.unknown_leader_epoch


def truncation_point(log_end: int, high_watermark: int, leader_epoch: int, leader_end: int,
                     follower_epoch: int, follower_end: int) -> tuple[int, bool]:
    """Where a follower cuts its log to match its leader, and whether that is final
    (KIP-101, KIP-279; Kafka's ``ReplicaFetcherThread.getOffsetTruncationState``).

    The follower asked OffsetsForLeaderEpoch for its latest epoch; the leader answered
    ``leader_epoch`` (the largest of its epochs at or below it) ending at ``leader_end``
    (``UNDEFINED_EPOCH_OFFSET``: it knows none). ``follower_epoch``/``follower_end`` are
    the follower's own largest epoch at or below ``leader_epoch`` and where it ends.
    The result never exceeds ``log_end``; not final means "cut there, then ask again
    for what is left" (the follower lacks the epoch the leader answered with)."""
    if leader_end == UNDEFINED_EPOCH_OFFSET:
        # The leader knows no epoch at or below ours: fall back to the high watermark,
        # which every ISR member has.
        return min(high_watermark, log_end), True
    if follower_epoch == UNDEFINED_EPOCH:
        return min(leader_end, log_end), True
    if follower_epoch != leader_epoch:
        return min(follower_end, log_end), False
    return min(follower_end, leader_end, log_end), True


@dataclass(slots=True)
class FollowerState:
    log_end_offset: int = UNKNOWN_OFFSET
    last_caught_up_ms: int = 0
    last_fetch_ms: int = 0
    last_fetch_leader_end: int = UNKNOWN_OFFSET
    # As its fetches say (Fetch v5+); only fetch from follower (KIP-392) reads it.
    log_start_offset: int = UNKNOWN_OFFSET


class LeaderReplication:
    """The replication state of one partition on its leader, for one leader epoch."""

    __slots__ = ("epoch_start_offset", "followers", "high_watermark", "isr", "leader_epoch",
                 "me", "pending_isr", "replicas")

    def __init__(self, me: int, replicas: Iterable[int], isr: Iterable[int], leader_epoch: int,
                 *, epoch_start_offset: int, high_watermark: int, now_ms: int) -> None:
        self.me = me
        self.replicas = tuple(replicas)
        self.isr: frozenset[int] = frozenset(isr) | {me}
        self.pending_isr: frozenset[int] | None = None  # being stored
        self.leader_epoch = leader_epoch
        self.epoch_start_offset = epoch_start_offset
        self.high_watermark = high_watermark
        # Kafka resets followers when it becomes leader: ISR members count as caught up
        # now (they get a full lag period to fetch), others as never.
        self.followers = {
            r: FollowerState(last_caught_up_ms=now_ms if r in self.isr else 0)
            for r in self.replicas if r != me
        }

    def set_replicas(self, replicas: Iterable[int]) -> None:
        """The assignment changed under the same leadership (a reassignment's replica
        set arrived after its new epoch): new followers start as never caught up,
        followers no longer assigned are forgotten (they stop holding the high
        watermark back)."""
        self.replicas = tuple(replicas)
        self.followers = {r: self.followers.get(r) or FollowerState()
                          for r in self.replicas if r != self.me}

    @property
    def maximal_isr(self) -> frozenset[int]:
        """The ISR the high watermark is computed over: the stored one, plus a pending
        expansion (a pending shrink does not count until stored)."""
        pending = self.pending_isr
        return self.isr if pending is None else self.isr | pending

    def update_follower(self, replica: int, fetch_offset: int, now_ms: int,
                        leader_end: int) -> None:
        """A fetch from ``replica`` at ``fetch_offset`` while the leader's log ended at
        ``leader_end``."""
        state = self.followers.get(replica)
        if state is None:
            return
        if fetch_offset >= leader_end:
            state.last_caught_up_ms = max(state.last_caught_up_ms, now_ms)
        elif fetch_offset >= state.last_fetch_leader_end:
            state.last_caught_up_ms = max(state.last_caught_up_ms, state.last_fetch_ms)
        state.log_end_offset = fetch_offset
        state.last_fetch_ms = now_ms
        state.last_fetch_leader_end = leader_end

    def advance_high_watermark(self, leader_end: int) -> bool:
        """Move the high watermark to the smallest log end in the maximal ISR; True if
        it moved (it never moves back)."""
        hw = leader_end
        followers = self.followers
        for replica in self.maximal_isr:
            if replica == self.me:
                continue
            state = followers.get(replica)
            if state is None:
                continue  # not a replica any more (reassignment): does not hold it back
            end = state.log_end_offset
            if end < hw:
                hw = end
        if hw > self.high_watermark:
            self.high_watermark = hw
            return True
        return False

    def expansion(self, replica: int) -> frozenset[int] | None:
        """The ISR to store if ``replica`` has caught up enough to join it (None: it is
        in already, not caught up, or a change is being stored)."""
        if self.pending_isr is not None or replica in self.isr:
            return None
        state = self.followers.get(replica)
        if state is None:
            return None
        end = state.log_end_offset
        if end >= self.high_watermark and end >= self.epoch_start_offset:
            return self.isr | {replica}
        return None

    def out_of_sync(self, now_ms: int, max_lag_ms: int) -> list[int]:
        """ISR members (not the leader) not caught up within ``max_lag_ms``."""
        return sorted(r for r in self.isr if r != self.me and r in self.followers
                      and now_ms - self.followers[r].last_caught_up_ms > max_lag_ms)

    def shrink(self, now_ms: int, max_lag_ms: int) -> frozenset[int] | None:
        """The ISR to store without its lagging members (None: nobody lags, or a change
        is being stored)."""
        if self.pending_isr is not None:
            return None
        lagging = self.out_of_sync(now_ms, max_lag_ms)
        if not lagging:
            return None
        return self.isr - set(lagging)

    def begin_isr_change(self, isr: frozenset[int]) -> None:
        self.pending_isr = isr

    def isr_change_stored(self, isr: frozenset[int]) -> None:
        self.isr = isr | {self.me}
        self.pending_isr = None

    def isr_change_failed(self) -> None:
        self.pending_isr = None
