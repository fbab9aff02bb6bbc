"""A rolling restart without loss (issue 16): every broker of a 3-broker cluster stopped
with SIGTERM (controlled shutdown) and started again, one at a time, the way operators
upgrade a cluster, while an idempotent acks=all producer (librdkafka) writes and a
3-member consumer group (librdkafka, explicit synchronous commits) reads.

While the second broker is down one member leaves the group and another joins, so
that partitions move between members (a rebalance) in the middle of the restarts, which
is when what commits allow matters.

Before going on to the next broker the test waits until the restarted one is back in the
ISR of every partition (the topic's and ``__consumer_offsets``'), has its preferred
leaderships back (``auto.leader.rebalance.enable`` with a short
``leader.imbalance.check.interval.seconds``), and the group's coordinator, which moved
away when its broker stopped, is back on it.

What the group may do, precisely (``check_group``), replaying every member's events in
the one order they happened (assignments, revocations, records, successful commits):

- every acknowledged record is consumed, at the partition and offset it was
  acknowledged at;
- a member owning a partition reads it in order, offset after offset, with no gap, and
  only while it owns it;
- a member's first record of a partition it was just assigned is at the group's
  committed offset (nothing committed is read again, nothing uncommitted is skipped);
- a record may be consumed a second time only if it was at or after the last commit
  (of that partition) of the member that first consumed it, made before the second
  consumption: i.e. the first member consumed it but had not committed past it when the
  partition moved (a rebalance). Commits of a partition never go back.

The longest gap between two acknowledgements is printed (``-s`` shows it), not asserted:
the benchmark measures it (bench/cluster_bench.py --only rolling).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from odradek.coordinator import OFFSETS_TOPIC
from odradek.coordinator.offsets_topic import partition_for
from tests.cluster_processes import FAST_SETTINGS, Cluster, run_cluster
from tests.faults.workload import (
    Acked,
    check,
    longest_ack_gap,
    start_producer,
    stop_producers,
)
from tests.zookeeper import ZooKeeperServer

pytestmark = pytest.mark.cluster

TOPIC = "rolling"
GROUP = "rolling-readers"
PARTITIONS = 3
MEMBERS = 3
OFFSETS_PARTITIONS = FAST_SETTINGS["offsets.topic.num.partitions"]
# Short, so that leadership (and the group's coordinator) returns to a restarted broker
# within seconds rather than Kafka's 300 s, as an operator would trigger it.
CHECK_INTERVAL_S = 2
COMMIT_INTERVAL_S = 0.5  # between a member's synchronous commits of what it consumed
WAIT_S = 90.0  # generous bound for anything the test waits for (2 shared CPUs)


@pytest.fixture
def cluster(zookeeper: ZooKeeperServer, tmp_path: Path) -> Iterator[Cluster]:
    """Three brokers that hand leadership back to preferred replicas every few seconds."""
    zookeeper.ensure_running()
    with run_cluster(zookeeper, tmp_path, **{
            "leader.imbalance.check.interval.seconds": CHECK_INTERVAL_S}) as running:
        yield running


# --- the group: three members logging what they do, in one order ------------------------


@dataclass
class GroupLog:
    """Every member's events, appended under one lock, so their order is the order in
    which they happened: ("assign" | "revoke" | "lost", member, partitions),
    ("consume", member, partition, offset, value), ("commit", member, partition,
    offset) once a commit has succeeded."""

    events: list[tuple[Any, ...]] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)  # consumer and commit errors
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, *event: Any) -> None:
        with self.lock:
            self.events.append(event)

    def error(self, what: str) -> None:
        with self.lock:
            self.errors[what] += 1

    def consumed(self) -> set[tuple[int, int]]:
        with self.lock:
            return {(e[2], e[3]) for e in self.events if e[0] == "consume"}

    def owners(self) -> dict[int, str]:
        owner: dict[int, str] = {}
        with self.lock:
            for event in self.events:
                if event[0] == "assign":
                    owner.update(dict.fromkeys(event[2], event[1]))
                elif event[0] in ("revoke", "lost"):
                    for p in event[2]:
                        if owner.get(p) == event[1]:
                            del owner[p]
        return owner


class Member:
    """One consumer of the group on a thread of its own: it commits what it consumed
    every COMMIT_INTERVAL_S and when partitions are revoked, synchronously, and logs a
    commit only once it succeeded."""

    def __init__(self, name: str, bootstrap: str, group_log: GroupLog) -> None:
        self.name, self.bootstrap, self.log = name, bootstrap, group_log
        self.stop = threading.Event()
        self.failure: BaseException | None = None
        self.thread = threading.Thread(target=self._main, name=name, daemon=True)
        self.thread.start()

    def _main(self) -> None:
        try:
            self._consume()
        except BaseException as exc:  # reported by the test, not lost in a thread
            self.failure = exc

    def _consume(self) -> None:
        consumer = Consumer({
            "bootstrap.servers": self.bootstrap, "group.id": GROUP,
            "auto.offset.reset": "earliest", "enable.auto.commit": False,
            # Longer than a broker's restart on a loaded machine: members are never
            # stopped here, so none should be expired.
            "session.timeout.ms": 15000, "heartbeat.interval.ms": 1000,
            "topic.metadata.refresh.interval.ms": 1000, "log_level": 3})
        positions: dict[int, int] = {}  # owned partition -> next offset, as consumed
        committed: dict[int, int] = {}  # ... as last committed by this member

        def commit(partitions: list[int]) -> None:
            offsets = [TopicPartition(TOPIC, p, positions[p]) for p in partitions
                       if p in positions and positions[p] != committed.get(p)]
            if not offsets:
                return
            try:
                result = consumer.commit(offsets=offsets, asynchronous=False)
            except KafkaException as exc:
                self.log.error(f"commit {exc.args[0].name()}")
                return
            for tp in result or []:
                if tp.error is None:
                    committed[tp.partition] = tp.offset
                    self.log.add("commit", self.name, tp.partition, tp.offset)
                else:
                    self.log.error(f"commit {tp.error.name()}")

        def on_assign(_consumer: Consumer, parts: list[TopicPartition]) -> None:
            self.log.add("assign", self.name, sorted(tp.partition for tp in parts))

        def on_revoke(_consumer: Consumer, parts: list[TopicPartition]) -> None:
            # What was consumed is committed before the partitions move (at-least-once
            # with as few repeats as a rebalance allows).
            commit([tp.partition for tp in parts])
            self._drop("revoke", parts, positions, committed)

        def on_lost(_consumer: Consumer, parts: list[TopicPartition]) -> None:
            self._drop("lost", parts, positions, committed)  # nothing can be committed

        consumer.subscribe([TOPIC], on_assign=on_assign, on_revoke=on_revoke,
                           on_lost=on_lost)
        last_commit = time.monotonic()
        try:
            while not self.stop.is_set():
                msg = consumer.poll(0.1)
                if msg is not None and msg.error():
                    self.log.error(f"consumer {msg.error().name()}")
                elif msg is not None:
                    self.log.add("consume", self.name, msg.partition(), msg.offset(),
                                 msg.value().decode().split("|", 1)[0])
                    positions[msg.partition()] = msg.offset() + 1
                if time.monotonic() - last_commit >= COMMIT_INTERVAL_S:
                    commit(list(positions))
                    last_commit = time.monotonic()
            commit(list(positions))
        finally:
            consumer.close()

    def _drop(self, kind: str, parts: list[TopicPartition], positions: dict[int, int],
              committed: dict[int, int]) -> None:
        for tp in parts:
            positions.pop(tp.partition, None)
            committed.pop(tp.partition, None)
        self.log.add(kind, self.name, sorted(tp.partition for tp in parts))


@dataclass
class GroupReport:
    consumed: int
    repeated: int  # records consumed a second time, as commits allow
    rebalances: int  # assignments, all members together
    problems: list[str]


def check_group(events: list[tuple[Any, ...]], acked: dict[str, Acked]) -> GroupReport:
    """Replay the group's events against the rules in this module's docstring."""
    owner: dict[int, str] = {}
    next_in_run: dict[int, int | None] = {}  # None: the owner has read nothing yet
    group_committed: Counter[int] = Counter()  # partition -> committed offset (0: none)
    member_commits: dict[tuple[str, int], int] = {}  # (member, partition) -> its last commit
    first: dict[tuple[int, int], tuple[str, str]] = {}  # (p, offset) -> (value, member)
    problems: list[str] = []
    repeated = rebalances = 0
    for event in events:
        kind, member = event[0], event[1]
        if kind == "assign":
            rebalances += 1
            for p in event[2]:
                owner[p], next_in_run[p] = member, None
        elif kind in ("revoke", "lost"):
            for p in event[2]:
                if owner.get(p) == member:
                    del owner[p]
        elif kind == "commit":
            p, offset = event[2], event[3]
            if offset < group_committed[p]:
                problems.append(f"{member} moved the commit of {p} back to {offset} "
                                f"from {group_committed[p]}")
            group_committed[p] = offset
            member_commits[member, p] = offset
        else:
            p, offset, value = event[2], event[3], event[4]
            if owner.get(p) != member:
                problems.append(f"{member} consumed {p}/{offset} while {owner.get(p)} "
                                "owned the partition")
            expected = next_in_run.get(p)
            if expected is None and offset != group_committed[p]:
                problems.append(f"{member} began {p} at {offset}, the group had "
                                f"committed {group_committed[p]}")
            elif expected is not None and offset != expected:
                problems.append(f"{member} read {p}/{offset} after {p}/{expected - 1}")
            next_in_run[p] = offset + 1
            seen = first.get((p, offset))
            if seen is None:
                first[p, offset] = (value, member)
                continue
            repeated += 1
            if seen[0] != value:
                problems.append(f"{p}/{offset} read as {seen[0]!r}, then as {value!r}")
            last_commit = member_commits.get((seen[1], p), 0)
            if offset < last_commit:
                problems.append(f"{member} consumed {p}/{offset} again, below "
                                f"{seen[1]}'s commit of {last_commit}")
    for value, ack in acked.items():
        seen = first.get((ack.partition, ack.offset))
        if seen is None:
            problems.append(f"{value} (acked at {ack.partition}/{ack.offset}) never consumed")
        elif seen[0] != value:
            problems.append(f"{value} acked at {ack.partition}/{ack.offset}, "
                            f"{seen[0]} consumed there")
    return GroupReport(len(first), repeated, rebalances, problems)


def coordinator(bootstrap: str) -> int:
    """The group's coordinator as the brokers tell it (FindCoordinator)."""
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    described = admin.describe_consumer_groups([GROUP], request_timeout=20)[GROUP]
    return described.result(20).coordinator.id


