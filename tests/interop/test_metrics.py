"""Prometheus metrics with Kafka's names (issue 19) from an ``odradek serve`` process
with ``metrics.listen``, scraped over HTTP and parsed with prometheus_client's own
parser, after real clients produced, consumed in a group and committed: the counters
match what the clients did, the gauges what is on disk, and the lag what the group left
unread. /healthz and /readyz answer for orchestrators."""

from __future__ import annotations

import socket
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from .conftest import BrokerProcess, requests_by_version, scrape, start_broker

# librdkafka 2.16's newest Produce (KIP-951's leader hints; it has no v11+), which the
# broker serves: what a librdkafka producer sends.
PRODUCE_VERSION_OF_LIBRDKAFKA = 10

pytestmark = pytest.mark.interop

WAIT = 30.0
RECORDS = 1000
READ = 400


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=WAIT) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


@pytest.fixture(scope="module")
def metrics_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with start_broker(tmp_path_factory.mktemp("odradek-data"),
                      "--override", "metrics.listen=127.0.0.1:0",
                      "--override", "group.initial.rebalance.delay.ms=0") as broker:
        yield broker


def test_counters_gauges_and_lag_say_what_clients_did(metrics_broker: BrokerProcess):
    bootstrap = metrics_broker.bootstrap
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(RECORDS):
        producer.produce("measured", f"value-{i:04d}".encode())
    assert producer.flush(WAIT) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "readers",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe(["measured"])
    read = 0
    while read < READ:
        msg = consumer.poll(WAIT)
        assert msg is not None
        if not msg.error():
            read += 1
            last = msg
    consumer.commit(message=last, asynchronous=False)
    consumer.close()

    samples = scrape(metrics_broker.metrics_url())
    topic = (("topic", "measured"),)
    partition = (("partition", "0"), ("topic", "measured"))
    assert samples[("kafka_server_brokertopicmetrics_messagesin_total", topic)] == RECORDS
    size = samples[("kafka_log_log_size", partition)]
    assert samples[("kafka_server_brokertopicmetrics_bytesin_total", topic)] == size > 0
    assert samples[("kafka_server_brokertopicmetrics_bytesout_total", topic)] > 0
    assert samples[("kafka_server_brokertopicmetrics_failedproducerequests_total", topic)] == 0
    assert samples[("kafka_log_log_logendoffset", partition)] == RECORDS
    assert samples[("kafka_log_log_logstartoffset", partition)] == 0
    group = (("consumergroup", "readers"), ("partition", "0"), ("topic", "measured"))
    assert samples[("kafka_consumergroup_current_offset", group)] == READ
    assert samples[("kafka_consumergroup_lag", group)] == RECORDS - READ
    assert samples[("kafka_coordinator_group_groupmetadatamanager_numgroups", ())] == 1
    produce = (("request", "Produce"),)
    by_version = requests_by_version(samples, "Produce")
    count = sum(by_version.values())
    assert count >= 1
    # librdkafka's newest Produce that the broker serves (the version tag, KIP-896)
    assert set(by_version) == {PRODUCE_VERSION_OF_LIBRDKAFKA}
    assert samples[("kafka_network_requestmetrics_totaltimems_count", produce)] == count
    assert samples[("kafka_network_requestmetrics_totaltimems_bucket",
                    (("le", "+Inf"), ("request", "Produce")))] == count
    assert samples[("kafka_server_socket_server_metrics_connection_creation_total",
                    (("listener", "PLAINTEXT"),))] >= 2
    # No cluster: the ReplicaManager/controller gauges are not reported.
    assert not any(name.startswith("kafka_controller_") for name, _ in samples)


LONG_POLL_MS = 1000
SPLIT = ("requestqueuetimems", "localtimems", "remotetimems", "responsesendtimems")


def request_time(samples, request: str, name: str) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    """(count, sum) of one API's RequestMetrics time histogram."""
    labels = (("request", request),)
    return (samples[(f"kafka_network_requestmetrics_{name}_count", labels)],
            samples[(f"kafka_network_requestmetrics_{name}_sum", labels)])


def test_request_time_split_shows_long_polls_as_remote_and_requests_behind_them_as_queued(
        tmp_path: Path):
    """A consumer long-polls an empty partition (fetch.wait.max.ms=1 s): each Fetch
    spends its second parked in the purgatory - remote time - and almost nothing in
    its handler's own steps. Watermark queries on the same connection wait behind those
    long polls (requests are answered in order): queue time. For every API the four
    parts add up to the total."""
    with start_broker(tmp_path / "data", "--override", "metrics.listen=127.0.0.1:0") as broker:
        producer = Producer({"bootstrap.servers": broker.bootstrap})
        producer.produce("quiet", b"the only record")
        assert producer.flush(WAIT) == 0
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "pollers",
                             "fetch.wait.max.ms": LONG_POLL_MS, "enable.auto.commit": False})
        consumer.assign([TopicPartition("quiet", 0, 1)])  # past the record: nothing to read
        started = time.monotonic()
        while time.monotonic() - started < 3 * LONG_POLL_MS / 1000:
            assert consumer.poll(0.2) is None
        queries = 4
        for _ in range(queries):  # ListOffsets (earliest and latest) to the fetch's broker
            assert consumer.get_watermark_offsets(TopicPartition("quiet", 0), timeout=WAIT,
                                                  cached=False) == (0, 1)
        consumer.close()
        samples = scrape(broker.metrics_url())

    fetches, remote_ms = request_time(samples, "Fetch", "remotetimems")
    assert fetches >= 3
    # Every fetch but perhaps the last (cut short by close) waited its full second.
    assert remote_ms >= 0.9 * LONG_POLL_MS * (fetches - 1)
    fetch_local = samples[("kafka_network_requestmetrics_localtimems_bucket",
                           (("le", "100.0"), ("request", "Fetch")))]
    assert fetch_local == fetches  # the wait is not the handler's work
    lists, queued_ms = request_time(samples, "ListOffsets", "requestqueuetimems")
    assert lists >= 2 * queries
    # Each query's requests went out while a one-second long poll held the connection.
    assert queued_ms >= LONG_POLL_MS
    produces, produce_remote_ms = request_time(samples, "Produce", "remotetimems")
    assert produces >= 1 and produce_remote_ms < 25 * produces  # one node: nothing to wait for
    for request in ("Fetch", "ListOffsets", "Produce", "Metadata", "ApiVersions"):
        count, total_ms = request_time(samples, request, "totaltimems")
        parts = [request_time(samples, request, name) for name in SPLIT]
        assert all(n == count for n, _ in parts)
        assert all(ms >= 0 for _, ms in parts)
        assert abs(sum(ms for _, ms in parts) - total_ms) <= 0.001 * total_ms + 0.1, request


