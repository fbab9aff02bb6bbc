"""Durable mode (``flush.messages=1``): a produce is answered only once its records are
fsynced, and concurrent producers share fsyncs (group commit) instead of taking turns."""

from __future__ import annotations

import os
import threading
from unittest import mock

from confluent_kafka import Producer
from kio.schema.errors import ErrorCode

from odradek.client.wire import WireClient
from odradek.records import builder

from .test_produce_fetch import consume_all, create


def produce_body(topic: str, records: bytes) -> dict:
    return {"acks": -1, "timeout": 5000, "topic_data": [
        {"name": topic, "partition_data": [{"index": 0, "records": records}]}]}


def test_every_acknowledged_record_is_synced_and_concurrent_producers_share_fsyncs(broker):
    create(broker.bootstrap, "ledger", **{"flush.messages": "1"})
    lg = broker.broker.get_log("ledger", 0)
    synced_at_ack: list[tuple[int, int]] = []  # (acknowledged end offset, recovery point)
    real_sync = lg.sync

    def slow_sync() -> int:
        threading.Event().wait(0.02)  # a disk with 20 ms fsyncs: requests pile up behind
        return real_sync()

    lg.sync = slow_sync  # type: ignore[method-assign]

    def producer(n: int) -> None:
        with WireClient(broker.port) as client:
            for i in range(n):
                response = client.request(0, 9, produce_body(
                    "ledger", builder.build_simple([f"{threading.get_ident()}-{i}".encode()])))
                part = response.responses[0].partition_responses[0]
                assert part.error_code == 0
                synced_at_ack.append((part.base_offset + 1, lg.recovery_point))

    threads = [threading.Thread(target=producer, args=(25,)) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(synced_at_ack) == 200
    assert all(recovery >= end for end, recovery in synced_at_ack)
    # 200 acknowledged requests, far fewer fsync rounds: each covered several requests.
    assert broker.broker.group_commit.syncs < 100, broker.broker.group_commit.syncs
    assert len(consume_all(broker.bootstrap, "ledger", 1, 200)) == 200


def test_a_real_client_in_durable_mode_gets_every_record_acknowledged(broker):
    create(broker.bootstrap, "durable", **{"flush.messages": "1"})
    delivered = []
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all",
                         "linger.ms": 1})
    for i in range(2000):
        producer.produce("durable", f"r{i}".encode(),
                         on_delivery=lambda err, msg: delivered.append(err))
    assert producer.flush(30) == 0
    assert delivered == [None] * 2000
    lg = broker.broker.get_log("durable", 0)
    assert lg.recovery_point == lg.log_end_offset == 2000


def test_a_failing_fsync_answers_kafka_storage_error_and_the_broker_carries_on(broker):
    create(broker.bootstrap, "flaky", **{"flush.messages": "1"})
    create(broker.bootstrap, "healthy")
    with WireClient(broker.port) as client:
        with mock.patch("os.fdatasync", side_effect=OSError(5, "Input/output error")):
            response = client.request(0, 9, produce_body("flaky", builder.build_simple([b"x"])))
        part = response.responses[0].partition_responses[0]
        assert part.error_code == ErrorCode.kafka_storage_error
        assert "fsync" in part.error_message
        response = client.request(0, 9, produce_body("healthy", builder.build_simple([b"y"])))
        assert response.responses[0].partition_responses[0].error_code == 0
        # once the disk works again, the same log syncs and acknowledges
        response = client.request(0, 9, produce_body("flaky", builder.build_simple([b"z"])))
        assert response.responses[0].partition_responses[0].error_code == 0
    assert os.path.getsize(broker.broker.get_log("flaky", 0).active.log_path) > 0
