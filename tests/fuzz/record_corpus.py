"""Record the fuzz tier's corpus: the requests real clients send (run by hand, not by
pytest; the result is kept in the repository so the tier runs without the clients).

    .venv/bin/python -m tests.fuzz.record_corpus

An in-process broker behind ``RecordingProxy``; confluent-kafka (admin calls, a producer
per codec, an idempotent and a transactional producer, classic and KIP-848 consumer
groups, offsets by time), kafka-python and aiokafka (produce, group consume and commit)
and this repository's own client (client quotas, SCRAM users) talk to it through the
proxy. Frames are kept once per distinct content, at most ``PER_VERSION`` per API
version, and written to ``corpus/requests.bin`` as size-prefixed frames (the wire
format), with a summary of API keys and versions on stdout.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
import time
from collections import Counter
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ConfigResource,
    NewPartitions,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from odradek.testing import running_broker
from tests.fuzz.proxy import RecordingProxy

CORPUS = Path(__file__).parent / "corpus" / "requests.bin"
PER_VERSION = 6
WAIT = 30.0


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
    proxy = RecordingProxy()
    # The broker advertises the proxy: clients reach it through the proxy only.
    with running_broker(**{"group.initial.rebalance.delay.ms": 0,
                           "advertised.listeners": f"PLAINTEXT://{proxy.address}"}) as broker:
        proxy.forward_to(broker.bootstrap)
        try:
            confluent(proxy.address)
            python_clients(proxy.address)
            own_client(proxy.address)
            time.sleep(0.5)
        finally:
            proxy.close()
    kept: list[bytes] = []
    seen: set[bytes] = set()
    per_version: Counter[tuple[int, int]] = Counter()
    for frame in proxy.frames:
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


if __name__ == "__main__":
    main()
