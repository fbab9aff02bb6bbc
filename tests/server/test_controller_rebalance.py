"""The controller's automatic preferred-leader election (``auto.leader.rebalance.enable``)
against a store in memory: which brokers it may hand leadership back to.

A broker that restarted registers again with a new broker epoch; until the controller
has handled that registration (its broker-change event takes the restarted broker out of
the ISRs it was still listed in), the partition states may still list it as in sync
although its log is behind. A preferred-leader check that runs in that window (it was
queued before the broker-change event) must not elect it: its log would become the
partition's and the followers would truncate acknowledged records to match it.

No asyncio plugin: each test runs its coroutine with ``asyncio.run``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from odradek.cluster import state as zk
from odradek.cluster.state import BrokerInfo, PartitionState, TopicPartition
from odradek.server.cluster.controller import Controller
from odradek.server.cluster.store import MemoryStore

TP: TopicPartition = ("orders", 0)
REPLICAS = (1, 2, 3)  # broker 1 is the preferred leader


class FakeMetadata:
    """The parts of ClusterMetadata the preferred-leader election reads."""

    def __init__(self, brokers: dict[int, int], state: PartitionState) -> None:
        self.brokers = {b: BrokerInfo(b, "127.0.0.1", 9000 + b, epoch=e)
                        for b, e in brokers.items()}
        self.states = {TP: state}

    def replicas(self, topic: str, partition: int) -> tuple[int, ...]:
        return REPLICAS if (topic, partition) == TP else ()


class FakeNode:
    """The parts of ClusterNode the controller uses here."""

    node_id = 2

    def __init__(self, store: MemoryStore, metadata: FakeMetadata) -> None:
        self.store, self.metadata = store, metadata
        self.config: dict[str, Any] = {"leader.imbalance.per.broker.percentage": 10,
                                       "auto.leader.rebalance.enable": True,
                                       "leader.imbalance.check.interval.seconds": 300}

    def unclean_election(self, topic: str) -> bool:
        return False


def preferred_election(handled: dict[int, int], registered: dict[int, int]) -> PartitionState:
    """Partition orders-0 led by broker 2 with every replica in its ISR; the controller
    has handled the registrations ``handled`` while the brokers' current ones are
    ``registered``. Run the preferred-leader check and return the state it leaves."""

    async def body() -> PartitionState:
        store = MemoryStore()
        await store.start(1.0)
        try:
            await store.create(zk.CONTROLLER_EPOCH_PATH, b"1")
            _, epoch_version = await store.get(zk.CONTROLLER_EPOCH_PATH)
            state = PartitionState(2, 5, REPLICAS, 1, registered[2])
            await store.ensure_path(zk.partition_path(*TP))
            await store.create(zk.state_path(*TP), state.to_json())
            data, version = await store.get(zk.state_path(*TP))
            metadata = FakeMetadata(registered, PartitionState.from_json(data, version))
            controller = Controller(FakeNode(store, metadata))  # type: ignore[arg-type]
            controller.active, controller.epoch = True, 1
            controller._epoch_version = epoch_version
            controller._known = dict(handled)
            await controller._preferred_leaders()
            data, version = await store.get(zk.state_path(*TP))
            return PartitionState.from_json(data, version)
        finally:
            await store.close()

    return asyncio.run(body())


def test_a_caught_up_preferred_replica_gets_its_leadership_back() -> None:
    brokers = {1: 101, 2: 200, 3: 300}
    after = preferred_election(handled=brokers, registered=brokers)
    assert (after.leader, after.leader_epoch, after.leader_broker_epoch) == (1, 6, 101)


def test_a_restarted_replica_the_controller_has_not_seen_return_is_not_elected() -> None:
    # Broker 1 restarted (registration 100 -> 101); the controller has not handled that
    # yet, so the ISR listing it is stale.
    after = preferred_election(handled={1: 100, 2: 200, 3: 300},
                               registered={1: 101, 2: 200, 3: 300})
    assert (after.leader, after.leader_epoch) == (2, 5)
