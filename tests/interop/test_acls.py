"""ACLs (issue 18) against an ``odradek serve`` process with the authorizer on
(``authorizer.class.name``), a SASL_PLAINTEXT listener with PLAIN users admin (a super
user), alice and bob, and a PLAINTEXT listener whose anonymous clients have no ACLs: ACLs
made, listed and deleted with confluent-kafka's admin client, then exercised by
librdkafka and kafka-python clients as each user.

- alice may write and read the topic she is allowed (a literal ACL), topics with her
  prefix (a prefixed ACL) and use her group; bob may do nothing: his produce, fetch,
  group join and offset commit get TOPIC/GROUP_AUTHORIZATION_FAILED, and Metadata tells
  him nothing of topics he may not describe (not even whether they exist).
- A DENY wins over an ALLOW; a super user passes every check.
- ACLs survive a restart; without an authorizer the ACL APIs answer SECURITY_DISABLED.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from odradek.client.wire import WireClient

from .conftest import BrokerProcess, start_broker
from .test_sasl import plain_login

pytestmark = pytest.mark.interop

WAIT = 30.0
JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
        'user_admin="admin-secret" user_alice="alice-secret" user_bob="bob-secret";')
SETTINGS = {
    "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
    "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "super.users": "User:admin",
    "group.initial.rebalance.delay.ms": "0",
}
ARGS = [a for k, v in SETTINGS.items() for a in ("--override", f"{k}={v}")]
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
LITERAL, PREFIXED = ResourcePatternType.LITERAL, ResourcePatternType.PREFIXED


def login(broker: BrokerProcess, user: str) -> dict[str, str]:
    return {"bootstrap.servers": broker.listener("SASL_PLAINTEXT"),
            "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
            "sasl.username": user, "sasl.password": f"{user}-secret"}


def acl(rtype: ResourceType, name: str, user: str, op: AclOperation,
        perm: AclPermissionType = ALLOW, pattern: ResourcePatternType = LITERAL) -> AclBinding:
    return AclBinding(rtype, name, pattern, f"User:{user}", "*", op, perm)


ACLS = [
    acl(ResourceType.TOPIC, "orders", "alice", AclOperation.WRITE),
    acl(ResourceType.TOPIC, "orders", "alice", AclOperation.READ),
    acl(ResourceType.TOPIC, "alice-", "alice", AclOperation.ALL, pattern=PREFIXED),
    acl(ResourceType.GROUP, "alice-group", "alice", AclOperation.READ),
    # Everything on every topic for alice, but "secret" denied: the DENY wins.
    acl(ResourceType.TOPIC, "*", "alice", AclOperation.DESCRIBE),
    acl(ResourceType.TOPIC, "secret", "alice", AclOperation.ALL),
    acl(ResourceType.TOPIC, "secret", "alice", AclOperation.READ, DENY),
]


def make_topics(admin: AdminClient, *names: str) -> None:
    for future in admin.create_topics([NewTopic(n, 1, 1) for n in names]).values():
        future.result(WAIT)


@pytest.fixture(scope="module")
def acl_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with start_broker(tmp_path_factory.mktemp("odradek-data"), *ARGS) as broker:
        admin = AdminClient(login(broker, "admin"))
        make_topics(admin, "orders", "alice-events", "secret", "payroll")
        for future in admin.create_acls(ACLS).values():
            future.result(WAIT)
        yield broker


def produce(conf: dict[str, str], topic: str, n: int = 5) -> list[KafkaError | None]:
    """Each record's delivery error (None: delivered)."""
    outcomes: list[KafkaError | None] = []
    producer = Producer({**conf, "linger.ms": 1, "message.timeout.ms": 10000})
    for i in range(n):
        producer.produce(topic, value=b"%d" % i,
                         on_delivery=lambda err, _msg: outcomes.append(err))
    producer.flush(WAIT)
    return outcomes


def test_acls_are_listed_as_created(acl_broker: BrokerProcess):
    admin = AdminClient(login(acl_broker, "admin"))
    everything = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                                  AclOperation.ANY, AclPermissionType.ANY)
    listed = admin.describe_acls(everything).result(WAIT)
    assert sorted(map(str, listed)) == sorted(map(str, ACLS))
    mine = AclBindingFilter(ResourceType.TOPIC, "alice-events", ResourcePatternType.MATCH,
                            None, None, AclOperation.ANY, AclPermissionType.ANY)
    matching = admin.describe_acls(mine).result(WAIT)
    assert {(b.name, b.resource_pattern_type) for b in matching} == {
        ("alice-", PREFIXED), ("*", LITERAL)}


