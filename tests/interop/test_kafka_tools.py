"""Kafka's own command-line tools (Kafka 4.4.0's jars) against an ``odradek serve`` process.

Each tool runs unchanged, as ``bin/kafka-*.sh`` would start it: its main class on a
``java -cp`` of the jars scripts/fetch_jvm.sh copies (odradek.devcluster.jvm), with the arguments a
user types. The tests assert on what the tool prints and on its effect as another client
(confluent-kafka) or the data directory sees it:

- kafka-topics (TopicCommand): create with configs, list, describe, alter partitions,
  delete, and the error for a topic that exists; describe a page of partitions at a
  time (DescribeTopicPartitions and its cursor, counted in the broker's metrics);
- kafka-console-producer / kafka-console-consumer: keys and headers both ways, the
  consumer's group offsets committed on exit;
- kafka-consumer-groups: describe with lag (committed, log end, lag per partition) and
  live members, reset offsets (earliest, to an offset, shift), refused while the group is
  active, delete;
- kafka-configs: describe and alter (add, delete) topic configs, an unknown config refused;
- kafka-producer-perf-test / kafka-consumer-perf-test: every record sent and consumed;
- kafka-transactions: list, describe, describe-producers with an open and a completed
  transaction;
- kafka-get-offsets and kafka-delete-records: latest, earliest, max timestamp, by time,
  and tiered storage's specs (-4, -5) before and after records are deleted;
- kafka-log-dirs: the data directory and each partition's size on disk;
- kafka-reassign-partitions with ``log_dirs``: a partition's log moved between a
  broker's two log directories (JBOD), --verify until done;
- kafka-streams-groups: a streams group (KIP-1071) listed and described with its tasks.

One broker serves the module (each test has its own topics and groups), with
``group.initial.rebalance.delay.ms=0`` as Kafka's own config/server.properties sets for a
single node, so that a console consumer does not wait 3 s for its first rebalance.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from odradek.client.wire import WireClient

from ..jvm import java_command, require_jars
from ..server import test_share_groups as share
from .conftest import BrokerProcess, requests_answered, run_tool, start_broker

pytestmark = pytest.mark.interop

WAIT = 60.0  # generous bound for anything the tests wait for (2 shared CPUs)
TOOLS = "org.apache.kafka.tools"
# The tools are short-lived JVMs: the client compiler and the serial collector start
# them faster (the perf tests keep the JVM's defaults).
QUICK_JVM = ["-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"]


@pytest.fixture(scope="module")
def odradek_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker for the module (named as conftest's, so a failing test gets its
    output)."""
    require_jars()
    with start_broker(tmp_path_factory.mktemp("odradek-data"),
                      "--override", "group.initial.rebalance.delay.ms=0",
                      "--override", "metrics.listen=127.0.0.1:0") as broker:
        yield broker


