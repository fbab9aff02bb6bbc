"""Every client of the interop tier against a 3-broker cluster (tests/cluster_processes.py):
confluent-kafka (librdkafka 2.16), kafka-python, aiokafka, kafkajs (Node,
tests/interop/js/cluster_client.js) and kcat (Debian's, librdkafka 2.0.2).

Each client gets the bootstrap list of all three brokers and finds the partitions'
leaders itself; topics have three partitions (their leaders spread over the brokers),
replication factor 3 and min.insync.replicas=2.

- Per client: an idempotent acks=all producer writes a few hundred records and a
  consumer group reads every one of them back exactly once, each at the offset it was
  acknowledged at. Then, on a second topic, the producer writes steadily while the group
  reads; the leader of partition 0 is stopped cleanly (SIGTERM: it hands its leaderships
  over first) and started again; no acknowledged record is lost (the Jepsen-style check
  of tests/faults/workload.py on the log, and the consumer saw every one of them).
- Committed offsets survive the group coordinator's broker stopping, twice (the second
  time they were written on the new coordinator).
- A transaction over partitions led by three different brokers commits, another aborts
  (the coordinator sends WriteTxnMarkers to the other brokers); read_committed consumers
  see exactly the committed ones, on every replica. And an open transaction commits
  after its coordinator's broker stopped (the new coordinator loads its state).

kcat's test is its own: kcat runs to completion per call (``-P`` a batch, ``-G -c N``),
so its producer writes before, during and after the stop rather than through it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import shutil
import subprocess
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from odradek.coordinator.offsets_topic import partition_for
from tests.cluster_processes import FAST_SETTINGS, Cluster
from tests.faults.workload import Acked, ProducerRun, check
from tests.interop.conftest import require_tool, run_tool

pytestmark = pytest.mark.cluster

JS_DIR = Path(__file__).parents[1] / "interop" / "js"
PARTITIONS = 3
TOPIC_CONFIG = {"min.insync.replicas": "2"}
ROUND_TRIP = 300  # records of the first part, read back exactly once
SEND_INTERVAL_S = 0.01  # between sends of the steady part
QUIET_S = 1.0  # after the last expected record: time for a duplicate to show
WAIT = 60.0  # generous bound for anything the tests wait for (2 shared CPUs)
OFFSETS_PARTITIONS = FAST_SETTINGS["offsets.topic.num.partitions"]
TXN_STATE_PARTITIONS = FAST_SETTINGS["transaction.state.log.num.partitions"]


def wait_until(what: str, condition: Callable[[], bool], timeout: float = WAIT,
               details: Callable[[], str] = lambda: "") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}\n{details()}")
        time.sleep(0.05)


# --- one client's producer and group consumer, side by side ------------------------------


class ClientRun:
    """A producer writing ``<name>-<seq>`` to partition ``seq % partitions`` (``count``
    records, or steadily until ``stop_producing()``) and a consumer group member reading
    the topic meanwhile. Subclasses run one client library."""

    def __init__(self, bootstrap: str, topic: str, group: str, name: str,
                 count: int | None) -> None:
        self.bootstrap, self.topic, self.group, self.name = bootstrap, topic, group, name
        self.count = count
        self.lock = threading.Lock()
        self.acked: dict[str, tuple[int, int]] = {}
        self.consumed: list[tuple[int, int, str]] = []
        self.errors: Counter[str] = Counter()
        self.failures: list[str] = []
        self.produced = threading.Event()
        self._stop_producing = threading.Event()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    # what the client saw
    def on_acked(self, value: str, partition: int, offset: int) -> None:
        with self.lock:
            self.acked[value] = (partition, offset)

    def on_error(self, what: str) -> None:
        with self.lock:
            self.errors[what] += 1

    def on_record(self, partition: int, offset: int, value: str) -> None:
        with self.lock:
            self.consumed.append((partition, offset, value))

    def acked_in(self, partition: int) -> int:
        with self.lock:
            return sum(1 for p, _ in self.acked.values() if p == partition)

    def consumed_values(self) -> set[str]:
        with self.lock:
            return {v for _, _, v in self.consumed}

    def has_read_everything_acked(self) -> bool:
        with self.lock:
            return set(self.acked) <= {v for _, _, v in self.consumed}

    def summary(self) -> str:
        with self.lock:
            unread = sorted(set(self.acked) - {v for _, _, v in self.consumed})
            first = [(v, self.acked[v]) for v in unread[:10]]
            return (f"{self.name}: acked {len(self.acked)}, consumed {len(self.consumed)}, "
                    f"acked but not read {len(unread)} {first}, "
                    f"errors {dict(self.errors)}, failures {self.failures}")

    def value(self, sequence: int) -> str:
        return f"{self.name}-{sequence}"

    def keep_producing(self, sequence: int) -> bool:
        if self.count is not None:
            return sequence < self.count
        return not self._stop_producing.is_set()

    # life cycle
    def start(self) -> ClientRun:
        for target in self.targets():
            thread = threading.Thread(target=self._guard(target), daemon=True,
                                      name=f"{self.name}-{target.__name__}")
            thread.start()
            self._threads.append(thread)
        return self

    def targets(self) -> list[Callable[[], None]]:
        raise NotImplementedError

    def _guard(self, target: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                target()
            except BaseException as exc:  # reported by the test, not lost in a thread
                self.failures.append(f"{target.__name__}: {type(exc).__name__}: {exc}")
            finally:
                if target.__name__.startswith("produce"):
                    self.produced.set()
        run.__name__ = target.__name__
        return run

    def stop_producing(self) -> None:
        self._stop_producing.set()
        wait_until(f"{self.name}'s producer to finish", self.produced.is_set, 150,
                   self.summary)

    def abort(self) -> None:
        """After a failure: let the threads end on their own, wait for nothing."""
        self._stop_producing.set()
        self._stop.set()

    def close(self) -> None:
        """Stop producing, then close the consumer (its last commit, LeaveGroup)."""
        self._stop_producing.set()
        self._stop.set()
        for thread in self._threads:
            thread.join(150)
            assert not thread.is_alive(), f"{thread.name} did not finish: {self.summary()}"
        assert not self.failures, self.summary()

    def output(self) -> str:
        return ""


class ConfluentRun(ClientRun):
    def targets(self) -> list[Callable[[], None]]:
        return [self.produce, self.consume]

    def produce(self) -> None:
        def delivered(err: Any, msg: Any) -> None:
            if err is not None:
                self.on_error(err.name())
            else:
                self.on_acked(msg.value().decode(), msg.partition(), msg.offset())

        producer = Producer({
            "bootstrap.servers": self.bootstrap, "enable.idempotence": True, "acks": "all",
            "linger.ms": 2, "message.timeout.ms": 120_000, "retry.backoff.ms": 100,
            "topic.metadata.refresh.interval.ms": 1000, "log_level": 3})
        sequence = 0
        while self.keep_producing(sequence):
            producer.produce(self.topic, self.value(sequence).encode(),
                             partition=sequence % PARTITIONS, on_delivery=delivered)
            producer.poll(0)
            sequence += 1
            if self.count is None:
                time.sleep(SEND_INTERVAL_S)
        left = producer.flush(150)
        if left:
            self.on_error(f"{left} unflushed")

    def consume(self) -> None:
        consumer = Consumer({
            "bootstrap.servers": self.bootstrap, "group.id": self.group,
            "auto.offset.reset": "earliest", "enable.auto.commit": True,
            "auto.commit.interval.ms": 200, "topic.metadata.refresh.interval.ms": 1000,
            "log_level": 3})
        consumer.subscribe([self.topic])
        try:
            while not self._stop.is_set():
                msg = consumer.poll(0.1)
                if msg is None:
                    continue
                if msg.error():
                    self.on_error(f"consumer {msg.error().name()}")
                    continue
                self.on_record(msg.partition(), msg.offset(), msg.value().decode())
        finally:
            consumer.close()


class _RecentLines(logging.Handler):
    """The last lines a Python client library logged, for a failure's details."""

    def __init__(self, keep: int, only: tuple[str, ...] = ("",)) -> None:
        super().__init__(logging.INFO)
        self.lines: deque[str] = deque(maxlen=keep)
        self.only = only  # logger name prefixes

    def emit(self, record: logging.LogRecord) -> None:
        if record.name.startswith(self.only):
            self.lines.append(f"{record.created:.3f} {record.threadName} {record.name} "
                          f"{record.levelname} {record.getMessage()[:300]}")


