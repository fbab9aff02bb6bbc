"""Tiered storage on a broker (KIP-405): a topic's history in an S3 bucket (moto's S3
server, started here) or a directory, read back by an unchanged librdkafka consumer from
the earliest offset; Kafka's ListOffsets specs; the settings' rules; and the store
failing under a running broker."""

from __future__ import annotations

import shutil
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)

from odradek.client.wire import WireClient
from odradek.devcluster.s3 import S3FaultProxy, S3Server
from odradek.server.settings import ConfigError
from odradek.testing import RunningBroker, running_broker

FAST = {"remote.log.storage.system.enable": "true",
        "remote.log.manager.task.interval.ms": "200",
        "log.retention.check.interval.ms": "200",
        "log.segment.delete.delay.ms": "0"}
TIERED = {"remote.storage.enable": "true", "segment.bytes": "16384",
          "local.retention.bytes": "0"}


def until(condition: Callable[[], object], timeout: float = 30.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or condition}")
        time.sleep(0.05)


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    with S3Server(tmp_path_factory.mktemp("s3")) as server:
        yield server


@pytest.fixture
def bucket(s3: S3Server) -> dict[str, str]:
    name = f"tiered-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(name)
    return {**FAST, **s3.rsm_config(name), "rsm.config.storage.s3.api.call.timeout": "2000",
            "rsm.config.storage.s3.max.retries": "1"}


def create(bootstrap: str, name: str, **configs: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, 1, 1, config={**TIERED, **configs})])[name].result(10)


def produce(bootstrap: str, topic: str, count: int, start: int = 0) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5,
                         "batch.num.messages": 50})
    for i in range(start, start + count):
        producer.produce(topic, f"record-{i:06d}".ljust(100, ".").encode())
        if i % 500 == 0:
            producer.poll(0)
    assert producer.flush(30) == 0


def consume_all(bootstrap: str, topic: str, count: int, timeout: float = 60.0) -> list[str]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    values: list[str] = []
    deadline = time.monotonic() + timeout
    try:
        while len(values) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                raise KafkaException(msg.error())
            values.append(msg.value().decode().rstrip("."))
    finally:
        consumer.close()
    return values


def expected(count: int, start: int = 0) -> list[str]:
    return [f"record-{i:06d}" for i in range(start, start + count)]


def list_offset(broker: RunningBroker, topic: str, spec: int) -> int:
    with WireClient(broker.port) as c:
        r = c.request(2, 11, {"replica_id": -1, "isolation_level": 0, "timeout": 5000,
                              "topics": [{"name": topic, "partitions": [
                                  {"partition_index": 0, "current_leader_epoch": -1,
                                   "timestamp": spec}]}]})
    p = r.topics[0].partitions[0]
    assert p.error_code.value == 0
    return p.offset


def tiered_away(broker: RunningBroker, topic: str) -> bool:
    """Some of the topic's history is only in the remote tier."""
    lg = broker.broker.logs.get_log(topic, 0)
    return lg.local_log_start_offset > lg.log_start_offset


def test_a_consumer_reads_the_whole_history_from_s3_and_the_local_tail(bucket):
    with running_broker(**bucket) as broker:
        create(broker.bootstrap, "history")
        produce(broker.bootstrap, "history", 3000)
        until(lambda: tiered_away(broker, "history"), what="segments tiered and deleted")
        lg = broker.broker.logs.get_log("history", 0)
        assert lg.log_start_offset == 0
        assert list_offset(broker, "history", -2) == 0  # the earliest, remote included
        assert list_offset(broker, "history", -4) == lg.local_log_start_offset > 0
        assert list_offset(broker, "history", -5) == lg.highest_remote_offset
        assert lg.highest_remote_offset >= lg.local_log_start_offset - 1
        assert consume_all(broker.bootstrap, "history", 3000) == expected(3000)


def test_history_survives_a_restart_of_the_broker(bucket, tmp_path):
    data = str(tmp_path / "data")
    with running_broker(data, **bucket) as broker:
        create(broker.bootstrap, "kept")
        produce(broker.bootstrap, "kept", 2000)
        until(lambda: tiered_away(broker, "kept"), what="segments tiered")
    with running_broker(data, **bucket) as broker:
        lg = broker.broker.logs.get_log("kept", 0)
        assert lg.log_start_offset == 0 < lg.local_log_start_offset
        produce(broker.bootstrap, "kept", 500, start=2000)
        assert consume_all(broker.bootstrap, "kept", 2500) == expected(2500)


