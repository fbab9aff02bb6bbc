"""Record the fuzz tier's corpus: the requests real clients send (run by hand, not by
pytest; the result is kept in the repository so the tier runs without the clients).

    .venv/bin/python -m tests.fuzz.record_corpus

An in-process broker behind ``RecordingProxy``; confluent-kafka (admin calls, a producer
per codec, an idempotent and a transactional producer, classic and KIP-848 consumer
groups, offsets by time), kafka-python and aiokafka (produce, group consume and commit)
and this repository's own client (client quotas, SCRAM users, by-hand requests of the
APIs no client above sends, share groups among them) talk to it through the proxy.
Frames are kept once per distinct content, at most ``PER_VERSION`` per API version, and
written to ``corpus/requests.bin`` as size-prefixed frames (the wire format), with a
summary of API keys and versions on stdout.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
import time
from collections import Counter
from pathlib import Path

from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    ElectionType,
    Producer,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)

from odradek.client.wire import WireClient
from odradek.server.handlers import HANDLERS
from odradek.testing import running_broker
from tests.fuzz.proxy import RecordingProxy

CORPUS = Path(__file__).parent / "corpus" / "requests.bin"
PER_VERSION = 6
WAIT = 30.0
PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              'username="fz" password="fz-secret" user_fz="fz-secret";')
SCRAM_USERS = {"fz-256": ScramMechanism.SCRAM_SHA_256, "fz-512": ScramMechanism.SCRAM_SHA_512}


def confluent(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic("fz", 2, 1), NewTopic("fz-gone", 1, 1)]).values():
        f.result(WAIT)
    resource = ConfigResource(ConfigResource.Type.TOPIC, "fz")
    admin.describe_configs([resource])[resource].result(WAIT)
    admin.create_partitions([NewPartitions("fz", 3)])["fz"].result(WAIT)
    admin.describe_cluster().result(WAIT)
    with contextlib.suppress(Exception):  # SECURITY_DISABLED: the request is wanted
        admin.describe_acls(AclBindingFilter(
            ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
            AclPermissionType.ANY)).result(WAIT)
    for codec in ("none", "gzip", "snappy", "lz4", "zstd"):
        producer = Producer({"bootstrap.servers": bootstrap, "compression.type": codec,
                             "linger.ms": 2})
        for i in range(20):
            producer.produce("fz", key=f"k{i}".encode(), value=b"v" * (i * 7),
                             headers=[("h", b"x")], partition=i % 3)
        producer.flush(WAIT)
    idempotent = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i in range(10):
        idempotent.produce("fz", value=b"i%d" % i)
    idempotent.flush(WAIT)
    txn = Producer({"bootstrap.servers": bootstrap, "transactional.id": "fz-txn"})
    txn.init_transactions(WAIT)
    for commit in (True, False):
        txn.begin_transaction()
        txn.produce("fz", value=b"t", partition=0)
        if commit:
            consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "fz-txn-group"})
            txn.send_offsets_to_transaction([TopicPartition("fz", 0, 1)],
                                            consumer.consumer_group_metadata(), WAIT)
            consumer.close()
            txn.commit_transaction(WAIT)
        else:
            txn.abort_transaction(WAIT)
    for protocol in ("classic", "consumer"):
        settings = {"bootstrap.servers": bootstrap, "group.id": f"fz-{protocol}",
                    "auto.offset.reset": "earliest", "enable.auto.commit": False,
                    "group.protocol": protocol, "isolation.level": "read_committed"}
        consumer = Consumer(settings)
        consumer.subscribe(["fz"])
        got, deadline = 0, time.monotonic() + WAIT
        while got < 20 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                got += 1
        consumer.commit(asynchronous=False)
        consumer.committed([TopicPartition("fz", 0)], WAIT)
        consumer.offsets_for_times([TopicPartition("fz", 0, int(time.time() * 1000) - 60_000)],
                                   WAIT)
        consumer.close()
    admin.list_consumer_groups().result(WAIT)
    admin.describe_consumer_groups(["fz-classic"])["fz-classic"].result(WAIT)
    admin.delete_records([TopicPartition("fz", 1, 2)])
    admin.delete_topics(["fz-gone"])["fz-gone"].result(WAIT)


def settle(result: object) -> None:
    """Wait for an admin call's future(s); failures are fine: the request is wanted."""
    futures = result.values() if isinstance(result, dict) else [result]
    for future in futures:
        with contextlib.suppress(Exception):
            future.result(WAIT)  # type: ignore[attr-defined]


