"""What the pipeline's tables must hold for a generated run, computed here in plain Python
from the generator's events (never from Spark), and the checks that compare them."""

from __future__ import annotations

import contextlib
import math
import os
import signal
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, TopicPartition
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from odradek.pipeline.generator import Generated, parse_iso

REL = 1e-9  # floating sums and interpolations may differ in the last bits


def window_of(ts: str) -> int:
    """The start (s since the epoch) of the one-minute window an event time falls in."""
    ms = parse_iso(ts)
    return ms // 60_000 * 60


def percentile(values: list[float], p: float) -> float:
    """Linear interpolation between the closest ranks (Spark's `percentile`)."""
    ordered = sorted(values)
    position = p * (len(ordered) - 1)
    lower, upper = math.floor(position), math.ceil(position)
    return ordered[lower] + (ordered[upper] - ordered[lower]) * (position - lower)


def expected_page_views(generated: Generated) -> dict[tuple[int, str], dict[str, Any]]:
    groups: dict[tuple[int, str], list[dict]] = defaultdict(list)
    for event in generated.activity:
        if event["type"] == "page_view":
            groups[(window_of(event["ts"]), event["page"])].append(event)
    return {key: {"views": len(es), "visitors": len({e["user_id"] for e in es}),
                  "avg_load_ms": sum(e["latency_ms"] for e in es) / len(es)}
            for key, es in groups.items()}


def expected_service_health(generated: Generated) -> dict[tuple[int, str], dict[str, Any]]:
    groups: dict[tuple[int, str], list[dict]] = defaultdict(list)
    for request in generated.metrics:
        groups[(window_of(request["ts"]), request["service"])].append(request)
    result = {}
    for key, rs in groups.items():
        latencies = [r["latency_ms"] for r in rs]
        errors = sum(1 for r in rs if r["status"] >= 500)
        result[key] = {"requests": len(rs), "errors": errors, "error_rate": errors / len(rs),
                       "p50_ms": percentile(latencies, 0.5),
                       "p95_ms": percentile(latencies, 0.95),
                       "p99_ms": percentile(latencies, 0.99)}
    return result


def expected_active_users(generated: Generated) -> dict[tuple[int], dict[str, Any]]:
    groups: dict[tuple[int], list[dict]] = defaultdict(list)
    for event in generated.activity:
        groups[(window_of(event["ts"]),)].append(event)
    return {key: {"active_users": len({e["user_id"] for e in es}),
                  "sessions": len({e["session_id"] for e in es}),
                  "events": len(es),
                  "errors": sum(1 for e in es if e["type"] == "error")}
            for key, es in groups.items()}


EXPECTED = {"page_views": (expected_page_views, ("page",)),
            "service_health": (expected_service_health, ("service",)),
            "active_users": (expected_active_users, ())}


def table_rows(spark: SparkSession, path: Path, dimensions: tuple[str, ...]
               ) -> dict[tuple, dict[str, Any]]:
    """A Parquet aggregate table keyed like the expected values; a key seen twice fails."""
    df = spark.read.parquet(str(path))
    rows = df.withColumn("w", F.unix_timestamp("window_start")).collect()
    result: dict[tuple, dict[str, Any]] = {}
    for row in rows:
        data = row.asDict()
        key = (data["w"], *(data[d] for d in dimensions))
        assert key not in result, f"{path.name}: window and key {key} written twice"
        assert (data["window_end"] - data["window_start"]).total_seconds() == 60
        result[key] = {k: v for k, v in data.items()
                       if k not in ("w", "window_start", "window_end", "date", *dimensions)}
    return result


def assert_aggregates_match(spark: SparkSession, out: Path, generated: Generated,
                            tables: tuple[str, ...] = tuple(EXPECTED)) -> None:
    for table in tables:
        compute, dimensions = EXPECTED[table]
        expected = compute(generated)
        got = table_rows(spark, out / table, dimensions)
        assert set(got) == set(expected), (
            f"{table}: missing {sorted(set(expected) - set(got))[:5]}, "
            f"unexpected {sorted(set(got) - set(expected))[:5]}")
        for key, want in expected.items():
            for column, value in want.items():
                assert math.isclose(got[key][column], value, rel_tol=REL), (
                    f"{table} {key} {column}: got {got[key][column]}, expected {value}")


def assert_events_exactly_once(spark: SparkSession, out: Path, generated: Generated) -> None:
    """Every generated activity event is in the `events` table once, and nothing else."""
    rows = spark.read.parquet(str(out / "events")).select(
        "event_id", "kafka_partition", "kafka_offset").collect()
    ids = [r.event_id for r in rows]
    duplicates = len(ids) - len(set(ids))
    assert duplicates == 0, f"{duplicates} events written more than once"
    assert len({(r.kafka_partition, r.kafka_offset) for r in rows}) == len(rows)
    expected = {e["event_id"] for e in generated.activity}
    assert set(ids) == expected, (f"missing {len(expected - set(ids))}, "
                                  f"unexpected {len(set(ids) - expected)}")


# How long a Python worker of Spark's may take to connect back to its JVM and
# authenticate (spark.python.authenticate.socketTimeout, 15 s by default): more for the
# tests, whose JVMs share 2 CPUs with brokers, clients and the other tiers. A worker that
# timed out failed its query with CANNOT_OPEN_SOCKET; nothing a test checks is timed by it.
SPARK_SOCKET_TIMEOUT = "120s"
SPARK_SOCKET_CONF = f"spark.python.authenticate.socketTimeout={SPARK_SOCKET_TIMEOUT}"


def pipeline_env() -> dict[str, str]:
    """The environment of a pipeline subprocess: this interpreter for Spark's workers, and
    the tests' socket timeout for a SparkSession it starts (PYSPARK_SUBMIT_ARGS)."""
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
               PYTHONUNBUFFERED="1", SPARK_LOCAL_IP="127.0.0.1")
    env.setdefault("PYSPARK_SUBMIT_ARGS", f"--conf {SPARK_SOCKET_CONF} pyspark-shell")
    return env


def stop_group(proc: subprocess.Popen, sig: int = signal.SIGTERM, wait_s: float = 30.0) -> None:
    """Stop a process we started in a session of its own, and everything it started (a
    Spark driver's JVM, an executor), by its process group; SIGKILL if it lingers."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(wait_s)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)  # children outliving their parent
    if proc.poll() is None:
        proc.wait(wait_s)


def read_topic(bootstrap: str, topic: str, with_offsets: bool = False) -> list:
    """Every record of a topic a read_committed consumer is given, to the end of each
    partition: (key, value), or (partition, offset, value) with `with_offsets`."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "pipeline-test",
                         "enable.auto.commit": False, "enable.partition.eof": False})
    try:
        meta = consumer.list_topics(topic, timeout=10)
        partitions = sorted(meta.topics[topic].partitions)
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                for p in partitions}
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        records = []

        def behind() -> list[int]:
            # The consumer's position passes transaction markers too (activity-stats is
            # written transactionally), so it reaches the log end where a count of the
            # records delivered would not.
            wanted = [TopicPartition(topic, p) for p in partitions if ends[p] > 0]
            return [p.partition for p in consumer.position(wanted)
                    if p.offset < ends[p.partition]]

        for _ in range(1000):
            if not behind():
                break
            for msg in consumer.consume(1000, timeout=1):
                assert msg.error() is None, msg.error()
                key = msg.key().decode() if msg.key() else None
                records.append((msg.partition(), msg.offset(), msg.value()) if with_offsets
                               else (key, msg.value()))
        assert not behind(), f"partitions {behind()} of {topic} not read to their end"
        return records
    finally:
        consumer.close()