def test_a_single_node_whose_log_disk_is_lost_serves_its_history_and_goes_on(bucket,
                                                                             tmp_path):
    # The broker's own files (topic ids) on one disk, the logs (log.dirs) on another.
    settings = {**bucket, "log.dirs": str(tmp_path / "logs")}
    data = str(tmp_path / "data")
    with running_broker(data, **settings) as broker:
        create(broker.bootstrap, "lost")
        produce(broker.bootstrap, "lost", 2000)
        lg = broker.broker.logs.get_log("lost", 0)
        until(lambda: lg.highest_remote_offset > 1000 and lg.pending_upload_bytes() == 0,
              what="every rolled segment tiered")
        remote_end = lg.highest_remote_offset
    shutil.rmtree(tmp_path / "logs")
    with running_broker(data, **settings) as broker:
        lg = broker.broker.logs.get_log("lost", 0)
        until(lambda: lg.log_end_offset == remote_end + 1, what="the log after the remote part")
        assert lg.log_start_offset == 0
        # New records take new offsets: none of the remote part's is used again.
        produce(broker.bootstrap, "lost", 100, start=remote_end + 1)
        assert consume_all(broker.bootstrap, "lost", remote_end + 101) == expected(
            remote_end + 101)


def test_remote_storage_needs_the_broker_setting_and_a_delete_to_turn_off(bucket):
    with running_broker() as plain:
        admin = AdminClient({"bootstrap.servers": plain.bootstrap})
        future = admin.create_topics([NewTopic("refused", 1, 1, config=TIERED)])["refused"]
        with pytest.raises(KafkaException, match="Tiered Storage functionality is disabled"):
            future.result(10)
    with running_broker(**bucket) as broker:
        create(broker.bootstrap, "on")
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        off = ConfigResource(ConfigResource.Type.TOPIC, "on", incremental_configs=[
            ConfigEntry("remote.storage.enable", "false",
                        incremental_operation=AlterConfigOpType.SET)])
        with pytest.raises(KafkaException, match=r"remote\.log\.delete\.on\.disable"):
            admin.incremental_alter_configs([off])[off].result(10)
        compacted = admin.create_topics([NewTopic("compact", 1, 1, config={
            **TIERED, "cleanup.policy": "compact"})])["compact"]
        with pytest.raises(KafkaException, match="compacted"):
            compacted.result(10)


def test_a_missing_bucket_stops_the_start_naming_the_setting(s3):
    settings = {**FAST, **s3.rsm_config("no-such-bucket")}
    with pytest.raises(ConfigError, match=r"storage\.s3\.bucket\.name"), \
            running_broker(**settings):
        pass


def test_credentials_the_store_refuses_stop_the_start_naming_the_settings(tmp_path):
    with S3Server(tmp_path / "s3", authenticated=True) as strict:
        strict.create_bucket("guarded")
        settings = {**FAST, **strict.rsm_config("guarded")}
        with running_broker(**settings):  # its own key: let in
            pass
        wrong = {**settings, "rsm.config.storage.aws.secret.access.key": "not-the-secret"}
        with pytest.raises(ConfigError, match=r"storage\.aws\.secret\.access\.key"), \
                running_broker(**wrong):
            pass


def metric(broker: RunningBroker, name: str, topic: str) -> float:
    port = broker.broker.metrics_port
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()
    for line in text.decode().splitlines():
        if line.startswith(name + "{") and f'topic="{topic}"' in line:
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no {name} for {topic}")


def test_a_store_that_stops_answering_holds_local_deletion_and_catches_up(bucket, s3,
                                                                          caplog):
    with running_broker(**bucket, **{"metrics.listen": "127.0.0.1:0"}) as broker:
        create(broker.bootstrap, "patient")
        produce(broker.bootstrap, "patient", 1000)
        lg = broker.broker.logs.get_log("patient", 0)
        until(lambda: tiered_away(broker, "patient"), what="first segments tiered")
        s3.pause()
        try:
            time.sleep(0.5)  # a pass in flight ends (it times out)
            start = lg.local_log_start_offset
            produce(broker.bootstrap, "patient", 2000, start=1000)  # produce goes on
            time.sleep(3)
            # Nothing copied meanwhile, so nothing more deleted locally.
            assert lg.local_log_start_offset <= start + 200
            assert lg.pending_upload_bytes() > 0
            # Said: a WARN naming the partition, and the copy lag metric (KIP-963).
            until(lambda: "patient-0: the remote tier failed" in caplog.text, what="a WARN")
            assert metric(broker, "kafka_server_brokertopicmetrics_remotecopylagbytes",
                          "patient") > 0
            # Remote reads answer an error the client retries, not a hang.
            assert fetch_codes(broker, "patient", 0) in ([0], [56])
        finally:
            s3.resume()
        until(lambda: lg.pending_upload_bytes() == 0, timeout=60, what="uploads caught up")
        until(lambda: lg.local_log_start_offset > start + 200, what="local deletion resumed")
        assert metric(broker, "kafka_server_brokertopicmetrics_remotecopylagbytes",
                      "patient") == 0
        assert metric(broker, "kafka_server_brokertopicmetrics_remotelogsizebytes",
                      "patient") > 0
        assert consume_all(broker.bootstrap, "patient", 3000) == expected(3000)


