"""Transactions on the wire (KIP-98): the transaction APIs at the versions clients send,
read_committed fetches and ListOffsets, fencing, timeouts, transactional offset commits
and the transaction state across broker restarts — each told through raw requests, so
the exact error codes and offsets show."""

from __future__ import annotations

import struct
import time
import uuid
from typing import Any

from kio.schema.errors import ErrorCode

from odradek.client.wire import WireClient
from odradek.coordinator import TRANSACTION_STATE_TOPIC
from odradek.records import builder
from odradek.testing import running_broker

READ_UNCOMMITTED, READ_COMMITTED = 0, 1


def now_ms() -> int:
    # Real timestamps: a batch stamped 1970 would make the next one roll the segment
    # (segment.ms), and a fetch reads one segment at a time.
    return int(time.time() * 1000)


def plain(*values: bytes) -> bytes:
    return builder.build_simple(list(values), timestamp=now_ms())


def code(value: Any) -> int:
    return int(getattr(value, "value", value))


class Txn:
    """A transactional producer spoken by hand: its id, producer id, epoch, sequences."""

    def __init__(self, c: WireClient, transactional_id: str, timeout_ms: int = 60_000,
                 version: int = 4) -> None:
        self.c = c
        self.tid = transactional_id
        found = c.request(10, 3, {"key": transactional_id, "key_type": 1})
        assert code(found.error_code) == 0
        answer = c.request(22, version, {"transactional_id": transactional_id,
                                         "transaction_timeout": timeout_ms,
                                         "producer_id": -1, "producer_epoch": -1})
        assert code(answer.error_code) == 0, answer
        self.pid, self.epoch = answer.producer_id, answer.producer_epoch
        self.seq: dict[tuple[str, int], int] = {}

    def add(self, topic: str, *partitions: int, version: int = 3) -> dict[int, int]:
        answer = self.c.request(24, version, {
            "v3_and_below_transactional_id": self.tid, "v3_and_below_producer_id": self.pid,
            "v3_and_below_producer_epoch": self.epoch,
            "v3_and_below_topics": [{"name": topic, "partitions": list(partitions)}]})
        return {p.partition_index: code(p.partition_error_code)
                for t in answer.results_by_topic_v3_and_below for p in t.results_by_partition}

    def produce(self, topic: str, partition: int, *values: bytes, version: int = 9) -> Any:
        seq = self.seq.get((topic, partition), 0)
        batch = builder.build_simple(list(values), timestamp=now_ms(), producer_id=self.pid,
                                     producer_epoch=self.epoch, base_sequence=seq,
                                     transactional=True)
        part = produce(self.c, topic, partition, batch, transactional_id=self.tid,
                       version=version)
        if part.error_code == 0:
            self.seq[(topic, partition)] = seq + len(values)
        return part

    def end(self, commit: bool, version: int = 3) -> int:
        answer = self.c.request(26, version, {
            "transactional_id": self.tid, "producer_id": self.pid,
            "producer_epoch": self.epoch, "committed": commit})
        return code(answer.error_code)


def _same(txn: Txn, c: WireClient) -> Txn:
    """The same producer (id, epoch, sequences) on a new connection."""
    twin = object.__new__(Txn)
    twin.__dict__.update(txn.__dict__, c=c)
    return twin


def produce(c: WireClient, topic: str, partition: int, batch: bytes,
            transactional_id: str | None = None, version: int = 9) -> Any:
    answer = c.request(0, version, {"transactional_id": transactional_id, "acks": -1,
                              "timeout": 5000, "topic_data": [
                                  {"name": topic, "partition_data": [
                                      {"index": partition, "records": batch}]}]})
    return answer.responses[0].partition_responses[0]


def create_topic(c: WireClient, name: str, partitions: int = 1) -> None:
    answer = c.request(19, 5, {"topics": [{"name": name, "num_partitions": partitions,
                                           "replication_factor": 1}], "timeout": 5000})
    assert code(answer.topics[0].error_code) == 0


