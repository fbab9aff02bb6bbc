"""What the controller writes to create partition states and to delete topics
(``server/cluster/topic_znodes.py``), against a store in memory: nothing it writes may bring a
deleted topic's znodes back, a deletion ends all at once, and what earlier versions
left behind (an empty topic znode, a config without a topic) is cleared so the name can
be created again (issue 29).

No asyncio plugin: each test runs its coroutine with ``asyncio.run``.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from odradek.cluster import state as zk
from odradek.cluster.state import PartitionState, TopicAssignment
from odradek.server.cluster.controller import Controller, NotController
from odradek.server.cluster.store import MemoryStore, Op
from odradek.server.cluster.topic_znodes import MAX_OPS, TopicZnodes

STATE = PartitionState(1, 0, (1, 2, 3), 1, 101)


def run(body: Callable[[MemoryStore, Controller], Awaitable[None]]) -> None:
    """``body(store, controller)``: a store with Kafka's persistent paths and a
    controller epoch, and a controller that holds it (epoch 1)."""

    async def main() -> None:
        store = MemoryStore()
        await store.start(1.0)
        try:
            for path in zk.PERSISTENT_PATHS:
                await store.ensure_path(path)
            await store.create(zk.CONTROLLER_EPOCH_PATH, b"1")
            _, epoch_version = await store.get(zk.CONTROLLER_EPOCH_PATH)
            controller = Controller(FakeNode(store))  # type: ignore[arg-type]
            controller.active, controller.epoch = True, 1
            controller._epoch_version = epoch_version
            await body(store, controller)
        finally:
            await store.close()

    asyncio.run(main())


class FakeMetadata:
    """The metadata cache as a controller may find it: a step behind the store."""

    def __init__(self) -> None:
        self.assignments: dict[str, TopicAssignment] = {}
        self.states: dict[tuple[str, int], PartitionState] = {}
        self.brokers: dict[int, Any] = {}

    def replicas(self, topic: str, partition: int) -> tuple[int, ...]:
        assignment = self.assignments.get(topic)
        return () if assignment is None else assignment.replicas[partition]


class FakeNode:
    node_id = 1
    config: dict[str, Any] = {}

    def __init__(self, store: MemoryStore) -> None:
        self.store, self.metadata = store, FakeMetadata()


async def create_topic(store: MemoryStore, name: str, partitions: int, *,
                       states: bool = True) -> TopicAssignment:
    """A topic as a broker and then the controller write it."""
    assignment = TopicAssignment(name, uuid.uuid4(), tuple((1, 2, 3) for _ in range(partitions)))
    await store.multi([Op.create(zk.config_path(name), zk.config_to_json({})),
                       Op.create(zk.topic_path(name), assignment.to_json())])
    if states:
        await store.create(zk.partitions_path(name))
        for p in range(partitions):
            await store.create(zk.partition_path(name, p))
            await store.create(zk.state_path(name, p), STATE.to_json())
    return assignment


async def everything_of(store: MemoryStore, name: str) -> list[str]:
    """Each znode of ``name``: its topic znode and below, its config, its marker."""
    topics = TopicZnodes(store, store.multi)
    found = await topics._subtree(zk.topic_path(name))
    for path in (zk.config_path(name), zk.delete_marker_path(name)):
        if await store.exists(path) is not None:
            found.append(path)
    return found


def first_state(replicas: tuple[int, ...]) -> PartitionState:
    return PartitionState(replicas[0], 0, replicas, 1)


def test_a_state_queued_before_a_deletion_does_not_bring_the_topic_back() -> None:
    """The issue's race: the controller's cache still lists the topic (its deletion
    removed the partitions' states first, and each removal queued "give this partition a
    state"), while the store no longer has it. The queued initialization writes
    nothing: before, it created /brokers/topics/T again with no data (ZooKeeper's
    implicit parents) and a state below, and the name was TOPIC_ALREADY_EXISTS forever."""

    async def body(store: MemoryStore, controller: Controller) -> None:
        assignment = await create_topic(store, "orders", 2, states=False)
        controller.node.metadata.assignments["orders"] = assignment
        await store.multi([Op.delete(zk.topic_path("orders")),
                           Op.delete(zk.config_path("orders"))])
        await controller._initialize([("orders", 0), ("orders", 1)])
        assert await everything_of(store, "orders") == []

    run(body)


def test_new_partitions_get_their_states_in_one_go_and_existing_ones_are_kept() -> None:
    async def body(store: MemoryStore, controller: Controller) -> None:
        await create_topic(store, "orders", 3, states=False)
        topics = controller.topics
        written = await topics.create_states("orders", [0, 1, 2], first_state)
        assert sorted(written) == [0, 1, 2]
        # Partitions added later (CreatePartitions grew the assignment): only they.
        data, version = await store.get(zk.topic_path("orders"))
        grown = TopicAssignment.from_json("orders", data)
        grown = TopicAssignment("orders", grown.topic_id, (*grown.replicas, (3, 1, 2)))
        await store.set(zk.topic_path("orders"), grown.to_json(), version)
        await store.set(zk.state_path("orders", 0), STATE.to_json())  # moved on
        written = await topics.create_states("orders", [0, 1, 2, 3, 9], first_state)
        assert written == {3: first_state((3, 1, 2))}
        raw, _ = await store.get(zk.state_path("orders", 0))
        assert raw == STATE.to_json()

    run(body)


def test_a_deposed_controller_writes_no_state_and_deletes_nothing() -> None:
    async def body(store: MemoryStore, controller: Controller) -> None:
        await create_topic(store, "orders", 2, states=False)
        await create_topic(store, "doomed", 2)
        await store.create(zk.delete_marker_path("doomed"))
        await store.set(zk.CONTROLLER_EPOCH_PATH, b"2")  # a successor
        with pytest.raises(NotController):
            await controller.topics.create_states("orders", [0, 1], first_state)
        with pytest.raises(NotController):
            await controller.topics.delete_topic("doomed")
        assert await everything_of(store, "orders") == [
            zk.topic_path("orders"), zk.config_path("orders")]
        assert len(await everything_of(store, "doomed")) == 1 + 1 + 2 * 2 + 2

    run(body)


def test_a_deletion_removes_every_znode_and_the_marker_goes_last() -> None:
    async def body(store: MemoryStore, controller: Controller) -> None:
        # More partitions than one transaction holds: the states go in several, the
        # topic, its config and the marker in the last.
        partitions = MAX_OPS // 2
        await create_topic(store, "big", partitions)
        await create_topic(store, "kept", 1)
        await store.create(zk.delete_marker_path("big"))
        transactions: list[list[Op]] = []
        real_multi = store.multi

        async def recorded(ops: list[Op]) -> None:
            transactions.append(ops)
            await real_multi(ops)

        store.multi = recorded  # type: ignore[method-assign]
        assert await controller.topics.delete_topic("big")
        assert await everything_of(store, "big") == []
        assert len(await everything_of(store, "kept")) == 2 + 3
        assert len(transactions) > 1
        last = [op.path for op in transactions[-1]]
        assert last[-3:] == [zk.topic_path("big"), zk.config_path("big"),
                             zk.delete_marker_path("big")]
        assert all(zk.delete_marker_path("big") not in [op.path for op in ops]
                   for ops in transactions[:-1])
        # A marker whose deletion another controller finished: nothing to do.
        assert not await controller.topics.delete_topic("big")

    run(body)


def test_a_deletion_a_controller_left_half_done_is_finished_by_the_next() -> None:
    async def body(store: MemoryStore, controller: Controller) -> None:
        await create_topic(store, "orders", 3)
        await store.create(zk.delete_marker_path("orders"))
        # The previous controller removed partition 0's znodes, then died.
        await store.multi([Op.delete(zk.state_path("orders", 0)),
                           Op.delete(zk.partition_path("orders", 0))])
        controller.node.metadata.assignments["orders"] = TopicAssignment.from_json(
            "orders", (await store.get(zk.topic_path("orders")))[0])
        await controller._on_startup()
        assert await everything_of(store, "orders") == []

    run(body)


def test_creating_a_name_marked_for_deletion_is_refused_until_the_deletion_ends() -> None:
    """The marker check a broker's CreateTopics makes: the same transaction shape as
    TopicAdmin.create_topic (create and delete the marker: ZooKeeper's only "absent"
    check), refused while a deletion of the name is unfinished."""
    from odradek.server.cluster.store import NodeExistsError

    async def body(store: MemoryStore, controller: Controller) -> None:
        await store.create(zk.delete_marker_path("orders"))
        marker = zk.delete_marker_path("orders")
        ops = [Op.create(marker), Op.delete(marker),
               Op.create(zk.config_path("orders"), zk.config_to_json({})),
               Op.create(zk.topic_path("orders"), b"{}")]
        with pytest.raises(NodeExistsError) as refused:
            await store.multi(ops)
        assert refused.value.at(marker)
        assert await controller.topics.delete_topic("orders")
        await store.multi(ops)
        assert await store.exists(marker) is None

    run(body)


@pytest.mark.parametrize("data, with_state, removed", [
    (b"", True, True),  # the husk the race left: empty, a state below
    (b"", False, True),
    (b'{"partitions":{"0":5}}', False, True),  # garbage, nothing below
    (b'{"partitions":{"0":5}}', True, False),  # a corrupt topic: left to the operator
    (None, True, False),  # a topic
])
def test_an_abandoned_topic_znode_is_removed_and_a_topic_never(
        data: bytes | None, with_state: bool, removed: bool) -> None:
    async def body(store: MemoryStore, controller: Controller) -> None:
        await create_topic(store, "t", 1, states=with_state)
        if data is not None:
            await store.set(zk.topic_path("t"), data)
        why = await controller.topics.remove_if_abandoned("t")
        assert (why is not None) is removed
        assert (await everything_of(store, "t") == []) is removed

    run(body)


def test_configs_of_no_topic_are_removed_and_others_kept() -> None:
    async def body(store: MemoryStore, controller: Controller) -> None:
        await create_topic(store, "live", 1)
        await create_topic(store, "being-deleted", 1)
        await store.create(zk.delete_marker_path("being-deleted"))
        await store.create(zk.config_path("orphan"), zk.config_to_json({"a": "b"}))
        assert await controller.topics.remove_orphan_configs() == ["orphan"]
        assert await store.get_children(zk.CONFIG_TOPICS_PATH) == ["being-deleted", "live"]
        assert await store.get_children(zk.TOPICS_PATH) == ["being-deleted", "live"]

    run(body)
