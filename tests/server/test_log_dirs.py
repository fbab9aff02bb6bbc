"""A broker with several log directories (``log.dirs``, JBOD), as an operator sees it:
partitions spread over them, DescribeLogDirs listing each, and AlterReplicaLogDirs
moving a partition's log to another directory while producers write to it and
consumers read it — nothing lost or repeated, the move surviving a restart and taking
up again after a stop in the middle. Kafka's own tools drive the same in the interop
tier (tests/interop/test_kafka_tools.py)."""

from __future__ import annotations

import asyncio
import os
import tempfile
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode

from odradek.client.aio import AsyncBrokerConnection
from odradek.client.codec import PRODUCE
from odradek.client.wire import WireClient
from odradek.records.builder import build_simple
from odradek.testing import RunningBroker, running_broker
from tests.server.memory_cluster import MemoryCluster, with_cluster

TIMEOUT = 10.0


@pytest.fixture
def root() -> Iterator[str]:
    with tempfile.TemporaryDirectory(prefix="odradek-jbod-") as tmp:
        yield tmp


def jbod(root: str, **settings: Any) -> Any:
    dirs = [os.path.join(root, "disk-a"), os.path.join(root, "disk-b")]
    return running_broker(os.path.join(root, "data"), **{"log.dirs": ",".join(dirs)},
                          **settings), dirs


def create(running: RunningBroker, name: str, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": running.bootstrap})
    admin.create_topics([NewTopic(name, partitions)])[name].result(TIMEOUT)


def produce(running: RunningBroker, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": running.bootstrap, "linger.ms": 5,
                         "enable.idempotence": True})
    for value in values:
        producer.produce(topic, value, partition=0)
    assert producer.flush(TIMEOUT) == 0


