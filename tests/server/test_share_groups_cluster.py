"""Share groups in a replicated cluster (in-process brokers, tests/server/memory_cluster):
the group is coordinated by one broker, the partition led by another, the share state
kept by the leader of its ``__share_group_state`` partition (ReadShareGroupState /
WriteShareGroupState across brokers where that is a third). When the partition's leader
stops, the new leader reads the state from the share coordinator: what the group
acknowledged stays done, what was out with a consumer comes back (one more delivery)."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode

from odradek.client.aio import AsyncBrokerConnection
from odradek.coordinator.share_records import SHARE_GROUP_STATE_TOPIC, coordinator_key
from odradek.records import builder
from tests.server.memory_cluster import MemoryCluster, with_cluster

ACCEPT = 1
TOPIC, GROUP = "queue", "workers"


async def connect(cluster: MemoryCluster, node_id: int) -> AsyncBrokerConnection:
    return await AsyncBrokerConnection.open(*cluster.address(node_id), client_id="test",
                                            timeout_s=30)


async def coordinator(cluster: MemoryCluster, conn: AsyncBrokerConnection) -> int:
    async def found() -> int | None:
        answer = await conn.request(10, {"key_type": 0, "coordinator_keys": [GROUP]},
                                    version=4)
        c = answer.coordinators[0]
        return c.node_id if c.error_code == 0 and c.node_id in cluster.brokers else None

    for _ in range(200):
        node = await found()
        if node is not None:
            return node
        await asyncio.sleep(0.05)
    raise AssertionError("no group coordinator")


async def share_fetch(conn: AsyncBrokerConnection, member: str, epoch: int,
                      topic_id: uuid.UUID, acks: list[tuple[int, int, int]] = ()) -> Any:
    return await conn.request(78, {
        "group_id": GROUP, "member_id": member, "share_session_epoch": epoch,
        "max_wait": 500, "min_bytes": 1, "max_bytes": 1 << 20, "max_records": 100,
        "batch_size": 100, "topics": [{"topic_id": topic_id, "partitions": [
            {"partition_index": 0, "acknowledgement_batches": [
                {"first_offset": f, "last_offset": last, "acknowledge_types": [t]}
                for f, last, t in acks]}]}],
        "forgotten_topics_data": []}, version=1)


async def acquire(cluster: MemoryCluster, member: str, topic_id: uuid.UUID
                  ) -> tuple[AsyncBrokerConnection, list[tuple[int, int, int]], int]:
    """Join the group, then share-fetch from the partition's leader until records come
    (the share coordinator's topic is made at the group's first fetch): the connection,
    the ranges acquired and the share session's next epoch."""
    any_conn = await connect(cluster, next(iter(cluster.brokers)))
    group_conn = await connect(cluster, await coordinator(cluster, any_conn))
    await any_conn.close()
    joined = await group_conn.request(76, {
        "group_id": GROUP, "member_id": member, "member_epoch": 0, "rack_id": None,
        "subscribed_topic_names": [TOPIC]}, version=1)
    assert joined.error_code == 0, joined
    await group_conn.close()
    leader = await connect(cluster, cluster.leader(TOPIC, 0))
    for attempt in range(100):
        answer = await share_fetch(leader, member, 0 if attempt == 0 else attempt, topic_id)
        assert answer.error_code == 0, answer
        got = [(a.first_offset, a.last_offset, a.delivery_count)
               for t in answer.responses for p in t.partitions for a in p.acquired_records]
        if got:
            return leader, got, attempt + 1
    raise AssertionError("nothing acquired")


async def _state_survives_the_leader(cluster: MemoryCluster) -> None:
    await cluster.create_topic(TOPIC, 1, 3)
    leader_id = cluster.leader(TOPIC, 0)
    conn = await connect(cluster, leader_id)
    records = builder.build_batch([builder.Record(i, 1000, None, b"v%d" % i)
                                   for i in range(6)])
    produced = await conn.request(0, {"transactional_id": None, "acks": -1,
                                      "timeout": 10_000, "topic_data": [{
                                          "name": TOPIC, "partition_data": [
                                              {"index": 0, "records": records}]}]},
                                  version=9)
    assert produced.responses[0].partition_responses[0].error_code == 0
    configs = await conn.request(44, {"resources": [{
        "resource_type": 32, "resource_name": GROUP, "configs": [{
            "name": "share.auto.offset.reset", "config_operation": 0,
            "value": "earliest"}]}], "validate_only": False}, version=1)
    assert configs.responses[0].error_code == 0
    metadata = await conn.request(3, {"topics": [{"name": TOPIC, "topic_id": None}],
                                      "allow_auto_topic_creation": False,
                                      "include_topic_authorized_operations": False},
                                  version=12)
    topic_id = metadata.topics[0].topic_id
    await conn.close()

    first, got, epoch = await acquire(cluster, "m1", topic_id)
    assert got == [(0, 5, 1)]
    acked = await first.request(79, {
        "group_id": GROUP, "member_id": "m1", "share_session_epoch": epoch, "topics": [{
            "topic_id": topic_id, "partitions": [{"partition_index": 0,
                                                  "acknowledgement_batches": [
                {"first_offset": 0, "last_offset": 2, "acknowledge_types": [ACCEPT]}]}]}]},
        version=1)
    assert acked.error_code == 0 and acked.responses[0].partitions[0].error_code == 0
    await first.close()
    await _every_broker_reads_the_same_state(cluster, topic_id)
    # The partition's leader goes (a controlled shutdown): another replica leads, and its
    # share partition starts from the stored state.
    await cluster.stop_broker(leader_id)
    await cluster.wait_for(lambda: cluster.leader(TOPIC, 0) in cluster.brokers,
                           "a new leader")
    second, got, _ = await acquire(cluster, "m2", topic_id)
    assert got == [(3, 5, 2)]
    await second.close()


async def _every_broker_reads_the_same_state(cluster: MemoryCluster,
                                            topic_id: uuid.UUID) -> None:
    """Each broker's runtime reads the state: the share coordinator's locally, the others
    with ReadShareGroupState to it; a broker asked directly for a state it does not
    coordinate answers NOT_COORDINATOR."""
    key = (GROUP, topic_id, 0)
    states = {}
    for node_id, broker in cluster.brokers.items():
        assert broker.share_state is not None
        state = await broker.share_state.read(key)
        assert state is not None
        states[node_id] = (state.start_offset, state.batches)
    assert len(set(states.values())) == 1
    start, batches = next(iter(states.values()))
    assert start == 3 and [(b.first_offset, b.last_offset, b.delivery_state,
                            b.delivery_count) for b in batches] == [(3, 5, 0, 1)]
    partition = next(iter(cluster.brokers.values())).share_state.partition_for(
        coordinator_key(*key))
    owner = cluster.leader(SHARE_GROUP_STATE_TOPIC, partition)
    other = next(n for n in cluster.brokers if n != owner)
    conn = await connect(cluster, other)
    answer = await conn.request(84, {"group_id": GROUP, "topics": [{
        "topic_id": topic_id, "partitions": [{"partition": 0, "leader_epoch": 0}]}]},
        version=0)
    assert answer.results[0].partitions[0].error_code == ErrorCode.not_coordinator
    await conn.close()


def test_share_state_survives_its_partitions_leader_moving(tmp_path: Path) -> None:
    asyncio.run(with_cluster(tmp_path, _state_survives_the_leader))
