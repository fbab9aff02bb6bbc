"""One partition replica hosted on this broker: its log, its role, and as leader its
replication state (Kafka's ``Partition``).

Everything that happens to a replica's log in replication happens here, in one place:

- as **leader**: ``append_as_leader`` (the min-ISR check for acks=all, the append
  stamped with the leader epoch, the wake-ups of waiting fetches and the high-watermark
  step of an ISR of one), ``record_follower_fetch`` (a follower's log end moves, the
  high watermark may follow, and the ISR expansion it earns is returned for the replica
  manager to store), ``append_marker_as_leader`` for transaction markers;
- as **follower**: ``append_as_follower`` (the leader's batches as they are, its high
  watermark capped at our log end, its log start), ``truncate_to`` /
  ``truncate_fully``;
- the role changes: ``make_leader``, ``make_follower``, ``make_none``. Losing
  leadership wakes the produce purgatory, whose waiting acks=all appends then answer
  NOT_LEADER_OR_FOLLOWER.

The rules themselves (high watermark, ISR shrink and expansion, caught-up) are
``cluster/replication.py``'s pure ``LeaderReplication``; this module applies them to a
log and tells the purgatories. It does no I/O of its own beyond the log: storing ISR
changes, fetchers and coordinator elections are the replica manager's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from odradek.cluster.replication import LeaderReplication, Role
from odradek.cluster.state import PartitionState, TopicPartition
from odradek.coordinator import INTERNAL_TOPICS
from odradek.server.errors import InternalTopicAppendError

if TYPE_CHECKING:
    from odradek.server.replication.purgatory import Purgatory
    from odradek.storage import Log
    from odradek.storage.log import AppendInfo


class ReplicationError(Exception):
    """An append this replica may not take in its role; ``kafka_error`` names the code."""

    kafka_error = "UNKNOWN_SERVER_ERROR"


class NotLeaderError(ReplicationError):
    kafka_error = "NOT_LEADER_OR_FOLLOWER"


class NotEnoughReplicasError(ReplicationError):
    kafka_error = "NOT_ENOUGH_REPLICAS"


class Partition:
    """A partition replica on this broker."""

    __slots__ = (
        "_fetches",
        "_produces",
        "_verifying",
        "internal",
        "leader_epoch",
        "leader_id",
        "log",
        "repl",
        "replicas",
        "role",
        "state",
        "stopped_waiting",
        "tp",
    )

    def __init__(self, tp: TopicPartition, lg: Log, *, fetches: Purgatory,
                 produces: Purgatory) -> None:
        self.tp = tp
        self.log = lg
        self.internal = tp[0] in INTERNAL_TOPICS
        self.role = Role.NONE
        self.leader_id = -1
        self.leader_epoch = -1
        self.replicas: tuple[int, ...] = ()
        self.state: PartitionState | None = None
        self.repl: LeaderReplication | None = None  # while leader
        # The broker is stopping: acks=all waits answer now (see DelayedProduce).
        self.stopped_waiting = False
        self._fetches = fetches
        self._produces = produces
        # KIP-890 verification guards: producer id -> the guard of its verification.
        self._verifying: dict[int, object] = {}

    @classmethod
    def sole_leader(cls, tp: TopicPartition, lg: Log, me: int, epoch: int, *,
                    fetches: Purgatory, produces: Purgatory) -> Partition:
        """A single node's partition: this broker its only replica, leader at ``epoch``
        for good, an ISR of one (its log is not replicated: the high watermark is the
        log end)."""
        part = cls(tp, lg, fetches=fetches, produces=produces)
        part.replicas = (me,)
        part.role = Role.LEADER
        part.leader_id = me
        part.leader_epoch = epoch
        end = lg.log_end_offset
        part.repl = LeaderReplication(me, (me,), (me,), epoch, epoch_start_offset=end,
                                      high_watermark=end, now_ms=0)
        return part

    @property
    def is_leader(self) -> bool:
        return self.repl is not None

    # --- roles ---------------------------------------------------------------------------

    def make_leader(self, state: PartitionState, me: int, now_ms: int) -> int:
        """Lead at ``state``'s epoch: the epoch starts at our log end (KIP-101), ISR
        members count as caught up now. Returns the epoch's start offset."""
        lg = self.log
        start = lg.assign_leader_epoch(state.leader_epoch)
        self.repl = LeaderReplication(
            me, self.replicas, state.isr, state.leader_epoch,
            epoch_start_offset=start, high_watermark=lg.high_watermark, now_ms=now_ms)
        self.role = Role.LEADER
        self.leader_id = me
        self.leader_epoch = state.leader_epoch
        self.state = state
        self.advance_high_watermark()
        self._fetches.notify(self.tp)  # parked fetches see the new epoch
        return start

    def update_state(self, state: PartitionState) -> None:
        """A state of the epoch we lead at with a newer version: our own ISR write
        coming back, or one the store has and we missed (a write whose answer was
        lost). Taken unless a change of ours is being stored."""
        self.state = state
        repl = self.repl
        if repl is not None and repl.pending_isr is None:
            repl.isr_change_stored(frozenset(state.isr))
            self.advance_high_watermark()

    def make_follower(self, state: PartitionState) -> None:
        self._resign()
        self.role = Role.FOLLOWER
        self.leader_id = state.leader
        self.leader_epoch = state.leader_epoch
        self.state = state

    def make_none(self) -> None:
        self._resign()
        self.role = Role.NONE
        self.leader_id = -1

    def _resign(self) -> None:
        if self.repl is None:
            return
        self.repl = None
        self._produces.notify(self.tp)  # waiting acks=all appends: NOT_LEADER_OR_FOLLOWER
        self._fetches.notify(self.tp)  # parked fetches answer NOT_LEADER now

    def set_replicas(self, replicas: tuple[int, ...]) -> None:
        """The assignment changed; a leader counts the new replica set at once (its
        state, with a new epoch, may have arrived before the assignment)."""
        self.replicas = replicas
        if self.repl is not None:
            self.repl.set_replicas(replicas)

    # --- the leader's side -----------------------------------------------------------------

    def enough_in_sync(self) -> bool:
        """At least ``min.insync.replicas`` in the ISR (acks=all may be acknowledged)."""
        repl = self.repl
        return repl is not None and len(repl.isr) >= self.log.config.min_insync_replicas

    def acked(self, end: int) -> int | None:
        """An acks=all append that ends at ``end``, if it is settled now: NONE once the
        high watermark has passed it with ``min.insync.replicas`` in sync,
        NOT_ENOUGH_REPLICAS_AFTER_APPEND if the ISR shrank below that meanwhile,
        NOT_LEADER_OR_FOLLOWER once this broker no longer leads it (or is stopping);
        None while it waits for followers (the produce purgatory's ``DelayedProduce``
        asks again at each high-watermark move)."""
        repl = self.repl
        if repl is None or self.stopped_waiting:
            return ErrorCode.not_leader_or_follower
        lg = self.log
        if end > lg.high_watermark:
            return None
        if len(repl.isr) >= lg.config.min_insync_replicas:
            return ErrorCode.none
        return ErrorCode.not_enough_replicas_after_append

    def append_as_leader(self, records: bytes | memoryview, *, require_min_isr: bool
                         ) -> AppendInfo:
        """A client's produce: NOT_ENOUGH_REPLICAS (nothing written) when acks=all and
        fewer than min.insync.replicas are in sync, a refusal for internal topics and
        for records a compacted topic cannot take, else the append stamped with our
        leader epoch. Unless the log wants an fsync first (``flush.messages``: then the
        caller calls ``after_append`` once it is done), waiting fetches are woken and the
        high watermark steps on (an ISR of one commits at once)."""
        repl = self.repl
        if repl is None:
            raise NotLeaderError(f"this broker no longer leads {self.tp[0]}-{self.tp[1]}")
        lg = self.log
        if require_min_isr and len(repl.isr) < lg.config.min_insync_replicas:
            raise NotEnoughReplicasError(
                "fewer in-sync replicas than min.insync.replicas: nothing was written")
        if self.internal:  # before the records are looked at, as Kafka's ReplicaManager
            raise InternalTopicAppendError(f"Cannot append to internal topic {lg.name}")
        if lg.config.compacts:  # keys required (Kafka's LogValidator)
            lg.check_keys(records)
        info = lg.append(records, flush=False, leader_epoch=self.leader_epoch)
        if not lg.flush_due:  # after_append, written out: this is Produce's hot path
            if not info.duplicate:
                self._fetches.notify(self.tp)
            if lg.replicated:
                self.advance_high_watermark()
        return info

    def after_append(self, info: AppendInfo) -> None:
        """What an append as leader sets off: fetches waiting for data wake, and the
        high watermark moves if the ISR is this broker alone."""
        if not info.duplicate:
            self._fetches.notify(self.tp)
        self.advance_high_watermark()

    def begin_verification(self, producer_id: int) -> object:
        """The guard of a verification of this producer's transaction with its
        coordinator elsewhere (Kafka's VerificationGuard), taken before the request goes
        out: a marker for the producer meanwhile (its transaction ended) voids it, so a
        batch verified for a transaction that is over is refused instead of opening one
        no marker would end. Verifications of one producer share the guard."""
        return self._verifying.setdefault(producer_id, object())

    def end_verification(self, producer_id: int, guard: object) -> bool:
        """Whether ``guard`` still holds (it is released then)."""
        if self._verifying.get(producer_id) is not guard:
            return False
        del self._verifying[producer_id]
        return True

    def append_marker_as_leader(self, producer_id: int, producer_epoch: int, commit: bool,
                                coordinator_epoch: int) -> AppendInfo:
        """A transaction marker (WriteTxnMarkers), stamped with our leader epoch."""
        if self.repl is None:
            raise NotLeaderError(f"this broker no longer leads {self.tp[0]}-{self.tp[1]}")
        self._verifying.pop(producer_id, None)
        info = self.log.append_marker(producer_id, producer_epoch, commit,
                                      coordinator_epoch=coordinator_epoch,
                                      leader_epoch=self.leader_epoch)
        self.after_append(info)
        return info

    def advance_high_watermark(self) -> None:
        """Move the high watermark to the smallest log end in the ISR, and wake what
        waits for it (acks=all appends; fetches, which may read further)."""
        repl = self.repl
        lg = self.log
        if repl is None or not lg.replicated:  # unreplicated: the log end is the mark
            return
        if repl.advance_high_watermark(lg.log_end_offset):
            lg.set_high_watermark(repl.high_watermark)
            self._produces.notify(self.tp)
            # Consumers' fetches may read further; followers' learn it with their next
            # answer (see Purgatory.notify).
            self._fetches.notify(self.tp, interests_too=False)

    def record_follower_fetch(self, replica: int, fetch_offset: int, leader_end: int,
                              now_ms: int, log_start: int, may_join: bool
                              ) -> frozenset[int] | None:
        """Follower ``replica`` fetched from ``fetch_offset`` at ``now_ms`` while our log
        ended at ``leader_end`` (and said its log starts at ``log_start``). Its log end
        moves, and with it maybe the high watermark; returned is the ISR to store if it
        has caught up enough to join (never when not ``may_join``: a broker shutting
        down stays out, KIP-841)."""
        repl = self.repl
        if repl is None:
            return None
        state = repl.followers.get(replica)
        moved = state is None or state.log_end_offset != fetch_offset
        repl.update_follower(replica, fetch_offset, now_ms, leader_end)
        if moved:
            # Only a follower's new log end can move the high watermark (a fetch of an
            # idle partition, most of them on a quiet follower, just keeps it caught up).
            self.advance_high_watermark()
        if state is not None:
            # What the follower still holds, for fetch from follower (KIP-392): a
            # consumer is not sent to a replica that has deleted its offset.
            state.log_start_offset = log_start
        if may_join and replica not in repl.isr:
            return repl.expansion(replica)
        return None

    # --- the follower's side ---------------------------------------------------------------

    def append_as_follower(self, fetch_offset: int, records: bytes | memoryview | None,
                           leader_hw: int, leader_start: int) -> None:
        """A fetch answer's data: append as the leader wrote it, take the leader's high
        watermark (capped at our end) and log start. Nothing if the log was truncated
        since the fetch was sent (the answer no longer continues it)."""
        if self.role is not Role.FOLLOWER:
            return
        lg = self.log
        if lg.log_end_offset != fetch_offset:
            return
        if records:
            lg.append(records, assign_offsets=False)
        end = lg.log_end_offset
        # The high watermark first: the log start may not pass it (Kafka's
        # ReplicaFetcherThread.processPartitionData does the same order).
        old_hw = lg.high_watermark
        if lg.set_high_watermark(min(leader_hw, end)) != old_hw:
            # Consumers reading from this follower (KIP-392) may read further now.
            self._fetches.notify(self.tp)
        if leader_start > lg.log_start_offset:
            lg.delete_records_before(min(leader_start, lg.high_watermark))

    def truncate_to(self, offset: int) -> None:
        self.log.truncate_to(offset)

    def truncate_fully(self, offset: int) -> None:
        self.log.truncate_fully_and_start_at(offset)

