"""The Go clients against an ``odradek serve`` process: franz-go 1.22.3, sarama 1.61.1
and kafka-go 0.4.51.

Each client has a small program under tests/interop/go (``cmd/franz``, ``cmd/sarama``,
``cmd/kafkago``), built by ``scripts/fetch_go.sh`` into .cache/go/bin. A program runs one
scenario against the bootstrap it is given and prints what the client saw as one JSON
line; the assertions are here:

- produce: every codec (none, gzip, snappy, lz4, zstd) with keys, headers and
  timestamps, read back by partition (no group) exactly once and in order; the batches
  the broker stored carry the codec asked for (``odradek dump-log``), and franz-go's and
  sarama's the producer id of their idempotent producers;
- group: member a reads alone, b joins and the partitions are split between them, b
  leaves and a takes everything back, each record read once by the partition's owner
  (franz-go: cooperative-sticky, a gives up only what b gets; sarama: range, eager);
- franz-go transactions: records of an open transaction are invisible to read_committed,
  committed ones appear, aborted ones never; a GroupTransactSession consumes, transforms
  and produces exactly once across a deliberate abort.

The binaries are missing when scripts/fetch_go.sh has not run: the tests skip then,
except in CI (CI set), where they fail.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

from .conftest import BrokerProcess, run_tool, start_broker, stored_batches

pytestmark = pytest.mark.interop

REPO = Path(__file__).resolve().parents[2]
GO_BIN = REPO / ".cache" / "go" / "bin"
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
BASE_TS = 1_700_000_000_000
RUN_TIMEOUT = 240.0  # seconds for one program (each step inside waits at most 60 s)


def require_program(name: str) -> Path:
    """The built program, else skip (locally) or fail (CI)."""
    path = GO_BIN / name
    if path.is_file() and os.access(path, os.X_OK):
        return path
    message = f"{path} is not built: run bash scripts/fetch_go.sh (needs Go 1.26)"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="module")
def odradek_server(tmp_path_factory: pytest.TempPathFactory):
    """One broker for the module. Named as conftest's fixture, so a failing test's report
    carries the broker's output. New groups rebalance at once (Kafka's test setting),
    not after the default 3 s."""
    with start_broker(tmp_path_factory.mktemp("odradek-data"),
                      "--override", "group.initial.rebalance.delay.ms=0") as broker:
        yield broker


def run_go(program: str, scenario: str, broker: BrokerProcess, topic: str, *,
           bootstrap: str | None = None, extra: Sequence[str] = ()) -> dict:
    """The program's JSON result; the test fails when it exits with an error. ``bootstrap``
    (default: the broker's PLAINTEXT address) and ``extra`` flags (-tls-ca, -sasl-*: see
    test_go_secure.py) go before the scenario."""
    binary = require_program(program)
    done = run_tool([str(binary), "-bootstrap", bootstrap or broker.bootstrap, "-topic", topic,
                     *extra, scenario], timeout=RUN_TIMEOUT, check=False)
    lines = done.stdout.strip().splitlines()
    try:
        result = json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        result = {"error": "no JSON result line"}
    if done.returncode != 0 or "error" in result:
        pytest.fail(f"{program} {scenario} failed (exit code {done.returncode}): "
                    f"{result.get('error')}\n--- stderr ---\n{done.stderr}")
    return result


def value(phase: str, partition: int, i: int) -> str:
    return f"{phase}-{partition}-{i:04d}"


def by_partition(records: list[dict]) -> dict[int, list[dict]]:
    out: dict[int, list[dict]] = {}
    for r in records:
        out.setdefault(r["p"], []).append(r)
    return out


# --- produce and read back, every codec ---------------------------------------------------

@pytest.mark.parametrize("program", ["franz", "sarama", "kafkago"])
def test_go_client_writes_every_codec_and_reads_each_record_back_once_in_order(
        odradek_server, program):
    topic = f"go-produce-{program}"
    check_produce(run_go(program, "produce", odradek_server, topic), odradek_server, topic,
                  program)


def check_produce(result: dict, broker: BrokerProcess, topic: str, program: str) -> None:
    """What the produce scenario must have seen and stored (test_go_secure.py too)."""
    partitions, count = 3, 20
    got = by_partition(result["records"])
    assert sorted(got) == list(range(partitions))
    for p, records in got.items():
        assert [r["o"] for r in records] == list(range(count * len(CODECS)))
        assert [r["v"] for r in records] == [value(c, p, i) for c in CODECS
                                             for i in range(count)]
        assert [r["k"] for r in records] == [f"k{p}-{i}" for _ in CODECS
                                             for i in range(count)]
        assert [r["h"] for r in records] == [{"phase": c, "index": str(i)} for c in CODECS
                                             for i in range(count)]
        assert [r["ts"] for r in records] == [BASE_TS + i * 10 for _ in CODECS
                                              for i in range(count)]
    if "produced" in result:  # the offsets the producer was acknowledged
        for n, codec in enumerate(CODECS):
            assert result["produced"][codec] == [n * count + i for _ in range(partitions)
                                                 for i in range(count)]

    for p in range(partitions):
        batches = stored_batches(broker, topic, p)
        assert sum(b.count for b in batches) == count * len(CODECS)
        # Each codec's records were sent in one go: consecutive batches, in send order.
        codecs_in_order = [b.codec for b in batches]
        assert [c for n, c in enumerate(codecs_in_order)
                if n == 0 or codecs_in_order[n - 1] != c] == CODECS
        if program in ("franz", "sarama"):  # idempotent producers (franz-go's default)
            assert all(b.producer_id >= 0 and b.base_sequence >= 0 for b in batches)
        else:
            assert all(b.producer_id == -1 for b in batches)


# --- consumer groups ------------------------------------------------------------------------

def check_group_reads(result: dict, shared: dict[str, list[int]], partitions: int,
                      count: int) -> None:
    """Every record of p1, p2, p3 read exactly once: p1 and p3 by a, p2 by the member
    that owned the partition while a and b shared the group; offsets rise per member."""
    assert sorted(shared["a"] + shared["b"]) == list(range(partitions))
    assert not set(shared["a"]) & set(shared["b"])
    assert len(shared["a"]) == len(shared["b"]) == partitions // 2  # balanced
    records = result["records"]
    seen = Counter(r["v"] for r in records)
    expected = {value(phase, p, i) for phase in ("p1", "p2", "p3")
                for p in range(partitions) for i in range(count)}
    assert set(seen) == expected
    assert [v for v, n in seen.items() if n > 1] == []
    owner = {p: m for m, ps in shared.items() for p in ps}
    for r in records:
        phase = r["v"].split("-")[0]
        assert r["member"] == (owner[r["p"]] if phase == "p2" else "a"), r
    for member in ("a", "b"):
        for p, rs in by_partition([r for r in records if r["member"] == member]).items():
            offsets = [r["o"] for r in rs]
            assert offsets == sorted(offsets), (member, p)


def replay(events: list[dict]) -> list[tuple[str, str, list[int]]]:
    """The events in order, checking that no partition ever has two owners (a member is
    assigned a partition only after its previous owner gave it up)."""
    owner: dict[int, str] = {}
    out = []
    for e in sorted(events, key=lambda e: e["seq"]):
        member, kind, ps = e["member"], e["kind"], e["partitions"]
        for p in ps:
            if kind == "assigned":
                assert p not in owner, f"{member} assigned {p}, still owned by {owner.get(p)}"
                owner[p] = member
            else:
                assert owner.get(p) == member, f"{member} {kind} {p} it did not own"
                del owner[p]
        out.append((member, kind, ps))
    return out


def test_franz_cooperative_sticky_group_moves_only_what_the_new_member_gets(odradek_server):
    partitions, count = 6, 10
    result = run_go("franz", "group", odradek_server, "go-group-franz")
    shared = result["shared"]
    check_group_reads(result, shared, partitions, count)
    every = list(range(partitions))
    a, b = sorted(shared["a"]), sorted(shared["b"])
    events = replay(result["events"])
    # Cooperative: when b joins, a gives up exactly what b gets and keeps the rest; when b
    # leaves, a gains b's partitions without giving anything up; nothing is ever lost.
    assert [e[1:] for e in events if e[0] == "a"] == [
        ("assigned", every), ("revoked", b), ("assigned", b), ("revoked", every)]
    assert [e[1:] for e in events if e[0] == "b"] == [("assigned", b), ("revoked", b)]
    assert a == sorted(set(every) - set(b))


def test_sarama_consumer_group_rebalances_eagerly_and_reads_each_record_once(odradek_server):
    partitions, count = 6, 10
    result = run_go("sarama", "group", odradek_server, "go-group-sarama")
    shared = result["shared"]
    check_group_reads(result, shared, partitions, count)
    every = list(range(partitions))
    events = replay(result["events"])
    a_events = [e[1:] for e in events if e[0] == "a"]
    # Eager (range): a starts with everything and gives everything up when b joins, then
    # holds its share; after b leaves it has everything again.
    assert a_events[:2] == [("assigned", every), ("revoked", every)]
    assert ("assigned", sorted(shared["a"])) in a_events
    assert a_events[-2:] == [("assigned", every), ("revoked", every)]
    assert [e[1:] for e in events if e[0] == "b"] == [
        ("assigned", sorted(shared["b"])), ("revoked", sorted(shared["b"]))]


def test_kafka_go_group_readers_split_partitions_and_read_each_record_once(odradek_server):
    partitions, count = 6, 10
    result = run_go("kafkago", "group", odradek_server, "go-group-kafkago")
    alone, shared, again = result["owners"]  # from DescribeGroups, by client id
    every = list(range(partitions))
    assert sorted(alone["a"]) == sorted(again["a"]) == every
    assert set(alone) == set(again) == {"a"}
    check_group_reads(result, {m: sorted(ps) for m, ps in shared.items()}, partitions, count)


# --- franz-go transactions -------------------------------------------------------------------

def read_values(bootstrap: str, topic: str, partitions: int, isolation: str,
                timeout: float = 60.0) -> dict[int, list[str]]:
    """Every value of the topic's partitions, read with confluent_kafka (assign, no
    group) at the isolation level given, up to the end (the LSO for read_committed)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "odradek-go-unused",
                         "enable.partition.eof": True, "enable.auto.commit": False,
                         "isolation.level": isolation, "log_level": 3})
    got: dict[int, list[str]] = {p: [] for p in range(partitions)}
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        at_end: set[int] = set()
        deadline = time.monotonic() + timeout
        while len(at_end) < partitions:
            assert time.monotonic() < deadline, f"read {topic} ({isolation}): {got}"
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error():
                assert message.error().code() == KafkaError._PARTITION_EOF, message.error()
                at_end.add(message.partition())
                continue
            got[message.partition()].append(message.value().decode())
    finally:
        consumer.close()
    return got


