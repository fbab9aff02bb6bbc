"""Producing and fetching through the broker, as clients see it: offsets, codecs, keys,
headers and timestamps intact, acks, long polls woken by appends, fetch limits and
incremental fetch sessions (KIP-227)."""

from __future__ import annotations

import os
import struct
import threading
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from odradek.client.wire import WireClient
from odradek.records import batch as rb
from odradek.records import builder, codecs

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def create(bootstrap: str, topic: str, partitions: int = 1, **configs: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, partitions, 1, config=configs)]).values():
        future.result(10)


def consume_all(bootstrap: str, topic: str, partitions: int, count: int,
                timeout: float = 20.0) -> list:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out = []
    deadline = time.monotonic() + timeout
    while len(out) < count and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is None:
            continue
        if message.error():
            raise KafkaException(message.error())
        out.append(message)
    consumer.close()
    return out


@pytest.mark.parametrize("codec", CODECS)
def test_records_come_back_with_keys_values_headers_and_timestamps_intact(broker, codec):
    create(broker.bootstrap, "events")
    producer = Producer({"bootstrap.servers": broker.bootstrap, "compression.type": codec,
                         "linger.ms": 20})
    sent = []
    for i in range(300):
        key, value = f"user-{i % 7}".encode(), f"event {i} ".encode() * (i % 5 + 1)
        headers = [("trace", f"t{i}".encode()), ("empty", b"")]
        timestamp = 1_700_000_000_000 + i
        producer.produce("events", key=key, value=value, headers=headers, timestamp=timestamp)
        sent.append((key, value, headers, timestamp))
    assert producer.flush(20) == 0
    received = consume_all(broker.bootstrap, "events", 1, len(sent))
    assert [m.offset() for m in received] == list(range(len(sent)))
    assert [(m.key(), m.value(), m.headers(), m.timestamp()[1]) for m in received] == sent


def test_acks_zero_records_are_stored_without_responses(broker):
    create(broker.bootstrap, "fire-and-forget")
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": 0})
    for i in range(200):
        producer.produce("fire-and-forget", value=b"%d" % i)
    assert producer.flush(20) == 0
    received = consume_all(broker.bootstrap, "fire-and-forget", 1, 200)
    assert [m.value() for m in received] == [b"%d" % i for i in range(200)]


def test_keyed_records_spread_over_partitions_and_keep_order_within_each(broker):
    create(broker.bootstrap, "orders", partitions=4)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True})
    for i in range(400):
        producer.produce("orders", key=f"customer-{i % 13}", value=f"{i}")
    assert producer.flush(20) == 0
    received = consume_all(broker.bootstrap, "orders", 4, 400)
    assert len({m.partition() for m in received}) > 1
    per_key: dict[bytes, list[int]] = {}
    for m in received:
        per_key.setdefault(m.key(), []).append(int(m.value()))
    for values in per_key.values():
        assert values == sorted(values)  # one key, one partition, in order


def test_a_topic_is_auto_created_by_metadata_with_num_partitions():
    from odradek.testing import running_broker

    with running_broker(**{"num.partitions": 3}) as b:
        producer = Producer({"bootstrap.servers": b.bootstrap})
        producer.produce("made-on-demand", value=b"x")
        assert producer.flush(20) == 0
        assert b.broker.topic("made-on-demand").partitions == 3


def test_without_auto_create_unknown_topics_are_refused():
    from odradek.testing import running_broker

    with running_broker(**{"auto.create.topics.enable": False}) as b, WireClient(b.port) as c:
        response = c.request(3, 9, {"topics": [{"name": "nope"}],
                                    "allow_auto_topic_creation": True})
        assert response.topics[0].error_code.value == 3  # UNKNOWN_TOPIC_OR_PARTITION
        assert b.broker.topic("nope") is None


def _fetch(client: WireClient, topic: str, offset: int, *, max_wait_ms: int = 0,
           min_bytes: int = 1, version: int = 11, **extra):
    return client.request(1, version, {
        "max_wait": max_wait_ms, "min_bytes": min_bytes, "max_bytes": 1 << 20,
        "isolation_level": 0,
        "topics": [{"topic": topic, "partitions": [
            {"partition": 0, "fetch_offset": offset, "partition_max_bytes": 1 << 20}]}],
        **extra,
    })


