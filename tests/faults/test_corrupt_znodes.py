"""Corrupt znodes in a real ZooKeeper (issue 21): a broker that reads another broker's
(or a zkCli hand's) malformed znode logs one ERROR line naming its path, treats that
entry as absent, and keeps serving everything else to real clients; no watch callback,
controller event or broker dies of it."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.index import load_request_schema
from kio.schema.errors import ErrorCode

from odradek.client.connection import Cluster as ClientCluster
from odradek.cluster import state as zk
from odradek.protocol.messages import build
from odradek.server.cluster.producer_ids import PRODUCER_ID_FORMAT_RETRY_S
from tests.cluster_processes import Cluster, run_cluster
from tests.zookeeper import ZooKeeperServer

pytestmark = pytest.mark.cluster

INIT_PRODUCER_ID = 22


@pytest.fixture
def pair(zookeeper: ZooKeeperServer, tmp_path: Path):  # type: ignore[no-untyped-def]
    """Two brokers (enough for a controller, followers and a leader to move; quicker to
    start than three on a busy machine)."""
    zookeeper.ensure_running()
    with run_cluster(zookeeper, tmp_path, size=2, **{"default.replication.factor": 2}) as c:
        yield c


def round_trip(cluster: Cluster, topic: str, value: bytes) -> None:
    """Produce one record with acks=all and read it back from the start of every
    partition, both through confluent-kafka."""
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    producer.produce(topic, value)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "unused",
                         "enable.auto.commit": False})
    # Assigned, not subscribed: no group (and no __consumer_offsets) in the way.
    partitions = AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics(
        topic, timeout=10).topics[topic].partitions
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
    try:
        for _ in range(60):
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error() and msg.value() == value:
                return
    finally:
        consumer.close()
    raise AssertionError(f"{value!r} not read back from {topic}")


def error_lines(cluster: Cluster, path: str) -> dict[int, list[str]]:
    """Each running broker's log lines naming ``path``."""
    return {node: [line for line in b.output().splitlines() if path in line]
            for node, b in cluster.brokers.items() if b.process is not None}


def assert_one_line_errors(cluster: Cluster, path: str, *, everyone: bool = True) -> None:
    """Every broker (or, not ``everyone``, one) logs ERROR lines naming ``path``, with
    no traceback, and runs on."""
    check = all if everyone else any
    cluster.wait_for(lambda: check(error_lines(cluster, path).values()), 20,
                     f"{'every' if everyone else 'a'} broker logging {path}")
    for node, lines in error_lines(cluster, path).items():
        assert all(re.match(r"ERROR \S+: ", line) for line in lines), (node, lines)
        output = cluster.brokers[node].output()
        assert "Traceback" not in output, f"broker {node} logged a traceback:\n{output}"
        assert cluster.brokers[node].running


