"""TLS listeners (issue 18) against an ``odradek serve`` process with three listeners:
PLAINTEXT, SSL (one-way: the broker proves itself with a certificate the test's CA signed)
and MTLS (an SSL listener with ``ssl.client.auth=required``: clients must present a
certificate from that CA), configured with Kafka's setting names, as an operator would.

- librdkafka (confluent-kafka and kcat), kafka-python and aiokafka produce and read back
  records over TLS, with responses large enough to take the broker's TLS path for record
  bytes (read once and encrypted: no sendfile under TLS).
- Metadata answers each client with the addresses of the listener it came in on.
- Mutual TLS: a trusted client certificate is served; no certificate, an expired one or
  one from an untrusted CA gets no data, and the broker keeps serving everyone else.
- A plaintext Kafka client on a TLS port, garbage instead of a handshake, and a client
  that stops halfway through its handshake: each gets a TLS alert or a closed connection
  and never a Kafka response, while other clients are served meanwhile.
"""

from __future__ import annotations

import shutil
import socket
import ssl
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.devcluster.certs import Issued, TestCA

from . import round_trips
from .conftest import BrokerProcess, require_tool, run_tool, start_broker

pytestmark = pytest.mark.interop

WAIT = 30.0
RECORDS = 300
PAD = 1000  # bytes per value: 300 KB per topic, fetch responses beyond the copy threshold


class Certs:
    def __init__(self, directory: Path) -> None:
        self.ca = TestCA(directory / "ca")
        self.server = self.ca.issue("broker", "CN=localhost,O=Odradek tests", server=True)
        self.alice = self.ca.issue("alice", "CN=Alice,OU=eng,O=Odradek tests")
        self.expired = self.ca.issue("expired", "CN=old,O=Odradek tests", expired=True)
        self.stranger = TestCA(directory / "other", "Untrusted CA").issue(
            "stranger", "CN=stranger,O=elsewhere")


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return Certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def tls_broker(tmp_path_factory: pytest.TempPathFactory, certs: Certs
               ) -> Iterator[BrokerProcess]:
    settings = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,MTLS://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,MTLS:SSL",
        "ssl.keystore.location": str(certs.server.keystore()),
        "listener.name.mtls.ssl.client.auth": "required",
        "listener.name.mtls.ssl.truststore.location": str(certs.ca.cert),
        "group.initial.rebalance.delay.ms": "0",
    }
    args = [a for k, v in settings.items() for a in ("--override", f"{k}={v}")]
    with start_broker(tmp_path_factory.mktemp("odradek-data"), *args) as broker:
        yield broker


def librdkafka_tls(certs: Certs, client: Issued | None = None) -> dict[str, str]:
    conf = {"security.protocol": "SSL", "ssl.ca.location": str(certs.ca.cert)}
    if client is not None:
        conf |= {"ssl.certificate.location": str(client.cert),
                 "ssl.key.location": str(client.key)}
    return conf


def create_topic(bootstrap: str, name: str, **conf: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, **conf})
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(WAIT)


def produce_and_read_back(bootstrap: str, topic: str, conf: dict[str, str]) -> list[bytes]:
    return round_trips.rdkafka({"bootstrap.servers": bootstrap, **conf}, topic, b"tls",
                               RECORDS, PAD)


EXPECTED = round_trips.expected(RECORDS, PAD)


def test_confluent_kafka_produces_and_consumes_over_tls(tls_broker: BrokerProcess,
                                                        certs: Certs):
    ssl_bootstrap = tls_broker.listener("SSL")
    conf = librdkafka_tls(certs)
    create_topic(ssl_bootstrap, "tls-rdkafka", **conf)
    assert produce_and_read_back(ssl_bootstrap, "tls-rdkafka", conf) == EXPECTED