def confluent_admin(bootstrap: str) -> None:
    """The admin operations the first pass leaves out: ACLs, configs, SCRAM credentials,
    leader elections, offsets, group deletion."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    acl = AclBinding(ResourceType.TOPIC, "fz", ResourcePatternType.LITERAL, "User:fz", "*",
                     AclOperation.READ, AclPermissionType.ALLOW)
    settle(admin.create_acls([acl]))
    settle(admin.delete_acls([AclBindingFilter(
        ResourceType.TOPIC, "fz", ResourcePatternType.MATCH, None, None, AclOperation.ANY,
        AclPermissionType.ANY)]))
    settle(admin.alter_configs([ConfigResource(ConfigResource.Type.TOPIC, "fz",
                                               set_config={"retention.ms": "86400000"})]))
    settle(admin.incremental_alter_configs([ConfigResource(
        ConfigResource.Type.TOPIC, "fz", incremental_configs=[
            ConfigEntry("retention.ms", "90000000",
                        incremental_operation=AlterConfigOpType.SET),
            ConfigEntry("cleanup.policy", None,
                        incremental_operation=AlterConfigOpType.DELETE)])]))
    settle(admin.alter_user_scram_credentials([
        UserScramCredentialUpsertion(user, ScramCredentialInfo(mechanism, 4096),
                                     b"fz-secret")
        for user, mechanism in SCRAM_USERS.items()]))
    settle(admin.describe_user_scram_credentials(list(SCRAM_USERS)))
    settle(admin.describe_user_scram_credentials())
    settle(admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition("fz", 0)]))
    settle(admin.list_offsets({TopicPartition("fz", 0): OffsetSpec.latest(),
                               TopicPartition("fz", 1): OffsetSpec.earliest()}))
    settle(admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(
        "fz-kafka-python", [TopicPartition("fz", 0, 1)])]))
    settle(admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions("fz-classic")]))
    settle(admin.describe_topics(TopicCollection(["fz"])))
    settle(admin.delete_consumer_groups(["fz-aiokafka"]))
    settle(admin.alter_user_scram_credentials([
        UserScramCredentialDeletion("nobody", ScramMechanism.SCRAM_SHA_512)]))


def sasl_clients(bootstrap: str) -> None:
    """SaslHandshake and SaslAuthenticate: librdkafka logs in with PLAIN and both SCRAMs
    (and once with a wrong password), then produces."""
    logins = [("PLAIN", "fz", "fz-secret"), ("PLAIN", "fz", "wrong")]
    logins += [(m.name.replace("_", "-"), user, "fz-secret")
               for user, m in SCRAM_USERS.items()]
    for mechanism, user, password in logins:
        producer = Producer({"bootstrap.servers": bootstrap,
                             "security.protocol": "SASL_PLAINTEXT",
                             "sasl.mechanism": mechanism, "sasl.username": user,
                             "sasl.password": password, "message.timeout.ms": 5000})
        producer.produce("fz", value=b"sasl")
        producer.flush(6)


# The APIs no client above sends: by hand, at every version the broker serves, through
# the test suite's wire client (kio's encoders: the bytes a Java client would send).
BY_HAND: dict[int, dict] = {
    23: {"replica_id": -1, "topics": [{"topic": "fz", "partitions": [
        {"partition": 0, "current_leader_epoch": 0, "leader_epoch": 0}]}]},
    # AddPartitionsToTxn: v0-3 a client's (also sent by clients above), v4-5 a broker's
    # batch (verify only); each version takes the fields it has.
    24: {"v3_and_below_transactional_id": "fz-txn", "v3_and_below_producer_id": 1000,
         "v3_and_below_producer_epoch": 0,
         "v3_and_below_topics": [{"name": "fz", "partitions": [0]}],
         "transactions": [{"transactional_id": "fz-txn", "producer_id": 1000,
                           "producer_epoch": 0, "verify_only": True,
                           "topics": [{"name": "fz", "partitions": [0]}]}]},
    27: {"markers": [{"producer_id": 1000, "producer_epoch": 0, "transaction_result": True,
                      "topics": [{"name": "fz", "partition_indexes": [0]}],
                      "coordinator_epoch": 0, "transaction_version": 1}]},
    # AlterReplicaLogDirs: to a path that is not a log directory (nothing moves).
    34: {"dirs": [{"path": "/fz-not-a-log-dir", "topics": [{"name": "fz",
                                                          "partitions": [0, 1]}]}]},
    35: {"topics": [{"topic": "fz", "partitions": [0, 1]}]},
    45: {"timeout": 1000, "topics": [{"name": "fz", "partitions": [
        {"partition_index": 0, "replicas": [1]}, {"partition_index": 1, "replicas": None}]}]},
    46: {"timeout": 1000, "topics": [{"name": "fz", "partition_indexes": [0]}]},
    47: {"group_id": "fz-classic", "topics": [{"name": "fz", "partitions": [
        {"partition_index": 0}]}]},
    57: {"timeout": 1000, "validate_only": True, "feature_updates": [
        {"feature": "transaction.version", "max_version_level": 2, "upgrade_type": 1,
         "allow_downgrade": False}]},
    # Delegation tokens: on PLAINTEXT refused (not allowed), which is all the fuzz tier
    # needs; the request shapes are what matter.
    38: {"owner_principal_type": "User", "owner_principal_name": "fz",
         "renewers": [{"principal_type": "User", "principal_name": "fz"}],
         "max_lifetime": 60_000},
    39: {"hmac": b"fz-hmac", "renew_period": 60_000},
    40: {"hmac": b"fz-hmac", "expiry_time_period": -1},
    41: {"owners": [{"principal_type": "User", "principal_name": "fz"}]},
    60: {"include_cluster_authorized_operations": True},
    # Streams groups: a join with a topology (the broker then makes the internal
    # topics), and describe.
    88: {"group_id": "fz-streams", "member_id": "fz-streams-member", "member_epoch": 0,
         "endpoint_information_epoch": 0, "instance_id": None, "rack_id": None,
         "rebalance_timeout": 30_000, "topology": {"epoch": 1, "subtopologies": [{
             "subtopology_id": "0", "source_topics": ["fz"], "source_topic_regex": [],
             "state_changelog_topics": [{"name": "fz-streams-store-changelog",
                                         "partitions": 0, "replication_factor": 0,
                                         "topic_configs": [{"key": "cleanup.policy",
                                                            "value": "compact"}]}],
             "repartition_sink_topics": [], "repartition_source_topics": [],
             "copartition_groups": [{"source_topics": [0], "source_topic_regex": [],
                                     "repartition_source_topics": []}]}]},
         "active_tasks": [], "standby_tasks": [], "warmup_tasks": [],
         "process_id": "fz-process", "user_endpoint": {"host": "localhost", "port": 8080},
         "client_tags": [{"key": "zone", "value": "a"}], "task_offsets": None,
         "task_end_offsets": None, "shutdown_application": False},
    89: {"group_ids": ["fz-streams", "fz-missing"], "include_authorized_operations": True,
         "include_topology_description": True},  # v1 (KIP-1331)
    # KIP-1331: a member pushes its topology's description (a source, a processor with
    # a store, a sink; a global store).
    93: {"group_id": "fz-streams", "member_id": "fz-streams-member", "topology_epoch": 1,
         "topology_description": {
             "subtopologies": [{"subtopology_id": "0", "nodes": [
                 {"name": "src", "node_type": 1, "source_topics": ["fz"], "sink_topic": None,
                  "stores": [], "successors": ["proc"]},
                 {"name": "proc", "node_type": 2, "source_topics": [], "sink_topic": None,
                  "stores": ["store"], "successors": ["sink"]},
                 {"name": "sink", "node_type": 3, "source_topics": [], "sink_topic": "fz-out",
                  "stores": [], "successors": []}]}],
             "global_stores": [{
                 "source": {"name": "gsrc", "node_type": 1, "source_topics": ["fz"],
                            "sink_topic": None, "stores": [], "successors": ["gproc"]},
                 "processor": {"name": "gproc", "node_type": 2, "source_topics": [],
                               "sink_topic": None, "stores": ["gstore"], "successors": []}}]}},
    61: {"topics": [{"name": "fz", "partition_indexes": [0, 1]}]},
    65: {"transactional_ids": ["fz-txn", "nobody"]},
    66: {"state_filters": ["Ongoing"], "producer_id_filters": [], "duration_filter": -1,
         "transactional_id_pattern": "fz-.*"},
    74: {"resource_types": [2, 4, 32]},
    75: {"topics": [{"name": "fz"}], "response_partition_limit": 1,
         "cursor": {"topic_name": "fz", "partition_index": 1}},
    # ApiVersions, TxnOffsetCommit, DeleteGroups: clients above send some versions; by
    # hand, every one, the three Kafka 4.4 versions kio lacks among them (v5 naming a
    # cluster and node, v6 topics by id, v3: protocol/extra_schemas.py).
    18: {"client_software_name": "fz", "client_software_version": "1",
         "cluster_id": "fz-cluster", "node_id": 1},
    28: {"transactional_id": "fz-txn", "group_id": "fz-classic", "producer_id": 1000,
         "producer_epoch": 0, "generation_id": 1, "member_id": "fz-member",
         "group_instance_id": None, "topics": [
             {"name": "fz", "topic_id": "9a7f61d4-1d0c-4b8e-9c59-3b2c1f0e5d11",
              "partitions": [{"partition_index": 0, "committed_offset": 1,
                              "committed_leader_epoch": 0, "committed_metadata": "fz"}]}]},
    42: {"groups_names": ["fz-gone", "nobody"]},
}


def exchange(client: WireClient, key: int, version: int, body: dict) -> None:
    """Send one request and wait for its answer, undecoded (kio cannot read every
    answer: a DescribeProducers timestamp of -1, for one)."""
    client.send(key, version, body)
    size = struct.unpack(">i", client._read(4))[0]
    client._read(size)


def by_hand(bootstrap: str) -> None:
    port = int(bootstrap.rpartition(":")[2])
    for key, body in BY_HAND.items():
        api = HANDLERS[key]
        for version in range(api.min_version, api.max_version + 1):
            with WireClient(port, timeout=WAIT) as client:
                exchange(client, key, version, body)
    with WireClient(port, timeout=WAIT) as client:  # DescribeLogDirs: every directory
        exchange(client, 35, HANDLERS[35].max_version, {"topics": None})
    with WireClient(port, timeout=WAIT) as client:  # DescribeTopicPartitions: all, no cursor
        exchange(client, 75, HANDLERS[75].max_version,
                 {"topics": [], "response_partition_limit": 10, "cursor": None})


def share_by_hand(bootstrap: str) -> None:
    """Share groups (KIP-932) as a share consumer speaks them: a join, share fetches that
    open a session, acknowledge and close it, a describe; then, the member gone, the
    group's offsets described, altered and deleted. Every version of each."""
    port = int(bootstrap.rpartition(":")[2])
    with WireClient(port, timeout=WAIT) as client:
        metadata = client.request(3, 12, {"topics": [{"name": "fz", "topic_id": None}],
                                          "allow_auto_topic_creation": False,
                                          "include_topic_authorized_operations": False})
        topic_id = metadata.topics[0].topic_id
        group, member = "fz-share", "fz-share-member"
        exchange(client, 76, 1, {"group_id": group, "member_id": member, "member_epoch": 0,
                                 "rack_id": None, "subscribed_topic_names": ["fz"]})
        fetch = {"group_id": group, "member_id": member, "max_wait": 0, "min_bytes": 1,
                 "max_bytes": 1 << 20, "max_records": 5, "batch_size": 5,
                 "share_acquire_mode": 1, "is_renew_ack": False,
                 "topics": [{"topic_id": topic_id, "partitions": [
                     {"partition_index": 0, "acknowledgement_batches": []}]}],
                 "forgotten_topics_data": []}
        acks = [{"topic_id": topic_id, "partitions": [{"partition_index": 0,
                 "acknowledgement_batches": [{"first_offset": 0, "last_offset": 1,
                                              "acknowledge_types": [1, 2]}]}]}]
        for version in (1, 2):
            exchange(client, 78, version, {**fetch, "share_session_epoch": 0})
            exchange(client, 78, version, {**fetch, "share_session_epoch": 1, "topics": acks,
                                           "forgotten_topics_data": [
                                               {"topic_id": topic_id, "partitions": [1]}]})
            exchange(client, 79, version, {"group_id": group, "member_id": member,
                                           "share_session_epoch": 2, "is_renew_ack": False,
                                           "topics": acks})
            exchange(client, 79, version, {"group_id": group, "member_id": member,
                                           "share_session_epoch": -1,
                                           "is_renew_ack": False, "topics": []})
        exchange(client, 77, 1, {"group_ids": [group, "nobody"],
                                 "include_authorized_operations": True})
        exchange(client, 76, 1, {"group_id": group, "member_id": member, "member_epoch": -1,
                                 "rack_id": None, "subscribed_topic_names": None})
        for version in (0, 1):
            exchange(client, 90, version, {"groups": [
                {"group_id": group, "topics": None},
                {"group_id": group, "topics": [{"topic_name": "fz", "partitions": [0, 9]}]}]})
        exchange(client, 91, 0, {"group_id": group, "topics": [{"topic_name": "fz",
                 "partitions": [{"partition_index": 0, "start_offset": 0}]}]})
        # The share coordinator's inter-broker APIs, as a leader on another broker sends
        # them.
        state = {"topic_id": topic_id, "partitions": [{
            "partition": 0, "leader_epoch": 0, "state_epoch": 1, "start_offset": 2,
            "delivery_complete_count": -1, "state_batches": [
                {"first_offset": 3, "last_offset": 4, "delivery_state": 0,
                 "delivery_count": 1}]}]}
        exchange(client, 84, 0, {"group_id": group, "topics": [state]})
        for version in (0, 1):
            exchange(client, 85, version, {"group_id": group, "topics": [state]})
        exchange(client, 86, 0, {"group_id": group, "topics": [state]})
        exchange(client, 92, 0, {"group_id": group, "topics": [{"topic_name": "fz"},
                                                               {"topic_name": "nothing"}]})


