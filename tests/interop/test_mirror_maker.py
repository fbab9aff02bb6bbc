"""MirrorMaker 2 (Kafka Connect 4.3.1's connect-mirror) between Odradek clusters, and from
Apache Kafka 4.4 into Odradek (issue 33).

- ``org.apache.kafka.connect.mirror.MirrorMaker`` (connect-mirror-maker.sh's driver) with
  an mm2.properties naming two single-broker Odradek clusters, east -> west: the topic
  (``east.orders``: partitions, records in order per partition, its configs), its ACLs,
  heartbeats, checkpoints; a consumer group's offsets translated
  (``sync.group.offsets.enabled``), so the group, moved to west, resumes where it was;
  east SIGKILLed and restarted mid-replication, nothing acknowledged lost.
- The same three connectors on a Connect worker, configured through its REST API.
- The migration runbook of docs/operations.md ("Moving from Apache Kafka to Odradek"):
  MirrorMaker 2 from a running Apache Kafka 4.4 into Odradek with topic names kept
  (``IdentityReplicationPolicy``), the group's offsets translated, the consumers switched
  to Odradek: every record once, in order per partition.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ConfigResource,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from odradek.devcluster import free_port
from odradek.devcluster.apache_kafka import ApacheKafka
from odradek.devcluster.connect import ConnectWorker, MirrorMaker, mirror_maker_settings
from tests.jvm import require_connect_jars, require_jars

from .conftest import start_broker

pytestmark = [pytest.mark.interop, pytest.mark.connect]

WAIT = 120.0
MIRROR = "org.apache.kafka.connect.mirror"
PARTITIONS = 3
RECORDS = 3000
# A broker whose ACLs MirrorMaker can read and copy: the authorizer on, everyone (the
# PLAINTEXT principal ANONYMOUS, which MirrorMaker and the test use) a super user.
BROKER_SETTINGS = ("--override", "group.initial.rebalance.delay.ms=0",
                   "--override", "group.min.session.timeout.ms=1000",
                   "--override",
                   "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                   "--override", "super.users=User:ANONYMOUS")


@pytest.fixture(autouse=True)
def _connect_jars() -> None:
    require_connect_jars()


def mm2_settings(source: tuple[str, str], target: tuple[str, str], topics: str,
                 **extra: object) -> dict[str, object]:
    """One flow, source -> target, every group's offsets synced, quick intervals for a
    test. ``offset.lag.max=0``: an offset sync for every record, so a group stopped at
    the end of its partitions translates exactly (Kafka's default, 100, lets a
    translated offset fall up to 100 behind)."""
    src, dst = source[0], target[0]
    return mirror_maker_settings(source, target, topics, extra={
        f"{src}->{dst}.groups": ".*",
        "offset.lag.max": 0,
        "sync.group.offsets.enabled": "true",
        "sync.group.offsets.interval.seconds": 1,
        "emit.checkpoints.interval.seconds": 1,
        "emit.heartbeats.interval.seconds": 1,
        "refresh.topics.interval.seconds": 2,
        "refresh.groups.interval.seconds": 2,
        "sync.topic.configs.interval.seconds": 2,
        "sync.topic.acls.interval.seconds": 2,
        **extra,
    })


def produce(bootstrap: str, topic: str, start: int, stop: int,
            per_second: int | None = None) -> list[tuple[int, str]]:
    """Records ``start..stop`` keyed over the partitions (``per_second`` of them a second
    if given); (partition, value) of each acknowledged one."""
    acked: list[tuple[int, str]] = []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                         "enable.idempotence": True, "linger.ms": 5})

    def delivered(err: KafkaError | None, msg: Any) -> None:
        if err is None:
            acked.append((msg.partition(), msg.value().decode()))

    for i in range(start, stop):
        producer.produce(topic, key=f"k{i % 97}", value=f"r-{i:06d}", on_delivery=delivered)
        producer.poll(0)
        if per_second and i % 100 == 99:
            time.sleep(100 / per_second)
    assert producer.flush(60) == 0
    return acked


def per_partition(records: list[tuple[int, str]]) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {}
    for partition, value in records:
        out.setdefault(partition, []).append(value)
    return out


def consume(bootstrap: str, group: str, topic: str, count: int, *,
            commit: bool = True, timeout: float = WAIT) -> list[tuple[int, str]]:
    """``count`` records of ``topic`` through ``group`` (subscribed, committed offsets,
    auto.offset.reset=earliest); commits synchronously and leaves."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    got: list[tuple[int, str]] = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + timeout
        while len(got) < count:
            assert time.monotonic() < deadline, f"{group} read {len(got)} of {count}"
            for message in consumer.consume(min(500, count - len(got)), 0.5):
                assert message.error() is None, message.error()
                got.append((message.partition(), message.value().decode()))
        if commit:
            consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return got


