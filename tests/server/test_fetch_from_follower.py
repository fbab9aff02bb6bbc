"""Fetch from follower (KIP-392) in the Fetch handler, in-process: a leader's
preferred_read_replica answers and a follower's consumer reads, with Kafka's rules
(ReplicaManager.readFromLog / findPreferredReadReplica, Partition.localLogWithEpochOrThrow).

The broker around the handler is a fake with real logs, real Partitions and a real
ReplicaManager (not started: no store, no fetchers); the answers are decoded by kio as
a client would. Real processes and librdkafka:
tests/faults/test_fetch_from_follower.py."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kio.index import load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader

from odradek.cluster.replica_selector import RACK_AWARE_SELECTOR
from odradek.cluster.replication import LeaderReplication, Role
from odradek.cluster.state import BrokerInfo
from odradek.protocol.codec import Request
from odradek.protocol.fetch import FetchPartition, FetchRequestBody, FetchTopic
from odradek.records.builder import build_simple, decode_batches
from odradek.server.cluster.node import ClusterNode
from odradek.server.config import load_config
from odradek.server.fetch_sessions import FetchSessionCache
from odradek.server.handlers import fetch
from odradek.server.replication.partition import Partition
from odradek.server.replication.purgatory import Purgatory
from odradek.server.replication.replica_manager import ReplicaManager
from odradek.storage import Log
from odradek.storage.log import FileRegion, wall_clock_ms

EPOCH = 5
LED, FOLLOWED, ELSEWHERE = ("led", 0), ("followed", 0), ("elsewhere", 0)


class FakeMetadata:
    def __init__(self) -> None:
        self.brokers = {n: BrokerInfo(n, "127.0.0.1", 9000 + n, f"rack-{n}") for n in (1, 2, 3)}
        self.shutting_down: set[int] = set()

    def partition_exists(self, topic: str, partition: int) -> bool:
        return topic in ("led", "followed", "elsewhere") and partition == 0


class FakeCluster:
    """What a ReplicaManager asks of its cluster node."""

    def __init__(self, broker: FakeBroker) -> None:
        self.broker = broker
        self.config = broker.config
        self.node_id = 1
        self.metadata = FakeMetadata()
        self.replicas = ReplicaManager(self)  # type: ignore[arg-type]

    # What the fetch handler asks of the broker's topology: ClusterNode's own answers,
    # which hand the question to the replica manager.
    read_for_follower = ClusterNode.read_for_follower
    following = ClusterNode.following
    epoch_refusals = ClusterNode.epoch_refusals
    preferred_read_replicas = ClusterNode.preferred_read_replicas


class FakeBroker:
    def __init__(self, root: Path, selector: str) -> None:
        self.config = load_config(listen="127.0.0.1:0", data_dir=str(root), environ={},
                                  overrides={"broker.rack": "rack-1",
                                             "replica.selector.class": selector})
        self.clock = wall_clock_ms
        self.stopping = False
        self.purgatory = Purgatory()
        self.fetch_sessions = FetchSessionCache(self.purgatory)
        self.fetch_sweep_s = 1.0
        self.cluster = FakeCluster(self)
        self.topology = self.cluster
        self.authorizer = None  # no ACLs: every request allowed
        self.quotas = None  # no client quotas
        self.stats = None  # no metrics
        self.root = root

    def get_log(self, topic: str, partition: int) -> Log | None:
        part = self.cluster.replicas.leaders.get((topic, partition))
        return part.log if part is not None else None

    def missing_partition_error(self, topic: str, partition: int) -> int:
        return ErrorCode.not_leader_or_follower if self.cluster.metadata.partition_exists(
            topic, partition) else 3

    def host(self, tp: tuple[str, int], *, leader: bool, records: int, hw: int
             ) -> Partition:
        lg = Log.open(str(self.root / f"{tp[0]}-{tp[1]}"), replicated=True)
        for i in range(records):
            lg.append(build_simple([b"r%d" % i]))
        lg.set_high_watermark(hw)
        replicas = self.cluster.replicas
        part = Partition(tp, lg, fetches=self.purgatory, produces=replicas.produce_purgatory)
        part.replicas = (1, 2, 3)
        part.leader_epoch = EPOCH
        if leader:
            part.role, part.leader_id = Role.LEADER, 1
            part.repl = LeaderReplication(1, (1, 2, 3), (1, 2, 3), EPOCH, epoch_start_offset=0,
                                          high_watermark=hw, now_ms=self.clock())
            self.cluster.replicas.leaders[tp] = part
        else:
            part.role, part.leader_id = Role.FOLLOWER, 2
        self.cluster.replicas.partitions[tp] = part
        return part


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[FakeBroker]:
    b = FakeBroker(tmp_path, RACK_AWARE_SELECTOR)
    b.host(LED, leader=True, records=10, hw=10)
    b.host(FOLLOWED, leader=False, records=10, hw=6)
    yield b
    for part in b.cluster.replicas.partitions.values():
        part.log.close()


def request(tp: tuple[str, int], offset: int, *, version: int = 12, rack: str = "",
            epoch: int = -1, isolation: int = 0, max_wait: int = 0, min_bytes: int = 1
            ) -> Request:
    body = FetchRequestBody(-1, max_wait, min_bytes, 1 << 20, isolation, 0, -1,
                            [FetchTopic(tp[0], [FetchPartition(tp[1], epoch, offset, -1, -1,
                                                               1 << 20)])], [], rack)
    return Request(1, version, 7, "test", body)


def decode(version: int, parts: list[bytes | FileRegion]) -> Any:
    frame = b"".join(p.read() if isinstance(p, FileRegion) else p for p in parts)
    schema = load_response_schema(1, version)
    _, used = entity_reader(schema.__header_schema__)(frame, 4)
    body, _ = entity_reader(schema)(frame, 4 + used)
    (topic,) = body.responses
    (answer,) = topic.partitions
    return answer


def fetch_now(broker: FakeBroker, req: Request) -> Any:
    response = fetch.handle_now(broker, req)  # type: ignore[arg-type]
    assert isinstance(response, list), "answered at once"
    return decode(req.api_version, response)


def offsets(answer: Any) -> list[int]:
    return [b.header.base_offset for b in decode_batches(bytes(answer.records or b""))]


# --- on a follower ---------------------------------------------------------------------


def test_a_follower_serves_consumers_up_to_the_high_watermark_it_knows(broker) -> None:
    answer = fetch_now(broker, request(FOLLOWED, 0))
    assert answer.error_code == 0
    assert offsets(answer) == [0, 1, 2, 3, 4, 5]  # not 6..9: not known committed here
    assert (answer.high_watermark, answer.last_stable_offset) == (6, 6)
    assert answer.preferred_read_replica == -1
    # Between its high watermark and log end: nothing yet, no error (Kafka's LocalLog.read).
    answer = fetch_now(broker, request(FOLLOWED, 8))
    assert (answer.error_code, answer.records) == (0, b"")
    # Past its log end (the consumer read further at the leader): out of range, and the
    # client goes back to the leader.
    assert fetch_now(broker, request(FOLLOWED, 11)).error_code == ErrorCode.offset_out_of_range


def test_a_follower_checks_the_leader_epoch_it_knows(broker) -> None:
    assert fetch_now(broker, request(FOLLOWED, 0, epoch=EPOCH)).error_code == 0
    assert fetch_now(broker, request(FOLLOWED, 0, epoch=EPOCH - 1)).error_code == \
        ErrorCode.fenced_leader_epoch
    assert fetch_now(broker, request(FOLLOWED, 0, epoch=EPOCH + 1)).error_code == \
        ErrorCode.unknown_leader_epoch


def test_fetches_before_v11_and_partitions_not_replicated_here_are_refused(broker) -> None:
    # Fetch v10 carries no client metadata: leader only, as Kafka's fetchOnlyLeader says.
    assert fetch_now(broker, request(FOLLOWED, 0, version=10)).error_code == \
        ErrorCode.not_leader_or_follower
    assert fetch_now(broker, request(ELSEWHERE, 0)).error_code == ErrorCode.not_leader_or_follower
    # A replica with no role here (offline, or an old leadership) serves nobody.
    broker.cluster.replicas.partitions[FOLLOWED].role = Role.NONE
    assert fetch_now(broker, request(FOLLOWED, 0)).error_code == ErrorCode.not_leader_or_follower


def test_a_waiting_consumer_on_a_follower_wakes_when_its_high_watermark_moves(broker) -> None:
    async def run() -> Any:
        req = request(FOLLOWED, 6, max_wait=30_000)
        delayed = fetch.handle_now(broker, req)  # type: ignore[arg-type]
        assert isinstance(delayed, fetch._DelayedFetch), "nothing to read yet: it waits"
        lg = broker.cluster.replicas.partitions[FOLLOWED].log
        # The leader's answer: no new records, a high watermark of 8.
        broker.cluster.replicas.partitions[FOLLOWED].append_as_follower(
            lg.log_end_offset, None, 8, 0)
        return decode(req.api_version, await asyncio.wait_for(delayed, 5))

    answer = asyncio.run(run())
    assert answer.error_code == 0
    assert offsets(answer) == [6, 7]
    assert answer.high_watermark == 8


# --- on the leader ---------------------------------------------------------------------


def caught_up(broker: FakeBroker, replica: int, end: int = 10) -> None:
    state = broker.cluster.replicas.leaders[LED].repl.followers[replica]
    state.log_end_offset, state.last_caught_up_ms = end, broker.clock()


def test_the_leader_sends_a_consumer_to_a_follower_in_its_rack_at_once(broker) -> None:
    caught_up(broker, 2)
    caught_up(broker, 3)
    # min_bytes beyond anything there and a long wait: still answered at once.
    req = request(LED, 0, rack="rack-3", max_wait=30_000, min_bytes=1 << 20)
    response = fetch.handle_now(broker, req)  # type: ignore[arg-type]
    assert isinstance(response, list)
    answer = decode(12, response)
    assert (answer.error_code, answer.preferred_read_replica, answer.records) == (0, 3, b"")
    assert (answer.high_watermark, answer.log_start_offset) == (10, 0)


def test_the_leader_serves_consumers_in_its_rack_without_one_or_with_nobody_eligible(
        broker) -> None:
    caught_up(broker, 2)
    for rack in ("", "rack-1", "rack-9"):
        answer = fetch_now(broker, request(LED, 0, rack=rack))
        assert (answer.preferred_read_replica, offsets(answer)) == (-1, list(range(10)))
    # Broker 3 has not fetched offset 5 yet (its log ends at 4): the leader serves.
    caught_up(broker, 3, end=4)
    assert fetch_now(broker, request(LED, 5, rack="rack-3")).preferred_read_replica == -1
    # Broker 2 is dead (not registered): the leader serves.
    del broker.cluster.metadata.brokers[2]
    assert fetch_now(broker, request(LED, 0, rack="rack-2")).preferred_read_replica == -1


def test_an_epoch_error_wins_over_a_preferred_replica(broker) -> None:
    caught_up(broker, 2)
    answer = fetch_now(broker, request(LED, 0, rack="rack-2", epoch=EPOCH - 1))
    assert (answer.error_code, answer.preferred_read_replica) == (ErrorCode.fenced_leader_epoch, -1)


def test_without_a_selector_the_leader_always_serves(tmp_path) -> None:
    b = FakeBroker(tmp_path, "")
    b.host(LED, leader=True, records=3, hw=3)
    caught_up(b, 2, end=3)
    try:
        answer = fetch_now(b, request(LED, 0, rack="rack-2"))
        assert (answer.preferred_read_replica, offsets(answer)) == (-1, [0, 1, 2])
    finally:
        b.cluster.replicas.leaders[LED].log.close()


def test_with_acls_fetches_need_read_and_replication_needs_cluster_action(broker) -> None:
    """The authorizer on and no ACL: a consumer's fetch is refused for the topic it may not
    READ, a follower's (replica id 2) for want of CLUSTER_ACTION - answered at once, nothing
    read; a super user passes both."""
    from odradek.server.network.session import Session
    from odradek.server.security.authorizer import Authorizer
    from odradek.server.security.documents import FileDocument

    broker.authorizer = Authorizer(load_config(environ={}, overrides={
        "authorizer.class.name": "x", "super.users": "User:broker"}),
        FileDocument(str(broker.root), "acls"))
    listener = broker.config.listeners[0]

    def as_(principal: str, replica_id: int) -> Request:
        req = request(LED, 0)
        return req._replace(body=req.body._replace(replica_id=replica_id),
                            session=Session(listener, "127.0.0.1", principal))

    for replica_id in (-1, 2):
        refused = fetch_now(broker, as_("User:alice", replica_id))
        assert refused.error_code == ErrorCode.topic_authorization_failed and not refused.records
    served = fetch_now(broker, as_("User:broker", -1))
    assert (served.error_code, offsets(served)) == (0, list(range(10)))
