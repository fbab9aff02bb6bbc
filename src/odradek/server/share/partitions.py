"""The share partitions this broker leads (Kafka's SharePartitionManager's cache): one
``SharePartition`` (coordinator/share_partition.py) per (share group, topic partition),
made at the group's first fetch of the partition and kept while the broker leads it.

- **Start:** a share partition's state is read from the share coordinator
  (``server/coordinators/share_state.py``); with none (the group's first use of the
  partition) it starts where the group's ``share.auto.offset.reset`` says: ``latest``
  (Kafka's default: the log end), ``earliest`` (the log start) or
  ``by_duration:<ISO duration>`` (the first offset at or after now minus it), and that
  start is written at once, so a restart does not move it.
- **Durability:** after acknowledgements, releases and lock expiries the whole state is
  written (one ``ShareSnapshot`` record) and the acknowledging request is answered once
  it is durable. Acquisitions are not written (as in Kafka): after a broker restart
  the records that were out are available again.
- **Locks:** each acquisition holds its records for the group's
  ``share.record.lock.duration.ms``; one loop timer per share partition, at its
  earliest lock, releases what is due (redelivered with a higher delivery count, or
  archived at ``share.delivery.count.limit``) and wakes waiting share fetches.
- **The log moving under it:** records removed below the share partition's start
  (retention, DeleteRecords) are skipped: the start moves to the log start.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from odradek.coordinator.share_coordinator import ShareKey
from odradek.coordinator.share_partition import SharePartition
from odradek.server.coordinators.coordinator_runtime import CoordinatorUnavailable
from odradek.server.dynamic_configs import (
    SHARE_AUTO_OFFSET_RESET,
    SHARE_DELIVERY_COUNT_LIMIT,
    SHARE_PARTITION_MAX_RECORD_LOCKS,
    SHARE_RECORD_LOCK_DURATION,
    duration_ms,
    group_config,
)

if TYPE_CHECKING:
    from odradek.server.broker import Broker
    from odradek.storage import Log

log = logging.getLogger(__name__)


class ShareError(Exception):
    """A share partition that cannot be served now; ``error_code`` is the Kafka error."""

    def __init__(self, error_code: int, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code


class ShareGroupPartition:
    """One share partition: its state machine, where it lives, and its lock timer."""

    __slots__ = (
        "key",
        "lock",
        "partition",
        "state",
        "state_epoch",
        "timer",
        "topic",
        "written",
    )

    def __init__(self, key: ShareKey, topic: str, state: SharePartition,
                 state_epoch: int) -> None:
        self.key = key
        self.topic = topic
        self.partition = key[2]
        self.state = state
        self.state_epoch = state_epoch
        self.written = state.changes  # the changes count last written
        self.timer: asyncio.TimerHandle | None = None
        # Serializes this share partition's writes with the request that made them.
        self.lock = asyncio.Lock()

    @property
    def group_id(self) -> str:
        return self.key[0]


class SharePartitions:
    """Every share partition of every share group on this broker."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.partitions: dict[ShareKey, ShareGroupPartition] = {}
        self._loading: dict[ShareKey, asyncio.Future[ShareGroupPartition]] = {}

    # --- group configs -----------------------------------------------------------------

    def config(self, group_id: str, name: str) -> str:
        """A group config's value for ``group_id`` (its own, else the broker's)."""
        store = self.broker.group_configs
        overrides = store.overrides(group_id) if store is not None else {}
        return group_config(self.broker.config.values, overrides, name)

    def lock_ms(self, group_id: str) -> int:
        return int(self.config(group_id, SHARE_RECORD_LOCK_DURATION))

    # --- finding and loading -----------------------------------------------------------

    async def get(self, group_id: str, topic: str, topic_id: uuid.UUID, partition: int,
                  lg: Log) -> ShareGroupPartition:
        key = (group_id, topic_id, partition)
        sp = self.partitions.get(key)
        if sp is not None:
            return sp
        loading = self._loading.get(key)
        if loading is not None:
            return await asyncio.shield(loading)
        future: asyncio.Future[ShareGroupPartition] = (
            asyncio.get_running_loop().create_future())
        self._loading[key] = future
        try:
            sp = await self._load(key, topic, lg)
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: nobody else may be waiting
            raise
        finally:
            del self._loading[key]
        self.partitions[key] = sp
        future.set_result(sp)
        return sp

    async def _load(self, key: ShareKey, topic: str, lg: Log) -> ShareGroupPartition:
        runtime = self.broker.share_state
        assert runtime is not None
        group_id = key[0]
        try:
            stored = await runtime.read(key)
        except CoordinatorUnavailable as exc:
            raise ShareError(exc.error_code, str(exc)) from None
        limit = int(self.config(group_id, SHARE_DELIVERY_COUNT_LIMIT))
        max_locks = int(self.config(group_id, SHARE_PARTITION_MAX_RECORD_LOCKS))
        if stored is not None:
            state = SharePartition(max(stored.start_offset, lg.log_start_offset),
                                   delivery_limit=limit, max_in_flight=max_locks,
                                   state_batches=stored.batches)
            sp = ShareGroupPartition(key, topic, state, stored.state_epoch)
            log.info("share group %s: %s-%d resumes at offset %d", group_id, topic, key[2],
                     state.start_offset)
            return sp
        start = self._initial_offset(group_id, lg)
        state = SharePartition(start, delivery_limit=limit, max_in_flight=max_locks)
        sp = ShareGroupPartition(key, topic, state, 0)
        sp.written = -1  # the initial start is written before the first records go out
        await self.persist(sp)
        log.info("share group %s: %s-%d starts at offset %d (share.auto.offset.reset=%s)",
                 group_id, topic, key[2], start, self.config(group_id,
                                                              SHARE_AUTO_OFFSET_RESET))
        return sp

    def _initial_offset(self, group_id: str, lg: Log) -> int:
        reset = self.config(group_id, SHARE_AUTO_OFFSET_RESET)
        if reset == "earliest":
            return lg.log_start_offset
        if reset.startswith("by_duration:"):
            span = duration_ms(reset[len("by_duration:"):]) or 0
            found = lg.offset_for_timestamp(self.broker.clock() - span)
            return lg.high_watermark if found is None else found[0]
        return lg.high_watermark

    # --- persistence -------------------------------------------------------------------

    async def persist(self, sp: ShareGroupPartition) -> int:
        """Write the share partition's state if it changed since last written; the
        Kafka error code of the write (0 once durable)."""
        if sp.written == sp.state.changes:
            return 0
        runtime = self.broker.share_state
        assert runtime is not None
        changes = sp.state.changes
        start, batches = sp.state.snapshot()
        try:
            result = await runtime.write(sp.key, state_epoch=sp.state_epoch,
                                         leader_epoch=0, start_offset=start,
                                         batches=batches)
        except CoordinatorUnavailable as exc:
            log.warning("share group %s: %s-%d state not written: %s", sp.group_id, sp.topic,
                        sp.partition, exc)
            return exc.error_code
        if result.error_code == ErrorCode.fenced_state_epoch:
            log.info("share group %s: %s-%d state was changed by an operator; reloading",
                     sp.group_id, sp.topic, sp.partition)
            self.forget(sp.key)
        elif result.error_code == 0 and sp.written < changes:
            sp.written = changes
        return result.error_code

    # --- locks -------------------------------------------------------------------------

    def arm(self, sp: ShareGroupPartition) -> None:
        """(Re)arm the share partition's lock timer at its earliest lock."""
        deadline = sp.state.next_deadline()
        if sp.timer is not None:
            sp.timer.cancel()
            sp.timer = None
        if deadline is None:
            return
        loop = asyncio.get_running_loop()
        delay = max(0.0, (deadline - self.broker.clock()) / 1000)
        sp.timer = loop.call_later(delay, self._expire, sp)

    def _expire(self, sp: ShareGroupPartition) -> None:
        sp.timer = None
        if self.partitions.get(sp.key) is not sp:
            return
        if sp.state.expire_locks(self.broker.clock()):
            self.released(sp)
        self.arm(sp)

    def released(self, sp: ShareGroupPartition) -> None:
        """Records became available again: write the state, wake waiting fetches."""
        self.broker.purgatory.notify((sp.topic, sp.partition))
        task = asyncio.get_running_loop().create_task(self._persist_locked(sp))
        task.add_done_callback(_log_failure)

    async def _persist_locked(self, sp: ShareGroupPartition) -> None:
        async with sp.lock:
            await self.persist(sp)

    # --- members and groups leaving --------------------------------------------------

    def release_member(self, group_id: str, member_id: str) -> None:
        """A member left its group or closed its session: its records are available
        again at once."""
        for sp in list(self.partitions.values()):
            if sp.group_id == group_id and sp.state.release_member(member_id):
                self.released(sp)
                self.arm(sp)

    def drop_group(self, group_id: str) -> None:
        """A share group was deleted: forget its share partitions here."""
        for key, sp in list(self.partitions.items()):
            if key[0] == group_id:
                if sp.timer is not None:
                    sp.timer.cancel()
                del self.partitions[key]

    def forget(self, key: ShareKey) -> None:
        """Its state changed elsewhere (AlterShareGroupOffsets, DeleteShareGroupOffsets, a
        write fenced by a newer state epoch): read it again at the next fetch. Records
        out with consumers are not theirs any more: their acknowledgements are refused."""
        sp = self.partitions.pop(key, None)
        if sp is not None and sp.timer is not None:
            sp.timer.cancel()

    def drop_partition(self, topic: str, partition: int) -> None:
        """This broker no longer leads the partition (or it was deleted)."""
        for key, sp in list(self.partitions.items()):
            if sp.topic == topic and sp.partition == partition:
                if sp.timer is not None:
                    sp.timer.cancel()
                del self.partitions[key]

    def stop(self) -> None:
        for sp in self.partitions.values():
            if sp.timer is not None:
                sp.timer.cancel()
        self.partitions.clear()


def _log_failure(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("writing share state failed", exc_info=task.exception())


__all__ = ["ShareError", "ShareGroupPartition", "SharePartitions"]
