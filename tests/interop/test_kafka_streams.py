"""Kafka Streams 4.4.0 against an ``odradek serve`` process (issue 17).

tests/interop/java/streams/StreamsApp.java is a Streams application with
``processing.guarantee=exactly_once_v2``: the events topic is re-keyed by user (Streams
creates a ``-repartition`` topic), joined with a KTable of the users' tiers, and counted
and summed in 10 s tumbling windows (with grace); every window update goes to the output
topic as ``user@windowStart -> "count,sum"``. Streams creates its repartition and changelog
topics itself.

Here the input is deterministic (explicit timestamps), the expected final value of every
window is computed in Python, and the committed output (read_committed) must equal it:

- a plain run to completion, and the internal topics Streams created;
- the Streams JVM SIGKILLed mid-run and restarted on the same app id and state dir;
- two instances of the app, one SIGKILLed mid-run: the other takes its tasks over;
- Odradek stopped and restarted (SIGTERM, then SIGKILL) on the same data dir and port
  while Streams runs.

Streams runs without a record cache, so each event makes exactly one update of its window:
with exactly-once the committed updates of a window count 1, 2, ..., n, none missing and
none twice, across crashes and restarts (a double count would repeat or exceed a count).
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from odradek.client.wire import WireClient
from odradek.devcluster import free_port
from tests.jvm import compile_java, java_command, require_jars

from .conftest import BrokerProcess, start_broker

pytestmark = pytest.mark.interop

SOURCES = Path(__file__).parent / "java" / "streams"
WINDOW_MS = 10_000  # StreamsApp.WINDOW_MS (its grace: an hour)
USERS = {f"user{i}": i % 3 + 1 for i in range(6)}  # user -> tier (the KTable)
EVENTS = 3000
PARTITIONS = 3
WAIT = 90.0  # seconds for Streams to reach the expected output
# The failover test's per-record delay: slow enough that both instances are still at
# work when one is killed, however late the second JVM starts on a loaded machine.
SLOW_PAIR_MS = 8
BROKER_OVERRIDES = ("--override", "group.initial.rebalance.delay.ms=0",
                    "--override", "group.min.session.timeout.ms=1000",
                    "--override",
                    "transaction.abort.timed.out.transaction.cleanup.interval.ms=1000",
                    # Small segments and an eager cleaner: Streams' changelogs are compacted
                    # (with their transaction markers and aborted records) while it runs,
                    # and restores after a crash read the compacted logs.
                    "--override", "log.segment.bytes=16384",
                    "--override", "log.cleaner.backoff.ms=200",
                    "--override", "log.cleaner.min.cleanable.ratio=0.01",
                    # group.protocol=streams: the broker's session timeout (the app's own
                    # session.timeout.ms is the classic protocol's), as quick as it.
                    "--override", "group.streams.session.timeout.ms=6000",
                    "--override", "group.streams.heartbeat.interval.ms=1000",
                    # KIP-1331: the broker keeps the topology descriptions (Kafka's
                    # in-memory plugin); Streams 4.4 pushes its own when asked.
                    "--override", "group.streams.topology.description.plugin.class="
                    "org.apache.kafka.server.streams.InMemoryTopologyDescriptionPlugin")




@contextmanager
def broker_on(data: Path, port: int) -> Iterator[BrokerProcess]:
    """A broker on a fixed port, so Streams' clients reconnect to it across restarts."""
    with start_broker(data, "--listen", f"127.0.0.1:{port}", *BROKER_OVERRIDES) as broker:
        yield broker


@pytest.fixture(scope="module")
def java_classes() -> Path:
    require_jars()
    return compile_java(SOURCES)


def make_input() -> tuple[list[tuple[str, str, int]], dict[str, str]]:
    """The events (key, value, timestamp) and the expected final value of every window.
    Timestamps are an hour back from now (inside every retention), 40 ms apart: about
    twelve windows per user."""
    base = (int(time.time() * 1000) - 3_600_000) // WINDOW_MS * WINDOW_MS
    events = []
    totals: dict[str, list[int]] = {}
    names = sorted(USERS)
    for i in range(EVENTS):
        user = names[(i * 7 + i // 11) % len(names)]
        amount = (i * 13) % 17 + 1
        ts = base + i * 40
        events.append((f"e{i}", f"{user},{amount}", ts))
        window = f"{user}@{ts // WINDOW_MS * WINDOW_MS}"
        count_sum = totals.setdefault(window, [0, 0])
        count_sum[0] += 1
        count_sum[1] += amount * USERS[user]
    return events, {k: f"{c},{s}" for k, (c, s) in totals.items()}


def produce_input(bootstrap: str, events: list[tuple[str, str, int]]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(t, PARTITIONS, 1)
                                   for t in ("events", "users", "output")])
    for f in futures.values():
        f.result(30)
    # Java's partitioner (murmur2), so each user's tier is in the partition Streams'
    # repartition topic puts the user's events in (the join's co-partitioning).
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5,
                         "partitioner": "murmur2_random"})
    first_ts = events[0][2]
    for user, tier in USERS.items():  # the table is older than every event
        producer.produce("users", key=user, value=str(tier), timestamp=first_ts - 60_000)
    producer.flush(30)
    for key, value, ts in events:
        producer.produce("events", key=key, value=value, timestamp=ts)
        producer.poll(0)
    assert producer.flush(30) == 0


