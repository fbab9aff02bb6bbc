"""SASL listeners (issue 18) against an ``odradek serve`` process with PLAINTEXT,
SASL_PLAINTEXT and SASL_SSL listeners, configured with Kafka's names: PLAIN users from the
listener's JAAS line (``user_NAME="password"``), SCRAM users created through
AlterUserScramCredentials (confluent-kafka's admin client: the salted password crosses the
wire, never the password).

- confluent-kafka, kafka-python, aiokafka and kcat log in with PLAIN, SCRAM-SHA-256 and
  SCRAM-SHA-512 over SASL_PLAINTEXT and SASL_SSL, and produce and consume.
- A wrong password, an unknown user and an unsupported mechanism are refused
  (SASL_AUTHENTICATION_FAILED / UNSUPPORTED_SASL_MECHANISM) and get no data; a request
  before authentication closes the connection; the broker serves others meanwhile.
- DescribeUserScramCredentials lists mechanisms and iterations (never a secret); deleting
  a credential stops its logins; credentials survive a restart.
- Re-authentication (KIP-368): with ``connections.max.reauth.ms`` a librdkafka client
  re-authenticates on its own and keeps producing; a raw client that does not is
  disconnected at its first request after the session's lifetime.
"""

from __future__ import annotations

import asyncio
import shutil
import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    NewTopic,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)

from odradek.client.wire import WireClient, closed_by_peer, encode_request
from odradek.devcluster.certs import TestCA

from . import round_trips
from .conftest import BrokerProcess, require_tool, run_tool, start_broker

pytestmark = pytest.mark.interop

WAIT = 30.0
RECORDS = 50
PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              'username="admin" password="admin-secret" '
              'user_admin="admin-secret" user_alice="alice-secret";')
SCRAM_USERS = {"carol": ("carol-secret", ScramMechanism.SCRAM_SHA_256),
               "dave": ("dave-secret", ScramMechanism.SCRAM_SHA_512)}


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> tuple[TestCA, Path]:
    ca = TestCA(tmp_path_factory.mktemp("certs"))
    return ca, ca.issue("broker", "CN=localhost", server=True).keystore()


def broker_args(keystore: Path, **extra: str) -> list[str]:
    settings = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,"
                     "SASL_SSL://127.0.0.1:0",
        "ssl.keystore.location": str(keystore),
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS,
        "group.initial.rebalance.delay.ms": "0",
        **extra,
    }
    return [a for k, v in settings.items() for a in ("--override", f"{k}={v}")]


MUTUAL_LISTENERS = ("PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,"
                    "SASL_SSL://127.0.0.1:0,MTLS://127.0.0.1:0")


def mutual_tls_args(ca: tuple[TestCA, Path]) -> list[str]:
    """broker_args with every listener kind: SSL one-way and MTLS, an SSL listener that
    requires a client certificate from the test CA."""
    return broker_args(ca[1], listeners=MUTUAL_LISTENERS, **{
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,"
        "SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL,MTLS:SSL",
        "listener.name.mtls.ssl.client.auth": "required",
        "listener.name.mtls.ssl.truststore.location": str(ca[0].cert)})


