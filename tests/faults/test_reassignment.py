"""Moving partitions and leadership with Kafka's admin APIs, on three (then four)
``odradek serve`` brokers: ElectLeaders (KIP-460) from confluent-kafka and kafka-python,
and partition reassignment (KIP-455) from kafka-python's admin client, while an
idempotent acks=all producer writes and loses nothing."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import TopicPartition as CTopicPartition
from confluent_kafka import ElectionType
from confluent_kafka.admin import AdminClient
from kafka import KafkaAdminClient
from kafka import TopicPartition as KTopicPartition
from kafka.errors import NoReassignmentInProgressError

from tests.cluster_processes import Cluster
from tests.faults.workload import check, start_producer, stop_producers

pytestmark = pytest.mark.slow


def _kafka_admin(cluster: Cluster) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=30_000)


def test_preferred_leader_election_puts_leadership_back(cluster: Cluster) -> None:
    """After a broker restarts, its partitions are led by others; ElectLeaders(PREFERRED)
    gives each back to its first replica, and says ELECTION_NOT_NEEDED the second time."""
    cluster.create_topic("elect", partitions=3, rf=3)
    cluster.wait_for_full_isr("elect", 3)
    run = start_producer(cluster.bootstrap, "elect", 3, "p")
    preferred = {p: r[0] for p, r in cluster.replicas("elect").items()}
    victim = preferred[0]
    cluster.stop(victim)
    cluster.wait_for(lambda: cluster.leader("elect", 0) not in (-1, victim), 30,
                     "leadership moved off the stopped broker")
    cluster.start(victim)
    cluster.wait_for_full_isr("elect", 3)
    assert cluster.leader("elect", 0) != victim  # auto-rebalance is too slow to have run

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    tps = [CTopicPartition("elect", p) for p in range(3)]
    results = admin.elect_leaders(ElectionType.PREFERRED, tps).result(timeout=60)
    moved = [tp.partition for tp, err in results.items() if err is None]
    assert 0 in moved, results
    assert all(cluster.leader("elect", p) == preferred[p] for p in range(3))

    # Nothing left to do: every partition answers ELECTION_NOT_NEEDED.
    again = admin.elect_leaders(ElectionType.PREFERRED, tps).result(timeout=60)
    assert {err.name() for err in again.values() if err is not None} == {"ELECTION_NOT_NEEDED"}
    assert len([e for e in again.values() if e is not None]) == 3

    stop_producers(run)
    check(cluster.bootstrap, run).assert_consistent()


def test_unclean_election_on_request_and_its_refusals(cluster: Cluster) -> None:
    """kafka-python's elect_leaders(UNCLEAN): a partition whose leader is alive needs
    none; a partition whose only ISR member is gone gets a leader outside the ISR."""
    cluster.create_topic("lonely", partitions=1, rf=2)
    replicas = cluster.replicas("lonely")[0]
    admin = _kafka_admin(cluster)
    try:
        answer = admin.elect_leaders(1, {"lonely": [0]}, raise_errors=False)
        errors = {p.partition_id: p.error_code for r in answer.replica_election_results
                  for p in r.partition_result}
        assert errors == {0: 84}  # ELECTION_NOT_NEEDED: its leader is alive

        # Shrink the ISR to the leader (the follower stops), then stop the leader too.
        leader, follower = replicas[0], replicas[1]
        cluster.wait_for(lambda: cluster.leader("lonely") == leader, 30, "preferred leads")
        cluster.stop(follower)
        cluster.wait_for(lambda: cluster.isr("lonely") == [leader], 30, "ISR of one")
        cluster.stop(leader)
        cluster.start(follower)
        cluster.wait_for(lambda: follower in cluster.live_brokers(), 30, "follower back")
        time.sleep(1)
        assert cluster.leader("lonely") == -1  # offline: unclean election is off
        answer = admin.elect_leaders(1, {"lonely": [0]}, raise_errors=False)
        errors = {p.partition_id: p.error_code for r in answer.replica_election_results
                  for p in r.partition_result}
        assert errors == {0: 0}, errors
        assert cluster.leader("lonely") == follower
        assert cluster.isr("lonely") == [follower]
    finally:
        admin.close()
    cluster.start(leader)


def _dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.glob("*.log")) if path.exists() else 0


def test_reassignment_moves_a_loaded_topic_to_a_new_broker(cluster: Cluster) -> None:
    """Kafka's add-a-broker story: a topic on brokers {1,2,3} moves to {2,3,4} while a
    producer writes. The new replica catches up, joins the ISR, the old one leaves and
    deletes its log; every acknowledged record is still there, and
    ListPartitionReassignments shows the move while it runs."""
    cluster.create_topic("moving", partitions=2, rf=3, **{"min.insync.replicas": "2"})
    cluster.wait_for_full_isr("moving", 2)
    run = start_producer(cluster.bootstrap, "moving", 2, "p", payload_bytes=1000)
    cluster.wait_for(lambda: len(run.acked) > 500, 60, "some records acknowledged")
    new = cluster.add_broker().node_id
    assert new == 4

    targets = {p: [2, 3, 4] for p in range(2)}
    admin = _kafka_admin(cluster)
    try:
        result = admin.alter_partition_reassignments(
            {KTopicPartition("moving", p): r for p, r in targets.items()})
        assert all(err is None for err in result.values()), result
        ongoing = admin.list_partition_reassignments()
        # Either still moving (listed with RS = target + origin) or done already.
        for tp, info in ongoing.items():
            assert tp.topic == "moving"
            assert info["adding_replicas"] == [4] and info["removing_replicas"] == [1]
            assert info["replicas"] == [2, 3, 4, 1]
        cluster.wait_for(lambda: all(cluster.replicas("moving")[p] == [2, 3, 4]
                                     for p in range(2)), 90, "the reassignment completed")
        assert admin.list_partition_reassignments() == {}
        for p in range(2):
            assert 1 not in cluster.isr("moving", p)
            assert cluster.leader("moving", p) in (2, 3, 4)
        # The old replica deletes its log; the new one holds the data.
        cluster.wait_for(lambda: not (cluster.brokers[1].data_dir / "moving-0").exists(), 30,
                         "broker 1 deleted its replica")
        assert _dir_bytes(cluster.brokers[4].data_dir / "moving-0") > 0

        # Cancelling when nothing moves is refused as Kafka refuses it.
        result = admin.alter_partition_reassignments({KTopicPartition("moving", 0): None})
        assert result[KTopicPartition("moving", 0)] is NoReassignmentInProgressError
    finally:
        admin.close()
    time.sleep(1)  # records acknowledged after the move
    stop_producers(run)
    report = check(cluster.bootstrap, run)
    report.assert_consistent()
    assert report.acked > 500