# --- the test ----------------------------------------------------------------------------


def test_rolling_restart_loses_nothing_and_the_group_repeats_only_uncommitted_records(
        cluster: Cluster) -> None:
    cluster.create_topic(TOPIC, PARTITIONS, 3, **{"min.insync.replicas": "2"})
    group_log = GroupLog()
    members = [Member(f"member-{i}", cluster.bootstrap, group_log) for i in range(MEMBERS)]
    run = None
    try:
        cluster.wait_for(lambda: sorted(group_log.owners()) == list(range(PARTITIONS))
                         and len(set(group_log.owners().values())) == MEMBERS,
                         WAIT_S, "each member of the group owning a partition")
        offsets_partition = partition_for(GROUP, OFFSETS_PARTITIONS)
        home = cluster.replicas(OFFSETS_TOPIC)[offsets_partition][0]
        cluster.wait_for(lambda: coordinator(cluster.bootstrap) == home, WAIT_S,
                         f"the group's coordinator on broker {home}")
        run = start_producer(cluster.bootstrap, TOPIC, PARTITIONS, "rolling")
        time.sleep(2)  # records flowing and consumed before the first stop
        for step, node in enumerate(sorted(cluster.brokers)):
            cluster.stop_broker(node)  # SIGTERM: controlled shutdown, then a clean exit
            if node == home:
                cluster.wait_for(lambda n=node: coordinator(cluster.bootstrap) not in (n, -1),
                                 WAIT_S, f"the group's coordinator moved off broker {node}")
            if step == 1:  # a member replaced: the group rebalances with a broker down
                leaving = members[0]
                leaving.stop.set()
                leaving.thread.join(60)
                members.append(Member(f"member-{MEMBERS}", cluster.bootstrap, group_log))
                cluster.wait_for(lambda: len(set(group_log.owners().values())) == MEMBERS
                                 and len(group_log.owners()) == PARTITIONS, WAIT_S,
                                 "the group rebalanced over its new member")
            time.sleep(1)  # the producer and the group go on with two brokers
            cluster.start_broker(node)
            for topic, partitions in ((TOPIC, PARTITIONS), (OFFSETS_TOPIC, OFFSETS_PARTITIONS)):
                cluster.wait_for_full_isr(topic, partitions, WAIT_S)
                cluster.wait_for(lambda t=topic: cluster.led_by_preferred(t), WAIT_S,
                                 f"{topic}'s preferred leaders back after broker {node}")
            cluster.wait_for(lambda: coordinator(cluster.bootstrap) == home, WAIT_S,
                             f"the group's coordinator back on broker {home}")
            time.sleep(1)  # traffic with the whole cluster back before the next stop
        stop_producers(run)
        acked = set((a.partition, a.offset) for a in run.acked.values())
        cluster.wait_for(lambda: acked <= group_log.consumed(), WAIT_S,
                         "the group consuming every acknowledged record")
        time.sleep(1)  # a late repeat would show now
    finally:
        for member in members:
            member.stop.set()
        for member in members:
            member.thread.join(60)
        if run is not None:
            stop_producers(run)
    for member in members:
        assert not member.thread.is_alive(), f"{member.name} did not stop"
        assert member.failure is None, f"{member.name} failed: {member.failure!r}"

    gap, gap_partition = longest_ack_gap(run)
    report = check(cluster.bootstrap, run)
    group = check_group(group_log.events, run.acked)
    print(f"\nrolling restart: {report.acked} acknowledged, longest gap between "
          f"acknowledgements of a partition {gap * 1000:.0f} ms (partition "
          f"{gap_partition}); the group consumed {group.consumed} "
          f"records, {group.repeated} of them again (uncommitted when their partition "
          f"moved), over {group.rebalances} assignments; producer errors {report.errors}, "
          f"consumer errors {dict(group_log.errors)}")
    report.assert_consistent()
    assert report.errors == {}, report.errors  # librdkafka retried every retriable one
    assert report.acked >= 500, report
    assert group.problems == [], group.problems[:20]
    cluster.stop_all_and_compare_replicas(TOPIC, PARTITIONS)


