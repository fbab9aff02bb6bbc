"""Consumer groups with real clients against ``odradek serve``: each member is a process
of its own (tests/interop/group_member.py), so one can be SIGKILLed like a crashed
machine — no LeaveGroup, its session simply ends.

What a user relies on: inside a group every partition has exactly one owner and every
record is read (once, when nobody crashes); a crashed member's partitions move to the
others within the session timeout and nothing is lost; cooperative rebalancing leaves
unaffected partitions where they are; another group reads everything again; committed
offsets survive a broker restart, clean or kill -9; and ``odradek groups reset-offsets``
moves a group.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from .conftest import BrokerProcess, require_tool, run_tool, start_broker

pytestmark = pytest.mark.interop

MEMBER = Path(__file__).with_name("group_member.py")
SESSION_MS = 3000
# Short timeouts so a test takes seconds: a member's session may be as short as 1 s, and
# an empty group's first rebalance waits 100 ms for more members instead of 3 s.
BROKER_ARGS = ("--override", "group.initial.rebalance.delay.ms=100",
               "--override", "group.min.session.timeout.ms=1000")
WAIT = 30.0  # generous bound for anything the tests wait for


class Member:
    """A group member process and the events it printed."""

    def __init__(self, bootstrap: str, group: str, topics: list[str], *,
                 client: str = "confluent", name: str = "member", **settings) -> None:
        cfg = {"client": client, "bootstrap": bootstrap, "group": group, "topics": topics,
               "client_id": name, "session_ms": SESSION_MS, **settings}
        self.name = name
        self.events: list[dict] = []
        self.stderr: list[str] = []
        self.proc = subprocess.Popen(
            [sys.executable, str(MEMBER), json.dumps(cfg)], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=dict(os.environ, PYTHONUNBUFFERED="1"))
        self._readers = [threading.Thread(target=self._read, daemon=True),
                         threading.Thread(target=self._read_stderr, daemon=True)]
        for reader in self._readers:
            reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.events.append(json.loads(line))

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr.append(line)

    @property
    def records(self) -> list[dict]:
        return [e for e in list(self.events) if e["e"] == "rec"]

    def values(self) -> list[str]:
        return [e["v"] for e in self.records]

    def assignment(self) -> set[tuple[str, int]]:
        """What the member owns now: eager assignors hand out whole assignments,
        cooperative ones increments; replaying both kinds of event covers both."""
        owned: set[tuple[str, int]] = set()
        for e in list(self.events):
            if e["e"] == "assigned":
                owned |= {tuple(p) for p in e["p"]}
            elif e["e"] == "revoked":
                owned -= {tuple(p) for p in e["p"]}
        return owned

    def close(self) -> None:
        """Graceful: commit and leave the group."""
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(WAIT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                pytest.fail(f"{self.name} did not close in {WAIT}s\n{''.join(self.stderr)}")
        for reader in self._readers:
            reader.join(5)

    def kill(self) -> None:
        """A crash: SIGKILL, no LeaveGroup, no final commit."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def __repr__(self) -> str:
        return f"Member({self.name}, owns {sorted(self.assignment())})"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with start_broker(tmp_path_factory.mktemp("groups-data"), *BROKER_ARGS) as broker:
        yield broker


@pytest.fixture
def members() -> Iterator[list[Member]]:
    started: list[Member] = []
    yield started
    for member in started:
        if member.proc.poll() is None:
            member.kill()


def wait_for(what: str, condition: Callable[[], bool], timeout: float = WAIT) -> float:
    """Wait until ``condition()``; returns the seconds it took."""
    start = time.monotonic()
    while not condition():
        if time.monotonic() - start > timeout:
            pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.05)
    return time.monotonic() - start


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(10)


