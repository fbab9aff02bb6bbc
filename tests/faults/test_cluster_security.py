"""A secured cluster (issue 18): two brokers whose only listener is SASL_SSL, used by the
brokers themselves too (``inter.broker.listener.name``, PLAIN as the broker user, TLS
checked against the test CA), with the authorizer on. What is made through one broker -
a SCRAM user, ACLs, a client quota - is in force on the other (the cluster's ZooKeeper
holds them, every broker follows it), and replication runs over the secured listener.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from odradek.devcluster.certs import TestCA
from tests.cluster_processes import Cluster, run_cluster
from tests.interop.conftest import run_tool
from tests.zookeeper import ZooKeeperServer

pytestmark = pytest.mark.cluster

WAIT = 60.0
JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
        'username="broker" password="broker-secret" '
        'user_broker="broker-secret" user_admin="admin-secret";')


def settings(certs: Path) -> dict[str, str]:
    ca = TestCA(certs / "ca")
    server = ca.issue("broker", "CN=broker", server=True)
    return {
        "listeners": "SASL_SSL://127.0.0.1:0",
        "inter.broker.listener.name": "SASL_SSL",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": JAAS,
        "ssl.keystore.location": str(server.keystore()),
        "ssl.truststore.location": str(ca.cert),
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:broker;User:admin",
        "default.replication.factor": "2",
        "offsets.topic.replication.factor": "2",
    }


def login(ca: str, user: str, password: str, mechanism: str = "PLAIN") -> dict[str, str]:
    return {"security.protocol": "SASL_SSL", "ssl.ca.location": ca,
            "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password}


def client(cluster: Cluster, node: int, user: str, password: str,
           mechanism: str = "PLAIN") -> dict[str, str]:
    """A client of broker ``node`` only (its bootstrap), logged in as ``user``."""
    return {**cluster.client_settings, **login(cluster.client_settings["ssl.ca.location"],
                                               user, password, mechanism),
            "bootstrap.servers": cluster.brokers[node].bootstrap}


def eventually(check: Callable[[], bool], what: str, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"not in time: {what}"
        time.sleep(0.2)


def test_users_acls_and_quotas_made_on_one_broker_hold_on_the_other(
        zookeeper: ZooKeeperServer, tmp_path: Path) -> None:
    zookeeper.ensure_running()
    config = settings(tmp_path / "certs")
    ca = config["ssl.truststore.location"]
    with run_cluster(zookeeper, tmp_path, size=2, client_settings=login(
            ca, "admin", "admin-secret"), **config) as cluster:
        admin1 = AdminClient(client(cluster, 1, "admin", "admin-secret"))
        # Through broker 1: a SCRAM user, a topic on both brokers, carol's ACLs.
        admin1.alter_user_scram_credentials([UserScramCredentialUpsertion(
            "carol", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096),
            b"carol-secret")])["carol"].result(WAIT)
        admin1.create_topics([NewTopic("shared", 1, 2)])["shared"].result(WAIT)
        for op in (AclOperation.WRITE, AclOperation.READ):
            admin1.create_acls([AclBinding(ResourceType.TOPIC, "shared",
                                           ResourcePatternType.LITERAL, "User:carol", "*",
                                           op, AclPermissionType.ALLOW)])
        admin1.create_acls([AclBinding(ResourceType.GROUP, "carols",
                                       ResourcePatternType.LITERAL, "User:carol", "*",
                                       AclOperation.READ, AclPermissionType.ALLOW)])
        properties = tmp_path / "admin.properties"
        properties.write_text(
            "security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\n"
            f"ssl.truststore.type=PEM\nssl.truststore.location={ca}\n"
            "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule "
            'required username="admin" password="admin-secret";\n')

        def quotas(node: int, *args: str) -> str:
            return run_tool([sys.executable, "-m", "odradek", "quotas", *args,
                             "--bootstrap-server", cluster.brokers[node].bootstrap,
                             "--command-config", str(properties)]).stdout
        quotas(1, "set", "--user", "carol", "producer_byte_rate=10485760")

        # Broker 2 knows all of it: ACLs and quotas as listed there...
        admin2 = AdminClient(client(cluster, 2, "admin", "admin-secret"))
        carol_acls = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY,
                                      "User:carol", None, AclOperation.ANY,
                                      AclPermissionType.ANY)
        eventually(lambda: len(admin2.describe_acls(carol_acls).result(WAIT)) == 3,
                   "broker 2 lists carol's ACLs")
        eventually(lambda: quotas(2, "list").splitlines() == [
            "Quota configs for user-principal 'carol' are producer_byte_rate=10485760"],
            "broker 2 lists carol's quota")
        # ... carol logs in there with SCRAM and writes with acks=all: the write is
        # replicated to broker 1 over the SASL_SSL listener (the ISR keeps both).
        carol = client(cluster, 2, "carol", "carol-secret", "SCRAM-SHA-256")
        producer = Producer({**carol, "acks": "all"})
        delivered: list[object] = []
        for i in range(10):
            producer.produce("shared", f"v{i}".encode(),
                             on_delivery=lambda err, msg: delivered.append(err))
        assert producer.flush(WAIT) == 0 and delivered == [None] * 10
        assert sorted(cluster.isr("shared")) == [1, 2]
        consumer = Consumer({**client(cluster, 1, "carol", "carol-secret", "SCRAM-SHA-256"),
                             "group.id": "carols", "auto.offset.reset": "earliest"})
        consumer.subscribe(["shared"])
        got = []
        deadline = time.monotonic() + WAIT
        while len(got) < 10 and time.monotonic() < deadline:
            msg = consumer.poll(1)
            if msg is not None and not msg.error():
                got.append(msg.value())
        consumer.close()
        assert got == [f"v{i}".encode() for i in range(10)]

        # A user made through broker 2, with no ACL, is refused on broker 1.
        admin2.alter_user_scram_credentials([UserScramCredentialUpsertion(
            "mallory", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096),
            b"mallory-secret")])["mallory"].result(WAIT)
        mallory = Producer({**client(cluster, 1, "mallory", "mallory-secret",
                                     "SCRAM-SHA-512"), "message.timeout.ms": 10000})
        errors: list[str] = []

        def produce_as_mallory() -> bool:
            errors.clear()
            mallory.produce("shared", b"x", on_delivery=lambda err, msg: errors.append(
                err.name() if err else "delivered"))
            mallory.flush(15)
            return errors == ["TOPIC_AUTHORIZATION_FAILED"]
        eventually(produce_as_mallory, "mallory logs in on broker 1 and is refused")
        # odradek's own client logs in with SCRAM too, and says when it cannot.
        wrong = tmp_path / "wrong.properties"
        wrong.write_text(properties.read_text().replace("PLAIN\n", "SCRAM-SHA-256\n").replace(
            "plain.PlainLoginModule", "scram.ScramLoginModule").replace(
            'username="admin" password="admin-secret"', 'username="carol" password="wrong"'))
        refused = run_tool([sys.executable, "-m", "odradek", "quotas", "list",
                            "--bootstrap-server", cluster.brokers[1].bootstrap,
                            "--command-config", str(wrong)], check=False)
        assert refused.returncode == 1 and "cannot log in" in refused.stderr, refused.stderr