class StreamsJvm:
    """One StreamsApp JVM; its stdout and stderr drained by a thread onto a timeline."""

    def __init__(self, classes: Path, bootstrap: str, app_id: str, state_dir: Path,
                 slow_ms: int = 0, threads: int = 1, protocol: str = "classic") -> None:
        argv = java_command("StreamsApp", "--bootstrap", bootstrap, "--app-id", app_id,
                            "--state-dir", str(state_dir), "--events", "events",
                            "--users", "users", "--output", "output", "--exactly-once",
                            "--slow-ms", str(slow_ms), "--threads", str(threads),
                            "--group-protocol", protocol,
                            classpath_extra=[classes],
                            # not a line per reconnection attempt while Odradek restarts
                            jvm_args=["-Dorg.slf4j.simpleLogger.log.org.apache.kafka.clients"
                                      ".NetworkClient=error"])
        self.lines: list[str] = []  # each prefixed with the seconds since the start
        self.started = time.monotonic()
        self.process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, text=True)
        self.reader = threading.Thread(target=self._drain, daemon=True)
        self.reader.start()

    def _drain(self) -> None:
        assert self.process.stdout is not None
        for line in iter(self.process.stdout.readline, ""):
            self.note(line)

    def note(self, line: str) -> None:
        """A line on the app's timeline (the test's own events too)."""
        self.lines.append(f"{time.monotonic() - self.started:7.2f} {line.rstrip()}\n")

    def output(self) -> str:
        return "".join(self.lines[-300:])

    def processed(self) -> int:
        """The last "PROCESSED n" the app printed (every 100 joined records)."""
        counts = [int(line.split()[2]) for line in self.lines
                  if line.split(maxsplit=2)[1:2] == ["PROCESSED"]]
        return max(counts, default=0)

    def assert_alive(self) -> None:
        code = self.process.poll()
        assert code is None, f"Streams exited with code {code}\n{self.output()}"

    def kill(self) -> None:
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(30)
        self.reader.join(5)
        print(f"--- Streams (pid {self.process.pid}, killed) ---\n{self.output()}")

    def stop(self) -> None:
        """SIGTERM: KafkaStreams.close() from the shutdown hook; it must exit cleanly."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(40)
            except subprocess.TimeoutExpired:
                self.kill()
                pytest.fail(f"Streams ignored SIGTERM for 40 s\n{self.output()}")
        self.reader.join(5)
        print(f"--- Streams (pid {self.process.pid}) ---\n{self.output()}")
        assert self.process.returncode in (0, 143), \
            f"Streams exited with {self.process.returncode}\n{self.output()}"


@contextmanager
def streams_app(*args, **kwargs) -> Iterator[StreamsJvm]:
    app = StreamsJvm(*args, **kwargs)
    try:
        yield app
    finally:
        if app.process.poll() is None:
            app.kill()


class OutputReader:
    """Reads the output topic with read_committed from the start, keeping every update of
    every window and checking, as it goes, that none exceeds the expected final value;
    ``wait_exact`` then checks each window's counts are 1..n."""

    def __init__(self, bootstrap: str, expected: dict[str, str]) -> None:
        self.expected = expected
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "verifier",
                                  "isolation.level": "read_committed",
                                  "enable.auto.commit": False})
        self.consumer.assign([TopicPartition("output", p, 0) for p in range(PARTITIONS)])
        self.latest: dict[str, str] = {}
        self.counts: dict[str, list[int]] = {}  # every committed update's count, by window
        self.records = 0
        self.problems: list[str] = []

    def close(self) -> None:
        self.consumer.close()

    def poll(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            for m in self.consumer.consume(1000, timeout=0.1):
                if m.error():
                    continue
                key, value = m.key().decode(), m.value().decode()
                self.records += 1
                count, total = map(int, value.split(","))
                want = self.expected.get(key)
                if want is None:
                    self.problems.append(f"unexpected window {key}={value}")
                    continue
                want_count, want_total = map(int, want.split(","))
                if count > want_count or total > want_total:
                    self.problems.append(f"{key}={value} above the final {want}")
                self.counts.setdefault(key, []).append(count)
                self.latest[key] = value

    def wait_for(self, predicate, what: str, timeout: float, *others) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            for other in others:
                other.assert_alive()
            if time.monotonic() > deadline:
                pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}: "
                            f"{self.records} records read\n" + self.diff()
                            + "".join(f"\n{o.output()}" for o in others))
            self.poll(0.3)

    def wait_exact(self, *others) -> None:
        """Until every window has its final value; then a quiet second in which nothing
        may change."""
        self.wait_for(lambda: self.latest == self.expected, "the exact output", WAIT, *others)
        self.poll(1.0)
        assert not self.problems, "\n".join(self.problems[:30])
        assert self.latest == self.expected, self.diff()
        wrong = {k: c for k, c in self.counts.items() if c != list(range(1, len(c) + 1))}
        assert not wrong, f"windows whose committed updates are not 1..n: {wrong}"

    def diff(self) -> str:
        wrong = {k: (self.latest.get(k), v) for k, v in self.expected.items()
                 if self.latest.get(k) != v}
        lines = [f"{len(wrong)} of {len(self.expected)} windows differ (got, want):"]
        lines += [f"  {k}: {got} != {want}" for k, (got, want) in sorted(wrong.items())[:20]]
        lines += self.problems[:20]
        return "\n".join(lines)


