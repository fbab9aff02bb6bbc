"""The share coordinator's runtime: acts on what ``coordinator/share_coordinator.py``
decides, over the internal topic ``__share_group_state`` (compacted, internal, Kafka's
name and record layouts).

One ``ShareCoordinator`` per partition coordinated here, loaded by replaying that
partition's log; the share partitions (``server/share/``) read and write their state
through ``read``/``write``/``delete``, which answer once the record is in the log (in a
cluster, once it is replicated), as Kafka's WriteShareGroupState answers once its
record is committed: an acknowledgement is confirmed to a consumer only once it is
durable.

On a single node the topic is created at the first share group's first use (as Kafka
creates it at the share coordinator's first use), or replayed at start-up if it exists.
The request plumbing, coordinators per partition and the replication waits are the
shared ``CoordinatorRuntime``'s.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from odradek.coordinator.share_coordinator import (
    Effects,
    ReadResult,
    ShareCoordinator,
    ShareKey,
    ShareState,
    WriteResult,
)
from odradek.coordinator.share_records import (
    SHARE_GROUP_STATE_TOPIC,
    StateBatch,
    coordinator_key,
    partition_for_key,
)
from odradek.protocol.reader import DecodeError
from odradek.server.coordinators.coordinator_runtime import (
    INTERNAL_TOPIC_CONFIG,
    CoordinatorRuntime,
    CoordinatorUnavailable,
)

if TYPE_CHECKING:
    from odradek.server.broker import Broker
    from odradek.server.cluster.share_state_client import ShareStateClient

log = logging.getLogger(__name__)


class ShareStateRuntime(CoordinatorRuntime):
    """The ``ShareCoordinator`` of every ``__share_group_state`` partition coordinated
    here; lives as long as the broker."""

    topic = SHARE_GROUP_STATE_TOPIC

    def __init__(self, broker: Broker) -> None:
        super().__init__(broker, broker.config["share.coordinator.state.topic.num.partitions"])
        self._topic_ready = False

    def partition_for(self, key: str) -> int:
        """The ``__share_group_state`` partition of a coordinator key
        ("group:topicId:partition")."""
        return partition_for_key(key, self.partition_count())

    def _new_coordinator(self, partition: int, leader_epoch: int) -> ShareCoordinator:
        return ShareCoordinator()

    def _replay(self, partition: int, coordinator: ShareCoordinator) -> int:
        count = 0
        for record in self._keyed_records(partition):
            assert record.key is not None
            try:
                coordinator.load(record.key, record.value)
            except DecodeError as exc:
                log.warning("%s-%d offset %d: skipping a record that does not decode: %s",
                            SHARE_GROUP_STATE_TOPIC, partition, record.offset, exc)
            count += 1
        return count

    def _finish_load(self, coordinator: ShareCoordinator) -> Effects:
        return Effects()

    # --- lifecycle ---------------------------------------------------------------------

    def start(self) -> None:
        self._start_timer("share-coordinator-timers")

    def elect_all(self) -> None:
        """A single node: replay ``__share_group_state`` if it exists (else it is made
        at first use, ``ensure_topic``) and coordinate every partition."""
        assert self.broker.metadata is not None
        if SHARE_GROUP_STATE_TOPIC in self.broker.metadata.topics:
            self.ensure_topic()
            states, records = self._elect_all()
            log.info("loaded %d share partition state(s) from %d record(s) of %s", states,
                     records, SHARE_GROUP_STATE_TOPIC)

    def ensure_topic(self) -> None:
        """Single node: create ``__share_group_state`` if it does not exist yet, open its
        logs and coordinate its partitions."""
        if self._topic_ready:
            return
        self._create_topic(
            dict(INTERNAL_TOPIC_CONFIG, **{"segment.bytes": str(
                self.broker.config["share.coordinator.state.topic.segment.bytes"])}),
            "share.coordinator.state.topic.num.partitions")
        self._topic_ready = True
        if not self.coordinators:
            self._elect_all()

    @staticmethod
    def _size(coordinator: ShareCoordinator) -> int:
        return len(coordinator.states)

    # --- operations --------------------------------------------------------------------

    def _act(self, partition: int, fx: Effects) -> None:
        failure: CoordinatorUnavailable | None = None
        end: int | None = None
        if fx.records:
            try:
                end = self._append_records(partition, fx.records)
            except Exception as exc:
                log.exception("appending share state to %s-%d failed",
                              SHARE_GROUP_STATE_TOPIC, partition)
                failure = CoordinatorUnavailable(
                    ErrorCode.coordinator_not_available,
                    f"share state could not be stored: {exc}")
        replication = None if end is None else self._replicated(partition, end)
        if replication is None:
            self._release(fx.responses, failure)
        else:
            self._release_when_replicated(partition, replication, fx.responses,
                                          "share state")
        self._rearm.set()

    async def _ready(self) -> None:
        """The topic exists: a single node makes it here and now; a cluster through
        ZooKeeper (its partitions get leaders a moment later: meanwhile the share
        coordinator is not available and the consumer retries)."""
        if self.broker.cluster is None:
            self.ensure_topic()
        else:
            await self.broker.topology.ensure_internal_topic(SHARE_GROUP_STATE_TOPIC)

    def _remote(self, partition: int) -> ShareStateClient | None:
        """The client to the share coordinator elsewhere, when ``partition`` is not
        coordinated here and this broker is one of a cluster; else None (local)."""
        cluster = self.broker.cluster
        if cluster is None or self.owns(partition):
            return None
        return cluster.share_state

    # Each operation goes to the coordinator of the key's partition: this broker's own
    # (``local_*``, also what the inter-broker requests of other leaders run), or another
    # broker's over the network.

    async def read(self, key: ShareKey) -> ShareState | None:
        """The share partition's state, or None (never written). Raises
        ``CoordinatorUnavailable`` when its coordinator cannot answer."""
        await self._ready()
        partition = self.partition_for(coordinator_key(*key))
        remote = self._remote(partition)
        if remote is not None:
            return await remote.read(partition, key)
        return await self.local_read(key)

    async def local_read(self, key: ShareKey) -> ShareState | None:
        result: ReadResult = await self.call(
            coordinator_key(*key), lambda c, token, now: c.read(key, token=token, now_ms=now))
        return result.state

    async def write(self, key: ShareKey, *, state_epoch: int, leader_epoch: int,
                    start_offset: int, batches: Sequence[StateBatch]) -> WriteResult:
        """Store the share partition's whole state; answered once it is durable."""
        await self._ready()
        partition = self.partition_for(coordinator_key(*key))
        remote = self._remote(partition)
        if remote is not None:
            return WriteResult(*await remote.write(
                partition, key, state_epoch=state_epoch, leader_epoch=leader_epoch,
                start_offset=start_offset, batches=batches))
        return await self.local_write(key, state_epoch=state_epoch,
                                      leader_epoch=leader_epoch, start_offset=start_offset,
                                      batches=batches)

    async def local_write(self, key: ShareKey, *, state_epoch: int, leader_epoch: int,
                          start_offset: int, batches: Sequence[StateBatch]) -> WriteResult:
        result: WriteResult = await self.call(
            coordinator_key(*key),
            lambda c, token, now: c.write(key, state_epoch=state_epoch,
                                          leader_epoch=leader_epoch,
                                          start_offset=start_offset, batches=batches,
                                          token=token, now_ms=now))
        return result

    async def delete(self, keys: Iterable[ShareKey]) -> None:
        """The share partitions' states go (DeleteGroups of a share group,
        DeleteShareGroupOffsets): a tombstone for each, by its coordinator."""
        await self._ready()
        for key in keys:
            partition = self.partition_for(coordinator_key(*key))
            remote = self._remote(partition)
            if remote is not None:
                await remote.delete(partition, key)
            else:
                await self.local_delete(key)

    async def local_delete(self, key: ShareKey) -> None:
        await self.call(coordinator_key(*key),
                        lambda c, token, now: c.delete([key], token=token, now_ms=now))
