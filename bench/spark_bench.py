"""Spark benchmark: rows per second read into Spark from a topic with the `odradek` data
source, beside a plain confluent-kafka consumer reading the same topic and Spark reading
the same rows from Parquet, in one run.

    .venv/bin/python bench/spark_bench.py [--records 5000000] [--partitions 4]
        [--value-bytes 100] [--master local[2]] [--rounds 2] [--out bench/results/spark.json]

What it does: starts `odradek serve` (127.0.0.1, a free port, a temporary data directory),
produces `--records` records (keys `k000`..`k099`, values of `--value-bytes` bytes) to one
topic, then measures:

- `consumer`: one confluent-kafka Consumer, the partitions assigned from offset 0, reading
  with `consume(10000)` until every record is in (key, value, offset, timestamp touched);
- `spark count`: `spark.read.format("odradek")...load().count()` (the native reader:
  Fetch responses decoded straight into Arrow);
- `spark agg`: `groupBy("key").agg(count, sum(length(value)))` on the same read;
- the same two with `reader=librdkafka` (one librdkafka Message per record), for the
  reader's own before/after in one run;
- `parquet count` / `parquet agg`: the same two queries on the same rows written to
  Parquet first (a Parquet count is answered from the footers, so `parquet agg`, which
  reads the columns, is the fair comparison).

The consumer is timed after one untimed run (page cache). The Spark queries run in rounds,
each query once per round in the order above: one untimed warm-up round (Python workers,
and the JVM's JIT compiling the aggregation all the queries share: a Parquet aggregation
ran 1.1, 2.0, then 3.0 M rows/s in its first three runs of a session), then `--rounds`
timed ones; each figure is the median of rows / wall seconds over the timed rounds. The
machine's load average is recorded beside the results: figures compare within one run.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from _common import finish, machine_info, machine_line, note
from odradek.cli.pipeline import embedded_broker

TOPIC = "spark-bench"
KEYS = 100


def produce(bootstrap: str, records: int, partitions: int, value_bytes: int) -> float:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, partitions, 1)])[TOPIC].result(timeout=60)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20,
                         "batch.num.messages": 10000, "queue.buffering.max.messages": 500000,
                         "enable.idempotence": True})
    pad = b"x" * value_bytes
    keys = [b"k%03d" % i for i in range(KEYS)]
    began = time.perf_counter()
    for i in range(records):
        value = (b"%d|" % i + pad)[:value_bytes]
        while True:
            try:
                producer.produce(TOPIC, value, keys[i % KEYS], partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 100_000 == 0:
            producer.poll(0)
            if i:
                note(f"  produced {i:,}")
    if producer.flush(300) != 0:
        raise SystemExit("records not acknowledged")
    return time.perf_counter() - began


def consumer_read(bootstrap: str, records: int, partitions: int) -> float:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "spark-bench",
                         "enable.auto.commit": False, "fetch.max.bytes": 52428800,
                         "max.partition.fetch.bytes": 10485760})
    consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(partitions)])
    began = time.perf_counter()
    seen = 0
    size = 0
    while seen < records:
        for msg in consumer.consume(10_000, timeout=1.0):
            if msg.error() is not None:
                continue
            # Touch what a Spark row carries, so the consumer does comparable work.
            size += len(msg.value()) + len(msg.key()) + msg.offset() * 0
            msg.timestamp()
            seen += 1
    elapsed = time.perf_counter() - began
    consumer.close()
    return elapsed


def timed(run: Any) -> tuple[float, Any]:
    began = time.perf_counter()
    result = run()
    return time.perf_counter() - began, result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=5_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--rounds", type=int, default=2,
                        help="timed rounds of every query, after one warm-up round (2)")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "spark.json"))
    args = parser.parse_args()
    command = "bench/spark_bench.py " + " ".join(sys.argv[1:])

    from pyspark.sql import functions as F

    from odradek.pipeline.jobs import spark_session

    machine = machine_info(spark_master=args.master)
    results: dict[str, Any] = {"command": f".venv/bin/python {command}".strip(),
                               "records": args.records, "partitions": args.partitions,
                               "value_bytes": args.value_bytes, "machine": machine,
                               "figures": {}}
    figures = results["figures"]
    with embedded_broker() as bootstrap, tempfile.TemporaryDirectory() as tmp:
        note(f"broker {bootstrap}; producing {args.records:,} records")
        seconds = produce(bootstrap, args.records, args.partitions, args.value_bytes)
        figures["produce"] = round(args.records / seconds)
        note(f"produced at {figures['produce']:,} records/s")

        consumer_read(bootstrap, args.records, args.partitions)  # warm-up: page cache
        seconds = consumer_read(bootstrap, args.records, args.partitions)
        figures["consumer"] = round(args.records / seconds)
        note(f"consumer: {figures['consumer']:,} rows/s")

        spark = spark_session(args.master, app="odradek-spark-bench",
                              extra={"spark.ui.enabled": "false",
                                     "spark.driver.memory": "2g"})
        spark.sparkContext.setLogLevel("ERROR")
        results["spark_version"] = spark.version
        def kafka(reader: str = "native") -> Any:
            return (spark.read.format("odradek").option("kafka.bootstrap.servers", bootstrap)
                    .option("subscribe", TOPIC).option("reader", reader).load())

        def agg(df: Any) -> Any:
            return (df.groupBy("key").agg(F.count("*").alias("n"),
                                          F.sum(F.length("value")).alias("bytes")).collect())

        parquet = os.path.join(tmp, "rows.parquet")
        kafka().write.parquet(parquet)
        queries = {
            "spark count": lambda: kafka().count(),
            "spark agg": lambda: agg(kafka()),
            "spark count, librdkafka reader": lambda: kafka("librdkafka").count(),
            "spark agg, librdkafka reader": lambda: agg(kafka("librdkafka")),
            "parquet count": lambda: spark.read.parquet(parquet).count(),
            "parquet agg": lambda: agg(spark.read.parquet(parquet)),
        }
        # Rounds run every query once, in turn: the first round is the warm-up (Python
        # workers started, the JVM's JIT compiling the aggregation every query shares),
        # and each query's figure is its median over the timed rounds.
        rates: dict[str, list[int]] = {name: [] for name in queries}
        for round_no in range(args.rounds + 1):
            for name, run in queries.items():
                seconds, result = timed(run)
                rows = result if isinstance(result, int) else sum(r.n for r in result)
                assert rows == args.records, (name, rows)
                if round_no:
                    rates[name].append(round(args.records / seconds))
                note(f"round {round_no or 'warm-up'}: {name}: "
                     f"{args.records / seconds:,.0f} rows/s ({seconds:.2f}s)")
        for name, values in rates.items():
            figures[name] = round(statistics.median(values))
        results["rounds"] = rates
        spark.stop()
        shutil.rmtree(parquet, ignore_errors=True)

    goal_consumer = figures["spark count"] >= figures["consumer"]
    goal_parquet = figures["spark agg"] * 3 >= figures["parquet agg"]
    results["goals"] = {"spark count >= consumer": goal_consumer,
                        "spark agg within 3x of parquet agg": goal_parquet}
    lines = [
        f"{args.records:,} records of {args.value_bytes} bytes in {args.partitions} "
        f"partitions; Spark {results['spark_version']} {args.master}; "
        + machine_line(machine, f"load average {machine['loadavg_start'][0]} at start"),
        "",
        "| reader | rows/s |",
        "|---|---|",
        *(f"| {name} | {value:,} |" for name, value in figures.items()),
    ]
    return finish(results, "\n".join(lines), args.out)


if __name__ == "__main__":
    raise SystemExit(main())
