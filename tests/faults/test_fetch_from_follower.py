"""Fetch from follower (KIP-392) with real processes and a real client: three
``odradek serve`` brokers on ZooKeeper, each in a rack of its own (``broker.rack``), with
``replica.selector.class`` set to Kafka's rack-aware selector; librdkafka consumers
(confluent-kafka) with and without ``client.rack``.

Where a consumer fetches from is read from librdkafka itself, two ways that must agree:
its statistics (each partition's ``broker``: the one it is fetching from; each broker's
count of Fetch requests sent) and its ``debug=fetch`` log, whose lines name the broker
thread that received each fetch answer carrying records (``MessageSet size N`` with
N > 0). So "the follower served the records" means: librdkafka got them in answers
from that broker's connection.

One cluster serves every test of this module (a cluster start costs seconds); the test
that kills a broker runs last and starts it again at its end.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.cluster.replica_selector import RACK_AWARE_SELECTOR
from tests.cluster_processes import Cluster, run_cluster
from tests.zookeeper import ZooKeeperServer

pytestmark = pytest.mark.cluster

RACKS = {1: "rack-1", 2: "rack-2", 3: "rack-3"}
LEADER, FOLLOWER = 1, 2  # partition 0's assignment is [1, 2, 3]
WAIT = 90.0  # generous bound for anything waited for (2 shared CPUs, other clusters)
LONG_POLL_MS = 30_000  # the first test's consumer's fetch.wait.max.ms
# librdkafka: "... [thrd:127.0.0.1:PORT/2]: ... Topic T [0] MessageSet size N, error ..."
_MESSAGE_SET = re.compile(r"thrd:[^/\]]+/(\d+)\].*Topic (\S+) \[(\d+)\] MessageSet size (\d+)")


@pytest.fixture(scope="module")
def cluster(zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[Cluster]:
    """Named ``cluster`` so that a failing test's report carries the brokers' output
    (tests/faults/conftest.py)."""
    zookeeper.ensure_running()
    with run_cluster(zookeeper, tmp_path_factory.mktemp("fetch-from-follower"),
                     node_settings={n: {"broker.rack": r} for n, r in RACKS.items()},
                     **{"replica.selector.class": RACK_AWARE_SELECTOR}) as running:
        yield running


def create_topic(cluster: Cluster, name: str) -> None:
    """One partition on brokers [1, 2, 3] (so led by broker 1), every replica in sync."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    topic = NewTopic(name, 1, replica_assignment=[[LEADER, 2, 3]],
                     config={"min.insync.replicas": "2"})
    admin.create_topics([topic], operation_timeout=30)[name].result(timeout=60)
    cluster.wait_for(lambda: cluster.leader(name) == LEADER, WAIT, f"{name} led by broker 1")
    cluster.wait_for_full_isr(name, 1, WAIT)


def produce(cluster: Cluster, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all",
                         "enable.idempotence": True, "linger.ms": 5})
    failures: list[Any] = []
    for value in values:
        producer.produce(topic, value, partition=0,
                         on_delivery=lambda err, _msg: err and failures.append(err))
    assert producer.flush(WAIT) == 0, "every record acknowledged"
    assert not failures, failures


class RackConsumer:
    """A librdkafka consumer of partition 0 from offset 0 (``assign``: no group), with
    what librdkafka says about where it fetches: statistics and ``debug=fetch`` logs."""

    def __init__(self, cluster: Cluster, topic: str, rack: str | None, **extra: Any) -> None:
        self.topic = topic
        self.lock = threading.RLock()  # details() is called with it held too
        self.stats: dict[str, Any] = {}
        self.samples = 0  # statistics received
        self.fetching_from: Counter[int] = Counter()  # partition's ``broker`` per stats
        self.records_from: Counter[int] = Counter()  # fetch answers with records, by broker
        self.lines: list[str] = []
        log = logging.getLogger(f"rdkafka-{uuid.uuid4().hex[:8]}")
        log.propagate = False
        log.setLevel(logging.DEBUG)
        log.addHandler(_Capture(self._log_line))
        config: dict[str, Any] = {
            "bootstrap.servers": cluster.bootstrap, "group.id": f"g-{uuid.uuid4().hex}",
            "enable.auto.commit": False, "auto.offset.reset": "earliest",
            "statistics.interval.ms": 200, "stats_cb": self._stats,
            "debug": "fetch,msg", "logger": log,
            "topic.metadata.refresh.interval.ms": 1000,
        }
        if rack is not None:
            config["client.rack"] = rack
        config.update(extra)
        self.consumer = Consumer(config)
        self.consumer.assign([TopicPartition(topic, 0, 0)])
        self.values: list[bytes] = []
        self.offsets: list[int] = []

    def _stats(self, raw: str) -> None:
        stats = json.loads(raw)
        with self.lock:
            self.stats = stats
            self.samples += 1
            part = stats.get("topics", {}).get(self.topic, {}).get("partitions", {}).get("0")
            if part is not None and part.get("broker", -1) >= 0:
                self.fetching_from[part["broker"]] += 1

    def _log_line(self, line: str) -> None:
        with self.lock:
            self.lines.append(line)
            match = _MESSAGE_SET.search(line)
            if match and match.group(2) == self.topic and int(match.group(4)) > 0:
                self.records_from[int(match.group(1))] += 1

    def fetch_requests(self) -> dict[int, int]:
        """Fetch requests librdkafka sent, per broker id (its statistics)."""
        with self.lock:
            return self._fetch_requests()

    def _fetch_requests(self) -> dict[int, int]:
        brokers = self.stats.get("brokers", {})
        return {b["nodeid"]: b.get("req", {}).get("Fetch", 0)
                for b in brokers.values() if b.get("nodeid", -1) >= 0}

    def read_until(self, count: int, timeout: float = WAIT) -> None:
        """Poll until ``count`` records in all; the test fails naming what it saw."""
        deadline = time.monotonic() + timeout
        while len(self.values) < count and time.monotonic() < deadline:
            msg = self.consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                raise KafkaException(msg.error())
            self.values.append(msg.value())
            self.offsets.append(msg.offset())
        if len(self.values) < count:
            pytest.fail(f"read {len(self.values)} of {count} records\n{self.details()}")

    def settle(self) -> None:
        """Poll until two more statistics samples (delivered by ``poll`` only) came:
        the last one was taken after everything read so far."""
        with self.lock:
            target = self.samples + 2
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            with self.lock:
                if self.samples >= target:
                    return
            msg = self.consumer.poll(0.1)
            if msg is not None and not msg.error():
                self.values.append(msg.value())
                self.offsets.append(msg.offset())
        pytest.fail(f"no statistics from librdkafka\n{self.details()}")

    def details(self) -> str:
        with self.lock:
            return (f"fetching from (stats samples): {dict(self.fetching_from)}; answers "
                    f"with records from: {dict(self.records_from)}; fetch requests: "
                    f"{self._fetch_requests()}\nlast log lines:\n"
                    + "\n".join(self.lines[-40:]))

    def close(self) -> None:
        self.consumer.close()


