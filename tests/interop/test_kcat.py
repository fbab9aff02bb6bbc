"""kcat (librdkafka 2.0.2, Debian's build) against an ``odradek serve`` process.

kcat produces keyed records with headers with ``-z`` set to every codec Kafka has (none,
gzip, snappy, lz4, zstd: Debian's librdkafka is built with all four), consumes them back
without a consumer group (simple assign: Metadata v4, ListOffsets v2, Fetch v11), lists
metadata (``-L``) and looks offsets up by timestamp (``-Q``). kcat cannot create or delete
topics: confluent_kafka's AdminClient does that here.

Batches are checked on disk to be stored in the codec asked for (see the librdkafka
quirks below), and kcat's Fetch-side decompression of every codec is also checked on
batches written by confluent_kafka's newer librdkafka.
"""

from __future__ import annotations

import json
import shutil
import time

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from .conftest import BrokerProcess, require_tool, run_tool, stored_batches

pytestmark = pytest.mark.interop

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
HEADERS = [("trace", "abc-123"), ("dup", "1"), ("source", "kcat"), ("dup", "2")]
QUIET = ["-q", "-X", "log_level=3"]  # kcat notices off; librdkafka errors still shown
# kcat -e stops at the first empty fetch at the end of the log, which the broker (rightly)
# holds for fetch.wait.max.ms (librdkafka: 500 ms): shorten that long poll.
SHORT_POLL = ["-X", "fetch.wait.max.ms=50"]
# Compressible values, so librdkafka keeps every batch compressed (it sends a batch
# uncompressed when compression would not make it smaller).
FILLER = "odradek " * 40

# Two librdkafka quirks decide whether its producer compresses at all, and the broker
# accommodates both (these tests guard that): librdkafka before 2.11.1 (kcat: 2.0.2)
# enables gzip/snappy/lz4 only if ApiVersions lists Produce v0 (its check reads the range
# v0..v0), and every version enables LZ4 only if FindCoordinator is listed. Failing
# either, it logs "Broker does not support compression type X: not compressing batch"
# and sends batches uncompressed, which the round trip alone would not notice.


@pytest.fixture(scope="module")
def kcat() -> str:
    path = require_tool("kcat", installable=shutil.which("apt-get") is not None,
                        install_hint="scripts/test.sh installs it (apt-get install kcat)")
    version = run_tool([path, "-V"]).stdout
    features = version.partition("builtin.features=")[2]
    missing = [c for c in ("gzip", "snappy", "lz4", "zstd") if c not in features.split(",")]
    assert not missing, f"this kcat's librdkafka lacks codecs {missing}:\n{version}"
    return path


@pytest.fixture(scope="module")
def admin(odradek_server: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": odradek_server.bootstrap})


def create_topic(admin: AdminClient, name: str, partitions: int) -> None:
    futures = admin.create_topics([NewTopic(name, num_partitions=partitions,
                                            replication_factor=1)], operation_timeout=10)
    futures[name].result(timeout=30)


def delete_topic(admin: AdminClient, name: str) -> None:
    admin.delete_topics([name], operation_timeout=10)[name].result(timeout=30)


def header_args(headers: list[tuple[str, str]]) -> list[str]:
    return [arg for name, value in headers for arg in ("-H", f"{name}={value}")]


def consume_json(kcat: str, boot: str, topic: str, *args: str) -> list[dict]:
    """``kcat -C -J -e`` from the given start (``-o beginning`` unless ``args`` say else)."""
    if "-o" not in args:
        args = ("-o", "beginning", *args)
    done = run_tool([kcat, "-C", "-b", boot, "-t", topic, "-J", "-e", *QUIET, *SHORT_POLL,
                     *args])
    return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]


def query_offsets(kcat: str, boot: str, topic: str, partition: int,
                  timestamps: list[int]) -> list[int]:
    """``kcat -Q`` for several timestamps of one partition, answers in the same order."""
    answers = []
    # One -t per call: kcat answers several -t of one partition all with the same offset.
    for ts in timestamps:
        done = run_tool([kcat, "-Q", "-b", boot, "-t", f"{topic}:{partition}:{ts}", *QUIET])
        lines = [line for line in done.stdout.splitlines() if line.strip()]
        assert len(lines) == 1, done.stdout
        name, part, word, offset = lines[0].split()
        assert (name, part, word) == (topic, f"[{partition}]", "offset"), lines[0]
        answers.append(int(offset))
    return answers