def fetch(c: WireClient, topic: str, offset: int = 0, isolation: int = READ_COMMITTED,
          partition: int = 0, version: int = 11) -> Any:
    answer = c.request(1, version, {
        "max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": isolation,
        "topics": [{"topic": topic, "partitions": [
            {"partition": partition, "fetch_offset": offset,
             "partition_max_bytes": 1 << 20}]}]})
    return answer.responses[0].partitions[0]


def values(part: Any) -> list[bytes]:
    """The data records of a fetched partition (control batches left out)."""
    out = []
    for batch in builder.decode_batches(part.records or b""):
        if not batch.header.is_control:
            out.extend(r.value for r in batch.records)
    return out


def committed_view(part: Any) -> list[bytes]:
    """What a read_committed client delivers: records of the aborted transactions the
    response lists are dropped (from each one's first offset to its marker)."""
    aborted = {(t.producer_id, t.first_offset) for t in part.aborted_transactions or ()}
    open_aborts: set[int] = set()
    out = []
    for batch in builder.decode_batches(part.records or b""):
        h = batch.header
        starts = {pid for pid, first in aborted if first <= h.base_offset}
        for pid in starts:
            open_aborts.add(pid)
            aborted = {(p, f) for p, f in aborted if not (p == pid and f <= h.base_offset)}
        if h.is_control:
            open_aborts.discard(h.producer_id)
            continue
        if h.is_transactional and h.producer_id in open_aborts:
            continue
        out.extend(r.value for r in batch.records)
    return out


def list_offset(c: WireClient, topic: str, isolation: int, timestamp: int = -1) -> int:
    answer = c.request(2, 5, {"replica_id": -1, "isolation_level": isolation, "topics": [
        {"name": topic, "partitions": [{"partition_index": 0, "timestamp": timestamp}]}]})
    return answer.topics[0].partitions[0].offset


def describe(c: WireClient, tid: str) -> Any:
    return c.request(65, 0, {"transactional_ids": [tid]}).transaction_states[0]


def describe_error(c: WireClient, tid: str) -> int:
    """The error of a DescribeTransactions answer read off the wire: kio's reader refuses
    the -1 start time Kafka (and we) send for a transaction that never started."""
    c.send(65, 0, {"transactional_ids": [tid]})
    size = struct.unpack(">i", c._read(4))[0]
    payload = c._read(size)
    c.answered += 1
    # correlation id, header tags, throttle time, array length (1 + 1), error code
    (error,) = struct.unpack_from(">h", payload, 4 + 1 + 4 + 1)
    return error


def list_states(c: WireClient) -> set[tuple[str, str]]:
    listed = c.request(66, 1, {"state_filters": [], "producer_id_filters": [],
                               "duration_filter": -1})
    return {(t.transactional_id, t.transaction_state) for t in listed.transaction_states}


def test_read_committed_sees_a_transaction_only_once_it_commits_and_never_an_aborted_one():
    with running_broker() as node, WireClient(node.port) as c:
        create_topic(c, "orders")
        txn = Txn(c, "shop")
        assert txn.add("orders", 0) == {0: 0}
        assert txn.produce("orders", 0, b"a", b"b").error_code == 0
        # Open: read_uncommitted sees it, read_committed stops at its first offset.
        assert values(fetch(c, "orders", isolation=READ_UNCOMMITTED)) == [b"a", b"b"]
        open_view = fetch(c, "orders")
        assert values(open_view) == [] and open_view.last_stable_offset == 0
        assert open_view.high_watermark == 2
        assert list_offset(c, "orders", READ_COMMITTED) == 0
        assert list_offset(c, "orders", READ_UNCOMMITTED) == 2
        # By timestamp: the open transaction's records are not offered to read_committed.
        assert list_offset(c, "orders", READ_COMMITTED, timestamp=0) == -1
        assert list_offset(c, "orders", READ_UNCOMMITTED, timestamp=0) == 0
        assert txn.end(commit=True) == 0
        done = fetch(c, "orders")
        assert values(done) == [b"a", b"b"] and done.last_stable_offset == 3  # + marker
        assert list(done.aborted_transactions) == []

        # The next transaction aborts: its records stay in the log, and the fetch names
        # the transaction so the client drops them.
        assert txn.add("orders", 0) == {0: 0}
        assert txn.produce("orders", 0, b"x").error_code == 0
        assert txn.end(commit=False) == 0
        after = fetch(c, "orders")
        assert [(t.producer_id, t.first_offset) for t in after.aborted_transactions] == [
            (txn.pid, 3)]
        assert committed_view(after) == [b"a", b"b"]
        assert values(fetch(c, "orders", isolation=READ_UNCOMMITTED)) == [b"a", b"b", b"x"]
        # read_uncommitted answers no aborted transactions at all (null).
        assert fetch(c, "orders", isolation=READ_UNCOMMITTED).aborted_transactions is None
        assert list_offset(c, "orders", READ_COMMITTED) == 5
        assert list_offset(c, "orders", READ_COMMITTED, timestamp=0) == 0
        assert describe(c, "shop").transaction_state == "CompleteAbort"