class KafkaPythonRun(ClientRun):
    """kafka-python's own log (INFO and up: joins, generations, assignments, resets) is
    kept while it runs and shown with a failure."""

    def targets(self) -> list[Callable[[], None]]:
        return [self.produce, self.consume]

    def start(self) -> ClientRun:
        # The group's story apart: the producer's lines would crowd it out.
        self._recent = (_RecentLines(80, ("kafka.coordinator", "kafka.consumer")),
                        _RecentLines(40))
        library = logging.getLogger("kafka")
        self._level = library.level
        library.setLevel(logging.INFO)
        for handler in self._recent:
            library.addHandler(handler)
        return super().start()

    def _forget_log(self) -> None:
        library = logging.getLogger("kafka")
        for handler in self._recent:
            library.removeHandler(handler)
        library.setLevel(self._level)

    def abort(self) -> None:
        super().abort()
        self._forget_log()

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._forget_log()

    def summary(self) -> str:
        group, everything = self._recent
        return "\n".join([super().summary(), "--- kafka-python's group and consumer log ---",
                          *group.lines, "--- kafka-python's last lines ---",
                          *everything.lines])

    def produce(self) -> None:
        from kafka import KafkaProducer

        producer = KafkaProducer(
            bootstrap_servers=self.bootstrap.split(","), acks="all", enable_idempotence=True,
            linger_ms=2, retries=2**31 - 1, request_timeout_ms=30_000,
            delivery_timeout_ms=120_000, metadata_max_age_ms=1000, retry_backoff_ms=100)
        sequence = 0
        try:
            while self.keep_producing(sequence):
                value = self.value(sequence)
                future = producer.send(self.topic, value.encode(),
                                       partition=sequence % PARTITIONS)
                future.add_callback(lambda meta, v=value: self.on_acked(v, meta.partition,
                                                                        meta.offset))
                future.add_errback(lambda exc: self.on_error(type(exc).__name__))
                sequence += 1
                if self.count is None:
                    time.sleep(SEND_INTERVAL_S)
            producer.flush(150)
        finally:
            producer.close(30)

    def consume(self) -> None:
        from kafka import KafkaConsumer

        consumer = KafkaConsumer(
            bootstrap_servers=self.bootstrap.split(","), group_id=self.group,
            auto_offset_reset="earliest", enable_auto_commit=True,
            auto_commit_interval_ms=200, metadata_max_age_ms=1000)
        # The topic in kafka-python's own metadata before the group's first join: without
        # it the first join assigns nothing ("No partition metadata") and a second follows
        # at once. Three CI runs (stop 27's, 1f644e8's, this session's) show kafka-python
        # 3.0.12 then stuck after that second join: the broker logged the leader's
        # assignment (SyncGroup) for generation 2, the client logged nothing more and
        # stopped heartbeating until its session expired. Never reproduced here; the
        # failover this test is about starts only after the group reads.
        consumer.partitions_for_topic(self.topic)
        consumer.subscribe([self.topic])
        try:
            while not self._stop.is_set():
                for records in consumer.poll(timeout_ms=100).values():
                    for msg in records:
                        self.on_record(msg.partition, msg.offset, msg.value.decode())
        finally:
            consumer.close()


