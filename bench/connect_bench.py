"""Kafka Connect and MirrorMaker 2 benchmark (issue 33): Connect's own runtime moving
records through ``odradek serve`` against the same through Apache Kafka 4.4, side by side
in one run.

Two parts, each against fresh brokers (``broker_bench.Broker``: ``odradek serve`` with
``group.initial.rebalance.delay.ms=0``, which the Apache Kafka launcher sets too; and
Apache Kafka 4.4 as one KRaft node, ``-Xmx1G``) on free ports of 127.0.0.1, the two
kinds alternating run by run (Odradek, Kafka, Kafka, Odradek, ...: the order reversed
every other round):

1. FileStream pipeline (``--parts pipeline``): one Kafka Connect 4.3.1 worker in
   distributed mode (``odradek.devcluster.connect.ConnectWorker``: its internal topics
   on the broker, RF 1, ``offset.flush.interval.ms=1000``), a file of ``--records``
   lines of ``--line-bytes`` bytes (newline included), a ``FileStreamSourceConnector``
   reading it into a 1-partition topic (``batch.size`` ``--source-batch``) and a
   ``FileStreamSinkConnector`` writing that topic to another file. Before the timed run
   an untimed pipeline of ``--warm-up-records`` lines on other connectors and another
   topic warms the worker's and Kafka's JIT. Timed from the first connector's creation
   (PUT .../config: the sink's, then the source's) until the sink file holds every line
   (its size, polled every 20 ms); the sink file must then equal the source's. Measured:
   records/s, and from the first line in the sink file (the connectors' start-up left
   out); the broker's CPU seconds per million records (``proc_cpu_s`` of its pid over
   the timed part) and, for context, the worker JVM's.
2. MirrorMaker 2 (``--parts mirror``): two brokers of one kind, a source and a target.
   ``--records`` records of ``--value-bytes`` bytes produced (confluent-kafka, acks=1,
   record i to partition i mod 3) into a 3-partition topic on the source; each broker
   warmed by an untimed produce and consume of ``--warm-up-records`` records on a topic
   MirrorMaker does not copy. Then MirrorMaker 2's dedicated driver
   (``odradek.devcluster.connect.MirrorMaker``, ``connect-mirror-maker.sh``'s main
   class) with an mm2.properties for source -> target, that topic only, MirrorMaker's
   defaults otherwise (one task, ``offset.lag.max`` 100, checkpoints and heartbeats on;
   internal topics RF 1; ACL sync off: neither broker has an authorizer). Timed from
   MirrorMaker's spawn (its JVM start-up, the Connect herder's start, its topics, the
   task's start included) until ``source.<topic>`` on the target holds every record (the
   sum of its high watermarks, polled every 100 ms); exactly ``--records`` then. Also
   from the first record on the target. Measured: records/s, the target's and the
   source's CPU per million records (and their sum), MirrorMaker's own CPU for context.

Reported: per run and as medians over rounds; the ratios Odradek / Kafka (medians of the
per-round ratios) against issue 33's targets, records/s >= 1.0x and broker CPU per record
<= 0.5x, met or not. The WARN and ERROR lines of every Connect/MirrorMaker log and ERROR
lines and tracebacks of the brokers' logs are counted and the distinct messages kept in
the JSON. ``--profile DIR`` records the Odradek brokers with py-spy over each timed part
of the last round (MirrorMaker's from the first record copied; ``bench/_pyspy.py``,
``.venv/bin/pip install py-spy``) and prints where their busy samples went.

Run: ``.venv/bin/python bench/connect_bench.py [--records 500000] [--rounds 3]
[--parts pipeline,mirror]`` (Java 17+; Connect's jars in .cache/connect/lib and Kafka's
in .cache/jvm/lib: ``bash scripts/fetch_jvm.sh``). It prints markdown tables and writes
``bench/results/connect.json``. Every process it starts is stopped by its pid, after an
error or a Ctrl-C too.
"""

from __future__ import annotations

import argparse
import filecmp
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import finish, machine_line, note, proc_cpu_s
from _pyspy import profile_summary, start_py_spy
from broker_bench import KAFKA, ODRADEK, Broker, broker_machine_info
from odradek.devcluster.apache_kafka import KAFKA_VERSION, kafka_jars_present
from odradek.devcluster.connect import (
    CONNECT_VERSION,
    ConnectWorker,
    MirrorMaker,
    connect_jars_present,
    mirror_maker_settings,
)

