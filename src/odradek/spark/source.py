"""`OdradekDataSource`: Spark's `format("odradek")`, a Python data source that reads and
writes Kafka topics in batch and Structured Streaming, with the options and columns of
Spark's built-in Kafka source and sink (see docs/spark.md).

The driver plans offset ranges (one InputPartition per topic-partition range, split further
by minPartitions / maxRecordsPerPartition); executors read a range with their own consumer
(no group) and yield Arrow record batches. A stream's position is Kafka's JSON form,
{"topic": {"0": 42}}, kept in Spark's checkpoint: nothing is committed to the brokers.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from odradek.spark import exactly_once
from odradek.spark.client import Brokers, KafkaSourceError, RecordProducer
from odradek.spark.fetcher import read_range
from odradek.spark.options import (
    OptionError,
    ReadOptions,
    TopicPartition,
    WriteOptions,
    offsets_from_json,
    offsets_to_json,
    read_options,
    write_options,
)

try:  # Arrow batches into a streaming sink: pyspark 4.3+; row by row before that
    from pyspark.sql.datasource import DataSourceStreamArrowWriter as _StreamWriterBase
except ImportError:  # pragma: no cover - pyspark 4.2
    # mypy types the name from the import above; a base class chosen by the installed
    # pyspark is beyond it.
    _StreamWriterBase = DataSourceStreamWriter  # type: ignore[misc, assignment]

HEADERS_TYPE = ArrayType(StructType([StructField("key", StringType()),
                                     StructField("value", BinaryType())]))


def kafka_schema(include_headers: bool) -> StructType:
    """The columns of Spark's Kafka source."""
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        fields.append(StructField("headers", HEADERS_TYPE))
    return StructType(fields)


