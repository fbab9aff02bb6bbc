"""Dynamic broker configs and group configs with a real client (confluent-kafka's
AdminClient, librdkafka): set with IncrementalAlterConfigs / AlterConfigs on a BROKER
resource (a broker id, or "" for the cluster default) and on a GROUP resource (KIP-848
group configs), described with Kafka's config sources, kept across a broker restart,
refused with Kafka's errors where Kafka refuses them; a group's heartbeat interval is
what its KIP-848 consumer then heartbeats at.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
    ResourceType,
)

from odradek.client.wire import WireClient

from .conftest import requests_answered, start_broker

pytestmark = pytest.mark.interop

TIMEOUT = 30
SET, DELETE, APPEND, SUBTRACT = (AlterConfigOpType.SET, AlterConfigOpType.DELETE,
                                 AlterConfigOpType.APPEND, AlterConfigOpType.SUBTRACT)


def admin_for(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def incremental(admin: AdminClient, rtype: ResourceType, name: str,
                *ops: tuple[str, AlterConfigOpType, str | None]) -> None:
    resource = ConfigResource(rtype, name, incremental_configs=[
        ConfigEntry(n, v, incremental_operation=op) for n, op, v in ops])
    admin.incremental_alter_configs([resource])[resource].result(TIMEOUT)


def set_cluster_default(port: int, **configs: str) -> None:
    """IncrementalAlterConfigs SET on the cluster-wide default (BROKER resource ""),
    which confluent-kafka's ConfigResource cannot name, over the wire."""
    with WireClient(port) as client:
        response = client.request(44, 1, {"validate_only": False, "resources": [{
            "resource_type": 4, "resource_name": "", "configs": [
                {"name": n.replace("_", "."), "config_operation": 0, "value": v}
                for n, v in configs.items()]}]})
    assert [(r.error_code, r.error_message) for r in response.responses] == [(0, None)]


def describe_cluster_default(port: int) -> dict[str, tuple[str, int]]:
    with WireClient(port) as client:
        response = client.request(32, 4, {"resources": [{
            "resource_type": 4, "resource_name": "", "configuration_keys": None}],
            "include_synonyms": False, "include_documentation": False})
    (result,) = response.results
    assert result.error_code == 0, result
    return {c.name: (c.value, c.config_source) for c in result.configs}


def describe(admin: AdminClient, rtype: ResourceType, name: str) -> dict[str, ConfigEntry]:
    resource = ConfigResource(rtype, name)
    return admin.describe_configs([resource])[resource].result(TIMEOUT)


def refused(call) -> KafkaError:
    with pytest.raises(KafkaException) as exc_info:
        call()
    return exc_info.value.args[0]


def source(entry: ConfigEntry) -> ConfigSource:
    return ConfigSource(entry.source)


def synonym_sources(port: int, broker_id: str, name: str) -> list[ConfigSource]:
    """The sources of a broker config's synonyms, most precedent first (over the wire:
    confluent-kafka keys synonyms by name, and they all have the same one here)."""
    with WireClient(port) as client:
        response = client.request(32, 4, {"resources": [{
            "resource_type": 4, "resource_name": broker_id, "configuration_keys": [name]}],
            "include_synonyms": True, "include_documentation": False})
    (config,) = response.results[0].configs
    return [ConfigSource(s.source) for s in config.synonyms]


