"""Three brokers on ZooKeeper, no failures yet: registration, a controller, topics
placed over the brokers, acks=all writes replicated to every replica, and the replicas'
logs byte-identical after a clean stop."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewPartitions

from tests.cluster_processes import FAST_SETTINGS, Cluster
from tests.zookeeper import ZooKeeperServer

pytestmark = pytest.mark.cluster


def produce(cluster: Cluster, topic: str, values: list[bytes],
            **config: object) -> list[tuple[int, int]]:
    """Produce with an idempotent acks=all producer; (partition, offset) of each record."""
    acked: list[tuple[int, int]] = []
    errors: list[str] = []

    def delivered(err, msg) -> None:  # type: ignore[no-untyped-def]
        if err is not None:
            errors.append(str(err))
        else:
            acked.append((msg.partition(), msg.offset()))

    producer = Producer({"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True,
                         "acks": "all", "linger.ms": 5, **config})
    for value in values:
        producer.produce(topic, value, on_delivery=delivered)
        producer.poll(0)
    assert producer.flush(60) == 0
    assert not errors, errors
    return acked


def consume_all(cluster: Cluster, topic: str, expected: int, timeout_s: float = 60
                ) -> list[tuple[int, int, bytes]]:
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"g-{topic}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    out: list[tuple[int, int, bytes]] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(out) < expected and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            out.append((msg.partition(), msg.offset(), msg.value()))
    finally:
        consumer.close()
    return out


def test_brokers_register_and_one_becomes_controller(cluster: Cluster) -> None:
    assert cluster.live_brokers() == [1, 2, 3]
    cluster.wait_for(lambda: cluster.controller() in (1, 2, 3), 30, "a controller")
    metadata = AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics(timeout=30)
    assert sorted(metadata.brokers) == [1, 2, 3]
    assert metadata.controller_id == cluster.controller()


def test_a_topic_is_spread_over_the_brokers_and_every_replica_gets_every_record(
        cluster: Cluster) -> None:
    cluster.create_topic("orders", partitions=3, rf=3)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})

    def leaders_known() -> bool:
        # CreateTopics waits for the leaders on the broker that answered it; the one
        # answering Metadata may learn of them a moment later (the client retries too).
        found = admin.list_topics("orders", timeout=30).topics["orders"].partitions
        return all(p.leader >= 0 for p in found.values())

    cluster.wait_for(leaders_known, 30, "every partition of orders has a leader")
    partitions = admin.list_topics(timeout=30).topics["orders"].partitions
    assert sorted({p.leader for p in partitions.values()}) == [1, 2, 3]  # leaders spread
    for p in partitions.values():
        assert sorted(p.replicas) == [1, 2, 3] and sorted(p.isrs) == [1, 2, 3]

    values = [f"order-{i}".encode() for i in range(600)]
    acked = produce(cluster, "orders", values)
    assert len(acked) == 600
    read = consume_all(cluster, "orders", 600)
    assert sorted(v for _, _, v in read) == sorted(values)
    assert {(p, o) for p, o, _ in read} == set(acked)

    cluster.wait_for_full_isr("orders", 3)
    cluster.stop_all_and_compare_replicas("orders", 3)
    # (Keyless records may all land in one partition: the sticky partitioner.)
    assert sum(len(cluster.log_bytes(1, "orders", p)) for p in range(3)) > 600 * 9


def test_a_replication_factor_above_the_brokers_is_refused(cluster: Cluster) -> None:
    with pytest.raises(KafkaException, match="INVALID_REPLICATION_FACTOR"):
        cluster.create_topic("too-many", rf=4)


def test_a_second_broker_with_a_registered_node_id_is_refused(cluster: Cluster,
                                                              tmp_path: Path) -> None:
    settings = {**FAST_SETTINGS, "node.id": 2, "zookeeper.connect": cluster.zookeeper_connect}
    argv = [sys.executable, "-m", "odradek", "serve", "--listen", "127.0.0.1:0",
            "--data-dir", str(tmp_path / "impostor"),
            *(f"--override={k}={v}" for k, v in settings.items())]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "node.id 2 is already registered" in done.stderr
    assert cluster.live_brokers() == [1, 2, 3]  # the real broker 2 is untouched


def test_a_broker_waits_for_an_unreachable_zookeeper_and_joins_when_it_answers(
        zookeeper: ZooKeeperServer, tmp_path: Path) -> None:
    zookeeper.stop()
    try:
        cluster = Cluster(zookeeper, tmp_path, size=1,
                          settings={"zookeeper.connection.timeout.ms": 1000})
        cluster.brokers[1].data_dir.mkdir(parents=True)
        argv = [sys.executable, "-m", "odradek", "serve", "--listen", "127.0.0.1:0",
                "--data-dir", str(cluster.brokers[1].data_dir),
                *cluster.broker_args(1)]
        process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   stdin=subprocess.DEVNULL, text=True)
        try:
            time.sleep(4)
            assert process.poll() is None, "it gave up instead of retrying"
            zookeeper.start()
            cluster.wait_for(lambda: cluster.live_brokers() == [1], 30, "the registration")
        finally:
            process.send_signal(signal.SIGTERM)
            out, err = process.communicate(timeout=30)
        assert process.returncode == 0, out + err
        assert "unreachable" in err and "retrying" in err
    finally:
        zookeeper.ensure_running()


def test_sigterm_moves_leadership_away_before_the_broker_exits(cluster: Cluster) -> None:
    cluster.create_topic("handover", partitions=3, rf=3)
    cluster.wait_for_full_isr("handover", 3)
    leader = cluster.leader("handover", 0)
    cluster.stop_broker(leader)  # exit code 0 checked
    output = cluster.brokers[leader].output()
    assert "leadership moved off this broker" in output
    assert cluster.leader("handover", 0) not in (leader, -1)
    assert all(cluster.leader("handover", p) != leader for p in range(3))


def test_topics_grow_and_are_deleted_on_every_broker(cluster: Cluster) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    cluster.create_topic("short-lived", partitions=2, rf=3)
    admin.create_partitions([NewPartitions("short-lived", 4)])["short-lived"].result(60)
    # Answered once the broker that took the request sees leaders for all 4; every
    # broker's metadata follows from its own watch a moment later.
    for node in cluster.brokers:
        one = AdminClient({"bootstrap.servers": cluster.brokers[node].bootstrap})

        def grown(one: AdminClient = one) -> bool:
            partitions = one.list_topics("short-lived", timeout=10).topics[
                "short-lived"].partitions
            return sorted(partitions) == [0, 1, 2, 3] and all(
                p.leader in (1, 2, 3) and len(p.replicas) == 3 for p in partitions.values())

        cluster.wait_for(grown, 10, f"broker {node} seeing 4 partitions with leaders")
    cluster.wait_for_full_isr("short-lived", 4)
    dirs = [b.data_dir / f"short-lived-{p}" for b in cluster.brokers.values() for p in range(4)]
    assert all(d.is_dir() for d in dirs)

    admin.delete_topics(["short-lived"], operation_timeout=30)["short-lived"].result(60)
    assert "short-lived" not in admin.list_topics(timeout=30).topics
    cluster.wait_for(lambda: not any(d.exists() for d in dirs), 30,
                     "every replica's directory gone")
    assert cluster.state("short-lived", 0) is None