RESULTS = Path(__file__).parent / "results" / "connect.json"
PIPELINE, MIRROR = "pipeline", "mirror"
PARTS = (PIPELINE, MIRROR)
SHORT = {ODRADEK: "Odradek", KAFKA: f"Apache Kafka {KAFKA_VERSION}"}
FILE_SOURCE = "org.apache.kafka.connect.file.FileStreamSourceConnector"
FILE_SINK = "org.apache.kafka.connect.file.FileStreamSinkConnector"
PIPELINE_TOPIC = "connect-bench"
MIRROR_TOPIC = "mirror-bench"
MIRROR_PARTITIONS = 3
WARM_TOPIC = "bench-warm-up"
SOURCE, TARGET = "source", "target"  # MirrorMaker's cluster aliases
STALL_S = 120.0  # no progress for this long (start-up included): the run failed
RATE_TARGET, CPU_TARGET = 1.0, 0.5  # issue 33: Odradek / Kafka


class ConnectBroker(Broker):
    """broker_bench's broker; Odradek without its default 3 s delay of a group's first
    rebalance (the Apache Kafka launcher sets ``group.initial.rebalance.delay.ms=0``)."""

    extra_args = ("--override", "group.initial.rebalance.delay.ms=0")


# --- logs -----------------------------------------------------------------------------

_LEVEL = re.compile(r"\b(WARN|ERROR)\b")
_STAMP = re.compile(r"^\S+ ")  # slf4j-simple's HH:mm:ss.SSS


def log_findings(path: Path, *, levels: tuple[str, ...] = ("WARN", "ERROR")
                 ) -> dict[str, Any]:
    """The WARN/ERROR lines of a Connect or broker log (and Python tracebacks), counted,
    and the distinct messages (digits masked) with how often each came."""
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return {"missing": str(path)}
    counts: Counter[str] = Counter()
    messages: Counter[str] = Counter()
    for line in lines:
        m = _LEVEL.search(line)
        if line.startswith("Traceback"):
            counts["traceback"] += 1
            messages["Traceback"] += 1
        elif m and m.group(1) in levels:
            counts[m.group(1)] += 1
            text = re.sub(r"\d+", "N", _STAMP.sub("", line, count=1))[:300]
            messages[text] += 1
    return {"counts": dict(counts),
            "messages": [{"count": c, "line": t} for t, c in messages.most_common(15)]}


def broker_findings(broker: Broker) -> dict[str, Any]:
    return log_findings(Path(broker.log_path), levels=("ERROR",))


def keep_logs(run_dir: Path, keep: Path | None) -> None:
    """``--keep-logs``: the run's logs (brokers', Connect's, MirrorMaker's) into ``keep``."""
    if keep is None:
        return
    for path in run_dir.rglob("*"):
        if (path.is_file() and path.suffix in (".log", ".out", ".properties")
                and "data" not in path.relative_to(run_dir).parts):  # not log segments
            to = keep / run_dir.name / path.relative_to(run_dir)
            to.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, to)


# --- py-spy ---------------------------------------------------------------------------


class Spy:
    """py-spy recording one Odradek broker until ``stop()`` (SIGINT: it writes what it
    has), or nothing when ``out`` is None or the broker is Kafka."""

    def __init__(self, broker: Broker, out: Path | None) -> None:
        self.out = out if broker.kind == ODRADEK else None
        self.proc: subprocess.Popen[bytes] | None = None
        if self.out is not None:
            self.out.parent.mkdir(parents=True, exist_ok=True)
            self.proc = start_py_spy(broker.pid, 600, self.out)

    def stop(self) -> dict[str, Any] | None:
        if self.proc is None or self.out is None:
            return None
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGINT)
        try:
            self.proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return None
        if not self.out.exists():
            return None
        summary = profile_summary(self.out)
        note(f"  py-spy ({self.out}): {summary['samples']} busy samples; top self: "
             + "; ".join(f"{f['function']} {f['self_pct']}%" for f in summary["top_self"][:8]))
        return summary


# --- part 1: FileStream pipeline --------------------------------------------------------