def test_an_open_transaction_holds_read_committed_readers_at_its_first_offset():
    with running_broker() as node, WireClient(node.port) as c:
        create_topic(c, "t")
        assert produce(c, "t", 0, plain(b"before")).error_code == 0
        txn = Txn(c, "slow")
        txn.add("t", 0)
        txn.produce("t", 0, b"in-txn")
        # Another producer's plain records after the open transaction wait behind it.
        assert produce(c, "t", 0, plain(b"after")).error_code == 0
        held = fetch(c, "t")
        assert values(held) == [b"before"] and held.last_stable_offset == 1
        assert txn.end(commit=True) == 0
        assert values(fetch(c, "t")) == [b"before", b"in-txn", b"after"]


def test_a_second_producer_with_the_same_id_fences_the_first_and_aborts_its_transaction():
    with running_broker() as node, WireClient(node.port) as c:
        create_topic(c, "t")
        zombie = Txn(c, "worker")
        zombie.add("t", 0)
        zombie.produce("t", 0, b"zombie")
        successor = Txn(c, "worker")
        assert (successor.pid, successor.epoch) == (zombie.pid, zombie.epoch + 2), (
            "one bump fences and aborts the open transaction, one is the new producer's")
        # The zombie can neither write nor end its transaction; v1 clients (before
        # KIP-588) hear INVALID_PRODUCER_EPOCH instead of PRODUCER_FENCED.
        assert zombie.produce("t", 0, b"late").error_code == ErrorCode.invalid_producer_epoch
        assert zombie.add("t", 0) == {0: ErrorCode.producer_fenced}
        assert zombie.add("t", 0, version=1) == {0: ErrorCode.invalid_producer_epoch}
        assert zombie.end(commit=True) == ErrorCode.producer_fenced
        assert zombie.end(commit=True, version=4) == ErrorCode.producer_fenced
        assert zombie.end(commit=True, version=1) == ErrorCode.invalid_producer_epoch
        # Nor can it bump its way back in (KIP-360's InitProducerId with its own epoch).
        for version, expected in ((5, ErrorCode.producer_fenced),
                                  (4, ErrorCode.producer_fenced),
                                  (3, ErrorCode.invalid_producer_epoch)):
            answer = c.request(22, version, {
                "transactional_id": "worker", "transaction_timeout": 60_000,
                "producer_id": zombie.pid, "producer_epoch": zombie.epoch})
            assert code(answer.error_code) == expected
        part = fetch(c, "t")
        assert committed_view(part) == [] and part.last_stable_offset == part.high_watermark
        # The successor works as usual.
        successor.add("t", 0)
        successor.produce("t", 0, b"successor")
        assert successor.end(commit=True) == 0
        assert committed_view(fetch(c, "t")) == [b"successor"]


def test_a_transactional_write_to_a_partition_not_in_the_transaction_is_refused():
    with running_broker() as node, WireClient(node.port) as c:
        create_topic(c, "t", 2)
        txn = Txn(c, "careless")
        txn.add("t", 0)
        # Partition 1 was never added: accepting it would open a transaction that no
        # marker ends, holding read_committed readers forever. Produce v11+ (KIP-890)
        # says the transaction can be aborted; older clients know INVALID_TXN_STATE.
        assert txn.produce("t", 1, b"hanging").error_code == ErrorCode.invalid_txn_state
        assert txn.produce("t", 1, b"hanging", version=10).error_code == (
            ErrorCode.invalid_txn_state)
        # (v12+ is transaction version 2's: it adds the partition, tested below.)
        assert txn.produce("t", 1, b"hanging", version=11).error_code == (
            ErrorCode.transaction_abortable)
        assert fetch(c, "t", partition=1).last_stable_offset == 0
        assert txn.produce("t", 0, b"fine").error_code == 0
        assert txn.end(commit=True) == 0