# --- the checker's rules, on made-up histories (no cluster) -------------------------------


def _history(*consumed_then: tuple[Any, ...]) -> list[tuple[Any, ...]]:
    """a owns partition 0 and reads offsets 0-3, committing 2 (records 0 and 1 done);
    the partition then moves to b; ``consumed_then`` follows."""
    return [("assign", "a", [0]), *(("consume", "a", 0, o, f"v-{o}") for o in range(4)),
            ("commit", "a", 0, 2), ("revoke", "a", [0]), ("assign", "b", [0]),
            *consumed_then]


def test_check_group_allows_repeating_what_was_read_after_the_last_commit() -> None:
    events = _history(*(("consume", "b", 0, o, f"v-{o}") for o in (2, 3, 4)))
    acked = {f"v-{o}": Acked(0, o) for o in range(5)}
    report = check_group(events, acked)
    assert report.problems == []
    assert (report.consumed, report.repeated) == (5, 2)


def test_check_group_flags_repeats_below_a_commit_gaps_and_unread_records() -> None:
    again = check_group(_history(("consume", "b", 0, 1, "v-1")), {})
    assert any("began 0 at 1" in p for p in again.problems), again.problems
    assert any("again, below a's commit of 2" in p for p in again.problems), again.problems
    gap = check_group(_history(("consume", "b", 0, 2, "v-2"), ("consume", "b", 0, 4, "v-4")),
                      {"v-5": Acked(0, 5)})
    assert any("read 0/4 after 0/2" in p for p in gap.problems), gap.problems
    assert any("v-5 (acked at 0/5) never consumed" in p for p in gap.problems), gap.problems
    stray = check_group(_history(("consume", "a", 0, 4, "v-4")), {})
    assert any("while b owned" in p for p in stray.problems), stray.problems