def produce(bootstrap: str, topic: str, partitions: int, count: int, start: int = 0
            ) -> list[str]:
    """``count`` records spread evenly over the partitions; returns their values."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    values = [f"{topic}-{i}" for i in range(start, start + count)]
    for i, value in enumerate(values, start):
        producer.produce(topic, value=value.encode(), partition=i % partitions)
    assert producer.flush(WAIT) == 0
    return values


def all_partitions(topic: str, count: int) -> set[tuple[str, int]]:
    return {(topic, p) for p in range(count)}


def stable(group: list[Member], topic: str, partitions: int) -> Callable[[], bool]:
    """Every member owns something, no partition has two owners, none has none."""
    def check() -> bool:
        owned = [m.assignment() for m in group]
        union = set().union(*owned)
        return (all(owned) and union == all_partitions(topic, partitions)
                and sum(map(len, owned)) == partitions)
    return check


def read_everything(group: list[Member], values: list[str]) -> Callable[[], bool]:
    wanted = set(values)
    return lambda: wanted <= {v for m in group for v in m.values()}


def assert_each_partition_read_by_its_owner(group: list[Member], values: list[str]) -> None:
    """The records with these values were read only by the current owners."""
    wanted = set(values)
    for member in group:
        read = {(r["t"], r["p"]) for r in member.records if r["v"] in wanted}
        assert read <= member.assignment(), member


# --- one group, many members -------------------------------------------------------------


@pytest.mark.parametrize("clients", [
    ["confluent"] * 3,
    ["kafka-python"] * 2,
    ["aiokafka"] * 2,
    ["confluent", "kafka-python", "aiokafka"],
], ids=["confluent-kafka", "kafka-python", "aiokafka", "mixed"])
def test_members_share_the_partitions_and_read_every_record_once(server, members, clients):
    topic = group = "share-" + "-".join(sorted(set(clients))) + f"-{len(clients)}"
    create_topic(server.bootstrap, topic, 6)
    group_members = [Member(server.bootstrap, group, [topic], client=client,
                            name=f"{client}-{i}") for i, client in enumerate(clients)]
    members.extend(group_members)
    wait_for("a stable assignment", stable(group_members, topic, 6))

    values = produce(server.bootstrap, topic, 6, 600)
    wait_for("every record", read_everything(group_members, values))
    counts = Counter(v for m in group_members for v in m.values())
    assert set(counts) == set(values)
    assert {v: n for v, n in counts.items() if n > 1} == {}, "records read twice"
    assert_each_partition_read_by_its_owner(group_members, values)
    for member in group_members:
        member.close()

    # Another group is another subscriber: it reads everything again.
    second = Member(server.bootstrap, group + "-again", [topic], client=clients[-1])
    members.append(second)
    wait_for("the second group to read everything", read_everything([second], values))
    assert sorted(second.values()) == sorted(values)


def test_a_killed_member_s_partitions_move_within_the_session_timeout(server, members):
    topic = group = "crash"
    create_topic(server.bootstrap, topic, 6)
    group_members = [Member(server.bootstrap, group, [topic], name=f"m{i}") for i in range(3)]
    members.extend(group_members)
    wait_for("a stable assignment", stable(group_members, topic, 6))
    before = produce(server.bootstrap, topic, 6, 300)
    wait_for("the first records", read_everything(group_members, before))

    victim, *survivors = group_members
    orphaned = victim.assignment()
    victim.kill()  # no LeaveGroup: only the session timeout tells the broker
    after = produce(server.bootstrap, topic, 6, 300, start=300)
    took = wait_for("the survivors to take over", stable(survivors, topic, 6))
    # The session (3 s) ends, the survivors learn at their next heartbeat and rejoin.
    assert took < SESSION_MS / 1000 + 10
    assert orphaned <= survivors[0].assignment() | survivors[1].assignment()

    wait_for("every record after the crash", read_everything(survivors, after))
    everything = set(before) | set(after)
    read = {v for m in group_members for v in m.values()}
    assert everything <= read, "records lost"


def test_cooperative_rebalance_keeps_unaffected_partitions_assigned(server, members):
    topic = group = "coop"
    create_topic(server.bootstrap, topic, 6)
    first = Member(server.bootstrap, group, [topic], name="first",
                   strategy="cooperative-sticky")
    members.append(first)
    wait_for("the first member to own everything",
             lambda: first.assignment() == all_partitions(topic, 6))
    values = produce(server.bootstrap, topic, 6, 120)
    wait_for("the first records", read_everything([first], values))

    second = Member(server.bootstrap, group, [topic], name="second",
                    strategy="cooperative-sticky")
    members.append(second)
    wait_for("a shared assignment", stable([first, second], topic, 6))
    revoked = [set(map(tuple, e["p"])) for e in first.events if e["e"] == "revoked"]
    taken = set().union(*revoked)
    # Only what moved was revoked (eager would revoke all six, then hand three back).
    assert taken == second.assignment() and len(taken) == 3
    assert first.assignment() == all_partitions(topic, 6) - taken

    more = produce(server.bootstrap, topic, 6, 120, start=120)
    wait_for("the later records", read_everything([first, second], more))
    assert_each_partition_read_by_its_owner([first, second], more)


def test_a_restarted_static_member_gets_its_partitions_back_without_a_rebalance(
        server, members):
    """KIP-345: a member with a group.instance.id that restarts within its session takes
    its old place; the others are not disturbed (no revocation, no rebalance)."""
    topic = group = "static"
    create_topic(server.bootstrap, topic, 4)
    a, b = (Member(server.bootstrap, group, [topic], name=name, instance=name,
                   session_ms=10_000) for name in ("a", "b"))
    members.extend([a, b])
    wait_for("a stable assignment", stable([a, b], topic, 4))
    owned_by_a = a.assignment()
    b_events = len(b.events)

    a.kill()
    restarted = Member(server.bootstrap, group, [topic], name="a", instance="a",
                       session_ms=10_000)
    members.append(restarted)
    wait_for("the restarted member's assignment", lambda: bool(restarted.assignment()))
    assert restarted.assignment() == owned_by_a
    values = produce(server.bootstrap, topic, 4, 40)
    wait_for("every record", read_everything([restarted, b], values))
    assert [e for e in b.events[b_events:] if e["e"] != "rec"] == [], "b was disturbed"


# --- committed offsets -----------------------------------------------------------------


@pytest.mark.parametrize("stop", ["sigterm", "sigkill"])
def test_committed_offsets_survive_a_broker_restart(tmp_path, stop):
    data = tmp_path / "data"
    topic = group = "durable"
    with start_broker(data, *BROKER_ARGS) as broker:
        create_topic(broker.bootstrap, topic, 3)
        before = produce(broker.bootstrap, topic, 3, 90)
        member = Member(broker.bootstrap, group, [topic])
        try:
            wait_for("every record", read_everything([member], before))
        finally:
            member.close()  # commits what it read
        if stop == "sigkill":
            broker.kill()
    with start_broker(data, *BROKER_ARGS) as broker:
        after = produce(broker.bootstrap, topic, 3, 30, start=90)
        member = Member(broker.bootstrap, group, [topic])
        try:
            wait_for("the new records", read_everything([member], after))
            time.sleep(0.5)  # anything from before would arrive first: give it the chance
        finally:
            member.close()
        assert sorted(member.values()) == sorted(after)


def odradek_groups(bootstrap: str, *argv: str) -> str:
    done = run_tool([sys.executable, "-m", "odradek", "groups", *argv,
                     "--bootstrap-server", bootstrap])
    return done.stdout


def test_reset_offsets_moves_a_group_and_it_reads_from_there(server, members):
    topic = group = "rewind"
    create_topic(server.bootstrap, topic, 2)
    values = produce(server.bootstrap, topic, 2, 40)
    member = Member(server.bootstrap, group, [topic])
    wait_for("every record", read_everything([member], values))
    member.close()

    described = odradek_groups(server.bootstrap, "describe", group)
    assert "Empty" in described
    lag_lines = [line.split() for line in described.splitlines() if line.startswith(topic)]
    assert [(f[1], f[2], f[3], f[4]) for f in lag_lines] == [
        ("0", "20", "20", "0"), ("1", "20", "20", "0")]

    plan = odradek_groups(server.bootstrap, "reset-offsets", group, "--topic", topic,
                          "--shift-by", "-5", "--dry-run")
    assert "15" in plan
    odradek_groups(server.bootstrap, "reset-offsets", group, "--topic", topic,
                   "--shift-by", "-5")
    again = Member(server.bootstrap, group, [topic])
    members.append(again)
    wait_for("the last five of each partition", lambda: len(again.values()) >= 10)
    time.sleep(0.5)
    assert sorted(again.values()) == sorted(v for i, v in enumerate(values)
                                             if i // 2 >= 15)
    again.close()

    odradek_groups(server.bootstrap, "reset-offsets", group, "--topic", topic,
                   "--to-earliest")
    listed = odradek_groups(server.bootstrap, "list")
    assert group in listed.split()
    odradek_groups(server.bootstrap, "delete", group)
    assert group not in odradek_groups(server.bootstrap, "list").split()


def test_kcat_balanced_consumer_reads_through_a_group(server, members):
    """kcat -G: librdkafka 2.0.2's balanced consumer (the older librdkafka Debian ships)."""
    import shutil

    kcat = require_tool("kcat", installable=shutil.which("apt-get") is not None,
                        install_hint="scripts/test.sh installs it (apt-get install kcat)")
    topic = group = "kcat-group"
    create_topic(server.bootstrap, topic, 3)
    values = produce(server.bootstrap, topic, 3, 30)
    done = run_tool([kcat, "-b", server.bootstrap, "-G", group, "-X",
                     "auto.offset.reset=earliest", "-X", "session.timeout.ms=6000",
                     "-c", "30", "-f", "%s\n", "-q", topic], timeout=WAIT)
    assert sorted(done.stdout.split()) == sorted(values)
    # Its commits landed: the group is known, with offsets.
    described = odradek_groups(server.bootstrap, "describe", group)
    committed = [line.split()[2] for line in described.splitlines()
                 if line.startswith(topic + " ")]
    assert committed and all(c != "-" for c in committed)
