"""KIP-932 share groups ("queues for Kafka") with Kafka's 4.4 Java client against an
``odradek serve`` process: ``KafkaShareConsumer`` and the share-group ``Admin`` calls.

tests/interop/java/share/ShareChecks.java runs the checks and prints one ``RESULT {json}``
line of facts; the tests here assert on them (the same assertions hold against Apache
Kafka 4.4, which the program was first run against):

- shared: three consumers in one group on one partition (share groups hand a partition to
  every member), 300 records, implicit acknowledgement: each record processed exactly
  once, and more than one consumer got some.
- explicit: the first record RELEASEd comes back with delivery count 2; the second,
  REJECTed, never again; the rest ACCEPTed once.
- delivery_limit: group config share.delivery.count.limit=2 and a record released on
  every delivery: delivered twice, then never again.
- latest: the default share.auto.offset.reset (latest) skips what was produced before the
  group's first fetch; earliest (group config) reads it.
- admin: listGroups (type Share), describeShareGroups, listShareGroupOffsets,
  alterShareGroupOffsets, deleteShareGroupOffsets and deleteShareGroups, on an active
  group (GroupNotEmptyException) and on an empty one.
- the kill test: a consumer polls once and is SIGKILLed holding its records; a second
  consumer drains the group and gets them again (delivery count >= 2), after the
  acquisition lock (group.share.record.lock.duration.ms, lowered here to 5 s) expires or
  sooner.

Three JVMs (the checks, the holder, the drainer) keep the module to about a minute and a
half; Kafka's share consumer takes one heartbeat interval (5 s) to get an assignment.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.jvm import compile_java, java_command, require_jars

from .conftest import BrokerProcess, run_tool, start_broker

pytestmark = pytest.mark.interop

SOURCES = Path(__file__).parent / "java" / "share"
JVM_TIMEOUT = 300.0  # seconds for one program: generous, the machine is shared
HELD_TIMEOUT = 90.0  # seconds for the holder to print its HELD line
HOLD_RECORDS = 50
# Quick locks for the kill test; Kafka's minimum delivery count limit (2) kept.
BROKER_SETTINGS = {
    "group.share.min.record.lock.duration.ms": "1000",
    "group.share.record.lock.duration.ms": "5000",
    "group.share.min.delivery.count.limit": "2",
}


@pytest.fixture(scope="module")
def odradek_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """The module's broker (named like conftest's, so a failing test shows its output)."""
    overrides = [arg for name, value in BROKER_SETTINGS.items()
                 for arg in ("--override", f"{name}={value}")]
    with start_broker(tmp_path_factory.mktemp("odradek-data"), *overrides) as broker:
        yield broker


@pytest.fixture(scope="module")
def java_classes() -> Path:
    require_jars()
    return compile_java(SOURCES)


def parse_result(stdout: str, stderr: str, what: str) -> dict:
    lines = [line for line in stdout.splitlines() if line.startswith("RESULT ")]
    if not lines:
        pytest.fail(f"{what} printed no RESULT line\n--- stdout ---\n{stdout}\n"
                    f"--- stderr ---\n{stderr}")
    result = json.loads(lines[-1].removeprefix("RESULT "))
    result["_stderr"] = stderr
    return result


def run_checks(classes: Path, bootstrap: str, *args: str) -> dict:
    """Run ShareChecks once; its checks' answers by name."""
    done = run_tool(java_command("ShareChecks", "--bootstrap", bootstrap, *args,
                                 classpath_extra=[classes]), timeout=JVM_TIMEOUT)
    return parse_result(done.stdout, done.stderr, f"ShareChecks {' '.join(args)}")


def check(result: dict, name: str) -> dict:
    """One check's answer; fails with the Java exception (and the JVM's log) if it threw."""
    answer = result[name]
    if isinstance(answer, dict) and set(answer) == {"error", "message"}:
        pytest.fail(f"{name}: {answer['error']}: {answer['message']}\n"
                    f"--- java stderr ---\n{result['_stderr'][-8000:]}")
    return answer


