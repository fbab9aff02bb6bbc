"""A Jepsen-style workload for the fault tier: producers that remember exactly what the
cluster acknowledged, and a checker that reads everything back afterwards.

Each producer writes unique values ``<name>-<sequence>`` to a topic, the sequence's
partition fixed (sequence mod partitions), with an idempotent acks=all producer, and
records every acknowledgement (partition, offset). After the faults, with every broker
back, the whole topic is read from the beginning and compared:

- lost: acknowledged but not in the log;
- duplicated: in the log more than once (acknowledged or not: idempotence forbids it);
- offset_moved: in the log, but not at the offset it was acknowledged at;
- reordered: a producer's values of one partition not in sequence order in the log.

Values that were never acknowledged may or may not be there; that is not an error.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

# Between two records of one producer: a steady trickle through the faults, so that
# every fault meets records in flight, without flooding a 2-CPU machine.
SEND_INTERVAL_S = 0.005


@dataclass
class Acked:
    partition: int
    offset: int


@dataclass
class ProducerRun:
    """One producer thread's record of what it sent and what was acknowledged."""

    name: str
    topic: str
    partitions: int
    client: str = "confluent"
    payload_bytes: int = 0  # padding after the value's name, to fill disks faster
    sent: int = 0
    acked: dict[str, Acked] = field(default_factory=dict)
    # (time.monotonic(), partition) of each acknowledgement as its callback ran (within a
    # send interval of its arrival): what longest_ack_gap reads.
    ack_times: list[tuple[float, int]] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    stop: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None
    failure: BaseException | None = None

    def value(self, sequence: int) -> str:
        return f"{self.name}-{sequence}"

    def encode(self, sequence: int) -> bytes:
        value = self.value(sequence)
        if self.payload_bytes:
            value += "|" + "x" * self.payload_bytes
        return value.encode()


def identity(raw: bytes) -> str:
    """A record's value without its padding: the name it was acknowledged under."""
    return raw.decode().split("|", 1)[0]


def _run_confluent(run: ProducerRun, bootstrap: str) -> None:
    lock = threading.Lock()

    def delivered(err: Any, msg: Any) -> None:
        with lock:
            if err is not None:
                run.errors[err.name()] += 1
            else:
                run.acked[identity(msg.value())] = Acked(msg.partition(), msg.offset())
                run.ack_times.append((time.monotonic(), msg.partition()))

    producer = Producer({
        "bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
        "linger.ms": 2, "message.timeout.ms": 120_000, "retry.backoff.ms": 100,
        "topic.metadata.refresh.interval.ms": 1000,
    })
    sequence = 0
    while not run.stop.is_set():
        try:
            producer.produce(run.topic, run.encode(sequence),
                             partition=sequence % run.partitions, on_delivery=delivered)
        except BufferError:
            producer.poll(0.1)
            continue
        run.sent = sequence = sequence + 1
        producer.poll(0)
        time.sleep(SEND_INTERVAL_S)
    left = producer.flush(150)
    if left:
        run.errors["unflushed"] += left


def _run_kafka_python(run: ProducerRun, bootstrap: str) -> None:
    from kafka import KafkaProducer  # kafka-python 3: idempotent by default

    producer = KafkaProducer(bootstrap_servers=bootstrap.split(","), acks="all",
                             enable_idempotence=True, linger_ms=2, retries=2**31 - 1,
                             request_timeout_ms=30_000, delivery_timeout_ms=120_000,
                             metadata_max_age_ms=1000, retry_backoff_ms=100)
    lock = threading.Lock()
    sequence = 0
    while not run.stop.is_set():
        value = run.value(sequence)
        future = producer.send(run.topic, run.encode(sequence),
                               partition=sequence % run.partitions)

        def done(meta: Any, value: str = value) -> None:
            with lock:
                run.acked[value] = Acked(meta.partition, meta.offset)
                run.ack_times.append((time.monotonic(), meta.partition))

        def failed(exc: BaseException) -> None:
            with lock:
                run.errors[type(exc).__name__] += 1

        future.add_callback(done)
        future.add_errback(failed)
        run.sent = sequence = sequence + 1
        time.sleep(SEND_INTERVAL_S)
    producer.flush(150)
    producer.close(30)