def test_add_partitions_of_unknown_topics_adds_nothing():
    with running_broker() as node, WireClient(node.port) as c:
        create_topic(c, "t")
        txn = Txn(c, "x")
        answer = c.request(24, 3, {
            "v3_and_below_transactional_id": "x", "v3_and_below_producer_id": txn.pid,
            "v3_and_below_producer_epoch": txn.epoch, "v3_and_below_topics": [
                {"name": "t", "partitions": [0]}, {"name": "nope", "partitions": [0]}]})
        errors = {(t.name, p.partition_index): code(p.partition_error_code)
                  for t in answer.results_by_topic_v3_and_below for p in t.results_by_partition}
        assert errors == {("t", 0): ErrorCode.operation_not_attempted,
                          ("nope", 0): ErrorCode.unknown_topic_or_partition}
        assert list_states(c) == {("x", "Empty")}
        # Unknown producer ids and bad timeouts get Kafka's errors.
        stranger = _same(txn, c)
        stranger.pid += 99
        assert stranger.add("t", 0) == {0: ErrorCode.invalid_producer_id_mapping}
        bad = c.request(22, 4, {"transactional_id": "y", "transaction_timeout": 10**9,
                                "producer_id": -1, "producer_epoch": -1})
        assert code(bad.error_code) == ErrorCode.invalid_transaction_timeout


def test_a_transaction_older_than_its_timeout_is_aborted_and_its_producer_fenced():
    with running_broker(**{
            "transaction.abort.timed.out.transaction.cleanup.interval.ms": 50}) as node, \
            WireClient(node.port) as c:
        create_topic(c, "t")
        txn = Txn(c, "forgetful", timeout_ms=200)
        txn.add("t", 0)
        txn.produce("t", 0, b"never")
        deadline = time.monotonic() + 30
        while describe(c, "forgetful").transaction_state != "CompleteAbort":
            assert time.monotonic() < deadline, describe(c, "forgetful")
            time.sleep(0.05)
        assert describe(c, "forgetful").producer_epoch == txn.epoch + 1
        part = fetch(c, "t")
        assert committed_view(part) == [] and part.last_stable_offset == 2
        assert txn.end(commit=True) == ErrorCode.producer_fenced


def test_describe_and_list_transactions():
    with running_broker() as node, WireClient(node.port) as c:
        create_topic(c, "t", 2)
        busy = Txn(c, "busy")
        busy.add("t", 0, 1)
        Txn(c, "idle")
        d = describe(c, "busy")
        assert (d.transaction_state, d.producer_id, d.producer_epoch) == (
            "Ongoing", busy.pid, busy.epoch)
        assert [(t.topic, sorted(t.partitions)) for t in d.topics] == [("t", [0, 1])]
        assert d.transaction_start_time is not None
        assert describe_error(c, "nobody") == ErrorCode.transactional_id_not_found
        assert list_states(c) == {("busy", "Ongoing"), ("idle", "Empty")}
        ongoing = c.request(66, 0, {"state_filters": ["Ongoing", "Bogus"],
                                    "producer_id_filters": []})
        assert [t.transactional_id for t in ongoing.transaction_states] == ["busy"]
        assert list(ongoing.unknown_state_filters) == ["Bogus"]

        def matching(pattern: str) -> tuple[int, list[str]]:  # v2, KIP-1152
            answer = c.request(66, 2, {"state_filters": [], "producer_id_filters": [],
                                       "duration_filter": -1,
                                       "transactional_id_pattern": pattern})
            return code(answer.error_code), [t.transactional_id
                                             for t in answer.transaction_states]

        assert matching("b.*") == (0, ["busy"])
        assert matching("bus") == (0, [])  # the whole id must match
        assert matching("") == (0, ["busy", "idle"])  # empty: no filter
        assert matching("[") == (ErrorCode.invalid_regular_expression, [])