def consume_all(running: RunningBroker, topic: str, count: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": running.bootstrap, "group.id": "readers",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    try:
        while len(got) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                got.append(msg.value())
    finally:
        consumer.close()
    return got


def alter(wire: WireClient, moves: dict[str, list[tuple[str, int]]], version: int = 2
          ) -> dict[tuple[str, int], int]:
    body = {"dirs": [
        {"path": path, "topics": [{"name": t, "partitions": [p for tt, p in tps if tt == t]}
                                  for t in dict.fromkeys(t for t, _ in tps)]}
        for path, tps in moves.items()]}
    answer = wire.request(34, version, body)
    return {(t.topic_name, p.partition_index): p.error_code
            for t in answer.results for p in t.partitions}


def describe(wire: WireClient) -> dict[str, dict[tuple[str, int], Any]]:
    """Per log directory: (topic, partition) -> its entry (futures keyed with a '*')."""
    answer = wire.request(35, 5, {"topics": None})
    assert answer.error_code == 0
    return {r.log_dir: {(t.name if not p.is_future_key else t.name + "*", p.partition_index): p
                        for t in r.topics for p in t.partitions}
            for r in answer.results}


def wait_moved(running: RunningBroker, wire: WireClient, tp: tuple[str, int], to: str
               ) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if running.broker.logs.dir_of(*tp) == to and \
                running.broker.logs.future_dir_of(*tp) is None:
            return
        time.sleep(0.05)
    raise AssertionError(f"{tp} was not moved to {to}: {describe(wire)}")


def test_partitions_spread_over_the_log_directories_and_each_is_described(root):
    context, dirs = jbod(root)
    with context as node:
        create(node, "spread", partitions=4)
        wire = WireClient(node.port)
        try:
            described = describe(wire)
        finally:
            wire.close()
        assert list(described) == dirs  # in log.dirs' order, the data directory not one
        placed = {d: sorted(p for t, p in entries if t == "spread")
                  for d, entries in described.items()}
        assert sorted(placed[dirs[0]] + placed[dirs[1]]) == [0, 1, 2, 3]
        assert abs(len(placed[dirs[0]]) - len(placed[dirs[1]])) <= 1
        for d, partitions in placed.items():
            for p in partitions:
                assert os.path.isdir(os.path.join(d, f"spread-{p}"))
        # The broker's own files stay in its data directory.
        assert not os.path.exists(os.path.join(dirs[0], "meta.properties"))


def test_a_partition_moves_while_it_is_produced_to_and_nothing_is_lost(root):
    # Throttled, so the move is still copying while the producer writes.
    context, dirs = jbod(root, **{"replica.alter.log.dirs.io.max.bytes.per.second": 1 << 20})
    with context as node:
        create(node, "moving")
        logs = node.broker.logs
        first = [f"before-{i:05d}".encode().ljust(1000, b".") for i in range(3000)]
        produce(node, "moving", first)
        source = logs.dir_of("moving", 0)
        target = next(d for d in dirs if d != source)
        during = [f"during-{i:05d}".encode() for i in range(2000)]
        writer = threading.Thread(target=produce, args=(node, "moving", during))
        wire = WireClient(node.port)
        try:
            assert alter(wire, {target: [("moving", 0)]}) == {("moving", 0): 0}
            writer.start()
            seen_future = describe(wire)[target].get(("moving*", 0))
            writer.join()
            wait_moved(node, wire, ("moving", 0), target)
            after = describe(wire)
        finally:
            wire.close()
        assert seen_future is not None and seen_future.partition_size >= 0
        assert ("moving", 0) in after[target] and ("moving", 0) not in after[source]
        assert not any(name.startswith("moving-0") for name in os.listdir(source))
        assert consume_all(node, "moving", 5000) == first + during
        end = logs.get_log("moving", 0).log_end_offset
    context, _ = jbod(root)
    with context as again:  # where it moved to, after a restart
        assert again.broker.logs.dir_of("moving", 0) == target
        assert again.broker.logs.get_log("moving", 0).log_end_offset == end


def test_a_move_stopped_half_way_takes_up_again_at_the_next_start(root):
    context, dirs = jbod(root, **{"replica.alter.log.dirs.io.max.bytes.per.second": 50_000})
    with context as node:
        create(node, "halfway")
        values = [f"r{i:05d}".encode().ljust(500, b".") for i in range(2000)]
        produce(node, "halfway", values)
        source = node.broker.logs.dir_of("halfway", 0)
        target = next(d for d in dirs if d != source)
        wire = WireClient(node.port)
        try:
            assert alter(wire, {target: [("halfway", 0)]}) == {("halfway", 0): 0}
            time.sleep(0.5)
            assert node.broker.logs.future_dir_of("halfway", 0) == target
        finally:
            wire.close()
    context, _ = jbod(root)  # unthrottled now
    with context as again:
        wire = WireClient(again.port)
        try:
            wait_moved(again, wire, ("halfway", 0), target)
        finally:
            wire.close()
        assert consume_all(again, "halfway", 2000) == values


def test_alter_replica_log_dirs_answers_what_kafka_answers(root):
    context, dirs = jbod(root, **{"replica.alter.log.dirs.io.max.bytes.per.second": 1000})
    with context as node:
        create(node, "t", partitions=2)
        long_name = "x" * 220  # a valid topic name, too long for its future directory
        create(node, long_name)
        logs = node.broker.logs
        home = logs.dir_of("t", 0)
        other = next(d for d in dirs if d != home)
        for _ in range(5):  # batches of 4 kB: a step each, 4 s apart at 1,000 bytes/s
            produce(node, "t", [b"x" * 1000] * 4)
        wire = WireClient(node.port)
        try:
            codes = alter(wire, {os.path.join(root, "not-a-log-dir"): [("t", 1)],
                                 other: [("t", 0), ("later", 0), (long_name, 0)]}, version=1)
            assert codes == {("t", 1): ErrorCode.log_dir_not_found,
                             ("t", 0): ErrorCode.none,
                             ("later", 0): ErrorCode.unknown_topic_or_partition,
                             (long_name, 0): ErrorCode.invalid_topic_exception}
            assert logs.future_dir_of("t", 0) == other
            # Asking for the directory it is in abandons the move.
            assert alter(wire, {home: [("t", 0)]}) == {("t", 0): ErrorCode.none}
            assert logs.future_dir_of("t", 0) is None and logs.dir_of("t", 0) == home
            assert not any(n.endswith("-future") for n in os.listdir(other))
            # The directory named before the partition existed is where it is made.
            create(node, "later")
            assert logs.dir_of("later", 0) == other
        finally:
            wire.close()


# --- in a replicated cluster -------------------------------------------------------------


def test_in_a_cluster_the_leaders_and_a_followers_logs_move_while_acks_all_produces_go_on(
        tmp_path):
    """Three brokers with two log directories each (tests/server/memory_cluster.py): the
    leader's log and a follower's move to their other directory while acks=all produces
    go on; every acknowledged record is on every replica afterwards, in the new
    directories, and the leader keeps leading (a move is not a leadership change)."""
    async def body(cluster: MemoryCluster) -> None:
        await cluster.create_topic("rep")
        leader = cluster.leader("rep", 0)
        follower = next(n for n in cluster.brokers if n != leader)
        logs = {n: cluster.brokers[n].logs for n in (leader, follower)}
        targets = {}
        for n, manager in logs.items():
            assert manager is not None
            targets[n] = next(d for d in manager.log_dirs if d != manager.dir_of("rep", 0))
        host, port = cluster.address(leader)
        conn = await AsyncBrokerConnection.open(host, port, client_id="t", timeout_s=30)
        acked = 0
        try:
            async def produce(values: list[bytes]) -> None:
                nonlocal acked
                answer = await conn.request(PRODUCE, {
                    "transactional_id": None, "acks": -1, "timeout": 10_000,
                    "topic_data": [{"name": "rep", "partition_data": [
                        {"index": 0, "records": build_simple(values)}]}]})
                result = answer.responses[0].partition_responses[0]
                assert result.error_code == ErrorCode.none
                acked += len(values)

            for i in range(200):
                await produce([b"before-%d" % i] * 10)
            for n in (leader, follower):
                moves = cluster.brokers[n].log_dir_moves
                assert moves.alter("rep", 0, targets[n]) == ErrorCode.none
            for i in range(100):  # while they move (each a step at a time)
                await produce([b"during-%d" % i] * 10)
            await cluster.wait_for(lambda: all(
                logs[n].dir_of("rep", 0) == targets[n] and logs[n].future_dir_of("rep", 0)
                is None for n in logs), "both moves to finish")
            for i in range(50):
                await produce([b"after-%d" % i] * 10)
        finally:
            await conn.close()
        assert cluster.leader("rep", 0) == leader
        await cluster.wait_for(lambda: all(
            b.logs.get_log("rep", 0).log_end_offset == acked for b in cluster.running()),
            "every replica to have every acknowledged record")
        for n in (leader, follower):
            part = cluster.brokers[n].cluster.replicas.partitions[("rep", 0)]
            assert part.log is logs[n].get_log("rep", 0)  # the partition took the new log
            assert part.log.directory.startswith(targets[n])

    asyncio.run(with_cluster(tmp_path, body, log_dirs=2,
                             **{"replica.alter.log.dirs.io.max.bytes.per.second": 20_000}))
