"""The pipeline's Spark jobs: parse the `activity` and `metrics` topics, land events in
Parquet, compute windowed aggregates, publish them to `activity-stats`.

Tables under the output directory (all Parquet):

- `events` (by `date`, `hour`): every activity event, parsed, with its partition and offset;
- `page_views` (by `date`, `window_start`): views and distinct visitors per page per minute;
- `service_health` (by `date`, `window_start`): requests, errors, error rate and latency
  p50/p95/p99 per service per minute;
- `active_users` (by `date`, `window_start`): distinct users and sessions, events and errors
  per minute.

The streaming job (`start_streaming`) is four queries, each with its own checkpoint:
- `events` goes through Spark's file sink: the checkpoint and the sink's `_spark_metadata`
  log make it exactly once, across crashes and restarts.
- each aggregate is an event-time window of one minute behind a watermark (`WATERMARK`
  after the latest event time seen) in append mode, so a window is emitted once, when the
  watermark passes its end, in one micro-batch. `foreachBatch` writes it to Parquet by
  dynamic partition overwrite of its `window_start` partitions (a micro-batch replayed
  after a crash rewrites the same partitions: exactly once in the files) and to the topic
  `activity-stats`, exactly once for read_committed consumers: the write is transactional
  (`exactlyOnce`) under a prefix naming the query and the micro-batch, so a micro-batch
  replayed after a crash finds its tasks' records committed and writes nothing again.

The aggregate definitions are plain DataFrame functions, so the batch job (`backfill`) gets
the same tables from a range of a topic. Percentiles are exact (`percentile`, linear
interpolation between the closest ranks), and distinct users are exact (`collect_set`):
per-minute cardinalities here are small, and exact figures can be checked.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from odradek.pipeline.generator import ACTIVITY_TOPIC, HEARTBEAT, METRICS_TOPIC, STATS_TOPIC
from odradek.spark import register

log = logging.getLogger("odradek.pipeline")

WINDOW = "1 minute"
WATERMARK = "1 minute"  # events up to a minute behind the latest are still counted
DEFAULT_TRIGGER = "2 seconds"  # micro-batch interval of the streaming job
PERCENTILES = (0.5, 0.95, 0.99)

ACTIVITY_SCHEMA = (
    "event_id STRING, type STRING, ts TIMESTAMP, user_id STRING, session_id STRING, "
    "device STRING, country STRING, page STRING, referrer STRING, element STRING, "
    "query STRING, results INT, error STRING, service STRING, latency_ms DOUBLE")
METRICS_SCHEMA = (
    "type STRING, ts TIMESTAMP, service STRING, host STRING, endpoint STRING, status INT, "
    "latency_ms DOUBLE")

EVENTS = "events"
PAGE_VIEWS = "page_views"
SERVICE_HEALTH = "service_health"
ACTIVE_USERS = "active_users"
AGGREGATES = (PAGE_VIEWS, SERVICE_HEALTH, ACTIVE_USERS)
TABLES = (EVENTS, *AGGREGATES)
# The dimension of each aggregate, after the window (part of its key in activity-stats).
DIMENSIONS = {PAGE_VIEWS: ("page",), SERVICE_HEALTH: ("service",), ACTIVE_USERS: ()}
SOURCE_OF = {PAGE_VIEWS: ACTIVITY_TOPIC, SERVICE_HEALTH: METRICS_TOPIC,
             ACTIVE_USERS: ACTIVITY_TOPIC}
# The format the jobs read the topics with: ours, or "kafka" (Spark's own connector,
# spark-sql-kafka-0-10, when the session has its jars): both give Kafka's columns and
# take Kafka's options. The stats topic is always written by the `odradek` sink: it is
# transactional (`exactlyOnce`), which Spark's Kafka sink is not.
SOURCE_FORMAT = "odradek"


class PipelineError(RuntimeError):
    """A pipeline job could not run or did not finish."""


def spark_session(master: str | None = None, app: str = "odradek-pipeline",
                  extra: Mapping[str, str] | None = None) -> SparkSession:
    """A SparkSession for the jobs, with the `odradek` format registered.

    `master=None` keeps whatever launched us (spark-submit's `--master`), else local[2].
    """
    # Python workers must run this interpreter, or they start without odradek installed
    # and fail with "Python worker failed to connect back".
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    # Local mode binds to the loopback interface only (and Spark stops warning that the
    # host name resolves to it).
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = SparkSession.builder.appName(app)
    if master is not None:
        builder = builder.master(master)
    elif "PYSPARK_GATEWAY_PORT" not in os.environ:  # not under spark-submit
        builder = builder.master("local[2]")
    settings = {
        "spark.sql.session.timeZone": "UTC",  # window boundaries and dates in UTC
        "spark.sql.shuffle.partitions": "4",  # minutes of a small site, not terabytes
        "spark.ui.showConsoleProgress": "false",
        **(extra or {}),
    }
    for name, value in settings.items():
        builder = builder.config(name, value)
    spark = builder.getOrCreate()
    register(spark)
    return spark


# ---------------------------------------------------------------------------- parsing


def _kafka_reader(spark: SparkSession, bootstrap: str, *, streaming: bool,
                  options: Mapping[str, str], source_format: str = SOURCE_FORMAT) -> Any:
    reader = spark.readStream if streaming else spark.read
    reader = reader.format(source_format).option("kafka.bootstrap.servers", bootstrap)
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader


def parse_activity(raw: DataFrame) -> DataFrame:
    """Kafka rows of `activity` -> events (heartbeats kept: they carry the watermark);
    a record that is not an activity event in JSON is dropped."""
    e = F.from_json(F.col("value").cast("string"), ACTIVITY_SCHEMA)
    return (raw.select(e.alias("e"), F.col("partition").alias("kafka_partition"),
                       F.col("offset").alias("kafka_offset"))
            .where("e IS NOT NULL AND e.ts IS NOT NULL AND e.type IS NOT NULL")
            .select("e.*", "kafka_partition", "kafka_offset")
            .withColumnRenamed("ts", "event_time"))


def parse_metrics(raw: DataFrame) -> DataFrame:
    """Kafka rows of `metrics` -> request records (and heartbeats)."""
    m = F.from_json(F.col("value").cast("string"), METRICS_SCHEMA)
    return (raw.select(m.alias("m"))
            .where("m IS NOT NULL AND m.ts IS NOT NULL "
                   "AND (m.type = 'heartbeat' OR m.service IS NOT NULL)")
            .select("m.*").withColumnRenamed("ts", "event_time"))


def _keep(df: DataFrame, condition: Column) -> DataFrame:
    """`df.where(condition)`, but evaluated after the watermark has seen every row.

    Spark's optimizer pushes a filter below `withWatermark` unless the filter reads the
    event-time column; a heartbeat filtered out there would never move the watermark, and
    no window would ever close. So the filter also mentions `event_time` (every row here
    has one, so the extra term never keeps a row)."""
    return df.where(F.when(condition, F.lit(True)).otherwise(F.col("event_time").isNull()))


def _no_heartbeats(df: DataFrame) -> DataFrame:
    return _keep(df, F.coalesce(F.col("type"), F.lit("")) != HEARTBEAT)


# ---------------------------------------------------------------------------- aggregates


def _windowed(df: DataFrame, *columns: str) -> Any:
    return df.groupBy(F.window("event_time", WINDOW).alias("w"), *columns)


def _flat(df: DataFrame, *columns: Column | str) -> DataFrame:
    return df.select(F.col("w.start").alias("window_start"), F.col("w.end").alias("window_end"),
                     *columns)


def page_views(activity: DataFrame) -> DataFrame:
    """Views and distinct visitors per page per minute, and the mean page load time."""
    agg = _windowed(_keep(activity, F.col("type") == "page_view"), "page").agg(
        F.count(F.lit(1)).alias("views"),
        F.size(F.collect_set("user_id")).alias("visitors"),
        F.avg("latency_ms").alias("avg_load_ms"))
    return _flat(agg, "page", "views", "visitors", "avg_load_ms")


def service_health(metrics: DataFrame) -> DataFrame:
    """Requests, 5xx errors, error rate and exact latency percentiles per service per minute."""
    quantiles = ", ".join(str(p) for p in PERCENTILES)
    agg = _windowed(metrics, "service").agg(
        F.count(F.lit(1)).alias("requests"),
        F.sum(F.when(F.col("status") >= 500, 1).otherwise(0)).alias("errors"),
        F.expr(f"percentile(latency_ms, array({quantiles}))").alias("q"))
    return _flat(agg, "service", "requests", "errors",
                 (F.col("errors") / F.col("requests")).alias("error_rate"),
                 F.col("q")[0].alias("p50_ms"), F.col("q")[1].alias("p95_ms"),
                 F.col("q")[2].alias("p99_ms"))


def active_users(activity: DataFrame) -> DataFrame:
    """Distinct users and sessions with any activity, events and errors, per minute."""
    agg = _windowed(activity).agg(
        F.size(F.collect_set("user_id")).alias("active_users"),
        F.size(F.collect_set("session_id")).alias("sessions"),
        F.count(F.lit(1)).alias("events"),
        F.sum(F.when(F.col("type") == "error", 1).otherwise(0)).alias("errors"))
    return _flat(agg, "active_users", "sessions", "events", "errors")


AGGREGATE_OF: dict[str, Callable[[DataFrame], DataFrame]] = {
    PAGE_VIEWS: page_views, SERVICE_HEALTH: service_health, ACTIVE_USERS: active_users}


def _events_table(events: DataFrame) -> DataFrame:
    return (events.withColumn("date", F.to_date("event_time"))
            .withColumn("hour", F.hour("event_time")))


def _stats_records(table: str, df: DataFrame) -> DataFrame:
    """Rows of an aggregate -> (key, value) records for `activity-stats`: the key names the
    table, window and dimension; the value is the row as JSON with its table's name."""
    start = F.date_format("window_start", "yyyy-MM-dd'T'HH:mm:ss'Z'")
    key = F.concat_ws("|", F.lit(table), start, *[F.col(c) for c in DIMENSIONS[table]])
    value = F.to_json(F.struct(F.lit(table).alias("table"), *[F.col(c) for c in df.columns]))
    return df.select(key.alias("key"), value.alias("value"))


def _write_aggregate(df: DataFrame, path: str, mode: str) -> None:
    """Parquet partitioned by date and window start; "overwrite" replaces only the windows
    written (dynamic partition overwrite), so writing a window again is idempotent."""
    (df.withColumn("date", F.to_date("window_start"))
     .write.mode(mode).option("partitionOverwriteMode", "dynamic")
     .partitionBy("date", "window_start").parquet(path))


# ---------------------------------------------------------------------------- streaming


# Spark waits a fixed 10 s for a new driver-side Python worker (a data source's planner,
# a sink's writer) to connect back; on a small loaded machine a worker sometimes takes
# longer to start. Such a query is restarted from its checkpoint (which keeps the results
# exactly once), this many times at most.
TRANSIENT_FAILURE = "Python worker failed to connect back"
MAX_RESTARTS = 3
START_WAIT_S = 60.0  # bound on waiting for one query's first trigger before the next starts


@dataclass
class StreamingJob:
    """The running queries of one start of the streaming job, and how to start each again
    from its checkpoint."""

    queries: dict[str, StreamingQuery]
    bootstrap: str
    out: Path
    starters: dict[str, Callable[[], StreamingQuery]]
    restarts: int = 0

    def stop(self) -> None:
        for query in self.queries.values():
            with contextlib.suppress(Exception):  # stopping the others matters more
                query.stop()

    def failed(self) -> str | None:
        """Why a query is not running (None: all run). A query that failed to start a
        Python worker in time is restarted from its checkpoint instead, a few times."""
        for name, query in list(self.queries.items()):
            error = query.exception()
            if error is not None and TRANSIENT_FAILURE in str(error) and (
                    self.restarts < MAX_RESTARTS):
                self.restarts += 1
                log.warning("query %s failed (%s); restarting it from its checkpoint "
                            "(%d of %d)", name, TRANSIENT_FAILURE, self.restarts, MAX_RESTARTS)
                self.queries[name] = self.starters[name]()
                continue
            if error is not None:
                return f"query {name} failed: {error}"
            if not query.isActive:
                return f"query {name} stopped"
        return None


def start_streaming(spark: SparkSession, bootstrap: str, out: str | Path,
                    checkpoint: str | Path, *, trigger: str = DEFAULT_TRIGGER,
                    max_offsets_per_trigger: int | None = None,
                    tables: tuple[str, ...] = TABLES,
                    stats_topic: str | None = STATS_TOPIC,
                    source_format: str = SOURCE_FORMAT) -> StreamingJob:
    """Start the streaming queries (`tables`, all by default) from their checkpoints under
    `checkpoint` (from the topics' beginning the first time). Results go to Parquet under
    `out` and, for the aggregates, to `stats_topic` (None: Parquet only). The topics are
    read with `source_format` (`SOURCE_FORMAT`)."""
    unknown = [t for t in tables if t not in TABLES]
    if unknown:
        raise PipelineError(f"unknown table(s) {', '.join(unknown)}; the tables are "
                            f"{', '.join(TABLES)}")
    out = Path(out)
    checkpoint = Path(checkpoint)
    options = {"startingOffsets": "earliest", "failOnDataLoss": "true"}
    if max_offsets_per_trigger is not None:
        options["maxOffsetsPerTrigger"] = str(max_offsets_per_trigger)

    def stream(topic: str) -> DataFrame:
        raw = _kafka_reader(spark, bootstrap, streaming=True,
                            options={**options, "subscribe": topic},
                            source_format=source_format).load()
        parsed = parse_activity(raw) if topic == ACTIVITY_TOPIC else parse_metrics(raw)
        # The watermark sees heartbeats; the aggregates never do.
        return _no_heartbeats(parsed.withWatermark("event_time", WATERMARK))

    def events() -> StreamingQuery:
        return (_events_table(stream(ACTIVITY_TOPIC)).writeStream
                .queryName(f"pipeline_{EVENTS}")
                .format("parquet").partitionBy("date", "hour").outputMode("append")
                .option("path", str(out / EVENTS))
                .option("checkpointLocation", str(checkpoint / EVENTS))
                .trigger(processingTime=trigger).start())

    def aggregate(table: str) -> Callable[[], StreamingQuery]:
        def start() -> StreamingQuery:
            return (AGGREGATE_OF[table](stream(SOURCE_OF[table]))
                    .writeStream.queryName(f"pipeline_{table}").outputMode("append")
                    .foreachBatch(_aggregate_sink(table, str(out / table), bootstrap,
                                                  stats_topic, checkpoint / table))
                    .option("checkpointLocation", str(checkpoint / table))
                    .trigger(processingTime=trigger).start())
        return start

    starters = {EVENTS: events, **{t: aggregate(t) for t in AGGREGATES}}
    queries: dict[str, StreamingQuery] = {}
    try:
        for table in TABLES:
            if table not in tables:
                continue
            queries[table] = starters[table]()
            # One at a time: each start launches Python workers on the driver, and
            # launching four at once on a small machine is what makes them late.
            _wait_first_trigger(queries[table])
    except Exception:
        for query in queries.values():
            query.stop()
        raise
    return StreamingJob(queries, bootstrap, out, starters)


def _wait_first_trigger(query: StreamingQuery) -> None:
    """Until the query's sources are initialized (its first trigger has begun)."""
    deadline = time.monotonic() + START_WAIT_S
    while (query.isActive and query.status["message"].startswith("Initializing")
           and time.monotonic() < deadline):
        time.sleep(0.2)


def _aggregate_sink(table: str, path: str, bootstrap: str, stats_topic: str | None,
                    checkpoint: Path) -> Callable[[DataFrame, int], None]:
    def sink(batch: DataFrame, batch_id: int) -> None:
        batch = batch.persist()
        try:
            if batch.isEmpty():  # most micro-batches close no window
                return
            _write_aggregate(batch, path, "overwrite")
            if stats_topic is not None:
                # The query's id (kept in its checkpoint) and the batch id name the write:
                # a replay of this micro-batch after a crash is the same write, and the
                # odradek sink's exactlyOnce commits each task's records only once.
                query_id = json.loads((checkpoint / "metadata").read_text())["id"]
                (_stats_records(table, batch).write.format("odradek")
                 .option("kafka.bootstrap.servers", bootstrap).option("topic", stats_topic)
                 .option("exactlyOnce", "true")
                 .option("transactionalIdPrefix", f"odradek-pipeline-{query_id}-{batch_id}")
                 .mode("append").save())
        finally:
            batch.unpersist()

    return sink


def _end_offsets(bootstrap: str, topics: tuple[str, ...]) -> dict[str, dict[str, int]]:
    """The topics' end offsets now, in the JSON form of a query's progress. Asked as the
    source asks (read_committed, Spark's fetchOffset.* retries), so that a broker lost
    meanwhile costs a retry, not the job (its first answer can be NOT_LEADER)."""
    from odradek.spark.client import Brokers
    from odradek.spark.options import (
        DEFAULT_API_TIMEOUT_MS,
        DEFAULT_FETCH_OFFSET_ATTEMPTS,
        DEFAULT_FETCH_OFFSET_INTERVAL_MS,
        ClientOptions,
        Topics,
        offsets_to_json,
    )

    brokers = Brokers(ClientOptions(bootstrap, {}, DEFAULT_API_TIMEOUT_MS / 1000),
                      "odradek-pipeline", attempts=DEFAULT_FETCH_OFFSET_ATTEMPTS,
                      interval_s=DEFAULT_FETCH_OFFSET_INTERVAL_MS / 1000)
    try:
        return offsets_to_json(brokers.latest(brokers.partitions(Topics("subscribe", topics))))
    finally:
        brokers.close()


def _caught_up(query: StreamingQuery, ends: Mapping[str, Mapping[str, int]]) -> bool:
    """The query read every record up to `ends`, and has no window left in its state (the
    heartbeats' watermark closed them all)."""
    import json

    progress = query.lastProgress
    if not progress or not progress.get("sources"):
        return False
    read = json.loads(progress["sources"][0]["endOffset"] or "{}")
    topic = next(iter(read), None)
    if topic is None or read[topic] != dict(ends.get(topic, {})):
        return False
    return all(op.get("numRowsTotal", 0) == 0 for op in progress.get("stateOperators", []))


def wait_until_processed(job: StreamingJob, timeout_s: float = 600.0,
                         poll_s: float = 1.0) -> None:
    """Wait until every query has read its topic to the end and emitted every window."""
    topics = (ACTIVITY_TOPIC, METRICS_TOPIC)
    deadline = time.monotonic() + timeout_s
    while True:
        problem = job.failed()
        if problem:
            raise PipelineError(problem)
        ends = _end_offsets(job.bootstrap, topics)
        if all(_caught_up(q, ends) for q in job.queries.values()):
            return
        if time.monotonic() > deadline:
            behind = [n for n, q in job.queries.items() if not _caught_up(q, ends)]
            raise PipelineError(f"the streaming job did not process everything within "
                                f"{timeout_s:g}s (behind: {', '.join(behind)})")
        time.sleep(poll_s)


# ---------------------------------------------------------------------------- batch


def backfill(spark: SparkSession, bootstrap: str, out: str | Path, *,
             range_options: Mapping[str, str] | None = None,
             topics: tuple[str, ...] = (ACTIVITY_TOPIC, METRICS_TOPIC),
             mode: str = "overwrite",
             source_format: str = SOURCE_FORMAT) -> dict[str, int]:
    """Load a range of the topics into the pipeline's Parquet tables with a batch read.

    `range_options` are the batch source's options that bound the read: `startingOffsets` /
    `endingOffsets` (Kafka's JSON, naming every partition of each topic read) or
    `startingTimestamp` / `endingTimestamp` (record timestamps, ms); none: everything.
    `mode` is "overwrite" (the tables written are replaced) or "append". Windows at the
    edges of a range hold only the part of the minute inside it. `source_format` reads the
    topics (`SOURCE_FORMAT`). Returns rows per table.
    """
    if mode not in ("overwrite", "append"):
        raise PipelineError(f"mode must be overwrite or append, got {mode!r}")
    unknown = [t for t in topics if t not in (ACTIVITY_TOPIC, METRICS_TOPIC)]
    if unknown:
        raise PipelineError(f"cannot backfill topic(s) {', '.join(unknown)}: the pipeline "
                            f"parses {ACTIVITY_TOPIC} and {METRICS_TOPIC}")
    out = Path(out)
    counts: dict[str, int] = {}
    for topic in topics:
        options = {"subscribe": topic, **(range_options or {})}
        raw = _kafka_reader(spark, bootstrap, streaming=False, options=options,
                            source_format=source_format).load()
        if topic == ACTIVITY_TOPIC:
            events = _no_heartbeats(parse_activity(raw)).persist()
            try:
                table = _events_table(events)
                table.write.mode(mode).partitionBy("date", "hour").parquet(str(out / EVENTS))
                counts[EVENTS] = events.count()
                for name in (PAGE_VIEWS, ACTIVE_USERS):
                    counts[name] = _write_batch_aggregate(AGGREGATE_OF[name](events),
                                                          out / name, mode)
            finally:
                events.unpersist()
        else:
            metrics = _no_heartbeats(parse_metrics(raw))
            counts[SERVICE_HEALTH] = _write_batch_aggregate(service_health(metrics),
                                                            out / SERVICE_HEALTH, mode)
    return counts


def _write_batch_aggregate(df: DataFrame, path: Path, mode: str) -> int:
    df = df.persist()
    try:
        if mode == "overwrite" and path.exists():
            shutil.rmtree(path)  # a backfill's overwrite replaces the whole table
        _write_aggregate(df, str(path), "append")
        return df.count()
    finally:
        df.unpersist()


# ---------------------------------------------------------------------------- reading back


def read_tables(spark: SparkSession, out: str | Path) -> dict[str, DataFrame]:
    """The Parquet tables present under `out` (partition columns included)."""
    out = Path(out)
    return {name: spark.read.parquet(str(out / name)) for name in TABLES
            if (out / name).is_dir() and any((out / name).glob("date=*"))}


def summary(spark: SparkSession, out: str | Path, rows: int = 10) -> str:
    """The tables as text: what `odradek pipeline run` prints at the end."""
    tables = read_tables(spark, out)
    if not tables:
        return f"no tables under {out}"
    parts = []
    if EVENTS in tables:
        df = tables[EVENTS]
        parts.append(f"{EVENTS}: {df.count()} events\n"
                     + _show(df.groupBy("type").count().orderBy(F.desc("count")), rows))
    if PAGE_VIEWS in tables:
        parts.append(f"{PAGE_VIEWS}: top pages over the run\n" + _show(
            tables[PAGE_VIEWS].groupBy("page").agg(F.sum("views").alias("views"),
                                                   F.round(F.avg("avg_load_ms"), 1)
                                                   .alias("avg_load_ms"))
            .orderBy(F.desc("views"), "page"), rows))
    if SERVICE_HEALTH in tables:
        parts.append(f"{SERVICE_HEALTH}: per service per minute (worst error rate first)\n"
                     + _show(tables[SERVICE_HEALTH].select(
                         F.date_format("window_start", "HH:mm").alias("minute"), "service",
                         "requests", "errors", F.round("error_rate", 3).alias("error_rate"),
                         F.round("p50_ms", 1).alias("p50_ms"),
                         F.round("p95_ms", 1).alias("p95_ms"),
                         F.round("p99_ms", 1).alias("p99_ms"))
                         .orderBy(F.desc("error_rate"), "minute", "service"), rows))
    if ACTIVE_USERS in tables:
        parts.append(f"{ACTIVE_USERS}: per minute\n" + _show(
            tables[ACTIVE_USERS].select(
                F.date_format("window_start", "HH:mm").alias("minute"), "active_users",
                "sessions", "events", "errors").orderBy("minute"), rows * 3))
    return "\n".join(parts)


def _show(df: DataFrame, rows: int) -> str:
    # DataFrame.show prints; _jdf.showString gives the same text to return.
    return df._jdf.showString(rows, 40, False)
