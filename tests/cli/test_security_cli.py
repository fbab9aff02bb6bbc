"""``odradek users`` and ``odradek acls`` as an operator runs them (``python -m odradek``
in a subprocess) against a broker with a PLAINTEXT listener, a SASL_PLAINTEXT listener
(PLAIN users admin and carol) and the authorizer on, ``User:admin`` and
``User:ANONYMOUS`` (the plaintext listener's clients) being super users; then clients
log in as the users made and do what the ACLs made allow."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.cli.security import read_properties, translate_client_config
from odradek.testing import RunningBroker, running_broker

from .test_tools import failed, odradek, ok

WAIT = 30.0
PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"
JAAS = f'{PLAIN} required user_admin="admin-secret" user_carol="carol-secret";'
SETTINGS = {
    "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
    "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "super.users": "User:admin;User:ANONYMOUS",
    "group.initial.rebalance.delay.ms": "0",
}


@pytest.fixture(scope="module")
def broker() -> Iterator[RunningBroker]:
    with running_broker(**SETTINGS) as running:
        admin = AdminClient({"bootstrap.servers": running.bootstrap})
        for future in admin.create_topics([NewTopic(t, 1, 1) for t in
                                           ("orders", "audit-log", "payroll")]).values():
            future.result(WAIT)
        yield running


def sasl(broker: RunningBroker) -> str:
    return f"127.0.0.1:{broker.broker.listener_ports['SASL_PLAINTEXT']}"


def login(broker: RunningBroker, user: str, password: str,
          mechanism: str = "SCRAM-SHA-256") -> dict[str, str]:
    return {"bootstrap.servers": sasl(broker), "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password}


def logs_in(conf: dict[str, str]) -> bool:
    """Whether a librdkafka client gets an answer (a failed login gets none, and an
    authentication error)."""
    errors: list[KafkaError] = []
    admin = AdminClient({**conf, "error_cb": errors.append})
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        try:
            admin.list_topics(timeout=0.5)
            return True
        except KafkaException:
            admin.poll(0)
        if any(e.code() == KafkaError._AUTHENTICATION for e in errors):
            return False
    raise AssertionError(f"neither an answer nor an authentication error: {errors}")


def produce(conf: dict[str, str], topic: str, n: int = 3) -> list[KafkaError | None]:
    outcomes: list[KafkaError | None] = []
    producer = Producer({**conf, "linger.ms": 1, "message.timeout.ms": 10000})
    for i in range(n):
        producer.produce(topic, value=b"%d" % i, on_delivery=lambda e, _m: outcomes.append(e))
    producer.flush(WAIT)
    return outcomes


def properties(tmp_path: Path, user: str, password: str) -> str:
    path = tmp_path / f"{user}.properties"
    path.write_text("# a Java client's settings\nsecurity.protocol=SASL_PLAINTEXT\n"
                    "sasl.mechanism=PLAIN\n"
                    f"sasl.jaas.config={PLAIN} required \\\n"
                    f'    username="{user}" password="{password}";\n')
    return str(path)


# --- users -----------------------------------------------------------------------------


def test_users_add_list_remove_and_a_client_logs_in_until_removed(broker, tmp_path):
    b = broker.bootstrap
    secret = tmp_path / "alice.pw"
    secret.write_text("alice-secret\n")
    out = ok(odradek("users", "add", "alice", "--mechanism", "scram-sha-256",
                     "--password-file", str(secret), bootstrap=b))
    assert out == "Set SCRAM-SHA-256 credential for user alice (4096 iterations).\n"
    ok(odradek("users", "add", "bob", "--mechanism", "SCRAM-SHA-512", "--mechanism",
               "SCRAM-SHA-256", "--iterations", "8192", "--password-file", "-",
               bootstrap=b, stdin=b"bob-secret\n"))
    listed = ok(odradek("users", "list", bootstrap=b))
    assert listed == ("alice SCRAM-SHA-256 iterations=4096\n"
                      "bob SCRAM-SHA-256 iterations=8192\n"
                      "bob SCRAM-SHA-512 iterations=8192\n")
    assert "secret" not in listed
    assert ok(odradek("users", "list", "bob", bootstrap=b)).startswith("bob SCRAM-SHA-256")
    err = failed(odradek("users", "list", "alice", "nobody", bootstrap=b))
    assert "user 'nobody' has no SCRAM credentials" in err

    assert logs_in(login(broker, "alice", "alice-secret"))
    assert logs_in(login(broker, "bob", "bob-secret", "SCRAM-SHA-512"))
    assert not logs_in(login(broker, "alice", "wrong"))

    out = ok(odradek("users", "remove", "alice", "--mechanism", "SCRAM-SHA-256", bootstrap=b))
    assert out == "Removed SCRAM-SHA-256 credential of user alice.\n"
    assert not logs_in(login(broker, "alice", "alice-secret"))
    err = failed(odradek("users", "remove", "alice", "--mechanism", "SCRAM-SHA-256",
                         bootstrap=b))
    assert "user 'alice' has no SCRAM-SHA-256 credential; nothing removed" in err
    assert "alice" not in ok(odradek("users", "list", bootstrap=b))


def test_users_add_needs_a_password_and_a_valid_mechanism(broker):
    b = broker.bootstrap
    err = failed(odradek("users", "add", "eve", "--mechanism", "SCRAM-SHA-256",
                         bootstrap=b, stdin=b""), 2)
    assert "no terminal to ask for the password on: give --password-file" in err
    err = failed(odradek("users", "add", "eve", "--mechanism", "SCRAM-SHA-1",
                         "--password", "x", bootstrap=b), 2)
    assert "unknown SCRAM mechanism 'SCRAM-SHA-1'" in err
    # The broker's bounds (Kafka's: 4096 to 16384) come back as the broker words them.
    err = failed(odradek("users", "add", "eve", "--mechanism", "SCRAM-SHA-256",
                         "--password", "x", "--iterations", "100", bootstrap=b))
    assert "Iterations 100 must be between 4096 and 16384" in err


# --- acls ------------------------------------------------------------------------------


def test_producer_and_consumer_acls_let_a_scram_user_produce_and_consume(broker):
    b = broker.bootstrap
    ok(odradek("users", "add", "dave", "--mechanism", "SCRAM-SHA-512", "--password",
               "dave-secret", bootstrap=b))
    dave = login(broker, "dave", "dave-secret", "SCRAM-SHA-512")
    assert [e.code() for e in produce(dave, "orders", 1)] == [
        KafkaError.TOPIC_AUTHORIZATION_FAILED]

    out = ok(odradek("acls", "add", "--producer", "--topic", "orders", "--allow-principal",
                     "User:dave", bootstrap=b))
    assert out.startswith(
        "Adding ACLs for resource `ResourcePattern(resourceType=TOPIC, name=orders, "
        "patternType=LITERAL)`:\n"
        "\t(principal=User:dave, host=*, operation=CREATE, permissionType=ALLOW)\n"
        "\t(principal=User:dave, host=*, operation=DESCRIBE, permissionType=ALLOW)\n"
        "\t(principal=User:dave, host=*, operation=WRITE, permissionType=ALLOW)\n\n"
        "Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=orders, "
        "patternType=LITERAL)`:\n")
    assert produce(dave, "orders") == [None] * 3

    ok(odradek("acls", "add", "--consumer", "--topic", "orders", "--group", "dave-group",
               "--allow-principal", "User:dave", bootstrap=b))
    consumer = Consumer({**dave, "group.id": "dave-group", "auto.offset.reset": "earliest"})
    consumer.subscribe(["orders"])
    got: list[bytes] = []
    deadline = time.monotonic() + WAIT
    while len(got) < 3 and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            got.append(msg.value())
    consumer.commit(asynchronous=False)
    consumer.close()
    assert got == [b"0", b"1", b"2"]

    listed = ok(odradek("acls", "list", "--principal", "User:dave", bootstrap=b))
    assert listed == (
        "Current ACLs for resource `ResourcePattern(resourceType=GROUP, name=dave-group, "
        "patternType=LITERAL)`:\n"
        "\t(principal=User:dave, host=*, operation=READ, permissionType=ALLOW)\n\n"
        "Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=orders, "
        "patternType=LITERAL)`:\n"
        "\t(principal=User:dave, host=*, operation=CREATE, permissionType=ALLOW)\n"
        "\t(principal=User:dave, host=*, operation=DESCRIBE, permissionType=ALLOW)\n"
        "\t(principal=User:dave, host=*, operation=READ, permissionType=ALLOW)\n"
        "\t(principal=User:dave, host=*, operation=WRITE, permissionType=ALLOW)\n\n")


def test_list_and_remove_over_sasl_with_a_command_config(broker, tmp_path):
    b = broker.bootstrap
    ok(odradek("acls", "add", "--topic", "audit-", "--resource-pattern-type", "prefixed",
               "--allow-principal", "User:carol", "--operation", "read", "--operation",
               "Describe", "--deny-principal", "User:carol", "--deny-host", "10.0.0.1",
               "--operation", "describe", bootstrap=b))
    ok(odradek("acls", "add", "--cluster", "--operation", "IdempotentWrite",
               "--allow-principal", "User:carol", bootstrap=b))

    # As admin, a super user, through a Java client's properties file on the SASL port.
    admin_conf = properties(tmp_path, "admin", "admin-secret")
    s = sasl(broker)
    listed = ok(odradek("acls", "list", "--topic", "audit-log", "--resource-pattern-type",
                        "match", "--command-config", admin_conf, bootstrap=s))
    assert listed == (
        "Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=audit-, "
        "patternType=PREFIXED)`:\n"
        "\t(principal=User:carol, host=*, operation=DESCRIBE, permissionType=ALLOW)\n"
        "\t(principal=User:carol, host=*, operation=READ, permissionType=ALLOW)\n"
        "\t(principal=User:carol, host=10.0.0.1, operation=DESCRIBE, permissionType=DENY)\n"
        "\t(principal=User:carol, host=10.0.0.1, operation=READ, permissionType=DENY)\n\n")
    assert "resourceType=CLUSTER, name=kafka-cluster" in ok(
        odradek("acls", "list", "--cluster", "--command-config", admin_conf, bootstrap=s))

    # carol has no ALTER/DESCRIBE on the cluster: refused, and told why (librdkafka
    # hides DescribeAcls' refusal and crashes on DescribeUserScramCredentials').
    carol_conf = properties(tmp_path, "carol", "carol-secret")
    for argv, needs in ((["acls", "list"], "DESCRIBE"), (["users", "list"], "DESCRIBE"),
                        (["acls", "remove", "--force", "--topic", "audit-"], "ALTER"),
                        (["acls", "add", "--topic", "x", "--allow-principal", "User:carol"],
                         "ALTER"),
                        (["users", "add", "carol", "--mechanism", "SCRAM-SHA-256",
                          "--password", "pw"], "ALTER")):
        err = failed(odradek(*argv, "--command-config", carol_conf, bootstrap=s))
        assert "not authorized: the principal this client logs in as needs " \
               f"{needs} on the cluster" in err, argv
    err = failed(odradek("users", "list", "--command-config",
                         properties(tmp_path, "carol", "wrong"), "--request-timeout-ms",
                         "2000", bootstrap=s))
    assert "cannot log in to the broker at" in err

    # Without a terminal, remove needs --force.
    err = failed(odradek("acls", "remove", "--topic", "audit-", bootstrap=b, stdin=b"y\n"), 2)
    assert "give --force to remove without confirmation" in err
    out = ok(odradek("acls", "remove", "--force", "--topic", "audit-", "--deny-principal",
                     "User:carol", "--command-config", admin_conf, bootstrap=s))
    assert out.startswith("Removed ACLs for resource `ResourcePattern(resourceType=TOPIC, "
                          "name=audit-, patternType=PREFIXED)`:\n")
    assert out.count("permissionType=DENY") == 2 and "ALLOW" not in out
    left = ok(odradek("acls", "list", "--topic", "audit-", bootstrap=b))
    assert "DENY" not in left and left.count("permissionType=ALLOW") == 2
    out = ok(odradek("acls", "remove", "--force", "--topic", "no-such", bootstrap=b))
    assert out == "No ACLs match; nothing removed.\n"


def test_remove_asks_on_a_terminal(broker):
    b = broker.bootstrap
    ok(odradek("acls", "add", "--group", "ask-me", "--allow-principal", "User:carol",
               "--operation", "Read", bootstrap=b))
    for answer, code in ((b"n\n", 1), (b"y\n", 0)):
        controller, terminal = pty.openpty()
        try:
            proc = subprocess.Popen(
                [sys.executable, "-m", "odradek", "acls", "remove", "--group", "ask-me",
                 "--bootstrap-server", b], stdin=terminal, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE)
            os.write(controller, answer)
            out, err = proc.communicate(timeout=60)
        finally:
            os.close(controller)
            os.close(terminal)
        assert proc.returncode == code, out.decode() + err.decode()
        assert "Remove these 1 ACL(s)? (y/n)" in err.decode()
        assert "ACLs to remove for resource `ResourcePattern(resourceType=GROUP, " \
               "name=ask-me, patternType=LITERAL)`" in out.decode()
    assert "ask-me" not in ok(odradek("acls", "list", bootstrap=b))


def test_bad_usage_is_explained(broker, tmp_path):
    b = broker.bootstrap
    cases = [
        (["acls", "add", "--topic", "t"], "give --allow-principal or --deny-principal"),
        (["acls", "add", "--allow-principal", "User:x"], "give a resource"),
        (["acls", "add", "--group", "g", "--operation", "write", "--allow-principal",
          "User:x"], "GROUP ACLs cannot have operation(s) WRITE"),
        (["acls", "add", "--topic", "t", "--operation", "fly", "--allow-principal",
          "User:x"], "unknown operation 'fly'"),
        (["acls", "add", "--topic", "t", "--allow-principal", "alice"],
         "a principal is TYPE:NAME"),
        (["acls", "add", "--consumer", "--topic", "t", "--allow-principal", "User:x"],
         "with --consumer give --group"),
        (["acls", "add", "--producer", "--topic", "t", "--operation", "read",
          "--allow-principal", "User:x"], "cannot be combined with --operation"),
    ]
    for argv, message in cases:
        assert message in failed(odradek(*argv, bootstrap=b), 2), argv
    kerberos = tmp_path / "krb.properties"
    kerberos.write_text("sasl.jaas.config=com.sun.security.auth.module.Krb5LoginModule "
                        "required useKeyTab=true;\n")
    err = failed(odradek("users", "list", "--command-config", str(kerberos), bootstrap=b), 2)
    assert "Krb5LoginModule cannot be used from here" in err


def test_acls_against_a_broker_without_an_authorizer_say_so():
    with running_broker() as plain:
        err = failed(odradek("acls", "list", bootstrap=plain.bootstrap))
        assert "no authorizer is configured on the broker: set authorizer.class.name" in err
        err = failed(odradek("acls", "add", "--topic", "t", "--allow-principal", "User:x",
                             bootstrap=plain.bootstrap))
        assert "no authorizer is configured on the broker" in err
        err = failed(odradek("acls", "remove", "--force", "--topic", "t",
                             bootstrap=plain.bootstrap))
        assert "no authorizer is configured on the broker" in err
        # SCRAM users need no authorizer.
        ok(odradek("users", "add", "u", "--mechanism", "SCRAM-SHA-256", "--password", "p",
                   bootstrap=plain.bootstrap))
        assert ok(odradek("users", "list", bootstrap=plain.bootstrap)) == \
            "u SCRAM-SHA-256 iterations=4096\n"


# --- the properties file ------------------------------------------------------------------


def test_java_client_properties_become_librdkafka_settings():
    props = read_properties(
        "# comment\n! another\nsecurity.protocol = SASL_SSL\nsasl.mechanism: SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule \\\n"
        '   required username="svc" password="p\\\\\\"w";\n'
        "ssl.truststore.type=PEM\nssl.truststore.location=/etc/ca.pem\n"
        "ssl.endpoint.identification.algorithm=\n")
    assert props["security.protocol"] == "SASL_SSL"
    assert translate_client_config(props) == {
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "svc", "sasl.password": 'p"w',
        "ssl.ca.location": "/etc/ca.pem", "ssl.endpoint.identification.algorithm": "none"}
    plain = translate_client_config(
        {"sasl.jaas.config": f'{PLAIN} required username="u" password="p";'})
    assert plain == {"sasl.mechanism": "PLAIN", "sasl.username": "u", "sasl.password": "p"}
    for bad, message in (
            ({"sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule "
                                  'required username="u" password="p";'}, "set sasl.mechanism"),
            ({"ssl.truststore.location": "/x.jks"}, "ssl.truststore.type=JKS cannot be read"),
            ({"sasl.jaas.config": f"{PLAIN} required;"}, "needs username")):
        with pytest.raises(ValueError, match=message):
            translate_client_config(bad)