def test_a_long_poll_fetch_is_woken_by_an_append_not_by_its_timeout(broker):
    create(broker.bootstrap, "quiet")
    result = {}

    def poll():
        with WireClient(broker.port, timeout=60) as c:
            start = time.monotonic()
            result["response"] = _fetch(c, "quiet", 0, max_wait_ms=30_000)
            result["waited"] = time.monotonic() - start

    waiter = threading.Thread(target=poll)
    waiter.start()
    time.sleep(0.5)  # the fetch is parked in the purgatory by now
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    producer.produce("quiet", value=b"wake up")
    producer.flush(10)
    waiter.join(40)
    assert result["waited"] < 15  # far below the 30 s it would wait for nothing
    records = result["response"].responses[0].partitions[0].records
    assert builder.decode_batches(records)[0].records[0].value == b"wake up"


def test_a_fetch_with_nothing_to_return_waits_its_max_wait(broker):
    create(broker.bootstrap, "empty")
    with WireClient(broker.port) as c:
        start = time.monotonic()
        response = _fetch(c, "empty", 0, max_wait_ms=300)
        assert time.monotonic() - start >= 0.29
        partition = response.responses[0].partitions[0]
        assert partition.error_code.value == 0 and not partition.records


def test_fetch_limits_return_whole_batches_and_at_least_one(broker):
    create(broker.bootstrap, "big")
    batch = builder.build_simple([b"x" * 1000] * 10)  # ~10 KB per batch
    with WireClient(broker.port) as c:
        for _ in range(5):
            c.request(0, 7, {"acks": 1, "timeout": 5000, "topic_data": [
                {"name": "big", "partition_data": [{"index": 0, "records": batch}]}]})
        response = c.request(1, 11, {
            "max_wait": 0, "min_bytes": 1, "max_bytes": 25_000, "isolation_level": 0,
            "topics": [{"topic": "big", "partitions": [
                {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}]})
        records = response.responses[0].partitions[0].records
        assert len(records) == 2 * len(batch)  # whole batches within max_bytes
        response = c.request(1, 11, {
            "max_wait": 0, "min_bytes": 1, "max_bytes": 100, "isolation_level": 0,
            "topics": [{"topic": "big", "partitions": [
                {"partition": 0, "fetch_offset": 13, "partition_max_bytes": 100}]}]})
        records = response.responses[0].partitions[0].records
        decoded = builder.decode_batches(records)
        assert len(decoded) == 1 and decoded[0].header.base_offset == 10  # one, over limits


def test_fetching_past_the_log_end_is_offset_out_of_range(broker):
    create(broker.bootstrap, "short")
    with WireClient(broker.port) as c:
        partition = _fetch(c, "short", 5).responses[0].partitions[0]
        assert partition.error_code.value == 1
        # As Apache Kafka (tests/oracle): an out-of-range answer names no offsets.
        assert partition.high_watermark == -1
        assert partition.log_start_offset == -1


def test_incremental_fetch_sessions_send_only_what_changed(broker):
    create(broker.bootstrap, "a")
    create(broker.bootstrap, "b")
    both = [{"topic": t, "partitions": [{"partition": 0, "fetch_offset": 0,
                                         "partition_max_bytes": 1 << 20}]} for t in "ab"]
    with WireClient(broker.port) as c:
        full = c.request(1, 11, {"max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20,
                                 "isolation_level": 0, "session_id": 0, "session_epoch": 0,
                                 "topics": both})
        assert full.session_id > 0
        assert {t.topic for t in full.responses} == {"a", "b"}
        c.request(0, 7, {"acks": 1, "timeout": 5000, "topic_data": [
            {"name": "b", "partition_data": [{"index": 0,
                                              "records": builder.build_simple([b"new"])}]}]})
        incremental = c.request(1, 11, {"max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20,
                                        "isolation_level": 0, "session_id": full.session_id,
                                        "session_epoch": 1, "topics": []})
        assert [t.topic for t in incremental.responses] == ["b"]  # only b changed
        stale = c.request(1, 11, {"max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20,
                                  "isolation_level": 0, "session_id": full.session_id,
                                  "session_epoch": 1, "topics": []})
        assert stale.error_code.value == 71  # INVALID_FETCH_SESSION_EPOCH
        unknown = c.request(1, 11, {"max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20,
                                    "isolation_level": 0, "session_id": 987654,
                                    "session_epoch": 3, "topics": []})
        assert unknown.error_code.value == 70  # FETCH_SESSION_ID_NOT_FOUND


def test_a_full_fetch_naming_its_session_replaces_it(broker):
    """franz-go resets a session after a fetch is cut off by sending epoch 0 with its old
    session id: Kafka closes that session and opens a new one (not INVALID_FETCH_SESSION_EPOCH,
    which made franz-go retry the same reset forever)."""
    create(broker.bootstrap, "reset")
    topics = [{"topic": "reset", "partitions": [{"partition": 0, "fetch_offset": 0,
                                                 "partition_max_bytes": 1 << 20}]}]

    def fetch(c, session_id, epoch, topics=topics):
        return c.request(1, 12, {"max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20,
                                 "isolation_level": 0, "session_id": session_id,
                                 "session_epoch": epoch, "topics": topics})

    with WireClient(broker.port) as c:
        first = fetch(c, 0, 0)
        assert first.error_code.value == 0 and first.session_id > 0
        assert fetch(c, first.session_id, 1, []).error_code.value == 0
        again = fetch(c, first.session_id, 0)  # a reset: a full fetch naming the session
        assert again.error_code.value == 0
        assert again.session_id > 0 and again.session_id != first.session_id
        assert [t.topic for t in again.responses] == ["reset"]
        assert first.session_id not in broker.broker.fetch_sessions.sessions
        assert fetch(c, again.session_id, 1, []).error_code.value == 0


@pytest.mark.parametrize("version", [4, 7, 11, 12])
def test_every_fetch_version_decodes_with_kafkas_schema(broker, version):
    create(broker.bootstrap, "versions")
    with WireClient(broker.port) as c:
        c.request(0, 9, {"acks": -1, "timeout": 5000, "topic_data": [
            {"name": "versions", "partition_data": [
                {"index": 0, "records": builder.build_simple([b"v"], codec=codecs.GZIP)}]}]})
        response = _fetch(c, "versions", 0, version=version)
        partition = response.responses[0].partitions[0]
        assert partition.high_watermark == 1
        assert builder.decode_batches(partition.records)[0].records[0].value == b"v"


def test_a_single_node_answers_fetches_with_leader_epochs_and_from_replicas_as_kafka(broker):
    # KIP-320: the single node leads at epoch 0, so a consumer naming epoch 0 (or none)
    # reads, one naming a later epoch is told UNKNOWN_LEADER_EPOCH. A fetch as a replica
    # (replica_id >= 0) reads nothing: no broker holds a replica of a single node's
    # partitions (REPLICA_NOT_AVAILABLE, what a cluster's leader tells a non-replica).
    create(broker.bootstrap, "epochs")
    with WireClient(broker.port) as c:
        c.request(0, 9, {"acks": 1, "timeout": 5000, "topic_data": [
            {"name": "epochs", "partition_data": [
                {"index": 0, "records": builder.build_simple([b"e"])}]}]})

        def fetched(epoch: int, replica_id: int = -1) -> tuple[int, int]:
            response = c.request(1, 11, {
                "replica_id": replica_id, "max_wait": 0, "min_bytes": 1,
                "max_bytes": 1 << 20, "isolation_level": 0,
                "topics": [{"topic": "epochs", "partitions": [
                    {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20,
                     "current_leader_epoch": epoch}]}]})
            partition = response.responses[0].partitions[0]
            records = builder.decode_batches(partition.records) if partition.records else []
            return partition.error_code.value, len(records)

        assert fetched(-1) == (0, 1)
        assert fetched(0) == (0, 1)
        assert fetched(3) == (75, 0)  # UNKNOWN_LEADER_EPOCH
        assert fetched(0, replica_id=2) == (9, 0)  # REPLICA_NOT_AVAILABLE


def test_a_retried_idempotent_produce_gets_its_first_offset_again(broker):
    create(broker.bootstrap, "exactly")
    with WireClient(broker.port) as c:
        pid = c.request(22, 4, {"transactional_id": None, "transaction_timeout": 60000,
                                "producer_id": -1, "producer_epoch": -1})
        assert pid.error_code.value == 0
        batch = builder.build_simple([b"once"], producer_id=pid.producer_id,
                                     producer_epoch=pid.producer_epoch, base_sequence=0)
        request = {"acks": -1, "timeout": 5000, "topic_data": [
            {"name": "exactly", "partition_data": [{"index": 0, "records": batch}]}]}
        first = c.request(0, 9, request).responses[0].partition_responses[0]
        retry = c.request(0, 9, request).responses[0].partition_responses[0]
        assert first.error_code.value == retry.error_code.value == 0
        assert first.base_offset == retry.base_offset == 0
        gap = builder.build_simple([b"gap"], producer_id=pid.producer_id,
                                   producer_epoch=pid.producer_epoch, base_sequence=5)
        refused = c.request(0, 9, {"acks": -1, "timeout": 5000, "topic_data": [
            {"name": "exactly", "partition_data": [{"index": 0, "records": gap}]}]})
        assert refused.responses[0].partition_responses[0].error_code.value == 45
    assert broker.broker.get_log("exactly", 0).log_end_offset == 1


def test_list_offsets_finds_earliest_latest_by_time_and_max_timestamp(broker):
    create(broker.bootstrap, "timed")
    with WireClient(broker.port) as c:
        for i, ts in enumerate([1000, 2000, 9000, 3000]):
            batch = builder.build_simple([b"%d" % i], timestamp=ts)
            c.request(0, 7, {"acks": 1, "timeout": 5000, "topic_data": [
                {"name": "timed", "partition_data": [{"index": 0, "records": batch}]}]})

        def lookup(timestamp):
            r = c.request(2, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
                {"name": "timed", "partitions": [{"partition_index": 0,
                                                  "timestamp": timestamp}]}]})
            p = r.topics[0].partitions[0]
            return p.offset, p.timestamp

        assert lookup(-2)[0] == 0
        assert lookup(-1)[0] == 4
        assert lookup(1500) == (1, 2000)
        assert lookup(-3) == (2, 9000)
        assert lookup(10_000) == (-1, -1)

        # Tiered storage's specs (v8, v9, v11; kafka-get-offsets --time -4/-5/-6): with
        # nothing tiered, Kafka answers the log start, then -1 (no tiered offset, no
        # pending upload).
        def lookup_v11(timestamp):
            r = c.request(2, 11, {"replica_id": -1, "isolation_level": 0, "timeout": 5000,
                                  "topics": [{"name": "timed", "partitions": [
                                      {"partition_index": 0, "current_leader_epoch": -1,
                                       "timestamp": timestamp}]}]})
            p = r.topics[0].partitions[0]
            return p.error_code.value, p.offset, p.timestamp

        assert lookup_v11(-4) == (0, 0, -1)
        assert lookup_v11(-5) == (0, -1, -1)
        assert lookup_v11(-6) == (0, -1, -1)
        assert lookup_v11(-1)[:2] == (0, 4)


