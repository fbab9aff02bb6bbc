"""Kafka's Java client (kafka-clients 4.4.0) against an ``odradek serve`` process.

Three small Java programs (tests/interop/java/client, compiled once with javac against
the jars ``scripts/fetch_jvm.sh`` copies) each run several checks in one JVM and print one
``RESULT {json}`` line; the tests here assert on it, check by check:

- ProducerChecks: every codec (the broker's stored batches are read with ``odradek
  dump-log`` to see the codec the client used), keys, headers and timestamps read back
  with ``assign``; the idempotent producer (acks=all, 5 in flight); a consume-transform-
  produce loop with ``sendOffsetsToTransaction``, an aborted transaction and one committed
  after it, read with read_committed and read_uncommitted consumers.
- ConsumerChecks: classic groups with the eager range and the cooperative-sticky
  assignors and KIP-848 groups (``group.protocol=consumer``), two members each; static
  membership (a member closed and restarted within its session causes no rebalance);
  ``seek``, ``offsetsForTimes``, ``commitSync`` and ``committed``.
- AdminChecks: topics, configs (incrementalAlterConfigs), partitions, consumer groups and
  their offsets, delete records, describe cluster, log dirs, producers and transactions.

One JVM per program keeps the module to about a minute on a 2-core machine.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.jvm import compile_java, java_command, require_jars

from .conftest import (
    BrokerProcess,
    requests_by_version,
    run_tool,
    scrape,
    start_broker,
    stored_batches,
)

pytestmark = pytest.mark.interop

SOURCES = Path(__file__).parent / "java" / "client"
BASE_TS = 1_700_000_000_000
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
PARTITIONS = 4  # of the group tests' topics (ConsumerChecks.PARTITIONS)
RECORDS = 80  # in each group topic before the first member joins
WAVE = 40  # produced once both members own their shares
JVM_TIMEOUT = 300.0  # seconds for one program: generous, the machine is shared


@pytest.fixture(scope="module")
def odradek_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """The module's broker (named like conftest's, so a failing test shows its output).
    No initial rebalance delay: the group checks wait for joins, not for a timer. Metrics
    on: they say which versions the client spoke."""
    with start_broker(tmp_path_factory.mktemp("odradek-data"),
                      "--override", "metrics.listen=127.0.0.1:0",
                      "--override", "group.initial.rebalance.delay.ms=0",
                      "--override", "group.consumer.heartbeat.interval.ms=500") as broker:
        yield broker


@pytest.fixture(scope="module")
def java_classes() -> Path:
    require_jars()
    return compile_java(SOURCES)


def run_checks(classes: Path, main: str, *args: str) -> dict:
    """Run one Java program; its checks' answers by name (an ``error`` key: it threw)."""
    done = run_tool(java_command(main, *args, classpath_extra=[classes]), timeout=JVM_TIMEOUT)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if not lines:
        pytest.fail(f"{main} printed no RESULT line\n--- stdout ---\n{done.stdout}\n"
                    f"--- stderr ---\n{done.stderr}")
    result = json.loads(lines[-1].removeprefix("RESULT "))
    result["_stderr"] = done.stderr
    return result


def check(result: dict, name: str) -> dict:
    """One check's answer; fails with the Java exception (and the JVM's log) if it threw."""
    answer = result[name]
    if isinstance(answer, dict) and "error" in answer and set(answer) == {"error", "message"}:
        pytest.fail(f"{name}: {answer['error']}: {answer['message']}\n"
                    f"--- java stderr ---\n{result['_stderr'][-8000:]}")
    return answer


@pytest.fixture(scope="module")
def producer_checks(odradek_server: BrokerProcess, java_classes: Path) -> dict:
    return run_checks(java_classes, "ProducerChecks", odradek_server.bootstrap, str(BASE_TS))


@pytest.fixture(scope="module")
def consumer_checks(odradek_server: BrokerProcess, java_classes: Path) -> dict:
    return run_checks(java_classes, "ConsumerChecks", odradek_server.bootstrap, str(BASE_TS))