def test_large_requests_over_tls_arrive_whole(tls_broker: BrokerProcess, certs: Certs):
    """Produce requests of several MB (the broker receives them into a buffer that grows,
    and asks the kernel to wake it only once most of a request's rest is there): every
    record acknowledged and read back intact."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    bootstrap = tls_broker.listener("SSL")
    conf = librdkafka_tls(certs)
    admin = AdminClient({"bootstrap.servers": bootstrap, **conf})
    admin.create_topics([NewTopic("tls-large", 1, 1,
                                  config={"max.message.bytes": "8388608"})])[
        "tls-large"].result(WAIT)
    values = [bytes([i]) * (3_000_000 + i * 100_003) for i in range(6)]
    producer = Producer({"bootstrap.servers": bootstrap, **conf,
                         "message.max.bytes": 8_000_000, "linger.ms": 50})
    for value in values:
        producer.produce("tls-large", value)
    assert producer.flush(WAIT) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, **conf, "group.id": "tls-large",
                         "fetch.message.max.bytes": 8_000_000, "fetch.max.bytes": 16_000_000,
                         "receive.message.max.bytes": 20_000_000})
    consumer.assign([TopicPartition("tls-large", 0, 0)])
    got = []
    while len(got) < len(values):
        msg = consumer.poll(WAIT)
        assert msg is not None and not msg.error(), msg and msg.error()
        got.append(msg.value())
    consumer.close()
    assert got == values


def test_metadata_answers_with_the_listener_the_client_came_in_on(
        tls_broker: BrokerProcess, certs: Certs):
    for name, conf in (("PLAINTEXT", {}), ("SSL", librdkafka_tls(certs)),
                       ("MTLS", librdkafka_tls(certs, certs.alice))):
        bootstrap = tls_broker.listener(name)
        md = AdminClient({"bootstrap.servers": bootstrap, **conf}).list_topics(timeout=WAIT)
        [b] = md.brokers.values()
        assert f"{b.host}:{b.port}" == bootstrap, name


def test_kcat_produces_and_consumes_over_tls(tls_broker: BrokerProcess, certs: Certs):
    kcat = require_tool("kcat", installable=shutil.which("apt-get") is not None,
                        install_hint="scripts/test.sh installs it (apt-get install kcat)")
    bootstrap = tls_broker.listener("SSL")
    tls = ["-X", "security.protocol=SSL", "-X", f"ssl.ca.location={certs.ca.cert}"]
    create_topic(bootstrap, "tls-kcat", **librdkafka_tls(certs))
    lines = "".join(f"line-{i}\n" for i in range(RECORDS))
    run_tool([kcat, "-P", "-b", bootstrap, "-t", "tls-kcat", "-p", "0", *tls], input=lines)
    out = run_tool([kcat, "-C", "-b", bootstrap, "-t", "tls-kcat", "-p", "0", "-o",
                    "beginning", "-c", str(RECORDS), "-e", "-q", *tls])
    assert out.stdout.split() == [f"line-{i}" for i in range(RECORDS)]


def test_kafka_python_produces_and_consumes_over_tls(tls_broker: BrokerProcess,
                                                     certs: Certs):
    bootstrap = tls_broker.listener("SSL")
    conf = {"bootstrap_servers": bootstrap, "security_protocol": "SSL",
            "ssl_cafile": str(certs.ca.cert)}
    create_topic(bootstrap, "tls-kafka-python", **librdkafka_tls(certs))
    assert round_trips.kafka_python(conf, "tls-kafka-python", b"tls", RECORDS, PAD) == EXPECTED


def test_kafka_python_produces_and_consumes_over_mutual_tls(tls_broker: BrokerProcess,
                                                            certs: Certs):
    bootstrap = tls_broker.listener("MTLS")
    conf = {"bootstrap_servers": bootstrap, "security_protocol": "SSL",
            "ssl_cafile": str(certs.ca.cert), "ssl_certfile": str(certs.alice.cert),
            "ssl_keyfile": str(certs.alice.key)}
    create_topic(bootstrap, "mtls-kafka-python", **librdkafka_tls(certs, certs.alice))
    assert round_trips.kafka_python(conf, "mtls-kafka-python", b"tls", RECORDS, PAD) == EXPECTED


def test_kcat_and_kafkajs_produce_and_consume_over_mutual_tls(tls_broker: BrokerProcess,
                                                              certs: Certs):
    bootstrap = tls_broker.listener("MTLS")
    kcat = require_tool("kcat", installable=shutil.which("apt-get") is not None,
                        install_hint="scripts/test.sh installs it (apt-get install kcat)")
    tls = ["-X", "security.protocol=SSL", "-X", f"ssl.ca.location={certs.ca.cert}",
           "-X", f"ssl.certificate.location={certs.alice.cert}",
           "-X", f"ssl.key.location={certs.alice.key}"]
    create_topic(bootstrap, "mtls-kcat", **librdkafka_tls(certs, certs.alice))
    run_tool([kcat, "-P", "-b", bootstrap, "-t", "mtls-kcat", *tls],
             input="".join(f"kcat-{i}\n" for i in range(RECORDS)))
    out = run_tool([kcat, "-C", "-b", bootstrap, "-t", "mtls-kcat", "-o", "beginning",
                    "-c", str(RECORDS), "-e", "-q", *tls])
    assert sorted(out.stdout.split()) == sorted(f"kcat-{i}" for i in range(RECORDS))

    assert round_trips.kafkajs(
        tls_broker, "mtls-kafkajs", RECORDS, bootstrap=bootstrap,
        ssl={"ca": str(certs.ca.cert), "cert": str(certs.alice.cert),
             "key": str(certs.alice.key)}) == [f"v{i}" for i in range(RECORDS)]


def test_aiokafka_produces_and_consumes_over_mutual_tls(tls_broker: BrokerProcess,
                                                        certs: Certs):
    from aiokafka.helpers import create_ssl_context

    bootstrap = tls_broker.listener("MTLS")
    create_topic(bootstrap, "tls-aiokafka", **librdkafka_tls(certs, certs.alice))
    context = create_ssl_context(cafile=str(certs.ca.cert), certfile=str(certs.alice.cert),
                                 keyfile=str(certs.alice.key))
    conf = {"bootstrap_servers": bootstrap, "security_protocol": "SSL", "ssl_context": context}
    assert round_trips.aiokafka(conf, "tls-aiokafka", b"tls", RECORDS, PAD) == EXPECTED


def test_mutual_tls_serves_trusted_client_certificates_only(tls_broker: BrokerProcess,
                                                            certs: Certs):
    bootstrap = tls_broker.listener("MTLS")
    conf = librdkafka_tls(certs, certs.alice)
    create_topic(bootstrap, "tls-mutual", **conf)
    assert produce_and_read_back(bootstrap, "tls-mutual", conf) == EXPECTED
    for client in (None, certs.expired, certs.stranger):
        admin = AdminClient({"bootstrap.servers": bootstrap, **librdkafka_tls(certs, client)})
        with pytest.raises(KafkaException):  # the handshake fails: no broker answers
            admin.list_topics(timeout=3)
    # The broker still serves the trusted client.
    md = AdminClient({"bootstrap.servers": bootstrap, **conf}).list_topics(timeout=WAIT)
    assert "tls-mutual" in md.topics



def test_a_client_without_a_certificate_is_told_why(tls_broker: BrokerProcess, certs: Certs):
    """The broker sends the handshake's alert (certificate required) before it closes,
    as Kafka does, rather than just closing (what asyncio alone would do): clients can
    say why (the Java client's SslAuthenticationException, tests/interop/test_java_secure)."""
    host, port = tls_broker.listener("MTLS").rsplit(":", 1)
    context = ssl.create_default_context(cafile=str(certs.ca.cert))
    context.minimum_version = ssl.TLSVersion.TLSv1_3  # the alert comes after the handshake
    with (socket.create_connection((host, int(port)), timeout=WAIT) as raw,
          context.wrap_socket(raw, server_hostname=host) as tls,
          pytest.raises(ssl.SSLError, match="CERTIFICATE_REQUIRED")):
        tls.sendall(API_VERSIONS_V0)
        tls.recv(1)
    tls_broker.assert_alive()


API_VERSIONS_V0 = struct.pack(">ihhih", 12, 18, 0, 1, -1)  # size, key, version, id, client


def read_until_closed(sock: socket.socket, timeout: float = 10.0) -> bytes:
    sock.settimeout(timeout)
    data = b""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            return data
        data += chunk


def test_non_tls_input_on_a_tls_port_gets_an_alert_or_nothing(tls_broker: BrokerProcess,
                                                              certs: Certs):
    host, port = tls_broker.listener("SSL").split(":")
    for junk in (API_VERSIONS_V0, b"\x16\x03\x01\x00\x05hello", bytes(range(256)) * 8):
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(junk)
            answer = read_until_closed(sock)
        # Nothing but a TLS alert record (content type 21) ever comes back.
        assert answer == b"" or answer[0] == 21, (junk[:16], answer[:32])
    tls_broker.assert_alive()


def test_a_client_stalled_mid_handshake_does_not_hold_up_others(tls_broker: BrokerProcess,
                                                                certs: Certs):
    host, port = tls_broker.listener("SSL").split(":")
    ctx = ssl.create_default_context(cafile=str(certs.ca.cert))
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = ctx.wrap_bio(incoming, outgoing, server_hostname="localhost")
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    hello = outgoing.read()
    stalled = socket.create_connection((host, int(port)), timeout=10)
    try:
        stalled.sendall(hello[: len(hello) // 2])  # half a ClientHello, then nothing
        conf = librdkafka_tls(certs)
        bootstrap = tls_broker.listener("SSL")
        create_topic(bootstrap, "tls-beside-stalled", **conf)
        assert produce_and_read_back(bootstrap, "tls-beside-stalled", conf) == EXPECTED
    finally:
        stalled.close()
    tls_broker.assert_alive()