def test_produce_to_an_unknown_partition_is_refused_per_partition(broker):
    create(broker.bootstrap, "one", partitions=1)
    with WireClient(broker.port) as c:
        response = c.request(0, 9, {"acks": 1, "timeout": 5000, "topic_data": [
            {"name": "one", "partition_data": [
                {"index": 0, "records": builder.build_simple([b"ok"])},
                {"index": 7, "records": builder.build_simple([b"no"])}]}]})
        errors = [p.error_code.value for p in response.responses[0].partition_responses]
        assert errors == [0, 3]


def test_acks_all_on_a_single_node_honours_min_insync_replicas_as_kafka_does(broker):
    # One replica can never make two in sync: acks=all is refused with nothing written
    # (Kafka's answer for a topic whose min.insync.replicas exceeds its replicas), while
    # acks=1 is taken; with the default of one, acks=all is committed at once.
    create(broker.bootstrap, "strict", partitions=1, **{"min.insync.replicas": "2"})
    create(broker.bootstrap, "lenient", partitions=1)

    def produce(c: WireClient, topic: str, acks: int) -> tuple[int, int]:
        response = c.request(0, 9, {"acks": acks, "timeout": 5000, "topic_data": [
            {"name": topic, "partition_data": [
                {"index": 0, "records": builder.build_simple([b"r"])}]}]})
        answer = response.responses[0].partition_responses[0]
        return answer.error_code.value, answer.base_offset

    with WireClient(broker.port) as c:
        assert produce(c, "strict", -1) == (19, -1)  # NOT_ENOUGH_REPLICAS
        assert produce(c, "strict", 1) == (0, 0)  # the refused append wrote nothing
        assert produce(c, "lenient", -1) == (0, 0)
        assert produce(c, "lenient", -1) == (0, 1)


