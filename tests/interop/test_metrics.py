"""Prometheus metrics with Kafka's names (issue 19) from an ``odradek serve`` process
with ``metrics.listen``, scraped over HTTP and parsed with prometheus_client's own
parser, after real clients produced, consumed in a group and committed: the counters
match what the clients did, the gauges what is on disk, and the lag what the group left
unread. /healthz and /readyz answer for orchestrators."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from prometheus_client.parser import text_string_to_metric_families

from .conftest import BrokerProcess, start_broker

pytestmark = pytest.mark.interop

WAIT = 30.0
RECORDS = 1000
READ = 400


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of one scrape: (name, sorted labels) -> value."""
    with urllib.request.urlopen(url, timeout=WAIT) as answer:
        assert answer.headers["Content-Type"].startswith("text/plain")
        text = answer.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


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
    count = samples[("kafka_network_requestmetrics_requests_total", produce)]
    assert count >= 1
    assert samples[("kafka_network_requestmetrics_totaltimems_count", produce)] == count
    assert samples[("kafka_network_requestmetrics_totaltimems_bucket",
                    (("le", "+Inf"), ("request", "Produce")))] == count
    assert samples[("kafka_server_socketservermetrics_connection_creation_total",
                    (("listener", "PLAINTEXT"),))] >= 2
    # No cluster: the ReplicaManager/controller gauges are not reported.
    assert not any(name.startswith("kafka_controller_") for name, _ in samples)


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
