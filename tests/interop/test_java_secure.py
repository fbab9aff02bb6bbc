"""Kafka's Java client (kafka-clients 4.4.0) over TLS and SASL (issue 18) against an
``odradek serve`` process with PLAINTEXT, SSL, SASL_PLAINTEXT and SASL_SSL listeners,
set up as tests/interop/test_sasl.py's broker is (its ``broker_args``, ``add_scram_users``
and ``ca``), plus an SSL listener.

One Java program (tests/interop/java/secure/SecureRoundTrip.java, compiled once) creates
a topic with the Admin client, produces records (acks=all, idempotent) and reads them back
(assign + seekToBeginning), every ``--property`` going into all three clients' settings;
one JVM per case:

- SSL one-way, the CA as a PEM truststore (``ssl.truststore.type=PEM``, KIP-651);
- SASL_SSL with SCRAM-SHA-512 (dave) and the PEM truststore;
- SASL_PLAINTEXT with PLAIN (alice);
- a wrong SCRAM password: the client reports Kafka's SaslAuthenticationException.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.jvm import compile_java, java_command, require_jars

from .conftest import BrokerProcess, run_tool, start_broker
from .test_sasl import add_scram_users, broker_args, ca  # noqa: F401 - ca: the fixture

pytestmark = pytest.mark.interop

SOURCES = Path(__file__).parent / "java" / "secure"
RECORDS = 20
JVM_TIMEOUT = 120.0  # seconds for one JVM: generous, the machine is shared
LISTENERS = ("PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,"
             "SASL_SSL://127.0.0.1:0")
SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"
PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"


@pytest.fixture(scope="module")
def secure_broker(tmp_path_factory: pytest.TempPathFactory,
                  ca) -> Iterator[BrokerProcess]:  # noqa: F811 - the fixture
    with start_broker(tmp_path_factory.mktemp("odradek-data"),
                      *broker_args(ca[1], listeners=LISTENERS)) as broker:
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


def test_java_client_over_sasl_ssl_with_scram_sha_512(secure_broker, ca,  # noqa: F811
                                                      java_classes):
    result = round_trip(java_classes, secure_broker.listener("SASL_SSL"), "java-sasl-ssl",
                        {"security.protocol": "SASL_SSL", **truststore(ca),
                         "sasl.mechanism": "SCRAM-SHA-512",
                         "sasl.jaas.config": jaas(SCRAM, "dave", "dave-secret")})
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