def add_scram_users(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.alter_user_scram_credentials([
        UserScramCredentialUpsertion(user, ScramCredentialInfo(mechanism, 4096),
                                     password.encode())
        for user, (password, mechanism) in SCRAM_USERS.items()])
    for future in futures.values():
        future.result(WAIT)


def create_topic(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept: its futures need it
    admin.create_topics([NewTopic("sasl", 1, 1)])["sasl"].result(WAIT)


@pytest.fixture(scope="module")
def sasl_broker(tmp_path_factory: pytest.TempPathFactory, ca) -> Iterator[BrokerProcess]:
    with start_broker(tmp_path_factory.mktemp("odradek-data"), *broker_args(ca[1])) as broker:
        add_scram_users(broker.bootstrap)
        create_topic(broker.bootstrap)
        yield broker


def rdkafka(broker: BrokerProcess, ca, listener: str, mechanism: str, user: str,
            password: str) -> dict[str, str]:
    conf = {"bootstrap.servers": broker.listener(listener),
            "security.protocol": listener, "sasl.mechanism": mechanism,
            "sasl.username": user, "sasl.password": password}
    if listener == "SASL_SSL":
        conf["ssl.ca.location"] = str(ca[0].cert)
    return conf


def round_trip(conf: dict[str, str], tag: str) -> None:
    """Produce RECORDS records tagged ``tag`` and find them all when reading back."""
    assert round_trips.rdkafka(conf, "sasl", tag.encode(), RECORDS) == round_trips.expected(
        RECORDS)


LOGINS = [
    ("SASL_PLAINTEXT", "PLAIN", "alice", "alice-secret"),
    ("SASL_SSL", "PLAIN", "admin", "admin-secret"),
    ("SASL_PLAINTEXT", "SCRAM-SHA-256", "carol", "carol-secret"),
    ("SASL_SSL", "SCRAM-SHA-512", "dave", "dave-secret"),
]


@pytest.mark.parametrize("listener,mechanism,user,password", LOGINS)
def test_confluent_kafka_logs_in_and_round_trips(sasl_broker, ca, listener, mechanism,
                                                 user, password):
    round_trip(rdkafka(sasl_broker, ca, listener, mechanism, user, password),
               f"rdkafka-{listener}-{mechanism}")


@pytest.mark.parametrize("listener,mechanism,user,password", [
    ("SASL_PLAINTEXT", "PLAIN", "alice", "wrong"),
    ("SASL_SSL", "PLAIN", "nobody", "alice-secret"),
    ("SASL_PLAINTEXT", "SCRAM-SHA-256", "carol", "wrong"),
    ("SASL_SSL", "SCRAM-SHA-512", "nobody", "x"),
    ("SASL_PLAINTEXT", "SCRAM-SHA-512", "carol", "carol-secret"),  # carol has SHA-256 only
])
def test_bad_credentials_get_an_authentication_error_and_no_data(
        sasl_broker, ca, listener, mechanism, user, password):
    seen = len(sasl_broker.stderr_lines)
    conf = rdkafka(sasl_broker, ca, listener, mechanism, user, password)
    admin = AdminClient(conf)
    with pytest.raises(KafkaException):  # no metadata: nothing was served
        admin.list_topics(timeout=5)
    refused = [line for line in sasl_broker.stderr_lines[seen:]
               if f"closing connection: SASL {mechanism}: Authentication failed" in line]
    assert refused, sasl_broker.output()[-2000:]
    sasl_broker.assert_alive()


def test_kafka_python_logs_in_with_plain_and_scram(sasl_broker, ca):
    for listener, mechanism, user, password in LOGINS:
        conf = {"bootstrap_servers": sasl_broker.listener(listener),
                "security_protocol": listener, "sasl_mechanism": mechanism,
                "sasl_plain_username": user, "sasl_plain_password": password}
        if listener == "SASL_SSL":
            conf["ssl_cafile"] = str(ca[0].cert)
        tag = f"kafka-python-{listener}-{mechanism}".encode()
        assert round_trips.kafka_python(conf, "sasl", tag, RECORDS) == round_trips.expected(
            RECORDS), (listener, mechanism)


def test_aiokafka_logs_in_with_plain_and_scram(sasl_broker, ca):
    from aiokafka.helpers import create_ssl_context

    for listener, mechanism, user, password in LOGINS:
        conf = {"bootstrap_servers": sasl_broker.listener(listener),
                "security_protocol": listener, "sasl_mechanism": mechanism,
                "sasl_plain_username": user, "sasl_plain_password": password}
        if listener == "SASL_SSL":
            conf["ssl_context"] = create_ssl_context(cafile=str(ca[0].cert))
        tag = f"aiokafka-{listener}-{mechanism}".encode()
        assert round_trips.aiokafka(conf, "sasl", tag, RECORDS) == round_trips.expected(
            RECORDS), (listener, mechanism)


def test_kcat_logs_in_with_plain_and_scram(sasl_broker, ca):
    kcat = require_tool("kcat", installable=shutil.which("apt-get") is not None,
                        install_hint="scripts/test.sh installs it (apt-get install kcat)")
    for listener, mechanism, user, password in LOGINS:
        auth = ["-X", f"security.protocol={listener}", "-X", f"sasl.mechanism={mechanism}",
                "-X", f"sasl.username={user}", "-X", f"sasl.password={password}"]
        if listener == "SASL_SSL":
            auth += ["-X", f"ssl.ca.location={ca[0].cert}"]
        bootstrap = sasl_broker.listener(listener)
        topic = f"sasl-kcat-{listener}-{mechanism}".lower()
        run_tool([kcat, "-P", "-b", bootstrap, "-t", topic, *auth],
                 input="".join(f"kcat-{i}\n" for i in range(RECORDS)))
        out = run_tool([kcat, "-C", "-b", bootstrap, "-t", topic, "-o", "beginning",
                        "-c", str(RECORDS), "-e", "-q", *auth])
        assert sorted(out.stdout.split()) == sorted(f"kcat-{i}" for i in range(RECORDS)), (
            listener, mechanism)


def test_scram_credentials_are_described_deleted_and_kept_over_a_restart(
        tmp_path: Path, ca):
    data = tmp_path / "data"
    with start_broker(data, *broker_args(ca[1])) as broker:
        add_scram_users(broker.bootstrap)
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        described = admin.describe_user_scram_credentials().result(WAIT)
        assert {u: [(i.mechanism, i.iterations) for i in d.scram_credential_infos]
                for u, d in described.items()} == {
            "carol": [(ScramMechanism.SCRAM_SHA_256, 4096)],
            "dave": [(ScramMechanism.SCRAM_SHA_512, 4096)]}
        stored = (data / "scram-credentials.json").read_text()
        assert "carol-secret" not in stored and "stored_key=" in stored
    with start_broker(data, *broker_args(ca[1])) as broker:  # the same directory again
        carol = rdkafka(broker, ca, "SASL_PLAINTEXT", "SCRAM-SHA-256", "carol",
                        "carol-secret")
        AdminClient(carol).list_topics(timeout=WAIT)  # still logs in
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.alter_user_scram_credentials([UserScramCredentialDeletion(
            "carol", ScramMechanism.SCRAM_SHA_256)])["carol"].result(WAIT)
        with pytest.raises(KafkaException):
            AdminClient(carol).list_topics(timeout=5)
        missing = admin.alter_user_scram_credentials([UserScramCredentialDeletion(
            "carol", ScramMechanism.SCRAM_SHA_256)])["carol"]
        with pytest.raises(KafkaException, match="does not exist"):
            missing.result(WAIT)


def sasl_port(broker: BrokerProcess, name: str = "SASL_PLAINTEXT") -> int:
    return int(broker.listener(name).rsplit(":", 1)[1])


def plain_login(client: WireClient, user: str, password: str) -> object:
    answer = client.request(17, 1, {"mechanism": "PLAIN"})
    assert answer.error_code.value == 0, answer
    return client.request(36, 2, {"auth_bytes": f"\0{user}\0{password}".encode()})


def test_requests_before_authentication_and_unsupported_mechanisms_close_the_connection(
        sasl_broker):
    port = sasl_port(sasl_broker)
    with WireClient(port) as client:  # Metadata before any SASL: closed, nothing answered
        client.sock.sendall(struct.pack(">ihhih", 12, 3, 1, 7, -1) + struct.pack(">i", 0))
        assert closed_by_peer(client)
    with WireClient(port) as client:
        answer = client.request(17, 1, {"mechanism": "GSSAPI"})
        assert answer.error_code.value == 33  # UNSUPPORTED_SASL_MECHANISM
        assert list(answer.mechanisms) == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
        assert closed_by_peer(client)
    with WireClient(port) as client:
        failed = plain_login(client, "alice", "nope")
        assert failed.error_code.value == 58  # SASL_AUTHENTICATION_FAILED
        assert failed.error_message == "Authentication failed: Invalid username or password"
        assert closed_by_peer(client)
    with WireClient(port) as client:
        ok = plain_login(client, "alice", "alice-secret")
        assert ok.error_code.value == 0 and ok.session_lifetime.total_seconds() == 0
        meta = client.request(3, 12, {"topics": None, "allow_auto_topic_creation": False})
        assert [b.port for b in meta.brokers] == [port]
    # On a PLAINTEXT listener SaslHandshake is ILLEGAL_SASL_STATE.
    with WireClient(sasl_broker.port) as client:
        assert client.request(17, 1, {"mechanism": "PLAIN"}).error_code.value == 34


def test_sessions_expire_unless_the_client_re_authenticates(tmp_path: Path, ca):
    args = broker_args(ca[1], **{"connections.max.reauth.ms": "1500"})
    with start_broker(tmp_path / "data", *args) as broker:
        create_topic(broker.bootstrap)
        port = sasl_port(broker)
        with WireClient(port) as client:
            ok = plain_login(client, "alice", "alice-secret")
            assert ok.session_lifetime.total_seconds() == 1.5
            client.request(3, 12, {"topics": None, "allow_auto_topic_creation": False})
            time.sleep(2.0)  # past the session's lifetime, no re-authentication
            client.sock.sendall(struct.pack(">ihhih", 12, 3, 1, 9, -1) + struct.pack(">i", 0))
            assert closed_by_peer(client)
        with WireClient(port) as client:  # re-authenticating keeps it going
            plain_login(client, "alice", "alice-secret")
            time.sleep(1.0)
            again = plain_login(client, "alice", "alice-secret")
            assert again.error_code.value == 0
            time.sleep(1.0)  # 2 s after the first login, 1 s after the second
            client.request(3, 12, {"topics": None, "allow_auto_topic_creation": False})
            changed = plain_login(client, "admin", "admin-secret")  # another principal
            assert changed.error_code.value == 58
            assert "Cannot change principals" in changed.error_message
        # librdkafka re-authenticates by itself (KIP-368) and keeps producing over 4 s.
        conf = rdkafka(broker, ca, "SASL_SSL", "PLAIN", "alice", "alice-secret")
        producer = Producer({**conf, "linger.ms": 1})
        deadline = time.monotonic() + 4
        sent = 0
        while time.monotonic() < deadline:
            producer.produce("sasl", value=b"x", partition=0)
            sent += 1
            producer.poll(0.05)
        assert producer.flush(WAIT) == 0
        low, high = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "w"}
                             ).get_watermark_offsets(TopicPartition("sasl", 0), timeout=WAIT)
        assert high - low == sent