@pytest.fixture(scope="module")
def admin_checks(odradek_server: BrokerProcess, java_classes: Path) -> dict:
    return run_checks(java_classes, "AdminChecks", odradek_server.bootstrap)


# -- producer ---------------------------------------------------------------------------

@pytest.mark.parametrize("codec", CODECS)
def test_java_producer_writes_keys_headers_timestamps_with_each_codec(
        producer_checks: dict, odradek_server: BrokerProcess, codec: str) -> None:
    answer = check(producer_checks, f"codec-{codec}")
    assert answer["offsets"] == list(range(40))
    records = answer["records"]
    assert [r["offset"] for r in records] == list(range(40))
    for i, r in enumerate(records):
        assert r["key"] == f"key-{i}"
        assert r["value"] == f"{codec}-value-{i}-" + "odradek " * 10
        assert r["timestamp"] == BASE_TS + i
        assert r["headers"] == {"index": str(i), "codec": codec}
    # The client compressed as asked and the broker stored the batches as they came.
    batches = stored_batches(odradek_server, f"java-codec-{codec}", 0)
    assert {b.codec for b in batches} == {codec}, batches
    assert sum(b.count for b in batches) == 40
    # The Java producer is idempotent by default (KIP-679).
    assert all(b.producer_id >= 0 for b in batches), batches


def test_java_idempotent_producer_with_acks_all_writes_each_record_once_in_order(
        producer_checks: dict, odradek_server: BrokerProcess) -> None:
    answer = check(producer_checks, "idempotence")
    assert answer["offsets"] == {"0": list(range(200)), "1": list(range(200))}
    expected = [f"{i % 2}:{i // 2}:idem-{i}" for i in range(400)]
    assert sorted(answer["values"]) == sorted(expected)
    for partition in (0, 1):
        batches = stored_batches(odradek_server, "java-idempotent", partition)
        assert len({b.producer_id for b in batches}) == 1 and batches[0].producer_id >= 0
        sequence = 0
        for b in batches:  # sequences run on without gaps or repeats
            assert b.base_sequence == sequence, batches
            sequence += b.count
        assert sequence == 200


def test_java_client_speaks_kafka_4s_newest_versions_and_transactions_v2(
        producer_checks: dict, odradek_server: BrokerProcess) -> None:
    """The versions the producer checks used, as the broker counted them (RequestMetrics'
    version tag): topics by id for produce and fetch, and transaction version 2 (the
    broker finalizes transaction.version 2, as a new Kafka 4 cluster does): no
    AddPartitionsToTxn or AddOffsetsToTxn (Produce and TxnOffsetCommit v5+ add to the
    transaction), EndTxn v5 (an epoch bump per transaction); TxnOffsetCommit v6 (topics
    by id) and ApiVersions v5, the Kafka 4.4 versions kio lacks (protocol/extra_schemas)."""
    check(producer_checks, "transactions")
    samples = scrape(odradek_server.metrics_url())
    assert set(requests_by_version(samples, "Produce")) == {13}
    assert max(requests_by_version(samples, "Fetch")) == 18
    assert 5 in set(requests_by_version(samples, "ApiVersions"))
    for api, versions in (("InitProducerId", {5}), ("EndTxn", {5}), ("TxnOffsetCommit", {6}),
                          ("AddPartitionsToTxn", set()), ("AddOffsetsToTxn", set())):
        assert set(requests_by_version(samples, api)) == versions, api


def test_java_transactions_consume_transform_produce_commit_and_abort(
        producer_checks: dict) -> None:
    answer = check(producer_checks, "transactions")
    # Two transactions of five records each; the group's offsets went with them.
    assert answer["committed_after_each"] == [5, 10]
    # The aborted transaction's offset (1) did not replace the committed one.
    assert answer["group_offsets"] == {"java-txn-in-0": 10}
    transformed = [f"IN-{i}" for i in range(10)]
    assert answer["read_committed"] == sorted([*transformed, "AFTER-ABORT"])
    assert answer["read_uncommitted"] == sorted([*transformed, "ABORTED-0", "ABORTED-1",
                                                 "AFTER-ABORT"])
    # Records plus one marker per transaction and partition: 6+5 and 4+5 (no open txn).
    ends = {"java-txn-out-0": 11, "java-txn-out-1": 9}
    assert answer["read_committed_end_offsets"] == ends
    assert answer["read_uncommitted_end_offsets"] == ends


