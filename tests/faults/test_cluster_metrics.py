"""A cluster's health in its metrics (issue 19): three brokers with ``metrics.listen``,
a topic with three replicas. The controller counts itself once; the partitions, their
leaders and their replicas add up across brokers; stopping a broker makes the
partitions its replica is missing from under-replicated on their leaders, and its
restart brings the count back to zero once it has caught up - when its /readyz says
ready. The leaders count those ISR changes: each partition a live broker led lost
broker 3 from its ISR once (a shrink), and every partition took it back once (an
expansion). An acks=all produce spends its wait for the followers in remote time."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.cluster_processes import run_cluster
from tests.interop.test_metrics import scrape
from tests.zookeeper import ZooKeeperServer

pytestmark = pytest.mark.cluster

PARTITIONS = 3


def gauge(cluster, node: int, name: str) -> float:  # type: ignore[no-untyped-def]
    return scrape(cluster.brokers[node].metrics_url())[(name, ())]


def total(cluster, nodes, name: str) -> float:  # type: ignore[no-untyped-def]
    return sum(gauge(cluster, n, name) for n in nodes)


def counter(cluster, nodes, name: str) -> float:  # type: ignore[no-untyped-def]
    """A counter's sum over ``nodes`` (0 where a broker has not reported it yet)."""
    return sum(scrape(cluster.brokers[n].metrics_url()).get((name, ()), 0)
               for n in nodes)


SHRINKS = "kafka_server_replicamanager_isrshrinks_total"
EXPANDS = "kafka_server_replicamanager_isrexpands_total"


def ready(cluster, node: int) -> bool:  # type: ignore[no-untyped-def]
    url = cluster.brokers[node].metrics_url().removesuffix("/metrics") + "/readyz"
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            return answer.status == 200
    except urllib.error.HTTPError as exc:
        assert exc.code == 503 and b"not ready" in exc.read()
        return False


def eventually(check, what: str, timeout_s: float = 60) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"not in time: {what}"
        time.sleep(0.3)


def test_partition_health_adds_up_and_follows_a_broker_stop(zookeeper: ZooKeeperServer,
                                                            tmp_path: Path) -> None:
    zookeeper.ensure_running()
    with run_cluster(zookeeper, tmp_path, **{"metrics.listen": "127.0.0.1:0"}) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics([NewTopic("watched", PARTITIONS, 3)])["watched"].result(60)
        nodes = [1, 2, 3]
        eventually(lambda: total(cluster, nodes, "kafka_server_replicamanager_leadercount")
                   >= PARTITIONS, "the topic's leaders elected")
        assert total(cluster, nodes,
                     "kafka_controller_kafkacontroller_activecontrollercount") == 1
        eventually(lambda: total(cluster, nodes,
                                 "kafka_server_replicamanager_underreplicatedpartitions") == 0,
                   "every replica in sync")
        replicas = total(cluster, nodes, "kafka_server_replicamanager_partitioncount")
        leaders = total(cluster, nodes, "kafka_server_replicamanager_leadercount")
        assert replicas == 3 * leaders  # every partition (internal ones too) on all three

        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
        for i in range(PARTITIONS * 5):
            producer.produce("watched", b"replicated", partition=i % PARTITIONS)
        assert producer.flush(60) == 0
        produce_remote = (("request", "Produce"),)
        waited = sum(scrape(cluster.brokers[n].metrics_url()).get(
            ("kafka_network_requestmetrics_remotetimems_sum", produce_remote), 0)
            for n in nodes)
        assert waited > 0  # acks=all: each answer waited for two followers' fetches

        live = [1, 2]
        led_by_live = total(cluster, live, "kafka_server_replicamanager_leadercount")
        shrinks, expands = counter(cluster, nodes, SHRINKS), counter(cluster, nodes, EXPANDS)
        cluster.stop_broker(3)
        eventually(lambda: total(cluster, live,
                                 "kafka_server_replicamanager_underreplicatedpartitions")
                   == total(cluster, live, "kafka_server_replicamanager_leadercount"),
                   "every partition under-replicated without broker 3")
        assert total(cluster, live, "kafka_controller_kafkacontroller_offlinepartitionscount") == 0
        # The partitions broker 3 led moved to new leaders (not a shrink of theirs);
        # those 1 and 2 led lost broker 3 from their ISRs.
        assert counter(cluster, live, SHRINKS) - shrinks == led_by_live > 0
        assert counter(cluster, live, EXPANDS) == expands

        cluster.start_broker(3)
        eventually(lambda: ready(cluster, 3), "broker 3 ready (back in every ISR)")
        eventually(lambda: total(cluster, nodes,
                                 "kafka_server_replicamanager_underreplicatedpartitions") == 0,
                   "no partition under-replicated after the restart")
        # Every partition took broker 3 back into its ISR once (broker 3 restarted with
        # fresh counters: it led nothing while out of the ISRs).
        assert counter(cluster, nodes, EXPANDS) - expands == leaders
        assert counter(cluster, nodes, SHRINKS) - shrinks == led_by_live