def test_ten_thousand_failed_logins_leave_memory_flat_and_others_served(sasl_broker):
    port = sasl_port(sasl_broker)
    # SaslHandshake v1 for PLAIN, then SaslAuthenticate v2 with a wrong password.
    attempt = (encode_request(17, 1, {"mechanism": "PLAIN"}, 1)
               + encode_request(36, 2, {"auth_bytes": b"\0alice\0wrong"}, 2))

    def rss_kib() -> int:
        with open(f"/proc/{sasl_broker.pid}/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmRSS"))

    async def fail_once() -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            writer.write(attempt)
            await writer.drain()
            while await reader.read(65536):
                pass  # two answers, then the broker closes
        finally:
            writer.close()

    async def many(n: int, at_once: int = 50) -> None:
        sem = asyncio.Semaphore(at_once)

        async def one() -> None:
            async with sem:
                await fail_once()

        await asyncio.gather(*(one() for _ in range(n)))

    asyncio.run(many(1000))  # warm-up: allocator pools, imports
    before = rss_kib()
    asyncio.run(many(10_000))
    grown = rss_kib() - before
    assert grown < 20 * 1024, f"RSS grew {grown} KiB over 10,000 failed logins"
    with WireClient(port) as client:  # a good login is still served
        assert plain_login(client, "alice", "alice-secret").error_code.value == 0
    sasl_broker.assert_alive()


def test_plain_socket_on_sasl_ssl_gets_no_kafka_answer(sasl_broker):
    host, port = sasl_broker.listener("SASL_SSL").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(struct.pack(">ihhih", 12, 18, 0, 1, -1))
        sock.settimeout(10)
        data = b""
        while chunk := sock.recv(4096):
            data += chunk
    assert data == b"" or data[0] == 21  # nothing, or a TLS alert


@pytest.mark.parametrize("listener,mechanism,user,password", LOGINS)
def test_kafkajs_logs_in_and_round_trips(sasl_broker, ca, listener, mechanism, user,
                                         password):
    security: dict[str, object] = {
        "sasl": {"mechanism": mechanism.lower(), "username": user, "password": password}}
    if listener == "SASL_SSL":
        security["ssl"] = {"ca": str(ca[0].cert)}
    topic = f"kafkajs-{listener}-{mechanism}".lower()
    assert round_trips.kafkajs(sasl_broker, topic, RECORDS,
                               bootstrap=sasl_broker.listener(listener), **security) == [
        f"v{i}" for i in range(RECORDS)]