# -- consumer ---------------------------------------------------------------------------

def assert_two_members_split(answer: dict) -> tuple[dict, dict]:
    assert answer["a_alone_owns_all"] and answer["a_read_all_alone"] and answer["a_committed_all"]
    assert answer["split"], answer
    assert answer["second_wave_read"], answer
    a, b = answer["a"], answer["b"]
    for member in (a, b):
        assert member["failure"] is None and member["duplicates"] == [], member
        # Each member read exactly the second wave's records of its own partitions.
        assert member["second_wave"] == [f"w{i:03d}" for i in range(WAVE)
                                         if i % PARTITIONS in member["assignment"]]
    assert sorted(a["assignment"] + b["assignment"]) == list(range(PARTITIONS))
    # b started from a's committed offsets: none of the first records again.
    assert a["records"] == RECORDS + len(a["second_wave"])
    assert b["records"] == len(b["second_wave"])
    assert a["generation"] == b["generation"]
    described = answer["described"]
    assert described["state"] == "Stable"
    assert described["assignments"] == sorted([a["assignment"], b["assignment"]], key=str)
    return a, b


def callbacks(member: dict) -> list[str]:
    return [e for e in member["events"] if e != "commit during rebalance"]


def test_java_classic_group_eager_range_rebalance(consumer_checks: dict) -> None:
    a, b = assert_two_members_split(check(consumer_checks, "classic-eager"))
    assert a["assignment"] == [0, 1] and b["assignment"] == [2, 3]  # range
    # Eager: a gives up everything, then gets its half back.
    assert callbacks(a) == ["assigned [0, 1, 2, 3]", "-- b joins --", "revoked [0, 1, 2, 3]",
                            "assigned [0, 1]"]
    assert callbacks(b) == ["assigned [2, 3]"]
    assert a["generation"] == 2
    assert check(consumer_checks, "classic-eager")["described"]["type"] == "Classic"
    assert check(consumer_checks, "classic-eager")["described"]["assignor"] == "range"


def test_java_classic_group_cooperative_sticky_rebalance(consumer_checks: dict) -> None:
    a, b = assert_two_members_split(check(consumer_checks, "classic-cooperative"))
    # Cooperative: a keeps two partitions throughout and revokes only the two that move,
    # which b gets in the follow-up rebalance.
    events = callbacks(a)
    assert events[:2] == ["assigned [0, 1, 2, 3]", "-- b joins --"]
    revoked = [e for e in events if e.startswith("revoked")]
    assert revoked == [f"revoked {sorted(b['assignment'])}"]
    assert not [e for e in events if e.startswith("lost")]
    assert callbacks(b)[-1] == f"assigned {sorted(b['assignment'])}"
    assert a["generation"] == 3  # b joins (2), then the revoked partitions are handed over (3)
    described = check(consumer_checks, "classic-cooperative")["described"]
    assert (described["type"], described["assignor"]) == ("Classic", "cooperative-sticky")


def test_java_consumer_group_protocol_kip848(consumer_checks: dict) -> None:
    a, b = assert_two_members_split(check(consumer_checks, "consumer-protocol"))
    # Described through ConsumerGroupDescribe; the broker's default assignor.
    described = check(consumer_checks, "consumer-protocol")["described"]
    assert (described["type"], described["assignor"]) == ("Consumer", "uniform")
    # A consumer-protocol member may be answered with no partitions first and get them
    # at a later heartbeat (Kafka 4.4 does so too: tests/oracle); the Java client then
    # calls onPartitionsAssigned([]) once (seen once in CI under load).
    events = callbacks(a)
    if events[:1] == ["assigned []"]:
        events = events[1:]
    assert events[:2] == ["assigned [0, 1, 2, 3]", "-- b joins --"]
    assert [e for e in events if e.startswith("revoked")] == [
        f"revoked {sorted(b['assignment'])}"]
    assert callbacks(b)[-1] == f"assigned {sorted(b['assignment'])}"


