"""The committed offsets of a coordinator's groups (Kafka's OffsetMetadataManager):
OffsetCommit, OffsetFetch and OffsetDelete, transactional offsets (TxnOffsetCommit,
KIP-98: pending until their transaction's marker), the periodic offset expiry
(``offsets.retention.minutes``, checked every ``offsets.retention.check.interval.ms``)
and the replay of offset commit records. Pure, as the rest of the package: operations
take ``now_ms`` and return ``Effects``.

The offsets themselves are kept on their group (``Group.offsets``,
``ConsumerGroup.offsets``; see ``group_manager.py``), and the ``GroupManager`` is asked
whatever depends on membership: whether a member may commit, a committing member's
session, whether a group left without offsets is over. Offsets for a group nobody
knows (a commit from outside group management, a replayed commit, a transaction's
COMMIT marker) get an offsets-only classic group, created here.

Transactional offsets are kept apart from the groups until their marker, in
``pending_txn_offsets``.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Collection, Iterable
from typing import Any

from kio.schema.errors import ErrorCode

from odradek.coordinator import offsets_topic as ot
from odradek.coordinator.consumer_group import ConsumerGroup
from odradek.coordinator.group import CommittedOffset, Group, GroupState
from odradek.coordinator.group_manager import GroupManager, Schedule
from odradek.coordinator.results import (
    NO_OFFSET,
    Effects,
    FetchedOffset,
    OffsetCommitRequestPartition,
    OffsetCommitResult,
    OffsetDeleteResult,
    OffsetFetchResult,
    PartitionResult,
    Record,
)
from odradek.coordinator.streams_state import StreamsGroup

# The timer kind of the periodic expiry (GroupCoordinator.tick fires it here).
OFFSET_EXPIRY_TIMER = "offset-expiry"


class OffsetManager:
    """The offsets of the groups of ``group_manager``. Not thread-safe: one caller at a
    time."""

    def __init__(
        self,
        group_manager: GroupManager,
        *,
        offset_metadata_max_bytes: int,
        offsets_retention_ms: int,
        offsets_retention_check_interval_ms: int | None,
        effects: Callable[[int], Effects],
        schedule: Schedule,
    ) -> None:
        self._group_manager = group_manager
        self.offset_metadata_max_bytes = offset_metadata_max_bytes
        self.offsets_retention_ms = offsets_retention_ms
        self.offsets_retention_check_interval_ms = offsets_retention_check_interval_ms
        # The coordinator's: every operation starts its Effects there (see GroupManager).
        self._effects = effects
        self._schedule = schedule
        self._next_expiry_check: int | None = None
        # Transactional offset commits waiting for their transaction's marker (Kafka's
        # GroupMetadata.pendingTransactionalOffsetCommits): group id -> producer id ->
        # offsets. Kept apart from the groups so that a group's deletion or a rebalance
        # does not lose what an open transaction still has to decide.
        self.pending_txn_offsets: dict[str, dict[int, dict[tuple[str, int], CommittedOffset]]] = {}
        # The order of offset commits, for groups with pending transactional ones: when a
        # transaction commits, its offset replaces a plain commit only if it was written
        # after it (Kafka compares the records' log offsets; commits are written in the
        # order they are decided, and replayed in log order, so a counter orders them
        # the same way). (group, producer id, topic, partition) -> order of the pending
        # offset; (group, topic, partition) -> order of the last plain commit made while
        # the group had pending ones.
        self._commit_order = itertools.count()
        self._pending_order: dict[tuple[str, int, str, int], int] = {}
        self._plain_order: dict[tuple[str, str, int], int] = {}

    # --- offsets ---------------------------------------------------------------------

    def commit_offsets(
        self,
        group_id: str,
        member_id: str,
        generation_id: int,
        group_instance_id: str | None,
        offsets: Iterable[OffsetCommitRequestPartition | tuple],
        *,
        retention_ms: int | None = None,
        group_not_found: bool = False,
        token: Any,
        now_ms: int,
    ) -> Effects:
        """OffsetCommit. Generation -1 with no member id is a commit from outside group
        management (admin tools, assign()-mode consumers, and every v0 request): allowed
        while the group has no members. ``retention_ms`` is v2-v4's retention_time_ms
        (-1 or None: the broker's offsets.retention.minutes). The commit time is now.
        ``group_not_found``: a commit from a generation of a group that does not exist is
        answered GROUP_ID_NOT_FOUND (OffsetCommit v9+, as Kafka's validateOffsetCommit),
        else ILLEGAL_GENERATION (older versions)."""
        fx = self._effects(now_ms)
        parts = [OffsetCommitRequestPartition(*p) for p in offsets]
        cg = self._group_manager.modern_group(group_id)
        if cg is not None:
            # A KIP-848 group: generation_id is the member epoch (OffsetCommit v9+).
            error = self._group_manager.validate_consumer_offset_commit(
                cg, member_id, generation_id)
            if error is not None:
                fx.respond(token, self._commit_error(parts, error))
            else:
                fx.respond(token, OffsetCommitResult(
                    self._store_offsets(group_id, cg.offsets, parts, retention_ms, now_ms, fx)))
            return fx
        group = self._group_manager.groups.get(group_id)
        if group is None:
            if generation_id >= 0:
                # A commit from a generation of a group we do not know: reject.
                fx.respond(token, self._commit_error(
                    parts, ErrorCode.group_id_not_found if group_not_found
                    else ErrorCode.illegal_generation))
                return fx
            group = self._group_manager.groups[group_id] = Group(group_id, now_ms)
        error = self._group_manager.validate_offset_commit(
            group, member_id, generation_id, group_instance_id)
        if error is None and group.is_(GroupState.COMPLETING_REBALANCE):
            # The member has the new generation but not yet its assignment.
            error = ErrorCode.rebalance_in_progress
        if error is not None:
            fx.respond(token, self._commit_error(parts, error))
            return fx
        if group.state in (GroupState.STABLE, GroupState.PREPARING_REBALANCE):
            # In the classic protocol an offset commit keeps the member's session.
            self._group_manager.reschedule_heartbeat(group, group.members[member_id], now_ms)
        fx.respond(token, OffsetCommitResult(
            self._store_offsets(group_id, group.offsets, parts, retention_ms, now_ms, fx)))
        return fx

    def _store_offsets(
        self,
        group_id: str,
        offsets: dict[tuple[str, int], CommittedOffset],
        parts: list[OffsetCommitRequestPartition],
        retention_ms: int | None,
        now_ms: int,
        fx: Effects,
        producer_id: int | None = None,
    ) -> list[PartitionResult]:
        expire = now_ms + retention_ms if retention_ms is not None and retention_ms >= 0 else -1
        results = []
        for p in parts:
            metadata = p.metadata or ""
            # Kafka compares Java's String.length(): UTF-16 code units.
            if len(metadata.encode("utf-16-le")) // 2 > self.offset_metadata_max_bytes:
                results.append(PartitionResult(p.topic, p.partition,
                                               ErrorCode.offset_metadata_too_large))
                continue
            committed = CommittedOffset(p.offset, p.leader_epoch, metadata, now_ms, expire)
            offsets[(p.topic, p.partition)] = committed
            self._note_commit(group_id, p.topic, p.partition, producer_id)
            fx.records.append(self._offset_record(group_id, p.topic, p.partition, committed))
            results.append(PartitionResult(p.topic, p.partition, ErrorCode.none))
        return results

    @staticmethod
    def _commit_error(parts: list[OffsetCommitRequestPartition], error: int) -> OffsetCommitResult:
        return OffsetCommitResult([PartitionResult(p.topic, p.partition, error) for p in parts])

    # --- transactional offsets (TxnOffsetCommit, KIP-98) -----------------------------

    def commit_txn_offsets(
        self,
        group_id: str,
        producer_id: int,
        producer_epoch: int,
        member_id: str,
        generation_id: int,
        group_instance_id: str | None,
        offsets: Iterable[OffsetCommitRequestPartition | tuple],
        *,
        token: Any,
        now_ms: int,
        group_id_not_found: bool = False,
        stale_member_epoch: bool = False,
    ) -> Effects:
        """TxnOffsetCommit: the offsets are written now, in the producer's transaction
        (``Effects.transactional``), and become the group's committed offsets when its
        COMMIT marker is written to the group's ``__consumer_offsets`` partition
        (``complete_txn``); an ABORT drops them. The transaction coordinator has already
        checked the producer (AddOffsetsToTxn); here the member is checked as Kafka's
        doTxnCommitOffsets does: a commit from outside the group (no member id,
        generation -1) is accepted whatever the group's state."""
        fx = self._effects(now_ms)
        fx.transactional = (producer_id, producer_epoch)
        parts = [OffsetCommitRequestPartition(*p) for p in offsets]
        error = self._group_manager.validate_txn_offset_commit(
            group_id, member_id, generation_id, group_instance_id,
            group_id_not_found=group_id_not_found, stale_member_epoch=stale_member_epoch)
        if error is not None:
            fx.respond(token, self._commit_error(parts, error))
            return fx
        pending = self.pending_txn_offsets.setdefault(group_id, {}).setdefault(producer_id, {})
        fx.respond(token, OffsetCommitResult(
            self._store_offsets(group_id, pending, parts, None, now_ms, fx, producer_id)))
        if not pending:
            self._drop_pending(group_id, producer_id)
        return fx

    def complete_txn(self, producer_id: int, commit: bool,
                     in_partition: Callable[[str], bool]) -> None:
        """A COMMIT (``commit``) or ABORT marker of ``producer_id`` was written to a
        ``__consumer_offsets`` partition (``in_partition(group_id)`` says which groups
        live there): its pending offsets there become committed, or are dropped. Nothing
        is appended: the marker is the record."""
        for group_id in [g for g, by_pid in self.pending_txn_offsets.items()
                         if producer_id in by_pid and in_partition(g)]:
            pending = self.pending_txn_offsets[group_id].pop(producer_id)
            # A plain commit written after the transactional one stays (Kafka's
            # CommitRecordMetadataAndOffset.olderThan).
            newer = {tp for tp in pending if self._plain_order.get((group_id, *tp), -1)
                     > self._pending_order.pop((group_id, producer_id, *tp), -1)}
            if not self.pending_txn_offsets[group_id]:
                del self.pending_txn_offsets[group_id]
                for key in [k for k in self._plain_order if k[0] == group_id]:
                    del self._plain_order[key]
            if not commit:
                continue
            settled = {tp: c for tp, c in pending.items() if tp not in newer}
            cg = self._group_manager.modern_group(group_id)
            if cg is not None:
                cg.offsets.update(settled)
                continue
            groups = self._group_manager.groups
            group = groups.get(group_id)
            if group is None:
                group = groups[group_id] = Group(group_id, now_ms=0)
                group.state_timestamp = None
            group.offsets.update(settled)

    def has_pending_txn_offsets(self, group_id: str, topic: str, partition: int) -> bool:
        """Whether an open transaction has an offset for this partition of the group
        (OffsetFetch's require_stable answers UNSTABLE_OFFSET_COMMIT then)."""
        return any((topic, partition) in offsets
                   for offsets in self.pending_txn_offsets.get(group_id, {}).values())

    def _note_commit(self, group_id: str, topic: str, partition: int,
                     producer_id: int | None) -> None:
        """Remember the order of a commit, while it can matter (see _commit_order)."""
        if producer_id is not None:
            self._pending_order[(group_id, producer_id, topic, partition)] = next(
                self._commit_order)
        elif group_id in self.pending_txn_offsets:
            self._plain_order[(group_id, topic, partition)] = next(self._commit_order)

    def _drop_pending(self, group_id: str, producer_id: int) -> None:
        by_pid = self.pending_txn_offsets.get(group_id)
        if by_pid is not None:
            by_pid.pop(producer_id, None)
            if not by_pid:
                del self.pending_txn_offsets[group_id]
                for key in [k for k in self._plain_order if k[0] == group_id]:
                    del self._plain_order[key]

    def load_txn_offset(self, producer_id: int, k: ot.OffsetCommitKey, value: bytes) -> None:
        """Replay a transactional offset commit: pending until the producer's marker
        (``complete_txn``) is replayed."""
        v = ot.decode_offset_commit_value(value)
        pending = self.pending_txn_offsets.setdefault(k.group, {}).setdefault(producer_id, {})
        pending[(k.topic, k.partition)] = CommittedOffset(
            v.offset, v.leader_epoch, v.metadata, v.commit_timestamp, v.expire_timestamp)
        self._note_commit(k.group, k.topic, k.partition, producer_id)

    def fetch_offsets(
        self,
        group_id: str,
        partitions: Iterable[tuple[str, int]] | None = None,
        *,
        member_id: str | None = None,
        member_epoch: int = -1,
        require_stable: bool = False,
    ) -> OffsetFetchResult:
        """OffsetFetch: the committed offsets of ``partitions`` (all the group has when
        None); a partition without one answers offset -1. Answered in any group state:
        the group may use Kafka only to store offsets. ``member_id``/``member_epoch``
        (v9+) are checked for a KIP-848 group when given (a consumer asking for its
        offsets must be a member at its current epoch). ``require_stable`` (v7+,
        KIP-447; read_committed consumers set it): a partition with an offset pending in
        an open transaction answers UNSTABLE_OFFSET_COMMIT, so the consumer waits for
        that transaction instead of starting from an offset about to change."""
        cg = self._group_manager.modern_group(group_id)
        if cg is not None:
            if member_id is not None and member_epoch >= 0:
                error = self._group_manager.validate_consumer_member_epoch(
                    cg, member_id, member_epoch)
                if error is not None:
                    return OffsetFetchResult(error, [])
            offsets = cg.offsets
        else:
            group = self._group_manager.groups.get(group_id)
            offsets = group.offsets if group is not None else {}
        if partitions is None:
            keys = sorted(offsets)
        else:
            keys = [(topic, partition) for topic, partition in partitions]
        result = []
        for topic, partition in keys:
            committed = offsets.get((topic, partition))
            if require_stable and self.has_pending_txn_offsets(group_id, topic, partition):
                result.append(FetchedOffset(topic, partition, NO_OFFSET, -1, "",
                                            ErrorCode.unstable_offset_commit))
            elif committed is None:
                result.append(FetchedOffset(topic, partition, NO_OFFSET, -1, ""))
            else:
                result.append(
                    FetchedOffset(
                        topic, partition, committed.offset, committed.leader_epoch,
                        committed.metadata,
                    )
                )
        return OffsetFetchResult(ErrorCode.none, result)

    def delete_offsets(
        self,
        group_id: str,
        partitions: Iterable[tuple[str, int]],
        *,
        token: Any,
        now_ms: int,
    ) -> Effects:
        """OffsetDelete (KIP-496): an empty group loses any offsets; an active consumer
        group only those of topics it is not subscribed to."""
        fx = self._effects(now_ms)
        wanted = [(topic, partition) for topic, partition in partitions]
        group = self._group_manager.groups.get(group_id) if group_id else None
        if not group_id:
            fx.respond(token, OffsetDeleteResult(ErrorCode.invalid_group_id))
            return fx
        cg = self._group_manager.modern_group(group_id)
        if cg is not None:
            results = [
                PartitionResult(t, p, ErrorCode.group_subscribed_to_topic if cg.is_subscribed_to(t)
                                else ErrorCode.none)
                for t, p in wanted
            ]
            self._remove_consumer_offsets(
                cg, [(r.topic, r.partition) for r in results if r.error_code == ErrorCode.none],
                now_ms, fx)
            fx.respond(token, OffsetDeleteResult(ErrorCode.none, results))
            return fx
        if group is None:
            fx.respond(token, OffsetDeleteResult(ErrorCode.group_id_not_found))
            return fx
        if group.is_(GroupState.EMPTY):
            results = [PartitionResult(t, p, ErrorCode.none) for t, p in wanted]
        elif group.is_consumer_group:
            # Deleting the offsets of a topic the members consume would rewind them.
            results = [
                PartitionResult(
                    t, p, ErrorCode.group_subscribed_to_topic if group.is_subscribed_to(t)
                    else ErrorCode.none
                )
                for t, p in wanted
            ]
        else:
            fx.respond(token, OffsetDeleteResult(ErrorCode.non_empty_group))
            return fx
        eligible = [(r.topic, r.partition) for r in results if r.error_code == ErrorCode.none]
        self._remove_offsets(group, eligible, now_ms, fx)
        fx.respond(token, OffsetDeleteResult(ErrorCode.none, results))
        return fx

    def _remove_offsets(
        self, group: Group, keys: Iterable[tuple[str, int]], now_ms: int, fx: Effects
    ) -> None:
        """Tombstone the given offsets; the group may be over then
        (``GroupManager.maybe_delete_group``)."""
        for key in keys:
            if group.offsets.pop(key, None) is not None:
                fx.records.append(Record(
                    group.group_id, ot.encode_offset_commit_key(group.group_id, *key), None
                ))
        self._group_manager.maybe_delete_group(group, now_ms, fx)

    def _remove_consumer_offsets(
        self, group: ConsumerGroup | StreamsGroup, keys: Iterable[tuple[str, int]], now_ms: int,
        fx: Effects,
    ) -> None:
        """Tombstone offsets of a KIP-848 group; an empty one left without offsets goes
        (``GroupManager.maybe_delete_consumer_group``)."""
        for key in keys:
            if group.offsets.pop(key, None) is not None:
                fx.records.append(Record(
                    group.group_id, ot.encode_offset_commit_key(group.group_id, *key), None
                ))
        self._group_manager.maybe_delete_consumer_group(group, fx)

    def expire_offsets(self, now_ms: int) -> Effects:
        """offsets.retention.minutes: drop offsets nobody will come back for, and the
        empty groups left without offsets. ``tick`` runs this every
        offsets.retention.check.interval.ms; it may also be called directly."""
        fx = Effects()
        for group in list(self._group_manager.groups.values()):
            self._remove_offsets(group, self._expired_offsets(group, now_ms), now_ms, fx)
        for cg in self._group_manager.modern_groups():
            expired = []
            for key, committed in cg.offsets.items():
                if cg.members and cg.is_subscribed_to(key[0]):
                    continue  # in use (KIP-211)
                base = cg.state_timestamp if not cg.members else committed.commit_timestamp
                if committed.expire_timestamp >= 0:
                    if now_ms >= committed.expire_timestamp:
                        expired.append(key)
                elif now_ms - base >= self.offsets_retention_ms:
                    expired.append(key)
            self._remove_consumer_offsets(cg, expired, now_ms, fx)
        return fx

    def _expired_offsets(self, group: Group, now_ms: int) -> list[tuple[str, int]]:
        # Kafka 2.1+ (KIP-211): an offset does not expire while its group is using it.
        if group.protocol_type is not None and group.is_(GroupState.EMPTY):
            # Retention counts from the moment the group became empty.
            base, skip = group.state_timestamp, frozenset[str]()
        elif group.is_consumer_group and group.subscribed is not None and group.is_(
            GroupState.STABLE
        ):
            # A stable consumer group keeps the offsets of topics it subscribes to.
            base, skip = None, frozenset(group.subscribed)
        elif group.protocol_type is None:
            # Offsets-only group (no group management): from each commit.
            base, skip = None, frozenset()
        else:
            return []
        expired = []
        for key, committed in group.offsets.items():
            if key[0] in skip:
                continue
            if committed.expire_timestamp >= 0:
                # Committed with an explicit retention (OffsetCommit v2-v4).
                if now_ms >= committed.expire_timestamp:
                    expired.append(key)
            elif now_ms - (committed.commit_timestamp if base is None else base) >= (
                self.offsets_retention_ms
            ):
                expired.append(key)
        return expired

    def delete_all_offsets(self, group_id: str, now_ms: int, fx: Effects) -> None:
        """DeleteGroups, once ``GroupManager.prepare_delete`` has let the group go: its
        offsets are tombstoned, and the group goes with them."""
        cg = self._group_manager.modern_group(group_id)
        if cg is not None:
            self._remove_consumer_offsets(cg, list(cg.offsets), now_ms, fx)
            return
        group = self._group_manager.groups[group_id]
        self._remove_offsets(group, list(group.offsets), now_ms, fx)

    def remove_topics(self, topics: Collection[str], now_ms: int) -> Effects:
        """Topics were deleted: every group's offsets of them go (tombstoned), pending
        transactional ones too, and the groups left empty without offsets with them -
        as Kafka's GroupCoordinator.onPartitionsDeleted does, so that a topic made again
        under the same name is not read from a deleted one's offsets."""
        fx = Effects()
        gone = set(topics)
        for group in list(self._group_manager.groups.values()):
            if keys := [k for k in group.offsets if k[0] in gone]:
                self._remove_offsets(group, keys, now_ms, fx)
        for cg in self._group_manager.modern_groups():
            if keys := [k for k in cg.offsets if k[0] in gone]:
                self._remove_consumer_offsets(cg, keys, now_ms, fx)
        for by_pid in self.pending_txn_offsets.values():
            for pending in by_pid.values():
                for key in [k for k in pending if k[0] in gone]:
                    del pending[key]
        return fx

    # --- timer -----------------------------------------------------------------------

    def schedule_expiry(self, now_ms: int) -> None:
        """Arm the periodic expiry check, unless it is armed (or off)."""
        if self.offsets_retention_check_interval_ms is not None and self._next_expiry_check is None:
            self._next_expiry_check = now_ms + self.offsets_retention_check_interval_ms
            self._schedule(self._next_expiry_check, OFFSET_EXPIRY_TIMER, None, "")

    def expiry_is_current(self, deadline: int) -> bool:
        return self._next_expiry_check == deadline

    def on_expiry_timer(self, now_ms: int, fx: Effects) -> None:
        """The expiry check is due: ``now_ms`` is its deadline. The next one is armed
        from it."""
        self._next_expiry_check = None
        fx.records += self.expire_offsets(now_ms).records
        self.schedule_expiry(now_ms)

    # --- persistence -----------------------------------------------------------------

    @staticmethod
    def _offset_record(group_id: str, topic: str, partition: int, c: CommittedOffset) -> Record:
        value = ot.OffsetCommitValue(
            c.offset, c.leader_epoch, c.metadata, c.commit_timestamp, c.expire_timestamp
        )
        return Record(
            group_id,
            ot.encode_offset_commit_key(group_id, topic, partition),
            ot.encode_offset_commit_value(value),
        )

    def load(self, k: ot.OffsetCommitKey, value: bytes | None) -> None:
        """Replay one offset commit record (``GroupCoordinator.load`` hands them over in
        log order)."""
        cg = self._group_manager.modern_group(k.group)
        if cg is not None:
            if value is None:
                cg.offsets.pop((k.topic, k.partition), None)
            else:
                v = ot.decode_offset_commit_value(value)
                cg.offsets[(k.topic, k.partition)] = CommittedOffset(
                    v.offset, v.leader_epoch, v.metadata, v.commit_timestamp, v.expire_timestamp)
                self._note_commit(k.group, k.topic, k.partition, None)
            return
        groups = self._group_manager.groups
        group = groups.get(k.group)
        if value is None:
            if group is not None:
                group.offsets.pop((k.topic, k.partition), None)
                if group.generation_id == 0 and not group.offsets and not group.members:
                    # It existed only through these offsets.
                    del groups[k.group]
            return
        v = ot.decode_offset_commit_value(value)
        if group is None:
            group = groups[k.group] = Group(k.group, now_ms=0)
            group.state_timestamp = None
        group.offsets[(k.topic, k.partition)] = CommittedOffset(
            v.offset, v.leader_epoch, v.metadata, v.commit_timestamp, v.expire_timestamp
        )
        self._note_commit(k.group, k.topic, k.partition, None)
