"""Produce v10-v13 (Kafka 4's versions), in-process: records written by a topic's id
(v13, KIP-516), an unknown id answered UNKNOWN_TOPIC_ID (also a deleted topic's, after
the name was made again) with nothing written, and from v10 KIP-951's current leader and
its endpoint where a partition is not led here. Answers decoded by kio, as a client
would. Real clients: the Java client 4.4 produces at v13 (tests/interop/test_java_client.py).
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from odradek.client.codec import PRODUCE
from odradek.client.wire import WireClient
from odradek.records.builder import build_simple
from odradek.testing import running_broker
from tests.server.memory_cluster import MemoryCluster, with_cluster
from tests.server.test_fetch_topic_ids import create, fetch_body, led_elsewhere, values


def produce_body(topic: str | uuid.UUID | None, version: int, *vals: bytes) -> dict[str, Any]:
    """A Produce body naming ``topic`` as ``version`` does: by name, or from v13 by id."""
    named = {"topic_id": topic} if version >= 13 else {"name": topic}
    return {"transactional_id": None, "acks": -1, "timeout": 10_000, "topic_data": [
        {**named, "partition_data": [{"index": 0, "records": build_simple(list(vals))}]}]}


def test_records_are_produced_by_topic_id() -> None:
    with running_broker() as node, WireClient(node.port) as c:
        topic_id = create(c, "by-id")
        answer = c.request(0, 13, produce_body(topic_id, 13, b"a", b"b"))
        (topic,) = answer.responses
        assert topic.topic_id == topic_id  # the answer names the topic by id as well
        (partition,) = topic.partition_responses
        assert (partition.error_code, partition.base_offset) == (ErrorCode.none, 0)
        (topic,) = c.request(1, 13, fetch_body(topic_id)).responses
        assert values(topic.partitions[0]) == [b"a", b"b"]


@pytest.mark.parametrize("version", range(10, 13))
def test_versions_10_to_12_still_name_topics(version: int) -> None:
    with running_broker() as node, WireClient(node.port) as c:
        topic_id = create(c, "by-name")
        answer = c.request(0, version, produce_body("by-name", version, b"v"))
        assert answer.responses[0].name == "by-name"
        assert answer.responses[0].partition_responses[0].error_code == ErrorCode.none
        assert answer.node_endpoints == ()  # nothing refused: no leader hints
        (topic,) = c.request(1, 13, fetch_body(topic_id)).responses
        assert values(topic.partitions[0]) == [b"v"]


def test_an_unknown_or_old_topic_id_is_unknown_topic_id_and_nothing_is_written() -> None:
    with running_broker(**{"metrics.listen": "127.0.0.1:0"}) as node, \
            WireClient(node.port) as c:
        for stranger in (uuid.uuid4(), None):  # None: the zero id
            (topic,) = c.request(0, 13, produce_body(stranger, 13, b"lost")).responses
            assert topic.topic_id == stranger
            assert topic.partition_responses[0].error_code == ErrorCode.unknown_topic_id
        assert node.broker.stats is not None and not node.broker.stats.topics

        # A producer holding a deleted topic's id must not write into the topic made
        # again under the same name.
        old = create(c, "remade")
        deleted = c.request(20, 6, {"topics": [{"name": "remade", "topic_id": None}],
                                    "timeout": 10_000})
        assert deleted.responses[0].error_code == ErrorCode.none
        new = create(c, "remade")
        (topic,) = c.request(0, 13, produce_body(old, 13, b"stale")).responses
        assert topic.partition_responses[0].error_code == ErrorCode.unknown_topic_id
        (topic,) = c.request(0, 13, produce_body(new, 13, b"fresh")).responses
        assert topic.partition_responses[0].error_code == ErrorCode.none
        (topic,) = c.request(1, 13, fetch_body(new)).responses
        assert values(topic.partitions[0]) == [b"fresh"]


async def _not_led_here(cluster: MemoryCluster) -> None:
    leader, topic_id, conn = await led_elsewhere(cluster)
    try:
        answers = {v: await conn.request(PRODUCE, produce_body(
            topic_id if v >= 13 else "led-elsewhere", v, b"x"), version=v)
            for v in (9, 10, 13)}
    finally:
        await conn.close()
    epoch = cluster.brokers[leader].topology.partition_view("led-elsewhere", 0).leader_epoch
    for version in (10, 13):
        answer = answers[version]
        (partition,) = answer.responses[0].partition_responses
        assert partition.error_code == ErrorCode.not_leader_or_follower
        assert (partition.current_leader.leader_id,
                partition.current_leader.leader_epoch) == (leader, epoch)
        assert [(n.node_id, n.host, n.port) for n in answer.node_endpoints] == [
            (leader, *cluster.address(leader))]
    # Before v10 no hint: the client asks Metadata.
    (partition,) = answers[9].responses[0].partition_responses
    assert partition.error_code == ErrorCode.not_leader_or_follower


def test_v10_says_which_broker_leads_a_partition_not_led_here(tmp_path: Path) -> None:
    asyncio.run(with_cluster(tmp_path, _not_led_here))