def start_producer(bootstrap: str, topic: str, partitions: int, name: str,
                   client: str = "confluent", *, payload_bytes: int = 0) -> ProducerRun:
    run = ProducerRun(name, topic, partitions, client, payload_bytes)
    target = _run_confluent if client == "confluent" else _run_kafka_python

    def main() -> None:
        try:
            target(run, bootstrap)
        except BaseException as exc:  # reported by the checker, not lost in a thread
            run.failure = exc

    run.thread = threading.Thread(target=main, name=f"producer-{name}", daemon=True)
    run.thread.start()
    return run


def stop_producers(*runs: ProducerRun) -> None:
    for run in runs:
        run.stop.set()
    for run in runs:
        assert run.thread is not None
        run.thread.join(200)
        assert not run.thread.is_alive(), f"producer {run.name} did not finish"
        if run.failure is not None:
            raise AssertionError(f"producer {run.name} failed") from run.failure


def longest_ack_gap(run: ProducerRun) -> tuple[float, int]:
    """The longest time (seconds) between two consecutive acknowledgements of one
    partition of ``run``, and that partition: what a producer saw of a fault (per
    partition, since the others' acknowledgements go on meanwhile). A figure to print,
    not to assert on: wall-clock speed is the benchmarks' business."""
    by_partition: dict[int, list[float]] = {}
    for t, partition in run.ack_times:
        by_partition.setdefault(partition, []).append(t)
    best, where = 0.0, -1
    for partition, times in by_partition.items():
        times.sort()
        for a, b in pairwise(times):
            if b - a > best:
                best, where = b - a, partition
    return best, where


def read_all(bootstrap: str, topic: str, timeout_s: float = 90) -> dict[int, list[tuple[int, str]]]:
    """Every record of every partition, from the log start to the high watermark."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    partitions = sorted(admin.list_topics(topic, timeout=30).topics[topic].partitions)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "checker",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "enable.partition.eof": True})
    out: dict[int, list[tuple[int, str]]] = {p: [] for p in partitions}
    try:
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
                for p in partitions}
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        done = {p for p in partitions if ends[p] == 0}
        deadline = time.monotonic() + timeout_s
        while len(done) < len(partitions):
            assert time.monotonic() < deadline, f"could not read {topic} to its end {ends}"
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                continue
            p = msg.partition()
            out[p].append((msg.offset(), identity(msg.value())))
            if msg.offset() + 1 >= ends[p]:
                done.add(p)
    finally:
        consumer.close()
    return out


@dataclass
class Report:
    acked: int
    read: int
    lost: list[str]
    duplicated: list[str]
    offset_moved: list[str]
    reordered: list[str]
    errors: dict[str, int]

    def assert_consistent(self) -> None:
        problems = {k: v[:10] for k, v in (("lost", self.lost), ("duplicated", self.duplicated),
                                          ("offset moved", self.offset_moved),
                                          ("reordered", self.reordered)) if v}
        assert not problems, f"{problems} (acked {self.acked}, read {self.read})"


def check(bootstrap: str, *runs: ProducerRun) -> Report:
    """Read the topic back and compare with what each producer was told."""
    topic = runs[0].topic
    log = read_all(bootstrap, topic)
    where: dict[str, list[tuple[int, int]]] = {}
    for partition, records in log.items():
        for offset, value in records:
            where.setdefault(value, []).append((partition, offset))
    lost, moved, duplicated, reordered = [], [], [], []
    for value, places in where.items():
        if len(places) > 1:
            duplicated.append(value)
    errors: Counter[str] = Counter()
    for run in runs:
        errors.update(run.errors)
        for value, ack in run.acked.items():
            places = where.get(value)
            if not places:
                lost.append(value)
            elif (ack.partition, ack.offset) not in places:
                moved.append(f"{value}: acked at {ack.partition}/{ack.offset}, found {places}")
        prefix = run.name + "-"
        for partition, records in log.items():
            sequence = [int(v[len(prefix):]) for _, v in records if v.startswith(prefix)]
            if sequence != sorted(sequence):
                reordered.append(f"{run.name} in partition {partition}")
    return Report(sum(len(r.acked) for r in runs), sum(len(r) for r in log.values()),
                  lost, duplicated, moved, reordered, dict(errors))
