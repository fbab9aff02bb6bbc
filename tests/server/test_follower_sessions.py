"""A follower's fetch session on its leader (server/fetch_sessions.py, the fetch
handler): each fetch reads the partitions the request names and those that changed
since the last answer, not every partition the follower replicates, and loses nothing
by it: a change while the follower's fetch is away, records that did not fit in the last
answer, and what no change announces (the log start) all reach the follower.

In-process, on the fetch-from-follower tests' fake broker (real logs, Partitions and
ReplicaManager); the answers are decoded by kio as the follower does. The whole path
with three brokers: tests/server/test_memory_cluster.py and the cluster tiers."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kio.index import load_response_schema
from kio.serial import entity_reader

from odradek.protocol.codec import Request
from odradek.protocol.fetch import FetchPartition, FetchRequestBody, FetchTopic
from odradek.records.builder import build_simple
from odradek.server.cluster.node import ClusterNode
from odradek.server.handlers import fetch
from odradek.storage.log import FileRegion
from tests.server.test_fetch_from_follower import EPOCH, FakeBroker

FOLLOWER = 2
TOPIC = "wide"
PARTITIONS = 12
TopicPartition = tuple[str, int]


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[FakeBroker]:
    b = FakeBroker(tmp_path, "")
    for p in range(PARTITIONS):
        b.host((TOPIC, p), leader=True, records=4, hw=4)
    b.reads = []  # type: ignore[attr-defined]

    def recording_read(*args: Any) -> Any:
        b.reads.append(sorted(w[1] for w in args[1]))  # type: ignore[attr-defined]
        return ClusterNode.read_for_follower(b.cluster, *args)  # type: ignore[arg-type]

    b.cluster.read_for_follower = recording_read  # type: ignore[method-assign]
    yield b
    for part in b.cluster.replicas.partitions.values():
        part.log.close()


def follower_fetch(offsets: dict[int, int], *, session_id: int = 0, epoch: int = 0,
                   max_wait: int = 0, max_bytes: int = 1 << 20) -> Request:
    body = FetchRequestBody(
        FOLLOWER, max_wait, 1, max_bytes, 0, session_id, epoch,
        [FetchTopic(TOPIC, [FetchPartition(p, EPOCH, offset, EPOCH, 0, 1 << 20)
                            for p, offset in offsets.items()])] if offsets else [],
        [], "")
    return Request(1, 12, 7, "broker-2-fetcher-0", body)


def decode(parts: list[bytes | FileRegion]) -> Any:
    frame = b"".join(p.read() if isinstance(p, FileRegion) else p for p in parts)
    schema = load_response_schema(1, 12)
    _, used = entity_reader(schema.__header_schema__)(frame, 4)
    body, _ = entity_reader(schema)(frame, 4 + used)
    return body


def answered(body: Any) -> dict[int, bytes]:
    """partition -> records sent (b"" for a partition answered without records)."""
    return {p.partition_index: bytes(p.records or b"")
            for t in body.responses for p in t.partitions}


def now(broker: FakeBroker, req: Request) -> Any:
    response = fetch.handle_now(broker, req)  # type: ignore[arg-type]
    assert isinstance(response, list), "answered at once"
    return decode(response)


def append(broker: FakeBroker, partition: int, value: bytes) -> None:
    part = broker.cluster.replicas.leaders[(TOPIC, partition)]
    part.append_as_leader(build_simple([value]), require_min_isr=False)


def open_session(broker: FakeBroker) -> int:
    first = now(broker, follower_fetch({p: 4 for p in range(PARTITIONS)}))
    assert first.session_id > 0
    assert len(answered(first)) == PARTITIONS  # a full fetch answers for all
    return first.session_id


def test_a_parked_follower_fetch_reads_only_the_partition_appended_to(broker) -> None:
    session_id = open_session(broker)
    broker.reads.clear()

    async def run() -> Any:
        delayed = fetch.handle_now(broker, follower_fetch(  # type: ignore[arg-type]
            {}, session_id=session_id, epoch=1, max_wait=30_000))
        assert isinstance(delayed, fetch._DelayedFetch), "nothing new: it waits"
        append(broker, 7, b"seven")
        return decode(await asyncio.wait_for(delayed, 5))

    body = asyncio.run(run())
    assert list(answered(body)) == [7]
    assert b"seven" in answered(body)[7]
    # The request named nothing (nothing read); the wake-up read the one partition
    # appended to.
    assert broker.reads == [[7]]


def test_a_change_while_the_followers_fetch_is_away_is_in_its_next_answer(broker) -> None:
    session_id = open_session(broker)
    append(broker, 3, b"while away")  # no fetch parked: nobody to wake
    broker.reads.clear()
    body = now(broker, follower_fetch({}, session_id=session_id, epoch=1))
    assert b"while away" in answered(body)[3]
    assert broker.reads == [[3]]
    # Answered: not read again until something changes (or the follower names it).
    broker.reads.clear()
    now(broker, follower_fetch({3: 5}, session_id=session_id, epoch=2))
    now(broker, follower_fetch({}, session_id=session_id, epoch=3))
    assert broker.reads == [[3]]


def test_records_that_did_not_fit_go_in_the_next_answer(broker) -> None:
    session_id = open_session(broker)
    append(broker, 1, b"first")
    append(broker, 2, b"second")
    # Room for one batch: partition 1's (the first with data always gets one).
    body = now(broker, follower_fetch({}, session_id=session_id, epoch=1, max_bytes=1))
    sent = answered(body)
    assert b"first" in sent[1] and not sent.get(2)
    # The follower names partition 1 (its offset moved); partition 2 comes too.
    body = now(broker, follower_fetch({1: 5}, session_id=session_id, epoch=2))
    assert b"second" in answered(body)[2]


def test_the_whole_session_is_read_every_sweep(broker) -> None:
    session_id = open_session(broker)
    leader = broker.cluster.replicas.leaders[(TOPIC, 9)]
    leader.log.delete_records_before(2)  # no notification: only a sweep sees it
    broker.reads.clear()
    now(broker, follower_fetch({}, session_id=session_id, epoch=1))
    assert broker.reads == []
    broker.fetch_sweep_s = 0.0  # due now
    body = now(broker, follower_fetch({}, session_id=session_id, epoch=2))
    assert broker.reads[-1] == list(range(PARTITIONS))
    # Only what changed is in the (incremental) answer: the new log start.
    (topic,) = body.responses
    assert [(p.partition_index, p.log_start_offset) for p in topic.partitions] == [(9, 2)]


def test_a_closed_session_stops_following_its_partitions(broker) -> None:
    session_id = open_session(broker)
    assert broker.purgatory._interests  # the session follows its partitions
    now(broker, follower_fetch({}, session_id=session_id, epoch=-1))  # final: closes it
    assert not broker.purgatory._interests
    assert session_id not in broker.fetch_sessions.sessions


def test_a_high_watermark_move_reaches_a_parked_fetch_with_its_next_wake_up(broker) -> None:
    """A new high watermark gives a follower nothing to send, so it does not wake the
    follower's parked fetch (Kafka's DelayedFetch counts bytes only); the append that
    does wake it rereads those partitions too, and the answer carries their new high
    watermarks."""
    for p in (1, 2, 3):  # the other followers have not acknowledged the last records
        broker.cluster.replicas.leaders[(TOPIC, p)].log.set_high_watermark(2)
    session_id = open_session(broker)

    async def run() -> Any:
        delayed = fetch.handle_now(broker, follower_fetch(  # type: ignore[arg-type]
            {}, session_id=session_id, epoch=1, max_wait=30_000))
        assert isinstance(delayed, fetch._DelayedFetch)
        for p in (1, 2, 3):  # high watermarks move, as Partition moves them
            part = broker.cluster.replicas.leaders[(TOPIC, p)]
            part.log.set_high_watermark(4)
            broker.purgatory.notify((TOPIC, p), interests_too=False)
            await asyncio.sleep(0)
        assert not delayed.future.done()
        assert broker.reads == []  # not woken: nothing read
        append(broker, 4, b"four")
        return decode(await asyncio.wait_for(delayed, 5))

    broker.reads.clear()
    body = asyncio.run(run())
    # One wake-up, one read: what changed since the fetch parked.
    assert broker.reads == [[1, 2, 3, 4]]
    # The answer has partition 4's records and the others' new high watermarks.
    sent = {p.partition_index: p for t in body.responses for p in t.partitions}
    assert sorted(sent) == [1, 2, 3, 4]
    assert [sent[p].high_watermark for p in (1, 2, 3)] == [4, 4, 4]
    assert b"four" in bytes(sent[4].records)


def test_parked_follower_fetches_expire_on_the_sessions_timer(broker) -> None:
    """Each parked fetch of an idle follower is answered when its max wait runs out,
    the session's one timer setting itself again for a later fetch and earlier for a
    fetch that waits less."""
    session_id = open_session(broker)

    async def run() -> list[float]:
        loop = asyncio.get_running_loop()
        waited = []
        for epoch, max_wait in enumerate([300, 300, 30_000, 50], start=1):
            t0 = loop.time()
            delayed = fetch.handle_now(broker, follower_fetch(  # type: ignore[arg-type]
                {}, session_id=session_id, epoch=epoch, max_wait=max_wait))
            assert isinstance(delayed, fetch._DelayedFetch)
            if max_wait == 30_000:  # answered by an append long before it expires
                append(broker, 5, b"five")
            body = decode(await asyncio.wait_for(delayed, 5))
            waited.append(loop.time() - t0)
            if max_wait == 30_000:
                assert list(answered(body)) == [5]
            else:
                assert answered(body) == {}  # nothing new: an empty answer
        return waited

    waited = asyncio.run(run())
    # Not a speed check: each expiring fetch waited its max wait, give or take the
    # timer's slack (EXPIRY_SLACK_S and the clock's resolution); on the 30 s timer left
    # from the third fetch the fourth would still be parked when wait_for ends.
    assert waited[0] >= 0.29 and waited[1] >= 0.29 and waited[3] >= 0.04
    assert waited[3] < 5
