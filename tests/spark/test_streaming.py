"""Structured Streaming reads with `readStream.format("odradek")`: rate limits across
micro-batches, availableNow, partitions added while a query runs, and failOnDataLoss when
DeleteRecords removed offsets a checkpoint still points at."""

from __future__ import annotations

import json

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions
from pyspark.errors import StreamingQueryException

from tests.spark.conftest import produce

QUERY_TIMEOUT = 120  # seconds for a query to finish or catch up


def stream(spark, broker, **options):
    reader = (spark.readStream.format("odradek")
              .option("kafka.bootstrap.servers", broker.bootstrap))
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


def batch_sizes(query) -> list[int]:
    return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]


def test_available_now_reads_everything_in_batches_of_max_offsets_per_trigger(
        spark, broker, new_topic, tmp_path):
    topic = new_topic(partitions=3)
    produce(broker.bootstrap, topic, [{"value": b"%d" % i, "partition": i % 3}
                                      for i in range(30)])
    df = stream(spark, broker, subscribe=topic, startingOffsets="earliest",
                maxOffsetsPerTrigger="12")
    query = (df.selectExpr("cast(value as string) as v", "partition", "offset")
             .writeStream.format("memory").queryName("avail_now")
             .option("checkpointLocation", str(tmp_path / "ckpt"))
             .trigger(availableNow=True).start())
    assert query.awaitTermination(QUERY_TIMEOUT), "availableNow query did not stop by itself"
    assert query.exception() is None
    sizes = batch_sizes(query)
    assert len(sizes) >= 3 and max(sizes) <= 12, sizes
    values = sorted(int(r.v) for r in spark.sql("select v from avail_now").collect())
    assert values == list(range(30))  # every record exactly once


def test_stream_picks_up_new_records_and_new_partitions(spark, broker, new_topic, tmp_path):
    topic = new_topic(partitions=1)
    produce(broker.bootstrap, topic, [{"value": b"a%d" % i} for i in range(5)])
    df = stream(spark, broker, subscribe=topic, startingOffsets="earliest",
                maxOffsetsPerTrigger="4")
    query = (df.selectExpr("cast(value as string) as v", "partition")
             .writeStream.format("memory").queryName("growing")
             .option("checkpointLocation", str(tmp_path / "ckpt"))
             .trigger(processingTime="200 milliseconds").start())
    try:
        query.processAllAvailable()
        assert spark.sql("select count(*) from growing").first()[0] == 5
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_partitions([NewPartitions(topic, 2)])[topic].result(timeout=10)
        produce(broker.bootstrap, topic, [{"value": b"b%d" % i, "partition": 1}
                                          for i in range(6)])
        query.processAllAvailable()
        got = spark.sql("select v, partition from growing").collect()
        assert sorted((r.partition, r.v) for r in got) == sorted(
            [(0, f"a{i}") for i in range(5)] + [(1, f"b{i}") for i in range(6)])
        assert max(batch_sizes(query)) <= 4
    finally:
        query.stop()


def _delete_records_before(broker, topic: str, offset: int) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    futures = admin.delete_records([TopicPartition(topic, 0, offset)])
    for future in futures.values():
        future.result(timeout=10)


def _run_available_now(spark, broker, topic, tmp_path, **options):
    """Runs a query to its end (availableNow) from the checkpoint under tmp_path, writing
    the offsets it read as Parquet (the memory sink cannot restart from a checkpoint)."""
    df = stream(spark, broker, subscribe=topic, startingOffsets="earliest", **options)
    query = (df.selectExpr("offset").writeStream.format("parquet")
             .option("path", str(tmp_path / "out"))
             .option("checkpointLocation", str(tmp_path / "ckpt"))
             .trigger(availableNow=True).start())
    query.awaitTermination(QUERY_TIMEOUT)
    return query


def _offsets_written(spark, tmp_path) -> list[int]:
    return sorted(r.offset for r in spark.read.parquet(str(tmp_path / "out")).collect())


def test_fail_on_data_loss_after_delete_records(spark, broker, new_topic, tmp_path):
    topic = new_topic()
    produce(broker.bootstrap, topic, [{"value": b"%d" % i} for i in range(10)])
    first = _run_available_now(spark, broker, topic, tmp_path)
    assert first.exception() is None
    assert _offsets_written(spark, tmp_path) == list(range(10))
    # While the query is stopped, offsets 10..19 arrive and everything below 15 is deleted.
    produce(broker.bootstrap, topic, [{"value": b"%d" % i} for i in range(10, 20)])
    _delete_records_before(broker, topic, 15)
    # failOnDataLoss=true (the default): the restarted query fails, naming what is gone.
    with pytest.raises(StreamingQueryException) as failed:
        _run_available_now(spark, broker, topic, tmp_path)
    assert f"offsets 10 to 14 of {topic}-0 are no longer on" in str(failed.value)
    assert "failOnDataLoss=false" in str(failed.value)
    # failOnDataLoss=false: the same batch, replayed from the checkpoint, skips what was
    # deleted and reads the rest, each record once.
    query = _run_available_now(spark, broker, topic, tmp_path, failOnDataLoss="false")
    assert query.exception() is None
    assert _offsets_written(spark, tmp_path) == list(range(10)) + list(range(15, 20))


def test_stream_offsets_are_kafka_json_per_topic_partition(spark, broker, new_topic, tmp_path):
    topic = new_topic(partitions=2)
    produce(broker.bootstrap, topic, [{"value": b"x", "partition": p} for p in (0, 1, 1)])
    query = _run_available_now(spark, broker, topic, tmp_path)
    progress = query.lastProgress or query.recentProgress[-1]
    assert json.loads(progress["sources"][0]["endOffset"]) == {topic: {"0": 1, "1": 2}}


def test_stream_from_topic_to_topic_writes_every_record(spark, broker, new_topic, tmp_path):
    source, sink = new_topic(partitions=2), new_topic()
    produce(broker.bootstrap, source, [{"value": b"%d" % i, "key": b"k%d" % i,
                                        "headers": [("i", b"%d" % i)], "partition": i % 2}
                                       for i in range(8)])
    df = stream(spark, broker, subscribe=source, startingOffsets="earliest",
                includeHeaders="true")
    query = (df.selectExpr("key", "upper(cast(value as string)) || '!' as value", "headers")
             .writeStream.format("odradek")
             .option("kafka.bootstrap.servers", broker.bootstrap).option("topic", sink)
             .option("checkpointLocation", str(tmp_path / "ckpt"))
             .trigger(availableNow=True).start())
    assert query.awaitTermination(QUERY_TIMEOUT)
    back = (spark.read.format("odradek").option("kafka.bootstrap.servers", broker.bootstrap)
            .option("subscribe", sink).option("includeHeaders", "true").load().collect())
    assert sorted((r.key, r.value, r.headers[0].value) for r in back) == sorted(
        (b"k%d" % i, b"%d!" % i, b"%d" % i) for i in range(8))
