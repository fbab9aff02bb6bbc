"""``odradek.testing``'s cluster for users' own tests: the ``odradek_cluster`` pytest
fixture (as the installed plugin registers it) and ``running_cluster``, with real
clients, a real ZooKeeper and real broker processes."""

from __future__ import annotations

import json
import os
import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient

from odradek.testing import RunningCluster, running_cluster

WAIT_S = 60.0


def registered(cluster: RunningCluster) -> list[int]:
    """The broker ids registered in the cluster's ZooKeeper (through its chroot)."""
    zk = KazooClient(hosts=cluster.zookeeper_connect, timeout=10)
    zk.start(timeout=10)
    try:
        return sorted(int(b) for b in zk.get_children("/brokers/ids"))
    finally:
        zk.stop()
        zk.close()


def produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                         "message.timeout.ms": 60000})
    failures: list[str] = []
    for value in values:
        producer.produce(topic, value, on_delivery=lambda err, _msg: err is None
                         or failures.append(err.str()))
    assert producer.flush(90) == 0
    assert failures == []


def read(bootstrap: str, topic: str, count: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "fixture-test",
                         "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        values: list[bytes] = []
        deadline = time.monotonic() + WAIT_S
        while len(values) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                values.append(msg.value())
        return values
    finally:
        consumer.close()


def test_the_cluster_fixture_survives_a_stopped_broker(odradek_cluster: RunningCluster) -> None:
    cluster = odradek_cluster
    assert sorted(cluster.brokers) == [1, 2, 3]
    assert cluster.bootstrap == ",".join(b.bootstrap for b in cluster.brokers.values())
    assert registered(cluster) == [1, 2, 3]
    assert cluster.controller() in (1, 2, 3)
    assert cluster.cluster_id

    # Three replicas and min.insync.replicas=2 by default: one broker may be down.
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic("fixture", 1)], operation_timeout=30)["fixture"].result(60)
    topic = admin.list_topics("fixture", timeout=10).topics["fixture"]
    assert sorted(topic.partitions[0].replicas) == [1, 2, 3]
    produce(cluster.bootstrap, "fixture", [b"before"])

    leader = topic.partitions[0].leader
    stopped = cluster.brokers[leader]
    stopped.stop()
    assert not stopped.running
    assert registered(cluster) == sorted({1, 2, 3} - {leader})
    produce(cluster.bootstrap, "fixture", [b"during"])
    assert read(cluster.bootstrap, "fixture", 2) == [b"before", b"during"]

    stopped.start()  # the same port and data; it catches up
    assert stopped.running and registered(cluster) == [1, 2, 3]
    assert read(stopped.bootstrap, "fixture", 2) == [b"before", b"during"]


def test_running_cluster_stops_every_process_it_started() -> None:
    with running_cluster(brokers=1, **{"num.partitions": 2}) as cluster:
        pids = [b.pid for b in cluster.brokers.values()]
        with open(os.path.join(cluster.data_dir, "zookeeper", "zoo.cfg")) as f:
            assert "clientPortAddress=127.0.0.1" in f.read()
        # One broker: one replica of everything, internal topics included.
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics([NewTopic("one", replication_factor=-1)],
                            operation_timeout=30)["one"].result(60)
        partitions = admin.list_topics("one", timeout=10).topics["one"].partitions
        assert sorted(partitions) == [0, 1]
        assert all(p.replicas == [1] for p in partitions.values())
        zk = KazooClient(hosts=cluster.zookeeper_connect, timeout=10)
        zk.start(timeout=10)
        try:
            state = json.loads(zk.get("/brokers/topics/one/partitions/0/state")[0])
        finally:
            zk.stop()
            zk.close()
        assert state["isr"] == [1]
        data_dir = cluster.data_dir
    assert not os.path.exists(data_dir)  # the temporary directory went with it
    for pid in pids:
        assert pid is not None and not os.path.exists(f"/proc/{pid}")