def test_topic_znodes_that_are_no_topic_are_removed_and_a_corrupt_topic_kept(
        pair: Cluster) -> None:
    """Garbage at /brokers/topics/<name> with nothing below it (a zkCli hand), and an
    empty topic znode with a partition state below (what issue 29's deletion race left
    behind) are no topics: the controller removes each with one WARNING line and their
    names can be created. A real topic whose znode is overwritten with garbage is
    another matter: every broker logs one ERROR line and keeps serving it from its last
    good assignment, and the controller leaves it to the operator."""
    pair.create_topic("good", partitions=2, rf=2)
    pair.create_topic("mangled", partitions=1, rf=2)
    round_trip(pair, "good", b"before")
    abandoned = ["garbage", "binary", "husk"]
    with pair.zk() as client:
        # A TypeError in the metadata cache's watch before (a traceback per change).
        client.create("/brokers/topics/garbage", b'{"partitions":{"0":5}}')
        client.create("/brokers/topics/binary", b"\xff\xfe\x00 not even UTF-8")
        # /brokers/topics/husk with no data and a partition state below, as the race
        # left it: made in one transaction, or the controller may remove the empty husk
        # (no topic, nothing below it yet) between two of the creates.
        husk = client.transaction()
        husk.create("/brokers/topics/husk", b"")
        husk.create("/brokers/topics/husk/partitions", b"")
        husk.create("/brokers/topics/husk/partitions/0", b"")
        husk.create("/brokers/topics/husk/partitions/0/state",
                    zk.PartitionState(1, 0, (1, 2), 1).to_json())
        assert all(r is not None and not isinstance(r, Exception)
                   for r in husk.commit()), "the husk's transaction failed"
        client.set("/brokers/topics/mangled", b'{"partitions":{"0":5}}')
    assert_one_line_errors(pair, "/brokers/topics/mangled")
    with pair.zk() as client:
        pair.wait_for(lambda: not any(client.exists(f"/brokers/topics/{name}")
                                      for name in abandoned), 20, "abandoned znodes removed")
    removals = [line for b in pair.brokers.values() for line in b.output().splitlines()
                if "controller: removed /brokers/topics/" in line]
    assert sorted(removals) == sorted(
        f"WARNING odradek.server.cluster.controller: controller: removed /brokers/topics/{name}: "
        + why + ", so it is no topic (a deletion that did not finish); the name can be "
        "created again" for name, why in [
            ("garbage", "it does not parse (partitions.0: expected a list of broker ids, got "
             "5) and no partition state is below it"),
            ("binary", "it does not parse (not UTF-8: invalid start byte at byte 0) and no "
             "partition state is below it"),
            ("husk", "it is empty")]), removals
    round_trip(pair, "good", b"after")
    round_trip(pair, "mangled", b"still served")
    topics = AdminClient({"bootstrap.servers": pair.bootstrap}).list_topics(timeout=10).topics
    assert {"good", "mangled"} <= set(topics) and not set(abandoned) & set(topics)
    for name in abandoned:
        pair.create_topic(name, partitions=1, rf=2)
        round_trip(pair, name, b"new")


def test_a_garbage_partition_state_leaves_that_partition_alone_and_the_rest_moves(
        pair: Cluster) -> None:
    # Both led by broker 1 (their preferred replica), so stopping it makes the controller
    # move both, in one event.
    admin = AdminClient({"bootstrap.servers": pair.bootstrap})
    created = admin.create_topics([NewTopic(t, 1, replica_assignment=[[1, 2]])
                                   for t in ("good", "bad")], operation_timeout=30)
    for future in created.values():
        future.result(timeout=60)
    pair.wait_for(lambda: pair.leader("good") == pair.leader("bad") == 1, 20, "leader 1")
    pair.wait_for_full_isr("good", 1)
    path = "/brokers/topics/bad/partitions/0/state"
    with pair.zk() as client:
        # A ValueError out of the controller's event before: the event ended there.
        client.set(path, b'{"leader":"one","leader_epoch":0,"isr":[1,2]}')
    assert_one_line_errors(pair, path)
    pair.stop_broker(1)
    pair.wait_for(lambda: pair.leader("good") == 2, 20, "broker 2 leading good")
    round_trip(pair, "good", b"after the move")
    # The controller (broker 2 now, or before) read the corrupt state fresh, said so in
    # one line, and left it as it was.
    assert any("controller: leaving bad-0 alone" in line
               for line in error_lines(pair, path)[2]), error_lines(pair, path)
    with pair.zk() as client:
        assert client.get(path)[0].startswith(b'{"leader":"one"')


