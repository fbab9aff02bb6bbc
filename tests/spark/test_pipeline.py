"""The log-processing pipeline end to end: `odradek pipeline run` (a process of its own,
Spark in local mode, against the test's broker) produces a generated run of web activity
and service metrics while its streaming job runs; the tables it writes must equal what
the test computes from the same generated events by itself; the topic activity-stats
carries every window; the batch backfill (in the test session's Spark) loads the same
tables, and offset and time ranges load exactly the records in them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from odradek.pipeline import generator as gen
from odradek.pipeline import jobs
from odradek.testing import running_broker
from tests.spark.pipeline_helpers import (
    EXPECTED,
    assert_aggregates_match,
    assert_events_exactly_once,
    pipeline_env,
    read_topic,
)

START_MS = 1_700_000_040_000  # 2023-11-14T22:14:00Z, a whole minute
PROCESS_TIMEOUT = 600  # seconds for `odradek pipeline run` on a few thousand records


@pytest.fixture(scope="module")
def pipeline_broker():
    with running_broker(**{"num.partitions": 3}) as broker:
        gen.ensure_topics(broker.bootstrap, partitions=3)
        yield broker


@pytest.fixture(scope="module")
def streamed(pipeline_broker, tmp_path_factory):
    """`odradek pipeline run` against the test's broker, as a user runs it: (the events it
    generated, regenerated here from the same seed and start, and its output dir)."""
    out = tmp_path_factory.mktemp("pipeline") / "tables"
    settings = {"--seed": 11, "--users": 120, "--duration": 180, "--sessions-per-second": 1.0,
                "--start-ms": START_MS}
    argv = [sys.executable, "-m", "odradek", "pipeline", "run", "--bootstrap-server",
            pipeline_broker.bootstrap, "--out", str(out)]
    for name, value in settings.items():
        argv += [name, str(value)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=PROCESS_TIMEOUT,
                          env=pipeline_env(), cwd=out.parent)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    # It printed the tables.
    for heading in ("events: ", "page_views: top pages", "service_health: per service",
                    "active_users: per minute"):
        assert heading in done.stdout, done.stdout
    generated = gen.generate(gen.GeneratorConfig(seed=11, users=120, duration_s=180,
                                                 sessions_per_s=1.0, start_ms=START_MS))
    assert f"{len(generated.activity)} activity events" in done.stdout
    return generated, out


def test_streaming_job_lands_every_activity_event_once(spark, streamed):
    generated, out = streamed
    assert_events_exactly_once(spark, out, generated)
    partitions = {p.name for p in (out / "events").iterdir() if p.name.startswith("date=")}
    assert partitions == {"date=2023-11-14"}


def test_streaming_aggregates_equal_those_computed_from_the_generated_events(spark, streamed):
    generated, out = streamed
    # The run has an incident on checkout: the data is not trivially uniform.
    rates = [v["error_rate"] for (_, s), v in EXPECTED["service_health"][0](generated).items()
             if s == "checkout"]
    assert max(rates) >= 0.05
    assert_aggregates_match(spark, out, generated)


def test_activity_stats_topic_has_every_window_of_every_aggregate(pipeline_broker, streamed):
    generated, _ = streamed
    records = read_topic(pipeline_broker.bootstrap, gen.STATS_TOPIC)
    by_key = {}
    for key, value in records:
        row = json.loads(value)
        assert key.startswith(row["table"] + "|")
        assert key not in by_key, f"{key} written twice"  # exactly once (transactions)
        by_key[key] = row
    for table, (compute, _) in EXPECTED.items():
        expected = compute(generated)
        got = {k: v for k, v in by_key.items() if v["table"] == table}
        assert len(got) == len(expected), table
    some = next(v for v in by_key.values() if v["table"] == "page_views")
    assert {"window_start", "window_end", "page", "views", "visitors"} <= set(some)


def test_backfill_of_everything_gives_the_streaming_tables(spark, pipeline_broker, streamed,
                                                          tmp_path):
    generated, _ = streamed
    counts = jobs.backfill(spark, pipeline_broker.bootstrap, tmp_path)
    assert counts["events"] == len(generated.activity)
    assert_events_exactly_once(spark, tmp_path, generated)
    assert_aggregates_match(spark, tmp_path, generated)


def test_backfill_of_an_offset_range_loads_exactly_those_records(spark, pipeline_broker,
                                                                 streamed, tmp_path):
    records = read_topic(pipeline_broker.bootstrap, gen.ACTIVITY_TOPIC, with_offsets=True)
    ends = {}
    for partition, offset, _ in records:
        ends[partition] = max(ends.get(partition, 0), offset + 1)
    start = {str(p): end // 4 for p, end in ends.items()}
    stop = {str(p): end // 2 for p, end in ends.items()}
    counts = jobs.backfill(spark, pipeline_broker.bootstrap, tmp_path,
                           topics=(gen.ACTIVITY_TOPIC,),
                           range_options={"startingOffsets": json.dumps({"activity": start}),
                                          "endingOffsets": json.dumps({"activity": stop})})
    expected = {json.loads(v).get("event_id") for p, o, v in records
                if int(start[str(p)]) <= o < int(stop[str(p)])} - {None}
    got = [r.event_id for r in spark.read.parquet(str(tmp_path / "events")).collect()]
    assert counts["events"] == len(got) == len(expected) > 0
    assert set(got) == expected
    assert not (tmp_path / "service_health").exists()  # only the topic asked for


def test_backfill_of_a_time_range_loads_the_records_that_arrived_in_it(spark, pipeline_broker,
                                                                       streamed, tmp_path):
    generated, _ = streamed
    begin, end = START_MS + 60_000, START_MS + 120_000  # record (arrival) timestamps
    counts = jobs.backfill(spark, pipeline_broker.bootstrap, tmp_path,
                           range_options={"startingTimestamp": str(begin),
                                          "endingTimestamp": str(end)})
    expected = {r.value["event_id"] for r in generated.records
                if r.topic == gen.ACTIVITY_TOPIC and begin <= r.arrival_ms < end}
    got = {r.event_id for r in spark.read.parquet(str(tmp_path / "events")).collect()}
    assert got == expected and counts["events"] == len(expected)
    requests = sum(1 for r in generated.records
                   if r.topic == gen.METRICS_TOPIC and begin <= r.arrival_ms < end)
    total = spark.read.parquet(str(tmp_path / "service_health")).groupBy().sum(
        "requests").first()[0]
    assert total == requests


def test_streaming_job_refuses_an_unknown_table(spark, pipeline_broker, tmp_path):
    with pytest.raises(jobs.PipelineError, match=r"unknown table.*pageviews"):
        jobs.start_streaming(spark, pipeline_broker.bootstrap, tmp_path, tmp_path,
                             tables=("pageviews",))


def test_heartbeats_are_not_events(spark, streamed):
    _, out = streamed
    types = {r.type for r in spark.read.parquet(str(Path(out) / "events"))
             .select("type").distinct().collect()}
    assert types <= {"page_view", "click", "search", "error"}
