"""KIP-890 across brokers, in-process (a memory cluster): a partition leader that does
not coordinate a transaction asks its coordinator on another broker (AddPartitionsToTxn
v5, verify only) before it writes the transaction's first batch, so a producer that
skipped AddPartitionsToTxn cannot open a transaction no marker ends; a marker written
while a batch is verified voids the verification (the guard); and for a transaction
version 2 client the leader has the coordinator add the partition (not verify only)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode

from odradek.client.aio import AsyncBrokerConnection
from odradek.records.builder import build_simple
from odradek.server.replication.partition import Partition
from tests.server.memory_cluster import MemoryCluster, with_cluster

TID = "verified"
VERSIONS = {0: (9, 12), 10: (4, 4), 22: (4, 4), 24: (3, 3), 26: (3, 5)}


async def connect(cluster: MemoryCluster, node_id: int) -> AsyncBrokerConnection:
    return await AsyncBrokerConnection.open(*cluster.address(node_id), client_id="test",
                                            timeout_s=30, versions=VERSIONS)


async def until_ok(conn: AsyncBrokerConnection, api_key: int, body: dict[str, Any],
                   code: Any) -> Any:
    """Ask until the answer's code is NONE (coordinators load a moment after their
    internal topic is made)."""
    for _ in range(200):
        answer = await conn.request(api_key, body)
        if int(code(answer)) == 0:
            return answer
        await asyncio.sleep(0.05)
    raise AssertionError(f"still refused: {answer}")


async def _verified_elsewhere(cluster: MemoryCluster) -> None:
    # One replica each (every broker leads one), which markers' acks=all accept.
    await cluster.create_topic("t", partitions=3, replication_factor=1,
                               configs={"min.insync.replicas": "1"})
    first = await connect(cluster, 1)
    found = await until_ok(first, 10, {"key_type": 1, "coordinator_keys": [TID]},
                           lambda a: a.coordinators[0].error_code)
    coordinator = found.coordinators[0].node_id
    txn = await connect(cluster, coordinator)
    ids = await until_ok(txn, 22, {"transactional_id": TID, "transaction_timeout": 60_000,
                                   "producer_id": -1, "producer_epoch": -1},
                         lambda a: a.error_code)
    pid, epoch = ids.producer_id, ids.producer_epoch
    partition = next(p for p in range(3) if cluster.leader("t", p) != coordinator)
    leader_id = cluster.leader("t", partition)
    leader = await connect(cluster, leader_id)

    async def produce(version: int, value: bytes, seq: int) -> int:
        batch = build_simple([value], producer_id=pid, producer_epoch=epoch,
                             base_sequence=seq, transactional=True)
        answer = await leader.request(0, {
            "transactional_id": TID, "acks": 1, "timeout": 10_000, "topic_data": [
                {"name": "t", "partition_data": [{"index": partition, "records": batch}]}]},
            version=version)
        return int(answer.responses[0].partition_responses[0].error_code)

    try:
        # Never added: the coordinator (another broker) says so, nothing is written.
        assert await produce(9, b"hanging", 0) == ErrorCode.invalid_txn_state
        assert await produce(11, b"hanging", 0) == ErrorCode.transaction_abortable
        log = cluster.brokers[leader_id].cluster.replicas.leaders[("t", partition)].log
        assert log.log_end_offset == 0 and log.producer_state.ongoing() == {}

        added = await txn.request(24, {
            "v3_and_below_transactional_id": TID, "v3_and_below_producer_id": pid,
            "v3_and_below_producer_epoch": epoch,
            "v3_and_below_topics": [{"name": "t", "partitions": [partition]}]})
        assert int(added.results_by_topic_v3_and_below[0].results_by_partition[0]
                   .partition_error_code) == 0
        assert await produce(9, b"first", 0) == 0
        assert await produce(9, b"second", 1) == 0  # open here now: not asked again
        ended = await txn.request(26, {"transactional_id": TID, "producer_id": pid,
                                       "producer_epoch": epoch, "committed": True},
                                  version=3)
        assert int(ended.error_code) == 0
        await cluster.wait_for(lambda: not log.producer_state.ongoing(),
                               "the commit marker on the partition")
        # The transaction is over: its producer may not write there without a new one
        # (NOT_ENOUGH_REPLICAS, retried, until the coordinator has completed it).
        for _ in range(200):
            code = await produce(11, b"late", 2)
            if code != ErrorCode.not_enough_replicas:
                break
            await asyncio.sleep(0.05)
        assert code == ErrorCode.transaction_abortable

        # Transaction version 2: Produce v12 has the coordinator add the partition.
        assert await produce(12, b"v2", 2) == 0
        ended = await txn.request(26, {"transactional_id": TID, "producer_id": pid,
                                       "producer_epoch": epoch, "committed": True},
                                  version=5)
        assert (ended.error_code, ended.producer_epoch) == (0, epoch + 1)
        await cluster.wait_for(lambda: not log.producer_state.ongoing(),
                               "the second commit marker")
        # The marker carried the bumped epoch: the partition fences the old one.
        assert log.producer_state.producers[pid].epoch == epoch + 1
    finally:
        for conn in (first, txn, leader):
            await conn.close()


def test_a_leader_verifies_a_transaction_with_its_coordinator_on_another_broker(
        tmp_path: Path) -> None:
    asyncio.run(with_cluster(tmp_path, _verified_elsewhere))


def test_a_marker_during_a_verification_voids_it(tmp_path: Path) -> None:
    """The guard: taken before the coordinator is asked, gone once a marker for the
    producer is written (its transaction ended meanwhile), shared by verifications of
    one producer."""

    async def body(cluster: MemoryCluster) -> None:
        await cluster.create_topic("g", replication_factor=1)
        leader = cluster.brokers[cluster.leader("g", 0)]
        assert leader.cluster is not None
        part: Partition = leader.cluster.replicas.leaders[("g", 0)]
        guard = part.begin_verification(7)
        assert part.begin_verification(7) is guard  # a second request shares it
        assert part.end_verification(7, guard)
        assert not part.end_verification(7, guard)  # released once
        guard = part.begin_verification(7)
        part.append_marker_as_leader(7, 0, True, 0)  # the transaction ended meanwhile
        assert not part.end_verification(7, guard)

    asyncio.run(with_cluster(tmp_path, body))


def test_write_txn_markers_v2_with_a_transaction_version_is_served(tmp_path: Path) -> None:
    """WriteTxnMarkers v2 (KIP-890: a transaction version per marker), as a Kafka 4
    coordinator sends it: the marker is written at the epoch it carries."""

    async def body(cluster: MemoryCluster) -> None:
        await cluster.create_topic("m", replication_factor=1,
                                   configs={"min.insync.replicas": "1"})
        leader_id = cluster.leader("m", 0)
        conn = await AsyncBrokerConnection.open(*cluster.address(leader_id), client_id="t",
                                                timeout_s=30, versions={27: (2, 2)})
        try:
            answer = await conn.request(27, {"markers": [{
                "producer_id": 4242, "producer_epoch": 3, "transaction_result": False,
                "topics": [{"name": "m", "partition_indexes": [0]}],
                "coordinator_epoch": 0, "transaction_version": 2}]})
        finally:
            await conn.close()
        assert [p.error_code for p in answer.markers[0].topics[0].partitions] == [0]
        log = cluster.brokers[leader_id].cluster.replicas.leaders[("m", 0)].log
        assert log.producer_state.producers[4242].epoch == 3

    asyncio.run(with_cluster(tmp_path, body))
