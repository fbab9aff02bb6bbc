"""Python's three Kafka clients against ``odradek serve``: confluent-kafka (librdkafka),
kafka-python (pure Python; idempotent by default in 3.x) and aiokafka (asyncio).

Each one, as an application would: create a topic, produce keyed records with headers
under every codec the client supports, consume them back in order with keys, values,
headers and timestamps intact, find offsets by time, and delete the topic. Consumers use
assign() (no group: consumer groups are a later issue)."""

from __future__ import annotations

import asyncio
import time

import pytest

from .conftest import stored_batches

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
BASE_TS = 1_700_000_000_000
COUNT = 60


def expected(codec: str) -> list[tuple[bytes, bytes, list[tuple[str, bytes]], int]]:
    return [
        (f"key-{i % 5}".encode(), f"{codec} value {i}".encode() * (1 + i % 3),
         [("source", codec.encode()), ("n", str(i).encode())], BASE_TS + i * 1000)
        for i in range(COUNT)
    ]


def assert_stored_codec(server, topic: str, codec: str) -> None:
    """The batches on disk use the codec the client was asked for: a client that silently
    falls back to no compression (librdkafka does, for brokers it misjudges) fails here."""
    assert {b.codec for b in stored_batches(server, topic, 0)} == {codec}


# --- confluent-kafka -----------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS)
def test_confluent_kafka_round_trip(odradek_server, codec):
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    bootstrap = odradek_server.bootstrap
    topic = f"ck-{codec}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(10)
    producer = Producer({"bootstrap.servers": bootstrap, "compression.type": codec,
                         "enable.idempotence": True, "linger.ms": 10})
    sent = expected(codec)
    for key, value, headers, ts in sent:
        producer.produce(topic, key=key, value=value, headers=headers, timestamp=ts)
    assert producer.flush(30) == 0

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "none",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got = []
    deadline = time.monotonic() + 20
    while len(got) < COUNT and time.monotonic() < deadline:
        m = consumer.poll(0.5)
        if m is not None and not m.error():
            got.append((m.key(), m.value(), m.headers(), m.timestamp()[1]))
    [found] = consumer.offsets_for_times([TopicPartition(topic, 0, BASE_TS + 10_500)], 10)
    consumer.close()
    assert got == sent
    assert found.offset == 11
    assert_stored_codec(odradek_server, topic, codec)
    admin.delete_topics([topic])[topic].result(10)
    assert topic not in admin.list_topics(timeout=10).topics


# --- kafka-python --------------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS)
def test_kafka_python_round_trip(odradek_server, codec):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import KafkaAdminClient, NewTopic

    bootstrap = odradek_server.bootstrap
    topic = f"kp-{codec}"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000)
    admin.create_topics([NewTopic(topic, 1, 1)])
    producer = KafkaProducer(bootstrap_servers=bootstrap,
                             compression_type=None if codec == "none" else codec,
                             linger_ms=10)
    assert producer.config["enable_idempotence"]  # kafka-python 3's default
    sent = expected(codec)
    for key, value, headers, ts in sent:
        producer.send(topic, key=key, value=value, headers=headers, timestamp_ms=ts)
    producer.flush(30)
    producer.close()

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                             enable_auto_commit=False, consumer_timeout_ms=5000)
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    got = []
    for m in consumer:
        got.append((m.key, m.value, list(m.headers), m.timestamp))
        if len(got) == COUNT:
            break
    found = consumer.offsets_for_times({tp: BASE_TS + 10_500})[tp]
    consumer.close()
    assert got == sent
    assert found.offset == 11 and found.timestamp == BASE_TS + 11_000
    assert_stored_codec(odradek_server, topic, codec)
    admin.delete_topics([topic])
    assert topic not in admin.list_topics()
    admin.close()


# --- aiokafka ------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS)
def test_aiokafka_round_trip(odradek_server, codec):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    bootstrap = odradek_server.bootstrap
    topic = f"aio-{codec}"
    sent = expected(codec)
    stored: list[set[str]] = []

    async def run() -> tuple[list, object, list[str]]:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await admin.start()
        await admin.create_topics([NewTopic(topic, 1, 1)])
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap,
                                    compression_type=None if codec == "none" else codec,
                                    enable_idempotence=True, linger_ms=10)
        await producer.start()
        try:
            for key, value, headers, ts in sent:
                await producer.send(topic, key=key, value=value, headers=headers,
                                    timestamp_ms=ts)
            await producer.flush()
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                                    enable_auto_commit=False)
        await consumer.start()
        tp = TopicPartition(topic, 0)
        try:
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            got = []
            async with asyncio.timeout(20):
                while len(got) < COUNT:
                    m = await consumer.getone()
                    got.append((m.key, m.value, list(m.headers), m.timestamp))
            found = (await consumer.offsets_for_times({tp: BASE_TS + 10_500}))[tp]
        finally:
            await consumer.stop()
        stored.append({b.codec for b in stored_batches(odradek_server, topic, 0)})
        await admin.delete_topics([topic])
        topics = await admin.list_topics()
        await admin.close()
        return got, found, topics

    got, found, topics = asyncio.run(run())
    assert got == sent
    assert stored == [{codec}]  # the client really compressed, with that codec
    assert found.offset == 11 and found.timestamp == BASE_TS + 11_000
    assert topic not in topics