def test_a_corrupt_batch_is_refused_with_corrupt_message_and_nothing_is_stored(broker):
    create(broker.bootstrap, "careful")
    bad = bytearray(builder.build_simple([b"payload"]))
    bad[-1] ^= 0xFF
    with WireClient(broker.port) as c:
        response = c.request(0, 9, {"acks": 1, "timeout": 5000, "topic_data": [
            {"name": "careful", "partition_data": [{"index": 0, "records": bytes(bad)}]}]})
        assert response.responses[0].partition_responses[0].error_code.value == 2
    assert broker.broker.get_log("careful", 0).log_end_offset == 0


def test_a_batch_with_an_unknown_codec_id_is_refused_and_nothing_is_stored(broker):
    create(broker.bootstrap, "codecs")
    bad = bytearray(builder.build_simple([b"payload"]))
    attributes = struct.unpack_from(">h", bad, rb.ATTRIBUTES_AT)[0]
    struct.pack_into(">h", bad, rb.ATTRIBUTES_AT, attributes | 0x05)  # codec 5: no such
    struct.pack_into(">I", bad, rb.CRC_AT, rb.compute_crc(bad))  # a sound batch otherwise
    with WireClient(broker.port) as c:
        response = c.request(0, 9, {"acks": 1, "timeout": 5000, "topic_data": [
            {"name": "codecs", "partition_data": [{"index": 0, "records": bytes(bad)}]}]})
        part = response.responses[0].partition_responses[0]
        assert part.error_code.name == "unsupported_compression_type"
    assert broker.broker.get_log("codecs", 0).log_end_offset == 0