def offset_fetch(c: WireClient, group: str, topic: str, *, stable: bool = False,
                 version: int = 7) -> int:
    """The group's committed offset of partition 0 (-1: none), or, when it is pending in
    an open transaction and ``stable`` is asked (KIP-447), ``-UNSTABLE_OFFSET_COMMIT``."""
    wanted = [{"name": topic, "partition_indexes": [0]}]
    if version >= 8:
        answer = c.request(9, version, {"require_stable": stable, "groups": [
            {"group_id": group, "topics": wanted}]})
        part = answer.groups[0].topics[0].partitions[0]
    else:
        answer = c.request(9, version, {"group_id": group, "require_stable": stable,
                                        "topics": wanted})
        part = answer.topics[0].partitions[0]
    if code(part.error_code) == ErrorCode.unstable_offset_commit:
        return -ErrorCode.unstable_offset_commit
    assert code(part.error_code) == 0, part
    return part.committed_offset


def txn_offset_commit(c: WireClient, txn: Txn, group: str, topic: str, offset: int,
                      version: int = 3) -> int:
    answer = c.request(28, version, {
        "transactional_id": txn.tid, "group_id": group, "producer_id": txn.pid,
        "producer_epoch": txn.epoch, "generation_id": -1, "member_id": "",
        "group_instance_id": None, "topics": [{"name": topic, "partitions": [
            {"partition_index": 0, "committed_offset": offset, "committed_leader_epoch": -1,
             "committed_metadata": ""}]}]})
    return code(answer.topics[0].partitions[0].error_code)


def add_offsets(c: WireClient, txn: Txn, group: str, version: int = 3) -> int:
    answer = c.request(25, version, {"transactional_id": txn.tid, "producer_id": txn.pid,
                               "producer_epoch": txn.epoch, "group_id": group})
    return code(answer.error_code)


def test_transactional_offsets_count_only_when_their_transaction_commits(tmp_path):
    with running_broker(data_dir=str(tmp_path)) as node, WireClient(node.port) as c:
        create_topic(c, "in")
        txn = Txn(c, "pipe")
        # Without AddOffsetsToTxn the group's partition is not in the transaction: the
        # transaction can only be aborted (KIP-890, v4+; older clients know
        # INVALID_TXN_STATE).
        assert txn_offset_commit(c, txn, "readers", "in", 5) == ErrorCode.invalid_txn_state
        assert txn_offset_commit(c, txn, "readers", "in", 5, version=4) == (
            ErrorCode.transaction_abortable)
        assert add_offsets(c, txn, "readers", version=4) == 0
        assert txn_offset_commit(c, txn, "readers", "in", 5, version=4) == 0
        assert offset_fetch(c, "readers", "in") == -1, "pending until the commit"
        assert txn.end(commit=True, version=4) == 0
        assert offset_fetch(c, "readers", "in") == 5
        assert add_offsets(c, txn, "readers") == 0
        assert txn_offset_commit(c, txn, "readers", "in", 9) == 0
        assert txn.end(commit=False) == 0
        assert offset_fetch(c, "readers", "in") == 5, "an aborted commit is dropped"
        # An open transaction's offsets survive a restart as pending ones.
        assert add_offsets(c, txn, "readers") == 0
        assert txn_offset_commit(c, txn, "readers", "in", 12) == 0
    with running_broker(data_dir=str(tmp_path)) as node, WireClient(node.port) as c:
        assert offset_fetch(c, "readers", "in") == 5
        assert describe(c, "pipe").transaction_state == "Ongoing"
        assert _same(txn, c).end(commit=True) == 0
        assert offset_fetch(c, "readers", "in") == 12
    with running_broker(data_dir=str(tmp_path)) as node, WireClient(node.port) as c:
        assert offset_fetch(c, "readers", "in") == 12, "the replay applies the marker"


