"""``odradek pipeline``: the log-processing pipeline on Spark from the command line.

- ``odradek pipeline run``: end to end on embedded defaults. Starts a broker
  (``odradek serve`` on 127.0.0.1 and a free port, data in a temporary directory) unless
  ``--bootstrap-server`` names one, starts Spark in local mode, starts the streaming job,
  produces a simulated run of web activity and service metrics while it runs, waits until
  every event is processed and every window emitted, stops, and prints the tables.
- ``odradek pipeline generate``: produce a simulated run to a broker.
- ``odradek pipeline stream``: run the streaming job against a broker until interrupted
  (or, with ``--until-processed``, until it has processed everything). It runs under
  ``spark-submit`` too: ``spark-submit --master spark://HOST:PORT .../odradek/__main__.py
  pipeline stream ...`` keeps spark-submit's master.
- ``odradek pipeline backfill``: load an offset or time range of the topics into Parquet.
- ``odradek pipeline show``: print the tables of an output directory.

Spark and the pipeline are imported inside the functions: the rest of the command line
works without pyspark.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

DEFAULT_OUT = "odradek-pipeline"
BROKER_START_TIMEOUT_S = 60.0  # `odradek serve` prints its address within this
BROKER_STOP_TIMEOUT_S = 30.0  # and exits this long after SIGTERM, or is killed
_OURS = "_checkpoints"  # an output directory with this inside was written by the pipeline


class PipelineCommandError(Exception):
    """A failure explained to the user in one line."""


def add_pipeline_command(sub: Any) -> None:
    pipeline = sub.add_parser("pipeline", help="the log-processing pipeline on Spark")
    cmds = pipeline.add_subparsers(dest="pipeline_command", metavar="SUBCOMMAND")

    def common_generator(p: argparse.ArgumentParser) -> None:
        p.add_argument("--duration", type=float, default=300.0, metavar="SECONDS",
                       help="simulated time the events cover (default 300)")
        p.add_argument("--sessions-per-second", type=float, default=1.5, metavar="N",
                       help="user sessions starting per simulated second (default 1.5)")
        p.add_argument("--users", type=int, default=400, help="distinct users (default 400)")
        p.add_argument("--seed", type=int, default=7, help="random seed (default 7)")

    def common_spark(p: argparse.ArgumentParser) -> None:
        p.add_argument("--master", default=None,
                       help="Spark master (default: spark-submit's, else local[2])")

    run = cmds.add_parser("run", help="end to end: broker, generator, streaming job, tables")
    common_generator(run)
    common_spark(run)
    run.add_argument("--bootstrap-server", default=None, metavar="HOST:PORT[,...]",
                     help="use this broker (or cluster: any of its brokers, comma-separated) "
                          "instead of starting one")
    run.add_argument("--out", default=DEFAULT_OUT, metavar="DIR",
                     help=f"where the Parquet tables go (default ./{DEFAULT_OUT}; a previous "
                          "run's output there is replaced)")
    run.add_argument("--partitions", type=int, default=3,
                     help="partitions of the topics it creates (default 3)")
    run.add_argument("--replication-factor", type=int, default=-1, metavar="N",
                     help="replicas of the topics it creates (default: the brokers' "
                          "default.replication.factor)")
    run.add_argument("--timeout", type=float, default=900.0, metavar="SECONDS",
                     help="give up if not done by then (default 900)")
    run.add_argument("--start-ms", type=int, default=None,
                     help="event time of the start, ms since the epoch (default: now - "
                          "duration); with --seed, the same events every time")

    gen = cmds.add_parser("generate", help="produce simulated activity and metrics")
    common_generator(gen)
    gen.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT[,...]")
    gen.add_argument("--partitions", type=int, default=3,
                     help="partitions of the topics it creates (default 3)")
    gen.add_argument("--replication-factor", type=int, default=-1, metavar="N",
                     help="replicas of the topics it creates (default: the brokers' "
                          "default.replication.factor)")
    gen.add_argument("--speedup", type=float, default=None, metavar="X",
                     help="pace records at X times real time (default: as fast as possible)")
    gen.add_argument("--start-ms", type=int, default=None,
                     help="event time of the start, ms since the epoch (default: now - "
                          "duration)")
    gen.add_argument("--no-heartbeats", action="store_true",
                     help="leave out the end-of-run heartbeats that close the last windows")

    stream = cmds.add_parser("stream", help="run the streaming job against a broker")
    common_spark(stream)
    stream.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT[,...]")
    stream.add_argument("--out", required=True, metavar="DIR")
    stream.add_argument("--checkpoint", default=None, metavar="DIR",
                        help="checkpoints (default OUT/_checkpoints)")
    stream.add_argument("--tables", default=None, metavar="T1,T2",
                        help="only these tables (events, page_views, service_health, "
                             "active_users)")
    stream.add_argument("--trigger", default="2 seconds", help="micro-batch interval")
    stream.add_argument("--max-offsets-per-trigger", type=int, default=None, metavar="N")
    stream.add_argument("--no-stats-topic", action="store_true",
                        help="write the aggregates to Parquet only")
    stream.add_argument("--until-processed", action="store_true",
                        help="stop once every record is processed and every window emitted")
    stream.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                        help="stop after this long (with --until-processed: fail)")

    back = cmds.add_parser("backfill", help="load a range of the topics into Parquet")
    common_spark(back)
    back.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT[,...]")
    back.add_argument("--out", required=True, metavar="DIR")
    back.add_argument("--topics", default="activity,metrics", metavar="T1,T2")
    back.add_argument("--from-time", type=int, default=None, metavar="MS",
                      help="first record timestamp (ms since the epoch)")
    back.add_argument("--to-time", type=int, default=None, metavar="MS",
                      help="stop at records at or after this timestamp")
    back.add_argument("--starting-offsets", default=None, metavar="JSON",
                      help='Kafka JSON, e.g. {"activity": {"0": 100, "1": -2}}')
    back.add_argument("--ending-offsets", default=None, metavar="JSON")
    back.add_argument("--append", action="store_true",
                      help="append to the tables instead of replacing them")

    show = cmds.add_parser("show", help="print the tables of an output directory")
    common_spark(show)
    show.add_argument("--out", default=DEFAULT_OUT, metavar="DIR")
    show.add_argument("--rows", type=int, default=10)


def run_pipeline_command(args: argparse.Namespace) -> int:
    command = getattr(args, "pipeline_command", None)
    if command is None:
        print("odradek pipeline: give a subcommand: run, generate, stream, backfill, show "
              "(--help for each)", file=sys.stderr)
        return 2
    try:
        import pyspark  # noqa: F401
    except ImportError:
        print("odradek pipeline: needs pyspark and pyarrow (pip install 'odradek[spark]')",
              file=sys.stderr)
        return 1
    from odradek.pipeline.generator import GeneratorError
    from odradek.pipeline.jobs import PipelineError
    from odradek.spark.client import KafkaSourceError
    from odradek.spark.options import OptionError

    handler = {"run": _run, "generate": _generate, "stream": _stream, "backfill": _backfill,
               "show": _show}[command]
    try:
        return handler(args)
    except (PipelineCommandError, GeneratorError, PipelineError, OptionError,
            KafkaSourceError) as exc:
        print(f"odradek pipeline {command}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"odradek pipeline {command}: interrupted", file=sys.stderr)
        return 130


# --- the embedded broker ---------------------------------------------------------------


@contextmanager
def embedded_broker() -> Iterator[str]:
    """`odradek serve` on 127.0.0.1 and a free port, data in a temporary directory; its
    bootstrap address. Stopped with SIGTERM (SIGKILL if it hangs) by its pid
    (``odradek.devcluster.BrokerProcess``), dying with us if we are killed."""
    from odradek.devcluster import BrokerProcess, ClusterError

    with tempfile.TemporaryDirectory(prefix="odradek-pipeline-broker-") as tmp:
        broker = BrokerProcess(None, Path(tmp) / "data", Path(tmp) / "broker.log",
                               die_with_parent=True)
        try:
            try:
                broker.start()
                broker.wait_ready(time.monotonic() + BROKER_START_TIMEOUT_S)
            except ClusterError as exc:
                raise PipelineCommandError(
                    f"the embedded broker did not start:\n{exc}") from None
            yield broker.bootstrap
        finally:
            with contextlib.suppress(ClusterError):  # it was killed; nothing more to do
                broker.stop(BROKER_STOP_TIMEOUT_S)


# --- subcommands -------------------------------------------------------------------------


def _config(args: argparse.Namespace, start_ms: int | None = None) -> Any:
    from odradek.pipeline.generator import GeneratorConfig

    config = GeneratorConfig(seed=args.seed, users=args.users, duration_s=args.duration,
                             sessions_per_s=args.sessions_per_second, start_ms=start_ms)
    config.check()
    return config


def _say(text: str) -> None:
    print(f"[pipeline] {text}", flush=True)


def _prepare_out(out: Path) -> None:
    """A previous run's output is replaced; any other non-empty directory is refused."""
    if out.exists() and any(out.iterdir()):
        if not (out / _OURS).is_dir():
            raise PipelineCommandError(f"{out} is not empty and holds no pipeline output: "
                                       "give another --out")
        _say(f"replacing the previous run's output in {out}")
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)


