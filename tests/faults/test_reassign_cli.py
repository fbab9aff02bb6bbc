"""``odradek reassign`` and ``odradek elect-leaders`` as an operator runs them, on three
``odradek serve`` brokers and a fourth added: Kafka's add-a-broker runbook with
kafka-reassign-partitions.sh's JSON files, from generate to verify."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CTopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource

from tests.cluster_processes import Cluster

pytestmark = pytest.mark.slow


def odradek(cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "odradek", *args,
                           "--bootstrap-server", cluster.bootstrap],
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)


def test_add_a_broker_and_move_a_topic_onto_it(cluster: Cluster, tmp_path: Path) -> None:
    cluster.create_topic("orders", partitions=3, rf=2)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(300):
        producer.produce("orders", f"order-{i}".encode(), partition=i % 3)
    assert producer.flush(60) == 0
    cluster.add_broker()

    topics = tmp_path / "topics.json"
    topics.write_text(json.dumps({"topics": [{"topic": "orders"}], "version": 1}))
    generated = odradek(cluster, "reassign", "generate", "--topics-to-move-json-file",
                        str(topics), "--broker-list", "2,3,4")
    assert generated.returncode == 0, generated.stderr
    current_text, proposed_text = generated.stdout.split("Proposed partition reassignment "
                                                         "configuration\n")
    proposed = json.loads(proposed_text)
    assert json.loads(current_text.split("\n")[1])["partitions"]
    assert {p["partition"] for p in proposed["partitions"]} == {0, 1, 2}
    for entry in proposed["partitions"]:
        assert len(entry["replicas"]) == 2 and set(entry["replicas"]) <= {2, 3, 4}
    plan = tmp_path / "plan.json"
    plan.write_text(proposed_text)

    executed = odradek(cluster, "reassign", "execute", "--reassignment-json-file", str(plan),
                       "--throttle", "50000000")
    assert executed.returncode == 0, executed.stderr
    assert "Save this to use as the --reassignment-json-file option during rollback" \
        in executed.stdout
    assert "Successfully started partition reassignment(s) for orders-0, orders-1, orders-2" \
        in executed.stdout

    deadline = time.monotonic() + 90
    while True:
        verified = odradek(cluster, "reassign", "verify", "--reassignment-json-file", str(plan))
        assert verified.returncode == 0, verified.stderr
        if "Throttles removed." in verified.stdout:
            break
        assert time.monotonic() < deadline, verified.stdout
        time.sleep(1)
    assert verified.stdout.count("is completed.") == 3
    wanted = {e["partition"]: e["replicas"] for e in proposed["partitions"]}
    assert cluster.replicas("orders") == wanted

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    configs = next(iter(admin.describe_configs(
        [ConfigResource("topic", "orders")]).values())).result(timeout=30)
    assert configs["follower.replication.throttled.replicas"].value == ""
    broker = next(iter(admin.describe_configs(
        [ConfigResource("broker", "4")]).values())).result(timeout=30)
    assert broker["follower.replication.throttled.rate"].value == str(2**63 - 1)

    # Nothing is moving now: cancelling is refused per partition, as Kafka refuses it.
    cancelled = odradek(cluster, "reassign", "cancel", "--reassignment-json-file", str(plan))
    assert cancelled.returncode == 1
    assert "NO_REASSIGNMENT_IN_PROGRESS" in cancelled.stderr

    elected = odradek(cluster, "elect-leaders", "--election-type", "preferred", "--topic",
                      "orders")
    assert elected.returncode == 0, elected.stderr
    assert all(cluster.leader("orders", p) == wanted[p][0] for p in range(3))
    # Everything is led by its preferred replica now: nothing to report, nothing failed.
    everything = odradek(cluster, "elect-leaders", "--election-type", "preferred",
                         "--all-topic-partitions")
    assert (everything.returncode, everything.stdout) == (0, ""), everything.stderr
    usage = odradek(cluster, "elect-leaders", "--election-type", "preferred")
    assert usage.returncode == 2 and "exactly one of" in usage.stderr


def _coordinator(cluster: Cluster, group: str) -> int:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    description = admin.describe_consumer_groups([group])[group].result(timeout=30)
    return int(description.coordinator.id)


def test_groups_describe_is_the_same_after_the_coordinator_moves(cluster: Cluster) -> None:
    """``odradek groups describe`` before and after the group's coordinator broker
    stops: the same committed offsets and lag, served by the new coordinator (the
    offsets are replicated in __consumer_offsets)."""
    cluster.create_topic("ledger", partitions=2, rf=3)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(40):
        producer.produce("ledger", f"entry-{i}".encode(), partition=i % 2)
    assert producer.flush(60) == 0
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "auditors",
                         "enable.auto.commit": False})
    consumer.commit(offsets=[CTopicPartition("ledger", 0, 15),
                             CTopicPartition("ledger", 1, 7)], asynchronous=False)
    consumer.close()

    before = odradek(cluster, "groups", "describe", "auditors")
    assert before.returncode == 0, before.stderr
    assert "ledger  0          15         20       5" in before.stdout, before.stdout
    coordinator = _coordinator(cluster, "auditors")
    cluster.stop_broker(coordinator)
    cluster.wait_for(lambda: _coordinator(cluster, "auditors") != coordinator, 60,
                     "the group's coordinator moved")
    after = odradek(cluster, "groups", "describe", "auditors")  # one bootstrap is down
    assert after.returncode == 0, after.stderr
    assert after.stdout == before.stdout
    cluster.start_broker(coordinator)