def fetch_codes(broker: RunningBroker, topic: str, offset: int) -> list[int]:
    """The error codes of one Fetch v12 of ``topic`` partition 0 from ``offset``."""
    with WireClient(broker.port, timeout=30) as c:
        r = c.request(1, 12, {"replica_id": -1, "max_wait": 100, "min_bytes": 1,
                              "max_bytes": 1 << 20, "isolation_level": 0, "session_id": 0,
                              "session_epoch": -1, "topics": [{"topic": topic, "partitions": [
                                  {"partition": 0, "fetch_offset": offset,
                                   "partition_max_bytes": 1 << 20,
                                   "current_leader_epoch": -1, "log_start_offset": -1,
                                   "last_fetched_epoch": -1}]}],
                              "forgotten_topics_data": [], "rack_id": ""})
    return [p.error_code.value for t in r.responses for p in t.partitions]


@pytest.mark.parametrize("answer", ["503", "500"])
def test_a_store_answering_errors_holds_local_deletion_and_catches_up(s3, tmp_path, caplog,
                                                                      answer):
    name = f"refusing-{answer}"
    s3.create_bucket(name)
    proxy = S3FaultProxy(s3.endpoint)
    settings = {**FAST, **s3.rsm_config(name),
                "rsm.config.storage.s3.endpoint.url": proxy.endpoint,
                "rsm.config.storage.s3.api.call.timeout": "2000",
                "rsm.config.storage.s3.max.retries": "1"}
    try:
        with running_broker(**settings) as broker:
            create(broker.bootstrap, "refused")
            produce(broker.bootstrap, "refused", 1000)
            lg = broker.broker.logs.get_log("refused", 0)
            until(lambda: tiered_away(broker, "refused"), what="first segments tiered")
            proxy.mode = answer
            time.sleep(0.5)
            start = lg.local_log_start_offset
            produce(broker.bootstrap, "refused", 2000, start=1000)
            until(lambda: "refused-0: the remote tier failed" in caplog.text, what="a WARN")
            assert lg.pending_upload_bytes() > 0
            assert lg.local_log_start_offset <= start + 200
            # A read of the remote part: KAFKA_STORAGE_ERROR, which clients retry.
            until(lambda: fetch_codes(broker, "refused", 0) == [56], what="error 56")
            assert proxy.answered[answer] > 0
            proxy.mode = "pass"
            until(lambda: lg.pending_upload_bytes() == 0, timeout=60, what="caught up")
            assert consume_all(broker.bootstrap, "refused", 3000) == expected(3000)
    finally:
        proxy.close()


def test_a_directory_store_serves_a_single_node_and_forgets_a_deleted_topic(tmp_path):
    root = Path(tmp_path / "remote")
    root.mkdir()
    settings = {**FAST, "rsm.config.storage.backend.class": "filesystem",
                "rsm.config.storage.root": str(root)}
    with running_broker(**settings) as broker:
        create(broker.bootstrap, "local")
        produce(broker.bootstrap, "local", 2000)
        until(lambda: tiered_away(broker, "local"), what="segments tiered")
        assert list(root.rglob("*.log"))
        assert consume_all(broker.bootstrap, "local", 2000) == expected(2000)
        # Deleting the topic deletes its remote segments too (Kafka's rule).
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.delete_topics(["local"])["local"].result(10)
        until(lambda: not [p for p in root.rglob("*") if p.is_file()],
              what="the deleted topic's remote objects gone")


