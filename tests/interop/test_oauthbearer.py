"""SASL/OAUTHBEARER (issue 18, KIP-768's broker-side JWT validation) against an ``odradek
serve`` process with a SASL_PLAINTEXT listener, the identity provider's JWKS served by a
small HTTP server on 127.0.0.1 that the test starts and stops.

- confluent-kafka (``oauth_cb`` giving a JWT the test signed and its expiry), kafka-python
  and aiokafka (``sasl_oauth_token_provider``) produce and consume as ``User:<sub>``.
- A token signed by another key, an expired one and one for another audience are refused:
  the client gets no metadata, the broker logs the failure with its reason.
- On the wire, as Kafka: an invalid token is answered with ``{"status":"invalid_token"}``,
  the client's ``\\x01`` then gets SASL_AUTHENTICATION_FAILED and the connection closes;
  a valid token's session lasts until the token expires (KIP-368: the client must
  re-authenticate with a new one - librdkafka does so by itself).
"""

from __future__ import annotations

import json
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.client.wire import WireClient, closed_by_peer
from odradek.security.oauth import initial_response
from tests.security.test_oauth import AUDIENCE, ISSUER, IdentityProvider, JwksServer

from . import round_trips
from .conftest import BrokerProcess, start_broker

pytestmark = pytest.mark.interop

WAIT = 30.0
RECORDS = 50
TOPIC = "oauth"


@pytest.fixture(scope="module")
def idp() -> IdentityProvider:
    return IdentityProvider()


@pytest.fixture(scope="module")
def jwks(idp: IdentityProvider) -> Iterator[JwksServer]:
    with JwksServer(idp) as server:
        yield server


def broker_args(jwks_url: str, **extra: str) -> list[str]:
    settings = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "OAUTHBEARER,PLAIN",
        "sasl.oauthbearer.jwks.endpoint.url": jwks_url,
        "sasl.oauthbearer.expected.audience": AUDIENCE,
        "sasl.oauthbearer.expected.issuer": ISSUER,
        "group.initial.rebalance.delay.ms": "0",
        **extra,
    }
    return [a for k, v in settings.items() for a in ("--override", f"{k}={v}")]


@pytest.fixture(scope="module")
def oauth_broker(tmp_path_factory: pytest.TempPathFactory,
                 jwks: JwksServer) -> Iterator[BrokerProcess]:
    with start_broker(tmp_path_factory.mktemp("odradek-data"), *broker_args(jwks.url)) as b:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(WAIT)
        yield b


def rdkafka(broker: BrokerProcess, token: Any, *, expired: bool = False) -> dict[str, Any]:
    """librdkafka's settings; ``token()`` gives a fresh JWT each time it is asked.
    ``expired``: the token has expired, and librdkafka, which would not send it, is told
    it lasts another minute."""
    calls: list[float] = []

    def oauth_cb(_config: str) -> tuple[str, float]:
        calls.append(time.time())
        value = token()
        claims = json.loads(_b64(value.split(".")[1]))
        return value, time.time() + 60 if expired else float(claims["exp"])

    return {"bootstrap.servers": broker.listener("SASL_PLAINTEXT"),
            "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER",
            "oauth_cb": oauth_cb}


def _b64(part: str) -> bytes:
    import base64
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


def round_trip(conf: dict[str, Any], tag: str) -> None:
    assert round_trips.rdkafka(conf, TOPIC, tag.encode(), RECORDS) == round_trips.expected(
        RECORDS)


def test_confluent_kafka_produces_and_consumes_with_a_jwt(oauth_broker, idp, jwks):
    round_trip(rdkafka(oauth_broker, lambda: idp.token("alice")), "rdkafka")
    assert jwks.requests >= 1  # the broker read the JWKS from the test's server


def other_key_token(idp: IdentityProvider) -> str:
    from cryptography.hazmat.primitives.asymmetric import rsa
    return idp.token("mallory", key=rsa.generate_private_key(public_exponent=65537,
                                                             key_size=2048))


