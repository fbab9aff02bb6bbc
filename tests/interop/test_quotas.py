"""Client quotas (issue 18) against an ``odradek serve`` process with a SASL_PLAINTEXT
listener (PLAIN users alice and bob) and a PLAINTEXT one: quotas set, listed and removed
with ``odradek quotas``, then felt by real clients.

- A confluent-kafka producer logged in as alice, who has a ``producer_byte_rate``
  quota, sends as fast as it can for 30 s beside bob, who has none: alice gets her quota
  within 10% (and sees throttle times), bob is never throttled and gets far more.
- A consumer whose client id has a ``consumer_byte_rate`` quota reads at that rate.
- A client over its ``request_percentage`` gets throttle times and its connection is
  muted for as long: its next request is not answered before.
- Quotas survive a restart; bad values are refused with Kafka's reasons.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.client.wire import WireClient

from .conftest import BrokerProcess, run_tool, start_broker

pytestmark = pytest.mark.interop

WAIT = 30.0
JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
        'user_alice="alice-secret" user_bob="bob-secret";')
ARGS = ["--override", "listeners=PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "--override", f"listener.name.sasl_plaintext.plain.sasl.jaas.config={JAAS}"]
VALUE = b"q" * 10_000


def quotas(broker: BrokerProcess, *args: str, check: bool = True):
    return run_tool([sys.executable, "-m", "odradek", "quotas", *args,
                     "--bootstrap-server", broker.bootstrap], check=check)


def login(broker: BrokerProcess, user: str) -> dict[str, str]:
    return {"bootstrap.servers": broker.listener("SASL_PLAINTEXT"),
            "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
            "sasl.username": user, "sasl.password": f"{user}-secret"}


@pytest.fixture(scope="module")
def quota_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with start_broker(tmp_path_factory.mktemp("odradek-data"), *ARGS) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for future in admin.create_topics([NewTopic("paced", 1, 1),
                                           NewTopic("consumed", 1, 1)]).values():
            future.result(WAIT)
        yield broker


class Sender:
    """A producer sending 10 kB records as fast as librdkafka takes them, counting the
    acknowledged bytes, and the largest throttle time its broker reported."""

    def __init__(self, config: dict[str, str]) -> None:
        self.producer = Producer({**config, "linger.ms": 5, "batch.size": 1_000_000,
                                  "queue.buffering.max.kbytes": 8192,
                                  "statistics.interval.ms": 1000, "stats_cb": self._stats})
        self.acked = 0
        self.throttle_ms = 0

    def _stats(self, text: str) -> None:
        for broker in json.loads(text)["brokers"].values():
            self.throttle_ms = max(self.throttle_ms, broker.get("throttle", {}).get("max", 0))

    def _done(self, err, msg) -> None:
        if err is None:
            self.acked += len(msg.value())

    def run(self, seconds: float, max_bytes: int = 2**62) -> float:
        """Send for ``seconds`` (or ``max_bytes``); the acknowledged bytes per second."""
        start = time.monotonic()
        sent = 0
        while time.monotonic() - start < seconds and sent < max_bytes:
            try:
                self.producer.produce("paced", VALUE, on_delivery=self._done)
                sent += len(VALUE)
            except BufferError:
                self.producer.poll(0.01)
            self.producer.poll(0)
        assert self.producer.flush(WAIT) == 0
        return self.acked / (time.monotonic() - start)

    def close(self) -> None:
        self.producer = None  # the producer refers to this object (stats_cb): let go


def test_quotas_are_set_listed_and_removed(quota_broker: BrokerProcess) -> None:
    quotas(quota_broker, "set", "--user", "carol", "producer_byte_rate=1024",
           "consumer_byte_rate=2048")
    quotas(quota_broker, "set", "--user-default", "--client-id", "app",
           "request_percentage=12.5")
    quotas(quota_broker, "set", "--client-id-default", "consumer_byte_rate=4096")
    listed = quotas(quota_broker, "list").stdout.splitlines()
    assert "Quota configs for user-principal 'carol' are consumer_byte_rate=2048, " \
           "producer_byte_rate=1024" in listed
    assert "Quota configs for the default user-principal, client-id 'app' are " \
           "request_percentage=12.5" in listed
    assert "Quota configs for the default client-id are consumer_byte_rate=4096" in listed
    assert quotas(quota_broker, "list", "--user", "carol").stdout.splitlines() == [
        "Quota configs for user-principal 'carol' are consumer_byte_rate=2048, "
        "producer_byte_rate=1024"]

    refused = quotas(quota_broker, "set", "--user", "carol", "producer_byte_rate=1.5",
                     check=False)
    assert refused.returncode == 1
    assert "INVALID_REQUEST: producer_byte_rate cannot be a fractional value" in refused.stderr

    quotas(quota_broker, "remove", "--user", "carol", "consumer_byte_rate")
    quotas(quota_broker, "remove", "--user-default", "--client-id", "app")
    quotas(quota_broker, "remove", "--client-id-default")
    assert quotas(quota_broker, "list").stdout.splitlines() == [
        "Quota configs for user-principal 'carol' are producer_byte_rate=1024"]
    quotas(quota_broker, "remove", "--user", "carol")
    gone = quotas(quota_broker, "remove", "--user", "carol", check=False)
    assert gone.returncode == 1 and "has no quotas to remove" in gone.stderr


def test_a_producer_over_its_quota_is_held_to_it_and_others_are_not(
        quota_broker: BrokerProcess) -> None:
    quota = 1_000_000
    quotas(quota_broker, "set", "--user", "alice", f"producer_byte_rate={quota}")
    alice, bob = Sender(login(quota_broker, "alice")), Sender(login(quota_broker, "bob"))
    rates: dict[str, float] = {}
    # bob sends at most 300 MB (seconds at his rate): the test must not fill the disk.
    others = threading.Thread(target=lambda: rates.setdefault("bob", bob.run(30, 300 << 20)))
    others.start()
    try:
        rates["alice"] = alice.run(30)
    finally:
        others.join()
        alice.close()
        bob.close()
        quotas(quota_broker, "remove", "--user", "alice")
    print(f"alice {rates['alice'] / quota:.3f}x her quota, bob {rates['bob'] / quota:.1f}x")
    assert 0.9 * quota <= rates["alice"] <= 1.1 * quota, rates
    assert alice.throttle_ms > 0
    assert bob.throttle_ms == 0
    assert rates["bob"] > 5 * quota, rates


def test_a_consumer_over_its_quota_is_held_to_it(quota_broker: BrokerProcess) -> None:
    quota = 2_000_000
    seconds = 20
    producer = Producer({"bootstrap.servers": quota_broker.bootstrap, "linger.ms": 5})
    for _ in range(int(quota * (seconds + 5) / len(VALUE))):
        while True:
            try:
                producer.produce("consumed", VALUE)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(WAIT) == 0
    quotas(quota_broker, "set", "--client-id", "paced-reader", f"consumer_byte_rate={quota}")
    consumer = Consumer({"bootstrap.servers": quota_broker.bootstrap, "group.id": "paced",
                         "client.id": "paced-reader", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    try:
        consumer.subscribe(["consumed"])
        while (first := consumer.poll(WAIT)) is None or first.error():
            pass
        received, start = len(first.value()), time.monotonic()
        while time.monotonic() - start < seconds:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                received += len(msg.value())
        rate = received / (time.monotonic() - start)
    finally:
        consumer.close()
        quotas(quota_broker, "remove", "--client-id", "paced-reader")
    print(f"consumer {rate / quota:.3f}x its quota")
    assert 0.9 * quota <= rate <= 1.1 * quota, rate


def test_a_client_over_its_request_quota_is_throttled_and_muted(
        quota_broker: BrokerProcess) -> None:
    """request_percentage=1: 10 ms of the broker's time per second. Metadata requests in
    a loop soon earn throttle times, and the request after a throttled answer waits out
    the throttle before it is answered (the connection is muted, KIP-219)."""
    quotas(quota_broker, "set", "--client-id", "wire-test", "request_percentage=1")
    try:
        with WireClient(quota_broker.port) as client:
            throttled = None
            for _ in range(5000):
                answer = client.request(3, 12, {"topics": None})
                if answer.throttle_time.total_seconds() > 0:
                    throttled = answer.throttle_time.total_seconds() * 1000
                    break
            assert throttled is not None, "never throttled"
            sent = time.monotonic()
            client.request(3, 12, {"topics": None})
            assert (time.monotonic() - sent) * 1000 >= throttled * 0.9
    finally:
        quotas(quota_broker, "remove", "--client-id", "wire-test")


def test_quotas_survive_a_restart(tmp_path: Path) -> None:
    with start_broker(tmp_path / "data") as broker:
        quotas(broker, "set", "--user", "dave", "producer_byte_rate=4096")
    with start_broker(tmp_path / "data") as broker:
        assert quotas(broker, "list").stdout.splitlines() == [
            "Quota configs for user-principal 'dave' are producer_byte_rate=4096"]
