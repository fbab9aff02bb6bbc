"""Produce-and-read-back with each Python client, for the security tests (TLS, SASL,
OAUTHBEARER, ACLs), which differ only in the client settings: ``n`` records keyed ``tag``
with values ``b"0"``, ``b"1"``, ... (each padded with ``pad`` bytes, so responses can be
large enough for the broker's TLS path) go to partition 0 of ``topic``; the values of the
records keyed ``tag`` are read back from offset 0 with ``assign`` (no group) and returned
in order. Each client's own settings dict (confluent-kafka's, or kafka-python's and
aiokafka's keyword arguments) carries the security."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

WAIT = 30.0


def expected(n: int, pad: int = 0) -> list[bytes]:
    return [b"%d" % i + b"v" * pad for i in range(n)]


def rdkafka(conf: dict[str, Any], topic: str, tag: bytes, n: int, pad: int = 0
            ) -> list[bytes]:
    errors: list[KafkaError] = []
    producer = Producer({"linger.ms": 2, "error_cb": errors.append, **conf})
    for value in expected(n, pad):
        producer.produce(topic, key=tag, value=value, partition=0)
    assert producer.flush(WAIT) == 0, errors
    consumer = Consumer({**conf, "group.id": f"reader-{tag.decode()}",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    mine: list[bytes] = []
    deadline = time.monotonic() + WAIT
    try:
        while len(mine) < n and time.monotonic() < deadline:
            for m in consumer.consume(500, 1.0):
                assert m.error() is None, m.error()
                if m.key() == tag:
                    mine.append(m.value())
    finally:
        consumer.close()
    return mine


def kafka_python(conf: dict[str, Any], topic: str, tag: bytes, n: int, pad: int = 0
                 ) -> list[bytes]:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTopicPartition

    producer = KafkaProducer(**conf)
    try:
        for value in expected(n, pad):
            producer.send(topic, key=tag, value=value, partition=0)
        producer.flush(WAIT)
    finally:
        producer.close()
    consumer = KafkaConsumer(**conf, enable_auto_commit=False)
    tp = KTopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek(tp, 0)
    mine: list[bytes] = []
    deadline = time.monotonic() + WAIT
    try:
        while len(mine) < n and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=1000).values():
                mine += [r.value for r in records if r.key == tag]
    finally:
        consumer.close()
    return mine


def aiokafka(conf: dict[str, Any], topic: str, tag: bytes, n: int, pad: int = 0
             ) -> list[bytes]:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka import TopicPartition as ATopicPartition

    async def run() -> list[bytes]:
        producer = AIOKafkaProducer(**conf)
        await producer.start()
        try:
            for value in expected(n, pad):
                await producer.send(topic, key=tag, value=value, partition=0)
            await producer.flush()
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(**conf, enable_auto_commit=False)
        await consumer.start()
        try:
            tp = ATopicPartition(topic, 0)
            consumer.assign([tp])
            consumer.seek(tp, 0)
            mine: list[bytes] = []
            async with asyncio.timeout(WAIT):
                while len(mine) < n:
                    for records in (await consumer.getmany(timeout_ms=1000)).values():
                        mine += [r.value for r in records if r.key == tag]
            return mine
        finally:
            await consumer.stop()

    return asyncio.run(run())


def kafkajs(broker: Any, topic: str, n: int, **security: Any) -> list[str]:
    """kafkajs (tests/interop/js/client.js) creates ``topic``, produces ``n`` records
    valued ``v0``, ``v1``, ... and reads them back through a group of its own (kafkajs
    has no other consumer); the values read, in order. ``security``: the plan's
    ``bootstrap``, ``ssl`` and ``sasl`` (client.js's security settings)."""
    from .test_kafkajs import installed_kafkajs

    messages = [{"key": f"k{i}", "value": f"v{i}"} for i in range(n)]
    answer = installed_kafkajs().run(broker, [
        {"op": "createTopic", "topic": topic, "partitions": 1},
        {"op": "produce", "topic": topic, "codec": "none", "messages": messages},
        {"op": "consumeGroup", "topic": topic, "groupId": f"{topic}-group", "count": n},
    ], **security)
    return [m["value"] for m in answer["results"][2]["messages"]]
