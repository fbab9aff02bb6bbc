"""kafkajs 2.2.4 (pure JavaScript, Node) against an ``odradek serve`` process.

kafkajs (tests/interop/js/client.js) creates topics, produces keyed records with headers
and explicit timestamps, reads offsets (earliest/latest, by timestamp) and metadata, and
deletes topics, with every codec it can use here:

- none and gzip: built into kafkajs;
- snappy: ``kafkajs-snappy`` (pure JS);
- lz4: ``kafkajs-lz4`` (the ``lz4`` package, built with node-gyp at ``npm ci``);
- zstd: NOT covered. Its codec package ``@kafkajs/zstd`` depends on ``cppzst`` 2.0.6, which
  does not compile against Node 20's headers (they need C++17), so kafkajs has no zstd
  codec on this machine.

Reading back: what kafkajs wrote is read back with confluent_kafka's Consumer and
``assign()`` (no coordinator involved, so a codec bug cannot hide behind a group bug), and
the batches the broker stored are inspected with ``odradek dump-log`` (codec, producer id,
sequence). kafkajs' own consumer (it has only a group consumer) reads through a consumer
group: FindCoordinator, JoinGroup, SyncGroup, Heartbeat, OffsetFetch and OffsetCommit.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    TIMESTAMP_CREATE_TIME,
    Consumer,
    KafkaError,
    TopicPartition,
)

from .conftest import BrokerProcess, require_tool, run_tool, stored_batches

pytestmark = pytest.mark.interop

JS_DIR = Path(__file__).parent / "js"
CODECS = ["none", "gzip", "snappy", "lz4"]
BASE_TS = 1_700_000_000_000
FILLER = "odradek " * 20


class KafkaJS:
    """Runs client.js with a plan of steps against one broker; returns its JSON answer."""

    def __init__(self, node: str) -> None:
        self.node = node

    def run(self, broker: BrokerProcess, steps: list[dict], *, log_level: str = "WARN",
            check: bool = True, bootstrap: str | None = None, **security: Any) -> dict:
        """``security``: client.js's ``ssl`` and ``sasl`` plan entries; ``bootstrap``: a
        listener other than the broker's main one."""
        plan = {"brokers": [bootstrap or broker.bootstrap], "logLevel": log_level,
                "steps": steps, **security}
        done = run_tool([self.node, str(JS_DIR / "client.js")], input=json.dumps(plan),
                        cwd=JS_DIR, check=False)
        lines = done.stdout.strip().splitlines()
        try:
            answer = json.loads(lines[-1])
        except (IndexError, json.JSONDecodeError):
            pytest.fail(f"client.js printed no JSON (exit code {done.returncode})\n"
                        f"--- stdout ---\n{done.stdout}\n--- stderr ---\n{done.stderr}")
        answer["log"] = done.stderr
        if check and (done.returncode != 0 or "error" in answer):
            pytest.fail(f"kafkajs step {answer.get('step')} ({answer.get('op')}) failed: "
                        f"{answer.get('error')}\n--- kafkajs log ---\n{done.stderr}")
        if check:
            # An error kafkajs retried past still means the broker answered wrongly once.
            errors = [line for line in done.stderr.splitlines() if '"level":"ERROR"' in line]
            assert not errors, "kafkajs logged errors:\n" + "\n".join(errors)
        return answer

    def results(self, broker: BrokerProcess, steps: list[dict], **kw) -> list[dict]:
        return self.run(broker, steps, **kw)["results"]


@pytest.fixture(scope="module")
def kafkajs() -> KafkaJS:
    return installed_kafkajs()


def installed_kafkajs() -> KafkaJS:
    """The runner, once node and tests/interop/js's kafkajs 2.2.4 are found (a test fails
    with how to install them if not)."""
    node = require_tool("node", installable=shutil.which("apt-get") is not None,
                        install_hint="the kafkajs tests need Node.js >= 18 and npm "
                        "(scripts/test.sh installs Debian's nodejs and npm)")
    if not (JS_DIR / "node_modules" / "kafkajs" / "package.json").is_file():
        pytest.fail(f"kafkajs is not installed in {JS_DIR}/node_modules: run "
                    "`npm ci --prefix tests/interop/js` (scripts/test.sh does)")
    version = run_tool([node, "-p", "require('kafkajs/package.json').version"], cwd=JS_DIR)
    assert version.stdout.strip() == "2.2.4"
    return KafkaJS(node)


