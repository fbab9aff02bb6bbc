"""Behaviours librdkafka's own test suite checks of a broker (docs/compatibility.md,
"librdkafka's test suite"), each held here with a real client against ``odradek serve``:

- a compacted topic refuses records without a key (Kafka's LogValidator): the batch fails
  with INVALID_RECORD, the per-record errors of KIP-467 name the keyless records (the
  client reports INVALID_RECORD for those and _INVALID_DIFFERENT_RECORD for the others of
  the batch), and nothing of the batch is appended;
- IncrementalAlterConfigs' APPEND and SUBTRACT edit list-valued configs from the
  override, else the config's default, and are refused (INVALID_CONFIG) for the others.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)

from odradek.client.wire import WireClient
from odradek.records import codecs
from odradek.records.builder import build_simple
from tests.interop.conftest import BrokerProcess

TIMEOUT = 30
NO_KEY = "Compacted topic cannot accept message without key in topic partition {}-0"


def _admin(broker: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def _create(admin: AdminClient, topic: str, config: dict[str, str] | None = None) -> None:
    futures = admin.create_topics([NewTopic(topic, 1, 1, config=config or {})])
    futures[topic].result(TIMEOUT)


def _incremental(admin: AdminClient, topic: str, *ops: tuple[str, str | None,
                                                              AlterConfigOpType]) -> None:
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry(name, value, incremental_operation=op) for name, value, op in ops])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(TIMEOUT)


def _value(admin: AdminClient, topic: str, name: str) -> str:
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    configs = admin.describe_configs([resource])[resource].result(TIMEOUT)
    return str(configs[name].value)


def _error(exc_info: pytest.ExceptionInfo[KafkaException]) -> KafkaError:
    error = exc_info.value.args[0]
    assert isinstance(error, KafkaError)
    return error


def _end_offset(broker: BrokerProcess, topic: str) -> int:
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "conformance"})
    try:
        return int(consumer.get_watermark_offsets(TopicPartition(topic, 0), TIMEOUT)[1])
    finally:
        consumer.close()


def test_a_compacted_topic_refuses_a_batch_with_keyless_records(
        odradek_server: BrokerProcess) -> None:
    admin = _admin(odradek_server)
    topic = "conformance-compacted"
    _create(admin, topic)
    _incremental(admin, topic, ("cleanup.policy", "compact", AlterConfigOpType.APPEND))

    reports: list[tuple[int, KafkaError | None]] = []
    # One batch of ten, sent when the tenth record is queued: a linger timer could fire
    # between two produce() calls on a loaded machine and split the batch (CI saw it).
    producer = Producer({"bootstrap.servers": odradek_server.bootstrap, "linger.ms": 60_000,
                         "batch.num.messages": 10, "enable.idempotence": False})
    for i in range(10):  # records 0, 4 and 8 have no key
        producer.produce(topic, f"value {i}".encode(), None if i % 4 == 0 else b"k%d" % i,
                         partition=0, on_delivery=lambda err, msg: reports.append(
                             (int(msg.value().split()[1]), err)))
    assert producer.flush(TIMEOUT) == 0

    errors = dict(reports)
    assert sorted(errors) == list(range(10))
    for i, err in errors.items():
        assert err is not None, f"record {i} was written"
        if i % 4 == 0:  # named by the response's record_errors (their messages do not
            assert err.code() == KafkaError.INVALID_RECORD  # reach Python: see the next test)
        else:  # the rest of the refused batch
            assert err.code() == KafkaError._INVALID_DIFFERENT_RECORD
    assert _end_offset(odradek_server, topic) == 0  # nothing of the batch was appended

    keyed = []
    producer.produce(topic, b"with a key", b"key", partition=0,
                     on_delivery=lambda err, msg: keyed.append(err))
    assert producer.flush(TIMEOUT) == 0
    assert keyed == [None]
    assert _end_offset(odradek_server, topic) == 1


@pytest.mark.parametrize("version", [7, 8, 9])
def test_the_produce_response_lists_each_keyless_record(
        odradek_server: BrokerProcess, version: int) -> None:
    """KIP-467 on the wire: error_code 87, the error message Kafka writes, and from v8
    a record_errors entry (batch_index, message) per keyless record of the batch (the
    records of a compressed batch too, v9 here)."""
    admin = _admin(odradek_server)
    topic = f"conformance-wire-v{version}"
    _create(admin, topic, {"cleanup.policy": "compact"})
    records = build_simple([b"1", b"2", b"3", b"4"], keys=[b"a", None, b"c", None],
                           timestamp=int(time.time() * 1000),
                           codec=codecs.GZIP if version == 9 else codecs.NONE)
    with WireClient(odradek_server.port) as client:
        response = client.request(0, version, {
            "transactional_id": None, "acks": -1, "timeout_ms": 10_000,
            "topic_data": [{"name": topic, "partition_data": [
                {"index": 0, "records": records}]}]})
    (answer,) = response.responses[0].partition_responses
    assert answer.error_code == 87  # INVALID_RECORD
    assert answer.base_offset == -1
    if version >= 8:
        assert [(e.batch_index, e.batch_index_error_message)
                for e in answer.record_errors] == [(1, NO_KEY.format(topic)),
                                                   (3, NO_KEY.format(topic))]
        assert answer.error_message == (
            "One or more records have been rejected due to 2 record errors in total, and "
            "only showing the first three errors at most: ["
            f"RecordError(batchIndex=1, message='{NO_KEY.format(topic)}'), "
            f"RecordError(batchIndex=3, message='{NO_KEY.format(topic)}')]")
    assert _end_offset(odradek_server, topic) == 0


def test_append_and_subtract_edit_a_list_config(odradek_server: BrokerProcess) -> None:
    admin = _admin(odradek_server)
    topic = "conformance-lists"
    _create(admin, topic)

    # From the default (delete): APPEND adds what is not there yet, once.
    _incremental(admin, topic, ("cleanup.policy", "compact", AlterConfigOpType.APPEND))
    assert set(_value(admin, topic, "cleanup.policy").split(",")) == {"compact", "delete"}
    _incremental(admin, topic, ("cleanup.policy", "compact,delete", AlterConfigOpType.APPEND))
    assert set(_value(admin, topic, "cleanup.policy").split(",")) == {"compact", "delete"}
    # SUBTRACT removes the given items; one that is not there is no error.
    _incremental(admin, topic, ("cleanup.policy", "delete", AlterConfigOpType.SUBTRACT))
    assert _value(admin, topic, "cleanup.policy") == "compact"
    _incremental(admin, topic, ("cleanup.policy", "delete", AlterConfigOpType.SUBTRACT))
    assert _value(admin, topic, "cleanup.policy") == "compact"
    # Operations apply in order, within one request too.
    _incremental(admin, topic,
                 ("leader.replication.throttled.replicas", "0:1", AlterConfigOpType.APPEND),
                 ("retention.ms", "60000", AlterConfigOpType.SET))
    _incremental(admin, topic,
                 ("leader.replication.throttled.replicas", "0:2", AlterConfigOpType.APPEND))
    assert _value(admin, topic, "leader.replication.throttled.replicas") == "0:1,0:2"
    _incremental(admin, topic,
                 ("leader.replication.throttled.replicas", "0:1", AlterConfigOpType.SUBTRACT))
    assert _value(admin, topic, "leader.replication.throttled.replicas") == "0:2"
    assert _value(admin, topic, "retention.ms") == "60000"


@pytest.mark.parametrize("op", [AlterConfigOpType.APPEND, AlterConfigOpType.SUBTRACT])
def test_append_and_subtract_refuse_a_config_that_is_not_a_list(
        odradek_server: BrokerProcess, op: AlterConfigOpType) -> None:
    admin = _admin(odradek_server)
    topic = f"conformance-scalar-{op.name.lower()}"
    _create(admin, topic, {"retention.ms": "70000"})

    for name in ("retention.ms", "no.such.config"):
        with pytest.raises(KafkaException) as exc_info:
            _incremental(admin, topic, (name, "5", op))
        error = _error(exc_info)
        assert error.code() == KafkaError.INVALID_CONFIG
        assert f"Can't {op.name} to key {name} because its type is not LIST." in error.str()
    assert _value(admin, topic, "retention.ms") == "70000"  # unchanged