def test_read_committed_consumers_asking_for_stable_offsets_wait_for_a_pending_one():
    # KIP-447: a consumer starting while another producer's transaction holds an offset
    # for its partition must not start from the offset about to be replaced.
    with running_broker() as node, WireClient(node.port) as c:
        create_topic(c, "in")
        txn = Txn(c, "stable")
        assert add_offsets(c, txn, "readers") == 0
        assert txn_offset_commit(c, txn, "readers", "in", 7) == 0
        for version in (7, 8):
            assert offset_fetch(c, "readers", "in", stable=True, version=version) == \
                -ErrorCode.unstable_offset_commit
            assert offset_fetch(c, "readers", "in", version=version) == -1
        assert txn.end(commit=True) == 0
        for version in (7, 8):
            assert offset_fetch(c, "readers", "in", stable=True, version=version) == 7


def test_an_open_transaction_survives_a_restart_and_can_commit_after_it(tmp_path):
    with running_broker(data_dir=str(tmp_path)) as node, WireClient(node.port) as c:
        create_topic(c, "t")
        txn = Txn(c, "durable")
        txn.add("t", 0)
        txn.produce("t", 0, b"one", b"two")
    with running_broker(data_dir=str(tmp_path)) as node, WireClient(node.port) as c:
        assert TRANSACTION_STATE_TOPIC in node.broker.metadata.topics
        d = describe(c, "durable")
        assert d.transaction_state == "Ongoing" and d.producer_epoch == txn.epoch
        assert fetch(c, "t").last_stable_offset == 0, "the log still holds it open"
        same = _same(txn, c)
        assert same.produce("t", 0, b"three").error_code == 0
        assert same.end(commit=True) == 0
        assert committed_view(fetch(c, "t")) == [b"one", b"two", b"three"]


def test_a_broker_without_transactional_clients_has_no_transaction_state_topic():
    with running_broker() as node, WireClient(node.port) as c:
        create_topic(c, "t")
        assert TRANSACTION_STATE_TOPIC not in node.broker.metadata.topics
        c.request(10, 3, {"key": "someone", "key_type": 1})
        assert TRANSACTION_STATE_TOPIC in node.broker.metadata.topics
        assert node.broker.metadata.topics[TRANSACTION_STATE_TOPIC].internal
        # Clients cannot write it.
        part = produce(c, TRANSACTION_STATE_TOPIC, 0, builder.build_simple([b"x"]))
        assert part.error_code == 17  # INVALID_TOPIC_EXCEPTION


def test_a_commit_decided_before_a_crash_is_marked_at_startup(tmp_path):
    """The coordinator wrote PrepareCommit and the broker died before the markers: the
    next start writes them (finish_load) and the transaction completes."""
    from odradek.coordinator import transaction_log as tl
    from odradek.coordinator.transactions import TxnState
    from odradek.storage import Log

    with running_broker(data_dir=str(tmp_path)) as node, WireClient(node.port) as c:
        create_topic(c, "t", 2)
        txn = Txn(c, "decided")
        txn.add("t", 0, 1)
        txn.produce("t", 0, b"zero")
        txn.produce("t", 1, b"one")
        partitions = node.broker.transactions.num_partitions
    # What the coordinator appends for EndTxn(commit) before it writes any marker.
    now = now_ms()
    state = Log.open(str(tmp_path / f"{TRANSACTION_STATE_TOPIC}-"
                                     f"{tl.partition_for('decided', partitions)}"))
    state.append(builder.build_batch([builder.Record(0, now, tl.encode_key("decided"),
                                                     tl.encode_value(tl.TransactionLogValue(
                                                         txn.pid, txn.epoch, 60_000,
                                                         int(TxnState.PREPARE_COMMIT),
                                                         {"t": [0, 1]}, now, now)))]),
                 leader_epoch=0)
    state.close()
    with running_broker(data_dir=str(tmp_path)) as node, WireClient(node.port) as c:
        assert describe(c, "decided").transaction_state == "CompleteCommit"
        assert committed_view(fetch(c, "t", partition=0)) == [b"zero"]
        assert committed_view(fetch(c, "t", partition=1)) == [b"one"]
        assert fetch(c, "t", partition=1).last_stable_offset == 2  # record + marker