def make_messages(codec: str, partition: int, count: int, start: int = 0) -> list[dict]:
    return [{"key": f"k{partition}-{i}", "value": f"{codec} {partition}/{i} {FILLER}",
             "partition": partition, "timestamp": BASE_TS + i * 10,
             "headers": {"trace": f"t-{i}", "codec": codec, "multi": ["a", "b"]}}
            for i in range(start, start + count)]


def expected_headers(message: dict) -> list[tuple[str, bytes]]:
    out = []
    for name, value in message.get("headers", {}).items():
        for one in value if isinstance(value, list) else [value]:
            out.append((name, one.encode()))
    return out


def read_back(bootstrap: str, topic: str, counts: dict[int, int],
              timeout: float = 30.0) -> dict[int, list]:
    """Every record of the given partitions, via confluent_kafka with assign() (no group)."""
    # group.id is required by confluent_kafka but unused: assign() and no commits need no
    # coordinator.
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "odradek-interop-unused",
                         "enable.partition.eof": True,
                         "enable.auto.commit": False, "log_level": 3})
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in counts])
        got: dict[int, list] = {p: [] for p in counts}
        at_end: set[int] = set()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if at_end == set(counts) and all(len(got[p]) >= n for p, n in counts.items()):
                break
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    at_end.add(msg.partition())
                    continue
                pytest.fail(f"confluent_kafka consumer error: {msg.error()}")
            got[msg.partition()].append(msg)
        else:
            pytest.fail(f"read back {[len(v) for v in got.values()]} of {counts} records "
                        f"in {timeout:.0f}s")
        return got
    finally:
        consumer.close()


def check_records(got: list, sent: list[dict]) -> None:
    assert [m.offset() for m in got] == list(range(len(sent)))
    for msg, want in zip(got, sent, strict=True):
        key = None if msg.key() is None else msg.key().decode()
        value = None if msg.value() is None else msg.value().decode()
        assert (key, value) == (want["key"], want["value"]), msg.offset()
        assert (msg.headers() or []) == expected_headers(want), msg.offset()
        assert msg.timestamp() == (TIMESTAMP_CREATE_TIME, want["timestamp"]), msg.offset()


@pytest.mark.parametrize("codec", CODECS)
def test_kafkajs_admin_produce_offsets_delete(kafkajs, odradek_server, codec):
    """createTopics, two sends (two batches per partition) in CODEC, fetchTopicOffsets,
    fetchTopicOffsetsByTimestamp, fetchTopicMetadata; read back by confluent_kafka;
    stored in CODEC; deleteTopics."""
    topic = f"kafkajs-{codec}"
    p0 = make_messages(codec, 0, 30)
    p1 = make_messages(codec, 1, 20)
    p1 += [{"key": None, "value": "no key", "partition": 1, "timestamp": BASE_TS + 1000},
           {"key": "tombstone", "value": None, "partition": 1, "timestamp": BASE_TS + 1010,
            "headers": {"why": "deleted"}}]
    first = p0[:12] + p1[:8]
    second = p0[12:] + p1[8:]

    created, sent1, sent2, offsets, by_mid, by_early, by_late, meta = kafkajs.results(
        odradek_server, [
            {"op": "createTopic", "topic": topic, "partitions": 2},
            {"op": "produce", "topic": topic, "codec": codec, "messages": first},
            {"op": "produce", "topic": topic, "codec": codec, "messages": second},
            {"op": "offsets", "topic": topic},
            {"op": "offsetsByTimestamp", "topic": topic, "timestamp": BASE_TS + 55},
            {"op": "offsetsByTimestamp", "topic": topic, "timestamp": BASE_TS - 1},
            {"op": "offsetsByTimestamp", "topic": topic, "timestamp": BASE_TS + 60_000},
            {"op": "metadata", "topics": [topic]},
        ])
    assert created == {"created": True}
    base = {r["partition"]: (r["errorCode"], r["baseOffset"]) for r in sent1["records"]}
    assert base == {0: (0, "0"), 1: (0, "0")}
    base = {r["partition"]: (r["errorCode"], r["baseOffset"]) for r in sent2["records"]}
    assert base == {0: (0, "12"), 1: (0, "8")}

    by_partition = {p["partition"]: p for p in offsets["partitions"]}
    assert {p: (v["low"], v["high"]) for p, v in by_partition.items()} == {
        0: ("0", "30"), 1: ("0", "22")}
    # First offset with timestamp >= the query; past the end, kafkajs reports the high
    # watermark (the broker answers -1).
    assert {p["partition"]: p["offset"] for p in by_mid["partitions"]} == {0: "6", 1: "6"}
    assert {p["partition"]: p["offset"] for p in by_early["partitions"]} == {0: "0", 1: "0"}
    assert {p["partition"]: p["offset"] for p in by_late["partitions"]} == {0: "30", 1: "22"}

    [meta_topic] = meta["topics"]
    assert meta_topic["name"] == topic
    assert sorted((p["partitionId"], p["leader"], p["replicas"], p["isr"], p["partitionErrorCode"])
                  for p in meta_topic["partitions"]) == [(0, 0, [0], [0], 0), (1, 0, [0], [0], 0)]

    got = read_back(odradek_server.bootstrap, topic, {0: len(p0), 1: len(p1)})
    check_records(got[0], p0)
    check_records(got[1], p1)

    for partition, sent in ((0, p0), (1, p1)):
        batches = stored_batches(odradek_server, topic, partition)
        assert [b.count for b in batches] == [
            sum(m["partition"] == partition for m in part) for part in (first, second)]
        assert {b.codec for b in batches} == {codec}, batches
        assert sum(b.count for b in batches) == len(sent)

    deleted, listed = kafkajs.results(odradek_server, [
        {"op": "deleteTopic", "topic": topic}, {"op": "listTopics"}])
    assert deleted == {"deleted": True}
    assert topic not in listed["topics"]