def test_read_committed_consumers_skip_aborted_records_read_from_s3(bucket):
    with running_broker(**bucket) as broker:
        create(broker.bootstrap, "txns")
        producer = Producer({"bootstrap.servers": broker.bootstrap,
                             "transactional.id": "tiered-txn", "linger.ms": 5})
        producer.init_transactions(10)
        committed = []
        for round_ in range(12):
            producer.begin_transaction()
            for i in range(150):
                value = f"r{round_}-{i}".ljust(100, ".")
                producer.produce("txns", value.encode())
            if round_ % 3 == 1:
                producer.abort_transaction(10)
            else:
                producer.commit_transaction(10)
                committed += [f"r{round_}-{i}" for i in range(150)]
        until(lambda: tiered_away(broker, "txns"), what="segments tiered")
        lg = broker.broker.logs.get_log("txns", 0)
        until(lambda: lg.local_log_start_offset > 600, what="most rounds only remote")
        consumer = Consumer({"bootstrap.servers": broker.bootstrap,
                             "group.id": uuid.uuid4().hex, "auto.offset.reset": "earliest",
                             "isolation.level": "read_committed"})
        consumer.subscribe(["txns"])
        got: list[str] = []
        deadline = time.monotonic() + 60
        try:
            while len(got) < len(committed) and time.monotonic() < deadline:
                msg = consumer.poll(0.5)
                if msg is not None and not msg.error():
                    got.append(msg.value().decode().rstrip("."))
            time.sleep(1)  # nothing aborted comes after
            while (msg := consumer.poll(0.2)) is not None:
                if not msg.error():
                    got.append(msg.value().decode().rstrip("."))
        finally:
            consumer.close()
        assert got == committed


def test_a_pure_python_client_reads_the_history_too(bucket):
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTopicPartition

    with running_broker(**bucket) as broker:
        create(broker.bootstrap, "pure")
        produce(broker.bootstrap, "pure", 2000)
        until(lambda: tiered_away(broker, "pure"), what="segments tiered")
        # Assigned, not subscribed: no group join to wait for; it reads from offset 0.
        consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap,
                                 auto_offset_reset="earliest", consumer_timeout_ms=5_000)
        consumer.assign([KTopicPartition("pure", 0)])
        try:
            values = [m.value.decode().rstrip(".") for m in consumer]
        finally:
            consumer.close()
        assert values == expected(2000)


def test_a_timestamp_lookup_finds_records_in_the_remote_tier(bucket):
    with running_broker(**bucket) as broker:
        create(broker.bootstrap, "timed")
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5,
                             "batch.num.messages": 50})
        base = 1_700_000_000_000
        for i in range(2000):
            producer.produce("timed", f"t-{i}".ljust(100, ".").encode(),
                             timestamp=base + i * 1000)
        assert producer.flush(30) == 0
        lg = broker.broker.logs.get_log("timed", 0)
        until(lambda: lg.local_log_start_offset > 1000, what="half the log only remote")
        # Offsets below the local log start are found in the remote tier: the first
        # record at or after the time asked, its own timestamp.
        for i in (0, 7, 500, 999):
            assert lookup_time(broker, "timed", base + i * 1000 - 1) == (i, base + i * 1000)
        tail = lg.local_log_start_offset + 3
        assert lookup_time(broker, "timed", base + tail * 1000) == (tail, base + tail * 1000)
        assert lookup_time(broker, "timed", base + 10_000_000) == (-1, -1)


def lookup_time(broker: RunningBroker, topic: str, timestamp: int) -> tuple[int, int]:
    with WireClient(broker.port) as c:
        r = c.request(2, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": topic, "partitions": [{"partition_index": 0,
                                            "current_leader_epoch": -1,
                                            "timestamp": timestamp}]}]})
    p = r.topics[0].partitions[0]
    assert p.error_code.value == 0
    return p.offset, p.timestamp


def test_a_share_group_gets_the_records_of_the_remote_tier(bucket):
    from confluent_kafka import ShareConsumer

    from tests.server.test_share_groups import set_group_configs

    with running_broker(**bucket) as broker:
        create(broker.bootstrap, "queued")
        produce(broker.bootstrap, "queued", 2000)
        until(lambda: tiered_away(broker, "queued"), what="segments tiered")
        with WireClient(broker.port) as admin:
            set_group_configs(admin, "workers", share_auto_offset_reset="earliest")
        consumer = ShareConsumer({"bootstrap.servers": broker.bootstrap,
                                  "group.id": "workers"})
        consumer.subscribe(["queued"])
        offsets: set[int] = set()
        deadline = time.monotonic() + 60
        try:
            while len(offsets) < 2000 and time.monotonic() < deadline:
                for m in consumer.poll(0.5) or []:
                    if not m.error():
                        offsets.add(m.offset())
        finally:
            consumer.close()
        assert offsets == set(range(2000))
