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
