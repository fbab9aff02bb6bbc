"""Three brokers on ZooKeeper, no failures yet: registration, a controller, topics
placed over the brokers, acks=all writes replicated to every replica, and the replicas'
logs byte-identical after a clean stop."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient

from tests.cluster_processes import Cluster

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
    metadata = AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics(timeout=30)
    partitions = metadata.topics["orders"].partitions
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
    assert cluster.log_bytes(1, "orders", 0)


def test_a_replication_factor_above_the_brokers_is_refused(cluster: Cluster) -> None:
    with pytest.raises(KafkaException, match="INVALID_REPLICATION_FACTOR"):
        cluster.create_topic("too-many", rf=4)
