"""Kafka's Java client (kafka-clients 4.4.0) over TLS and SASL (issue 18) against an
``odradek serve`` process with PLAINTEXT, SSL, SASL_PLAINTEXT and SASL_SSL listeners,
set up as tests/interop/test_sasl.py's broker is (its ``mutual_tls_args``,
``add_scram_users`` and ``ca``): SSL one-way and mutual listeners besides the SASL ones.

One Java program (tests/interop/java/secure/SecureRoundTrip.java, compiled once) creates
a topic with the Admin client, produces records (acks=all, idempotent) and reads them back
(assign + seekToBeginning), every ``--property`` going into all three clients' settings;
one JVM per case:

- SSL one-way, the CA as a PEM truststore (``ssl.truststore.type=PEM``, KIP-651);
- mutual TLS with a PEM keystore, and without a certificate (refused);
- SASL_SSL with SCRAM-SHA-256 (carol) and SCRAM-SHA-512 (dave) and the PEM truststore;
- SASL_PLAINTEXT with PLAIN (alice);
- a wrong SCRAM password: the client reports Kafka's SaslAuthenticationException;
- OAUTHBEARER with a JWT the test signed (tests/interop/test_oauthbearer.py's broker and
  identity provider), and one signed by a key the broker does not know refused.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.jvm import compile_java, java_command, require_jars

from .conftest import BrokerProcess, run_tool, start_broker
from .test_oauthbearer import idp, jwks, oauth_broker  # noqa: F401 - fixtures
from .test_sasl import add_scram_users, ca, mutual_tls_args  # noqa: F401 - ca: the fixture

pytestmark = pytest.mark.interop

SOURCES = Path(__file__).parent / "java" / "secure"
RECORDS = 20
JVM_TIMEOUT = 120.0  # seconds for one JVM: generous, the machine is shared
SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"
PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"
OAUTH = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"


@pytest.fixture(scope="module")
def secure_broker(tmp_path_factory: pytest.TempPathFactory,
                  ca) -> Iterator[BrokerProcess]:  # noqa: F811 - the fixture
    with start_broker(tmp_path_factory.mktemp("odradek-data"), *mutual_tls_args(ca)) as broker:
        add_scram_users(broker.bootstrap)
        yield broker


@pytest.fixture(scope="module")
def java_classes() -> Path:
    require_jars()
    return compile_java(SOURCES)


def round_trip(classes: Path, bootstrap: str, topic: str, properties: dict[str, str]) -> dict:
    """SecureRoundTrip's RESULT: ``produced`` and ``consumed``, or ``error``."""
    args = ["--bootstrap", bootstrap, "--topic", topic, "--records", str(RECORDS)]
    for key, value in properties.items():
        args += ["--property", f"{key}={value}"]
    done = run_tool(java_command("SecureRoundTrip", *args, classpath_extra=[classes]),
                    timeout=JVM_TIMEOUT)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if not lines:
        pytest.fail(f"SecureRoundTrip printed no RESULT line\n--- stdout ---\n{done.stdout}\n"
                    f"--- stderr ---\n{done.stderr}")
    result = json.loads(lines[-1].removeprefix("RESULT "))
    result["_stderr"] = done.stderr
    return result


def truststore(ca) -> dict[str, str]:  # noqa: F811 - the fixture's value
    return {"ssl.truststore.type": "PEM", "ssl.truststore.location": str(ca[0].cert)}


def jaas(module: str, user: str, password: str) -> str:
    return f'{module} required username="{user}" password="{password}";'


def assert_round_trip(result: dict) -> None:
    assert "error" not in result, f"{result['error']}\n{result['_stderr'][-6000:]}"
    assert result["produced"] == RECORDS
    assert result["consumed"] == [f"value-{i}" for i in range(RECORDS)]


def test_java_client_over_ssl_with_a_pem_truststore(secure_broker, ca, java_classes):  # noqa: F811
    result = round_trip(java_classes, secure_broker.listener("SSL"), "java-ssl",
                        {"security.protocol": "SSL", **truststore(ca)})
    assert_round_trip(result)