class OdradekDataSource(DataSource):
    """Kafka topics as a Spark data source: `spark.read.format("odradek")`,
    `readStream`, `write` and `writeStream`, with Spark's Kafka options."""

    @classmethod
    def name(cls) -> str:
        return "odradek"

    def schema(self) -> StructType:
        raw = self.options.get("includeheaders", "false")
        return kafka_schema(str(raw).strip().lower() == "true")

    def reader(self, schema: StructType) -> DataSourceReader:
        return OdradekBatchReader(read_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return OdradekStreamReader(read_options(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> OdradekBatchWriter:
        if overwrite:
            raise OptionError("save mode overwrite is not possible for a Kafka topic: records "
                              "are only ever appended (use mode('append'))")
        opts = write_options(self.options, streaming=False)
        if opts.exactly_once and opts.transactional_id_prefix is None:
            # Each save() is a write of its own: its tasks' transactional ids name it.
            opts = dataclasses.replace(opts, write_id=uuid.uuid4().hex[:12])
        return OdradekBatchWriter(opts, _columns(schema, opts))

    def streamWriter(self, schema: StructType, overwrite: bool) -> OdradekStreamWriter:
        opts = write_options(self.options, streaming=True)
        return OdradekStreamWriter(opts, _columns(schema, opts))


# ---------------------------------------------------------------------------- reading


@dataclass(frozen=True)
class OffsetRange(InputPartition):
    """One Spark task: offsets [start, end) of one topic-partition."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start


def split_ranges(ranges: list[OffsetRange], min_partitions: int | None,
                 max_records: int | None) -> list[OffsetRange]:
    """Spark's KafkaOffsetRangeCalculator: with minPartitions above the number of ranges,
    each range gets a share of minPartitions proportional to its size; no piece is larger
    than maxRecordsPerPartition."""
    ranges = [r for r in ranges if r.size > 0]
    total = sum(r.size for r in ranges)
    result: list[OffsetRange] = []
    for r in ranges:
        parts = 1
        if min_partitions and min_partitions > len(ranges):
            parts = max(round(r.size / total * min_partitions), 1)
        if max_records:
            parts = max(parts, math.ceil(r.size / max_records))
        parts = min(parts, r.size)
        bounds = [r.start + r.size * i // parts for i in range(parts + 1)]
        result.extend(OffsetRange(r.topic, r.partition, lo, hi)
                      for lo, hi in itertools.pairwise(bounds) if hi > lo)
    return result


def _brokers(opts: ReadOptions) -> Brokers:
    return Brokers(opts.client, opts.group_id, attempts=opts.fetch_offset_attempts,
                   interval_s=opts.fetch_offset_interval_s)


class OdradekBatchReader(DataSourceReader):
    """`spark.read.format("odradek")`: the offsets are fixed when the read is planned."""

    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts
        brokers = _brokers(opts)
        try:
            tps = brokers.partitions(opts.topics)
            start = brokers.resolve(opts.starting, tps, ending=False,
                                    strategy=opts.timestamp_strategy)
            end = brokers.resolve(opts.ending, tps, ending=True)
        finally:
            brokers.close()
        backwards = [f"{t}-{p} ({start[(t, p)]} > {end[(t, p)]})" for t, p in tps
                     if start[(t, p)] > end[(t, p)]]
        if backwards:
            raise OptionError(f"the starting offset is after the ending offset in "
                              f"{', '.join(backwards)}: check '{opts.starting.option}' and "
                              f"'{opts.ending.option}'")
        self.ranges = [OffsetRange(t, p, start[(t, p)], end[(t, p)]) for t, p in tps]

    def partitions(self) -> Sequence[InputPartition]:
        return split_ranges(self.ranges, self.opts.min_partitions,
                            self.opts.max_records_per_partition)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, OffsetRange)
        return read_range(self.opts, partition.topic, partition.partition, partition.start,
                          partition.end)


class OdradekStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """`spark.readStream.format("odradek")`.

    The driver-side instance lives for the whole query (Spark keeps its Python process), so
    it may keep a client, the availableNow target and the time of the last trigger; `read`
    runs on executors on a pickled copy and uses only its partition and the options.
    """

    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts
        self._brokers: Brokers | None = None
        self._target: dict[TopicPartition, int] | None = None  # availableNow's end
        self._last_trigger = time.monotonic()  # for minOffsetsPerTrigger's maxTriggerDelay

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_brokers"] = None  # a client does not travel to executors
        return state

    @property
    def brokers(self) -> Brokers:
        if self._brokers is None:
            self._brokers = _brokers(self.opts)
        return self._brokers

    def initialOffset(self) -> dict:
        tps = self.brokers.partitions(self.opts.topics)
        start = self.brokers.resolve(self.opts.starting, tps, ending=False,
                                     strategy=self.opts.timestamp_strategy)
        return offsets_to_json(start)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        if self.opts.min_offsets_per_trigger is not None:
            return ReadMinRows(self.opts.min_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        tps = self.brokers.partitions(self.opts.topics)
        self._target = self.brokers.latest(tps)

    def _now_available(self, start: dict[TopicPartition, int]
                       ) -> tuple[dict[TopicPartition, int], dict[TopicPartition, int]]:
        """(where each partition's next batch begins, where its data ends now). Partitions
        that appeared since `start` begin at their earliest offset, as in Spark's source."""
        if self._target is not None:
            until = dict(self._target)
        else:
            until = self.brokers.latest(self.brokers.partitions(self.opts.topics))
        new = [tp for tp in until if tp not in start]
        begin = {**self.brokers.earliest(new), **start}
        for tp, offset in start.items():
            until.setdefault(tp, offset)  # gone from metadata: read() reports the loss
        return begin, until

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        begin, until = self._now_available(offsets_from_json(start))
        available = {tp: max(until[tp] - begin[tp], 0) for tp in until}
        total = sum(available.values())
        if not isinstance(limit, ReadAllAvailable):
            # availableNow must reach its target: waiting for more data would never end.
            least = self.opts.min_offsets_per_trigger if self._target is None else None
            if (least is not None and total < least
                    and time.monotonic() - self._last_trigger < self.opts.max_trigger_delay_s):
                return start  # too little yet: wait for more, up to maxTriggerDelay
            most = limit.max_rows if isinstance(limit, ReadMaxRows) else None
            most = most or self.opts.max_offsets_per_trigger
            if most is not None and total > most:
                until = _rate_limit(begin, until, available, total, most)
        end = {tp: max(until[tp], begin[tp]) for tp in until}
        result = offsets_to_json(end)
        if result != start:
            self._last_trigger = time.monotonic()
        return result

    def reportLatestOffset(self) -> dict | None:
        """For the query's progress only: a broker that cannot answer now reports nothing
        rather than failing the query (latestOffset reports the error)."""
        if self._brokers is None:
            return None
        try:
            return offsets_to_json(self.brokers.latest(self.brokers.partitions(self.opts.topics)))
        except KafkaSourceError:
            return None

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        begin = offsets_from_json(start)
        until = offsets_from_json(end)
        new = [tp for tp in until if tp not in begin]
        if new:  # a partition that appeared in this batch: from its earliest offset
            begin.update(self.brokers.earliest(new))
        ranges = [OffsetRange(t, p, begin[(t, p)], until[(t, p)]) for t, p in sorted(until)]
        return split_ranges(ranges, self.opts.min_partitions,
                            self.opts.max_records_per_partition)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, OffsetRange)
        return read_range(self.opts, partition.topic, partition.partition, partition.start,
                          partition.end)

    def commit(self, end: dict) -> None:
        """Nothing to do: the position is in Spark's checkpoint, not a consumer group."""

    def stop(self) -> None:
        if self._brokers is not None:
            self._brokers.close()
            self._brokers = None


def _rate_limit(begin: dict[TopicPartition, int], until: dict[TopicPartition, int],
                available: dict[TopicPartition, int], total: int, most: int
                ) -> dict[TopicPartition, int]:
    """Spark's Kafka rate limit: each partition gets a share of `most` proportional to what
    it has available (at least one record where it has any)."""
    limited = {}
    for tp, size in available.items():
        share = most * size / total
        step = math.ceil(share) if share < 1 else math.floor(share)
        limited[tp] = min(until[tp], begin[tp] + step)
    return limited


# ---------------------------------------------------------------------------- writing


@dataclass(frozen=True)
class Columns:
    """Which of the sink's columns a DataFrame has, and whether key/value are strings."""

    topic: bool
    key: bool
    partition: bool
    headers: bool


def _columns(schema: StructType, opts: WriteOptions) -> Columns:
    """Spark's Kafka sink rules: value (string or binary) is required; key (string or
    binary), topic (string), partition (int) and headers are optional; a `topic` option
    overrides the column."""
    types = {f.name.lower(): f.dataType for f in schema.fields}

    def check(name: str, allowed: tuple[type, ...], what: str) -> bool:
        if name not in types:
            return False
        if not isinstance(types[name], allowed):
            raise OptionError(f"column '{name}' must be {what} to write to Kafka, "
                              f"got {types[name].simpleString()}")
        return True

    if not check("value", (BinaryType, StringType), "string or binary"):
        raise OptionError("a DataFrame written to Kafka needs a 'value' column (string or "
                          f"binary); it has {', '.join(types) or 'no columns'}")
    has_topic = check("topic", (StringType,), "a string")
    if not has_topic and opts.topic is None:
        raise OptionError("no topic to write to: give the option 'topic' or a 'topic' column")
    has_headers = "headers" in types
    if has_headers and not _is_headers_type(types["headers"]):
        raise OptionError("column 'headers' must be array<struct<key:string,value:binary>>, "
                          f"got {types['headers'].simpleString()}")
    return Columns(topic=has_topic, key=check("key", (BinaryType, StringType),
                                              "string or binary"),
                   partition=check("partition", (IntegerType,), "an int"), headers=has_headers)


def _is_headers_type(data_type: Any) -> bool:
    """array<struct<key:string,value:binary>>, whatever its nullability (an `array(struct(
    ...))` expression makes non-null elements and fields)."""
    if not isinstance(data_type, ArrayType) or not isinstance(data_type.elementType, StructType):
        return False
    fields = [(f.name, type(f.dataType)) for f in data_type.elementType.fields]
    return fields == [("key", StringType), ("value", BinaryType)]


def _bytes(value: Any) -> bytes | None:
    return value.encode() if isinstance(value, str) else value


@dataclass
class WriteResult(WriterCommitMessage):
    records: int


def _write(opts: WriteOptions, columns: Columns, iterator: Iterator[Any]) -> WriteResult:
    """Produce every row of a task, flush, and raise if any record was not acknowledged
    (with exactlyOnce, as one transaction: see odradek.spark.exactly_once)."""
    if opts.exactly_once:
        return WriteResult(exactly_once.write_task(
            opts.client, opts.transactional_id_prefix, opts.write_id,
            lambda producer: _produce_rows(producer, opts, columns, iterator)))
    producer = RecordProducer(opts.client)
    try:
        _produce_rows(producer, opts, columns, iterator)
        producer.flush()
        return WriteResult(producer.sent)
    finally:
        producer.close()


def _produce_rows(producer: RecordProducer, opts: WriteOptions, columns: Columns,
                  iterator: Iterator[Any]) -> str | None:
    """Send every row; returns the first topic written (None: no rows)."""
    first = None
    for item in iterator:
        for row in _rows(item):
            topic = opts.topic or row.get("topic")
            if not topic:
                raise OptionError("a row has a null 'topic' and no option 'topic' is set")
            first = first or topic
            headers = row.get("headers") if columns.headers else None
            producer.send(
                topic,
                value=_bytes(row["value"]),
                key=_bytes(row.get("key")) if columns.key else None,
                partition=row.get("partition") if columns.partition else None,
                headers=[(h["key"], h["value"]) for h in headers] if headers else None,
            )
    return first


def _rows(item: Any) -> Iterator[dict[str, Any]]:
    """Rows of an Arrow batch (Arrow writers) or a single Row, as dicts by lower-case name."""
    if isinstance(item, pa.RecordBatch):
        names = [n.lower() for n in item.schema.names]
        yield from (dict(zip(names, values, strict=True)) for values in zip(
            *(column.to_pylist() for column in item.columns), strict=True))
    else:
        row = item.asDict(recursive=True)
        yield {k.lower(): v for k, v in row.items()}


class OdradekBatchWriter(DataSourceArrowWriter):
    """`df.write.format("odradek")`: each task produces its rows and flushes them."""

    def __init__(self, opts: WriteOptions, columns: Columns) -> None:
        self.opts = opts
        self.columns = columns

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriteResult:
        return _write(self.opts, self.columns, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Every task flushed and saw its acknowledgements before returning: nothing left."""

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Records of the tasks that succeeded stay in the topic (Kafka has no undo for
        committed records): at-least-once, as Spark's Kafka sink; with exactlyOnce each
        task's records are there once, but a failed job keeps the tasks that committed."""


class OdradekStreamWriter(_StreamWriterBase):
    """`df.writeStream.format("odradek")`: each micro-batch's tasks produce and flush."""

    def __init__(self, opts: WriteOptions, columns: Columns) -> None:
        self.opts = opts
        self.columns = columns

    def write(self, iterator: Iterator[Any]) -> WriteResult:
        return _write(self.opts, self.columns, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Each task flushed before returning: the batch's records are acknowledged."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """At-least-once: a retried micro-batch may write some records a second time
        (not with exactlyOnce: the re-run finds each task's committed batch marker)."""