def test_a_garbage_controller_epoch_holds_elections_off_until_it_is_fixed(
        pair: Cluster) -> None:
    with pair.zk() as client:
        client.set("/controller_epoch", b"not a number")
        client.delete("/controller")  # an election now, on the garbage epoch
    assert_one_line_errors(pair, "/controller_epoch", everyone=False)  # the winner
    # Every broker is still up, and serves what it has; fixed, an election succeeds
    # (within the 10 s a winner waits before it gives a failed election up).
    with pair.zk() as client:
        client.set("/controller_epoch", b"41")
    pair.wait_for(lambda: pair.controller() in (1, 2), 20, "a controller")
    with pair.zk() as client:
        pair.wait_for(lambda: client.get("/controller_epoch")[0] == b"42", 20, "epoch 42")
    pair.create_topic("after", partitions=1, rf=2)  # the controller places it
    round_trip(pair, "after", b"elected")


def init_producer_id(cluster: Cluster, node: int) -> tuple[int, int]:
    """InitProducerId (idempotent, no transactional id) sent to broker ``node`` itself:
    (error code, producer id)."""
    client = ClientCluster(cluster.brokers[node].bootstrap, client_id="corrupt-znodes",
                           timeout_s=10)
    try:
        # v4 as Kafka's clients send it (the project's client does not speak this API).
        answer = client.any_broker().call(build(load_request_schema(INIT_PRODUCER_ID, 4), {
            "transactional_id": None, "transaction_timeout": 60_000, "producer_id": -1,
            "producer_epoch": -1}))
    finally:
        client.close()
    return int(answer.error_code), int(answer.producer_id)


def test_a_garbage_producer_id_block_holds_new_ids_back_until_it_is_fixed(
        pair: Cluster) -> None:
    """Handing out producer ids without knowing the last block could give two producers
    the same id: a broker that cannot read /latest_producer_id_block answers
    InitProducerId with a retriable error (COORDINATOR_LOAD_IN_PROGRESS, which clients
    retry), logs why in one line, serves everything else, and reserves a block once the
    znode is fixed - after the fixed block, never inside it."""
    pair.create_topic("good", partitions=1, rf=2)
    pair.stop_broker(2)
    with pair.zk() as client:
        client.set(zk.PRODUCER_ID_BLOCK_PATH, b'{"version":1,"block_end":"soon"}')
    pair.start_broker(2)
    assert_one_line_errors(pair, zk.PRODUCER_ID_BLOCK_PATH, everyone=False)
    assert error_lines(pair, zk.PRODUCER_ID_BLOCK_PATH)[2], "broker 2 said nothing"
    assert init_producer_id(pair, 2) == (ErrorCode.coordinator_load_in_progress, -1)
    code, pid = init_producer_id(pair, 1)  # its block was reserved before
    assert code == 0 and pid >= 0
    round_trip(pair, "good", b"served meanwhile")
    with pair.zk() as client:
        client.set(zk.PRODUCER_ID_BLOCK_PATH, zk.producer_id_block_to_json(1, 5000, 5999))
    pair.wait_for(lambda: init_producer_id(pair, 2)[0] == 0,
                  PRODUCER_ID_FORMAT_RETRY_S + 20, "broker 2 handing out producer ids")
    assert init_producer_id(pair, 2)[1] >= 6000


def test_a_garbage_cluster_id_stops_a_starting_broker_and_says_why(
        pair: Cluster, tmp_path: Path) -> None:
    """Which cluster a broker's data belongs to is /cluster/id's to say: unreadable, a
    broker starting cannot know, and writing a new id would split the cluster in two.
    It stops at once, naming the znode (Kafka's broker does not start either); the
    running brokers go on serving."""
    pair.create_topic("good", partitions=1, rf=2)
    with pair.zk() as client:
        client.set(zk.CLUSTER_ID_PATH, b'{"version":"1","id":7}')
    newcomer = tmp_path / "broker-3"
    newcomer.mkdir(parents=True)
    done = subprocess.run(
        [sys.executable, "-m", "odradek", "serve", "--listen", "127.0.0.1:0",
         "--data-dir", str(newcomer), *pair.broker_args(3)],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, (done.returncode, done.stdout, done.stderr)
    assert f"{zk.CLUSTER_ID_PATH} is corrupt" in done.stderr, done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    round_trip(pair, "good", b"still served")
