"""A broker's metadata cache (``server/cluster/metadata.py``) against a store in memory:
what it tells its listeners when a topic is deleted and created again faster than its
watches read, and when a topic's znode is no topic.

No asyncio plugin: each test runs its coroutine with ``asyncio.run``.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable

import pytest

from odradek.cluster import state as zk
from odradek.cluster.state import PartitionState, TopicAssignment, TopicPartition
from odradek.server.cluster.metadata import ClusterMetadata
from odradek.server.cluster.store import MemoryStore, Op


class Recorder:
    """A metadata listener that writes down what it is told."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, object]] = []

    def partitions_changed(self, partitions: list[TopicPartition]) -> None:
        self.calls.append(("partitions", tuple(partitions)))

    def brokers_changed(self) -> None:
        pass

    def topic_removed(self, topic: str, partitions: int) -> None:
        self.calls.append(("removed", topic))

    def topic_unusable(self, topic: str) -> None:
        self.calls.append(("unusable", topic))

    def configs_changed(self, topic: str) -> None:
        pass

    def broker_configs_changed(self) -> None:
        pass


def run(body: Callable[[MemoryStore, ClusterMetadata, Recorder], Awaitable[None]]) -> None:
    async def main() -> None:
        store = MemoryStore()
        await store.start(1.0)
        for path in zk.PERSISTENT_PATHS:
            await store.ensure_path(path)
        metadata = ClusterMetadata(store, "cluster", node_id=1)
        recorder = Recorder()
        metadata.listeners = [recorder]  # type: ignore[list-item]
        try:
            await metadata.start(timeout_s=5)
            await body(store, metadata, recorder)
        finally:
            await metadata.stop()
            await store.close()

    asyncio.run(main())


def topic_ops(name: str, topic_id: uuid.UUID, state: PartitionState) -> list[Op]:
    assignment = TopicAssignment(name, topic_id, ((1, 2, 3),))
    return [Op.create(zk.config_path(name), zk.config_to_json({})),
            Op.create(zk.topic_path(name), assignment.to_json()),
            Op.create(zk.partitions_path(name)), Op.create(zk.partition_path(name, 0)),
            Op.create(zk.state_path(name, 0), state.to_json())]


def test_a_topic_deleted_and_created_again_between_two_reads_is_two_topics() -> None:
    """The watches may see the old topic and then the new one, never its absence. The
    listeners hear of the old topic's removal first (the replica manager deletes its
    logs rather than serve them as the new topic's), and the new topic's partition
    state is taken up although the old one had a higher leader epoch and version."""
    old_id, new_id = uuid.uuid4(), uuid.uuid4()

    async def body(store: MemoryStore, metadata: ClusterMetadata, recorder: Recorder) -> None:
        old_state = PartitionState(2, 7, (2, 3), 3, 200)
        await store.multi(topic_ops("t", old_id, old_state))
        for _ in range(5):  # the old state bumped a few times: a high znode version
            await store.set(zk.state_path("t", 0), old_state.to_json())
        assert await metadata.wait_for(
            lambda: metadata.states.get(("t", 0)) == PartitionState(
                2, 7, (2, 3), 3, 200, version=5), 5)
        recorder.calls.clear()
        new_state = PartitionState(1, 0, (1, 2, 3), 3, 100)
        # One transaction: no watch can read the name absent.
        await store.multi([Op.delete(zk.state_path("t", 0)), Op.delete(zk.partition_path("t", 0)),
                           Op.delete(zk.partitions_path("t")), Op.delete(zk.topic_path("t")),
                           Op.delete(zk.config_path("t")), *topic_ops("t", new_id, new_state)])
        assert await metadata.wait_for(
            lambda: "t" in metadata.assignments and metadata.assignments["t"].topic_id == new_id
            and metadata.states.get(("t", 0)) == PartitionState(1, 0, (1, 2, 3), 3, 100,
                                                                version=0), 5)
        assert recorder.calls[0] == ("removed", "t")
        assert metadata.topics["t"].topic_id == new_id

    run(body)


def test_an_empty_topic_znode_is_no_topic_and_is_reported_without_an_error(
        caplog: pytest.LogCaptureFixture) -> None:
    """What the issue's race left (and what its fix no longer writes): every broker
    logged an ERROR for it at every start. Now it is no topic, said at INFO, and the
    controller (a listener) is told, to remove it."""
    caplog.set_level(logging.INFO)
    async def body(store: MemoryStore, metadata: ClusterMetadata, recorder: Recorder) -> None:
        await store.create(zk.topic_path("husk"), b"")
        assert await metadata.wait_for(lambda: ("unusable", "husk") in recorder.calls, 5)
        assert "husk" not in metadata.topics and "husk" not in metadata.assignments

    run(body)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert any("is empty, no topic" in r.getMessage() for r in caplog.records)