def read_all(bootstrap: str, topic: str, expected: int,
             timeout: float = WAIT) -> list[tuple[int, str]]:
    """Every record of ``topic`` from offset 0 (assigned, no group), read until at least
    ``expected`` have come and 2 s more brought nothing."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "mm2-verifier",
                         "enable.auto.commit": False})
    try:
        partitions = wait_topic(bootstrap, topic)
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        got: list[tuple[int, str]] = []
        deadline = time.monotonic() + timeout
        quiet = time.monotonic()
        while time.monotonic() < deadline:
            batch = consumer.consume(5000, 0.5)
            for message in batch:
                assert message.error() is None, message.error()
                got.append((message.partition(), message.value().decode()))
            if batch:
                quiet = time.monotonic()
            elif len(got) >= expected and time.monotonic() - quiet > 2.0:
                return got
        raise AssertionError(f"{topic}: {len(got)} of {expected} records")
    finally:
        consumer.close()


def records_in(bootstrap: str, topic: str) -> int:
    """How many offsets ``topic``'s partitions hold (high watermark minus log start)."""
    partitions = wait_topic(bootstrap, topic)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "mm2-verifier"})
    try:
        total = 0
        for p in range(partitions):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
            total += high - low
        return total
    finally:
        consumer.close()


def wait_topic(bootstrap: str, topic: str, timeout: float = WAIT) -> int:
    """Until ``topic`` exists; its partition count."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    until(lambda: topic in admin.list_topics(timeout=30).topics, f"topic {topic}", timeout)
    return len(admin.list_topics(topic, timeout=30).topics[topic].partitions)


def until(check: Callable[[], bool], what: str, timeout: float = WAIT) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"not within {timeout:.0f}s: {what}"
        time.sleep(0.5)


def topic_config(bootstrap: str, topic: str, name: str) -> str | None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    entry = admin.describe_configs([resource])[resource].result(30).get(name)
    return None if entry is None else entry.value


def committed(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    """The group's committed offsets for ``topic`` (partition -> offset; -1001: none)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        partitions = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        return {tp.partition: tp.offset for tp in consumer.committed(partitions, timeout=30)}
    finally:
        consumer.close()


def make_topic(bootstrap: str, name: str, **configs: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, PARTITIONS, 1, config=configs)])[name].result(30)


@contextlib.contextmanager
def mirror_maker(directory: Path, settings: dict[str, object]) -> Iterator[MirrorMaker]:
    with MirrorMaker(directory, settings) as mm:
        try:
            yield mm
        finally:
            print(mm.output(80))


