"""The purgatory's wake-ups (server/replication/purgatory.py): immediate for the produce
purgatory, coalesced per event-loop step for the fetch purgatory, so a follower's parked
fetch answers once for appends that arrived together."""

from __future__ import annotations

import asyncio

from odradek.server.replication.purgatory import Purgatory

TopicPartition = tuple[str, int]


class Recorder:
    def __init__(self) -> None:
        self.woken: list[TopicPartition] = []

    def try_complete(self, tp: TopicPartition) -> None:
        self.woken.append(tp)


def test_an_immediate_purgatory_wakes_its_waiter_in_the_notifying_call() -> None:
    purgatory = Purgatory()
    waiter = Recorder()
    purgatory.watch([("t", 0)], waiter)
    purgatory.notify(("t", 0))
    assert waiter.woken == [("t", 0)]
    purgatory.notify(("t", 0))  # woken once: it watches again if it goes on waiting
    assert waiter.woken == [("t", 0)]


def test_a_coalescing_purgatory_wakes_once_per_partition_at_the_next_loop_step() -> None:
    async def body() -> None:
        purgatory = Purgatory(coalesce=True)
        waiter = Recorder()
        purgatory.watch([("t", 0), ("t", 1)], waiter)
        for tp in [("t", 0), ("t", 1), ("t", 0), ("u", 0)]:  # ("u", 0): nobody waits
            purgatory.notify(tp)
        assert waiter.woken == []  # not inside the appender's call
        await asyncio.sleep(0)
        assert waiter.woken == [("t", 0), ("t", 1)]  # each once, in order
        await asyncio.sleep(0)
        assert waiter.woken == [("t", 0), ("t", 1)]
        assert purgatory.size() == 0

    asyncio.run(body())


def test_a_coalescing_purgatory_without_a_running_loop_wakes_at_once() -> None:
    purgatory = Purgatory(coalesce=True)
    waiter = Recorder()
    purgatory.watch([("t", 0)], waiter)
    purgatory.notify(("t", 0))
    assert waiter.woken == [("t", 0)]


def test_waking_everyone_at_shutdown_drops_the_pending_step() -> None:
    async def body() -> None:
        purgatory = Purgatory(coalesce=True)
        waiter = Recorder()
        purgatory.watch([("t", 0)], waiter)
        purgatory.notify(("t", 0))
        purgatory.wake_all()
        assert waiter.woken == [("t", 0)]
        await asyncio.sleep(0)
        assert waiter.woken == [("t", 0)]

    asyncio.run(body())


class Session(Recorder):
    """A follower's fetch session as the purgatory sees it: a standing interest with a
    parked fetch."""

    waiting = True

    def __init__(self) -> None:
        super().__init__()
        self.touched: list[TopicPartition] = []

    def touch(self, tp: TopicPartition) -> None:
        self.touched.append(tp)


def test_a_high_watermark_move_touches_a_follower_session_without_waking_its_fetch() -> None:
    """A consumer's fetch waiting on the partition wakes (it may read further now); a
    follower's parked fetch waits for bytes, as Kafka's DelayedFetch does, and only
    learns the partition changed (its next read covers it). An append in the same
    loop step still wakes it."""
    async def body() -> None:
        purgatory = Purgatory(coalesce=True)
        consumer, follower = Recorder(), Session()
        tp = ("t", 0)
        purgatory.watch([tp], consumer)
        purgatory.follow([tp], follower)
        purgatory.notify(tp, interests_too=False)
        assert follower.touched == [tp]
        await asyncio.sleep(0)
        assert consumer.woken == [tp] and follower.woken == []

        purgatory.notify(tp, interests_too=False)  # nobody but the session: no wake-up
        await asyncio.sleep(0)
        assert follower.touched == [tp, tp] and follower.woken == []

        purgatory.notify(tp)  # an append, then the high watermark, in one step
        purgatory.notify(tp, interests_too=False)
        await asyncio.sleep(0)
        assert follower.woken == [tp]

    asyncio.run(body())
