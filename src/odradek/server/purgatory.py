"""Delayed fetches (Kafka's fetch purgatory): a fetch that has less than ``min_bytes``
waits until an append to one of its partitions wakes it, or its ``max_wait`` passes.

Woken by appends, never by polling timers: an append calls ``notify`` for its partition,
which asks each fetch watching it to try again at once (``try_complete``), as Kafka's
``DelayedFetch.tryComplete`` runs on the thread that appended. A fetch that still lacks
bytes watches again; one that has them answers.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

TopicPartition = tuple[str, int]


class Waiter(Protocol):
    def try_complete(self) -> None:
        """Called after an append to a watched partition (on the event loop's thread)."""


class FetchPurgatory:
    def __init__(self) -> None:
        self._waiters: dict[TopicPartition, set[Waiter]] = {}

    def notify(self, tp: TopicPartition) -> None:
        waiters = self._waiters.pop(tp, None)
        if waiters:
            for waiter in waiters:
                waiter.try_complete()

    def watch(self, partitions: Iterable[TopicPartition], waiter: Waiter) -> None:
        """Have ``notify`` of any of ``partitions`` call ``waiter.try_complete`` (once:
        a waiter that goes on waiting watches again)."""
        for tp in partitions:
            self._waiters.setdefault(tp, set()).add(waiter)

    def unwatch(self, partitions: Iterable[TopicPartition], waiter: Waiter) -> None:
        for tp in partitions:
            waiters = self._waiters.get(tp)
            if waiters is not None:
                waiters.discard(waiter)
                if not waiters:
                    del self._waiters[tp]

    def size(self) -> int:
        """Fetches waiting (Kafka's Fetch purgatory size)."""
        return len({id(w) for waiters in self._waiters.values() for w in waiters})

    def wake_all(self) -> None:
        """Wake every waiting fetch (at shutdown: they answer with what they have)."""
        for tp in list(self._waiters):
            self.notify(tp)
