"""Coordination per internal-topic partition: a broker coordinates the groups of the
``__consumer_offsets`` partitions it has elected, and the transactional ids of the
``__transaction_state`` partitions; a partition that resigns answers NOT_COORDINATOR and
drops what it held, one elected again comes back from its log.

The first tests drive a real single-node broker: the partition is resigned and elected
on the broker's own event loop (as the cluster's replica manager will), while real
clients and raw requests (``odradek.client.connection.BrokerConnection``) watch. The
last ones run the runtimes in cluster mode against a fake cluster topology
(``broker.topology``), to see the replication hooks: leader epochs on appends, answers
held until the records are replicated, markers written through the cluster once their
decision is.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import struct
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import closing
from typing import Any

import confluent_kafka
import pytest
from kio.index import load_request_schema
from kio.schema.errors import ErrorCode

from odradek.client.connection import BrokerConnection
from odradek.client.wire import WireClient
from odradek.coordinator import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC, partition_for
from odradek.coordinator import results as r
from odradek.coordinator.transaction_log import partition_for as txn_partition_for
from odradek.coordinator.transactions import TxnMarkers, TxnResult, TxnState
from odradek.protocol.messages import build
from odradek.server.config import load_config
from odradek.server.coordinators.coordinator_runtime import CoordinatorUnavailable
from odradek.server.coordinators.groups import GroupRuntime
from odradek.server.coordinators.transactions import TxnRuntime
from odradek.server.metadata import MetadataStore
from odradek.server.replication.purgatory import Purgatory
from odradek.storage import LogManager
from odradek.storage.log import wall_clock_ms
from odradek.testing import RunningBroker, running_broker


def code(value: Any) -> int:
    return int(getattr(value, "value", value))


def on_broker(node: RunningBroker, action: Callable[[], Any]) -> Any:
    """Run ``action`` on the broker's event loop, where its runtimes live (the replica
    manager will call elect/resign from there too), and return what it returns."""
    server = node.broker._servers[0]

    async def run() -> Any:
        return action()

    return asyncio.run_coroutine_threadsafe(run(), server.get_loop()).result(timeout=10)


def raw(conn: BrokerConnection, api_key: int, version: int, data: dict[str, Any]) -> Any:
    return conn.call(build(load_request_schema(api_key, version), data))


def connect(node: RunningBroker, timeout_s: float = 10) -> closing[BrokerConnection]:
    return closing(BrokerConnection(node.host, node.port, client_id="partitions-test",
                                    timeout_s=timeout_s))


def elsewhere(name: str, partition: int, partitions: int,
              partition_of: Callable[[str, int], int] = partition_for) -> str:
    """A key like ``name`` that lives in another partition than ``partition``."""
    return next(f"{name}-{i}" for i in itertools.count()
                if partition_of(f"{name}-{i}", partitions) != partition)


def create_topic(conn: BrokerConnection, name: str, partitions: int) -> None:
    answer = raw(conn, 19, 5, {"topics": [{"name": name, "num_partitions": partitions,
                                           "replication_factor": 1}], "timeout": 5000})
    assert code(answer.topics[0].error_code) == 0


def fetch_offsets(conn: BrokerConnection, *groups: str) -> dict[str, tuple[int, int | None]]:
    """OffsetFetch v8 (several groups at once): group -> (error, offset of t-0)."""
    answer = raw(conn, 9, 8, {"require_stable": False, "groups": [
        {"group_id": g, "topics": [{"name": "t", "partition_indexes": [0]}]} for g in groups]})
    out = {}
    for g in answer.groups:
        offsets = [p.committed_offset for t in g.topics for p in t.partitions]
        out[g.group_id] = (code(g.error_code), offsets[0] if offsets else None)
    return out


def commit_offset(conn: BrokerConnection, group: str, offset: int) -> int:
    """OffsetCommit v8 from outside the group (no member, generation -1)."""
    answer = raw(conn, 8, 8, {
        "group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
        "group_instance_id": None, "topics": [{"name": "t", "partitions": [
            {"partition_index": 0, "committed_offset": offset, "committed_leader_epoch": -1,
             "committed_metadata": None}]}]})
    return code(answer.topics[0].partitions[0].error_code)


def listed_groups(conn: BrokerConnection) -> set[str]:
    return {g.group_id for g in raw(conn, 16, 4, {"states_filter": []}).groups}


# --- groups on a real broker ---------------------------------------------------------------


def test_a_resigned_offsets_partition_answers_not_coordinator_and_comes_back_from_its_log():
    with running_broker(**{"group.initial.rebalance.delay.ms": 0}) as node, \
            connect(node) as conn:
        runtime = node.broker.groups
        assert runtime is not None
        partitions = runtime.num_partitions
        moved = "orders"
        moved_partition = partition_for(moved, partitions)
        stays = elsewhere("audit", moved_partition, partitions)
        create_topic(conn, "t", 1)
        producer = confluent_kafka.Producer({"bootstrap.servers": node.bootstrap})
        for i in range(10):
            producer.produce("t", str(i).encode(), partition=0)
        assert producer.flush(10) == 0

        consumer = confluent_kafka.Consumer({
            "bootstrap.servers": node.bootstrap, "group.id": moved,
            "auto.offset.reset": "earliest", "enable.auto.commit": False})
        try:
            consumer.subscribe(["t"])
            got = consume(consumer, 5)
            assert [m.value() for m in got] == [str(i).encode() for i in range(5)]
            commit(consumer, 5)
            assert commit_offset(conn, stays, 3) == 0
            assert fetch_offsets(conn, moved, stays) == {moved: (0, 5), stays: (0, 3)}

            on_broker(node, lambda: runtime.resign(moved_partition))
            assert not runtime.owns(moved_partition)
            # The client's group is no longer coordinated here; the other one is.
            assert fetch_offsets(conn, moved, stays) == {moved: (ErrorCode.not_coordinator, None),
                                                         stays: (0, 3)}
            beat = raw(conn, 12, 4, {"group_id": moved, "generation_id": 1,
                                     "member_id": consumer.memberid() or "x",
                                     "group_instance_id": None})
            assert code(beat.error_code) == ErrorCode.not_coordinator
            assert commit_offset(conn, moved, 9) == ErrorCode.not_coordinator
            assert stays in listed_groups(conn) and moved not in listed_groups(conn)
            described = raw(conn, 15, 5, {"groups": [moved, stays],
                                          "include_authorized_operations": False}).groups
            assert [code(d.error_code) for d in described] == [ErrorCode.not_coordinator, 0]

            on_broker(node, lambda: runtime.elect(moved_partition))
            # Loaded from the log: the committed offset, and the group with its member.
            assert fetch_offsets(conn, moved, stays) == {moved: (0, 5), stays: (0, 3)}
            assert moved in listed_groups(conn)
            # The client goes on where it was, and its commits work again.
            got = consume(consumer, 3)
            assert [m.value() for m in got] == [str(i).encode() for i in range(5, 8)]
            commit(consumer, 8)
            assert fetch_offsets(conn, moved)[moved] == (0, 8)
        finally:
            consumer.close()


def consume(consumer: confluent_kafka.Consumer, count: int) -> list[Any]:
    out: list[Any] = []
    deadline = time.monotonic() + 30
    while len(out) < count:
        assert time.monotonic() < deadline, f"only {len(out)} of {count} messages"
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            out.append(message)
    return out


def commit(consumer: confluent_kafka.Consumer, offset: int) -> None:
    """A synchronous commit, retried while the client finds its coordinator again."""
    deadline = time.monotonic() + 30
    while True:
        try:
            consumer.commit(offsets=[confluent_kafka.TopicPartition("t", 0, offset)],
                            asynchronous=False)
            return
        except confluent_kafka.KafkaException as exc:
            if time.monotonic() > deadline or not exc.args[0].retriable():
                raise
            time.sleep(0.2)


def test_a_join_parked_in_a_rebalance_is_answered_not_coordinator_when_its_partition_resigns():
    with running_broker(**{"group.initial.rebalance.delay.ms": 60_000}) as node, \
            connect(node) as conn:
        runtime = node.broker.groups
        assert runtime is not None
        partitions = runtime.num_partitions
        slow = "slow"
        slow_partition = partition_for(slow, partitions)
        other = elsewhere("busy", slow_partition, partitions)
        create_topic(conn, "t", 1)
        answers: list[Any] = []
        joiner = BrokerConnection(node.host, node.port, client_id="joiner", timeout_s=60)

        def parked_join() -> None:
            # v3: no KIP-394 round trip, the join waits for the initial delay at once.
            answers.append(raw(joiner, 11, 3, {
                "group_id": slow, "session_timeout": 10_000, "rebalance_timeout": 10_000,
                "member_id": "", "protocol_type": "consumer",
                "protocols": [{"name": "range", "metadata": b""}]}))

        waiter = threading.Thread(target=parked_join)
        waiter.start()
        try:
            deadline = time.monotonic() + 10
            while not on_broker(node, lambda: slow in runtime.coordinators[
                    slow_partition].groups):
                assert time.monotonic() < deadline, "the join never parked"
                time.sleep(0.02)
            started = time.monotonic()
            on_broker(node, lambda: runtime.resign(slow_partition))
            waiter.join(10)
            assert not waiter.is_alive()
            assert time.monotonic() - started < 5
            assert [code(a.error_code) for a in answers] == [ErrorCode.not_coordinator]
            # A group of another partition is served meanwhile.
            assert commit_offset(conn, other, 1) == 0

            on_broker(node, lambda: runtime.elect(slow_partition))
            # The group was never stored: the coordinator answers, and knows no member.
            beat = raw(conn, 12, 4, {"group_id": slow, "generation_id": 1,
                                     "member_id": "ghost", "group_instance_id": None})
            assert code(beat.error_code) == ErrorCode.unknown_member_id
        finally:
            waiter.join(10)
            joiner.close()


# --- transactions on a real broker ---------------------------------------------------------


def init_producer_id(conn: BrokerConnection, tid: str) -> Any:
    return raw(conn, 22, 3, {"transactional_id": tid, "transaction_timeout": 60_000,
                             "producer_id": -1, "producer_epoch": -1})


def add_partition(conn: BrokerConnection, tid: str, pid: int, epoch: int, partition: int
                  ) -> int:
    answer = raw(conn, 24, 3, {
        "v3_and_below_transactional_id": tid, "v3_and_below_producer_id": pid,
        "v3_and_below_producer_epoch": epoch,
        "v3_and_below_topics": [{"name": "t", "partitions": [partition]}]})
    return code(answer.results_by_topic_v3_and_below[0].results_by_partition[0]
                .partition_error_code)


def describe(conn: BrokerConnection, *tids: str) -> dict[str, Any]:
    answer = raw(conn, 65, 0, {"transactional_ids": list(tids)})
    return {d.transactional_id: d for d in answer.transaction_states}


def describe_error(node: RunningBroker, tid: str) -> int:
    """The error of a DescribeTransactions answer read off the wire: kio's reader refuses
    the -1 start time an answer without a transaction carries."""
    with WireClient(node.port) as c:
        c.send(65, 0, {"transactional_ids": [tid]})
        size = struct.unpack(">i", c._read(4))[0]
        payload = c._read(size)
    # correlation id, header tags, throttle time, array length (1 + 1), error code
    (error,) = struct.unpack_from(">h", payload, 4 + 1 + 4 + 1)
    return int(error)


def test_a_resigned_transaction_state_partition_answers_not_coordinator_until_elected():
    with running_broker() as node, connect(node) as conn:
        runtime = node.broker.transactions
        assert runtime is not None
        partitions = runtime.num_partitions
        tid = "mover"
        tid_partition = txn_partition_for(tid, partitions)
        other = elsewhere("steady", tid_partition, partitions, txn_partition_for)
        create_topic(conn, "t", 2)
        assert code(raw(conn, 10, 3, {"key": tid, "key_type": 1}).error_code) == 0
        init = init_producer_id(conn, tid)
        assert code(init.error_code) == 0
        pid, epoch = init.producer_id, init.producer_epoch
        assert add_partition(conn, tid, pid, epoch, 0) == 0

        on_broker(node, lambda: runtime.resign(tid_partition))
        assert add_partition(conn, tid, pid, epoch, 1) == ErrorCode.not_coordinator
        assert code(init_producer_id(conn, tid).error_code) == ErrorCode.not_coordinator
        end = raw(conn, 26, 3, {"transactional_id": tid, "producer_id": pid,
                                "producer_epoch": epoch, "committed": True})
        assert code(end.error_code) == ErrorCode.not_coordinator
        assert describe_error(node, tid) == ErrorCode.not_coordinator
        assert describe_error(node, other) == ErrorCode.transactional_id_not_found
        # Another partition's transactional ids are served meanwhile.
        assert code(init_producer_id(conn, other).error_code) == 0
        listed = raw(conn, 66, 0, {"state_filters": [], "producer_id_filters": []})
        assert [t.transactional_id for t in listed.transaction_states] == [other]

        on_broker(node, lambda: runtime.elect(tid_partition))
        state = describe(conn, tid)[tid]
        assert (code(state.error_code), state.transaction_state, state.producer_id,
                state.producer_epoch) == (0, "Ongoing", pid, epoch)
        assert [(t.topic, list(t.partitions)) for t in state.topics] == [("t", [0])]
        end = raw(conn, 26, 3, {"transactional_id": tid, "producer_id": pid,
                                "producer_epoch": epoch, "committed": True})
        assert code(end.error_code) == 0
        assert describe(conn, tid)[tid].transaction_state == "CompleteCommit"


def test_a_transactional_producer_commits_across_a_resignation_and_election():
    """librdkafka answers NOT_COORDINATOR on EndTxn by finding the coordinator again and
    retrying: the commit goes through once the partition is elected again."""
    with running_broker() as node, connect(node) as conn:
        runtime = node.broker.transactions
        assert runtime is not None
        create_topic(conn, "t", 1)
        tid = "crossing"
        tid_partition = txn_partition_for(tid, runtime.num_partitions)
        producer = confluent_kafka.Producer({
            "bootstrap.servers": node.bootstrap, "transactional.id": tid,
            "transaction.timeout.ms": 60_000})
        producer.init_transactions(30)
        producer.begin_transaction()
        producer.produce("t", b"kept", partition=0)
        assert producer.flush(10) == 0

        on_broker(node, lambda: runtime.resign(tid_partition))
        electing = threading.Timer(1.0, lambda: on_broker(
            node, lambda: runtime.elect(tid_partition)))
        electing.start()
        try:
            producer.commit_transaction(30)
        finally:
            electing.join()
        assert describe(conn, tid)[tid].transaction_state == "CompleteCommit"
        consumer = confluent_kafka.Consumer({
            "bootstrap.servers": node.bootstrap, "group.id": "reader",
            "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
        try:
            consumer.subscribe(["t"])
            assert [m.value() for m in consume(consumer, 1)] == [b"kept"]
        finally:
            consumer.close()


# --- cluster mode, against a fake cluster topology ------------------------------------------


class FakeCluster:
    """What the runtimes ask of a cluster's ``broker.topology``: a leader epoch, the
    internal topics' partition counts (its metadata's), replication waits the test
    completes by hand (while ``hold``), and markers it records."""

    def __init__(self) -> None:
        self.metadata: MetadataStore | None = None  # the broker's, set by FakeBroker
        self.epoch = 7
        self.hold = True
        self.waits: list[tuple[str, int, int, asyncio.Future[int]]] = []
        self.markers: list[TxnMarkers] = []

    def leader_epoch(self, topic: str, partition: int) -> int:
        return self.epoch

    def internal_topic_partition_count(self, name: str) -> int | None:
        assert self.metadata is not None
        topic = self.metadata.topics.get(name)
        return topic.partitions if topic is not None else None

    def wait_replicated(self, topic: str, partition: int, end: int) -> asyncio.Future[int] | None:
        if not self.hold:
            return None
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self.waits.append((topic, partition, end, future))
        return future

    def write_txn_markers(self, markers: TxnMarkers) -> Callable[[], Awaitable[None]]:
        return functools.partial(self.send_txn_markers, markers)

    async def send_txn_markers(self, markers: TxnMarkers) -> None:
        self.markers.append(markers)

    def replicate(self, code: int = 0) -> None:
        """Complete every replication wait so far with ``code``."""
        waits, self.waits = self.waits, []
        for *_, future in waits:
            if not future.done():
                future.set_result(code)


class FakeBroker:
    """The parts of a Broker the runtimes use, with a cluster; internal topics created
    as the cluster would (the runtimes do not create them in cluster mode)."""

    def __init__(self, data_dir: str, cluster: FakeCluster) -> None:
        self.config = load_config(listen="127.0.0.1:0", data_dir=data_dir, environ={},
                                  overrides={"offsets.topic.num.partitions": 4,
                                             "transaction.state.log.num.partitions": 4})
        self.clock = wall_clock_ms
        self.cluster = self.topology = cluster
        self.metadata = cluster.metadata = MetadataStore(data_dir, 1)
        self.logs = LogManager.open(data_dir, default_config=self.config.log_config(),
                                    clock=self.clock)
        self.purgatory = Purgatory()
        self.groups: GroupRuntime | None = None
        self.transactions: TxnRuntime | None = None
        self.group_configs = None  # no KIP-848 group configs set (Broker's before start)
        for topic in (OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC, "t"):
            self.metadata.create_topic(topic, 4, {}, internal=topic != "t")
            for partition in range(4):
                self.logs.get_or_create_log(topic, partition)


@pytest.fixture
def fake(tmp_path: Any) -> Iterator[FakeBroker]:
    broker = FakeBroker(str(tmp_path), FakeCluster())
    try:
        yield broker
    finally:
        broker.logs.close()


@contextlib.asynccontextmanager
async def txn_runtimes(fake: FakeBroker, tid: str = "tx"
                       ) -> AsyncIterator[tuple[GroupRuntime, TxnRuntime, int, int, int]]:
    """The group and transaction runtimes on ``fake``, ``tid``'s partition elected and a
    producer id for it (with replication answered at once: ``hold`` is False from here);
    yields (groups, txns, partition, producer id, epoch) and stops both runtimes after."""
    groups = fake.groups = GroupRuntime(fake)  # type: ignore[arg-type]
    txns = fake.transactions = TxnRuntime(fake)  # type: ignore[arg-type]
    groups.start()
    txns.start()
    try:
        partition = txns.partition_for(tid)
        txns.elect(partition)
        fake.cluster.hold = False
        init = await txns.call(tid, lambda c, token, now: c.init_producer_id(
            tid, 60_000, token=token, now_ms=now))
        yield groups, txns, partition, init.producer_id, init.producer_epoch
    finally:
        await txns.stop()
        await groups.stop()


def commit_call(group: str, offset: int) -> Callable[[Any, int, int], Any]:
    return lambda c, token, now: c.commit_offsets(
        group, "", -1, None, [r.OffsetCommitRequestPartition("t", 0, offset, -1, None)],
        token=token, now_ms=now)


def test_in_a_cluster_group_answers_wait_for_replication_and_errors_map_as_kafkas(fake):
    async def main() -> None:
        cluster = fake.cluster
        groups = fake.groups = GroupRuntime(fake)  # type: ignore[arg-type]
        groups.start()
        try:
            # Nothing is coordinated until the replica manager elects.
            assert groups.coordinators == {}
            with pytest.raises(CoordinatorUnavailable) as refused:
                groups.coordinator_for("g")
            assert refused.value.error_code == ErrorCode.not_coordinator
            partition = groups.partition_for("g")
            groups.elect(partition)
            assert groups.owns(partition) and len(groups.coordinators) == 1

            answers = []
            for code_ in (0, ErrorCode.not_leader_or_follower, ErrorCode.request_timed_out):
                call = asyncio.ensure_future(groups.call("g", commit_call("g", 5)))
                await asyncio.sleep(0.01)
                assert not call.done(), "answered before the commit was replicated"
                [(topic, p, end, _)] = cluster.waits
                lg = fake.logs.get_log(OFFSETS_TOPIC, partition)
                assert (topic, p, end) == (OFFSETS_TOPIC, partition, lg.log_end_offset)
                cluster.replicate(code_)
                try:
                    result = await call
                    answers.append(result.partitions[0].error_code)
                except CoordinatorUnavailable as exc:
                    answers.append(exc.error_code)
            # Kafka's GroupMetadataManager: NOT_LEADER_OR_FOLLOWER -> NOT_COORDINATOR,
            # anything else -> COORDINATOR_NOT_AVAILABLE.
            assert answers == [0, ErrorCode.not_coordinator, ErrorCode.coordinator_not_available]
            # Every batch carries the partition's leader epoch.
            lg = fake.logs.get_log(OFFSETS_TOPIC, partition)
            assert {b.header.partition_leader_epoch for b in lg.read_batches(0)} == {7}

            # A request whose answer waits for replication when the partition resigns:
            # NOT_COORDINATOR at once, and the runtime's task is gone.
            call = asyncio.ensure_future(groups.call("g", commit_call("g", 6)))
            await asyncio.sleep(0.01)
            groups.resign(partition)
            with pytest.raises(CoordinatorUnavailable) as resigned:
                await call
            assert resigned.value.error_code == ErrorCode.not_coordinator
            await asyncio.sleep(0)
            assert not groups._tasks

            # Elected again: what the log holds is back (the last commit, 6, too: it was
            # appended; whether it survives is the new leader's log's business).
            cluster.hold = False
            groups.elect(partition)
            fetched = groups.coordinator_for("g").fetch_offsets("g", [("t", 0)])
            assert fetched.partitions[0].offset == 6
        finally:
            await groups.stop()
        assert not groups._tasks

    asyncio.run(main())


def test_in_a_cluster_markers_go_through_the_cluster_once_their_decision_is_replicated(fake):
    async def main() -> None:
        cluster = fake.cluster
        async with txn_runtimes(fake) as (groups, txns, partition, pid, epoch):
            assert await txns.call("tx", lambda c, token, now: c.add_partitions(
                "tx", pid, epoch, [("t", 0), ("t", 1)], token=token, now_ms=now)) == (
                TxnResult(0))

            # The Prepare record is not replicated: EndTxn waits, no marker goes out.
            cluster.hold = True
            end = asyncio.ensure_future(txns.call("tx", lambda c, token, now: c.end_txn(
                "tx", pid, epoch, True, token=token, now_ms=now)))
            await asyncio.sleep(0.01)
            assert not end.done() and cluster.markers == []
            # Its replication fails: EndTxn is told to retry, still no marker...
            cluster.replicate(ErrorCode.request_timed_out)
            with pytest.raises(CoordinatorUnavailable) as failed:
                await end
            assert failed.value.error_code == ErrorCode.coordinator_not_available
            await asyncio.sleep(0.01)
            assert cluster.markers == []
            # ...until the record is replicated after all (asked again after a backoff).
            deadline = time.monotonic() + 5
            while not cluster.waits:
                assert time.monotonic() < deadline, "the replication was not asked again"
                await asyncio.sleep(0.02)
            cluster.hold = False
            cluster.replicate(0)
            while txns.coordinators[partition].transactions["tx"].state != (
                    TxnState.COMPLETE_COMMIT):
                assert time.monotonic() < deadline, "the transaction never completed"
                await asyncio.sleep(0.02)
            [markers] = cluster.markers
            assert (markers.producer_id, markers.producer_epoch, markers.commit,
                    markers.partitions) == (pid, epoch, True, (("t", 0), ("t", 1)))
            # Kafka's coordinator epoch: the leader epoch the partition was elected in.
            assert markers.coordinator_epoch == 7
            # The retry of EndTxn hears the transaction is committed.
            assert await txns.call("tx", lambda c, token, now: c.end_txn(
                "tx", pid, epoch, True, token=token, now_ms=now)) == TxnResult(0)
            state_log = fake.logs.get_log(TRANSACTION_STATE_TOPIC, partition)
            assert {b.header.partition_leader_epoch for b in state_log.read_batches(0)} == {7}
            # A marker of another broker's transaction coordinator in a partition whose
            # groups are not coordinated here is left to the group's coordinator.
            groups.txn_marker_written(0, pid, True)
        assert not txns._tasks and not groups._tasks

    asyncio.run(main())


def test_in_a_cluster_markers_written_after_a_resignation_are_left_to_the_new_coordinator(fake):
    async def main() -> None:
        cluster = fake.cluster
        release = asyncio.Event()

        async def slow_markers(markers: TxnMarkers) -> None:
            cluster.markers.append(markers)
            await release.wait()

        cluster.send_txn_markers = slow_markers  # type: ignore[method-assign]
        async with txn_runtimes(fake) as (_, txns, partition, pid, epoch):
            await txns.call("tx", lambda c, token, now: c.add_partitions(
                "tx", pid, epoch, [("t", 0)], token=token, now_ms=now))
            assert await txns.call("tx", lambda c, token, now: c.end_txn(
                "tx", pid, epoch, False, token=token, now_ms=now)) == TxnResult(0)
            await asyncio.sleep(0.01)
            assert len(cluster.markers) == 1 and txns._tasks  # being written
            txns.resign(partition)
            await asyncio.sleep(0.01)
            assert not txns._tasks  # cancelled: the next coordinator sends them again
            txns.elect(partition)  # it does, at its load: the abort was prepared
            await asyncio.sleep(0.01)
            assert len(cluster.markers) == 2
            release.set()
            await asyncio.sleep(0.05)
            state = txns.coordinators[partition].transactions["tx"].state
            assert state == TxnState.COMPLETE_ABORT

    asyncio.run(main())


def test_a_single_node_stamps_what_it_always_did(tmp_path):
    """No cluster: leader epoch 0 on every coordinator batch, as before."""
    with running_broker(data_dir=str(tmp_path), **{"group.initial.rebalance.delay.ms": 0}
                        ) as node, connect(node) as conn:
        create_topic(conn, "t", 1)
        assert commit_offset(conn, "g", 1) == 0
        lg = node.broker.logs.get_log(OFFSETS_TOPIC, partition_for("g", 4))
        [batch] = lg.read_batches(0)
        assert batch.header.partition_leader_epoch == 0


def test_in_a_cluster_an_answer_from_state_not_yet_replicated_waits_for_it(fake):
    """A retried AddPartitionsToTxn whose first try was told COORDINATOR_NOT_AVAILABLE
    (its record not replicated) appends nothing: its answer waits for that record."""
    async def main() -> None:
        cluster = fake.cluster
        async with txn_runtimes(fake) as (_, txns, _partition, pid, epoch):

            def add() -> Any:
                return txns.call("tx", lambda c, token, now: c.add_partitions(
                    "tx", pid, epoch, [("t", 0)], token=token, now_ms=now))

            cluster.hold = True
            first = asyncio.ensure_future(add())
            await asyncio.sleep(0.01)
            [(_, _, end, _)] = cluster.waits
            cluster.replicate(ErrorCode.request_timed_out)
            with pytest.raises(CoordinatorUnavailable) as failed:
                await first
            assert failed.value.error_code == ErrorCode.coordinator_not_available
            retry = asyncio.ensure_future(add())
            await asyncio.sleep(0.01)
            assert not retry.done()
            assert [w[2] for w in cluster.waits] == [end]
            cluster.replicate(0)
            assert await retry == TxnResult(0)
            # Replicated now: the next such answer goes at once.
            assert await asyncio.wait_for(add(), 1) == TxnResult(0)
            assert cluster.waits == []

    asyncio.run(main())