def test_alice_writes_and_reads_what_she_is_allowed(acl_broker: BrokerProcess):
    alice = login(acl_broker, "alice")
    assert produce(alice, "orders") == [None] * 5
    assert produce(alice, "alice-events") == [None] * 5  # the prefixed ACL
    consumer = Consumer({**alice, "group.id": "alice-group", "auto.offset.reset": "earliest"})
    consumer.subscribe(["orders"])
    got: list[bytes] = []
    deadline = time.monotonic() + WAIT
    while len(got) < 5 and time.monotonic() < deadline:
        m = consumer.poll(1.0)
        if m is not None and m.error() is None:
            got.append(m.value())
    consumer.commit(asynchronous=False)
    consumer.close()
    assert got == [b"%d" % i for i in range(5)]


def test_bob_is_refused_everywhere_and_learns_nothing(acl_broker: BrokerProcess):
    bob = login(acl_broker, "bob")
    errors = produce(bob, "orders", 1)
    assert [e.code() for e in errors] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    md = AdminClient(bob).list_topics(timeout=WAIT)
    assert md.topics == {}  # all topics: none he may describe
    named = AdminClient(bob).list_topics("payroll", timeout=WAIT).topics["payroll"]
    assert named.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    missing = AdminClient(bob).list_topics("no-such-topic", timeout=WAIT)
    assert missing.topics["no-such-topic"].error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    consumer = Consumer({**bob, "group.id": "bobs-group", "auto.offset.reset": "earliest"})
    consumer.subscribe(["orders"])
    error = None
    deadline = time.monotonic() + WAIT
    while error is None and time.monotonic() < deadline:
        m = consumer.poll(0.5)
        if m is not None and m.error() is not None:
            error = m.error()
    consumer.close()
    assert error is not None and error.code() == KafkaError.GROUP_AUTHORIZATION_FAILED


def test_deny_wins_and_fetching_a_denied_topic_is_refused(acl_broker: BrokerProcess):
    alice = login(acl_broker, "alice")
    assert produce(alice, "secret") == [None] * 5  # ALL allowed, READ denied
    consumer = Consumer({**alice, "group.id": "alice-group", "enable.auto.commit": False})
    consumer.assign([TopicPartition("secret", 0, 0)])
    error = None
    deadline = time.monotonic() + WAIT
    while error is None and time.monotonic() < deadline:
        m = consumer.poll(0.5)
        if m is not None:
            assert m.error() is not None, "a record of a topic alice may not read"
            error = m.error()
    consumer.close()
    assert error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_kafka_python_sees_the_same_refusals(acl_broker: BrokerProcess):
    from kafka import KafkaProducer
    from kafka.errors import TopicAuthorizationFailedError

    conf = {"bootstrap_servers": acl_broker.listener("SASL_PLAINTEXT"),
            "security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN",
            "sasl_plain_username": "bob", "sasl_plain_password": "bob-secret",
            "max_block_ms": 5000}
    producer = KafkaProducer(**conf)
    try:
        with pytest.raises(TopicAuthorizationFailedError):
            producer.send("orders", b"x").get(timeout=10)
    finally:
        producer.close()


def test_super_users_pass_and_anonymous_plaintext_clients_do_not(acl_broker: BrokerProcess):
    admin = login(acl_broker, "admin")
    assert produce(admin, "payroll") == [None] * 5  # no ACL names admin: a super user
    errors = produce({"bootstrap.servers": acl_broker.bootstrap}, "payroll", 1)
    assert [e.code() for e in errors] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]


def test_acls_survive_a_restart_and_are_deleted(tmp_path: Path):
    data = tmp_path / "data"
    with start_broker(data, *ARGS) as broker:
        admin = AdminClient(login(broker, "admin"))
        make_topics(admin, "orders")
        for future in admin.create_acls(ACLS[:2]).values():
            future.result(WAIT)
        # Not the admin: bob may not create ACLs.
        bob = AdminClient(login(broker, "bob"))
        wish = acl(ResourceType.TOPIC, "orders", "bob", AclOperation.ALL)
        with pytest.raises(KafkaException, match="Cluster authorization failed"):
            bob.create_acls([wish])[wish].result(WAIT)
    with start_broker(data, *ARGS) as broker:
        alice = login(broker, "alice")
        assert produce(alice, "orders") == [None] * 5
        admin = AdminClient(login(broker, "admin"))
        flt = AclBindingFilter(ResourceType.TOPIC, "orders", LITERAL, "User:alice", None,
                               AclOperation.ANY, AclPermissionType.ANY)
        deleted = admin.delete_acls([flt])[flt].result(WAIT)
        assert len(deleted) == 2
        assert [e.code() for e in produce(alice, "orders", 1)] == [
            KafkaError.TOPIC_AUTHORIZATION_FAILED]


