"""The native reader (Fetch requests decoded straight into Arrow) against the in-process
broker, beside the librdkafka reader it replaces by default: the same rows for every
codec, sub-range and isolation level; a dropped connection is retried; an unreachable
broker and deleted offsets are errors naming them."""

from __future__ import annotations

import socket

import pyarrow as pa
import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from odradek.client.connection import BrokerConnection
from odradek.spark import fetcher
from odradek.spark.client import Brokers, DataLossError, KafkaSourceError
from odradek.spark.options import OptionError, read_options
from tests.spark.conftest import produce


def options(bootstrap: str, topic: str, **extra: str):
    raw = {"kafka.bootstrap.servers": bootstrap, "subscribe": topic,
           **{k.lower(): v for k, v in extra.items()}}
    return read_options(raw, streaming=False)


def read(bootstrap: str, topic: str, start: int, end: int, reader: str, partition: int = 0,
         **extra: str) -> pa.Table:
    opts = options(bootstrap, topic, reader=reader, **extra)
    assert fetcher.uses_native(opts) == (reader == "native")
    batches = list(fetcher.read_range(opts, topic, partition, start, end))
    return pa.Table.from_batches(batches, schema=fetcher.arrow_schema(opts.include_headers))


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_native_reader_gives_the_librdkafka_readers_rows(broker, new_topic, codec):
    topic = new_topic()
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 50,
                         "compression.type": codec, "batch.num.messages": 40})
    for i in range(300):
        producer.produce(topic, value=None if i % 17 == 0 else b"value-%d-" % i * (i % 9),
                         key=None if i % 5 == 0 else b"k%d" % (i % 7),
                         headers=[("n", b"%d" % i), ("empty", None)] if i % 3 == 0 else None,
                         timestamp=1_700_000_000_000 + i * 1000)
    assert producer.flush(10) == 0
    for start, end in ((0, 300), (37, 251), (299, 300)):  # ranges cutting through batches
        for headers in ("true", "false"):
            native = read(broker.bootstrap, topic, start, end, "native", includeHeaders=headers)
            assert native.num_rows == end - start
            assert native.equals(read(broker.bootstrap, topic, start, end, "librdkafka",
                                      includeHeaders=headers))
    rows = read(broker.bootstrap, topic, 0, 300, "native", includeHeaders="true").to_pylist()
    assert rows[3]["headers"] == [{"key": "n", "value": b"3"}, {"key": "empty", "value": None}]
    assert rows[17]["value"] is None and rows[10]["key"] is None
    assert rows[4]["timestamp"].timestamp() == 1_700_000_004


def test_read_committed_skips_aborted_transactions_like_librdkafka(broker, new_topic):
    topic = new_topic()
    txn = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": f"{topic}-t"})
    txn.init_transactions(10)
    for commit in (True, False, True):
        txn.begin_transaction()
        for i in range(5):
            txn.produce(topic, value=b"%s-%d" % (b"commit" if commit else b"abort", i))
        produce(broker.bootstrap, topic, [{"value": b"plain"}])  # interleaved, not in a txn
        assert txn.flush(10) == 0  # abort would drop records not yet sent
        (txn.commit_transaction if commit else txn.abort_transaction)(10)
    brokers = Brokers(options(broker.bootstrap, topic).client, "test")
    try:
        end = brokers.latest([(topic, 0)])[(topic, 0)]
    finally:
        brokers.close()
    committed = read(broker.bootstrap, topic, 0, end, "native")
    assert committed.equals(read(broker.bootstrap, topic, 0, end, "librdkafka"))
    values = committed.column("value").to_pylist()
    assert sorted(set(values)) == [b"commit-%d" % i for i in range(5)] + [b"plain"]
    assert len(values) == 13
    everything = read(broker.bootstrap, topic, 0, end, "native",
                      **{"kafka.isolation.level": "read_uncommitted"})
    assert everything.equals(read(broker.bootstrap, topic, 0, end, "librdkafka",
                                  **{"kafka.isolation.level": "read_uncommitted"}))
    assert everything.num_rows == 18  # 15 transactional + 3 plain; the 3 markers are not rows


def test_a_dropped_connection_is_reconnected_and_every_record_read_once(
        broker, new_topic, monkeypatch):
    topic = new_topic()
    for first in range(0, 2000, 100):  # 20 batches or more: several fetches of 16 KiB
        produce(broker.bootstrap, topic, [{"value": b"%06d" % i * 10}
                                          for i in range(first, first + 100)])
    receive = BrokerConnection._receive
    dropped = []

    def drop_once(self, size):
        # The second sizeable answer (a fetch): the socket is shut down under the reader.
        if size > 1000 and not dropped and getattr(self, "_seen_fetch", False):
            dropped.append(self.address)
            self._sock.shutdown(socket.SHUT_RDWR)
        elif size > 1000:
            self._seen_fetch = True
        return receive(self, size)

    monkeypatch.setattr(BrokerConnection, "_receive", drop_once)
    table = read(broker.bootstrap, topic, 0, 2000, "native",
                 **{"kafka.max.partition.fetch.bytes": "16384"})
    assert dropped
    assert table.column("value").to_pylist() == [b"%06d" % i * 10 for i in range(2000)]


def test_unreachable_broker_is_named_after_the_poll_timeout():
    opts = read_options({"kafka.bootstrap.servers": "127.0.0.1:1", "subscribe": "t",
                         "kafkaconsumer.polltimeoutms": "1500",
                         "kafka.default.api.timeout.ms": "1000"}, streaming=False)
    with pytest.raises(KafkaSourceError, match=r"127\.0\.0\.1:1.*1\.5s.*Connection refused"):
        list(fetcher.read_range(opts, "t", 0, 0, 10))


def test_deleted_offsets_are_data_loss_unless_fail_on_data_loss_is_false(broker, new_topic):
    topic = new_topic()
    produce(broker.bootstrap, topic, [{"value": b"%d" % i} for i in range(10)])
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for future in admin.delete_records([TopicPartition(topic, 0, 6)]).values():
        future.result(timeout=10)
    with pytest.raises(DataLossError, match=f"offsets 2 to 5 of {topic}-0 are no longer"):
        read(broker.bootstrap, topic, 2, 10, "native")
    rest = read(broker.bootstrap, topic, 2, 10, "native", failOnDataLoss="false")
    assert rest.column("offset").to_pylist() == [6, 7, 8, 9]
    with pytest.raises(DataLossError, match="ends at offset 10"):
        read(broker.bootstrap, topic, 6, 15, "native")


def test_reader_option_chooses_the_client():
    def opts(**extra: str):
        return read_options({"kafka.bootstrap.servers": "h:1", "subscribe": "t",
                             **{k.lower(): v for k, v in extra.items()}}, streaming=False)

    assert fetcher.uses_native(opts())
    assert not fetcher.uses_native(opts(**{"kafka.security.protocol": "SASL_SSL"}))
    assert not fetcher.uses_native(opts(**{"kafka.ssl.ca.location": "/ca.pem"}))
    assert fetcher.uses_native(opts(**{"kafka.security.protocol": "plaintext"}))
    assert not fetcher.uses_native(opts(reader="librdkafka"))
    with pytest.raises(OptionError, match="option 'reader' must be one of auto, native"):
        opts(reader="java")