def metadata(kcat: str, boot: str, *args: str) -> dict:
    return json.loads(run_tool([kcat, "-L", "-J", "-b", boot, *QUIET, *args]).stdout)


def test_metadata_lists_the_broker_and_the_topics_partitions(kcat, odradek_server, admin):
    boot = odradek_server.bootstrap
    create_topic(admin, "kcat-meta", 3)
    md = metadata(kcat, boot)
    assert md["brokers"] == [{"id": 0, "name": boot}]
    assert md["controllerid"] == 0
    topics = {t["topic"]: t for t in md["topics"]}
    assert "kcat-meta" in topics
    partitions = sorted(topics["kcat-meta"]["partitions"], key=lambda p: p["partition"])
    assert partitions == [{"partition": p, "leader": 0, "replicas": [{"id": 0}],
                           "isrs": [{"id": 0}]} for p in range(3)]

    one = metadata(kcat, boot, "-t", "kcat-meta")
    assert [t["topic"] for t in one["topics"]] == ["kcat-meta"]

    delete_topic(admin, "kcat-meta")
    assert "kcat-meta" not in {t["topic"] for t in metadata(kcat, boot)["topics"]}


@pytest.mark.parametrize("codec", CODECS)
def test_produce_consume_query_offsets_with_codec(kcat, odradek_server, admin, codec):
    """Three ``kcat -P -z CODEC`` runs (so timestamps differ between them) into partition 1
    of a 2-partition topic; read back in order with keys, values, headers and CreateTime;
    ``-Q`` answers the first offset at or after a time; partial reads by offset; then the
    topic is deleted. (Whether the batches really went compressed: the next test.)"""
    boot = odradek_server.bootstrap
    topic = f"kcat-{codec}"
    create_topic(admin, topic, 2)
    headers = [*HEADERS, ("codec", codec)]

    windows = []  # (first offset, count, wall clock ms before, after)
    offset = 0
    for run, count in enumerate((50, 30, 20)):
        lines = [f"key-{run}-{i}:value-{run}-{i} {FILLER}" for i in range(count)]
        before = int(time.time() * 1000)
        run_tool([kcat, "-P", "-b", boot, "-t", topic, "-p", "1", "-K:", "-z", codec,
                  *header_args(headers), *QUIET],
                 input="\n".join(lines) + "\n")
        after = int(time.time() * 1000) + 1
        windows.append((offset, count, before, after))
        offset += count
        time.sleep(0.01)  # distinct milliseconds between runs
    total = offset

    got = consume_json(kcat, boot, topic, "-p", "1")
    assert [m["offset"] for m in got] == list(range(total))
    assert all(m["partition"] == 1 and m["topic"] == topic for m in got)
    expected = [(f"key-{run}-{i}", f"value-{run}-{i} {FILLER}")
                for run, (_, count, _, _) in enumerate(windows) for i in range(count)]
    assert [(m["key"], m["payload"]) for m in got] == expected
    flat_headers = [part for pair in headers for part in pair]
    assert all(m["headers"] == flat_headers for m in got)
    assert all(m["tstype"] == "create" for m in got)
    for first, count, before, after in windows:
        for m in got[first:first + count]:
            assert before <= m["ts"] <= after, (m["offset"], m["ts"], before, after)
    timestamps = [m["ts"] for m in got]
    assert timestamps == sorted(timestamps)

    # Nothing went to partition 0; all of it is in partition 1's log.
    assert consume_json(kcat, boot, topic, "-p", "0") == []
    assert sum(b.count for b in stored_batches(odradek_server, topic, 1)) == total

    # Offsets by timestamp: the first offset whose timestamp is >= the query, or -1.
    queries = sorted({ts + d for ts in {timestamps[0], timestamps[50], timestamps[80]}
                      for d in (-1, 0, 1)})
    expect = [next((o for o, ts in enumerate(timestamps) if ts >= q), -1) for q in queries]
    future = timestamps[-1] + 60_000
    answers = query_offsets(kcat, boot, topic, 1, [*queries, future, -2, -1])
    assert answers == [*expect, -1, 0, total]
    assert query_offsets(kcat, boot, topic, 0, [timestamps[0], -2, -1]) == [-1, 0, 0]

    # Partial reads: an absolute start with a count, and the last records (-o -N).
    middle = consume_json(kcat, boot, topic, "-p", "1", "-o", "42", "-c", "5")
    assert [m["offset"] for m in middle] == [42, 43, 44, 45, 46]
    assert [m["key"] for m in middle] == [k for k, _ in expected[42:47]]
    tail = consume_json(kcat, boot, topic, "-p", "1", "-o", "-3")
    assert [m["offset"] for m in tail] == [total - 3, total - 2, total - 1]

    delete_topic(admin, topic)
    assert topic not in {t["topic"] for t in metadata(kcat, boot)["topics"]}