@pytest.fixture(scope="module")
def admin(odradek_server: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": odradek_server.bootstrap})


def tool(main_class: str, *args: str, input: str | None = None, check: bool = True,
         jvm_args: list[str] | None = None):
    """Run one of Kafka's tools (``main_class`` under org.apache.kafka.tools)."""
    argv = java_command(f"{TOOLS}.{main_class}", *args,
                        jvm_args=QUICK_JVM if jvm_args is None else jvm_args)
    return run_tool(argv, input=input, check=check)


def create_topic(admin: AdminClient, topic: str, partitions: int) -> None:
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(WAIT)


def produce(bootstrap: str, topic: str, records: list[tuple[int, bytes]],
            **settings) -> None:
    """``records`` as (partition, value), in order."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **settings})
    for partition, value in records:
        producer.produce(topic, value=value, partition=partition)
    assert producer.flush(WAIT) == 0


def watermarks(bootstrap: str, topic: str, partitions: int) -> list[tuple[int, int]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "watermarks"})
    try:
        return [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=WAIT)
                for p in range(partitions)]
    finally:
        consumer.close()


def committed(bootstrap: str, group: str, topic: str, partitions: int) -> list[int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "enable.auto.commit": False})
    try:
        found = consumer.committed([TopicPartition(topic, p) for p in range(partitions)],
                                   timeout=WAIT)
        return [tp.offset for tp in sorted(found, key=lambda tp: tp.partition)]
    finally:
        consumer.close()


def table(stdout: str, first_column: str) -> list[dict[str, str]]:
    """The rows of a whitespace-aligned table the tools print (kafka-consumer-groups),
    as dicts keyed by the header line, which starts with ``first_column``."""
    rows: list[dict[str, str]] = []
    header: list[str] | None = None
    for line in stdout.splitlines():
        words = line.split()
        if words[:1] == [first_column]:
            header = words
        elif header and words:
            assert len(words) == len(header), f"row {line!r} under {header} in:\n{stdout}"
            rows.append(dict(zip(header, words, strict=True)))
    return rows


def tsv(stdout: str) -> list[dict[str, str]]:
    """The rows of a tab-separated table (kafka-transactions), keyed by its header."""
    lines = [[cell.strip() for cell in line.split("\t")] for line in stdout.splitlines()
             if line.strip()]
    header, *rows = lines
    return [dict(zip(header, row, strict=False)) for row in rows]


# --- kafka-topics ----------------------------------------------------------------------

def test_kafka_topics_creates_lists_describes_alters_and_deletes_a_topic(
        odradek_server: BrokerProcess, admin: AdminClient):
    server = ["--bootstrap-server", odradek_server.bootstrap]
    created = tool("TopicCommand", *server, "--create", "--topic", "tools-topics",
                   "--partitions", "3", "--replication-factor", "1",
                   "--config", "retention.ms=3600000", "--config", "cleanup.policy=compact")
    assert created.stdout.strip() == "Created topic tools-topics."
    # Visible to another client, with its configs.
    assert len(admin.list_topics(timeout=WAIT).topics["tools-topics"].partitions) == 3
    resource = ConfigResource(ConfigResource.Type.TOPIC, "tools-topics")
    configs = admin.describe_configs([resource])[resource].result(WAIT)
    assert configs["retention.ms"].value == "3600000"
    assert configs["cleanup.policy"].value == "compact"

    listed = tool("TopicCommand", *server, "--list", "--exclude-internal")
    assert "tools-topics" in listed.stdout.split()
    assert not [t for t in listed.stdout.split() if t.startswith("__")]

    described = tool("TopicCommand", *server, "--describe", "--topic", "tools-topics")
    summary, *partitions = described.stdout.strip().splitlines()
    assert "PartitionCount: 3\tReplicationFactor: 1" in summary
    configs_shown = summary.partition("Configs: ")[2].split(",")
    assert sorted(configs_shown) == ["cleanup.policy=compact", "retention.ms=3600000"]
    assert [re.sub(r"\s+", " ", p.strip()).split(" Elr:")[0] for p in partitions] == [
        f"Topic: tools-topics Partition: {i} Leader: 0 Replicas: 0 Isr: 0" for i in range(3)]

    tool("TopicCommand", *server, "--alter", "--topic", "tools-topics", "--partitions", "5")
    assert len(admin.list_topics(timeout=WAIT).topics["tools-topics"].partitions) == 5

    again = tool("TopicCommand", *server, "--create", "--topic", "tools-topics", check=False)
    assert again.returncode == 1
    assert "TopicExistsException" in again.stderr

    tool("TopicCommand", *server, "--delete", "--topic", "tools-topics")
    assert "tools-topics" not in admin.list_topics(timeout=WAIT).topics
    listed = tool("TopicCommand", *server, "--list")
    assert "tools-topics" not in listed.stdout.split()
    assert "__consumer_offsets" in listed.stdout.split()  # internal topics listed too


def test_kafka_topics_describes_a_page_of_partitions_at_a_time(
        odradek_server: BrokerProcess, admin: AdminClient):
    """kafka-topics describes through DescribeTopicPartitions (KIP-966) where the broker
    serves it: with a limit of 2 partitions an answer, the 7 partitions of two topics
    take four pages, each asked from the cursor the one before ended at."""
    create_topic(admin, "tools-pages-a", 4)
    create_topic(admin, "tools-pages-b", 3)
    before = requests_answered(odradek_server.metrics_url(), "DescribeTopicPartitions")
    described = tool("TopicCommand", "--bootstrap-server", odradek_server.bootstrap,
                     "--describe", "--topic", "tools-pages-.*",
                     "--partition-size-limit-per-response", "2")
    rows = [re.sub(r"\s+", " ", line.strip()).split(" Elr:")[0]
            for line in described.stdout.splitlines() if "Partition: " in line]
    assert rows == [f"Topic: tools-pages-{t} Partition: {p} Leader: 0 Replicas: 0 Isr: 0"
                    for t, n in (("a", 4), ("b", 3)) for p in range(n)]
    assert requests_answered(odradek_server.metrics_url(),
                             "DescribeTopicPartitions") - before == 4


# --- kafka-features --------------------------------------------------------------------


def test_kafka_features_describes_downgrades_and_upgrades_transaction_version(
        odradek_server: BrokerProcess):
    """kafka-features.sh (FeatureCommand): describe through ApiVersions' features, then a
    downgrade and the upgrade back through UpdateFeatures (KIP-584)."""

    def described() -> str:
        out = tool("FeatureCommand", "--bootstrap-server", odradek_server.bootstrap,
                   "describe").stdout
        [line] = [x for x in out.splitlines() if "Feature: transaction.version" in x]
        return re.sub(r"\s+", " ", line.strip())

    assert described().startswith(
        "Feature: transaction.version SupportedMinVersion: 0 SupportedMaxVersion: 2 "
        "FinalizedVersionLevel: 2")
    refused = tool("FeatureCommand", "--bootstrap-server", odradek_server.bootstrap,
                   "upgrade", "--feature", "transaction.version=1", check=False)
    assert refused.returncode != 0
    tool("FeatureCommand", "--bootstrap-server", odradek_server.bootstrap,
         "downgrade", "--feature", "transaction.version=1")
    assert "FinalizedVersionLevel: 1" in described()
    tool("FeatureCommand", "--bootstrap-server", odradek_server.bootstrap,
         "upgrade", "--feature", "transaction.version=2")
    assert "FinalizedVersionLevel: 2" in described()


# --- kafka-streams-groups --------------------------------------------------------------


def test_kafka_streams_groups_lists_and_describes_a_streams_group(
        odradek_server: BrokerProcess):
    """kafka-streams-groups.sh (StreamsGroupCommand, KIP-1071) on a streams group whose
    member speaks the protocol by hand (tests/server/test_streams_groups.py's): --list
    (ListGroups by type), --describe --members (StreamsGroupDescribe): the member, its
    process and every task of both subtopologies active on it."""
    from ..server import test_streams_groups as streams

    with WireClient(odradek_server.port) as client:
        share.create_topic(client, "events", streams.PARTITIONS)
    member = streams.join_and_run(_Running(odradek_server.port))
    try:
        listed = tool("streams.StreamsGroupCommand", "--bootstrap-server",
                      odradek_server.bootstrap, "--list").stdout
        assert streams.GROUP in listed.split(), listed
        described = tool("streams.StreamsGroupCommand", "--bootstrap-server",
                         odradek_server.bootstrap, "--describe", "--group", streams.GROUP,
                         "--members").stdout
        [row] = [line.split(maxsplit=4) for line in described.splitlines()
                 if member.member_id in line]
        assert row[:3] == [streams.GROUP, member.member_id, member.process], described
        assert row[4].split() == ["ACTIVE:", "0:[0,1,2];", "1:[0,1,2];"], described
    finally:
        member.close()


class _Running:
    """What tests/server/test_streams_groups.join_and_run needs of a broker: its port."""

    def __init__(self, port: int) -> None:
        self.port = port


# --- kafka-share-groups ----------------------------------------------------------------


def test_kafka_share_groups_lists_describes_resets_and_deletes_a_share_group(
        odradek_server: BrokerProcess):
    """kafka-share-groups.sh (ShareGroupCommand, KIP-932) on a share group with one member
    that acknowledged 4 of 10 records: list, describe (offsets and lag, members, state);
    then, the member gone, reset to the earliest offset, delete the offsets, delete the
    group."""
    server = ["--bootstrap-server", odradek_server.bootstrap]
    port = int(odradek_server.bootstrap.rpartition(":")[2])
    with WireClient(port) as client:
        topic_id = share.create_topic(client, "tools-queue")
        share.set_group_configs(client, "tools-share", share_auto_offset_reset="earliest")
    share.produce(odradek_server.bootstrap, "tools-queue", 10)
    member = share.Member(port, "tools-share", "tools-queue", topic_id)
    assert share.acquired(member.fetch()) == [(0, 9, 1)]
    assert member.acknowledge([(0, 3, share.ACCEPT)]).error_code == 0

    def command(*args: str) -> str:
        return tool("consumer.group.ShareGroupCommand", *server, *args).stdout

    assert "tools-share" in command("--list").split()
    offsets = table(command("--describe", "--group", "tools-share"), "GROUP")
    assert [(r["TOPIC"], r["PARTITION"], r["START-OFFSET"], r["LAG"]) for r in offsets] == [
        ("tools-queue", "0", "4", "6")]
    [m] = table(command("--describe", "--group", "tools-share", "--members"), "GROUP")
    assert (m["CONSUMER-ID"], m["#PARTITIONS"], m["ASSIGNMENT"]) == (
        member.member_id, "1", "tools-queue:0")
    assert "Stable" in command("--describe", "--group", "tools-share", "--state")
    # The group must be empty for these: the member leaves first.
    member.heartbeat(leave=True)
    member.close()
    reset = table(command("--reset-offsets", "--group", "tools-share", "--topic",
                          "tools-queue", "--to-earliest", "--execute"), "GROUP")
    assert [(r["PARTITION"], r["NEW-OFFSET"]) for r in reset] == [("0", "0")]
    offsets = table(command("--describe", "--group", "tools-share"), "GROUP")
    assert [(r["START-OFFSET"], r["LAG"]) for r in offsets] == [("0", "10")]
    assert "Successful" in command("--delete-offsets", "--group", "tools-share", "--topic",
                                   "tools-queue")
    assert "has no offset information" in command("--describe", "--group", "tools-share")
    assert "was successful" in command("--delete", "--group", "tools-share")
    assert "tools-share" not in command("--list").split()


# --- kafka-console-producer / kafka-console-consumer -----------------------------------

def test_console_producer_and_consumer_round_trip_keys_and_headers(
        odradek_server: BrokerProcess, admin: AdminClient):
    bootstrap = odradek_server.bootstrap
    create_topic(admin, "tools-console", 2)
    lines = [f"trace:t{i},source:console\tkey-{i}\tvalue-{i}" for i in range(6)]
    tool("ConsoleProducer", "--bootstrap-server", bootstrap, "--topic", "tools-console",
         "--reader-property", "parse.key=true", "--reader-property", "parse.headers=true",
         input="\n".join(lines) + "\n")

    # What the console producer wrote, as confluent-kafka reads it.
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "tools-console-check",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe(["tools-console"])
    seen = {}
    deadline = time.monotonic() + WAIT
    while len(seen) < 6 and time.monotonic() < deadline:
        msg = consumer.poll(1.0)
        if msg is not None and msg.error() is None:
            seen[msg.key().decode()] = (msg.value().decode(), msg.headers())
    consumer.close()
    assert seen == {f"key-{i}": (f"value-{i}", [("trace", f"t{i}".encode()),
                                               ("source", b"console")]) for i in range(6)}

    consumed = tool("consumer.ConsoleConsumer", "--bootstrap-server", bootstrap,
                    "--topic", "tools-console", "--group", "tools-console-group",
                    "--from-beginning", "--max-messages", "6", "--timeout-ms", "60000",
                    "--formatter-property", "print.key=true",
                    "--formatter-property", "print.headers=true",
                    "--formatter-property", "print.partition=true",
                    "--formatter-property", "print.offset=true")
    assert "Processed a total of 6 messages" in consumed.stderr
    printed = [line.split("\t") for line in consumed.stdout.splitlines()]
    assert sorted(p[2:] for p in printed) == sorted(line.split("\t") for line in lines)
    ends = [high for _, high in watermarks(bootstrap, "tools-console", 2)]
    assert sum(ends) == 6
    for partition in range(2):  # offsets 0.. in each partition, in order
        offsets = [p[1] for p in printed if p[0] == f"Partition:{partition}"]
        assert offsets == [f"Offset:{o}" for o in range(ends[partition])]
    # The console consumer commits what it consumed when it exits.
    assert committed(bootstrap, "tools-console-group", "tools-console", 2) == ends


# --- kafka-consumer-groups -------------------------------------------------------------

def test_consumer_groups_describe_lag_reset_offsets_and_delete(
        odradek_server: BrokerProcess, admin: AdminClient):
    bootstrap = odradek_server.bootstrap
    server = ["--bootstrap-server", bootstrap]
    create_topic(admin, "tools-groups", 2)
    produce(bootstrap, "tools-groups",
            [(0, b"a%d" % i) for i in range(10)] + [(1, b"b%d" % i) for i in range(6)])
    committer = Consumer({"bootstrap.servers": bootstrap, "group.id": "tools-lag",
                          "enable.auto.commit": False})
    committer.commit(offsets=[TopicPartition("tools-groups", 0, 4),
                              TopicPartition("tools-groups", 1, 6)], asynchronous=False)
    committer.close()

    described = tool("consumer.group.ConsumerGroupCommand", *server,
                     "--describe", "--group", "tools-lag")
    rows = table(described.stdout, "GROUP")
    assert [(r["PARTITION"], r["CURRENT-OFFSET"], r["LOG-END-OFFSET"], r["LAG"],
             r["CONSUMER-ID"]) for r in sorted(rows, key=lambda r: r["PARTITION"])] == [
        ("0", "4", "10", "6", "-"), ("1", "6", "6", "0", "-")]
    assert "Consumer group 'tools-lag' has no active members." in described.stderr

    def reset(*how: str) -> dict[str, str]:
        done = tool("consumer.group.ConsumerGroupCommand", *server, "--reset-offsets",
                    "--group", "tools-lag", *how, "--execute")
        return {r["PARTITION"]: r["NEW-OFFSET"] for r in table(done.stdout, "GROUP")}

    assert reset("--topic", "tools-groups", "--to-earliest") == {"0": "0", "1": "0"}
    assert committed(bootstrap, "tools-lag", "tools-groups", 2) == [0, 0]
    assert reset("--topic", "tools-groups:1", "--to-offset", "3") == {"1": "3"}
    assert committed(bootstrap, "tools-lag", "tools-groups", 2) == [0, 3]
    assert reset("--all-topics", "--shift-by", "2") == {"0": "2", "1": "5"}
    assert committed(bootstrap, "tools-lag", "tools-groups", 2) == [2, 5]

    # A live member: shown with its client id and host, and offsets cannot be reset.
    member = Consumer({"bootstrap.servers": bootstrap, "group.id": "tools-lag",
                       "client.id": "tools-member", "enable.auto.commit": False})
    member.subscribe(["tools-groups"])
    deadline = time.monotonic() + WAIT
    while not member.assignment() and time.monotonic() < deadline:
        member.poll(0.5)
    assert len(member.assignment()) == 2
    try:
        members = tool("consumer.group.ConsumerGroupCommand", *server,
                       "--describe", "--group", "tools-lag")
        rows = table(members.stdout, "GROUP")
        assert {(r["PARTITION"], r["CURRENT-OFFSET"], r["LAG"]) for r in rows} == {
            ("0", "2", "8"), ("1", "5", "1")}
        assert {r["CLIENT-ID"] for r in rows} == {"tools-member"}
        assert {r["HOST"] for r in rows} == {"/127.0.0.1"}
        assert all(r["CONSUMER-ID"].startswith("tools-member-") for r in rows)
        state = tool("consumer.group.ConsumerGroupCommand", *server,
                     "--describe", "--group", "tools-lag", "--state")
        (row,) = table(state.stdout.replace("COORDINATOR (ID)", "COORDINATOR ID"), "GROUP")
        assert (row["COORDINATOR"], row["ID"], row["ASSIGNMENT-STRATEGY"], row["STATE"],
                row["#MEMBERS"]) == (bootstrap, "(0)", "range", "Stable", "1")
        refused = tool("consumer.group.ConsumerGroupCommand", *server, "--reset-offsets",
                       "--group", "tools-lag", "--all-topics", "--to-latest", "--execute")
        assert ("Assignments can only be reset if the group 'tools-lag' is inactive, "
                "but the current state is Stable.") in refused.stdout + refused.stderr
    finally:
        member.close()
    assert committed(bootstrap, "tools-lag", "tools-groups", 2) == [2, 5]

    listed = tool("consumer.group.ConsumerGroupCommand", *server, "--list")
    assert "tools-lag" in listed.stdout.split()
    deleted = tool("consumer.group.ConsumerGroupCommand", *server,
                   "--delete", "--group", "tools-lag")
    assert "Deletion of requested consumer groups ('tools-lag') was successful." \
        in deleted.stdout
    groups = admin.list_consumer_groups().result(WAIT).valid
    assert "tools-lag" not in {g.group_id for g in groups}


# --- kafka-configs ---------------------------------------------------------------------

def test_kafka_configs_describes_and_alters_topic_configs(
        odradek_server: BrokerProcess, admin: AdminClient):
    server = ["--bootstrap-server", odradek_server.bootstrap]
    topic = ["--entity-type", "topics", "--entity-name", "tools-configs"]
    create_topic(admin, "tools-configs", 1)
    resource = ConfigResource(ConfigResource.Type.TOPIC, "tools-configs")

    def dynamic() -> dict[str, str]:
        """The topic's own configs, as kafka-configs --describe prints them."""
        out = tool("ConfigCommand", *server, *topic, "--describe").stdout
        lines = out.strip().splitlines()
        assert lines[0] == "Dynamic configs for topic tools-configs are:"
        return dict(line.split()[0].split("=", 1) for line in lines[1:])

    assert dynamic() == {}
    altered = tool("ConfigCommand", *server, *topic, "--alter",
                   "--add-config", "retention.ms=7200000,max.message.bytes=2000000")
    assert altered.stdout.strip() == "Completed updating config for topic tools-configs."
    assert dynamic() == {"retention.ms": "7200000", "max.message.bytes": "2000000"}
    configs = admin.describe_configs([resource])[resource].result(WAIT)
    assert configs["retention.ms"].value == "7200000"
    assert configs["max.message.bytes"].value == "2000000"

    tool("ConfigCommand", *server, *topic, "--alter", "--delete-config", "retention.ms")
    assert dynamic() == {"max.message.bytes": "2000000"}
    configs = admin.describe_configs([resource])[resource].result(WAIT)
    assert configs["retention.ms"].value == "604800000"  # back to log.retention.ms
    assert configs["retention.ms"].is_default

    refused = tool("ConfigCommand", *server, *topic, "--alter",
                   "--add-config", "no.such.config=1", check=False)
    assert refused.returncode == 1
    assert "InvalidConfigurationException" in refused.stdout + refused.stderr


def test_kafka_configs_sets_and_describes_client_quotas(odradek_server: BrokerProcess):
    """kafka-configs.sh --entity-type users|clients (AlterClientQuotas and
    DescribeClientQuotas through Kafka's own Admin client): a user's quota, a client
    id's, the defaults, and a refusal with Kafka's reason."""
    server = ["--bootstrap-server", odradek_server.bootstrap]

    def describe(*entity: str) -> list[str]:
        return tool("ConfigCommand", *server, "--describe", *entity).stdout.splitlines()

    alice = ["--entity-type", "users", "--entity-name", "alice"]
    altered = tool("ConfigCommand", *server, "--alter", *alice,
                   "--add-config", "producer_byte_rate=1048576,request_percentage=25.5")
    assert altered.stdout.strip() == ("Completed updating config for user alice.")
    tool("ConfigCommand", *server, "--alter", "--entity-type", "clients",
         "--entity-default", "--add-config", "consumer_byte_rate=2048")
    assert describe(*alice) == ["Quota configs for user-principal 'alice' are "
                                "producer_byte_rate=1048576.0, request_percentage=25.5"]
    assert describe("--entity-type", "clients", "--entity-default") == [
        "Quota configs for the default client-id are consumer_byte_rate=2048.0"]
    refused = tool("ConfigCommand", *server, "--alter", *alice,
                   "--add-config", "producer_byte_rate=-5", check=False)
    assert refused.returncode == 1
    assert "must be greater than 0" in refused.stdout + refused.stderr
    tool("ConfigCommand", *server, "--alter", *alice,
         "--delete-config", "producer_byte_rate,request_percentage")
    assert describe(*alice) == []
    # The module's other tests share the broker: no client may stay held to 2 kB/s.
    tool("ConfigCommand", *server, "--alter", "--entity-type", "clients", "--entity-default",
         "--delete-config", "consumer_byte_rate")
    assert describe("--entity-type", "clients", "--entity-default") == []


# --- kafka-producer-perf-test / kafka-consumer-perf-test -------------------------------

def test_perf_tests_send_and_consume_every_record(
        odradek_server: BrokerProcess, admin: AdminClient):
    bootstrap = odradek_server.bootstrap
    create_topic(admin, "tools-perf", 3)
    records, size = 20_000, 100
    sent = tool("ProducerPerformance", "--topic", "tools-perf",
                "--num-records", str(records), "--record-size", str(size),
                "--throughput", "-1",
                "--command-property", f"bootstrap.servers={bootstrap}", "acks=all",
                jvm_args=[])
    final = sent.stdout.strip().splitlines()[-1]
    assert final.startswith(f"{records} records sent, "), sent.stdout
    assert sum(high for _, high in watermarks(bootstrap, "tools-perf", 3)) == records

    consumed = tool("ConsumerPerformance", "--bootstrap-server", bootstrap,
                    "--topic", "tools-perf", "--num-records", str(records),
                    "--timeout", "60000", jvm_args=[])
    # The table: a header line starting "start.time" and its values after it (other
    # lines, such as a JVM or tool warning, may come before or after).
    lines = consumed.stdout.strip().splitlines()
    at = next((i for i, line in enumerate(lines) if line.startswith("start.time")), None)
    assert at is not None and at + 1 < len(lines), consumed.stdout + consumed.stderr
    names = [h.strip() for h in lines[at].split(",")]
    values = [v.strip() for v in lines[at + 1].split(",")]
    assert len(names) == len(values), consumed.stdout + consumed.stderr
    stats = dict(zip(names, values, strict=True))
    assert int(stats["data.consumed.in.nMsg"]) == records
    assert float(stats["data.consumed.in.MB"]) == pytest.approx(records * size / 2**20,
                                                                 abs=1e-4)


# --- kafka-transactions ----------------------------------------------------------------

def test_kafka_transactions_lists_and_describes_open_and_completed_transactions(
        odradek_server: BrokerProcess, admin: AdminClient):
    bootstrap = odradek_server.bootstrap
    server = ["--bootstrap-server", bootstrap]
    create_topic(admin, "tools-txn", 1)
    settings = {"bootstrap.servers": bootstrap, "linger.ms": 1}
    done = Producer({**settings, "transactional.id": "tools-txn-done"})
    done.init_transactions(WAIT)
    done.begin_transaction()
    for i in range(3):
        done.produce("tools-txn", value=b"committed-%d" % i, partition=0)
    done.commit_transaction(WAIT)  # offsets 0-2, its commit marker at 3
    open_ = Producer({**settings, "transactional.id": "tools-txn-open",
                      "transaction.timeout.ms": 300_000})
    open_.init_transactions(WAIT)
    open_.begin_transaction()
    open_.produce("tools-txn", value=b"pending", partition=0)  # offset 4
    assert open_.flush(WAIT) == 0
    try:
        listed = tsv(tool("TransactionsCommand", *server, "list").stdout)
        states = {r["TransactionalId"]: r["TransactionState"] for r in listed}
        assert states.get("tools-txn-done") == "CompleteCommit"
        assert states.get("tools-txn-open") == "Ongoing"
        assert {r["Coordinator"] for r in listed} == {"0"}

        (described,) = tsv(tool("TransactionsCommand", *server, "describe",
                                "--transactional-id", "tools-txn-open").stdout)
        assert described["TransactionState"] == "Ongoing"
        assert described["TopicPartitions"] == "tools-txn-0"
        assert described["TransactionTimeoutMs"] == "300000"
        open_pid = described["ProducerId"]

        producers = tsv(tool("TransactionsCommand", *server, "describe-producers",
                             "--topic", "tools-txn", "--partition", "0").stdout)
        by_pid = {r["ProducerId"]: r for r in producers}
        assert len(by_pid) == 2 and open_pid in by_pid
        assert by_pid[open_pid]["CurrentTransactionStartOffset"] == "4"
        assert by_pid[open_pid]["LastSequence"] == "0"
        (other,) = [r for pid, r in by_pid.items() if pid != open_pid]
        assert other["CurrentTransactionStartOffset"] == "None"
        assert other["LastSequence"] == "2"
    finally:
        open_.abort_transaction(WAIT)
    (described,) = tsv(tool("TransactionsCommand", *server, "describe",
                            "--transactional-id", "tools-txn-open").stdout)
    assert described["TransactionState"] == "CompleteAbort"
    assert described["TopicPartitions"] == ""


# --- kafka-get-offsets and kafka-delete-records ----------------------------------------

def test_get_offsets_and_delete_records(odradek_server: BrokerProcess, admin: AdminClient):
    bootstrap = odradek_server.bootstrap
    server = ["--bootstrap-server", bootstrap]
    create_topic(admin, "tools-offsets", 1)
    base = int(time.time() * 1000) - 3_600_000  # an hour ago: well inside retention
    # Offset 6 holds the largest timestamp first (offset 9 ties it): Kafka answers 6.
    steps = [0, 1, 2, 3, 4, 5, 9, 7, 8, 9]
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i, step in enumerate(steps):
        producer.produce("tools-offsets", value=b"v%d" % i, partition=0,
                         timestamp=base + step * 1000)
    assert producer.flush(WAIT) == 0

    def offsets(time_spec: str) -> str:
        done = tool("GetOffsetShell", *server, "--topic", "tools-offsets",
                    "--time", time_spec)
        assert "Skip getting offsets" not in done.stderr, done.stderr
        return done.stdout.strip()

    assert offsets("-1") == "tools-offsets:0:10"  # latest
    assert offsets("-3") == "tools-offsets:0:6"  # max timestamp (KIP-734)
    assert offsets(str(base + 2500)) == "tools-offsets:0:3"  # first at or after

    plan = Path(odradek_server.data_dir).parent / "delete-records.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": "tools-offsets", "partition": 0, "offset": 4}]}))
    deleted = tool("DeleteRecordsCommand", *server, "--offset-json-file", str(plan))
    assert "partition: tools-offsets-0\tlow_watermark: 4" in deleted.stdout
    assert watermarks(bootstrap, "tools-offsets", 1) == [(4, 10)]

    assert offsets("-2") == "tools-offsets:0:4"  # earliest: the new log start
    # Tiered storage's specs, answered as Kafka does for a topic that is not tiered:
    # the local log start is the log start; there is no tiered offset (none printed).
    assert offsets("-4") == "tools-offsets:0:4"
    assert offsets("-5") == ""


