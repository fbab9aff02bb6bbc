"""When every in-sync replica is gone: a partition stays offline until one of them comes
back, unless its topic enables unclean leader election, which then gives it to a live
replica outside the ISR (losing what only the ISR had, as the operator chose)."""

from __future__ import annotations

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, ConfigResource
from kafka.admin import KafkaAdminClient, NewTopic

from tests.cluster_processes import SESSION_TIMEOUT_MS, Cluster

pytestmark = pytest.mark.cluster

WAIT_S = SESSION_TIMEOUT_MS / 1000 + 20


def test_no_leader_outside_the_isr_unless_the_topic_allows_it(cluster: Cluster) -> None:
    # Leader 1, follower 2 (kafka-python's admin: confluent-kafka 2.16 refuses replica
    # assignments).
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap.split(","))
    try:
        admin.create_topics([NewTopic(name, num_partitions=-1, replication_factor=-1,
                                      replica_assignments={0: [1, 2]})
                             for name in ("careful", "careless")], timeout_ms=30_000)
    finally:
        admin.close()
    cluster.wait_for(lambda: cluster.isr("careful") == cluster.isr("careless") == [1, 2],
                     30, "both replicas in sync")
    cluster.kill(2)
    cluster.wait_for(lambda: cluster.isr("careful") == cluster.isr("careless") == [1],
                     WAIT_S, "the follower out of the ISRs")
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": 1})
    for topic in ("careful", "careless"):
        for i in range(10):
            producer.produce(topic, f"only-on-1-{i}".encode())
    assert producer.flush(30) == 0
    cluster.kill(1)
    cluster.wait_for(lambda: cluster.leader("careful") == cluster.leader("careless") == -1,
                     WAIT_S, "both partitions offline")

    cluster.start_broker(2)  # not in either ISR
    alter = AdminClient({"bootstrap.servers": cluster.brokers[2].bootstrap})
    resource = ConfigResource("topic", "careless",
                              set_config={"unclean.leader.election.enable": "true"})
    alter.alter_configs([resource])[resource].result(30)
    cluster.wait_for(lambda: cluster.leader("careless") == 2, 30, "an unclean election")
    assert cluster.leader("careful") == -1, "elected outside the ISR without being allowed"
    assert cluster.isr("careful") == [1]

    cluster.start_broker(1)  # the ISR member returns: it leads the careful topic again
    cluster.wait_for(lambda: cluster.leader("careful") == 1, WAIT_S, "the clean leader back")
    cluster.wait_for(lambda: cluster.isr("careful") == [1, 2], 60, "careful in sync")
    cluster.wait_for(lambda: cluster.isr("careless") == [1, 2], 60, "careless in sync")
    # The careless topic lost what only broker 1 had: its log now follows broker 2's.
    assert cluster.log_bytes(1, "careless", 0) == cluster.log_bytes(2, "careless", 0) == b""
    assert b"only-on-1-9" in cluster.log_bytes(1, "careful", 0)
