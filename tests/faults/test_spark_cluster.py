"""The `odradek` data source and the pipeline on a three-broker replicated cluster, one
broker killed mid-stream.

First, the requests a leader's loss reaches, asked right after the kill of a partition's
leader with no retry of the query's own (fetchOffset.numRetries=1): the driver's offsets
(warm and new clients), both executor readers, an idempotent write, transactional writes,
and the pipeline's end offsets must each succeed once a new leader is elected. librdkafka
alone kept an offsets request on the dead leader's connection until its timeout (30 s,
again and again on a client that asks nothing else) or failed it ("Broker handle
destroyed", NOT_LEADER_FOR_PARTITION, FENCED_LEADER_EPOCH).

Then the pipeline: `odradek pipeline generate` (a process of its own, given every broker in
`--bootstrap-server`) produces a paced simulated run to topics with replication factor 3
and min.insync.replicas 2, while the pipeline's streaming job (its four queries, in the
test session's Spark) reads them and writes its tables and the transactional
`activity-stats` topic. Once records are landing, the leader of `activity-0` is killed
with SIGKILL; after a new leader is elected, it is started again on its data. At the end
the tables must be exact: every activity event once in `events`, every aggregate equal to
what the test computes in plain Python from the generated events, and every window once
in `activity-stats` for a read_committed consumer.

The generator fails if any record is not acknowledged (acks=all, idempotent), so the
generated run is exactly the acknowledged input.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from odradek.pipeline import generator as gen
from odradek.pipeline import jobs
from odradek.spark import exactly_once
from odradek.spark.client import Brokers, RecordProducer
from odradek.spark.client import read_range as librdkafka_read
from odradek.spark.fetcher import read_range as native_read
from odradek.spark.options import read_options
from tests.cluster_processes import SESSION_TIMEOUT_MS, Cluster
from tests.spark.conftest import spark  # noqa: F401  (the spark tier's session fixture)
from tests.spark.pipeline_helpers import (
    EXPECTED,
    assert_aggregates_match,
    assert_events_exactly_once,
    pipeline_env,
    read_topic,
    stop_group,
)

pytestmark = [pytest.mark.cluster, pytest.mark.spark]

PARTITIONS = 3
TOPICS = (gen.ACTIVITY_TOPIC, gen.METRICS_TOPIC, gen.STATS_TOPIC)
START_MS = 1_700_000_040_000  # 2023-11-14T22:14:00Z, a whole minute
# About 2,000 records over 150 simulated seconds (165 with the arrival delays), paced at
# 5x real time: about 33 s of producing, long enough for a kill and a restart inside it.
GENERATOR = {"--seed": 23, "--users": 100, "--duration": 150, "--sessions-per-second": 1.0,
             "--start-ms": START_MS, "--speedup": 5}
LANDING_TIMEOUT_S = 120  # the first micro-batch with records, on a loaded 2-CPU machine
PROCESS_TIMEOUT_S = 300  # the generator's run, and the job's catching up afterwards


RIDE_OVER_S = SESSION_TIMEOUT_MS / 1000 + 20  # the election, then a loaded machine's pace


def _transaction(bootstrap: str, tid: str, topic: str) -> int:
    """One exactly-once task's calls, as exactly_once.write_task makes them."""
    client = read_options({"kafka.bootstrap.servers": bootstrap, "subscribe": topic},
                          streaming=False).client
    producer = RecordProducer(client, transactional_id=tid)
    try:
        producer.kafka.init_transactions(client.api_timeout_s)
        done = exactly_once.committed_batch(client, tid)
        producer.kafka.begin_transaction()
        for i in range(30):
            producer.send(topic, b"t%d" % i, None, i % PARTITIONS, None)
        producer.flush()
        exactly_once._commit_with_marker(producer.kafka, client, tid, topic, done + 1)
        return producer.sent
    finally:
        producer.close()


