"""The readers' planning, called the way Spark's driver calls it, without running
a query: read limits split across partitions, minOffsetsPerTrigger waiting up to
maxTriggerDelay, availableNow's fixed target, and Arrow batches in Spark's schema."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, ReadMinRows

from odradek.spark.options import OptionError, read_options
from odradek.spark.source import (
    OdradekBatchReader,
    OdradekStreamReader,
    OffsetRange,
    kafka_schema,
    split_ranges,
)
from tests.spark.conftest import produce


def reader(broker, topic, **options) -> OdradekStreamReader:
    raw = {"kafka.bootstrap.servers": broker.bootstrap, "subscribe": topic,
           "startingoffsets": "earliest", **{k.lower(): v for k, v in options.items()}}
    return OdradekStreamReader(read_options(raw, streaming=True))


def test_max_offsets_per_trigger_is_shared_by_partitions_in_proportion(broker, new_topic):
    topic = new_topic(partitions=3)
    produce(broker.bootstrap, topic, [{"value": b"x", "partition": 0}] * 10
            + [{"value": b"x", "partition": 1}] * 20)
    source = reader(broker, topic, maxOffsetsPerTrigger="15")
    try:
        start = source.initialOffset()
        assert start == {topic: {"0": 0, "1": 0, "2": 0}}
        assert source.getDefaultReadLimit() == ReadMaxRows(15)
        end = source.latestOffset(start, ReadMaxRows(15))
        assert end == {topic: {"0": 5, "1": 10, "2": 0}}
        # Spark passes ReadAllAvailable when a trigger wants everything: limits step aside.
        assert source.latestOffset(end, ReadAllAvailable()) == {topic: {"0": 10, "1": 20, "2": 0}}
        ranges = source.partitions(start, end)
        assert sorted((r.partition, r.start, r.end) for r in ranges) == [(0, 0, 5), (1, 0, 10)]
    finally:
        source.stop()


def test_min_offsets_per_trigger_waits_until_max_trigger_delay(broker, new_topic):
    topic = new_topic()
    produce(broker.bootstrap, topic, [{"value": b"x"}] * 3)
    waiting = reader(broker, topic, minOffsetsPerTrigger="5", maxTriggerDelay="1h")
    overdue = reader(broker, topic, minOffsetsPerTrigger="5", maxTriggerDelay="0ms")
    try:
        start = waiting.initialOffset()
        assert waiting.getDefaultReadLimit() == ReadMinRows(5)
        assert waiting.latestOffset(start, ReadMinRows(5)) == start  # 3 < 5: wait
        assert overdue.latestOffset(start, ReadMinRows(5)) == {topic: {"0": 3}}
        produce(broker.bootstrap, topic, [{"value": b"x"}] * 2)
        assert waiting.latestOffset(start, ReadMinRows(5)) == {topic: {"0": 5}}
    finally:
        waiting.stop()
        overdue.stop()


def test_available_now_stops_at_the_offsets_seen_when_it_started(broker, new_topic):
    topic = new_topic()
    produce(broker.bootstrap, topic, [{"value": b"x"}] * 4)
    source = reader(broker, topic)
    try:
        start = source.initialOffset()
        source.prepareForTriggerAvailableNow()
        produce(broker.bootstrap, topic, [{"value": b"late"}] * 3)
        assert source.latestOffset(start, ReadAllAvailable()) == {topic: {"0": 4}}
    finally:
        source.stop()


def test_read_yields_arrow_batches_in_sparks_schema(broker, new_topic):
    topic = new_topic()
    produce(broker.bootstrap, topic, [{"value": b"v", "key": b"k", "headers": [("h", b"1")]},
                                      {"value": None}])
    source = reader(broker, topic, includeHeaders="true")
    batches = list(source.read(OffsetRange(topic, 0, 0, 2)))
    expected = to_arrow_schema(kafka_schema(include_headers=True), timezone="UTC")
    assert all(b.schema.equals(expected) for b in batches)
    table = pa.Table.from_batches(batches)
    assert table.column("value").to_pylist() == [b"v", None]
    assert table.column("headers").to_pylist() == [[{"key": "h", "value": b"1"}], []]


def test_split_ranges_follows_min_partitions_and_max_records():
    ranges = [OffsetRange("a", 0, 0, 90), OffsetRange("a", 1, 0, 10), OffsetRange("a", 2, 5, 5)]
    split = split_ranges(ranges, min_partitions=10, max_records=None)
    assert [(r.partition, r.start, r.end) for r in split] == (
        [(0, 10 * i, 10 * (i + 1)) for i in range(9)] + [(1, 0, 10)])
    capped = split_ranges(ranges[:1], min_partitions=None, max_records=40)
    assert [(r.start, r.end) for r in capped] == [(0, 30), (30, 60), (60, 90)]
    assert json.dumps(split_ranges([], 4, None)) == "[]"


def test_batch_range_that_ends_before_it_starts_is_an_error(broker, new_topic):
    topic = new_topic()
    produce(broker.bootstrap, topic, [{"value": b"x"}] * 5)
    options = {"kafka.bootstrap.servers": broker.bootstrap, "subscribe": topic,
               "startingoffsets": json.dumps({topic: {"0": 4}}),
               "endingoffsets": json.dumps({topic: {"0": 2}})}
    with pytest.raises(OptionError, match=f"{topic}-0 \\(4 > 2\\)"):
        OdradekBatchReader(read_options(options, streaming=False))