def test_an_idle_transactional_id_expires_and_stays_forgotten_after_a_restart(tmp_path):
    settings = {"transactional.id.expiration.ms": 200,
                "transaction.remove.expired.transaction.cleanup.interval.ms": 50}
    with running_broker(data_dir=str(tmp_path), **settings) as node, \
            WireClient(node.port) as c:
        first = Txn(c, "ephemeral")
        assert list_states(c) == {("ephemeral", "Empty")}
        deadline = time.monotonic() + 30
        while list_states(c):
            assert time.monotonic() < deadline, "the idle id was never removed"
            time.sleep(0.05)
    with running_broker(data_dir=str(tmp_path)) as node, WireClient(node.port) as c:
        assert list_states(c) == set(), "the tombstone is replayed"
        # The id starts over with a new producer id.
        assert Txn(c, "ephemeral").pid != first.pid


def test_describe_producers_shows_the_open_transaction_a_partition_waits_for():
    with running_broker() as node, WireClient(node.port) as c:
        create_topic(c, "t")
        txn = Txn(c, "visible")
        txn.add("t", 0)
        txn.produce("t", 0, b"a", b"b", b"c")
        answer = c.request(61, 0, {"topics": [{"name": "t", "partition_indexes": [0, 7]}]})
        p0, p7 = answer.topics[0].partitions
        [producer] = p0.active_producers
        assert (producer.producer_id, producer.producer_epoch, producer.last_sequence,
                producer.current_txn_start_offset) == (txn.pid, txn.epoch, 2, 0)
        assert code(p7.error_code) == ErrorCode.unknown_topic_or_partition
        assert txn.end(commit=True) == 0
        answer = c.request(61, 0, {"topics": [{"name": "t", "partition_indexes": [0]}]})
        [producer] = answer.topics[0].partitions[0].active_producers
        assert producer.current_txn_start_offset == -1 and producer.coordinator_epoch == 0


def test_a_failed_state_append_answers_coordinator_not_available_and_changes_nothing():
    with running_broker() as node, WireClient(node.port) as c:
        create_topic(c, "t")
        txn = Txn(c, "unlucky")
        txn.add("t", 0)
        txn.produce("t", 0, b"kept")
        runtime = node.broker.transactions
        state = node.broker.logs.get_log(
            TRANSACTION_STATE_TOPIC, partition_of(runtime, "unlucky"))

        def full_disk(*args, **kwargs):
            raise OSError(28, "No space left on device")

        state.append = full_disk  # the next append of this partition fails
        try:
            assert txn.end(commit=True) == 15  # COORDINATOR_NOT_AVAILABLE: retry
        finally:
            del state.append
        # Nothing was stored, so nothing was decided: no marker, still Ongoing.
        assert describe(c, "unlucky").transaction_state == "Ongoing"
        assert fetch(c, "t").last_stable_offset == 0
        assert txn.end(commit=True) == 0  # the client's retry
        assert committed_view(fetch(c, "t")) == [b"kept"]


def partition_of(runtime: Any, tid: str) -> int:
    from odradek.coordinator.transaction_log import partition_for

    return partition_for(tid, runtime.num_partitions)


def test_transaction_version_2_adds_partitions_for_its_client_and_bumps_the_epoch():
    """KIP-890 part 2 as the Java client 4.4 speaks it: no AddPartitionsToTxn or
    AddOffsetsToTxn - Produce v12 and TxnOffsetCommit v5 add their partitions - and
    EndTxn v5 answers the next epoch, which the markers already carry."""
    with running_broker() as node, WireClient(node.port) as c:
        create_topic(c, "in")
        create_topic(c, "out")
        txn = Txn(c, "v2")
        assert txn.produce("out", 0, b"one", version=12).error_code == 0
        assert txn_offset_commit(c, txn, "readers", "in", 7, version=5) == 0
        answer = c.request(26, 5, {"transactional_id": "v2", "producer_id": txn.pid,
                                   "producer_epoch": txn.epoch, "committed": True})
        assert (answer.error_code, answer.producer_id, answer.producer_epoch) == (
            0, txn.pid, txn.epoch + 1)
        assert committed_view(fetch(c, "out")) == [b"one"]
        assert offset_fetch(c, "readers", "in") == 7
        # The old epoch is fenced on the partition by the marker; the next transaction
        # goes on at the new epoch, sequences from 0.
        assert txn.produce("out", 0, b"stale", version=12).error_code == (
            ErrorCode.invalid_producer_epoch)
        txn.epoch += 1
        txn.seq.clear()
        assert txn.produce("out", 0, b"two", version=12).error_code == 0
        answer = c.request(26, 5, {"transactional_id": "v2", "producer_id": txn.pid,
                                   "producer_epoch": txn.epoch, "committed": False})
        assert answer.error_code == 0 and answer.producer_epoch == txn.epoch + 1
        assert committed_view(fetch(c, "out")) == [b"one"]