def test_null_keys_and_values_and_the_format_string(kcat, odradek_server, admin):
    """``-Z`` sends empty keys/values as NULL (a tombstone has a NULL value); ``-f`` prints
    keys, values, headers, timestamps and offsets the way scripts read them."""
    boot = odradek_server.bootstrap
    topic = "kcat-nulls"
    create_topic(admin, topic, 1)
    run_tool([kcat, "-P", "-b", boot, "-t", topic, "-K:", "-Z", "-H", "h=v", *QUIET],
             input="k1:v1\n:no-key\nk2:\nk3:v3\n")
    got = consume_json(kcat, boot, topic)
    assert [(m["key"], m["payload"]) for m in got] == [
        ("k1", "v1"), (None, "no-key"), ("k2", None), ("k3", "v3")]

    done = run_tool([kcat, "-C", "-b", boot, "-t", topic, "-o", "beginning", "-e", "-Z",
                     "-f", "%k|%s|%h|%T|%o|%p\n", *QUIET, *SHORT_POLL])
    rows = [line.split("|") for line in done.stdout.splitlines()]
    assert [r[:3] for r in rows] == [["k1", "v1", "h=v"], ["NULL", "no-key", "h=v"],
                                     ["k2", "NULL", "h=v"], ["k3", "v3", "h=v"]]
    assert [int(r[3]) for r in rows] == [m["ts"] for m in got]
    assert [r[4:] for r in rows] == [[str(o), "0"] for o in range(4)]
    delete_topic(admin, topic)


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_kcat_batches_are_stored_in_the_codec_asked_for(kcat, odradek_server, admin, codec):
    """``kcat -z CODEC`` sends compressed batches and the broker stores them as sent."""
    boot = odradek_server.bootstrap
    topic = f"kcat-stored-{codec}"
    create_topic(admin, topic, 1)
    lines = [f"k{i}:v{i} {FILLER}" for i in range(50)]
    run_tool([kcat, "-P", "-b", boot, "-t", topic, "-K:", "-z", codec, *QUIET],
             input="\n".join(lines) + "\n")
    try:
        batches = stored_batches(odradek_server, topic, 0)
        assert sum(b.count for b in batches) == len(lines)
        assert {b.codec for b in batches} == {codec}, batches
    finally:
        delete_topic(admin, topic)


def produce_with_confluent_kafka(boot: str, topic: str, codec: str,
                                 records: list[tuple[str, str]]) -> None:
    """Produce and flush; the producer is gone when this returns (no client left behind
    to reconnect to a stopped broker, even when the test fails)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": boot, "compression.type": codec,
                         "linger.ms": 20, "log_level": 3})
    for key, value in records:
        producer.produce(topic, key=key.encode(), value=value.encode(),
                         headers=[("codec", codec.encode())])
    assert producer.flush(30) == 0


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_kcat_reads_batches_compressed_by_a_newer_librdkafka(kcat, odradek_server, admin,
                                                             codec):
    """kcat decompresses what a newer librdkafka (confluent_kafka's) compressed."""
    boot = odradek_server.bootstrap
    topic = f"kcat-read-{codec}"
    create_topic(admin, topic, 1)
    expected = [(f"k{i}", f"v{i} {FILLER}") for i in range(40)]
    produce_with_confluent_kafka(boot, topic, codec, expected)
    try:
        batches = stored_batches(odradek_server, topic, 0)
        assert {b.codec for b in batches} == {codec}, batches
        got = consume_json(kcat, boot, topic)
        assert [(m["key"], m["payload"]) for m in got] == expected
        assert all(m["headers"] == ["codec", codec] for m in got)
    finally:
        delete_topic(admin, topic)