REFUSED = {
    "another key": (other_key_token, "Signature verification failed"),
    "expired": (lambda idp: idp.token("alice", lifetime=-300), "expired"),
    "wrong audience": (lambda idp: idp.token("alice", aud="elsewhere"), "audience"),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_refused_tokens_get_no_metadata_and_the_broker_logs_why(oauth_broker, idp, case):
    make, reason = REFUSED[case]
    token = make(idp)
    seen = len(oauth_broker.stderr_lines)
    admin = AdminClient(rdkafka(oauth_broker, lambda: token, expired=case == "expired"))
    with pytest.raises(KafkaException):  # no metadata: nothing was served
        admin.list_topics(timeout=5)
    deadline = time.monotonic() + 5
    refused: list[str] = []
    while not refused and time.monotonic() < deadline:
        refused = [line for line in oauth_broker.stderr_lines[seen:]
                   if 'SASL OAUTHBEARER: {"status":"invalid_token"}' in line]
        time.sleep(0.05)
    assert refused, oauth_broker.output()[-2000:]
    assert reason.lower() in refused[0].lower(), refused[0]
    assert token not in "".join(oauth_broker.stderr_lines)  # tokens are not logged
    oauth_broker.assert_alive()


def test_kafka_python_produces_and_consumes_with_a_token_provider(oauth_broker, idp):
    try:
        from kafka.net.sasl.oauth import AbstractTokenProvider  # kafka-python 3
    except ImportError:
        from kafka.sasl.oauth import AbstractTokenProvider  # kafka-python 2

    class Provider(AbstractTokenProvider):
        def token(self) -> str:
            return idp.token("bob")

        def extensions(self) -> dict[str, str]:  # RFC 7628 key=value pairs, accepted
            return {"traceId": "kafka-python"}

    conf = {"bootstrap_servers": oauth_broker.listener("SASL_PLAINTEXT"),
            "security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "OAUTHBEARER",
            "sasl_oauth_token_provider": Provider()}
    assert round_trips.kafka_python(conf, TOPIC, b"kafka-python", RECORDS) == (
        round_trips.expected(RECORDS))


def test_kafkajs_produces_and_consumes_with_a_token_provider(oauth_broker, idp):
    assert round_trips.kafkajs(
        oauth_broker, "oauth-kafkajs", RECORDS, bootstrap=oauth_broker.listener("SASL_PLAINTEXT"),
        sasl={"mechanism": "oauthbearer", "token": idp.token("carol")}) == [
        f"v{i}" for i in range(RECORDS)]


def test_aiokafka_produces_and_consumes_with_a_token_provider(oauth_broker, idp):
    from aiokafka.abc import AbstractTokenProvider

    class Provider(AbstractTokenProvider):
        async def token(self) -> str:
            return idp.token("carol")

    conf = {"bootstrap_servers": oauth_broker.listener("SASL_PLAINTEXT"),
            "security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "OAUTHBEARER",
            "sasl_oauth_token_provider": Provider()}
    assert round_trips.aiokafka(conf, TOPIC, b"aiokafka", RECORDS) == (
        round_trips.expected(RECORDS))


def oauth_login(client: WireClient, token: str) -> Any:
    answer = client.request(17, 1, {"mechanism": "OAUTHBEARER"})
    assert answer.error_code.value == 0, answer
    return client.request(36, 2, {"auth_bytes": initial_response(token)})


def test_on_the_wire_as_kafka(oauth_broker, idp):
    port = int(oauth_broker.listener("SASL_PLAINTEXT").rsplit(":", 1)[1])
    with WireClient(port) as client:  # valid: the session ends when the token does
        ok = oauth_login(client, idp.token("alice", lifetime=20))
        assert ok.error_code.value == 0 and bytes(ok.auth_bytes) == b""
        assert 15 <= ok.session_lifetime.total_seconds() <= 20
        meta = client.request(3, 12, {"topics": None, "allow_auto_topic_creation": False})
        assert TOPIC in [t.name for t in meta.topics]
    with WireClient(port) as client:  # invalid: the error JSON, then \x01 fails it
        answer = oauth_login(client, idp.token("alice", lifetime=-300))
        assert answer.error_code.value == 0
        assert json.loads(bytes(answer.auth_bytes)) == {"status": "invalid_token"}
        failed = client.request(36, 2, {"auth_bytes": b"\x01"})
        assert failed.error_code.value == 58  # SASL_AUTHENTICATION_FAILED
        assert failed.error_message == '{"status":"invalid_token"}'
        assert closed_by_peer(client)
    with WireClient(port) as client:  # a malformed first message fails at once
        failed = oauth_login(client, "not a jwt at all")
        assert failed.error_code.value == 58
        assert "invalid credentials with SASL mechanism OAUTHBEARER" in failed.error_message
        assert closed_by_peer(client)
    with WireClient(port) as client:  # a session past its token's expiry is closed
        ok = oauth_login(client, idp.token("alice", lifetime=2))
        assert 0 < ok.session_lifetime.total_seconds() <= 2
        time.sleep(2.5)
        client.sock.sendall(struct.pack(">ihhih", 12, 3, 1, 9, -1) + struct.pack(">i", 0))
        assert closed_by_peer(client)


def test_librdkafka_re_authenticates_with_fresh_tokens(tmp_path: Path, idp, jwks):
    """Tokens of 8 s: librdkafka asks oauth_cb for a new one before each expires (at 80%
    of its lifetime, checked once a second - shorter tokens outrun that) and
    re-authenticates (the broker ends each session with its token) while producing."""
    with start_broker(tmp_path / "data", *broker_args(jwks.url)) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(WAIT)
        issued: list[str] = []

        def token() -> str:
            issued.append(idp.token("alice", lifetime=8))
            return issued[-1]

        producer = Producer({**rdkafka(broker, token), "linger.ms": 1})
        sent = 0
        deadline = time.monotonic() + 13
        while time.monotonic() < deadline:
            producer.produce(TOPIC, value=b"x", partition=0)
            sent += 1
            producer.poll(0.05)
        assert producer.flush(WAIT) == 0, broker.output()[-3000:]
        low, high = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "w"}
                             ).get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=WAIT)
        assert high - low == sent
        assert len(issued) >= 3  # fresh tokens, used to re-authenticate
        assert "closing connection" not in "".join(broker.stderr_lines), broker.output()