def sasl_by_hand(bootstrap: str) -> None:
    """Every version of SaslHandshake, and of SaslAuthenticate after a v1 handshake (a
    PLAIN login), on connections of their own."""
    port = int(bootstrap.rpartition(":")[2])
    for version in range(HANDLERS[17].min_version, HANDLERS[17].max_version + 1):
        with WireClient(port, timeout=WAIT) as client:
            exchange(client, 17, version, {"mechanism": "PLAIN"})
    for version in range(HANDLERS[36].min_version, HANDLERS[36].max_version + 1):
        with WireClient(port, timeout=WAIT) as client:
            exchange(client, 17, 1, {"mechanism": "PLAIN"})
            exchange(client, 36, version, {"auth_bytes": b"\0fz\0fz-secret"})


def python_clients(bootstrap: str) -> None:
    from kafka import KafkaConsumer, KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, compression_type="gzip")
    for i in range(10):
        producer.send("fz", key=b"kp", value=b"kafka-python %d" % i)
    producer.flush()
    producer.close()
    consumer = KafkaConsumer("fz", bootstrap_servers=bootstrap, group_id="fz-kafka-python",
                             auto_offset_reset="earliest", enable_auto_commit=False,
                             consumer_timeout_ms=3000)
    for _ in consumer:
        pass
    consumer.commit()
    consumer.close()

    async def aio() -> None:
        from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

        p = AIOKafkaProducer(bootstrap_servers=bootstrap)
        await p.start()
        await p.send_and_wait("fz", b"aiokafka")
        await p.stop()
        c = AIOKafkaConsumer("fz", bootstrap_servers=bootstrap, group_id="fz-aiokafka",
                             auto_offset_reset="earliest", enable_auto_commit=False)
        await c.start()
        await c.getmany(timeout_ms=2000)
        await c.commit()
        await c.stop()

    asyncio.run(aio())