def test_without_an_authorizer_the_acl_apis_say_security_is_disabled(tmp_path: Path):
    with start_broker(tmp_path / "data") as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        binding = acl(ResourceType.TOPIC, "t", "alice", AclOperation.READ)
        with pytest.raises(KafkaException, match="No Authorizer is configured"):
            admin.create_acls([binding])[binding].result(WAIT)


def test_admin_apis_check_their_operations(acl_broker: BrokerProcess):
    """bob has no ACL: the admin APIs answer him with their authorization errors; alice
    may not delete records where she only reads and writes, and may describe the configs
    of her prefix's topics (ALL) but not of "orders" (WRITE implies nothing for configs)."""
    from confluent_kafka import TopicPartition as TP
    from confluent_kafka.admin import ConfigResource

    bob = AdminClient(login(acl_broker, "bob"))
    orders = ConfigResource(ConfigResource.Type.TOPIC, "orders")
    with pytest.raises(KafkaException, match="TOPIC_AUTHORIZATION_FAILED"):
        bob.describe_configs([orders])[orders].result(WAIT)
    # DescribeUserScramCredentials through the wire: confluent-kafka 2.16.1 (librdkafka
    # 2.16.0) aborts the process on this answer ("munmap_chunk(): invalid pointer"),
    # which has Kafka's shape (DescribeUserScramCredentialsRequest.getErrorResponse).
    port = int(acl_broker.listener("SASL_PLAINTEXT").rsplit(":", 1)[1])
    with WireClient(port) as client:
        assert plain_login(client, "bob", "bob-secret").error_code.value == 0
        answer = client.request(50, 0, {"users": None})
        assert answer.error_code.value == 31  # CLUSTER_AUTHORIZATION_FAILED
        assert list(answer.results) == []
        # AlterReplicaLogDirs needs ALTER on the cluster: every partition refused.
        answer = client.request(34, 2, {"dirs": [{"path": str(acl_broker.data_dir),
                                                  "topics": [{"name": "orders",
                                                              "partitions": [0, 1]}]}]})
        assert [(t.topic_name, p.partition_index, p.error_code.value)
                for t in answer.results for p in t.partitions] == [
            ("orders", 0, 31), ("orders", 1, 31)]
    alice = AdminClient(login(acl_broker, "alice"))
    # alice may describe "orders" (her READ and WRITE imply DESCRIBE) but not DELETE in it.
    deleted = alice.delete_records([TP("orders", 0, 1)])
    with pytest.raises(KafkaException, match="TOPIC_AUTHORIZATION_FAILED"):
        next(iter(deleted.values())).result(WAIT)
    mine = ConfigResource(ConfigResource.Type.TOPIC, "alice-events")
    assert "retention.ms" in alice.describe_configs([mine])[mine].result(WAIT)
    with pytest.raises(KafkaException, match="TOPIC_AUTHORIZATION_FAILED"):
        alice.describe_configs([orders])[orders].result(WAIT)



def test_client_quotas_need_the_cluster_config_operations(acl_broker: BrokerProcess,
                                                         tmp_path: Path):
    """``odradek quotas`` logged in as bob (no ACL) is refused, as CLUSTER_AUTHORIZATION_
    FAILED says; as the super user it works. Its --command-config is a Java client's."""
    import sys

    from .conftest import run_tool

    def quotas(user: str, *args: str):
        config = tmp_path / f"{user}.properties"
        config.write_text(
            "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
            "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule "
            f'required username="{user}" password="{user}-secret";\n')
        return run_tool([sys.executable, "-m", "odradek", "quotas", *args, "--bootstrap-server",
                         acl_broker.listener("SASL_PLAINTEXT"), "--command-config",
                         str(config)], check=False)

    for args in (["list"], ["set", "--user", "bob", "producer_byte_rate=1"]):
        refused = quotas("bob", *args)
        assert refused.returncode == 1 and "not authorized" in refused.stderr, refused
    assert quotas("admin", "set", "--user", "bob", "producer_byte_rate=1").returncode == 0
    assert quotas("admin", "list").stdout.splitlines() == [
        "Quota configs for user-principal 'bob' are producer_byte_rate=1"]
    assert quotas("admin", "remove", "--user", "bob").returncode == 0


