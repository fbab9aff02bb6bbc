"""Spark's own Kafka connector (`format("kafka")`, spark-sql-kafka-0-10_2.13 at pyspark's
version, with the Java kafka-clients it depends on) against Odradek: batch reads with
offset and timestamp ranges, batch writes, Structured Streaming from topic to topic and
into memory and foreachBatch sinks, and the pipeline's jobs reading the topics with it.

The tier's SparkSession gets the connector's jars (tests/spark/connector.py) when it is
created; without them these tests skip (locally) or fail (CI).
"""

from __future__ import annotations

import json

import pytest
from confluent_kafka import Consumer, TopicPartition
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from odradek.pipeline import generator as gen
from odradek.pipeline import jobs
from odradek.testing import running_broker
from tests.spark.conftest import produce
from tests.spark.connector import require_connector
from tests.spark.pipeline_helpers import (
    assert_aggregates_match,
    assert_events_exactly_once,
    read_topic,
)

QUERY_TIMEOUT = 120  # seconds for a streaming query to finish or catch up
T0 = 1_700_000_000_000  # ms since the epoch: 2023-11-14T22:13:20Z
START_MS = 1_700_000_040_000  # the pipeline run's start: a whole minute


@pytest.fixture(autouse=True)
def _connector():
    require_connector()


def read(spark, broker, fmt: str = "kafka", **options) -> DataFrame:
    reader = spark.read.format(fmt).option("kafka.bootstrap.servers", broker.bootstrap)
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


def rows_of(df: DataFrame) -> list[tuple]:
    """Every column, timestamps as ms since the epoch (no time zone involved), headers as
    (key, value) tuples; ordered by partition and offset."""
    rows = df.select("key", "value", "topic", "partition", "offset",
                     F.unix_millis("timestamp").alias("ms"), "timestampType",
                     "headers").collect()
    return sorted(((r.key, r.value, r.topic, r.partition, r.offset, r.ms, r.timestampType,
                    [(h.key, h.value) for h in r.headers or []]) for r in rows),
                  key=lambda t: (t[3], t[4]))


