"""Corrupt znodes in a real ZooKeeper (issue 21): a broker that reads another broker's
(or a zkCli hand's) malformed znode logs one ERROR line naming its path, treats that
entry as absent, and keeps serving everything else to real clients; no watch callback,
controller event or broker dies of it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.cluster_processes import Cluster, run_cluster
from tests.zookeeper import ZooKeeperServer

pytestmark = pytest.mark.cluster


@pytest.fixture
def pair(zookeeper: ZooKeeperServer, tmp_path: Path):  # type: ignore[no-untyped-def]
    """Two brokers (enough for a controller, followers and a leader to move; quicker to
    start than three on a busy machine)."""
    zookeeper.ensure_running()
    with run_cluster(zookeeper, tmp_path, size=2, **{"default.replication.factor": 2}) as c:
        yield c


def round_trip(cluster: Cluster, topic: str, value: bytes) -> None:
    """Produce one record with acks=all and read it back from the start of every
    partition, both through confluent-kafka."""
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    producer.produce(topic, value)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "unused",
                         "enable.auto.commit": False})
    # Assigned, not subscribed: no group (and no __consumer_offsets) in the way.
    partitions = AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics(
        topic, timeout=10).topics[topic].partitions
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
    try:
        for _ in range(60):
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error() and msg.value() == value:
                return
    finally:
        consumer.close()
    raise AssertionError(f"{value!r} not read back from {topic}")


def error_lines(cluster: Cluster, path: str) -> dict[int, list[str]]:
    """Each running broker's log lines naming ``path``."""
    return {node: [line for line in b.process.output().splitlines() if path in line]
            for node, b in cluster.brokers.items() if b.process is not None}


def assert_one_line_errors(cluster: Cluster, path: str, *, everyone: bool = True) -> None:
    """Every broker (or, not ``everyone``, one) logs ERROR lines naming ``path``, with
    no traceback, and runs on."""
    check = all if everyone else any
    cluster.wait_for(lambda: check(error_lines(cluster, path).values()), 20,
                     f"{'every' if everyone else 'a'} broker logging {path}")
    for node, lines in error_lines(cluster, path).items():
        assert all(re.match(r"ERROR \S+: ", line) for line in lines), (node, lines)
        output = cluster.brokers[node].process.output()  # type: ignore[union-attr]
        assert "Traceback" not in output, f"broker {node} logged a traceback:\n{output}"
        assert cluster.brokers[node].running


def test_a_garbage_topic_znode_is_ignored_and_the_other_topics_served(pair: Cluster) -> None:
    pair.create_topic("good", partitions=2, rf=2)
    round_trip(pair, "good", b"before")
    with pair.zk() as client:
        # A TypeError in the metadata cache's watch before (a traceback per change).
        client.create("/brokers/topics/garbage", b'{"partitions":{"0":5}}')
        client.create("/brokers/topics/binary", b"\xff\xfe\x00 not even UTF-8")
    assert_one_line_errors(pair, "/brokers/topics/garbage")
    assert_one_line_errors(pair, "/brokers/topics/binary")
    round_trip(pair, "good", b"after")
    topics = AdminClient({"bootstrap.servers": pair.bootstrap}).list_topics(timeout=10).topics
    assert "good" in topics and "garbage" not in topics and "binary" not in topics
    # A topic created after the garbage is placed, led and served as ever.
    pair.create_topic("later", partitions=1, rf=2)
    round_trip(pair, "later", b"new")


def test_a_garbage_partition_state_leaves_that_partition_alone_and_the_rest_moves(
        pair: Cluster) -> None:
    # Both led by broker 1 (their preferred replica), so stopping it makes the controller
    # move both, in one event.
    admin = AdminClient({"bootstrap.servers": pair.bootstrap})
    created = admin.create_topics([NewTopic(t, 1, replica_assignment=[[1, 2]])
                                   for t in ("good", "bad")], operation_timeout=30)
    for future in created.values():
        future.result(timeout=60)
    pair.wait_for(lambda: pair.leader("good") == pair.leader("bad") == 1, 20, "leader 1")
    pair.wait_for_full_isr("good", 1)
    path = "/brokers/topics/bad/partitions/0/state"
    with pair.zk() as client:
        # A ValueError out of the controller's event before: the event ended there.
        client.set(path, b'{"leader":"one","leader_epoch":0,"isr":[1,2]}')
    assert_one_line_errors(pair, path)
    pair.stop(1)
    pair.wait_for(lambda: pair.leader("good") == 2, 20, "broker 2 leading good")
    round_trip(pair, "good", b"after the move")
    # The controller (broker 2 now, or before) read the corrupt state fresh, said so in
    # one line, and left it as it was.
    assert any("controller: leaving bad-0 alone" in line
               for line in error_lines(pair, path)[2]), error_lines(pair, path)
    with pair.zk() as client:
        assert client.get(path)[0].startswith(b'{"leader":"one"')


def test_a_garbage_controller_epoch_holds_elections_off_until_it_is_fixed(
        pair: Cluster) -> None:
    with pair.zk() as client:
        client.set("/controller_epoch", b"not a number")
        client.delete("/controller")  # an election now, on the garbage epoch
    assert_one_line_errors(pair, "/controller_epoch", everyone=False)  # the winner
    # Every broker is still up, and serves what it has; fixed, an election succeeds
    # (within the 10 s a winner waits before it gives a failed election up).
    with pair.zk() as client:
        client.set("/controller_epoch", b"41")
    pair.wait_for(lambda: pair.controller() in (1, 2), 20, "a controller")
    with pair.zk() as client:
        pair.wait_for(lambda: client.get("/controller_epoch")[0] == b"42", 20, "epoch 42")
    pair.create_topic("after", partitions=1, rf=2)  # the controller places it
    round_trip(pair, "after", b"elected")