def test_kafkajs_idempotent_producer(kafkajs, odradek_server):
    """idempotent: true (InitProducerId, then sequence numbers): two sends of one producer
    land once each, under one producer id with consecutive sequences; a second producer
    gets a new id."""
    topic = "kafkajs-idempotent"
    sends = [make_messages("gzip", 0, 15), make_messages("gzip", 0, 10, start=15),
             make_messages("gzip", 0, 5, start=25)]
    _, one, other = kafkajs.results(odradek_server, [
        {"op": "createTopic", "topic": topic, "partitions": 1},
        {"op": "produce", "topic": topic, "codec": "gzip", "idempotent": True,
         "sends": sends[:2]},
        {"op": "produce", "topic": topic, "codec": "gzip", "idempotent": True,
         "messages": sends[2]},
    ])
    assert [[(r["errorCode"], r["baseOffset"]) for r in records]
            for records in one["sends"] + [other["records"]]] == [
        [(0, "0")], [(0, "15")], [(0, "25")]]

    got = read_back(odradek_server.bootstrap, topic, {0: 30})
    check_records(got[0], [m for send in sends for m in send])
    batches = stored_batches(odradek_server, topic, 0)
    assert [(b.base_offset, b.count, b.base_sequence, b.codec) for b in batches] == [
        (0, 15, 0, "gzip"), (15, 10, 15, "gzip"), (25, 5, 0, "gzip")]
    first, second, third = (b.producer_id for b in batches)
    assert first >= 0 and first == second and third not in (-1, first), batches
    kafkajs.results(odradek_server, [{"op": "deleteTopic", "topic": topic}])


def test_kafkajs_group_consumer_reads_from_the_beginning(kafkajs, odradek_server):
    topic = "kafkajs-group"
    sent = make_messages("none", 0, 5)
    kafkajs.results(odradek_server, [
        {"op": "createTopic", "topic": topic, "partitions": 1},
        {"op": "produce", "topic": topic, "codec": "none", "messages": sent},
    ])
    try:
        answer = kafkajs.run(odradek_server, [
            {"op": "consumeGroup", "topic": topic, "groupId": "kafkajs-interop", "count": 5,
             "timeoutMs": 20000}], check=False)
        assert "error" not in answer, answer["error"]
        [result] = answer["results"]
        assert [(m["offset"], m["key"], m["value"]) for m in result["messages"]] == [
            (str(i), m["key"], m["value"]) for i, m in enumerate(sent)]
    finally:
        kafkajs.results(odradek_server, [{"op": "deleteTopic", "topic": topic}])