def test_java_kip848_consumer_commits_and_fetches_offsets_by_topic_id(
        consumer_checks: dict, odradek_server: BrokerProcess) -> None:
    """The consumers' offset requests, as the broker counted them: the KIP-848 consumer
    names topics by id (OffsetCommit and OffsetFetch v10); the classic ones by name."""
    check(consumer_checks, "consumer-protocol")
    samples = scrape(odradek_server.metrics_url())
    assert 10 in requests_by_version(samples, "OffsetCommit")
    assert 10 in requests_by_version(samples, "OffsetFetch")


def test_java_static_member_restart_within_session_does_not_rebalance(
        consumer_checks: dict) -> None:
    answer = check(consumer_checks, "static-membership")
    assert answer["split"] and answer["read_all"] and answer["back_assigned"], answer
    before, after = answer["before"], answer["after"]
    for member in (*before.values(), *after.values()):
        assert member["failure"] is None and member["duplicates"] == [], member
    # The restarted member gets its partitions back in the same generation ...
    assert after["back"]["assignment"] == answer["two_had"] == before["two"]["assignment"]
    assert after["back"]["generation"] == before["two"]["generation"]
    # ... and the member that stayed saw no rebalance at all.
    assert after["one"]["generation"] == before["one"]["generation"]
    assert after["one"]["assignment"] == before["one"]["assignment"]
    assert callbacks(after["one"]) == [*callbacks(before["one"]), "-- two restarts --"]


def test_java_consumer_seek_offsets_for_times_and_commits(consumer_checks: dict) -> None:
    answer = check(consumer_checks, "seek")
    # Ten records with timestamps BASE_TS + i s: the first at or after BASE_TS + 5.5 s.
    assert answer["for_time"] == [6, BASE_TS + 6000]
    assert answer["for_time_after_end"] is None
    assert answer["for_time_zero"] == 0
    assert (answer["beginning"], answer["end"]) == (0, 10)
    assert answer["after_seek_offsets"] == list(range(3, 10))
    assert answer["after_seek_values"] == [f"s{i}" for i in range(3, 10)]
    assert answer["position"] == 10
    assert answer["committed_before"] is None
    assert answer["committed"] == [7, "java-meta"]
    assert answer["after_seek_to_time_first"] == 6
    assert answer["resumed_offsets"] == [7, 8, 9]


# -- AdminClient ------------------------------------------------------------------------

def test_java_admin_describe_cluster(admin_checks: dict, odradek_server: BrokerProcess) -> None:
    answer = check(admin_checks, "cluster")
    assert answer["nodes"] == [f"0@{odradek_server.bootstrap}"]
    assert answer["controller"] == 0
    assert answer["cluster_id"]


def test_java_admin_creates_describes_grows_and_deletes_topics(admin_checks: dict) -> None:
    answer = check(admin_checks, "topics")
    assert answer["listed"] and answer["topic_id_set"]
    assert answer["partitions"] == 3 and answer["leaders"] == [0, 0, 0]
    assert answer["create_again"] == "TopicExistsException"
    assert answer["create_bad_name"] == "InvalidTopicException"
    assert answer["partitions_after_create"] == 5
    assert answer["shrink"] == "InvalidPartitionsException"
    assert answer["gone_from_list"]
    assert answer["describe_deleted"] == "UnknownTopicOrPartitionException"
    assert answer["delete_missing"] == "UnknownTopicOrPartitionException"


