"""Batch reads and writes with `format("odradek")`: what a user of Spark's Kafka source
expects to find, through a real SparkSession and a real broker."""

from __future__ import annotations

import datetime as dt
import json
import re
import subprocess
import sys
from pathlib import Path

from pyspark.sql import Row

from tests.spark.conftest import produce

UTC = dt.UTC
T0 = 1_700_000_000_000  # ms since the epoch: 2023-11-14T22:13:20Z


def read(spark, broker, **options):
    reader = spark.read.format("odradek").option("kafka.bootstrap.servers", broker.bootstrap)
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


def stored_producer_ids(broker, topic: str, partition: int) -> list[int]:
    """The producer id of each batch the broker stored (`odradek dump-log` on its files)."""
    segments = sorted((Path(broker.data_dir) / f"{topic}-{partition}").glob("*.log"))
    done = subprocess.run([sys.executable, "-m", "odradek", "dump-log", *map(str, segments)],
                          capture_output=True, text=True, timeout=60, check=True)
    ids = [int(m) for m in re.findall(r"producerId: (-?\d+)", done.stdout)]
    assert ids, done.stdout
    return ids


def test_batch_read_keeps_keys_values_headers_and_timestamps(spark, broker, new_topic):
    topic = new_topic(partitions=2)
    produce(broker.bootstrap, topic, [
        {"value": b"v0", "key": b"k0", "partition": 0, "timestamp": T0,
         "headers": [("trace", b"abc"), ("empty", None)]},
        {"value": b"v1", "key": None, "partition": 0, "timestamp": T0 + 1},
        {"value": None, "key": b"k2", "partition": 1, "timestamp": T0 + 2,
         "headers": [("trace", b"def")]},
    ])
    df = read(spark, broker, subscribe=topic, includeHeaders="true")
    assert df.schema.simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,"
        "timestamp:timestamp,timestampType:int,"
        "headers:array<struct<key:string,value:binary>>>")
    rows = sorted(df.collect(), key=lambda r: (r.partition, r.offset))
    # spark.sql.session.timeZone is UTC in this tier: naive datetimes are UTC.
    at = [dt.datetime.fromtimestamp((T0 + i) / 1000, UTC).replace(tzinfo=None) for i in range(3)]
    assert [tuple(r) for r in rows] == [
        (b"k0", b"v0", topic, 0, 0, at[0], 0,
         [Row(key="trace", value=b"abc"), Row(key="empty", value=None)]),
        (None, b"v1", topic, 0, 1, at[1], 0, []),
        (b"k2", None, topic, 1, 0, at[2], 0, [Row(key="trace", value=b"def")]),
    ]
    plain = read(spark, broker, subscribe=topic)
    assert plain.columns == ["key", "value", "topic", "partition", "offset", "timestamp",
                             "timestampType"]
    assert plain.count() == 3


def test_offsets_json_selects_ranges_with_earliest_and_latest(spark, broker, new_topic):
    topic = new_topic(partitions=2)
    produce(broker.bootstrap, topic, [{"value": b"%d" % i, "partition": i % 2}
                                      for i in range(20)])
    df = read(spark, broker, subscribe=topic,
              startingOffsets=json.dumps({topic: {"0": 3, "1": -2}}),
              endingOffsets=json.dumps({topic: {"0": 6, "1": -1}}))
    got = sorted((r.partition, r.offset) for r in df.select("partition", "offset").collect())
    assert got == [(0, 3), (0, 4), (0, 5)] + [(1, o) for o in range(10)]
    # assign picks partitions; subscribePattern picks topics by regular expression.
    assigned = read(spark, broker, assign=json.dumps({topic: [1]}))
    assert {r.partition for r in assigned.select("partition").collect()} == {1}
    assert read(spark, broker, subscribePattern=topic[:4] + ".*").filter(
        f"topic = '{topic}'").count() == 20


def test_starting_and_ending_timestamps_pick_offsets_by_record_time(spark, broker, new_topic):
    topic = new_topic()
    produce(broker.bootstrap, topic, [{"value": b"%d" % i, "timestamp": T0 + 1000 * i}
                                      for i in range(10)])
    df = read(spark, broker, subscribe=topic, startingTimestamp=str(T0 + 3500),
              endingTimestamp=str(T0 + 7000))
    assert sorted(r.offset for r in df.select("offset").collect()) == [4, 5, 6]
    per_partition = read(spark, broker, subscribe=topic,
                         startingOffsetsByTimestamp=json.dumps({topic: {"0": T0 + 8000}}))
    assert sorted(r.offset for r in per_partition.select("offset").collect()) == [8, 9]


def test_min_partitions_splits_a_partition_into_offset_ranges(spark, broker, new_topic):
    topic = new_topic()
    produce(broker.bootstrap, topic, [{"value": b"%d" % i} for i in range(40)])
    df = read(spark, broker, subscribe=topic, minPartitions="4")
    assert df.rdd.getNumPartitions() == 4
    offsets = [r.offset for r in df.select("offset").collect()]
    assert sorted(offsets) == list(range(40))  # every record once across the splits


def test_batch_write_then_read_back(spark, broker, new_topic):
    topic = new_topic(partitions=3)
    rows = [(f"k{i}", f"value {i}", i % 3, [("n", str(i).encode())]) for i in range(12)]
    df = spark.createDataFrame(
        rows, "key string, value string, partition int, "
              "headers array<struct<key:string,value:binary>>")
    (df.write.format("odradek").option("kafka.bootstrap.servers", broker.bootstrap)
     .option("topic", topic).mode("append").save())
    back = read(spark, broker, subscribe=topic, includeHeaders="true").collect()
    got = sorted((r.key.decode(), r.value.decode(), r.partition, r.headers[0].value.decode())
                 for r in back)
    assert got == sorted((k, v, p, h[0][1].decode()) for k, v, p, h in rows)
    # The sink's producer is idempotent by default: its batches carry a producer id.
    assert all(pid >= 0 for pid in stored_producer_ids(broker, topic, 0)), "not idempotent"
    # Without the option, the topic column says where each row goes; headers built by an
    # expression (non-null elements) are taken too.
    other = new_topic()
    (spark.createDataFrame([(other, b"x")], "topic string, value binary")
     .selectExpr("topic", "value",
                 "array(named_struct('key', 'src', 'value', cast('t' as binary))) as headers")
     .write.format("odradek").option("kafka.bootstrap.servers", broker.bootstrap)
     .mode("append").save())
    written = read(spark, broker, subscribe=other, includeHeaders="true").collect()
    assert [(r.value, r.headers) for r in written] == [(b"x", [Row(key="src", value=b"t")])]