def kill_and_drain(classes: Path, bootstrap: str, run: str, *extra: str) -> dict:
    """The holder JVM polls once and prints HELD [offsets]; it is SIGKILLed (by its pid)
    at once, and a drainer JVM consumes the group until all ``HOLD_RECORDS`` values are
    seen. The drain's answer, with ``held`` (the offsets the holder got) and
    ``kill_to_drained_s`` (from the kill to the drainer's exit) added."""
    common = ["--bootstrap", bootstrap, "--run", run, "--records", str(HOLD_RECORDS), *extra]
    holder = subprocess.Popen(
        java_command("ShareChecks", *common, "--check", "hold", "--hold-seconds", "120",
                     classpath_extra=[classes]),
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    held = None
    seen = []
    try:
        with selectors.DefaultSelector() as selector:
            assert holder.stdout is not None
            selector.register(holder.stdout, selectors.EVENT_READ)
            deadline = time.monotonic() + HELD_TIMEOUT
            while held is None and time.monotonic() < deadline and holder.poll() is None:
                if selector.select(timeout=1.0):
                    line = holder.stdout.readline()
                    seen.append(line)
                    if line.startswith("HELD "):
                        held = json.loads(line.removeprefix("HELD "))
    finally:
        os.kill(holder.pid, signal.SIGKILL)  # the holder: this test's own JVM, by pid
        killed = time.monotonic()
        _, stderr = holder.communicate(timeout=30)
    if held is None:
        pytest.fail(f"the holder printed no HELD line in {HELD_TIMEOUT:.0f}s\n--- stdout ---\n"
                    f"{''.join(seen)}\n--- stderr ---\n{stderr}")
    assert holder.returncode == -signal.SIGKILL
    result = run_checks(classes, bootstrap, *common, "--check", "drain")
    drain = check(result, "drain")
    drain["held"] = held
    drain["kill_to_drained_s"] = time.monotonic() - killed
    return drain


# -- the assertions (also run against Apache Kafka 4.4's answers) ------------------------

def assert_shared(answer: dict) -> None:
    assert answer["failures"] == []
    assert answer["all_assigned"], answer.get("describe")
    # A share group gives one partition to every member.
    members = answer["describe"]["members"]
    assert len(members) == 3
    assert all(m["assignment"] == [f"{answer['topic']}-0"] for m in members), members
    # Every record processed exactly once, by some member.
    assert answer["all_seen"]
    assert answer["distinct"] == 300
    assert answer["missing"] == 0 and answer["unexpected"] == 0
    assert answer["duplicates"] == 0
    assert answer["total"] == 300
    assert answer["redelivered_counts"] == []
    assert sum(answer["per_consumer"].values()) == 300
    assert sum(1 for n in answer["per_consumer"].values() if n > 0) >= 2, answer["per_consumer"]


def assert_explicit(answer: dict) -> None:
    assert answer["finished"]
    assert answer["released_offset"] == 0 and answer["rejected_offset"] == 1
    by_offset: dict[int, list[tuple[int, str]]] = {}
    for d in answer["deliveries"]:
        by_offset.setdefault(d["offset"], []).append((d["delivery_count"], d["ack"]))
    assert sorted(by_offset) == list(range(10))
    # Released: back with delivery count 2 (and accepted then); rejected: never again.
    assert by_offset[0] == [(1, "RELEASE"), (2, "ACCEPT")]
    assert by_offset[1] == [(1, "REJECT")]
    for offset in range(2, 10):
        assert by_offset[offset] == [(1, "ACCEPT")], (offset, by_offset[offset])
    assert all(set(c.values()) == {"ok"} for c in answer["commits"]), answer["commits"]


def assert_delivery_limit(answer: dict) -> None:
    # share.delivery.count.limit=2: two deliveries, then archived.
    assert answer["delivery_counts"] == [1, 2]
    assert [d["offset"] for d in answer["deliveries"]] == [0, 0]
    assert answer["quiet_ms_after_last"] >= 5_000  # polled on, nothing came
    assert all(set(c.values()) == {"ok"} for c in answer["commits"]), answer["commits"]


def assert_latest(answer: dict) -> None:
    # latest (the default): only what came after the group's first fetch.
    assert answer["latest_values"] == [f"after-{i}" for i in range(5, 10)]
    # earliest (group config): everything.
    assert sorted(answer["earliest_values"]) == sorted(
        [f"before-{i}" for i in range(5)] + [f"after-{i}" for i in range(5, 10)])


def ok(answer: dict, call: str):
    """An admin call's value; fails with its exception when it threw."""
    assert "ok" in answer[call], (call, answer[call])
    return answer[call]["ok"]


def assert_admin(answer: dict) -> None:
    group, topic = answer["group"], answer["topic"]
    partition = f"{topic}-0"
    assert answer["consumed"] == list(range(20))
    assert answer["commit"] == {partition: "ok"}
    listing = {"group": group, "type": "Share", "protocol": "share", "state": "Stable"}
    assert answer["list_share_groups"] == {"ok": [listing]}
    assert answer["list_all_groups"] == {"ok": [listing]}
    assert answer["list_consumer_groups"] == {"ok": []}
    active = ok(answer, "describe_active")
    assert active["state"] == "Stable"
    assert [m["client_id"] for m in active["members"]] == ["admin-1"]
    assert active["members"][0]["assignment"] == [partition]
    assert active["members"][0]["member_epoch"] > 0
    assert active["members"][0]["member_epoch"] == active["group_epoch"]
    # Everything acknowledged: no lag. (Kafka 4.4 still says start offset 0 here: the
    # start offset moves on at the next acquisition.)
    offsets = ok(answer, "offsets_active")
    assert set(offsets) == {partition}
    assert 0 <= offsets[partition]["start_offset"] <= 20
    assert offsets[partition]["lag"] == 0
    for call in ("alter_active", "delete_offsets_active", "delete_group_active"):
        assert answer[call]["error"] == "org.apache.kafka.common.errors.GroupNotEmptyException", (
            call, answer[call])
    empty = ok(answer, "describe_empty")
    assert empty["state"] == "Empty" and empty["members"] == []
    assert answer["alter_to_zero"] == {"ok": "done"}
    after_alter = ok(answer, "offsets_after_alter")[partition]
    assert after_alter["start_offset"] == 0 and after_alter["lag"] == 20
    # From 0 again, each record a first delivery (the alter started the partition anew).
    assert answer["reread"] == [[offset, 1] for offset in range(20)]
    assert ok(answer, "offsets_after_reread")[partition]["lag"] == 0
    assert answer["delete_offsets"] == {"ok": "done"}
    assert answer["offsets_after_delete"] == {"ok": {}}
    assert answer["delete_unknown_topic_offsets"]["error"] == (
        "org.apache.kafka.common.errors.UnknownTopicOrPartitionException")
    assert answer["delete_group"] == {"ok": "done"}
    assert answer["list_after_delete"] == {"ok": []}
    for call in ("describe_after_delete", "delete_unknown_group"):
        assert answer[call]["error"] == "org.apache.kafka.common.errors.GroupIdNotFoundException", (
            call, answer[call])


def assert_drained(drain: dict) -> int:
    """Every record processed; the held ones redelivered (delivery count >= 2), each once
    to the drainer. Returns how many the drainer got as redeliveries."""
    held = drain["held"]
    assert held, "the holder got no records"
    assert drain["distinct"] == HOLD_RECORDS
    counts = {int(offset): c for offset, c in drain["delivery_counts"].items()}
    assert sorted(counts) == list(range(HOLD_RECORDS))
    assert all(len(c) == 1 for c in counts.values()), counts  # the drainer got each once
    for offset in held:
        assert counts[offset][0] >= 2, (offset, counts[offset])
    # Anything else was never delivered before, or acquired unseen by the holder (a
    # fetch of its own ahead of the application); never more than twice.
    assert all(1 <= c[0] <= 2 for c in counts.values()), counts
    return sum(1 for c in counts.values() if c[0] >= 2)


# -- the tests ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def share_checks(odradek_server: BrokerProcess, java_classes: Path) -> dict:
    return run_checks(java_classes, odradek_server.bootstrap, "--check", "all")


def test_share_group_members_process_each_record_exactly_once(share_checks: dict) -> None:
    assert_shared(check(share_checks, "shared"))


def test_released_record_comes_back_and_rejected_record_does_not(share_checks: dict) -> None:
    assert_explicit(check(share_checks, "explicit"))


def test_delivery_count_limit_archives_a_record_released_twice(share_checks: dict) -> None:
    assert_delivery_limit(check(share_checks, "delivery_limit"))


def test_share_auto_offset_reset_latest_by_default_and_earliest_by_group_config(
        share_checks: dict) -> None:
    assert_latest(check(share_checks, "latest"))


def test_share_group_admin_list_describe_offsets_alter_delete(share_checks: dict) -> None:
    assert_admin(check(share_checks, "admin"))


def test_records_of_a_killed_consumer_are_redelivered_to_another(
        odradek_server: BrokerProcess, java_classes: Path) -> None:
    drain = kill_and_drain(java_classes, odradek_server.bootstrap, f"k{os.getpid()}")
    redelivered = assert_drained(drain)
    assert redelivered >= len(drain["held"])