def _run(args: argparse.Namespace) -> int:
    from odradek.pipeline import generator as gen
    from odradek.pipeline import jobs

    config = _config(args, args.start_ms)
    out = Path(args.out).resolve()
    _prepare_out(out)
    began = time.monotonic()
    with _broker(args.bootstrap_server) as bootstrap:
        partitions = gen.ensure_topics(bootstrap, args.partitions,
                                       replication_factor=args.replication_factor)
        topics = ", ".join(f"{t} ({n} partitions)" for t, n in partitions.items())
        _say(f"broker {bootstrap}; topics {topics}")
        generated = gen.generate(config)
        _say(f"simulated {config.duration_s:g}s of a site: {len(generated.activity)} activity "
             f"events, {len(generated.metrics)} service requests")
        spark = jobs.spark_session(args.master, extra={"spark.ui.enabled": "false"})
        spark.sparkContext.setLogLevel("ERROR")
        _say(f"Spark {spark.version} on {spark.sparkContext.master}; starting the streaming "
             "job")
        job = jobs.start_streaming(spark, bootstrap, out, out / _OURS)
        try:
            # Produce while the job runs, as collectors would: the job sees the records
            # arrive over several micro-batches.
            count = gen.produce(bootstrap, generated)
            _say(f"produced {count} records; waiting for the job to process them")
            jobs.wait_until_processed(job, timeout_s=args.timeout)
        finally:
            job.stop()
        _say(f"done in {time.monotonic() - began:.0f}s; tables in {out}\n")
        print(jobs.summary(spark, out))
        spark.stop()
    return 0