def test_a_jwks_endpoint_over_https_is_trusted_through_the_jaas_truststore(
        tmp_path: Path, idp):
    """Kafka's JAAS options for the JWKS endpoint's TLS: with
    ``ssl.truststore.location`` (a PEM CA) on the listener's OAUTHBEARER login module the
    broker fetches the keys over HTTPS and accepts the token; without it (the system's
    CAs, which do not know the test CA) the keys cannot be fetched and the token is
    refused."""
    from odradek.devcluster.certs import TestCA

    ca = TestCA(tmp_path / "ca")
    keystore = ca.issue("idp", "CN=localhost", server=True).keystore()
    module = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
    with JwksServer(idp, tls=keystore) as https:
        for trusted in (True, False):
            jaas = (f'{module} required ssl.truststore.type="PEM" '
                    f'ssl.truststore.location="{ca.cert}";' if trusted else
                    f"{module} required;")
            with start_broker(tmp_path / f"data-{trusted}", *broker_args(
                    https.url, **{"listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config":
                                  jaas})) as broker:
                conf = rdkafka(broker, lambda: idp.token("frank"))
                admin = AdminClient({**conf, "socket.timeout.ms": 5000})
                if trusted:
                    assert TOPIC not in admin.list_topics(timeout=WAIT).topics  # served
                else:
                    with pytest.raises(KafkaException):
                        admin.list_topics(timeout=5)
                    assert any("certificate verify failed" in line.lower() or
                               "ssl" in line.lower() for line in broker.stderr_lines), (
                        broker.output()[-3000:])