FLUSH = "kafka_log_logflushstats_logflushrateandtimems"


def test_log_flush_times_count_each_fsync_a_produce_waited_for(tmp_path: Path):
    """A topic with flush.messages=1: each produce (sent one at a time) is answered once
    on disk, so each makes one flush, timed. A topic with the default (no flush: the
    page cache and replication are the durability) makes none."""
    with start_broker(tmp_path / "data", "--override", "metrics.listen=127.0.0.1:0") as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        topics = [NewTopic("synced", 1, 1, config={"flush.messages": "1"}),
                  NewTopic("cached", 1, 1)]
        for future in admin.create_topics(topics).values():
            future.result(WAIT)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})

        def produce_one_at_a_time(topic: str, n: int) -> None:
            for i in range(n):
                producer.produce(topic, f"record-{i}".encode())
                assert producer.flush(WAIT) == 0

        before = scrape(broker.metrics_url())
        produce_one_at_a_time("cached", 20)
        cached = scrape(broker.metrics_url())
        produced = 10
        produce_one_at_a_time("synced", produced)
        synced = scrape(broker.metrics_url())

    count = (f"{FLUSH}_count", ())
    assert cached[count] == before[count]
    assert synced[count] - cached[count] == produced
    assert synced[(f"{FLUSH}_sum", ())] > cached[(f"{FLUSH}_sum", ())]
    assert synced[(f"{FLUSH}_bucket", (("le", "+Inf"),))] == synced[count]


CREATED = "kafka_server_socket_server_metrics_connection_creation_total"
OPEN = "kafka_server_socket_server_metrics_connection_count"


def test_connections_are_counted_per_listener(tmp_path: Path):
    """Two listeners: a producer that bootstraps through OUTSIDE is told OUTSIDE's
    address and connects only there; three sockets opened to PLAINTEXT are three
    connections created there, open until closed."""
    with start_broker(tmp_path / "data", "--override", "metrics.listen=127.0.0.1:0",
                      "--override", "listeners=PLAINTEXT://127.0.0.1:0,OUTSIDE://127.0.0.1:0",
                      "--override", "listener.security.protocol.map="
                                    "PLAINTEXT:PLAINTEXT,OUTSIDE:PLAINTEXT") as broker:
        producer = Producer({"bootstrap.servers": broker.listener("OUTSIDE")})
        producer.produce("outside", b"through the second listener")
        assert producer.flush(WAIT) == 0
        samples = scrape(broker.metrics_url())
        outside, plaintext = (("listener", "OUTSIDE"),), (("listener", "PLAINTEXT"),)
        assert samples[(CREATED, outside)] >= 1
        assert samples[(OPEN, outside)] >= 1  # the producer is still connected
        assert samples.get((CREATED, plaintext), 0) == 0

        host, port = broker.listener("PLAINTEXT").rsplit(":", 1)
        sockets = [socket.create_connection((host, int(port)), timeout=WAIT) for _ in range(3)]
        deadline = time.monotonic() + WAIT
        while scrape(broker.metrics_url()).get((OPEN, plaintext), 0) < 3:
            assert time.monotonic() < deadline, "3 connections on PLAINTEXT"
            time.sleep(0.05)
        for sock in sockets:
            sock.close()
        while scrape(broker.metrics_url()).get((OPEN, plaintext), 0) > 0:
            assert time.monotonic() < deadline, "PLAINTEXT's connections closed"
            time.sleep(0.05)
        samples = scrape(broker.metrics_url())
        assert samples[(CREATED, plaintext)] == 3
        producer.flush(0)


def test_health_and_readiness_endpoints(metrics_broker: BrokerProcess):
    base = metrics_broker.metrics_url().removesuffix("/metrics")
    assert get(base + "/healthz") == (200, "ok\n")
    assert get(base + "/readyz") == (200, "ready\n")
    status, text = get(base + "/nothing")
    assert status == 404 and "/metrics, /healthz and /readyz" in text


def test_without_metrics_listen_nothing_is_served(tmp_path: Path):
    with start_broker(tmp_path / "data") as broker:
        assert not any(line.startswith("metrics http://") for line in broker.stdout_lines)
        assert broker.output()  # the broker runs as usual