def test_a_topic_with_compression_type_stores_what_it_says_whatever_clients_send(broker):
    create(broker.bootstrap, "squeezed", **{"compression.type": "zstd"})
    producer = Producer({"bootstrap.servers": broker.bootstrap, "compression.type": "lz4"})
    for i in range(50):
        producer.produce("squeezed", key=b"k", value=b"v%d" % i)
    assert producer.flush(20) == 0
    stored = broker.broker.get_log("squeezed", 0).read_batches(0)
    assert {b.header.compression for b in stored} == {codecs.ZSTD}
    received = consume_all(broker.bootstrap, "squeezed", 1, 50)
    assert [m.value() for m in received] == [b"v%d" % i for i in range(50)]


def test_pipelined_requests_are_answered_in_order(broker):
    create(broker.bootstrap, "piped")
    with WireClient(broker.port) as c:
        ids = [c.send(3, 9, {"topics": [{"name": "piped"}]}),
               c.send(18, 3, {"client_software_name": "t", "client_software_version": "1"}),
               c.send(3, 1, {"topics": None})]
        # Reading them back in order works only if they were answered in order.
        assert c.receive(3, 9).topics[0].name == "piped"
        assert c.receive(18, 3).error_code.value == 0
        assert [t.name for t in c.receive(3, 1).topics if not t.is_internal] == ["piped"]
        assert ids == [1, 2, 3]