def test_txn_offset_commit_v6_names_topics_by_id_and_says_which_group_error():
    """TxnOffsetCommit v6 (KIP-1319, Kafka 4.4; Odradek's schema, as kio 0.6.5 stops at
    v5): topics by id in the request and the answer, an unknown id UNKNOWN_TOPIC_ID; a
    commit from a generation of a group that does not exist is GROUP_ID_NOT_FOUND and a
    KIP-848 member at another epoch STALE_MEMBER_EPOCH, both ILLEGAL_GENERATION in v5."""
    from tests.server.test_consumer_groups import FAST, heartbeat

    with running_broker(**FAST) as node, WireClient(node.port) as c:
        made = c.request(19, 7, {"topics": [{"name": "in", "num_partitions": 1,
                                             "replication_factor": 1}], "timeout": 5000})
        topic_id = made.topics[0].topic_id
        unknown = uuid.uuid4()
        txn = Txn(c, "pipe")

        def commit(group: str, *, version: int = 6, generation: int = -1, member: str = "",
                   topics: list[tuple[Any, int]] | None = None) -> list[tuple[Any, int]]:
            by = "topic_id" if version >= 6 else "name"
            answer = c.request(28, version, {
                "transactional_id": txn.tid, "group_id": group, "producer_id": txn.pid,
                "producer_epoch": txn.epoch, "generation_id": generation,
                "member_id": member, "group_instance_id": None, "topics": [
                    {by: t, "partitions": [{"partition_index": p, "committed_offset": 7,
                                            "committed_leader_epoch": -1,
                                            "committed_metadata": ""}]}
                    for t, p in topics or [(topic_id if version >= 6 else "in", 0)]]})
            return [(getattr(t, by), code(p.error_code))
                    for t in answer.topics for p in t.partitions]

        assert add_offsets(c, txn, "readers", version=4) == 0
        assert sorted(commit("readers", topics=[(topic_id, 0), (unknown, 0), (topic_id, 5)]),
                      key=str) == sorted([
            (topic_id, 0), (unknown, ErrorCode.unknown_topic_id),
            (topic_id, ErrorCode.unknown_topic_or_partition)], key=str)
        assert txn.end(commit=True, version=4) == 0
        assert offset_fetch(c, "readers", "in") == 7

        # A group that does not exist, named with a generation.
        assert add_offsets(c, txn, "nobody", version=4) == 0
        assert commit("nobody", generation=3, member="m") == [
            (topic_id, ErrorCode.group_id_not_found)]
        assert commit("nobody", version=5, generation=3, member="m") == [
            ("in", ErrorCode.illegal_generation)]
        # Without one it is a commit from outside the group (Kafka 4.4 makes the group).
        assert commit("nobody") == [(topic_id, 0)]

        # A KIP-848 member (epoch 1) committing at another epoch.
        joined = heartbeat(c, 1, "m1", 0, group="modern", topics=["in"])
        assert code(joined.error_code) == 0 and joined.member_epoch == 1
        assert add_offsets(c, txn, "modern", version=4) == 0
        assert commit("modern", generation=2, member="m1") == [
            (topic_id, ErrorCode.stale_member_epoch)]
        assert commit("modern", version=5, generation=2, member="m1") == [
            ("in", ErrorCode.illegal_generation)]
        assert commit("modern", generation=1, member="m1") == [(topic_id, 0)]
        assert txn.end(commit=True, version=4) == 0