def consume_all(bootstrap: str, topic: str, partitions: int) -> list[tuple]:
    """(partition, offset, key, value, headers, timestamp ms) of every record of a topic."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "connector-test",
                         "enable.auto.commit": False, "enable.partition.eof": True})
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        records, at_end = [], set()
        for _ in range(100):
            if len(at_end) == partitions:
                break
            for msg in consumer.consume(100, timeout=1):
                if msg.error() is not None:
                    assert msg.error().code() == -191, msg.error()  # _PARTITION_EOF
                    at_end.add(msg.partition())
                    continue
                records.append((msg.partition(), msg.offset(), msg.key(), msg.value(),
                                msg.headers() or [], msg.timestamp()[1]))
        assert len(at_end) == partitions, f"{topic} not read to its end"
        return sorted(records)
    finally:
        consumer.close()


# ---------------------------------------------------------------------------- batch


def produced_records(topic: str) -> tuple[list[dict], list[tuple]]:
    """Records to produce to a 3-partition topic, and the rows Spark must read for them."""
    records, expected, next_offset = [], [], {0: 0, 1: 0, 2: 0}
    for i in range(12):
        partition = i % 3
        key = None if i == 4 else b"k%d" % i
        value = None if i == 7 else b"value-%d" % i
        headers = [("n", b"%d" % i), ("dup", b"a"), ("dup", b"b")] if i % 2 else (
            [("empty", None)] if i == 6 else [])
        records.append({"value": value, "key": key, "partition": partition,
                        "timestamp": T0 + i * 1000, "headers": headers or None})
        expected.append((key, value, topic, partition, next_offset[partition], T0 + i * 1000,
                         0, headers))
        next_offset[partition] += 1
    return records, sorted(expected, key=lambda t: (t[3], t[4]))


def test_batch_read_gives_every_record_with_its_key_headers_and_timestamp(
        spark, broker, new_topic):
    topic = new_topic(partitions=3)
    records, expected = produced_records(topic)
    produce(broker.bootstrap, topic, records)
    df = read(spark, broker, subscribe=topic, includeHeaders="true")
    assert df.schema.simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,"
        "timestamp:timestamp,timestampType:int,"
        "headers:array<struct<key:string,value:binary>>>")
    assert rows_of(df) == expected
    # The odradek format reads the same rows.
    assert rows_of(read(spark, broker, "odradek", subscribe=topic,
                        includeHeaders="true")) == expected


def test_batch_read_of_offset_and_timestamp_ranges(spark, broker, new_topic):
    topic = new_topic(partitions=3)
    records, _ = produced_records(topic)  # 4 records per partition, ts T0 + i s
    produce(broker.bootstrap, topic, records)

    def offsets(**options) -> list[tuple[int, int]]:
        if "assign" not in options:
            options["subscribePattern"] = f"{topic}$"
        df = read(spark, broker, **options)
        return sorted((r.partition, r.offset) for r in df.select("partition", "offset")
                      .collect())

    # -2 is earliest, -1 latest, in Kafka's JSON.
    got = offsets(startingOffsets=json.dumps({topic: {"0": 1, "1": -2, "2": 3}}),
                  endingOffsets=json.dumps({topic: {"0": 3, "1": 2, "2": -1}}))
    assert got == [(0, 1), (0, 2), (1, 0), (1, 1), (2, 3)]
    # Record i has timestamp T0 + i s and sits at partition i % 3, offset i // 3.
    from_ts = offsets(startingTimestamp=str(T0 + 5500))
    assert from_ts == sorted((i % 3, i // 3) for i in range(6, 12))
    in_range = offsets(startingTimestamp=str(T0 + 2000), endingTimestamp=str(T0 + 8000))
    assert in_range == sorted((i % 3, i // 3) for i in range(2, 8))
    per_partition = offsets(startingOffsetsByTimestamp=json.dumps(
        {topic: {"0": T0 + 3000, "1": T0, "2": T0 + 99_000}}),
        startingOffsetsByTimestampStrategy="latest")  # "latest": no such record -> end
    assert per_partition == [(0, 1), (0, 2), (0, 3), (1, 0), (1, 1), (1, 2), (1, 3)]
    # assign reads exactly the partitions named.
    assigned = offsets(assign=json.dumps({topic: [2]}))
    assert assigned == [(2, 0), (2, 1), (2, 2), (2, 3)]


def test_batch_write_with_keys_partitions_and_headers(spark, broker, new_topic):
    topic = new_topic(partitions=3)
    rows = [(b"k%d" % i if i != 2 else None, b"v%d" % i, i % 3,
             [("i", b"%d" % i), ("x", None)] if i % 2 else [])
            for i in range(9)]
    df = spark.createDataFrame(
        rows, "key binary, value binary, partition int, "
              "headers array<struct<key:string, value:binary>>")
    (df.write.format("kafka").option("kafka.bootstrap.servers", broker.bootstrap)
     .option("topic", topic).mode("append").save())
    back = consume_all(broker.bootstrap, topic, 3)
    assert sorted(((p, k, v, h) for p, _, k, v, h, _ in back), key=repr) == sorted(
        ((i % 3, k, v, h) for i, (k, v, _, h) in enumerate(rows)), key=repr)
    # Offsets are dense per partition, from 0.
    for partition in range(3):
        assert [o for p, o, *_ in back if p == partition] == [0, 1, 2]
    # A topic column instead of the option, and the rows read back by the connector itself.
    other = new_topic(partitions=1)
    (spark.createDataFrame([(other, "a"), (other, "b")], "topic string, value string")
     .write.format("kafka").option("kafka.bootstrap.servers", broker.bootstrap).save())
    assert sorted(r.value for r in read(spark, broker, subscribe=other).collect()) == [
        b"a", b"b"]


# ---------------------------------------------------------------------------- streaming


def stream(spark, broker, **options) -> DataFrame:
    reader = spark.readStream.format("kafka").option("kafka.bootstrap.servers",
                                                     broker.bootstrap)
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


def test_stream_from_topic_to_topic_with_available_now_twice(spark, broker, new_topic,
                                                             tmp_path):
    source, sink = new_topic(partitions=2), new_topic(partitions=2)
    checkpoint = str(tmp_path / "ckpt")

    def run() -> None:
        df = stream(spark, broker, subscribe=source, startingOffsets="earliest",
                    includeHeaders="true")
        query = (df.selectExpr("key", "upper(cast(value as string)) || '!' as value",
                               "partition", "headers")
                 .writeStream.format("kafka")
                 .option("kafka.bootstrap.servers", broker.bootstrap).option("topic", sink)
                 .option("checkpointLocation", checkpoint)
                 .trigger(availableNow=True).start())
        assert query.awaitTermination(QUERY_TIMEOUT), "availableNow query did not stop"
        assert query.exception() is None

    def batch(first: int, count: int) -> list[dict]:
        return [{"value": b"m%d" % i, "key": b"k%d" % i, "partition": i % 2,
                 "headers": [("i", b"%d" % i)]} for i in range(first, first + count)]

    def written() -> list[tuple]:
        return sorted((p, k, v, h) for p, _, k, v, h, _ in consume_all(broker.bootstrap,
                                                                        sink, 2))

    def expected(count: int) -> list[tuple]:
        return sorted((i % 2, b"k%d" % i, b"M%d!" % i, [("i", b"%d" % i)])
                      for i in range(count))

    produce(broker.bootstrap, source, batch(0, 6))
    run()
    assert written() == expected(6)
    produce(broker.bootstrap, source, batch(6, 4))
    run()  # from the checkpoint: only the 4 new records
    assert written() == expected(10)


def test_stream_into_memory_and_foreach_batch_sinks(spark, broker, new_topic, tmp_path):
    topic = new_topic(partitions=2)
    produce(broker.bootstrap, topic, [{"value": b"a%d" % i, "partition": i % 2}
                                      for i in range(5)])
    query = (stream(spark, broker, subscribe=topic, startingOffsets="earliest")
             .selectExpr("cast(value as string) as v", "partition", "offset")
             .writeStream.format("memory").queryName("connector_memory")
             .option("checkpointLocation", str(tmp_path / "memory"))
             .trigger(processingTime="200 milliseconds").start())
    try:
        query.processAllAvailable()
        produce(broker.bootstrap, topic, [{"value": b"b%d" % i, "partition": i % 2}
                                          for i in range(3)])
        query.processAllAvailable()
        assert query.exception() is None
    finally:
        query.stop()
    got = sorted(r.v for r in spark.sql("select v from connector_memory").collect())
    assert got == sorted([f"a{i}" for i in range(5)] + [f"b{i}" for i in range(3)])
    progress = query.lastProgress or query.recentProgress[-1]
    end = progress["sources"][0]["endOffset"]
    # a0 a2 a4 b0 b2 went to partition 0, a1 a3 b1 to partition 1.
    assert (json.loads(end) if isinstance(end, str) else end) == {topic: {"0": 5, "1": 3}}

    # foreachBatch under availableNow with a rate limit: several micro-batches, each
    # within the limit, every record once.
    batches: list[tuple[int, list[str]]] = []

    def collect(df: DataFrame, batch_id: int) -> None:
        batches.append((batch_id, [r.v for r in df.collect()]))

    query = (stream(spark, broker, subscribe=topic, startingOffsets="earliest",
                    maxOffsetsPerTrigger="3")
             .selectExpr("cast(value as string) as v")
             .writeStream.foreachBatch(collect)
             .option("checkpointLocation", str(tmp_path / "foreach"))
             .trigger(availableNow=True).start())
    assert query.awaitTermination(QUERY_TIMEOUT)
    assert query.exception() is None
    sizes = [len(vs) for _, vs in batches if vs]
    assert len(sizes) >= 3 and max(sizes) <= 3, batches
    assert sorted(v for _, vs in batches for v in vs) == got


# ---------------------------------------------------------------------------- pipeline


@pytest.fixture(scope="module")
def pipeline_run():
    """A broker of its own with the pipeline's topics, and a small generated run on them."""
    with running_broker(**{"num.partitions": 3}) as broker:
        gen.ensure_topics(broker.bootstrap, partitions=3)
        generated = gen.generate(gen.GeneratorConfig(seed=5, users=40, duration_s=150,
                                                     sessions_per_s=0.5, start_ms=START_MS))
        gen.produce(broker.bootstrap, generated)
        yield broker, generated