def test_fetched_records_go_from_the_segment_file_to_the_socket_by_sendfile(broker,
                                                                            monkeypatch):
    import os

    create(broker.bootstrap, "zero-copy")
    payload = builder.build_simple([b"z" * 5000] * 20)
    calls = []
    real_sendfile = os.sendfile

    def counting_sendfile(out_fd, in_fd, offset, count):
        calls.append((in_fd, count))
        return real_sendfile(out_fd, in_fd, offset, count)

    monkeypatch.setattr(os, "sendfile", counting_sendfile)
    with WireClient(broker.port) as c:
        c.request(0, 9, {"acks": 1, "timeout": 5000, "topic_data": [
            {"name": "zero-copy", "partition_data": [{"index": 0, "records": payload}]}]})
        records = _fetch(c, "zero-copy", 0).responses[0].partitions[0].records
    segment_fd = broker.broker.get_log("zero-copy", 0).active.fd
    # Identical from the magic byte on (the broker set the base offset and leader epoch).
    assert records[rb.MAGIC_AT:] == payload[rb.MAGIC_AT:]
    assert calls and all(fd == segment_fd for fd, _ in calls)
    assert sum(n for _, n in calls) >= len(payload)



def test_the_pytest_fixture_gives_each_test_a_broker(odradek_broker):
    producer = Producer({"bootstrap.servers": odradek_broker.bootstrap})
    producer.produce("fixture-topic", value=b"hello")
    assert producer.flush(10) == 0
    assert odradek_broker.broker.get_log("fixture-topic", 0).log_end_offset == 1


def test_kafka_python_consumes_through_an_incremental_fetch_session(broker):
    """kafka-python 3 uses KIP-227 sessions: the broker keeps one for it and its epoch
    moves on with every fetch, while the records keep arriving."""
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KafkaTopicPartition

    create(broker.bootstrap, "sessions", partitions=3)
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None,
                             enable_auto_commit=False, fetch_max_wait_ms=100,
                             auto_offset_reset="earliest")
    assert consumer.config["enable_incremental_fetch_sessions"]
    consumer.assign([KafkaTopicPartition("sessions", p) for p in range(3)])
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    got: list[bytes] = []
    for round_ in range(3):
        for i in range(30):
            producer.produce("sessions", value=b"%d-%d" % (round_, i), partition=i % 3)
        assert producer.flush(10) == 0
        deadline = time.monotonic() + 20
        while len(got) < 30 * (round_ + 1) and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=200).values():
                got.extend(r.value for r in records)
    consumer.close()
    assert sorted(got) == sorted(b"%d-%d" % (r, i) for r in range(3) for i in range(30))
    sessions = broker.broker.fetch_sessions.sessions
    assert sessions and max(s.epoch for s in sessions.values()) >= 2  # incremental fetches
    assert {tp for s in sessions.values() for tp in s.partitions} == {
        ("sessions", p) for p in range(3)}


def test_a_handler_bug_closes_only_that_connection(broker):
    async def broken(_broker, _request):
        raise KeyError("a bug")

    real = broker.broker.handlers[3]
    broker.broker.handlers[3] = broken
    try:
        with WireClient(broker.port) as c:
            c.send(3, 9, {"topics": None})
            with pytest.raises(ConnectionError):
                c.receive(3, 9)
    finally:
        broker.broker.handlers[3] = real
    with WireClient(broker.port) as c:  # everyone else is still served
        assert c.request(3, 9, {"topics": None}).cluster_id


class _Names:
    """What an answer's encoder asks the broker (handlers/hints.py's AnswerNames), from
    fixed tables: the encoding is checked here, the lookups in tests/server/
    test_produce_topic_ids.py."""

    def __init__(self, ids: dict[str, uuid.UUID], leaders: dict[tuple[str, int], tuple[int, int]],
                 nodes: list[dict]) -> None:
        self.ids, self.leaders, self.nodes = ids, leaders, nodes

    def topic_id(self, name: str) -> bytes:
        return self.ids[name].bytes

    def current_leader(self, topic: str, partition: int) -> tuple[int, int]:
        return self.leaders.get((topic, partition), (-1, -1))

    def endpoints(self, node_ids: set[int]) -> list[dict]:
        return [n for n in self.nodes if n["node_id"] in node_ids]