def write_lines(path: Path, records: int, line_bytes: int, prefix: str = "") -> None:
    """``records`` lines of ``line_bytes`` bytes each, newline included, numbered."""
    fill = line_bytes - 1 - 10 - len(prefix)
    if fill < 1:
        raise SystemExit(f"--line-bytes {line_bytes} is too short")
    pad = "x" * fill
    with open(path, "w") as f:
        step = 100_000
        for start in range(0, records, step):
            f.write("".join(f"{prefix}{i:010d}{pad}\n"
                            for i in range(start, min(records, start + step))))


def make_topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)


def file_connectors(worker: ConnectWorker, name: str, source: Path, sink: Path, topic: str,
                    source_batch: int) -> None:
    """The sink first (it waits for the topic's records), then the source."""
    worker.rest.put_config(f"{name}-sink", {
        "connector.class": FILE_SINK, "file": str(sink), "topics": topic, "tasks.max": "1"})
    worker.rest.put_config(f"{name}-source", {
        "connector.class": FILE_SOURCE, "file": str(source), "topic": topic, "tasks.max": "1",
        "batch.size": str(source_batch)})


def wait_file(path: Path, size: int, alive: Callable[[], None], what: str,
              poll_s: float = 0.02) -> float | None:
    """Until ``path`` is ``size`` bytes; returns when it first had any (monotonic)."""
    first: float | None = None
    last_size, last_change = -1, time.monotonic()
    while True:
        try:
            now_size = path.stat().st_size
        except FileNotFoundError:
            now_size = 0
        now = time.monotonic()
        if now_size and first is None:
            first = now
        if now_size >= size:
            if now_size > size:
                raise RuntimeError(f"{what}: {now_size:,} bytes, more than {size:,}")
            return first
        if now_size != last_size:
            last_size, last_change = now_size, now
        elif now - last_change > STALL_S:
            raise RuntimeError(f"{what}: stuck at {now_size:,} of {size:,} bytes")
        alive()
        time.sleep(poll_s)


def pipeline_run(kind: str, args: argparse.Namespace, work: Path, lines: Path,
                 warm_lines: Path, profile: Path | None) -> dict[str, Any]:
    run_dir = Path(tempfile.mkdtemp(prefix=f"pipeline-{kind}-", dir=work))
    broker = ConnectBroker(kind, str(run_dir))
    worker: ConnectWorker | None = None
    try:
        make_topic(broker.bootstrap, PIPELINE_TOPIC, 1)
        make_topic(broker.bootstrap, WARM_TOPIC, 1)
        worker = ConnectWorker(run_dir / "worker", broker.bootstrap, group_id="connect-bench")
        worker.start()
        started = worker

        def alive() -> None:
            assert started.process is not None
            if started.process.poll() is not None:
                raise RuntimeError(f"Connect worker exited\n{started.output()}")

        if args.warm_up_records:
            warm_sink = run_dir / "warm-sink.txt"
            file_connectors(worker, "warm", warm_lines, warm_sink, WARM_TOPIC,
                            args.source_batch)
            wait_file(warm_sink, warm_lines.stat().st_size, alive, f"{kind} warm-up sink")
            for name in ("warm-source", "warm-sink"):
                worker.rest.delete(name)
        sink = run_dir / "sink.txt"
        spy = Spy(broker, profile)
        cpu0, wcpu0, t0 = broker.cpu_s(), proc_cpu_s(worker.pid), time.monotonic()
        file_connectors(worker, "bench", lines, sink, PIPELINE_TOPIC, args.source_batch)
        first = wait_file(sink, lines.stat().st_size, alive, f"{kind} sink")
        t1, cpu1, wcpu1 = time.monotonic(), broker.cpu_s(), proc_cpu_s(worker.pid)
        profiled = spy.stop()
        if not filecmp.cmp(lines, sink, shallow=False):
            raise RuntimeError(f"{kind}: the sink file differs from the source file")
        n = args.records
        out: dict[str, Any] = {
            "records": n, "seconds": t1 - t0, "records_per_s": n / (t1 - t0),
            "first_record_s": (first - t0) if first else None,
            "steady_records_per_s": n / (t1 - first) if first and t1 > first else None,
            "broker_cpu_s": cpu1 - cpu0, "broker_cpu_s_per_m": (cpu1 - cpu0) / n * 1e6,
            "worker_cpu_s": wcpu1 - wcpu0, "worker_cpu_s_per_m": (wcpu1 - wcpu0) / n * 1e6,
            "worker_startup_s": worker.startup_seconds, "broker_startup_s": broker.startup_s,
        }
        if profiled is not None:
            out["profile"] = profiled
        note(f"{kind} pipeline: {out['records_per_s']:,.0f} records/s "
             f"({out['seconds']:.1f} s, first line after {out['first_record_s'] or 0:.1f} s), "
             f"broker {out['broker_cpu_s_per_m']:.2f} CPU s/M, "
             f"worker {out['worker_cpu_s_per_m']:.2f} CPU s/M")
        worker.stop()  # its log complete, shutdown included
        out["worker_log"] = log_findings(worker.log_file)
        out["broker_log"] = broker_findings(broker)
        return out
    finally:
        if worker is not None:
            worker.stop()
        keep_logs(run_dir, args.keep_logs)
        broker.stop()
        shutil.rmtree(run_dir, ignore_errors=True)