class _Capture(logging.Handler):
    def __init__(self, sink: Callable[[str], None]) -> None:
        super().__init__(logging.DEBUG)
        self.sink = sink

    def emit(self, record: logging.LogRecord) -> None:
        self.sink(record.getMessage())


def values(prefix: str, n: int) -> list[bytes]:
    return [f"{prefix}-{i}".encode() for i in range(n)]


def test_a_consumer_reads_from_the_follower_in_its_rack(cluster: Cluster) -> None:
    topic = "ffr-follower"
    create_topic(cluster, topic)
    first = values("a", 200)
    produce(cluster, topic, first)
    reader = RackConsumer(cluster, topic, RACKS[FOLLOWER],
                          # A long wait: a record produced while the consumer waits at the
                          # follower's high watermark arrives well before it runs out only
                          # if the follower wakes its waiting fetch when that moves.
                          **{"fetch.wait.max.ms": LONG_POLL_MS, "socket.timeout.ms": 60000})
    try:
        reader.read_until(len(first))
        assert reader.values == first
        assert reader.offsets == list(range(len(first)))
        # Caught up, parked at the follower: one more record arrives in half the long
        # poll (about a second here: the follower learns the new high watermark at its
        # next fetch from the leader, replica.fetch.wait.max.ms at most).
        time.sleep(1.0)
        produce(cluster, topic, [b"late"])
        reader.read_until(len(first) + 1, timeout=LONG_POLL_MS / 2000)
        assert reader.values[-1] == b"late"
        reader.settle()
        details = reader.details()
        with reader.lock:
            records_from = dict(reader.records_from)
            fetching_from = dict(reader.fetching_from)
        # Every answer with records came from the follower's connection, none from the
        # leader (it answered only with the preferred read replica).
        assert records_from.get(FOLLOWER, 0) > 0, details
        assert set(records_from) == {FOLLOWER}, details
        assert fetching_from.get(FOLLOWER, 0) > 0, details
        requests = reader.fetch_requests()
        assert requests.get(FOLLOWER, 0) > 0, details
    finally:
        reader.close()


@pytest.mark.parametrize("rack", [None, RACKS[LEADER]], ids=["no-rack", "leaders-rack"])
def test_a_consumer_in_no_rack_or_the_leaders_reads_from_the_leader(
        cluster: Cluster, rack: str | None) -> None:
    topic = "ffr-leader"
    if cluster.state(topic, 0) is None:
        create_topic(cluster, topic)
        produce(cluster, topic, values("b", 100))
    reader = RackConsumer(cluster, topic, rack)
    try:
        reader.read_until(100)
        reader.settle()
        assert reader.values == values("b", 100)
        details = reader.details()
        with reader.lock:
            records_from = dict(reader.records_from)
        assert set(records_from) == {LEADER}, details
        requests = reader.fetch_requests()
        assert requests.get(LEADER, 0) > 0, details
        assert all(n == 0 for b, n in requests.items() if b != LEADER), details
    finally:
        reader.close()


def test_a_consumer_whose_follower_dies_goes_back_to_the_leader(cluster: Cluster) -> None:
    topic = "ffr-failover"
    create_topic(cluster, topic)
    first = values("c", 100)
    produce(cluster, topic, first)
    reader = RackConsumer(cluster, topic, RACKS[FOLLOWER])
    try:
        reader.read_until(len(first))
        with reader.lock:
            assert set(reader.records_from) == {FOLLOWER}, reader.details()
        cluster.kill(FOLLOWER)
        # The controller takes it out of the ISR once its session ends; writes go on
        # (min.insync.replicas=2 with brokers 1 and 3).
        cluster.wait_for(lambda: FOLLOWER not in cluster.isr(topic), WAIT,
                         "the dead follower out of the ISR")
        second = values("d", 100)
        produce(cluster, topic, second)
        reader.read_until(len(first) + len(second))
        assert reader.values == first + second
        assert reader.offsets == list(range(len(first) + len(second)))
        with reader.lock:
            assert reader.records_from.get(LEADER, 0) > 0, reader.details()
    finally:
        reader.close()
        cluster.start_broker(FOLLOWER)
        cluster.wait_for(lambda: FOLLOWER in cluster.live_brokers(), WAIT,
                         "the follower registered again")