def test_every_request_of_the_source_rides_over_a_leader_killed_under_it(
        cluster: Cluster) -> None:
    topic = "rides"
    cluster.create_topic(topic, PARTITIONS, 3, **{"min.insync.replicas": "2"})
    cluster.wait_for_full_isr(topic, PARTITIONS)
    bootstrap = cluster.bootstrap
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(3000):
        producer.produce(topic, b"v%d" % i, partition=i % PARTITIONS)
    assert producer.flush(30) == 0
    options = {"kafka.bootstrap.servers": bootstrap, "subscribe": topic,
               "fetchOffset.numRetries": "1"}  # no retry of the query's own: each call rides
    opts = read_options(options, streaming=False)
    slow = read_options({**options, "reader": "librdkafka"}, streaming=False)
    tps = [(topic, p) for p in range(PARTITIONS)]
    warm = Brokers(opts.client, "warm", attempts=1)
    warm.latest(tps)  # as a running query's driver holds it
    for k in range(3):  # their coordinators (transactions, marker groups) spread out
        _transaction(bootstrap, f"rides-{k}", topic)

    def write() -> int:
        records = RecordProducer(opts.client)
        try:
            for i in range(300):
                records.send(topic, b"w", None, i % PARTITIONS, None)
            records.flush()
            return records.sent
        finally:
            records.close()

    calls: dict[str, Callable[[], Any]] = {
        "driver offsets, warm client": lambda: warm.latest(tps),
        "driver offsets, new client": lambda: Brokers(opts.client, "new").earliest(tps),
        "native reader": lambda: sum(b.num_rows for b in native_read(opts, topic, 0, 0, 1000)),
        "librdkafka reader": lambda: sum(b.num_rows
                                         for b in librdkafka_read(slow, topic, 0, 0, 1000)),
        "idempotent write": write,
        "pipeline end offsets": lambda: jobs._end_offsets(bootstrap, (topic,)),
        **{f"transaction {k}": (lambda k=k: _transaction(bootstrap, f"rides-{k}", topic))
           for k in range(3)},
    }
    results: dict[str, tuple[float, Any]] = {}

    def timed(name: str, call: Callable[[], Any]) -> None:
        began = time.monotonic()
        try:
            outcome = call()
        except Exception as exc:  # reported below, with the others
            outcome = exc
        results[name] = (time.monotonic() - began, outcome)

    victim = cluster.leader(topic, 0)
    cluster.kill(victim)
    threads = [threading.Thread(target=timed, args=item) for item in calls.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    warm.close()
    cluster.start_broker(victim)
    failed = {n: r for n, r in results.items() if isinstance(r[1], Exception)}
    assert not failed, failed
    assert set(results) == set(calls), "a call still hangs"
    slow_calls = {n: round(t, 1) for n, (t, _) in results.items() if t > RIDE_OVER_S}
    assert not slow_calls, f"waited out the dead leader instead of asking the new one: " \
        f"{slow_calls}"
    assert results["native reader"][1] == results["librdkafka reader"][1] == 1000
    cluster.wait_for_full_isr(topic, PARTITIONS, 90)


def _generator_argv(bootstrap: str) -> list[str]:
    argv = [sys.executable, "-m", "odradek", "pipeline", "generate",
            "--bootstrap-server", bootstrap]
    for name, value in GENERATOR.items():
        argv += [name, str(value)]
    return argv


def _generated() -> gen.Generated:
    """The run the generator process produces, made again here from the same settings."""
    return gen.generate(gen.GeneratorConfig(
        seed=GENERATOR["--seed"], users=GENERATOR["--users"],
        duration_s=GENERATOR["--duration"], sessions_per_s=GENERATOR["--sessions-per-second"],
        start_ms=START_MS))


def _landed(job: jobs.StreamingJob) -> int:
    """Activity records the events query has read so far."""
    return sum(p.get("numInputRows", 0) for p in job.queries[jobs.EVENTS].recentProgress)


def _tail(log: Path) -> str:
    return log.read_text(errors="replace")[-3000:] if log.exists() else ""


def test_pipeline_tables_stay_exact_when_a_leader_is_killed_and_restarted_mid_stream(
        cluster: Cluster, spark, tmp_path: Path) -> None:  # noqa: F811
    for topic in TOPICS:
        cluster.create_topic(topic, PARTITIONS, 3, **{"min.insync.replicas": "2"})
    for topic in TOPICS:
        cluster.wait_for_full_isr(topic, PARTITIONS)
    bootstrap = cluster.bootstrap
    assert len(bootstrap.split(",")) == 3  # every broker, as a user lists a cluster

    out = tmp_path / "tables"
    job = jobs.start_streaming(spark, bootstrap, out, out / "_checkpoints",
                               trigger="1 second")
    log = tmp_path / "generate.log"
    with open(log, "wb") as sink:
        generator = subprocess.Popen(_generator_argv(bootstrap), stdin=subprocess.DEVNULL,
                                     stdout=sink, stderr=subprocess.STDOUT,
                                     start_new_session=True, env=pipeline_env(),
                                     cwd=tmp_path)
    try:
        deadline = time.monotonic() + LANDING_TIMEOUT_S
        while _landed(job) == 0:  # mid-stream: the job has read some records
            assert job.failed() is None, job.failed()
            assert generator.poll() is None, f"generator exited early:\n{_tail(log)}"
            assert time.monotonic() < deadline, "no records landed"
            time.sleep(0.2)

        victim = cluster.leader(gen.ACTIVITY_TOPIC, 0)
        cluster.kill(victim)
        cluster.wait_for(lambda: cluster.leader(gen.ACTIVITY_TOPIC, 0) not in (victim, -1),
                         SESSION_TIMEOUT_MS / 1000 + 30, "a new leader of activity-0")
        time.sleep(3)  # reads and writes go on with two brokers
        assert generator.poll() is None, "the generator was done before the restart: " \
            "the fault did not land mid-stream"
        assert job.failed() is None, job.failed()
        cluster.start_broker(victim)

        assert generator.wait(PROCESS_TIMEOUT_S) == 0, _tail(log)
        jobs.wait_until_processed(job, timeout_s=PROCESS_TIMEOUT_S)
    finally:
        job.stop()
        stop_group(generator)

    generated = _generated()
    assert f"{len(generated.activity)} activity events" in _tail(log)
    assert_events_exactly_once(spark, out, generated)
    assert_aggregates_match(spark, out, generated)
    _assert_stats_once(bootstrap, generated)
    cluster.wait_for_full_isr(gen.ACTIVITY_TOPIC, PARTITIONS, 90)  # the victim caught up


def _assert_stats_once(bootstrap: str, generated: gen.Generated) -> None:
    """activity-stats holds every window of every aggregate once (read_committed)."""
    by_key: dict[str, dict] = {}
    for key, value in read_topic(bootstrap, gen.STATS_TOPIC):
        row = json.loads(value)
        assert key not in by_key, f"{key} written twice"
        by_key[key] = row
    for table, (compute, _) in EXPECTED.items():
        got = sum(1 for row in by_key.values() if row["table"] == table)
        assert got == len(compute(generated)), table
