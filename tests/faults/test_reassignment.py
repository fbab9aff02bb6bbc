"""Moving partitions and leadership with Kafka's admin APIs, on three (then four)
``odradek serve`` brokers: ElectLeaders (KIP-460) from confluent-kafka and kafka-python,
and partition reassignment (KIP-455) from kafka-python's admin client, while an
idempotent acks=all producer writes and loses nothing."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import ElectionType, Producer
from confluent_kafka import TopicPartition as CTopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
)
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
    cluster.stop_broker(victim)
    cluster.wait_for(lambda: cluster.leader("elect", 0) not in (-1, victim), 30,
                     "leadership moved off the stopped broker")
    cluster.start_broker(victim)
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
        cluster.stop_broker(follower)
        cluster.wait_for(lambda: cluster.isr("lonely") == [leader], 30, "ISR of one")
        cluster.stop_broker(leader)
        cluster.start_broker(follower)
        cluster.wait_for(lambda: follower in cluster.live_brokers(), 30, "follower back")
        time.sleep(1)
        assert cluster.leader("lonely") == -1  # offline: unclean election is off
        # kafka-python's admin client keeps the controller it found, which may be the
        # broker just stopped: a new client, as an operator running the tool again.
        admin.close()
        cluster.wait_for(lambda: cluster.controller() in cluster.live_brokers(), 30,
                         "a live controller")
        admin = _kafka_admin(cluster)
        answer = admin.elect_leaders(1, {"lonely": [0]}, raise_errors=False)
        errors = {p.partition_id: p.error_code for r in answer.replica_election_results
                  for p in r.partition_result}
        assert errors == {0: 0}, errors
        assert cluster.leader("lonely") == follower
        assert cluster.isr("lonely") == [follower]
    finally:
        admin.close()
    cluster.start_broker(leader)


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


THROTTLE = 400_000  # bytes/s


def _set_configs(admin: AdminClient, resources: list[ConfigResource]) -> None:
    for future in admin.incremental_alter_configs(resources).values():
        future.result(timeout=30)


def _set(name: str, value: str) -> ConfigEntry:
    return ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)


def test_a_throttled_move_replicates_at_the_throttle(cluster: Cluster) -> None:
    """kafka-reassign-partitions.sh --throttle's recipe, through confluent-kafka's admin
    client: the rates as dynamic broker configs, the throttled replicas as topic
    configs, then the move. The new replica fills at the throttle (within 20%), the
    rates can be read back as dynamic configs, and removing them is in force at once."""
    cluster.create_topic("heavy", partitions=1, rf=3)
    cluster.wait_for_full_isr("heavy", 1)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all",
                         "linger.ms": 20, "compression.type": "none"})
    payload = bytes(1000)
    for i in range(5000):
        producer.produce("heavy", payload, key=str(i).encode(), partition=0)
        if i % 500 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0
    total = _dir_bytes(cluster.brokers[1].data_dir / "heavy-0")
    assert total > 5_000_000

    cluster.add_broker()
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for node in (1, 2, 3, 4):  # librdkafka sends one broker resource per request
        _set_configs(admin, [ConfigResource("broker", str(node), incremental_configs=[
            _set("leader.replication.throttled.rate", str(THROTTLE)),
            _set("follower.replication.throttled.rate", str(THROTTLE))])])
    _set_configs(admin, [ConfigResource("topic", "heavy", incremental_configs=[
        _set("leader.replication.throttled.replicas", "0:1,0:2,0:3"),
        _set("follower.replication.throttled.replicas", "0:4")])])
    described = admin.describe_configs([ConfigResource("broker", "4")])
    entries = next(iter(described.values())).result(timeout=30)
    rate = entries["follower.replication.throttled.rate"]
    assert rate.value == str(THROTTLE) and not rate.is_read_only
    assert rate.source == ConfigSource.DYNAMIC_BROKER_CONFIG.value

    kadmin = _kafka_admin(cluster)
    try:
        result = kadmin.alter_partition_reassignments({KTopicPartition("heavy", 0): [2, 3, 4]})
        assert result == {KTopicPartition("heavy", 0): None}
        target = cluster.brokers[4].data_dir / "heavy-0"
        samples: list[tuple[float, int]] = []
        deadline = time.monotonic() + 3 * total / THROTTLE + 60
        while time.monotonic() < deadline:
            size = _dir_bytes(target)
            samples.append((time.monotonic(), size))
            if size >= total:
                break
            time.sleep(0.2)
        assert samples[-1][1] >= total, f"the move did not finish: {samples[-1]}"
        # The rate between 20% and 90% of the data (the first second is the burst).
        t0, b0 = next(s for s in samples if s[1] >= 0.2 * total)
        t1, b1 = next(s for s in samples if s[1] >= 0.9 * total)
        measured = (b1 - b0) / (t1 - t0)
        print(f"throttle {THROTTLE} B/s, measured {measured:.0f} B/s "
              f"({measured / THROTTLE:.2f}x) over {t1 - t0:.1f} s")
        assert 0.8 * THROTTLE <= measured <= 1.2 * THROTTLE
        cluster.wait_for(lambda: cluster.replicas("heavy")[0] == [2, 3, 4], 60,
                         "the reassignment completed")
    finally:
        kadmin.close()
    # kafka-reassign-partitions.sh --verify removes the throttles once the move is done.
    _set_configs(admin, [ConfigResource("broker", "4", incremental_configs=[ConfigEntry(
        "follower.replication.throttled.rate", None,
        incremental_operation=AlterConfigOpType.DELETE)])])
    entries = next(iter(admin.describe_configs(
        [ConfigResource("broker", "4")]).values())).result(timeout=30)
    assert entries["follower.replication.throttled.rate"].value == str(2**63 - 1)


def test_a_move_survives_a_controller_failover(cluster: Cluster) -> None:
    """The controller is stopped while a (throttled, so slow) move runs: the next
    controller finds the move in the topic's znode, lists it, and finishes it; the
    stopped broker, no longer a replica, deletes its copy when it comes back."""
    cluster.create_topic("handover", partitions=1, rf=3)
    cluster.wait_for_full_isr("handover", 1)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all",
                         "linger.ms": 20})
    for _ in range(3000):
        producer.produce("handover", bytes(1000), partition=0)
    assert producer.flush(60) == 0
    cluster.add_broker()
    controller = cluster.controller()
    assert controller in (1, 2, 3)  # broker 4 registered last
    target = [*(b for b in (1, 2, 3) if b != controller), 4]
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    _set_configs(admin, [ConfigResource("broker", "4", incremental_configs=[
        _set("follower.replication.throttled.rate", "300000")])])
    _set_configs(admin, [ConfigResource("topic", "handover", incremental_configs=[
        _set("follower.replication.throttled.replicas", "0:4")])])
    kadmin = _kafka_admin(cluster)
    try:
        result = kadmin.alter_partition_reassignments({KTopicPartition("handover", 0): target})
        assert result == {KTopicPartition("handover", 0): None}
        cluster.stop_broker(controller)
        cluster.wait_for(lambda: cluster.controller() not in (-1, controller), 30,
                         "a new controller")
        # kafka-python's admin client keeps the controller it found: a new one, as an
        # operator running the tool again would.
        kadmin.close()
        kadmin = _kafka_admin(cluster)
        ongoing = kadmin.list_partition_reassignments()
        assert list(ongoing) == [KTopicPartition("handover", 0)]  # ~10 s of data to move
        assert ongoing[KTopicPartition("handover", 0)]["adding_replicas"] == [4]
        cluster.wait_for(lambda: cluster.replicas("handover")[0] == target, 90,
                         "the move finished under the new controller")
        cluster.wait_for(lambda: kadmin.list_partition_reassignments() == {}, 10,
                         "the controller no longer listing the move")
    finally:
        kadmin.close()
    assert sorted(cluster.isr("handover")) == sorted(target)
    cluster.start_broker(controller)
    cluster.wait_for(lambda: not (cluster.brokers[controller].data_dir / "handover-0").exists(),
                     30, "the old replica deleted")