def test_franz_transaction_is_visible_to_read_committed_only_after_commit(odradek_server):
    partitions, count = 2, 10
    topic = "go-txn-franz"
    result = run_go("franz", "txn", odradek_server, topic)
    # c1's records were in the log (read_uncommitted saw them) while read_committed saw
    # nothing; after the commit it saw all of them.
    assert result["seen_while_open"] == 0
    assert result["seen_after_commit"] == partitions * count

    def values(phases):
        return {p: [value(ph, p, i) for ph in phases for i in range(count)]
                for p in range(partitions)}

    franz_committed = {p: [r["v"] for r in rs]
                       for p, rs in by_partition(result["read_committed"]).items()}
    franz_uncommitted = {p: [r["v"] for r in rs]
                         for p, rs in by_partition(result["read_uncommitted"]).items()}
    assert franz_committed == values(["c1", "c2"])  # a1 was aborted: never seen
    assert franz_uncommitted == values(["c1", "a1", "c2"])
    # Another client agrees.
    bootstrap = odradek_server.bootstrap
    assert read_values(bootstrap, topic, partitions, "read_committed") == values(["c1", "c2"])
    assert read_values(bootstrap, topic, partitions, "read_uncommitted") == values(
        ["c1", "a1", "c2"])


def test_franz_group_transact_session_is_exactly_once_across_an_abort(odradek_server):
    partitions, count = 3, 30
    topic = "go-eos-franz"
    result = run_go("franz", "eos", odradek_server, topic)
    txns = result["transactions"]
    # The first transaction was aborted on purpose (its records flushed to the log first);
    # the session rewound to the committed offsets and processed them again.
    assert txns[0]["abort"] and not txns[0]["committed"] and txns[0]["records"] > 0
    assert all(t["committed"] for t in txns[1:])
    assert sum(t["records"] for t in txns[1:]) == partitions * count
    assert result["leftover"] == []  # a new session of the group found nothing to redo

    expected = {p: [f"out:{value('in', p, i)}" for i in range(count)]
                for p in range(partitions)}
    assert {p: [r["v"] for r in rs] for p, rs in by_partition(result["out"]).items()} == expected
    bootstrap = odradek_server.bootstrap
    out = f"{topic}-out"
    assert read_values(bootstrap, out, partitions, "read_committed") == expected
    uncommitted = read_values(bootstrap, out, partitions, "read_uncommitted")
    assert sum(map(len, uncommitted.values())) == (
        partitions * count + txns[0]["records"])  # the aborted copies are in the log

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": result["group"],
                         "enable.auto.commit": False, "log_level": 3})
    try:
        committed = consumer.committed(
            [TopicPartition(f"{topic}-in", p) for p in range(partitions)], timeout=30)
    finally:
        consumer.close()
    assert [tp.offset for tp in committed] == [count] * partitions