@pytest.mark.parametrize("version", range(3, 14))
def test_the_hand_written_produce_response_matches_kios_encoder_byte_for_byte(version):
    from odradek.protocol.codec import Request, encode_response, response_schema
    from odradek.protocol.messages import build
    from odradek.server.handlers.produce import encode_produce_response

    ids = {"orders": uuid.uuid4(), "ünïcode-topic": uuid.uuid4()}
    # Partitions 5 and 6 are led elsewhere: from v10 the answer says by whom (KIP-951);
    # 6's leader is not known, so only node 2's endpoint goes out.
    nodes = [{"node_id": 2, "host": "b2.example", "port": 9093, "rack": "r2"},
             {"node_id": 3, "host": "b3", "port": 9094, "rack": None}]
    names = _Names(ids, {("orders", 5): (2, 17)}, nodes)
    hints = version >= 10
    responses = [
        {"name": "orders", "partition_responses": [
            {"index": 0, "error_code": 0, "base_offset": 12345, "log_append_time": -1,
             "log_start_offset": 7, "record_errors": [], "error_message": None},
            {"index": 3, "error_code": 45, "base_offset": -1, "log_append_time": -1,
             "log_start_offset": -1, "record_errors": [],
             "error_message": "producer 4: sequence 9 does not follow 2"},
            {"index": 4, "error_code": 87, "base_offset": -1, "log_append_time": -1,
             "log_start_offset": 0, "record_errors": [
                 {"batch_index": 0, "batch_index_error_message": "no key"},
                 {"batch_index": 2, "batch_index_error_message": "no kéy"}],
             "error_message": "One or more records have been rejected"},
            {"index": 5, "error_code": 6, "base_offset": -1, "log_append_time": -1,
             "log_start_offset": -1, "record_errors": [], "error_message": "not the leader",
             **({"current_leader": {"leader_id": 2, "leader_epoch": 17}} if hints else {})},
            {"index": 6, "error_code": 6, "base_offset": -1, "log_append_time": -1,
             "log_start_offset": -1, "record_errors": [], "error_message": None,
             **({"current_leader": {"leader_id": -1, "leader_epoch": -1}} if hints else {})}]},
        {"name": "ünïcode-topic", "partition_responses": [
            {"index": 1, "error_code": 0, "base_offset": 0,
             "log_append_time": 1_700_000_000_123, "log_start_offset": 0,
             "record_errors": [], "error_message": None}]},
    ]
    request = Request(0, version, 99, "c", None)
    expected = encode_response(0, version, 99, build(response_schema(0, version), {
        "responses": [{**({"topic_id": ids[t["name"]]} if version >= 13 else {"name": t["name"]}),
                       "partition_responses": t["partition_responses"]} for t in responses],
        "throttle_time": 0, **({"node_endpoints": nodes[:1]} if hints else {})}))
    answers = [(t["name"], [(p["index"], p["error_code"], p["base_offset"],
                             p["log_append_time"], p["log_start_offset"], p["error_message"],
                             [(e["batch_index"], e["batch_index_error_message"])
                              for e in p["record_errors"]])
                            for p in t["partition_responses"]]) for t in responses]
    assert encode_produce_response(request, answers, names=names) == expected