# --- kafka-log-dirs --------------------------------------------------------------------

def test_kafka_log_dirs_reports_the_data_directory_and_partition_sizes(
        odradek_server: BrokerProcess, admin: AdminClient):
    bootstrap = odradek_server.bootstrap
    create_topic(admin, "tools-logdirs", 2)
    produce(bootstrap, "tools-logdirs",
            [(i % 2, b"x" * (100 + i)) for i in range(50)])
    done = tool("LogDirsCommand", "--bootstrap-server", bootstrap, "--describe",
                "--topic-list", "tools-logdirs")
    (line,) = [line for line in done.stdout.splitlines() if line.startswith("{")]
    report = json.loads(line)
    (broker,) = report["brokers"]
    assert broker["broker"] == 0
    (log_dir,) = broker["logDirs"]
    assert log_dir["error"] is None
    assert Path(log_dir["logDir"]).resolve() == Path(odradek_server.data_dir).resolve()
    sizes = {p["partition"]: p["size"] for p in log_dir["partitions"]}
    on_disk = {f"tools-logdirs-{p}": sum(f.stat().st_size for f in
                                         (odradek_server.data_dir / f"tools-logdirs-{p}")
                                         .glob("*.log"))
               for p in range(2)}
    assert sizes == on_disk
    assert all(size > 0 for size in sizes.values())
    assert {(p["offsetLag"], p["isFuture"]) for p in log_dir["partitions"]} == {(0, False)}


