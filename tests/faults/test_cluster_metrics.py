"""A cluster's health in its metrics (issue 19): three brokers with ``metrics.listen``,
a topic with three replicas. The controller counts itself once; the partitions, their
leaders and their replicas add up across brokers; stopping a broker makes the
partitions its replica is missing from under-replicated on their leaders, and its
restart brings the count back to zero once it has caught up - when its /readyz says
ready."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.cluster_processes import run_cluster
from tests.interop.test_metrics import scrape
from tests.zookeeper import ZooKeeperServer

pytestmark = pytest.mark.cluster

PARTITIONS = 3


def gauge(cluster, node: int, name: str) -> float:  # type: ignore[no-untyped-def]
    return scrape(cluster.brokers[node].process.metrics_url())[(name, ())]


def total(cluster, nodes, name: str) -> float:  # type: ignore[no-untyped-def]
    return sum(gauge(cluster, n, name) for n in nodes)


def ready(cluster, node: int) -> bool:  # type: ignore[no-untyped-def]
    url = cluster.brokers[node].process.metrics_url().removesuffix("/metrics") + "/readyz"
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

        cluster.stop(3)
        live = [1, 2]
        eventually(lambda: total(cluster, live,
                                 "kafka_server_replicamanager_underreplicatedpartitions")
                   == total(cluster, live, "kafka_server_replicamanager_leadercount"),
                   "every partition under-replicated without broker 3")
        assert total(cluster, live, "kafka_controller_kafkacontroller_offlinepartitionscount") == 0

        cluster.start(3)
        eventually(lambda: ready(cluster, 3), "broker 3 ready (back in every ISR)")
        eventually(lambda: total(cluster, nodes,
                                 "kafka_server_replicamanager_underreplicatedpartitions") == 0,
                   "no partition under-replicated after the restart")