def test_describe_cluster_reports_the_operations_one_may_do(acl_broker: BrokerProcess):
    """KIP-430 through the wire (librdkafka asks Metadata v12, which no longer has the
    field): a super user has every cluster operation, alice - with DESCRIBE on the
    cluster given to her here - DESCRIBE and nothing else."""
    port = int(acl_broker.listener("SASL_PLAINTEXT").rsplit(":", 1)[1])
    admin = AdminClient(login(acl_broker, "admin"))
    grant = acl(ResourceType.BROKER, "kafka-cluster", "alice", AclOperation.DESCRIBE)
    admin.create_acls([grant])[grant].result(WAIT)
    try:
        seen = {}
        for user in ("admin", "alice"):
            with WireClient(port) as client:
                assert plain_login(client, user, f"{user}-secret").error_code.value == 0
                answer = client.request(60, 0, {"include_cluster_authorized_operations": True})
                assert answer.error_code.value == 0
                seen[user] = {op for op in range(16)
                              if answer.cluster_authorized_operations & (1 << op)}
        assert seen["admin"] == {5, 7, 8, 9, 10, 11, 12}
        assert seen["alice"] == {8}  # DESCRIBE
    finally:
        for future in admin.delete_acls([AclBindingFilter(
                ResourceType.BROKER, "kafka-cluster", LITERAL, "User:alice", None,
                AclOperation.ANY, AclPermissionType.ANY)]).values():
            future.result(WAIT)


def test_topics_and_groups_report_the_operations_one_may_do(acl_broker: BrokerProcess):
    """KIP-430 for topics (Metadata's include_topic_authorized_operations, what
    librdkafka's describe_topics asks) and groups (DescribeGroups): alice may READ and
    WRITE "orders" (so DESCRIBE too) and do everything on her prefix's topics; READ on
    her group (so DESCRIBE). Metadata v10 also answers the cluster's for her."""
    from confluent_kafka import TopicCollection

    alice = AdminClient(login(acl_broker, "alice"))
    described = alice.describe_topics(TopicCollection(["orders", "alice-events"]),
                                       include_authorized_operations=True)
    ops = {name: set(future.result(WAIT).authorized_operations)
           for name, future in described.items()}
    assert ops["orders"] == {AclOperation.READ, AclOperation.WRITE, AclOperation.DESCRIBE}
    assert ops["alice-events"] == {
        AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DELETE,
        AclOperation.ALTER, AclOperation.DESCRIBE, AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS}
    port = int(acl_broker.listener("SASL_PLAINTEXT").rsplit(":", 1)[1])
    with WireClient(port) as client:
        assert plain_login(client, "alice", "alice-secret").error_code.value == 0
        answer = client.request(15, 5, {"groups": ["alice-group"],
                                        "include_authorized_operations": True})
        assert {op for op in range(16) if answer.groups[0].authorized_operations & (1 << op)
                } == {3, 8}  # READ, DESCRIBE
        answer = client.request(3, 10, {"topics": [{"name": "orders"}],
                                        "include_cluster_authorized_operations": True,
                                        "include_topic_authorized_operations": False})
        assert answer.cluster_authorized_operations == 0  # nothing on the cluster
        assert answer.topics[0].topic_authorized_operations == -(2**31)  # not asked


def test_describe_topic_partitions_tells_only_what_one_may_describe(acl_broker: BrokerProcess):
    """DescribeTopicPartitions (KIP-966) as Metadata: bob, who may describe nothing, gets
    TOPIC_AUTHORIZATION_FAILED with the zero topic id for a topic he names (whether it
    exists or not) and an empty list when he asks for every topic; alice, who may
    describe every topic, sees them all."""
    port = int(acl_broker.listener("SASL_PLAINTEXT").rsplit(":", 1)[1])
    asked = {"topics": [{"name": "payroll"}, {"name": "no-such-topic"}],
             "response_partition_limit": 100, "cursor": None}
    everything = {"topics": [], "response_partition_limit": 100, "cursor": None}
    with WireClient(port) as client:
        assert plain_login(client, "bob", "bob-secret").error_code.value == 0
        named = client.request(75, 0, asked)
        assert sorted((t.name, t.error_code.value, t.topic_id, t.partitions)
                      for t in named.topics) == [
            ("no-such-topic", KafkaError.TOPIC_AUTHORIZATION_FAILED, None, ()),
            ("payroll", KafkaError.TOPIC_AUTHORIZATION_FAILED, None, ())]
        assert client.request(75, 0, everything).topics == ()
    with WireClient(port) as client:
        assert plain_login(client, "alice", "alice-secret").error_code.value == 0
        seen = client.request(75, 0, everything)
        assert {"orders", "alice-events", "secret", "payroll"} <= {t.name for t in seen.topics}
        assert all(t.error_code.value == 0 and t.topic_id is not None for t in seen.topics)