def test_broker_configs_are_set_described_with_their_source_and_survive_a_restart(tmp_path):
    data = tmp_path / "data"
    with start_broker(data, "--override", "log.retention.ms=3600000") as broker:
        admin = admin_for(broker.bootstrap)
        admin.create_topics([NewTopic("dyn", 1, 1)])["dyn"].result(TIMEOUT)
        # This broker's own value, over the static one.
        incremental(admin, ResourceType.BROKER, "0", ("log.retention.ms", SET, "7200000"),
                    ("sasl.kerberos.min.time.before.relogin", SET, "120000"),
                    ("log.cleanup.policy", APPEND, "compact"))
        # The cluster-wide default.
        set_cluster_default(broker.port, log_segment_bytes="2000000",
                            background_threads="9")

        def check(admin: AdminClient, port: int) -> None:
            configs = describe(admin, ResourceType.BROKER, "0")
            retention = configs["log.retention.ms"]
            assert (retention.value, source(retention)) == (
                "7200000", ConfigSource.DYNAMIC_BROKER_CONFIG)
            assert synonym_sources(port, "0", "log.retention.ms") == [
                ConfigSource.DYNAMIC_BROKER_CONFIG, ConfigSource.STATIC_BROKER_CONFIG,
                ConfigSource.DEFAULT_CONFIG]
            assert not retention.is_read_only
            segment = configs["log.segment.bytes"]
            assert (segment.value, source(segment)) == (
                "2000000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)
            kerberos = configs["sasl.kerberos.min.time.before.relogin"]
            assert (kerberos.value, source(kerberos)) == (
                "120000", ConfigSource.DYNAMIC_BROKER_CONFIG)
            assert configs["log.cleanup.policy"].value == "delete,compact"
            threads = configs["background.threads"]
            assert (threads.value, source(threads)) == (
                "9", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)
            node = configs["node.id"]
            assert source(node) == ConfigSource.DEFAULT_CONFIG and node.is_read_only

            default = ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value
            assert describe_cluster_default(port) == {
                "log.segment.bytes": ("2000000", default), "background.threads": ("9", default)}

            # The dynamic defaults are the topic's defaults.
            topic = describe(admin, ResourceType.TOPIC, "dyn")
            assert (topic["retention.ms"].value, source(topic["retention.ms"])) == (
                "7200000", ConfigSource.DYNAMIC_BROKER_CONFIG)
            assert topic["segment.bytes"].value == "2000000"
            assert topic["cleanup.policy"].value == "compact,delete"

        check(admin, broker.port)

    with start_broker(data, "--override", "log.retention.ms=3600000") as broker:
        admin = admin_for(broker.bootstrap)
        check(admin, broker.port)
        # DELETE and SUBTRACT: back to the static value and the default list.
        incremental(admin, ResourceType.BROKER, "0", ("log.retention.ms", DELETE, None),
                    ("log.cleanup.policy", SUBTRACT, "compact"))
        configs = describe(admin, ResourceType.BROKER, "0")
        assert (configs["log.retention.ms"].value, source(configs["log.retention.ms"])) == (
            "3600000", ConfigSource.STATIC_BROKER_CONFIG)
        assert configs["log.cleanup.policy"].value == "delete"
        topic = describe(admin, ResourceType.TOPIC, "dyn")
        assert topic["retention.ms"].value == "3600000"


def test_read_only_and_invalid_broker_configs_are_refused_as_kafka_refuses_them(tmp_path):
    with start_broker(tmp_path / "data") as broker:
        admin = admin_for(broker.bootstrap)

        error = refused(lambda: incremental(admin, ResourceType.BROKER, "0",
                                            ("node.id", SET, "3")))
        assert error.code() == KafkaError.INVALID_REQUEST
        assert "Cannot update these configs dynamically: Set(node.id)" in error.str()

        # AlterConfigs (the whole set) is checked the same way.
        resource = ConfigResource(ResourceType.BROKER, "0",
                                  set_config={"log.retention.ms": "soon"})
        error = refused(lambda: admin.alter_configs([resource])[resource].result(TIMEOUT))
        assert error.code() == KafkaError.INVALID_REQUEST
        assert "log.retention.ms" in error.str()

        with WireClient(broker.port) as client:
            response = client.request(44, 1, {"validate_only": False, "resources": [{
                "resource_type": 4, "resource_name": "", "configs": [{
                    "name": "sasl.kerberos.min.time.before.relogin", "config_operation": 0,
                    "value": "1000"}]}]})
        (result,) = response.responses
        assert result.error_code == KafkaError.INVALID_REQUEST
        assert "broker id must be specified" in result.error_message

        error = refused(lambda: incremental(admin, ResourceType.BROKER, "0",
                                            ("log.retention.ms", APPEND, "5")))
        assert error.code() == KafkaError.INVALID_CONFIG
        assert ("Config value append is not allowed for config key: log.retention.ms"
                in error.str())

        with WireClient(broker.port) as client:  # another broker's: a client sends
            response = client.request(44, 1, {"validate_only": False, "resources": [{
                "resource_type": 4, "resource_name": "7", "configs": [{
                    "name": "log.retention.ms", "config_operation": 0, "value": "5"}]}]})
        assert [(r.error_code, r.error_message) for r in response.responses] == [(
            KafkaError.INVALID_REQUEST, "Unexpected broker id, expected 0, but received 7")]

        # Nothing of it was kept; AlterConfigs of a legal set is.
        resource = ConfigResource(ResourceType.BROKER, "0",
                                  set_config={"log.retention.ms": "600000"})
        admin.alter_configs([resource])[resource].result(TIMEOUT)
        configs = describe(admin, ResourceType.BROKER, "0")
        assert (configs["log.retention.ms"].value, source(configs["log.retention.ms"])) == (
            "600000", ConfigSource.DYNAMIC_BROKER_CONFIG)
        assert source(configs["node.id"]) == ConfigSource.DEFAULT_CONFIG


def test_group_configs_are_validated_described_and_survive_a_restart(tmp_path):
    data = tmp_path / "data"
    with start_broker(data) as broker:
        admin = admin_for(broker.bootstrap)
        configs = describe(admin, ResourceType.GROUP, "no-such-group-yet")
        assert {n: (e.value, source(e)) for n, e in configs.items()
                if n.startswith("consumer.")} == {
            "consumer.session.timeout.ms": ("45000", ConfigSource.DEFAULT_CONFIG),
            "consumer.heartbeat.interval.ms": ("5000", ConfigSource.DEFAULT_CONFIG)}

        incremental(admin, ResourceType.GROUP, "g1",
                    ("consumer.session.timeout.ms", SET, "50000"),
                    ("consumer.heartbeat.interval.ms", SET, "6000"))

        for name, value, message in [
            ("consumer.session.timeout.ms", "40000", "consumer.session.timeout.ms must be "
             "greater than or equal to group.consumer.min.session.timeout.ms"),
            ("consumer.heartbeat.interval.ms", "20000", "consumer.heartbeat.interval.ms "
             "must be less than or equal to group.consumer.max.heartbeat.interval.ms"),
            ("consumer.session.timeout.ms", "often", "Invalid value often for "
             "configuration consumer.session.timeout.ms"),
            ("session.timeout.ms", "50000", "Unknown group config name: session.timeout.ms"),
        ]:
            error = refused(lambda n=name, v=value: incremental(
                admin, ResourceType.GROUP, "g1", (n, SET, v)))
            assert error.code() == KafkaError.INVALID_CONFIG, (name, value)
            assert message in error.str()

    with start_broker(data) as broker:
        admin = admin_for(broker.bootstrap)
        configs = describe(admin, ResourceType.GROUP, "g1")
        assert (configs["consumer.session.timeout.ms"].value,
                source(configs["consumer.session.timeout.ms"])) == (
            "50000", ConfigSource.GROUP_CONFIG)
        assert configs["consumer.heartbeat.interval.ms"].value == "6000"
        incremental(admin, ResourceType.GROUP, "g1",
                    ("consumer.session.timeout.ms", DELETE, None))
        configs = describe(admin, ResourceType.GROUP, "g1")
        assert (configs["consumer.session.timeout.ms"].value,
                source(configs["consumer.session.timeout.ms"])) == (
            "45000", ConfigSource.DEFAULT_CONFIG)


def _heartbeats(broker, group: str, topic: str, seconds: float) -> int:
    """ConsumerGroupHeartbeat requests the broker gets in ``seconds`` while a KIP-848
    consumer of ``group`` (the only one) holds its assignment (the broker's
    request counter: librdkafka's statistics do not count these requests)."""
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                         "group.protocol": "consumer"})
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + TIMEOUT
        while not consumer.assignment() and time.monotonic() < deadline:
            consumer.poll(0.2)
        assert consumer.assignment(), "no assignment"
        consumer.poll(0.5)
        before = requests_answered(broker.metrics_url(), "ConsumerGroupHeartbeat")
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            consumer.poll(0.2)
        return requests_answered(broker.metrics_url(), "ConsumerGroupHeartbeat") - before
    finally:
        consumer.close()


def test_a_groups_heartbeat_interval_is_what_its_kip848_consumer_heartbeats_at(tmp_path):
    with start_broker(tmp_path / "data", "--override", "metrics.listen=127.0.0.1:0",
                      "--override", "group.consumer.min.heartbeat.interval.ms=100",
                      "--override", "group.consumer.heartbeat.interval.ms=5000") as broker:
        admin = admin_for(broker.bootstrap)
        admin.create_topics([NewTopic("beats", 1, 1)])["beats"].result(TIMEOUT)
        incremental(admin, ResourceType.GROUP, "fast",
                    ("consumer.heartbeat.interval.ms", SET, "200"))

        fast = _heartbeats(broker, "fast", "beats", 4)
        slow = _heartbeats(broker, "slow", "beats", 4)
        assert fast >= 8, (fast, slow)  # every 200 ms: ~20
        assert slow <= 3, (fast, slow)  # every 5 s: ~1