@pytest.mark.parametrize("protocol", ["classic", "streams"])
def test_streams_output_is_exact_and_its_internal_topics_are_created(
        tmp_path: Path, java_classes: Path, protocol: str):
    """With either group protocol: the classic one (Streams creates its internal topics
    with CreateTopics) and KIP-1071's (the broker creates them from the topology)."""
    events, expected = make_input()
    with broker_on(tmp_path / "data", free_port()) as broker:
        produce_input(broker.bootstrap, events)
        reader = OutputReader(broker.bootstrap, expected)
        with streams_app(java_classes, broker.bootstrap, "wincount", tmp_path / "state",
                         threads=2, protocol=protocol) as app:
            reader.wait_exact(app, broker)
            if protocol == "streams":
                pushed = topology_description(broker, "wincount")
            admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            topics = set(admin.list_topics(timeout=10).topics)
            internal = sorted(t for t in topics if t.startswith("wincount-"))
            described = admin.describe_configs([ConfigResource("topic", t) for t in internal])
            configs = {r.name: {k: v.value for k, v in f.result(10).items()
                                if k in ("cleanup.policy", "retention.ms", "segment.bytes")}
                       for r, f in described.items()}
            app.stop()
        reader.close()
    assert internal == ["wincount-by-user-repartition", "wincount-totals-changelog",
                        "wincount-users-store-changelog"], (topics, app.output())
    # The settings Streams asks for, kept as given: a repartition topic keeps everything
    # (Streams purges it with DeleteRecords), the window store's changelog is compacted
    # and deleted after its windows' retention (size + grace + one day), the table's
    # changelog is compacted.
    assert configs["wincount-by-user-repartition"] == {
        "cleanup.policy": "delete", "retention.ms": "-1", "segment.bytes": "52428800"}
    assert configs["wincount-totals-changelog"]["cleanup.policy"] == "compact,delete"
    assert configs["wincount-totals-changelog"]["retention.ms"] == str(
        WINDOW_MS + 3_600_000 + 86_400_000)
    assert configs["wincount-users-store-changelog"]["cleanup.policy"] == "compact"
    if protocol == "streams":
        # KIP-1331: Streams 4.4 speaks StreamsGroupHeartbeat v1; asked by the broker, it
        # pushed its topology's description (key 93), which StreamsGroupDescribe v1
        # shows: its source, its sinks, its stores.
        nodes = [n for s in pushed.subtopologies for n in s.nodes]
        assert {n.node_type for n in nodes} == {1, 2, 3}, pushed
        assert "wincount-by-user-repartition" in {n.sink_topic for n in nodes}, pushed
        assert any(n.stores for n in nodes), pushed


def topology_description(broker: BrokerProcess, group: str) -> Any:
    """The group's topology description (StreamsGroupDescribe v1), once Streams has
    pushed it: only a v1 heartbeat asks for it, only key 93 brings it."""
    def described() -> Any:
        with WireClient(broker.port) as client:
            [g] = client.request(89, 1, {"group_ids": [group],
                                         "include_authorized_operations": False,
                                         "include_topology_description": True}).groups
        return g.topology_description if g.topology_description_status == 3 else None

    deadline = time.monotonic() + WAIT
    while (description := described()) is None:
        assert time.monotonic() < deadline, "no topology description arrived"
        time.sleep(0.5)
    return description


