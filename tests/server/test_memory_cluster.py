"""acks=all on a 3-broker cluster in one process (tests/server/memory_cluster.py): the
path from a Produce request to its answer through ``Partition.append_as_leader``, the
followers' fetches and the produce purgatory, with the outcomes Kafka gives.

- committed: answered once every ISR member has the records (they are on all three);
- a stuck ISR member holds acks=all until the request's timeout (REQUEST_TIMED_OUT),
  and then, once out of the ISR, no longer does;
- too few in sync: NOT_ENOUGH_REPLICAS, nothing written;
- leadership lost while waiting (the leader's ZooKeeper session expires):
  NOT_LEADER_OR_FOLLOWER at once, not at the timeout;
- a broker stopping answers its waiting appends at once (NOT_LEADER_OR_FOLLOWER).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode

from odradek.client.aio import AsyncBrokerConnection
from odradek.client.codec import PRODUCE
from odradek.records.builder import build_simple
from tests.server.memory_cluster import MemoryCluster, with_cluster

TOPIC = "orders"


async def connect(cluster: MemoryCluster, node_id: int) -> AsyncBrokerConnection:
    host, port = cluster.address(node_id)
    return await AsyncBrokerConnection.open(host, port, client_id="test", timeout_s=30)


async def produce(conn: AsyncBrokerConnection, values: list[bytes], *, timeout_ms: int = 10_000
                  ) -> Any:
    answer = await conn.request(PRODUCE, {
        "transactional_id": None, "acks": -1, "timeout": timeout_ms,
        "topic_data": [{"name": TOPIC, "partition_data": [
            {"index": 0, "records": build_simple(values)}]}]})
    return answer.responses[0].partition_responses[0]


def run(tmp_path: Path, body: Any, **settings: Any) -> None:
    asyncio.run(with_cluster(tmp_path, body, **settings))


def test_acks_all_is_answered_once_every_isr_member_has_the_records(tmp_path) -> None:
    async def body(cluster: MemoryCluster) -> None:
        await cluster.create_topic(TOPIC)
        leader = cluster.leader(TOPIC, 0)
        conn = await connect(cluster, leader)
        try:
            for i in range(5):
                answer = await produce(conn, [b"a%d" % i, b"b%d" % i])
                assert (answer.error_code, answer.base_offset) == (ErrorCode.none, 2 * i)
        finally:
            await conn.close()
        lead = cluster.brokers[leader].cluster
        assert lead is not None
        part = lead.replicas.leaders[(TOPIC, 0)]
        assert part.log.high_watermark == 10
        # Committed means on every ISR member: each has all ten records.
        for broker in cluster.running():
            assert broker.cluster is not None
            assert broker.cluster.replicas.partitions[(TOPIC, 0)].log.log_end_offset == 10
        assert lead.replicas.produce_purgatory.size() == 0

    run(tmp_path, body)


def test_pipelined_acks_all_produces_are_answered_in_order(tmp_path) -> None:
    """An acks=all answer goes out from the follower fetch that commits it; a second
    request sent before that answer waits behind it (Kafka answers a connection's
    requests in order), and the connection serves on afterwards."""
    async def body(cluster: MemoryCluster) -> None:
        await cluster.create_topic(TOPIC)
        conn = await connect(cluster, cluster.leader(TOPIC, 0))
        try:
            for i in range(3):
                first, second = await asyncio.gather(
                    produce(conn, [b"first %d" % i]), produce(conn, [b"second %d" % i]))
                assert (first.error_code, first.base_offset) == (ErrorCode.none, 2 * i)
                assert (second.error_code, second.base_offset) == (ErrorCode.none, 2 * i + 1)
            answer = await produce(conn, [b"alone"])
            assert (answer.error_code, answer.base_offset) == (ErrorCode.none, 6)
        finally:
            await conn.close()

    run(tmp_path, body)


def _stall_fetchers(cluster: MemoryCluster, node_id: int) -> None:
    """Broker ``node_id`` stops fetching (a stuck follower), as far as its leaders see."""
    broker = cluster.brokers[node_id]
    assert broker.cluster is not None
    for fetcher in broker.cluster.replicas._fetchers.values():
        fetcher.partitions.clear()
        fetcher._wake.set()


def test_a_stuck_isr_member_holds_acks_all_until_the_timeout_then_leaves_the_isr(
        tmp_path) -> None:
    async def body(cluster: MemoryCluster) -> None:
        await cluster.create_topic(TOPIC)
        leader = cluster.leader(TOPIC, 0)
        stuck = next(n for n in cluster.brokers if n != leader)
        conn = await connect(cluster, leader)
        try:
            assert (await produce(conn, [b"first"])).error_code == ErrorCode.none
            _stall_fetchers(cluster, stuck)
            started = time.monotonic()
            answer = await produce(conn, [b"held"], timeout_ms=500)
            assert answer.error_code == ErrorCode.request_timed_out
            assert time.monotonic() - started >= 0.45
            lead = cluster.brokers[leader].cluster
            assert lead is not None
            # After replica.lag.time.max.ms the leader drops it from the ISR, and the
            # two left (min.insync.replicas=2) commit without it.
            await cluster.wait_for(lambda: stuck not in lead.metadata.states[(TOPIC, 0)].isr,
                                   "the stuck broker out of the ISR")
            answer = await produce(conn, [b"after"])
            assert (answer.error_code, answer.base_offset) == (ErrorCode.none, 2)
        finally:
            await conn.close()

    run(tmp_path, body, **{"replica.lag.time.max.ms": 1500})


def test_too_few_in_sync_replicas_refuse_acks_all_before_writing(tmp_path) -> None:
    async def body(cluster: MemoryCluster) -> None:
        await cluster.create_topic(TOPIC, configs={"min.insync.replicas": "3"})
        leader = cluster.leader(TOPIC, 0)
        conn = await connect(cluster, leader)
        try:
            assert (await produce(conn, [b"all three"])).error_code == ErrorCode.none
            follower = next(n for n in cluster.brokers if n != leader)
            await cluster.stop_broker(follower)  # the controller takes it out of the ISR
            lead = cluster.brokers[leader].cluster
            assert lead is not None
            await cluster.wait_for(
                lambda: len(lead.replicas.leaders[(TOPIC, 0)].repl.isr) == 2,  # type: ignore[union-attr]
                "the ISR at two")
            answer = await produce(conn, [b"refused"])
            assert answer.error_code == ErrorCode.not_enough_replicas
            assert lead.replicas.leaders[(TOPIC, 0)].log.log_end_offset == 1  # not written
        finally:
            await conn.close()

    run(tmp_path, body)


async def _an_append_in_doubt(cluster: MemoryCluster, conn: AsyncBrokerConnection,
                              leader: int) -> asyncio.Task[Any]:
    """Every follower stalled, an acks=all append waiting (30 s timeout) in the leader's
    produce purgatory."""
    for node in cluster.brokers:
        if node != leader:
            _stall_fetchers(cluster, node)
    waiting = asyncio.create_task(produce(conn, [b"in doubt"], timeout_ms=30_000))
    lead = cluster.brokers[leader].cluster
    assert lead is not None
    await cluster.wait_for(lambda: lead.replicas.produce_purgatory.size() == 1,
                           "the append waiting in the purgatory")
    return waiting


def test_a_waiting_append_is_answered_when_leadership_ends_not_at_its_timeout(
        tmp_path) -> None:
    async def body(cluster: MemoryCluster) -> None:
        await cluster.create_topic(TOPIC)
        leader = cluster.leader(TOPIC, 0)
        conn = await connect(cluster, leader)
        try:
            waiting = await _an_append_in_doubt(cluster, conn, leader)
            lead = cluster.brokers[leader].cluster
            assert lead is not None
            # The leader's session expires: its registration is gone, it leads no more.
            # Answered well before the append's 30 s timeout (wait_for fails at 10 s).
            cluster.stores[leader].expire_session()
            answer = await asyncio.wait_for(waiting, 10)
            assert answer.error_code == ErrorCode.not_leader_or_follower
            assert lead.replicas.produce_purgatory.size() == 0
        finally:
            await conn.close()

    run(tmp_path, body, **{"replica.lag.time.max.ms": 30_000})


def test_a_stopping_broker_answers_its_waiting_appends_at_once(tmp_path) -> None:
    async def body(cluster: MemoryCluster) -> None:
        await cluster.create_topic(TOPIC)
        leader = cluster.leader(TOPIC, 0)
        conn = await connect(cluster, leader)
        try:
            waiting = await _an_append_in_doubt(cluster, conn, leader)
            lead = cluster.brokers[leader].cluster
            assert lead is not None
            lead.replicas.stop_waiting()  # what Broker.stop does first
            answer = await asyncio.wait_for(waiting, 10)
            assert answer.error_code == ErrorCode.not_leader_or_follower
        finally:
            await conn.close()

    run(tmp_path, body, **{"replica.lag.time.max.ms": 30_000})


def test_followers_fetch_and_the_leader_reads_only_what_changed(tmp_path) -> None:
    """Ten partitions led by one broker: after an append to one of them, the followers'
    fetches name that partition alone, and the leader reads nothing else for them (but
    for a sweep of the whole session, once a second at most)."""
    partitions = 10

    async def body(cluster: MemoryCluster) -> None:
        leader = 1
        await cluster.create_topic(TOPIC, partitions)
        broker = cluster.brokers[leader]
        node = broker.cluster
        assert node is not None
        led = [p for p in range(partitions) if cluster.leader(TOPIC, p) == leader]
        assert led, "broker 1 leads some partitions"
        reads: list[list[int]] = []
        real_read = node.read_for_follower

        def recording_read(replica, wanted, *args):  # type: ignore[no-untyped-def]
            reads.append(sorted(w[1] for w in wanted if w[0] == TOPIC))
            return real_read(replica, wanted, *args)

        node.read_for_follower = recording_read  # type: ignore[method-assign]
        conn = await connect(cluster, leader)
        try:
            target = led[-1]
            answer = await conn.request(PRODUCE, {
                "transactional_id": None, "acks": -1, "timeout": 10_000,
                "topic_data": [{"name": TOPIC, "partition_data": [
                    {"index": target, "records": build_simple([b"one"])}]}]})
            partition = answer.responses[0].partition_responses[0]
            assert partition.error_code == ErrorCode.none  # on both followers by now
            await asyncio.sleep(0.3)
        finally:
            await conn.close()
        # Each follower: its next fetch names the partition (its log end moved), then
        # fetches name nothing. (The parked fetches the append woke read through the
        # method bound before the patch; the high-watermark move that followed wakes
        # no follower fetch: tests/server/test_purgatory.py.)
        narrow = [r for r in reads if len(r) <= 1]
        whole = [r for r in reads if len(r) == len(led)]
        assert [target] in narrow
        assert all(r in ([], [target]) for r in narrow)
        assert len(narrow) >= 2 and len(whole) <= 2, reads

    run(tmp_path, body, **{"replica.lag.time.max.ms": 30_000})


def test_followers_fetch_by_topic_id_and_another_incarnations_id_is_refused(tmp_path) -> None:
    """Followers fetch at v13, topics by id (KIP-516), as Kafka's do: a follower whose
    metadata still has a deleted topic's id is answered UNKNOWN_TOPIC_ID by the leader
    of a re-created topic of the same name, never given its batches (by name it was:
    the fault tier's topic churn saw a follower offered the new topic's records)."""
    import uuid

    from odradek.client.codec import FETCH

    async def body(cluster: MemoryCluster) -> None:
        await cluster.create_topic(TOPIC)
        leader = cluster.leader(TOPIC, 0)
        follower = next(n for n in cluster.brokers if n != leader)
        replicas = cluster.brokers[follower].cluster.replicas  # type: ignore[union-attr]
        fetchers = list(replicas._fetchers.values())
        await cluster.wait_for(lambda: any(f._conn is not None for f in fetchers),
                               "a follower's connection")
        assert {f._conn.version(FETCH) for f in fetchers if f._conn is not None} == {13}
        conn = await connect(cluster, leader)
        try:
            assert (await produce(conn, [b"a", b"b"])).error_code == ErrorCode.none
        finally:
            await conn.close()
        host, port = cluster.address(leader)
        raw = await AsyncBrokerConnection.open(host, port, client_id="stale-follower",
                                               timeout_s=30, versions={FETCH: (13, 13)})
        real = cluster.brokers[leader].metadata.assignments[TOPIC].topic_id  # type: ignore[union-attr]
        try:
            def fetch(topic_id: uuid.UUID) -> dict[str, Any]:
                return {"cluster_id": None, "replica_id": follower, "max_wait": 0,
                        "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": 0,
                        "session_id": 0, "session_epoch": -1, "topics": [
                            {"topic_id": topic_id, "partitions": [{
                                "partition": 0, "current_leader_epoch": -1,
                                "fetch_offset": 0, "last_fetched_epoch": -1,
                                "log_start_offset": -1, "partition_max_bytes": 1 << 20,
                                "replica_directory_id": None}]}],
                        "forgotten_topics_data": [], "rack_id": ""}

            stale = await raw.request(FETCH, fetch(uuid.UUID(int=4040)))
            (p,) = stale.responses[0].partitions
            assert p.error_code == ErrorCode.unknown_topic_id and not p.records
            current = await raw.request(FETCH, fetch(real))
            (p,) = current.responses[0].partitions
            assert p.error_code == ErrorCode.none and p.records
        finally:
            await raw.close()

    run(tmp_path, body)