def test_small_fetches_are_sent_in_one_write_and_large_ones_by_sendfile(broker, monkeypatch):
    """Below COPY_REGION_MAX_BYTES the records are copied into the response (cheaper than
    the sendfile path for a few KiB); above it they go by sendfile. Same bytes either way."""
    import os

    from odradek.server.network.connection import COPY_REGION_MAX_BYTES

    create(broker.bootstrap, "sizes")
    small = builder.build_simple([b"s" * 100] * 10)
    large = builder.build_simple([b"L" * 1000] * (COPY_REGION_MAX_BYTES // 1000 + 10))
    calls = []
    real_sendfile = os.sendfile
    monkeypatch.setattr(os, "sendfile", lambda *a: calls.append(a) or real_sendfile(*a))
    with WireClient(broker.port) as c:
        for payload in (small, large):
            c.request(0, 9, {"acks": 1, "timeout": 5000, "topic_data": [
                {"name": "sizes", "partition_data": [{"index": 0, "records": payload}]}]})
        got = _fetch(c, "sizes", 0, max_bytes=len(small)).responses[0].partitions[0].records
        assert got[rb.MAGIC_AT:] == small[rb.MAGIC_AT:] and not calls
        got = _fetch(c, "sizes", 10).responses[0].partitions[0].records
        assert got[rb.MAGIC_AT:] == large[rb.MAGIC_AT:] and calls


# --- the Fetch response, encoded by hand, against kio's reader ---------------------------

_response_topics = st.lists(
    st.tuples(
        st.sampled_from(["orders", "t", "événements", "x" * 40]),
        st.integers(0, 2**31 - 1),  # partition
        st.sampled_from([0, 1, 3]),  # error code
        st.integers(-1, 2**62), st.integers(-1, 2**62), st.integers(-1, 2**62),
        st.one_of(st.none(), st.binary(min_size=0, max_size=300)),  # records
        st.one_of(st.none(), st.lists(st.tuples(st.integers(-1, 2**62),
                                                st.integers(-1, 2**62)), max_size=3)),
    ),
    max_size=6,
)


@pytest.mark.parametrize("version", range(4, 13))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=_response_topics, correlation_id=st.integers(-(2**31), 2**31 - 1),
       session_id=st.integers(0, 2**31 - 1), error=st.sampled_from([0, 70, 71]))
def test_fetch_response_bytes_decode_with_kio_to_what_the_broker_meant(
        tmp_path_factory, version, rows, correlation_id, session_id, error):
    from kio.index import load_response_schema
    from kio.serial import entity_reader

    from odradek.protocol.codec import Request
    from odradek.server.handlers.fetch import PartitionResult, encode_fetch_response
    from odradek.storage.log import FileRegion
    from odradek.storage.txn_index import AbortedTxn

    path = tmp_path_factory.mktemp("regions") / "segment"
    payload = b"".join(r[6] or b"" for r in rows)
    path.write_bytes(payload)
    fd = os.open(path, os.O_RDONLY)
    try:
        results, position = [], 0
        for topic, partition, err, hw, lso, start, records, aborted in rows:
            region = None
            if records is not None:
                region = FileRegion(fd, position, len(records))
                position += len(records)
            results.append(PartitionResult(
                topic, partition, err, hw, lso, start, region,
                None if aborted is None else [AbortedTxn(p, f, f, f) for p, f in aborted]))
        parts = encode_fetch_response(Request(1, version, correlation_id, "c", None), results,
                                      session_id, error)
        frame = b"".join(p.read() if isinstance(p, FileRegion) else p for p in parts)
    finally:
        os.close(fd)
    assert struct.unpack_from(">i", frame)[0] == len(frame) - 4
    schema = load_response_schema(1, version)
    header, used = entity_reader(schema.__header_schema__)(frame, 4)
    assert header.correlation_id == correlation_id
    body, body_used = entity_reader(schema)(frame, 4 + used)  # both return bytes used
    assert 4 + used + body_used == len(frame)
    if version >= 7:
        assert (body.error_code, body.session_id) == (error, session_id)
    # Partitions of a topic are grouped under it, in first-seen order.
    expected: dict[str, list] = {}
    for row in rows:
        expected.setdefault(row[0], []).append(row)
    assert [t.topic for t in body.responses] == list(expected)
    for t in body.responses:
        for got, row in zip(t.partitions, expected[t.topic], strict=True):
            _, partition, err, hw, lso, start, records, aborted = row
            assert (got.partition_index, got.error_code, got.high_watermark,
                    got.last_stable_offset) == (partition, err, hw, lso)
            if version >= 5:
                assert got.log_start_offset == start
            if version >= 11:
                assert got.preferred_read_replica == -1
            assert bytes(got.records or b"") == (records or b"")
            if aborted is None:
                assert got.aborted_transactions is None
            else:
                assert [(a.producer_id, a.first_offset)
                        for a in got.aborted_transactions] == aborted