# --- kafka-reassign-partitions across log directories (JBOD) ---------------------------

def test_kafka_reassign_partitions_moves_a_replica_between_log_directories(
        tmp_path: Path):
    """A broker with two log directories (log.dirs): kafka-log-dirs lists both, and
    kafka-reassign-partitions with ``log_dirs`` moves a partition's log from one to the
    other (AlterReplicaLogDirs; its --verify reads DescribeLogDirs until the move is
    done), every record still there after it."""
    disks = [tmp_path / "disk-a", tmp_path / "disk-b"]
    with start_broker(tmp_path / "data", "--override",
                      "log.dirs=" + ",".join(str(d) for d in disks)) as broker:
        bootstrap = broker.bootstrap
        create_topic(AdminClient({"bootstrap.servers": bootstrap}), "jbod", 2)
        produce(bootstrap, "jbod", [(i % 2, b"y" * 500) for i in range(400)])

        def where() -> dict[str, tuple[str, bool]]:
            done = tool("LogDirsCommand", "--bootstrap-server", bootstrap, "--describe",
                        "--topic-list", "jbod")
            (line,) = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
            (report,) = json.loads(line)["brokers"]
            assert sorted(d["logDir"] for d in report["logDirs"]) == [str(d) for d in disks]
            return {p["partition"]: (d["logDir"], p["isFuture"])
                    for d in report["logDirs"] for p in d["partitions"]}

        before = where()
        assert {before["jbod-0"][0], before["jbod-1"][0]} == {str(d) for d in disks}
        source = before["jbod-0"][0]
        target = next(str(d) for d in disks if str(d) != source)
        plan = tmp_path / "plan.json"
        plan.write_text(json.dumps({"version": 1, "partitions": [
            {"topic": "jbod", "partition": 0, "replicas": [0], "log_dirs": [target]}]}))
        tool("reassign.ReassignPartitionsCommand", "--bootstrap-server", bootstrap, "--execute",
             "--reassignment-json-file", str(plan))
        deadline = time.monotonic() + WAIT
        while True:
            verified = tool("reassign.ReassignPartitionsCommand", "--bootstrap-server", bootstrap,
                            "--verify", "--reassignment-json-file", str(plan))
            if "is completed" in verified.stdout and "in progress" not in verified.stdout:
                break
            assert time.monotonic() < deadline, verified.stdout
            time.sleep(1)
        assert where() == {"jbod-0": (target, False), "jbod-1": before["jbod-1"]}
        assert watermarks(bootstrap, "jbod", 2) == [(0, 200), (0, 200)]
        assert (Path(target) / "jbod-0").is_dir()
        assert not (Path(source) / "jbod-0").exists()