def own_client(bootstrap: str) -> None:
    from odradek.client.connection import Cluster

    cluster = Cluster(bootstrap, client_id="fz-own", timeout_s=WAIT)
    conn = cluster.any_broker()
    entity = [{"entity_type": "user", "entity_name": "fz"}]
    conn.request(49, {"validate_only": False, "entries": [{"entity": entity, "ops": [
        {"key": "producer_byte_rate", "value": 1e6, "remove": False}]}]})
    conn.request(48, {"strict": False, "components": [
        {"entity_type": "user", "match_type": 0, "match": "fz"}]})
    cluster.close()


def main() -> None:
    proxy, sasl_proxy = RecordingProxy(), RecordingProxy()
    # The broker advertises the proxies: clients reach it through them only.
    with running_broker(**{
            "group.initial.rebalance.delay.ms": 0,
            # KIP-1331's pushes reach the coordinator (without a plugin: refused first).
            "group.streams.topology.description.plugin.class":
                "org.apache.kafka.server.streams.InMemoryTopologyDescriptionPlugin",
            "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
            "advertised.listeners": f"PLAINTEXT://{proxy.address},"
                                    f"SASL_PLAINTEXT://{sasl_proxy.address}"}) as broker:
        proxy.forward_to(broker.bootstrap)
        sasl_proxy.forward_to(f"127.0.0.1:{broker.broker.listener_ports['SASL_PLAINTEXT']}")
        try:
            confluent(proxy.address)
            python_clients(proxy.address)
            own_client(proxy.address)
            confluent_admin(proxy.address)
            sasl_clients(sasl_proxy.address)
            sasl_by_hand(sasl_proxy.address)
            by_hand(proxy.address)
            share_by_hand(proxy.address)
            time.sleep(0.5)
        finally:
            proxy.close()
            sasl_proxy.close()
    kept: list[bytes] = []
    seen: set[bytes] = set()
    per_version: Counter[tuple[int, int]] = Counter()
    for frame in proxy.frames + sasl_proxy.frames:
        if len(frame) < 8:
            continue
        key, version = struct.unpack(">hh", frame[:4])
        # The correlation id differs between otherwise equal requests: not kept apart.
        body = frame[:4] + frame[8:]
        if body in seen or per_version[(key, version)] >= PER_VERSION:
            continue
        seen.add(body)
        per_version[(key, version)] += 1
        kept.append(frame)
    CORPUS.parent.mkdir(parents=True, exist_ok=True)
    CORPUS.write_bytes(b"".join(struct.pack(">i", len(f)) + f for f in kept))
    keys = sorted({k for k, _ in per_version})
    print(f"{len(kept)} frames, {CORPUS.stat().st_size:,} bytes, {len(keys)} API keys: "
          + ", ".join(f"{k}:" + "/".join(str(v) for kk, v in sorted(per_version) if kk == k)
                      for k in keys))
    print("served but not recorded:", sorted(set(HANDLERS) - set(keys)) or "none")


if __name__ == "__main__":
    main()
