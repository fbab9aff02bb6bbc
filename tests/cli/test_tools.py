"""The console tools as a user runs them: ``python -m odradek topics|produce|consume``
in a subprocess against a real broker on a free port."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from odradek.cli.main import main
from odradek.devcluster import free_port
from odradek.testing import RunningBroker, running_broker

DESCRIBE_CONFIGS = 32
INCREMENTAL_ALTER_CONFIGS = 44


@pytest.fixture(scope="module")
def broker() -> Iterator[RunningBroker]:
    with running_broker() as running:
        yield running


def odradek(*args: str, bootstrap: str | None, stdin: bytes | None = None,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    argv = [sys.executable, "-m", "odradek", *args]
    if bootstrap is not None:
        argv += ["--bootstrap-server", bootstrap]
    return subprocess.run(argv, input=stdin, capture_output=True, timeout=60,
                          env={**os.environ, **(env or {})})


def odradek_together(*commands: list[str], bootstrap: str,
                     ) -> list[subprocess.CompletedProcess[bytes]]:
    """Run independent commands at the same time (the file stays fast)."""
    procs = [subprocess.Popen([sys.executable, "-m", "odradek", *argv,
                               "--bootstrap-server", bootstrap],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for argv in commands]
    results = []
    for argv, proc in zip(commands, procs, strict=True):
        out, err = proc.communicate(timeout=60)
        results.append(subprocess.CompletedProcess(argv, proc.returncode, out, err))
    return results


def ok(done: subprocess.CompletedProcess[bytes]) -> str:
    assert done.returncode == 0, done.stdout.decode() + done.stderr.decode()
    return done.stdout.decode()


def failed(done: subprocess.CompletedProcess[bytes], code: int = 1) -> str:
    """stderr of a command that must have failed with ``code``."""
    err = done.stderr.decode()
    assert done.returncode == code, done.stdout.decode() + err
    assert "Traceback" not in err
    return err




# --- topics --------------------------------------------------------------------------


def test_create_list_describe_delete_a_topic(broker):
    b, node = broker.bootstrap, broker.broker.node_id
    out = ok(odradek("topics", "create", "orders", "--partitions", "3",
                     "--replication-factor", "1", "--config", "retention.ms=123456",
                     bootstrap=b))
    assert out == "Created topic orders.\n"
    # The bootstrap server may come from the environment instead of the option.
    assert "orders" in ok(odradek("topics", "list", bootstrap=None,
                                  env={"ODRADEK_BOOTSTRAP_SERVER": b})).split()

    done = odradek("topics", "describe", "orders", bootstrap=b)
    lines = ok(done).splitlines()
    assert lines[0].startswith("Topic: orders\tPartitionCount: 3\tReplicationFactor: 1")
    assert lines[1:] == [f"\tTopic: orders\tPartition: {p}\tLeader: {node}\tReplicas: {node}"
                         f"\tIsr: {node}\tLeaderEpoch: 0" for p in range(3)]
    if DESCRIBE_CONFIGS in broker.broker.supported:
        assert lines[0].endswith("\tConfigs: retention.ms=123456"), lines[0]
    else:
        assert "topic settings not shown" in done.stderr.decode()

    assert "TOPIC_ALREADY_EXISTS" in failed(odradek("topics", "create", "orders",
                                                    bootstrap=b))
    assert ok(odradek("topics", "create", "orders", "--if-not-exists", bootstrap=b)) == (
        "Topic orders already exists.\n")

    assert ok(odradek("topics", "delete", "orders", bootstrap=b)) == "Deleted topic orders.\n"
    assert "orders" not in ok(odradek("topics", "list", bootstrap=b)).split()
    assert "topic 'orders' does not exist" in failed(
        odradek("topics", "describe", "orders", bootstrap=b))


def test_create_reports_what_the_broker_refuses(broker):
    err = failed(odradek("topics", "create", "replicated", "--replication-factor", "3",
                         bootstrap=broker.bootstrap))
    assert err.startswith("odradek topics create: cannot create topic 'replicated': ")
    assert "INVALID_REPLICATION_FACTOR" in err


def test_deleting_a_missing_topic_fails_clearly(broker):
    err = failed(odradek("topics", "delete", "no-such-topic", bootstrap=broker.bootstrap))
    assert err == "odradek topics delete: cannot delete: topic 'no-such-topic' does not exist\n"
    assert ok(odradek("topics", "delete", "no-such-topic", "--if-exists",
                      bootstrap=broker.bootstrap)) == "Topic no-such-topic does not exist.\n"


def test_alter_sets_and_removes_topic_settings(broker):
    b = broker.bootstrap
    ok(odradek("topics", "create", "tuned", "--config", "retention.ms=1000",
               "--config", "cleanup.policy=compact", bootstrap=b))
    if INCREMENTAL_ALTER_CONFIGS not in broker.broker.supported:
        pytest.skip("the broker does not serve IncrementalAlterConfigs yet")
    assert ok(odradek("topics", "alter", "tuned", "--config", "retention.ms=5000",
                      "--delete-config", "cleanup.policy", bootstrap=b)) == (
        "Updated config for topic tuned.\n")
    first = ok(odradek("topics", "describe", "tuned", bootstrap=b)).splitlines()[0]
    assert first.endswith("\tConfigs: retention.ms=5000"), first
    assert "--config" in failed(odradek("topics", "alter", "tuned", bootstrap=b), code=2)


def test_a_broker_without_the_config_apis_still_describes_partitions(broker, monkeypatch):
    """As against a broker that does not list DescribeConfigs and IncrementalAlterConfigs
    in its ApiVersions answer."""
    b = broker.bootstrap
    ok(odradek("topics", "create", "plain-old", "--partitions", "2", bootstrap=b))
    for key in (DESCRIBE_CONFIGS, INCREMENTAL_ALTER_CONFIGS):
        if key in broker.broker.supported:
            monkeypatch.delitem(broker.broker.supported, key)
    done = odradek("topics", "describe", "plain-old", bootstrap=b)
    lines = ok(done).splitlines()
    assert lines[0] == "Topic: plain-old\tPartitionCount: 2\tReplicationFactor: 1"
    assert len(lines) == 3
    assert done.stderr.decode() == (
        "note: topic settings not shown: the broker does not support DescribeConfigs\n")
    err = failed(odradek("topics", "alter", "plain-old", "--config", "retention.ms=1",
                         bootstrap=b))
    assert "does not support IncrementalAlterConfigs" in err


# --- produce and consume -------------------------------------------------------------


LINES = b"k1:v1\nk2:value:with:colons\n:empty key\nk4:\xffnot utf-8\n"


def test_produce_lines_with_keys_and_headers_then_consume_them_in_each_format(broker):
    b = broker.bootstrap
    ok(odradek("topics", "create", "lines", "--partitions", "1", bootstrap=b))
    before_ms = time.time() * 1000
    done = odradek("produce", "lines", "--key-separator", ":", "--header", "trace=abc",
                   "--header", "empty=", bootstrap=b, stdin=LINES)
    assert ok(done) == ""
    assert done.stderr == b"produced 4 records to lines\n"

    plain, kv, decorated, as_json = odradek_together(
        *(["consume", "lines", "--from-beginning", "--max-messages", "4", *options]
          for options in ([], ["--format", "kv"],
                          ["--format", "kv", "--print-headers", "--print-timestamp"],
                          ["--format", "json"])),
        bootstrap=b)
    for done in (plain, kv, decorated, as_json):
        assert done.returncode == 0, done.stderr
        assert done.stderr == b"consumed 4 messages from lines\n"
    # plain and kv pass the bytes through untouched, like Kafka's console consumer.
    assert plain.stdout == b"v1\nvalue:with:colons\nempty key\n\xffnot utf-8\n"
    assert kv.stdout == b"k1\tv1\nk2\tvalue:with:colons\n\tempty key\nk4\t\xffnot utf-8\n"
    for line in decorated.stdout.splitlines():
        timestamp, headers, _key, _value = line.split(b"\t")
        assert timestamp.startswith(b"CreateTime:")
        assert headers == b"trace:abc,empty:"

    records = [json.loads(line) for line in as_json.stdout.splitlines()]
    assert [(r["offset"], r["key"], r["value"]) for r in records] == [
        (0, "k1", "v1"), (1, "k2", "value:with:colons"), (2, "", "empty key"),
        (3, "k4", "\ufffdnot utf-8")]
    for r in records:
        assert r["topic"] == "lines" and r["partition"] == 0
        assert r["headers"] == [["trace", "abc"], ["empty", ""]]
        assert r["timestamp_type"] == "CreateTime"
        assert before_ms - 60_000 < r["timestamp"] < time.time() * 1000 + 60_000


def test_partition_and_offset_choose_where_reading_starts(broker):
    b = broker.bootstrap
    ok(odradek("topics", "create", "spread", "--partitions", "3", bootstrap=b))
    ok(odradek("produce", "spread", "--partition", "2", bootstrap=b,
               stdin=b"".join(b"m%d\n" % i for i in range(5))))

    done = odradek("consume", "spread", "--partition", "2", "--offset", "3",
                   "--max-messages", "2", "--format", "json", bootstrap=b)
    assert [(r["partition"], r["offset"], r["value"])
            for r in map(json.loads, ok(done).splitlines())] == [(2, 3, "m3"), (2, 4, "m4")]
    # Partition 0 is empty; and without --from-beginning reading starts at the end.
    # All partitions from the beginning: every record, in partition 2's order.
    empty, at_end, everything = odradek_together(
        ["consume", "spread", "--partition", "0", "--from-beginning", "--timeout-ms", "500"],
        ["consume", "spread", "--timeout-ms", "500"],
        ["consume", "spread", "--from-beginning", "--max-messages", "5"],
        bootstrap=b)
    for done in (empty, at_end):
        assert ok(done) == ""
        assert done.stderr == b"consumed 0 messages from spread\n"
    assert ok(everything).split() == ["m0", "m1", "m2", "m3", "m4"]

    err = failed(odradek("consume", "spread", "--partition", "7", "--timeout-ms", "500",
                         bootstrap=b))
    assert err == "odradek consume: topic 'spread' has no partition 7 (it has 3)\n"
    assert "--offset needs --partition" in failed(
        odradek("consume", "spread", "--offset", "1", bootstrap=b), code=2)


def test_producing_to_a_missing_topic_creates_it_with_every_codec(broker):
    b = broker.bootstrap
    assert "fresh" not in ok(odradek("topics", "list", bootstrap=b)).split()
    settings = [("none", "all"), ("gzip", "1"), ("snappy", "all"), ("lz4", "0"),
                ("zstd", "all")]
    for codec, acks in settings:
        done = odradek("produce", "fresh", "--compression", codec, "--acks", acks,
                       bootstrap=b, stdin=f"{codec} record\n".encode())
        assert done.returncode == 0 and done.stderr == b"produced 1 record to fresh\n", (
            done.stderr)
    assert "fresh" in ok(odradek("topics", "list", bootstrap=b)).split()
    assert ok(odradek("consume", "fresh", "--from-beginning", "--max-messages", "5",
                      bootstrap=b)).splitlines() == [f"{codec} record" for codec, _ in settings]


def test_a_line_without_the_key_separator_stops_the_producer(broker):
    b = broker.bootstrap
    done = odradek("produce", "halted", "--key-separator", "=", bootstrap=b,
                   stdin=b"a=1\nno separator\nc=3\n")
    err = failed(done)
    assert err.splitlines() == [
        "produced 1 record to halted",
        "odradek produce: line 2 has no key separator '='; stopped there"]
    assert ok(odradek("consume", "halted", "--from-beginning", "--timeout-ms", "500",
                      "--format", "kv", bootstrap=b)) == "a\t1\n"


def test_an_unreachable_bootstrap_server_fails_fast_with_a_clear_message():
    bad = f"127.0.0.1:{free_port()}"
    commands = {
        "topics list": ["topics", "list", "--request-timeout-ms", "1000"],
        "topics create": ["topics", "create", "x", "--request-timeout-ms", "1000"],
        "consume": ["consume", "x", "--request-timeout-ms", "1000"],
        "produce": ["produce", "x", "--delivery-timeout-ms", "1000"],
    }
    started = time.monotonic()
    running = {name: subprocess.Popen(
        [sys.executable, "-m", "odradek", *argv, "--bootstrap-server", bad],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for name, argv in commands.items()}
    results = {name: proc.communicate(b"a\nb\n", timeout=30)
               for name, proc in running.items()}
    assert time.monotonic() - started < 15
    for name, proc in running.items():
        _out, err = results[name]
        assert proc.returncode == 1, (name, err)
        text = err.decode()
        assert "Traceback" not in text and "Connection refused" in text, (name, text)
        if name != "produce":
            assert text.startswith(f"odradek {name}: cannot reach the broker at {bad}: ")
    assert results["produce"][1].decode().startswith(
        "produced 0 records to x\n"
        "odradek produce: 2 of 2 records were not delivered: Local: Message timed out")


def test_usage_errors_exit_2_before_connecting(capsys):
    assert main(["consume", "t", "--offset", "5", "--bootstrap-server", "nowhere:1"]) == 2
    assert main(["consume", "t", "--partition", "0", "--offset", "5", "--from-beginning",
                 "--bootstrap-server", "nowhere:1"]) == 2
    assert main(["topics", "list", "-X", "no.such.setting=1"]) == 2
    err = capsys.readouterr().err
    assert "--offset needs --partition" in err
    assert 'No such configuration property: "no.such.setting"' in err
    with pytest.raises(SystemExit) as exc:
        main(["topics"])
    assert exc.value.code == 2
