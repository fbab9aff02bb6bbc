"""Failures of brokers under a steady acks=all load from two clients (librdkafka and
kafka-python), each test ending in the same Jepsen-style check: every acknowledged
record is in the log exactly once, at the offset it was acknowledged at, in order; and
after a clean stop every replica's log is byte-identical."""

from __future__ import annotations

import time

import pytest

from tests.cluster_processes import SESSION_TIMEOUT_MS, Cluster
from tests.faults.workload import check, start_producer, stop_producers

pytestmark = pytest.mark.cluster

TOPIC = "jepsen"
PARTITIONS = 3


def _load(cluster: Cluster) -> list:
    cluster.create_topic(TOPIC, PARTITIONS, 3, **{"min.insync.replicas": "2"})
    runs = [start_producer(cluster.bootstrap, TOPIC, PARTITIONS, "rdkafka"),
            start_producer(cluster.bootstrap, TOPIC, PARTITIONS, "kpy", "kafka-python")]
    time.sleep(2)  # records flowing before the fault
    return runs


def _finish(cluster: Cluster, runs: list, minimum_acked: int = 200) -> None:
    cluster.wait_for_full_isr(TOPIC, PARTITIONS, 90)
    time.sleep(1)
    stop_producers(*runs)
    report = check(cluster.bootstrap, *runs)
    report.assert_consistent()
    assert report.acked >= minimum_acked, report
    cluster.stop_all_and_compare_replicas(TOPIC, PARTITIONS)


def test_kill_9_of_a_leader_loses_no_acknowledged_record(cluster: Cluster) -> None:
    runs = _load(cluster)
    victim = cluster.leader(TOPIC, 0)
    cluster.kill(victim)
    cluster.wait_for(lambda: cluster.leader(TOPIC, 0) not in (victim, -1),
                     SESSION_TIMEOUT_MS / 1000 + 15, "a new leader")
    time.sleep(2)  # writes go on to the new leader
    cluster.start_broker(victim)
    _finish(cluster, runs)


def test_a_follower_killed_and_restarted_catches_up_and_rejoins_the_isr(
        cluster: Cluster) -> None:
    runs = _load(cluster)
    leader = cluster.leader(TOPIC, 0)
    follower = next(b for b in cluster.isr(TOPIC, 0) if b != leader)
    cluster.kill(follower)
    cluster.wait_for(lambda: follower not in cluster.isr(TOPIC, 0),
                     SESSION_TIMEOUT_MS / 1000 + 15, "the dead follower out of the ISR")
    time.sleep(3)  # it falls behind
    cluster.start_broker(follower)
    _finish(cluster, runs)


def test_a_paused_leader_past_its_session_acknowledges_nothing_it_then_loses(
        cluster: Cluster) -> None:
    runs = _load(cluster)
    victim = cluster.leader(TOPIC, 0)
    cluster.pause(victim)
    try:
        cluster.wait_for(lambda: cluster.leader(TOPIC, 0) not in (victim, -1),
                         SESSION_TIMEOUT_MS / 1000 + 15, "a new leader")
        time.sleep(2)
    finally:
        cluster.resume(victim)  # a zombie: it still thinks it leads, for a moment
    _finish(cluster, runs)


def test_zookeeper_down_for_a_while_elects_nobody_and_loses_nothing(cluster: Cluster) -> None:
    runs = _load(cluster)
    leaders = {p: cluster.leader(TOPIC, p) for p in range(PARTITIONS)}
    cluster.zookeeper.stop()
    time.sleep(SESSION_TIMEOUT_MS / 1000 + 2)  # longer than a session: kept on restart
    cluster.zookeeper.start()
    time.sleep(2)
    assert {p: cluster.leader(TOPIC, p) for p in range(PARTITIONS)} == leaders
    assert all(b.running for b in cluster.brokers.values())
    _finish(cluster, runs)