@pytest.fixture(scope="module")
def odradek_tables(spark, pipeline_run, tmp_path_factory):
    """The batch job's tables read with the odradek format (test_pipeline.py proves them
    against the streaming job on that format): what the connector's runs must give."""
    broker, generated = pipeline_run
    out = tmp_path_factory.mktemp("odradek-tables")
    counts = jobs.backfill(spark, broker.bootstrap, out, source_format="odradek")
    assert counts["events"] == len(generated.activity)
    assert_aggregates_match(spark, out, generated)
    return out, counts


def table(spark, path) -> list[tuple]:
    """A table's rows (small: collected), columns by name, doubles rounded: a mean or a
    percentile summed in another order (a streaming job's micro-batches against one batch
    read) differs in the last bits."""
    df = spark.read.parquet(str(path))
    df = df.select(*sorted(df.columns))
    return sorted((tuple(round(v, 9) if isinstance(v, float) else v for v in row)
                   for row in df.collect()), key=repr)


def assert_same_tables(spark, left, right) -> None:
    for name in jobs.TABLES:
        got, want = table(spark, left / name), table(spark, right / name)
        assert len(got) == len(want) > 0, name
        assert got == want, name


def test_pipeline_backfill_on_the_connector_gives_the_odradek_format_tables(
        spark, pipeline_run, odradek_tables, tmp_path):
    broker, generated = pipeline_run
    expected, counts = odradek_tables
    assert jobs.backfill(spark, broker.bootstrap, tmp_path, source_format="kafka") == counts
    assert_events_exactly_once(spark, tmp_path, generated)
    assert_same_tables(spark, tmp_path, expected)