@contextmanager
def _broker(bootstrap: str | None) -> Iterator[str]:
    if bootstrap:
        yield bootstrap
        return
    with embedded_broker() as started:
        yield started


def _generate(args: argparse.Namespace) -> int:
    from odradek.pipeline import generator as gen

    config = _config(args, args.start_ms)
    gen.ensure_topics(args.bootstrap_server, args.partitions,
                      replication_factor=args.replication_factor)
    generated = gen.generate(config)
    count = gen.produce(args.bootstrap_server, generated, speedup=args.speedup,
                        end_with_heartbeats=not args.no_heartbeats)
    _say(f"produced {count} records ({len(generated.activity)} activity events, "
         f"{len(generated.metrics)} service requests) to {args.bootstrap_server}")
    return 0


def _stream(args: argparse.Namespace) -> int:
    from odradek.pipeline import jobs

    out = Path(args.out).resolve()
    checkpoint = Path(args.checkpoint).resolve() if args.checkpoint else out / _OURS
    tables = tuple(t.strip() for t in args.tables.split(",")) if args.tables else jobs.TABLES
    spark = jobs.spark_session(args.master)
    spark.sparkContext.setLogLevel("ERROR")
    job = jobs.start_streaming(spark, args.bootstrap_server, out, checkpoint,
                               trigger=args.trigger,
                               max_offsets_per_trigger=args.max_offsets_per_trigger,
                               tables=tables,
                               stats_topic=None if args.no_stats_topic else jobs.STATS_TOPIC)
    _say(f"streaming {', '.join(job.queries)} on {spark.sparkContext.master} into {out}")
    try:
        if args.until_processed:
            jobs.wait_until_processed(job, timeout_s=args.timeout or 900.0)
            _say("processed everything")
            return 0
        deadline = None if args.timeout is None else time.monotonic() + args.timeout
        while deadline is None or time.monotonic() < deadline:
            problem = job.failed()
            if problem:
                raise PipelineCommandError(problem)
            time.sleep(1)
        return 0
    finally:
        job.stop()
        spark.stop()


def _backfill(args: argparse.Namespace) -> int:
    from odradek.pipeline import jobs

    options: dict[str, str] = {}
    if args.from_time is not None:
        options["startingTimestamp"] = str(args.from_time)
    if args.to_time is not None:
        options["endingTimestamp"] = str(args.to_time)
    if args.starting_offsets is not None:
        options["startingOffsets"] = args.starting_offsets
    if args.ending_offsets is not None:
        options["endingOffsets"] = args.ending_offsets
    topics = tuple(t.strip() for t in args.topics.split(",") if t.strip())
    for name in ("startingOffsets", "endingOffsets"):
        if name in options and len(topics) > 1:
            try:
                named = set(json.loads(options[name]))
            except json.JSONDecodeError as exc:
                raise PipelineCommandError(f"--{_dash(name)} is not JSON: {exc}") from None
            topics = tuple(t for t in topics if t in named)
    spark = jobs.spark_session(args.master)
    spark.sparkContext.setLogLevel("ERROR")
    try:
        counts = jobs.backfill(spark, args.bootstrap_server, args.out, range_options=options,
                               topics=topics, mode="append" if args.append else "overwrite")
    finally:
        spark.stop()
    _say("backfilled " + ", ".join(f"{table}: {n} rows" for table, n in counts.items())
         + f" into {Path(args.out).resolve()}")
    return 0


def _dash(name: str) -> str:
    return re.sub(r"([A-Z])", lambda m: "-" + m.group(1).lower(), name)


def _show(args: argparse.Namespace) -> int:
    from odradek.pipeline import jobs

    spark = jobs.spark_session(args.master, extra={"spark.ui.enabled": "false"})
    spark.sparkContext.setLogLevel("ERROR")
    try:
        print(jobs.summary(spark, args.out, rows=args.rows))
    finally:
        spark.stop()
    return 0