def test_java_admin_describes_and_incrementally_alters_configs(admin_checks: dict) -> None:
    answer = check(admin_checks, "configs")
    assert answer["initial"] == {
        "cleanup.policy": "delete (DEFAULT_CONFIG)",
        "max.message.bytes": "1048588 (DEFAULT_CONFIG)",
        "retention.ms": "86400000 (DYNAMIC_TOPIC_CONFIG)",
        "segment.bytes": "1073741824 (DEFAULT_CONFIG)",
    }
    # SET max.message.bytes, DELETE retention.ms (back to the broker's default).
    assert answer["altered"] == {
        "cleanup.policy": "delete (DEFAULT_CONFIG)",
        "max.message.bytes": "2000000 (DYNAMIC_TOPIC_CONFIG)",
        "retention.ms": "604800000 (DEFAULT_CONFIG)",
        "segment.bytes": "1073741824 (DEFAULT_CONFIG)",
    }
    assert answer["invalid_value"] == "InvalidConfigurationException"
    assert answer["unknown_topic"] == "UnknownTopicOrPartitionException"
    assert answer["broker_num_partitions"] == "1"
    assert answer["broker_entries"] > 20


def test_java_admin_deletes_records(admin_checks: dict) -> None:
    answer = check(admin_checks, "delete-records")
    assert answer["low_watermark"] == 4
    assert (answer["earliest"], answer["latest"]) == (4, 10)
    assert answer["beyond_end"] == "OffsetOutOfRangeException"
    assert answer["first_read"] == [4, 5, 6, 7, 8, 9]


def test_java_admin_lists_describes_and_manages_consumer_groups(admin_checks: dict) -> None:
    answer = check(admin_checks, "groups")
    assert "java-admin-group:Empty" in answer["listed"]
    assert "java-admin-group:Classic" in answer["list_groups"]
    assert answer["describe"] == {"state": "Empty", "members": 0, "coordinator": 0,
                                  "type": "Classic"}
    assert answer["offsets"] == {"java-admin-groups-0": [3, ""], "java-admin-groups-1": [5, "meta"]}
    assert answer["end_offsets"] == [5, 5]
    assert answer["offsets_after_alter"] == {"java-admin-groups-0": [1, ""],
                                             "java-admin-groups-1": [5, "meta"]}
    assert answer["offsets_after_delete"] == {"java-admin-groups-0": [1, ""]}
    # As Kafka 4 answers DescribeGroups v6 for a group that does not exist.
    assert answer["describe_after_delete"] == "GroupIdNotFoundException"
    assert answer["listed_after_delete"] is False
    assert answer["delete_missing"] == "GroupIdNotFoundException"


def test_java_admin_describes_log_dirs(admin_checks: dict) -> None:
    answer = check(admin_checks, "log-dirs")
    assert answer["dirs"] == 1 and answer["error"] is None and answer["total_bytes_present"]
    # Ten records of one byte key and two-byte values, as one batch per send at most.
    assert answer["sizes"]["java-admin-delete-records-0"] > 0


def test_java_admin_describes_producers_and_transactions(admin_checks: dict) -> None:
    answer = check(admin_checks, "producers-transactions")
    [open_state] = answer["producers_open"]
    pid = open_state["producer_id"]
    assert pid >= 0 and open_state["epoch"] == 0
    assert open_state["last_sequence"] == 1 and open_state["txn_start_offset"] == 0
    assert "java-admin-txn-id:Ongoing" in answer["list_open"]
    assert answer["describe_open"] == {"state": "Ongoing", "partitions": ["java-admin-txn-0"],
                                       "timeout_ms": 60000, "producer_id": pid,
                                       "start_set": True}
    [after] = answer["producers_after"]
    # Transaction version 2: the commit marker carried the next epoch, which starts
    # with no sequence on the partition.
    assert after == {**open_state, "txn_start_offset": None, "epoch": 1,
                     "last_sequence": -1}
    assert answer["describe_after"] == {"state": "CompleteCommit", "partitions": 0}
    assert answer["describe_missing"] == "TransactionalIdNotFoundException"