def test_pipeline_streaming_job_on_the_connector_gives_the_odradek_format_tables(
        spark, pipeline_run, odradek_tables, tmp_path):
    broker, generated = pipeline_run
    job = jobs.start_streaming(spark, broker.bootstrap, tmp_path / "tables",
                               tmp_path / "ckpt", trigger="500 milliseconds",
                               source_format="kafka")
    try:
        jobs.wait_until_processed(job, timeout_s=QUERY_TIMEOUT)
    finally:
        job.stop()
    assert_events_exactly_once(spark, tmp_path / "tables", generated)
    assert_same_tables(spark, tmp_path / "tables", odradek_tables[0])
    # Every window of every aggregate went to activity-stats once (the odradek sink's
    # transactions), as on the odradek format.
    stats = [json.loads(v)["table"] for _, v in read_topic(broker.bootstrap, gen.STATS_TOPIC)]
    assert {t: stats.count(t) for t in jobs.AGGREGATES} == {
        t: odradek_tables[1][t] for t in jobs.AGGREGATES}
    # The connector reads that transactional topic too: read_committed skips the
    # transaction markers (offsets without a record) and gives the same records.
    committed = read(spark, broker, subscribe=gen.STATS_TOPIC,
                     **{"kafka.isolation.level": "read_committed"})
    assert sorted(json.loads(r.value)["table"] for r in committed.select("value").collect()
                  ) == sorted(stats)