def test_streams_killed_mid_run_restarts_with_exact_output(tmp_path: Path, java_classes: Path):
    """On its state dir Streams keeps its process id, so the new producer has the old
    transactional id and fences it (InitProducerId aborts the open transaction)."""
    events, expected = make_input()
    with broker_on(tmp_path / "data", free_port()) as broker:
        produce_input(broker.bootstrap, events)
        reader = OutputReader(broker.bootstrap, expected)
        with streams_app(java_classes, broker.bootstrap, "crashy", tmp_path / "state",
                         slow_ms=3) as app:
            # Some windows committed, most of the input still ahead.
            reader.wait_for(lambda: len(reader.latest) >= 30, "some committed output", WAIT,
                            app, broker)
            app.kill()
        assert app.processed() < EVENTS - 100, "Streams finished before the kill"
        with streams_app(java_classes, broker.bootstrap, "crashy", tmp_path / "state") as app:
            reader.wait_exact(app, broker)
            app.stop()
        reader.close()


@pytest.mark.parametrize("protocol", ["classic", "streams"])
def test_streams_instance_killed_its_tasks_fail_over_with_exact_output(
        tmp_path: Path, java_classes: Path, protocol: str):
    """Two instances share the work; one is SIGKILLed. Its tasks move to the other once
    its session expires, under other transactional ids: its open transaction holds the
    last stable offsets until Odradek aborts it at transaction.timeout.ms, and the
    survivor restores the tasks' state from their changelogs (read_committed). With
    group.protocol=streams the broker's task assignor spreads the tasks over both
    instances and gives the dead one's to the survivor."""
    events, expected = make_input()
    with broker_on(tmp_path / "data", free_port()) as broker:
        produce_input(broker.bootstrap, events)
        reader = OutputReader(broker.bootstrap, expected)
        with streams_app(java_classes, broker.bootstrap, "pair", tmp_path / "a",
                         slow_ms=SLOW_PAIR_MS, protocol=protocol) as first, \
                streams_app(java_classes, broker.bootstrap, "pair", tmp_path / "b",
                            slow_ms=SLOW_PAIR_MS, protocol=protocol) as second:
            # Both at work (on a loaded machine either JVM may start first); the one
            # that processed more is killed, so what it held must move.
            reader.wait_for(lambda: min(first.processed(), second.processed()) >= 100
                            and len(reader.latest) >= 20,
                            "both instances at work", WAIT, first, second, broker)
            doomed, survivor = ((first, second) if first.processed() >= second.processed()
                                else (second, first))
            doomed.kill()
            survivor.note("TEST killed the other instance")
            assert doomed.processed() + survivor.processed() < EVENTS - 100, \
                "Streams finished before the kill"
            reader.wait_exact(survivor, broker)
            survivor.stop()
        reader.close()


@pytest.mark.parametrize("protocol", ["classic", "streams"])
def test_streams_survives_odradek_restarts(tmp_path: Path, java_classes: Path,
                                           protocol: str):
    """Streams starts while Odradek is down (between the input's broker and the next),
    then Odradek is stopped with SIGTERM and later SIGKILLed mid-run, each time started
    again on its data dir and port; Streams' clients reconnect and carry on (with
    group.protocol=streams the group, replayed from __consumer_offsets, goes on)."""
    events, expected = make_input()
    data, port = tmp_path / "data", free_port()
    with broker_on(data, port) as broker:
        produce_input(broker.bootstrap, events)
    with streams_app(java_classes, f"127.0.0.1:{port}", "restarts", tmp_path / "state",
                     slow_ms=3, protocol=protocol) as app:
        windows = 0  # with output so far
        for stop in ("sigterm", "kill -9", None):
            with broker_on(data, port) as broker:
                app.note("TEST Odradek started")
                reader = OutputReader(broker.bootstrap, expected)
                if stop is None:
                    reader.wait_exact(app, broker)
                    app.stop()
                else:
                    reader.wait_for(lambda: len(reader.latest) >= windows + 8,  # noqa: B023
                                    "more committed output", WAIT, app, broker)
                    assert app.processed() < EVENTS - 100, "Streams finished before the restart"
                    assert not reader.problems, "\n".join(reader.problems[:30])
                    windows = len(reader.latest)
                    app.note(f"TEST stopping Odradek ({stop})")
                    if stop == "kill -9":
                        broker.kill()
                reader.close()
