"""Delayed fetches (Kafka's fetch purgatory): a fetch that has less than ``min_bytes``
waits until an append to one of its partitions wakes it, or its ``max_wait`` passes.

Woken by appends, never by polling timers: an append calls ``notify`` for its partition,
which completes the futures of the fetches waiting on it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

TopicPartition = tuple[str, int]


class FetchPurgatory:
    def __init__(self) -> None:
        self._waiters: dict[TopicPartition, set[asyncio.Future[None]]] = {}

    def notify(self, tp: TopicPartition) -> None:
        waiters = self._waiters.pop(tp, None)
        if waiters:
            for fut in waiters:
                if not fut.done():
                    fut.set_result(None)

    async def wait(self, partitions: Iterable[TopicPartition], timeout_s: float) -> bool:
        """Wait for an append to any of ``partitions``; False if the time ran out."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        tps = list(partitions)
        for tp in tps:
            self._waiters.setdefault(tp, set()).add(fut)
        try:
            async with asyncio.timeout(timeout_s):
                await fut
            return True
        except TimeoutError:
            return False
        finally:
            for tp in tps:
                waiters = self._waiters.get(tp)
                if waiters is not None:
                    waiters.discard(fut)
                    if not waiters:
                        del self._waiters[tp]

    def wake_all(self) -> None:
        """Complete every waiting fetch (at shutdown: they answer with what they have)."""
        for tp in list(self._waiters):
            self.notify(tp)