def test_mirror_maker_between_odradek_clusters(tmp_path: Path) -> None:
    east_data, east_port = tmp_path / "east", free_port()
    with contextlib.ExitStack() as stack:
        east = stack.enter_context(start_broker(east_data, *BROKER_SETTINGS, port=east_port))
        west = stack.enter_context(start_broker(tmp_path / "west", *BROKER_SETTINGS))
        make_topic(east.bootstrap, "orders", **{"retention.ms": "123456789",
                                                "max.message.bytes": "500000"})
        east_admin = AdminClient({"bootstrap.servers": east.bootstrap})
        alice_reads = AclBinding(ResourceType.TOPIC, "orders", ResourcePatternType.LITERAL,
                                 "User:alice", "*", AclOperation.READ,
                                 AclPermissionType.ALLOW)
        east_admin.create_acls([alice_reads])[alice_reads].result(30)
        acked = produce(east.bootstrap, "orders", 0, RECORDS)
        # The group reads half on east and commits: that is where it must resume on west.
        first_half = consume(east.bootstrap, "billing", "orders", RECORDS // 2)
        east_offsets = committed(east.bootstrap, "billing", "orders")

        mm = stack.enter_context(mirror_maker(
            tmp_path / "mm2", mm2_settings(("east", east.bootstrap), ("west", west.bootstrap),
                                           "orders")))
        mirrored = read_all(west.bootstrap, "east.orders", RECORDS)
        assert per_partition(mirrored) == per_partition(acked)
        assert wait_topic(west.bootstrap, "east.orders") == PARTITIONS
        until(lambda: topic_config(west.bootstrap, "east.orders", "retention.ms")
              == "123456789", "retention.ms copied")
        assert topic_config(west.bootstrap, "east.orders", "max.message.bytes") == "500000"
        west_admin = AdminClient({"bootstrap.servers": west.bootstrap})
        read_acls = AclBindingFilter(ResourceType.TOPIC, "east.orders",
                                     ResourcePatternType.LITERAL, None, None,
                                     AclOperation.ANY, AclPermissionType.ANY)

        def acl_copied() -> bool:
            found = west_admin.describe_acls(read_acls).result(30)
            return any(b.principal == "User:alice" and b.operation == AclOperation.READ
                       and b.permission_type == AclPermissionType.ALLOW for b in found)
        until(acl_copied, "alice's READ ACL copied to east.orders")
        # Heartbeats (MirrorHeartbeatConnector, into west's own heartbeats topic) and
        # checkpoints (MirrorCheckpointConnector: the group's offsets, translated).
        until(lambda: records_in(west.bootstrap, "heartbeats") > 0, "heartbeats")
        until(lambda: records_in(west.bootstrap, "east.checkpoints.internal") > 0,
              "checkpoints")
        # The group's offsets, translated: MirrorMaker's translation may land before the
        # committed offset (it keeps a sparse history of offset syncs: KAFKA-14666), never
        # after it, so a moved group may read a record again but skips none.
        west_offsets: dict[int, int] = {}

        def translated() -> bool:
            west_offsets.update(committed(west.bootstrap, "billing", "east.orders"))
            return all(west_offsets[p] >= 0 for p, o in east_offsets.items() if o >= 0)
        until(translated, f"billing's offsets {east_offsets} translated to west")
        assert all(west_offsets[p] <= o for p, o in east_offsets.items()), west_offsets
        # The group moves to west: it resumes at the translated offsets.
        again = sum(o - west_offsets[p] for p, o in east_offsets.items() if o >= 0)
        second_half = consume(west.bootstrap, "billing", "east.orders",
                              RECORDS - len(first_half) + again, commit=False)
        seen = {v for _, v in first_half}
        assert len(seen | {v for _, v in second_half}) == RECORDS
        print(f"group moved: offsets {east_offsets} on east, {west_offsets} on west; "
              f"{again} records read again")
        mm.assert_alive()

        # East crashes and comes back while records are being produced and mirrored.
        more: list[tuple[int, str]] = []
        producing = threading.Thread(
            target=lambda: more.extend(produce(east.bootstrap, "orders", RECORDS,
                                               2 * RECORDS, per_second=500)), daemon=True)
        producing.start()
        time.sleep(2.0)
        east.kill()
        time.sleep(1.0)
        stack.enter_context(start_broker(east_data, *BROKER_SETTINGS, port=east_port))
        producing.join(120)
        assert not producing.is_alive()
        assert len(more) == RECORDS  # the producer's retries outlasted the crash
        mirrored = read_all(west.bootstrap, "east.orders", len(acked) + len(more))
        want = per_partition(acked + more)
        got = per_partition(mirrored)
        duplicates = 0
        for partition, values in want.items():
            first_seen = list(dict.fromkeys(got.get(partition, [])))
            acknowledged = set(values)
            assert [v for v in first_seen if v in acknowledged] == values, partition
            duplicates += len(got[partition]) - len(first_seen)
        print(f"east killed mid-replication: {len(more)} more acked records, all mirrored; "
              f"{duplicates} mirrored twice")
        mm.assert_alive()


def test_migration_from_apache_kafka(tmp_path: Path) -> None:
    """docs/operations.md, "Moving from Apache Kafka to Odradek", step by step: MirrorMaker
    2 copies a live Kafka 4.4 topic into Odradek under its own name; the producers stop;
    the consumers drain Kafka and stop; MirrorMaker translates their group's offsets;
    the consumers and then the producers switch to Odradek. The group reads every record
    once, in order per partition, across the move."""
    require_jars()
    with contextlib.ExitStack() as stack:
        kafka = stack.enter_context(ApacheKafka(tmp_path / "kafka"))
        odradek = stack.enter_context(start_broker(tmp_path / "odradek", *BROKER_SETTINGS))
        kafka_bootstrap = f"127.0.0.1:{kafka.port}"
        make_topic(kafka_bootstrap, "orders", **{"retention.ms": "604800000"})
        before = produce(kafka_bootstrap, "orders", 0, RECORDS)
        read = consume(kafka_bootstrap, "billing", "orders", RECORDS // 3)

        # 1. MirrorMaker 2, Kafka -> Odradek, topic names kept.
        mm = stack.enter_context(mirror_maker(tmp_path / "mm2", mm2_settings(
            ("kafka", kafka_bootstrap), ("odradek", odradek.bootstrap), "orders",
            **{"replication.policy.class":
               "org.apache.kafka.connect.mirror.IdentityReplicationPolicy"})))
        # 2. Producers still on Kafka while the copy catches up.
        during = produce(kafka_bootstrap, "orders", RECORDS, 2 * RECORDS, per_second=1000)
        # 3. Producers stop; the consumers drain Kafka, commit and stop.
        read += consume(kafka_bootstrap, "billing", "orders",
                        2 * RECORDS - len(read))
        on_kafka = committed(kafka_bootstrap, "billing", "orders")
        mirrored = read_all(odradek.bootstrap, "orders", 2 * RECORDS)
        assert per_partition(mirrored) == per_partition(before + during)
        # 4. The group's offsets, translated exactly (the consumers stopped at the end).
        until(lambda: committed(odradek.bootstrap, "billing", "orders") == on_kafka,
              f"billing's offsets {on_kafka} on Odradek")
        mm.assert_alive()
        # 5. Consumers, then producers, on Odradek.
        after = produce(odradek.bootstrap, "orders", 2 * RECORDS, 3 * RECORDS)
        read += consume(odradek.bootstrap, "billing", "orders", RECORDS)
        assert per_partition(read) == per_partition(before + during + after)
        assert topic_config(odradek.bootstrap, "orders", "retention.ms") == "604800000"


def test_mirror_maker_connectors_on_a_connect_cluster(tmp_path: Path) -> None:
    """MirrorMaker 2's three connectors run on a Connect worker (of the target cluster)
    instead of the dedicated driver, configured through Connect's REST API."""
    with contextlib.ExitStack() as stack:
        east = stack.enter_context(start_broker(tmp_path / "east", *BROKER_SETTINGS))
        west = stack.enter_context(start_broker(tmp_path / "west", *BROKER_SETTINGS))
        make_topic(east.bootstrap, "orders")
        acked = produce(east.bootstrap, "orders", 0, RECORDS)
        consume(east.bootstrap, "billing", "orders", RECORDS)  # to the end: exact
        east_offsets = committed(east.bootstrap, "billing", "orders")
        worker = stack.enter_context(ConnectWorker(tmp_path / "worker", west.bootstrap,
                                                   group_id="mirror"))
        common = {
            "source.cluster.alias": "east", "target.cluster.alias": "west",
            "source.cluster.bootstrap.servers": east.bootstrap,
            "target.cluster.bootstrap.servers": west.bootstrap,
            "key.converter": "org.apache.kafka.connect.converters.ByteArrayConverter",
            "value.converter": "org.apache.kafka.connect.converters.ByteArrayConverter",
            "tasks.max": "1",
        }
        worker.rest.put_config("mirror-source", {
            **common, "connector.class": f"{MIRROR}.MirrorSourceConnector",
            "topics": "orders", "replication.factor": "1",
            "offset-syncs.topic.replication.factor": "1", "offset.lag.max": "0",
            "refresh.topics.interval.seconds": "2"})
        worker.rest.put_config("mirror-checkpoint", {
            **common, "connector.class": f"{MIRROR}.MirrorCheckpointConnector",
            "groups": "billing", "checkpoints.topic.replication.factor": "1",
            "sync.group.offsets.enabled": "true", "sync.group.offsets.interval.seconds": "1",
            "emit.checkpoints.interval.seconds": "1", "refresh.groups.interval.seconds": "2"})
        worker.rest.put_config("mirror-heartbeat", {
            **common, "connector.class": f"{MIRROR}.MirrorHeartbeatConnector",
            "heartbeats.topic.replication.factor": "1",
            "emit.heartbeats.interval.seconds": "1"})
        for name in ("mirror-source", "mirror-checkpoint", "mirror-heartbeat"):
            worker.rest.wait_state(name, "RUNNING")
        mirrored = read_all(west.bootstrap, "east.orders", RECORDS)
        assert per_partition(mirrored) == per_partition(acked)
        until(lambda: committed(west.bootstrap, "billing", "east.orders") == east_offsets,
              f"billing's offsets {east_offsets} on west")
        until(lambda: records_in(west.bootstrap, "heartbeats") > 0, "heartbeats")