def test_java_client_over_mutual_tls_with_a_pem_keystore(secure_broker, ca,  # noqa: F811
                                                         java_classes):
    """ssl.client.auth=required: with its certificate (a PEM keystore, KIP-651) the client
    is served; without one the handshake fails (SslAuthenticationException)."""
    keystore = ca[0].issue("java-client", "CN=java-client,O=tests").keystore()
    mtls = {"security.protocol": "SSL", **truststore(ca)}
    assert_round_trip(round_trip(
        java_classes, secure_broker.listener("MTLS"), "java-mtls",
        {**mtls, "ssl.keystore.type": "PEM", "ssl.keystore.location": str(keystore)}))
    refused = round_trip(java_classes, secure_broker.listener("MTLS"), "java-mtls-none",
                         {**mtls, "request.timeout.ms": "10000",
                          "default.api.timeout.ms": "15000"})
    assert "produced" not in refused, refused
    assert "SslAuthenticationException" in refused["error"], refused["error"]


@pytest.mark.parametrize("mechanism,user", [("SCRAM-SHA-256", "carol"),
                                            ("SCRAM-SHA-512", "dave")])
def test_java_client_over_sasl_ssl_with_scram(secure_broker, ca, java_classes,  # noqa: F811
                                              mechanism, user):
    result = round_trip(java_classes, secure_broker.listener("SASL_SSL"),
                        f"java-sasl-ssl-{user}",
                        {"security.protocol": "SASL_SSL", **truststore(ca),
                         "sasl.mechanism": mechanism,
                         "sasl.jaas.config": jaas(SCRAM, user, f"{user}-secret")})
    assert_round_trip(result)


def test_java_client_over_sasl_plaintext_with_plain(secure_broker, java_classes):
    result = round_trip(java_classes, secure_broker.listener("SASL_PLAINTEXT"),
                        "java-sasl-plaintext",
                        {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                         "sasl.jaas.config": jaas(PLAIN, "alice", "alice-secret")})
    assert_round_trip(result)


def test_java_client_with_a_wrong_password_gets_an_authentication_error(
        secure_broker, ca, java_classes):  # noqa: F811
    seen = len(secure_broker.stderr_lines)
    result = round_trip(java_classes, secure_broker.listener("SASL_SSL"), "java-wrong-password",
                        {"security.protocol": "SASL_SSL", **truststore(ca),
                         "sasl.mechanism": "SCRAM-SHA-512",
                         "sasl.jaas.config": jaas(SCRAM, "dave", "wrong")})
    assert "produced" not in result, result
    assert "SaslAuthenticationException" in result["error"], result["error"]
    assert "Authentication failed" in result["error"], result["error"]
    refused = [line for line in secure_broker.stderr_lines[seen:]
               if "SASL SCRAM-SHA-512: Authentication failed" in line]
    assert refused, secure_broker.output()[-2000:]
    secure_broker.assert_alive()


def test_java_client_over_sasl_with_oauthbearer(oauth_broker, idp, java_classes):  # noqa: F811
    """OAuthBearerLoginModule with a login callback handler handing over a JWT the test
    signed (tests/interop/java/secure/StaticTokenLogin.java); the broker checks it
    against the test's JWKS (tests/interop/test_oauthbearer.py's broker)."""
    token = idp.token("erin")
    result = round_trip(java_classes, oauth_broker.listener("SASL_PLAINTEXT"), "java-oauth",
                        {"security.protocol": "SASL_PLAINTEXT",
                         "sasl.mechanism": "OAUTHBEARER",
                         "sasl.login.callback.handler.class": "StaticTokenLogin",
                         "sasl.jaas.config": f"{OAUTH} required token=\"{token}\";"})
    assert_round_trip(result)
    from tests.security.test_oauth import IdentityProvider

    forged = IdentityProvider("stranger").token("erin")  # a key the JWKS does not have
    refused = round_trip(java_classes, oauth_broker.listener("SASL_PLAINTEXT"),
                         "java-oauth-refused",
                         {"security.protocol": "SASL_PLAINTEXT",
                          "sasl.mechanism": "OAUTHBEARER",
                          "sasl.login.callback.handler.class": "StaticTokenLogin",
                          "sasl.jaas.config": f"{OAUTH} required token=\"{forged}\";"})
    assert "produced" not in refused, refused
    assert "SaslAuthenticationException" in refused["error"], refused["error"]
