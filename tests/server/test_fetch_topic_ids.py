"""Fetch v13-v18 names topics by id (KIP-516), in-process: records read by a topic's id,
an unknown id answered UNKNOWN_TOPIC_ID (also after the topic was deleted and made again
under the same name), fetch sessions kept and trimmed by id, and from v16 KIP-951's
current leader and its endpoint where a partition is not led here. Answers decoded by
kio, as a client would. Real clients: librdkafka (Fetch v16) and the Java client (v18)
in tests/interop."""

from __future__ import annotations

import asyncio
import datetime
import uuid
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from odradek.client.aio import AsyncBrokerConnection
from odradek.client.codec import FETCH
from odradek.client.wire import WireClient
from odradek.records.builder import build_simple, decode_batches
from odradek.testing import running_broker
from tests.server.memory_cluster import MemoryCluster, with_cluster

VERSIONS = range(13, 19)


def fetch_body(topic_id: uuid.UUID, offset: int = 0, *, session_id: int = 0,
               session_epoch: int = -1, forgotten: list[uuid.UUID] | None = None,
               partitions: tuple[int, ...] = (0,), max_wait_ms: int = 0) -> dict[str, Any]:
    return {
        "replica_id": -1, "max_wait": datetime.timedelta(milliseconds=max_wait_ms),
        "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
        "session_id": session_id, "session_epoch": session_epoch,
        "topics": [{"topic_id": topic_id, "partitions": [
            {"partition": p, "current_leader_epoch": -1, "fetch_offset": offset,
             "last_fetched_epoch": -1, "log_start_offset": -1,
             "partition_max_bytes": 1 << 20} for p in partitions]}],
        "forgotten_topics_data": [{"topic_id": t, "partitions": [0]}
                                  for t in forgotten or []],
        "rack_id": ""}


def values(partition: Any) -> list[bytes]:
    return [r.value for b in decode_batches(bytes(partition.records or b""))
            for r in b.records]


def produce(c: WireClient, topic: str, *vals: bytes) -> None:
    answer = c.request(0, 9, {"transactional_id": None, "acks": -1, "timeout": 10_000,
                              "topic_data": [{"name": topic, "partition_data": [
                                  {"index": 0, "records": build_simple(list(vals))}]}]})
    assert answer.responses[0].partition_responses[0].error_code == ErrorCode.none


def create(c: WireClient, name: str) -> uuid.UUID:
    answer = c.request(19, 7, {"topics": [{"name": name, "num_partitions": 1,
                                           "replication_factor": 1, "assignments": [],
                                           "configs": []}],
                               "timeout": 10_000, "validate_only": False})
    assert answer.topics[0].error_code == ErrorCode.none
    return answer.topics[0].topic_id


@pytest.mark.parametrize("version", VERSIONS)
def test_records_are_fetched_by_topic_id(version: int) -> None:
    with running_broker() as node, WireClient(node.port) as c:
        topic_id = create(c, "by-id")
        produce(c, "by-id", b"a", b"b")
        answer = c.request(1, version, fetch_body(topic_id))
        assert answer.error_code == ErrorCode.none
        (topic,) = answer.responses
        assert topic.topic_id == topic_id
        (partition,) = topic.partitions
        assert (partition.error_code, partition.high_watermark) == (ErrorCode.none, 2)
        assert values(partition) == [b"a", b"b"]