class AiokafkaRun(ClientRun):
    """Producer and consumer as two tasks of one event loop, in a thread of its own."""

    def targets(self) -> list[Callable[[], None]]:
        return [self.produce_and_consume]

    def produce_and_consume(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

        async def produce() -> None:
            producer = AIOKafkaProducer(
                bootstrap_servers=self.bootstrap, acks="all", enable_idempotence=True,
                linger_ms=2, request_timeout_ms=60_000, metadata_max_age_ms=1000,
                retry_backoff_ms=100)
            await producer.start()
            pending = []
            try:
                sequence = 0
                while self.keep_producing(sequence):
                    value = self.value(sequence)
                    future = await producer.send(self.topic, value.encode(),
                                                 partition=sequence % PARTITIONS)
                    future.add_done_callback(lambda f, v=value: self._done(v, f))
                    pending.append(future)
                    sequence += 1
                    await asyncio.sleep(SEND_INTERVAL_S if self.count is None else 0)
                await producer.flush()
                await asyncio.gather(*pending, return_exceptions=True)
            finally:
                await producer.stop()
                self.produced.set()

        async def consume() -> None:
            consumer = AIOKafkaConsumer(
                self.topic, bootstrap_servers=self.bootstrap, group_id=self.group,
                auto_offset_reset="earliest", enable_auto_commit=True,
                auto_commit_interval_ms=200, metadata_max_age_ms=1000)
            await consumer.start()
            try:
                while not self._stop.is_set():
                    batches = await consumer.getmany(timeout_ms=100)
                    for records in batches.values():
                        for msg in records:
                            self.on_record(msg.partition, msg.offset, msg.value.decode())
            finally:
                await consumer.stop()

        await asyncio.gather(produce(), consume())

    def _done(self, value: str, future: asyncio.Future) -> None:
        if future.exception() is not None:
            self.on_error(type(future.exception()).__name__)
        else:
            meta = future.result()
            self.on_acked(value, meta.partition, meta.offset)


class KafkaJSRun(ClientRun):
    """tests/interop/js/cluster_client.js: kafkajs' producer and group consumer in one
    Node process, talking JSON lines."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.stderr: list[str] = []
        self.proc: subprocess.Popen[str] | None = None

    def start(self) -> ClientRun:
        node = require_tool("node", installable=shutil.which("apt-get") is not None,
                            install_hint="the kafkajs tests need Node.js >= 18 (scripts/"
                            "test.sh installs Debian's nodejs and npm)")
        if not (JS_DIR / "node_modules" / "kafkajs" / "package.json").is_file():
            pytest.fail(f"kafkajs is not installed in {JS_DIR}/node_modules: run "
                        "`npm ci --prefix tests/interop/js` (scripts/test.sh does)")
        plan = {"brokers": self.bootstrap.split(","), "topic": self.topic,
                "partitions": PARTITIONS, "group": self.group, "name": self.name,
                "count": self.count, "chunk": 30 if self.count else PARTITIONS,
                "intervalMs": 0 if self.count else 10}
        self.proc = subprocess.Popen(
            [node, str(JS_DIR / "cluster_client.js"), json.dumps(plan)], cwd=JS_DIR,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        return super().start()

    def targets(self) -> list[Callable[[], None]]:
        return [self.read_events, self.read_log]

    def read_events(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            event = json.loads(line)
            kind = event["e"]
            if kind == "acked":
                self.on_acked(event["v"], event["p"], event["o"])
            elif kind == "rec":
                self.on_record(event["p"], event["o"], event["v"])
            elif kind == "failed":
                self.on_error(event["error"])
            elif kind == "produced":
                self.produced.set()
            elif kind == "crash":
                self.on_error(f"consumer crash: {event['error']}")

    def read_log(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr.append(line)

    def stop_producing(self) -> None:
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.write("stop-producing\n")
        self.proc.stdin.flush()
        super().stop_producing()

    def close(self) -> None:
        assert self.proc is not None and self.proc.stdin is not None
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                code = self.proc.wait(150)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                pytest.fail(f"cluster_client.js did not close\n{self.output()}")
            assert code == 0, f"cluster_client.js exited with {code}\n{self.output()}"
        super().close()

    def abort(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        super().abort()

    def output(self) -> str:
        return "--- kafkajs log ---\n" + "".join(self.stderr[-200:])

    def summary(self) -> str:
        return super().summary() + "\n" + self.output()


CLIENTS: dict[str, type[ClientRun]] = {
    "confluent-kafka": ConfluentRun, "kafka-python": KafkaPythonRun,
    "aiokafka": AiokafkaRun, "kafkajs": KafkaJSRun,
}


def as_producer_run(run: ClientRun) -> ProducerRun:
    """The producer's side in the shape tests/faults/workload.py's checker reads."""
    producer = ProducerRun(run.name, run.topic, PARTITIONS, client=type(run).__name__)
    producer.acked = {v: Acked(p, o) for v, (p, o) in run.acked.items()}
    producer.errors = Counter(run.errors)
    return producer


def create_topic(cluster: Cluster, topic: str) -> dict[int, int]:
    """A 3-partition topic on all three brokers; its partitions' leaders.

    Right after the cluster starts, the broker that places the replicas may not have seen
    the last broker register yet (ZooKeeper lists all three, its watch has not fired):
    it then refuses replication factor 3 with INVALID_REPLICATION_FACTOR, and the
    creation is tried again, for a few seconds."""
    deadline = time.monotonic() + 15
    while True:
        try:
            cluster.create_topic(topic, PARTITIONS, 3, **TOPIC_CONFIG)
            break
        except KafkaException as exc:
            retry = exc.args[0].code() == KafkaError.INVALID_REPLICATION_FACTOR
            if not retry or time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    cluster.wait_for(lambda: all(cluster.leader(topic, p) > 0 for p in range(PARTITIONS)),
                     30, f"leaders of {topic}")
    # The clients start right after: every broker they may ask first knows the topic.
    cluster.wait_for_topic_everywhere(topic, PARTITIONS)
    return {p: cluster.leader(topic, p) for p in range(PARTITIONS)}


# --- 1 and 2: every client, a round trip, then a leader stopped and started --------------


def round_trip_exactly_once(cluster: Cluster, client: str) -> None:
    topic = group = f"{client}-round-trip"
    leaders = create_topic(cluster, topic)
    assert sorted(leaders.values()) == [1, 2, 3], leaders  # every broker leads one
    run = CLIENTS[client](cluster.bootstrap, topic, group, client, ROUND_TRIP).start()
    values = {run.value(i) for i in range(ROUND_TRIP)}
    try:
        wait_until(f"{client} to produce {ROUND_TRIP} records and read them back",
                   lambda: run.produced.is_set() and values <= run.consumed_values(),
                   details=run.summary)
        time.sleep(QUIET_S)
    except BaseException:
        run.abort()
        raise
    run.close()
    assert set(run.acked) == values and not run.errors, run.summary()
    assert {p for p, _ in run.acked.values()} == set(range(PARTITIONS))
    counts = Counter(v for _, _, v in run.consumed)
    assert {v: n for v, n in counts.items() if n > 1} == {}, "records read twice"
    assert set(counts) == values
    assert all(run.acked[v] == (p, o) for p, o, v in run.consumed), "read at other offsets"
    for p in range(PARTITIONS):  # offsets 0..99 of each partition, nothing else
        assert sorted(o for q, o in run.acked.values() if q == p) == list(range(100))


def unread_details(run: ClientRun, unread: list[str]) -> str:
    """The first unread records, and what the group read of their partition around them."""
    lines = [run.summary()]
    for value in unread[:3]:
        partition, offset = run.acked[value]
        around = [(o, v) for p, o, v in run.consumed if p == partition and abs(o - offset) <= 3]
        lines.append(f"{value} acked at {partition}/{offset}; the group read of partition "
                     f"{partition} near it, in order: {around}")
    return "\n".join(lines)


def leader_stopped_and_started(cluster: Cluster, client: str) -> dict[str, Any]:
    """A steady producer and a group consumer while partition 0's leader is stopped
    cleanly and started again. Returns what happened, for the test to report."""
    topic = group = f"{client}-failover"
    create_topic(cluster, topic)
    run = CLIENTS[client](cluster.bootstrap, topic, group, client, None).start()
    try:
        wait_until("records produced and consumed before the stop",
                   lambda: len(run.consumed_values()) >= 60, details=run.summary)
        victim = cluster.leader(topic, 0)
        before = run.acked_in(0)
        stopping = time.monotonic()
        cluster.stop_broker(victim)  # SIGTERM: controlled shutdown moves its leaderships first
        stop_s = time.monotonic() - stopping
        new_leader = cluster.leader(topic, 0)
        assert new_leader not in (victim, -1), "the stopped broker still leads partition 0"
        # The client finds the new leader: partition 0 keeps getting records.
        wait_until(f"{client} to write to partition 0's new leader",
                   lambda: run.acked_in(0) >= before + 30, details=run.summary)
        while_stopped = run.acked_in(0) - before
        cluster.start_broker(victim)
        cluster.wait_for_full_isr(topic, PARTITIONS, WAIT)
        after_restart = run.acked_in(0)
        wait_until(f"{client} to write on after the restart",
                   lambda: run.acked_in(0) >= after_restart + 30, details=run.summary)
        run.stop_producing()
        deadline = time.monotonic() + WAIT
        while not run.has_read_everything_acked() and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(QUIET_S)
    except BaseException:
        run.abort()
        raise
    run.close()

    # First the log (every acknowledged record there once, at its offset), then the group.
    report = check(cluster.bootstrap, as_producer_run(run))
    report.assert_consistent()
    assert report.acked >= 150, report
    counts = Counter(v for _, _, v in run.consumed)
    unread = sorted(set(run.acked) - set(counts), key=lambda v: run.acked[v])
    assert unread == [], f"acknowledged records the group never read: {unread_details(run, unread)}"
    moved = [(p, o, v) for p, o, v in run.consumed if v in run.acked and run.acked[v] != (p, o)]
    assert moved == [], "the consumer read records at other offsets than acknowledged"
    return {"victim": victim, "new_leader": new_leader, "stop_s": round(stop_s, 1),
            "acked": report.acked, "acked_p0_while_stopped": while_stopped,
            "read_twice": sum(n - 1 for n in counts.values()), "errors": dict(run.errors)}


@pytest.mark.parametrize("client", list(CLIENTS))
def test_client_round_trip_and_a_leader_stopped_and_started(
        cluster: Cluster, client: str, record_property: Callable[[str, object], None]
) -> None:
    round_trip_exactly_once(cluster, client)
    outcome = leader_stopped_and_started(cluster, client)
    record_property("failover", outcome)
    print(f"{client} failover: {outcome}")


# --- kcat -------------------------------------------------------------------------------


_DELIVERED = re.compile(r"Message delivered to partition (\d+) \(offset (\d+)\)")


def kcat_produce(kcat: str, bootstrap: str, topic: str, values: list[str]
                 ) -> list[tuple[int, int]]:
    """``kcat -P`` keyed records (the key picks the partition), idempotent and acks=all;
    the (partition, offset) of each delivery report (``-v -v -v`` prints them)."""
    done = run_tool([kcat, "-P", "-b", bootstrap, "-t", topic, "-K:",
                     "-X", "enable.idempotence=true", "-X", "acks=all",
                     "-X", "topic.metadata.refresh.interval.ms=1000",
                     "-v", "-v", "-v", "-X", "log_level=3"],
                    input="".join(f"{v}:{v}\n" for v in values), timeout=WAIT)
    delivered = [(int(p), int(o)) for p, o in _DELIVERED.findall(done.stderr)]
    assert len(delivered) == len(values), done.stderr[-3000:]
    assert "Delivery failed" not in done.stderr, done.stderr[-3000:]
    return delivered


def kcat_group(kcat: str, bootstrap: str, topic: str, group: str, count: int
               ) -> subprocess.Popen[str]:
    """``kcat -G GROUP -c COUNT``: a balanced consumer that exits after COUNT records
    (librdkafka commits what it delivered when kcat closes it)."""
    return subprocess.Popen(
        [kcat, "-b", bootstrap, "-G", group, "-X", "auto.offset.reset=earliest",
         "-X", "topic.metadata.refresh.interval.ms=1000", "-c", str(count),
         "-f", "%p %o %s\n", "-q", "-X", "log_level=3", topic],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def kcat_records(proc: subprocess.Popen[str]) -> list[tuple[int, int, str]]:
    try:
        out, err = proc.communicate(timeout=WAIT)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"kcat -G did not read its records in {WAIT:.0f}s\n{out[-2000:]}\n{err}")
    assert proc.returncode == 0, f"kcat -G exited with {proc.returncode}\n{err}"
    rows = [line.split(" ", 2) for line in out.splitlines() if line]
    return [(int(p), int(o), v) for p, o, v in rows]


def test_kcat_round_trip_and_a_leader_stopped_and_started(cluster: Cluster) -> None:
    """kcat -P (librdkafka 2.0.2, idempotent) 300 keyed records, kcat -G reads them
    exactly once; then, while a kcat -G of the same group waits for the next 200,
    partition 0's leader is stopped, kcat -P writes 100 more, the leader is started again
    and kcat -P writes the last 100: the group reads exactly those 200."""
    kcat = require_tool("kcat", installable=shutil.which("apt-get") is not None,
                        install_hint="scripts/test.sh installs it (apt-get install kcat)")
    topic = group = "kcat-cluster"
    leaders = create_topic(cluster, topic)
    assert sorted(leaders.values()) == [1, 2, 3], leaders
    first = [f"kcat-{i}" for i in range(ROUND_TRIP)]
    delivered = kcat_produce(kcat, cluster.bootstrap, topic, first)
    assert {p for p, _ in delivered} == set(range(PARTITIONS))
    read = kcat_records(kcat_group(kcat, cluster.bootstrap, topic, group, ROUND_TRIP))
    assert sorted(v for _, _, v in read) == sorted(first)  # each once
    assert sorted((p, o) for p, o, _ in read) == sorted(delivered)

    reader = kcat_group(kcat, cluster.bootstrap, topic, group, 200)  # before the fault
    try:
        time.sleep(2)  # it joins the group and fetches from the committed offsets
        victim = cluster.leader(topic, 0)
        cluster.stop_broker(victim)
        assert cluster.leader(topic, 0) not in (victim, -1)
        second = [f"kcat-{i}" for i in range(ROUND_TRIP, ROUND_TRIP + 100)]
        delivered += kcat_produce(kcat, cluster.bootstrap, topic, second)
        cluster.start_broker(victim)
        cluster.wait_for_full_isr(topic, PARTITIONS, WAIT)
        third = [f"kcat-{i}" for i in range(ROUND_TRIP + 100, ROUND_TRIP + 200)]
        delivered += kcat_produce(kcat, cluster.bootstrap, topic, third)
        read = kcat_records(reader)
    finally:
        if reader.poll() is None:
            reader.kill()
            reader.wait()
    assert sorted(v for _, _, v in read) == sorted(second + third)
    assert sorted((p, o) for p, o, _ in read) == sorted(delivered[ROUND_TRIP:])
    assert len(set(delivered)) == len(delivered) == ROUND_TRIP + 200

    run = ProducerRun("kcat", topic, PARTITIONS, client="kcat")
    run.acked = {}  # kcat's reports name no record: compare the whole log instead
    report = check(cluster.bootstrap, run)
    assert report.read == ROUND_TRIP + 200 and report.duplicated == [], report


# --- 3: committed offsets and the group coordinator --------------------------------------


def produce_values(bootstrap: str, topic: str, values: list[str]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "acks": "all", "linger.ms": 2, "log_level": 3})
    for i, value in enumerate(values):
        producer.produce(topic, value.encode(), partition=i % PARTITIONS)
    assert producer.flush(WAIT) == 0


def coordinator(bootstrap: str, group: str) -> int:
    """The group's coordinator as the brokers tell it (FindCoordinator)."""
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    described = admin.describe_consumer_groups([group], request_timeout=30)[group].result(30)
    return described.coordinator.id


def read_in_group(bootstrap: str, topic: str, group: str, expect: int,
                  commit: dict[int, int] | None = None
                  ) -> tuple[dict[int, int], list[tuple[int, int, str]]]:
    """A new member of ``group``: its committed offsets on joining, and what it reads
    (``expect`` records, then QUIET_S more). Commits ``commit`` (partition -> offset),
    if given, before leaving."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "log_level": 3})
    assigned: list[list[TopicPartition]] = []
    consumer.subscribe([topic], on_assign=lambda _c, parts: assigned.append(parts))
    records: list[tuple[int, int, str]] = []
    try:
        deadline = time.monotonic() + WAIT
        quiet_from = None
        while time.monotonic() < deadline:
            msg = consumer.poll(0.1)
            if msg is not None and msg.error() is None:
                records.append((msg.partition(), msg.offset(), msg.value().decode()))
            elif msg is not None and msg.error().code() != KafkaError._PARTITION_EOF:
                pytest.fail(f"consumer error: {msg.error()}")
            if len(records) >= expect:
                quiet_from = quiet_from or time.monotonic()
                if time.monotonic() - quiet_from > QUIET_S:
                    break
        assert len(records) >= expect, f"read {len(records)} of {expect}: {records}"
        committed = consumer.committed([TopicPartition(topic, p) for p in range(PARTITIONS)],
                                       timeout=30)
        if commit is not None:
            consumer.commit(offsets=[TopicPartition(topic, p, o) for p, o in commit.items()],
                            asynchronous=False)
    finally:
        consumer.close()
    assert assigned, "never assigned"
    return {tp.partition: tp.offset for tp in committed}, records


def test_committed_offsets_survive_the_group_coordinator_s_broker_stopping(
        cluster: Cluster) -> None:
    topic, group = "ledger", "auditors"
    create_topic(cluster, topic)
    offsets_partition = partition_for(group, OFFSETS_PARTITIONS)
    values = [f"entry-{i}" for i in range(90)]  # 30 per partition, entry-i at offset i//3
    produce_values(cluster.bootstrap, topic, values)

    # Read everything, but commit different offsets per partition (a mix-up would show).
    committed = {0: 10, 1: 15, 2: 20}
    _, read = read_in_group(cluster.bootstrap, topic, group, 90, commit=committed)
    assert sorted(v for _, _, v in read) == sorted(values)
    first = coordinator(cluster.bootstrap, group)
    assert first == cluster.leader("__consumer_offsets", offsets_partition)

    cluster.stop_broker(first)
    cluster.wait_for(lambda: cluster.leader("__consumer_offsets", offsets_partition)
                     not in (first, -1), 30, "a new leader of the group's offsets partition")
    second = coordinator(cluster.bootstrap, group)
    assert second not in (first, -1)
    assert second == cluster.leader("__consumer_offsets", offsets_partition)

    on_join, read = read_in_group(cluster.bootstrap, topic, group, 45,
                                  commit={0: 30, 1: 30, 2: 30})
    assert on_join == committed
    want = {(p, o) for p in range(PARTITIONS) for o in range(committed[p], 30)}
    assert sorted((p, o) for p, o, _ in read) == sorted(want)  # from there, each once
    assert all(v == f"entry-{o * 3 + p}" for p, o, v in read)

    # Again, with the offsets the second coordinator wrote: the first broker comes back,
    # catches up on the offsets partition, and the second coordinator stops.
    cluster.start_broker(first)
    everyone = sorted(cluster.brokers)
    cluster.wait_for(lambda: cluster.isr("__consumer_offsets", offsets_partition) == everyone,
                     WAIT, "the restarted broker back in the offsets partition's ISR")
    cluster.stop_broker(second)
    cluster.wait_for(lambda: cluster.leader("__consumer_offsets", offsets_partition)
                     not in (second, -1), 30, "another leader of the offsets partition")
    third = coordinator(cluster.bootstrap, group)
    assert third not in (second, -1)
    more = [f"entry-{i}" for i in range(90, 120)]
    produce_values(cluster.bootstrap, topic, more)
    on_join, read = read_in_group(cluster.bootstrap, topic, group, 30)
    assert on_join == {0: 30, 1: 30, 2: 30}
    assert sorted(v for _, _, v in read) == sorted(more)


# --- 4: a transaction over three brokers ------------------------------------------------


def read_topic(bootstrap: str, topic: str, committed: bool, expect: int) -> list[str]:
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"reader-{time.monotonic_ns()}",
        "isolation.level": "read_committed" if committed else "read_uncommitted",
        "enable.auto.commit": False, "log_level": 3})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    out: list[str] = []
    deadline = time.monotonic() + WAIT
    quiet_from = None
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.1)
            if msg is not None and msg.error() is None:
                out.append(msg.value().decode())
            if len(out) >= expect:
                quiet_from = quiet_from or time.monotonic()
                if time.monotonic() - quiet_from > QUIET_S:
                    break
    finally:
        consumer.close()
    assert len(out) >= expect, f"read {len(out)} of {expect} from {topic}: {out}"
    return out


def test_transactions_over_partitions_led_by_different_brokers(cluster: Cluster) -> None:
    topic, tid = "payments", "payer"
    leaders = create_topic(cluster, topic)
    assert sorted(leaders.values()) == [1, 2, 3], leaders
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": tid,
                         "linger.ms": 1, "log_level": 3})
    producer.init_transactions(WAIT)  # FindCoordinator creates __transaction_state
    # The transaction coordinator leads the transactional id's __transaction_state
    # partition; two of the three partitions written are led by the other brokers, whose
    # markers it writes with WriteTxnMarkers.
    state_partition = partition_for(tid, TXN_STATE_PARTITIONS)
    assert cluster.leader("__transaction_state", state_partition) in leaders.values()
    producer.begin_transaction()
    for i in range(30):
        producer.produce(topic, f"committed-{i}".encode(), partition=i % PARTITIONS)
    producer.commit_transaction(WAIT)
    producer.begin_transaction()
    for i in range(30):
        producer.produce(topic, f"aborted-{i}".encode(), partition=i % PARTITIONS)
    producer.flush(WAIT)  # on the brokers, so that the abort has records to drop
    producer.abort_transaction(WAIT)
    producer.begin_transaction()
    for p in range(PARTITIONS):
        producer.produce(topic, f"committed-last-{p}".encode(), partition=p)
    producer.commit_transaction(WAIT)
    producer.close()

    committed = [f"committed-{i}" for i in range(30)] + [
        f"committed-last-{p}" for p in range(PARTITIONS)]
    assert sorted(read_topic(cluster.bootstrap, topic, True, 33)) == sorted(committed)
    everything = read_topic(cluster.bootstrap, topic, False, 63)
    assert Counter(v.split("-")[0] for v in everything) == {"committed": 33, "aborted": 30}

    # Each partition: 10 + 10 + 1 records and a marker after each transaction, on every
    # replica alike (the markers were replicated as any batch is).
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "wm",
                         "log_level": 3})
    ends = [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
            for p in range(PARTITIONS)]
    consumer.close()
    assert ends == [24] * PARTITIONS
    cluster.wait_for_full_isr(topic, PARTITIONS, WAIT)
    cluster.stop_all_and_compare_replicas(topic, PARTITIONS)



def test_an_open_transaction_commits_after_its_coordinator_s_broker_stops(
        cluster: Cluster) -> None:
    """The coordinator's broker stops (cleanly) while a transaction over three partitions
    is open, its records on the brokers: the new coordinator loads the transaction's
    state from __transaction_state, and the producer's commit completes there."""
    topic, tid = "transfers", "mover"
    create_topic(cluster, topic)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": tid,
                         "linger.ms": 1, "log_level": 3})
    producer.init_transactions(WAIT)
    state_partition = partition_for(tid, TXN_STATE_PARTITIONS)
    first = cluster.leader("__transaction_state", state_partition)
    producer.begin_transaction()
    for i in range(30):
        producer.produce(topic, f"before-{i}".encode(), partition=i % PARTITIONS)
    producer.commit_transaction(WAIT)

    producer.begin_transaction()
    for i in range(30):
        producer.produce(topic, f"open-{i}".encode(), partition=i % PARTITIONS)
    producer.flush(WAIT)
    cluster.stop_broker(first)
    assert cluster.leader("__transaction_state", state_partition) not in (first, -1)
    producer.commit_transaction(WAIT)
    producer.begin_transaction()
    for p in range(PARTITIONS):
        producer.produce(topic, f"after-{p}".encode(), partition=p)
    producer.commit_transaction(WAIT)
    producer.close()

    expected = ([f"before-{i}" for i in range(30)] + [f"open-{i}" for i in range(30)]
                + [f"after-{p}" for p in range(PARTITIONS)])
    assert sorted(read_topic(cluster.bootstrap, topic, True, 63)) == sorted(expected)
    cluster.start_broker(first)
    cluster.wait_for_full_isr(topic, PARTITIONS, WAIT)
    cluster.stop_all_and_compare_replicas(topic, PARTITIONS)