# --- part 2: MirrorMaker 2 --------------------------------------------------------------


def produce(bootstrap: str, topic: str, records: int, value_bytes: int,
            partitions: int) -> None:
    errors: list[str] = []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 5,
                         "batch.num.messages": 10_000,
                         "error_cb": lambda err: errors.append(str(err))})
    value = os.urandom(value_bytes)
    for i in range(records):
        while True:
            try:
                producer.produce(topic, value, partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(120) or errors:
        raise RuntimeError(f"produce to {bootstrap}: not all acknowledged; {errors[:5]}")


def warm_up(broker: Broker, records: int, value_bytes: int) -> None:
    """An untimed produce and consume of ``records`` (the JVM's JIT, Odradek's caches)."""
    if not records:
        return
    make_topic(broker.bootstrap, WARM_TOPIC, 1)
    produce(broker.bootstrap, WARM_TOPIC, records, value_bytes, 1)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "bench-warm-up",
                         "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(WARM_TOPIC, 0, 0)])
        got, deadline = 0, time.monotonic() + STALL_S
        while got < records and time.monotonic() < deadline:
            got += sum(1 for m in consumer.consume(10_000, 0.5) if m.error() is None)
    finally:
        consumer.close()


def mm2_settings(source: str, target: str) -> dict[str, object]:
    """source -> target, ``MIRROR_TOPIC`` only, MirrorMaker 2's defaults otherwise but for
    single-broker clusters (RF 1) without an authorizer (no ACL sync)."""
    return mirror_maker_settings((SOURCE, source), (TARGET, target), MIRROR_TOPIC, extra={
        "sync.topic.acls.enabled": "false",
        # What MirrorMaker's start-up advises (every plugin on the classpath has a
        # manifest): seconds less of scanning jars before the first record.
        "plugin.discovery": "service_load",
    })


class Watermarks:
    """The sum of a topic's high watermarks on a broker (one ListOffsets request for all
    its partitions), 0 until it exists."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        self.topic, self.partitions = topic, partitions
        self.admin = AdminClient({"bootstrap.servers": bootstrap})
        self.exists = False

    def total(self) -> int:
        if not self.exists:
            topics = self.admin.list_topics(timeout=10).topics
            if self.topic not in topics or len(topics[self.topic].partitions) < self.partitions:
                return 0
            self.exists = True
        wanted = {TopicPartition(self.topic, p): OffsetSpec.latest()
                  for p in range(self.partitions)}
        try:
            return sum(f.result(10).offset
                       for f in self.admin.list_offsets(wanted, request_timeout=10).values())
        except KafkaException:
            return 0

    def close(self) -> None:
        """The client goes now, not at garbage collection (when the brokers have stopped
        and librdkafka would log its failed reconnections)."""
        del self.admin


def mirror_run(kind: str, args: argparse.Namespace, work: Path,
               profile: Path | None) -> dict[str, Any]:
    run_dir = Path(tempfile.mkdtemp(prefix=f"mirror-{kind}-", dir=work))
    brokers: list[Broker] = []
    mm: MirrorMaker | None = None
    watch: Watermarks | None = None
    try:
        brokers.append(ConnectBroker(kind, str(run_dir)))
        brokers.append(ConnectBroker(kind, str(run_dir)))
        source, target = brokers
        make_topic(source.bootstrap, MIRROR_TOPIC, MIRROR_PARTITIONS)
        produce(source.bootstrap, MIRROR_TOPIC, args.records, args.value_bytes,
                MIRROR_PARTITIONS)
        for b in brokers:
            warm_up(b, args.warm_up_records, args.value_bytes)
        watch = Watermarks(target.bootstrap, f"{SOURCE}.{MIRROR_TOPIC}", MIRROR_PARTITIONS)
        spies: list[Spy] = []
        n = args.records
        src0, dst0, t0 = source.cpu_s(), target.cpu_s(), time.monotonic()
        mm = MirrorMaker(run_dir / "mm2", mm2_settings(source.bootstrap, target.bootstrap))
        mm.start()
        assert mm.process is not None
        mm_pid = mm.process.pid
        first: tuple[float, int, float, float, float] | None = None
        got, last, last_change = 0, -1, t0
        while got < n:
            got = watch.total()
            now = time.monotonic()
            if got and first is None:
                first = (now, got, source.cpu_s(), target.cpu_s(), proc_cpu_s(mm_pid))
                # Profiled from here: the copying, not MirrorMaker's start-up (the
                # topics it creates, each API version's first request).
                spies = [Spy(b, None if profile is None else profile.with_name(
                    f"{profile.stem}-{name}{profile.suffix}")) for b, name in
                    zip(brokers, (SOURCE, TARGET), strict=True)]
            if got != last:
                last, last_change = got, now
            elif now - last_change > STALL_S:
                raise RuntimeError(f"{kind} mirror: stuck at {got:,} of {n:,} records\n"
                                   f"{mm.output()}")
            mm.assert_alive()
            if got < n:
                time.sleep(0.1)
        t1, src1, dst1 = time.monotonic(), source.cpu_s(), target.cpu_s()
        mm_cpu = proc_cpu_s(mm_pid)
        profiles = [s.stop() for s in spies]
        if got != n:
            raise RuntimeError(f"{kind} mirror: {got:,} records on the target, not {n:,}")
        assert first is not None
        tf, got_first, srcf, dstf, mmf = first
        steady = n - got_first
        out: dict[str, Any] = {
            "records": n, "seconds": t1 - t0, "records_per_s": n / (t1 - t0),
            "first_record_s": tf - t0,
            "steady_records_per_s": steady / (t1 - tf) if t1 > tf else None,
            "source_cpu_s": src1 - src0, "target_cpu_s": dst1 - dst0,
            "source_cpu_s_per_m": (src1 - src0) / n * 1e6,
            "target_cpu_s_per_m": (dst1 - dst0) / n * 1e6,
            "broker_cpu_s_per_m": (src1 - src0 + dst1 - dst0) / n * 1e6,
            "steady_broker_cpu_s_per_m": ((src1 - srcf + dst1 - dstf) / steady * 1e6
                                          if steady else None),
            "mirror_maker_cpu_s": mm_cpu, "mirror_maker_cpu_s_per_m": mm_cpu / n * 1e6,
            "steady_mirror_maker_cpu_s_per_m": ((mm_cpu - mmf) / steady * 1e6
                                                if steady else None),
            "broker_startup_s": [b.startup_s for b in brokers],
        }
        if any(profiles):
            out["profile"] = dict(zip((SOURCE, TARGET), profiles, strict=True))
        note(f"{kind} mirror: {out['records_per_s']:,.0f} records/s ({out['seconds']:.1f} s, "
             f"first record after {out['first_record_s']:.1f} s, then "
             f"{out['steady_records_per_s'] or 0:,.0f}/s), brokers "
             f"{out['broker_cpu_s_per_m']:.2f} CPU s/M (source "
             f"{out['source_cpu_s_per_m']:.2f}, target {out['target_cpu_s_per_m']:.2f}), "
             f"MirrorMaker {out['mirror_maker_cpu_s_per_m']:.2f}")
        # MirrorMaker's offset syncs (upstream -> downstream offsets, for checkpoints),
        # written to the source as it copies: small produce requests of their own.
        syncs = Watermarks(source.bootstrap, f"mm2-offset-syncs.{TARGET}.internal", 1)
        out["offset_syncs"] = syncs.total()
        syncs.close()
        mm.stop()  # its log complete, shutdown included
        out["mirror_maker_log"] = log_findings(mm.log_file)
        out["source_log"], out["target_log"] = broker_findings(source), broker_findings(target)
        return out
    finally:
        if watch is not None:
            watch.close()
        if mm is not None:
            mm.stop()
        keep_logs(run_dir, args.keep_logs)
        for b in brokers:
            b.stop()
        shutil.rmtree(run_dir, ignore_errors=True)


# --- report ---------------------------------------------------------------------------

# (key, label, higher is better) of the figures compared, per part.
FIGURES = {
    PIPELINE: (("records_per_s", "records/s", True),
               ("steady_records_per_s", "records/s from the first line", True),
               ("broker_cpu_s_per_m", "broker CPU s/M", False),
               ("worker_cpu_s_per_m", "worker CPU s/M (context)", False)),
    MIRROR: (("records_per_s", "records/s", True),
             ("steady_records_per_s", "records/s from the first record", True),
             ("broker_cpu_s_per_m", "brokers' CPU s/M (source + target)", False),
             ("steady_broker_cpu_s_per_m", "brokers' CPU s/M from the first record", False),
             ("source_cpu_s_per_m", "source broker CPU s/M", False),
             ("target_cpu_s_per_m", "target broker CPU s/M", False),
             ("mirror_maker_cpu_s_per_m", "MirrorMaker CPU s/M (context)", False),
             ("steady_mirror_maker_cpu_s_per_m", "MirrorMaker CPU s/M from the first record",
              False),
             ("offset_syncs", "offset syncs MirrorMaker wrote to the source", False)),
}
TARGETS = {
    PIPELINE: (("records_per_s", ">=", RATE_TARGET), ("broker_cpu_s_per_m", "<=", CPU_TARGET)),
    MIRROR: (("records_per_s", ">=", RATE_TARGET),
             ("steady_records_per_s", ">=", RATE_TARGET),
             ("broker_cpu_s_per_m", "<=", CPU_TARGET),
             ("steady_broker_cpu_s_per_m", "<=", CPU_TARGET)),
}


def summarize(rounds: list[dict[str, dict[str, Any]]], parts: Sequence[str]
              ) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for part in parts:
        runs = [r[part] for r in rounds if part in r]
        figures: dict[str, Any] = {}
        for key, _, _ in FIGURES[part]:
            o = [r[ODRADEK][key] for r in runs if r[ODRADEK].get(key) is not None]
            k = [r[KAFKA][key] for r in runs if r[KAFKA].get(key) is not None]
            ratios = [r[ODRADEK][key] / r[KAFKA][key] for r in runs
                      if r[ODRADEK].get(key) and r[KAFKA].get(key)]
            figures[key] = {
                ODRADEK: statistics.median(o) if o else None,
                KAFKA: statistics.median(k) if k else None,
                "ratio": statistics.median(ratios) if ratios else None, "ratios": ratios}
        targets = []
        for key, op, bound in TARGETS[part]:
            ratio = figures[key]["ratio"]
            met = ratio is not None and (ratio >= bound if op == ">=" else ratio <= bound)
            targets.append({"figure": key, "bound": f"{op} {bound}", "ratio": ratio,
                            "met": met})
        out[part] = {"figures": figures, "targets": targets}
    return out


def _num(x: float | None, digits: int = 0) -> str:
    return "-" if x is None else f"{x:,.{digits}f}"


def markdown(results: dict[str, Any]) -> str:
    m = results["machine"]
    lines = [machine_line(m, f"Kafka Connect {CONNECT_VERSION}, Apache Kafka {KAFKA_VERSION}",
                          f"{results['records']:,} records, {results['rounds']} round(s)")]
    titles = {PIPELINE: f"FileStream pipeline, one Connect worker (distributed), "
                        f"{results['line_bytes']}-byte lines, source batch.size "
                        f"{results['source_batch']}",
              MIRROR: f"MirrorMaker 2, source -> target, {MIRROR_PARTITIONS} partitions, "
                      f"{results['value_bytes']}-byte values"}
    for part, summary in results["summary"].items():
        lines += ["", f"**{titles[part]}**", "",
                  "| figure | Odradek | Apache Kafka | Odradek / Kafka (median; rounds) |",
                  "|---|---:|---:|---|"]
        for key, text, _ in FIGURES[part]:
            f = summary["figures"][key]
            digits = 0 if "records" in key or key == "offset_syncs" else 2
            ratios = ", ".join(f"{x:.2f}" for x in f["ratios"])
            lines.append(f"| {text} | {_num(f[ODRADEK], digits)} | {_num(f[KAFKA], digits)} "
                         f"| {_num(f['ratio'], 2)}x ({ratios}) |")
        lines.append("")
        label = {key: text for key, text, _ in FIGURES[part]}  # figure -> its label
        lines.append("Issue 33's targets, Odradek / Kafka: " + "; ".join(
            f"{label[t['figure']]} {t['bound']}x: {_num(t['ratio'], 2)}x, "
            f"{'met' if t['met'] else 'NOT met'}" for t in summary["targets"]))
    return "\n".join(lines)


# --- main -----------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--records", type=int, default=500_000,
                   help="lines through the pipeline; records MirrorMaker copies")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--parts", default=",".join(PARTS),
                   help="comma-separated: pipeline, mirror")
    p.add_argument("--line-bytes", type=int, default=100,
                   help="bytes per line of the FileStream source file, newline included")
    p.add_argument("--value-bytes", type=int, default=100, help="MirrorMaker's records")
    p.add_argument("--source-batch", type=int, default=20_000,
                   help="FileStreamSourceConnector batch.size (its default: 2000)")
    p.add_argument("--warm-up-records", type=int, default=50_000,
                   help="untimed records before each timed part (0: none)")
    p.add_argument("--profile", type=Path, default=None,
                   help="directory for py-spy profiles of the Odradek brokers (last round)")
    p.add_argument("--keep-logs", type=Path, default=None,
                   help="copy every run's logs (brokers, worker, MirrorMaker) here")
    p.add_argument("--dir", default=None, help="where brokers' data and the files go")
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    args.parts = [x for x in args.parts.split(",") if x]
    if not set(args.parts) <= set(PARTS):
        p.error(f"--parts: one or more of {', '.join(PARTS)}")
    return args


def _terminated(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)  # the finally blocks stop every process by its pid


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if not connect_jars_present() or not kafka_jars_present():
        raise SystemExit("Kafka Connect's or Apache Kafka's jars are missing: "
                         "run bash scripts/fetch_jvm.sh")
    signal.signal(signal.SIGTERM, _terminated)
    machine = broker_machine_info()
    began = time.time()
    rounds: list[dict[str, dict[str, Any]]] = []
    with tempfile.TemporaryDirectory(prefix="connect-bench-", dir=args.dir) as tmp:
        work = Path(tmp)
        lines, warm_lines = work / "source.txt", work / "warm-source.txt"
        if PIPELINE in args.parts:
            write_lines(lines, args.records, args.line_bytes)
            write_lines(warm_lines, args.warm_up_records, args.line_bytes, prefix="w")
        for i in range(args.rounds):
            order = [ODRADEK, KAFKA] if i % 2 == 0 else [KAFKA, ODRADEK]
            last = i == args.rounds - 1
            this: dict[str, dict[str, Any]] = {}
            for part in args.parts:
                this[part] = {}
                for kind in order:
                    profile = (args.profile / f"{part}.txt"
                               if args.profile is not None and last else None)
                    note(f"round {i + 1}/{args.rounds}: {part}, {SHORT[kind]}")
                    if part == PIPELINE:
                        this[part][kind] = pipeline_run(kind, args, work, lines, warm_lines,
                                                        profile)
                    else:
                        this[part][kind] = mirror_run(kind, args, work, profile)
            rounds.append(this)
    results = {
        "machine": machine, "started": time.strftime("%Y-%m-%d %H:%M:%S UTC",
                                                     time.gmtime(began)),
        "minutes": round((time.time() - began) / 60, 1),
        "command": " ".join(sys.argv), "records": args.records, "rounds": args.rounds,
        "line_bytes": args.line_bytes, "value_bytes": args.value_bytes,
        "source_batch": args.source_batch, "warm_up_records": args.warm_up_records,
        "connect_version": CONNECT_VERSION, "kafka_version": KAFKA_VERSION,
        "runs": rounds, "summary": summarize(rounds, args.parts),
    }
    return finish(results, markdown(results), str(args.out))


if __name__ == "__main__":
    raise SystemExit(main())