def test_an_unknown_topic_id_is_unknown_topic_id_and_a_remade_topic_has_a_new_one() -> None:
    with running_broker(**{"metrics.listen": "127.0.0.1:0"}) as node, \
            WireClient(node.port) as c:
        stranger = uuid.uuid4()
        (topic,) = c.request(1, 13, fetch_body(stranger)).responses
        assert topic.topic_id == stranger
        assert topic.partitions[0].error_code == ErrorCode.unknown_topic_id
        assert stranger not in node.broker.metadata.names_by_id
        # no per-topic metrics under the id's stand-in (garbage ids make no series)
        assert node.broker.stats is not None and not node.broker.stats.topics

        old = create(c, "remade")
        produce(c, "remade", b"old")
        deleted = c.request(20, 6, {"topics": [{"name": "remade", "topic_id": None}],
                                    "timeout": 10_000})
        assert deleted.responses[0].error_code == ErrorCode.none
        new = create(c, "remade")
        assert new != old
        produce(c, "remade", b"new")
        (topic,) = c.request(1, 16, fetch_body(old)).responses
        assert topic.partitions[0].error_code == ErrorCode.unknown_topic_id
        (topic,) = c.request(1, 16, fetch_body(new)).responses
        assert (topic.topic_id, values(topic.partitions[0])) == (new, [b"new"])


def test_a_fetch_session_is_kept_and_trimmed_by_topic_id() -> None:
    with running_broker() as node, WireClient(node.port) as c:
        first, second = create(c, "s-1"), create(c, "s-2")
        produce(c, "s-1", b"x")
        full = fetch_body(first, session_epoch=0, offset=1)  # s-1 read up to its end
        full["topics"].append(fetch_body(second)["topics"][0])
        opened = c.request(1, 15, full)
        assert opened.session_id > 0
        assert {t.topic_id for t in opened.responses} == {first, second}
        assert all(values(t.partitions[0]) == [] for t in opened.responses)

        # Incremental: nothing named, nothing new: nothing answered.
        quiet = fetch_body(first, session_id=opened.session_id, session_epoch=1)
        quiet["topics"] = []
        assert c.request(1, 15, quiet).responses == ()
        # New records in s-2 come back under its id; then s-2 is forgotten by id.
        produce(c, "s-2", b"y")
        quiet["session_epoch"] = 2
        (topic,) = c.request(1, 15, quiet).responses
        assert (topic.topic_id, values(topic.partitions[0])) == (second, [b"y"])
        forget = fetch_body(first, session_id=opened.session_id, session_epoch=3,
                            forgotten=[second], offset=1)
        forget["topics"] = []
        c.request(1, 15, forget)
        session = node.broker.fetch_sessions.get(opened.session_id)
        assert session is not None and set(session.partitions) == {("s-1", 0)}


async def led_elsewhere(cluster: MemoryCluster
                        ) -> tuple[int, uuid.UUID, AsyncBrokerConnection]:
    """A topic "led-elsewhere" of one replica: its leader, its id, and a connection to a
    broker that does not lead it."""
    await cluster.create_topic("led-elsewhere", replication_factor=1)
    leader = cluster.leader("led-elsewhere", 0)
    other = next(n for n in cluster.brokers if n != leader)
    topic = cluster.brokers[leader].topic("led-elsewhere")
    assert topic is not None
    host, port = cluster.address(other)
    conn = await AsyncBrokerConnection.open(host, port, client_id="test", timeout_s=30)
    return leader, topic.topic_id, conn


async def _not_led_here(cluster: MemoryCluster) -> None:
    leader, topic_id, conn = await led_elsewhere(cluster)
    try:
        body = fetch_body(topic_id)
        answer = await conn.request(FETCH, body, version=16)
        before = await conn.request(FETCH, body, version=15)
    finally:
        await conn.close()
    (partition,) = answer.responses[0].partitions
    assert partition.error_code == ErrorCode.not_leader_or_follower
    epoch = cluster.brokers[leader].topology.partition_view("led-elsewhere", 0).leader_epoch
    assert (partition.current_leader.leader_id, partition.current_leader.leader_epoch) == (
        leader, epoch)
    assert [(n.node_id, n.host, n.port) for n in answer.node_endpoints] == [
        (leader, *cluster.address(leader))]
    # Before v16 no hint: the client asks Metadata.
    assert before.responses[0].partitions[0].error_code == ErrorCode.not_leader_or_follower


def test_v16_says_which_broker_leads_a_partition_not_led_here(tmp_path: Path) -> None:
    asyncio.run(with_cluster(tmp_path, _not_led_here))
