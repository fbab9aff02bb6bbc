"""Delayed operations (Kafka's ``DelayedOperationPurgatory``): requests that wait for
something to happen to their partitions, woken by that event, never by polling.

One class, two instances on a broker: the fetch purgatory (long polls with less than
``min_bytes``, woken by appends and high-watermark moves) and the produce purgatory
(acks=all appends, woken by high-watermark moves and by leadership ending). Whoever
changes a partition calls ``notify``, which asks each operation watching it to try again
at once (``try_complete``), on the thread that made the change, as Kafka's
``checkAndComplete`` does; one that still waits watches again, one that is done
answers.

``DelayedProduce`` (Kafka's) is here: the produce purgatory's operation. The fetch
purgatory's is the fetch handler's ``_DelayedFetch``, which builds the fetch's answer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Generator, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from kio.schema.errors import ErrorCode

if TYPE_CHECKING:
    from odradek.server.replication.partition import Partition

TopicPartition = tuple[str, int]


class Waiter(Protocol):
    def try_complete(self, tp: TopicPartition) -> None:
        """Called after a change to the watched partition ``tp`` (on the event loop)."""


class Interest(Protocol):
    """A standing interest in partitions (a follower's fetch session): told of every
    change at once, and woken like a waiter, but never dropped by a wake-up."""

    @property
    def waiting(self) -> bool:
        """A fetch of it is parked (counted by ``Purgatory.size``)."""

    def touch(self, tp: TopicPartition) -> None:
        """``tp`` changed (called inside ``notify``: cheap, no answer from here)."""

    def try_complete(self, tp: TopicPartition) -> None:
        """As ``Waiter.try_complete``, after ``touch``."""


class Purgatory:
    """Operations waiting for their partitions, by partition.

    With ``coalesce`` (the fetch purgatory), ``notify`` on the event loop does not wake
    the watchers at once: it notes the partition and wakes them all in one callback at
    the loop's next step, after the rest of what this step reads (every request that
    arrived together). A follower's parked fetch then answers once for all the
    partitions appended meanwhile instead of once per Produce request: under load that
    is one answer, one follower append and one fetch back for many appends. Idle, it
    costs one loop step (microseconds).

    Besides one-shot waiters it keeps standing interests (``follow``): a follower's
    fetch session, which learns in ``notify`` itself which of its partitions changed,
    so that its next fetch reads those and not every partition it replicates."""

    def __init__(self, *, coalesce: bool = False) -> None:
        self._waiters: dict[TopicPartition, set[Waiter]] = {}
        self._interests: dict[TopicPartition, set[Interest]] = {}
        self._coalesce = coalesce
        # Notified, not woken yet (in order), and whether standing interests wake too.
        self._due: dict[TopicPartition, bool] = {}

    def notify(self, tp: TopicPartition, *, interests_too: bool = True) -> None:
        """``tp`` changed: its waiters try again, and its standing interests are touched
        and, with ``interests_too``, woken as well. A high-watermark move passes False:
        a follower's parked fetch waits for bytes (Kafka's DelayedFetch counts only
        bytes, so a new high watermark alone never answers it), and the partition,
        touched, is read again with whatever wakes that fetch next; waking it just to
        reread the partition cost the leader two follower reads per acks=all produce."""
        interests = self._interests.get(tp)
        if interests:
            for interest in interests:
                interest.touch(tp)
        if tp not in self._waiters and not (interests and interests_too):
            return  # nobody to wake
        if self._coalesce:
            due = self._due
            if not due:
                try:
                    asyncio.get_running_loop().call_soon(self._wake_due)
                except RuntimeError:  # no loop (a synchronous caller): wake now
                    self._wake(tp, interests_too)
                    return
            due[tp] = interests_too or due.get(tp, False)
            return
        self._wake(tp, interests_too)

    def _wake_due(self) -> None:
        due, self._due = self._due, {}
        for tp, interests_too in due.items():
            self._wake(tp, interests_too)

    def _wake(self, tp: TopicPartition, interests_too: bool = True) -> None:
        waiters = self._waiters.pop(tp, None)
        if waiters:
            for waiter in waiters:
                waiter.try_complete(tp)
        interests = self._interests.get(tp) if interests_too else None
        if interests:
            for interest in list(interests):
                if interest.waiting:
                    interest.try_complete(tp)

    def watch(self, partitions: Iterable[TopicPartition], waiter: Waiter) -> None:
        """Have ``notify`` of any of ``partitions`` call ``waiter.try_complete`` (once:
        a waiter that goes on waiting watches again)."""
        _add(self._waiters, partitions, waiter)

    def unwatch(self, partitions: Iterable[TopicPartition], waiter: Waiter) -> None:
        _remove(self._waiters, partitions, waiter)

    def follow(self, partitions: Iterable[TopicPartition], interest: Interest) -> None:
        """Have every ``notify`` of ``partitions`` touch ``interest`` until ``unfollow``."""
        _add(self._interests, partitions, interest)

    def unfollow(self, partitions: Iterable[TopicPartition], interest: Interest) -> None:
        _remove(self._interests, partitions, interest)

    def size(self) -> int:
        """Operations waiting (Kafka's PurgatorySize)."""
        waiting = {id(w) for waiters in self._waiters.values() for w in waiters}
        waiting.update(id(i) for interests in self._interests.values() for i in interests
                       if i.waiting)
        return len(waiting)

    def wake_all(self) -> None:
        """Wake every waiting operation (at shutdown: each answers what it can)."""
        self._due = {}
        for tp in list(self._waiters):
            self._wake(tp)
        for tp in list(self._interests):
            self._wake(tp)


def _add(index: dict[TopicPartition, set[Any]], partitions: Iterable[TopicPartition],
         item: object) -> None:
    for tp in partitions:
        index.setdefault(tp, set()).add(item)


def _remove(index: dict[TopicPartition, set[Any]], partitions: Iterable[TopicPartition],
            item: object) -> None:
    for tp in partitions:
        items = index.get(tp)
        if items is not None:
            items.discard(item)
            if not items:
                del index[tp]


PENDING = -1


class DelayedProduce:
    """An acks=all produce's appended partitions, waiting until each partition's high
    watermark passes what was appended there (Kafka's ``DelayedProduce``). Awaitable for
    the Kafka error code of each, in the order given:

    - NONE once the high watermark passed it with at least ``min.insync.replicas`` in
      the ISR; NOT_ENOUGH_REPLICAS_AFTER_APPEND if the ISR had shrunk below that;
    - NOT_LEADER_OR_FOLLOWER once this broker is not its leader (or is stopping: the
      client retries elsewhere rather than hold the stop up until its timeout);
    - REQUEST_TIMED_OUT for what is still waiting when ``timeout_s`` runs out (None: no
      limit, for the broker's own writes, which answer on their own timers).

    Each wake-up checks only the partition that changed: a request to many partitions
    costs one check per high-watermark move, not one per partition it names."""

    __slots__ = ("codes", "future", "pending", "purgatory", "settled", "timer")

    def __init__(self, purgatory: Purgatory, waits: Sequence[tuple[Partition, int]],
                 timeout_s: float | None) -> None:
        self.purgatory = purgatory
        self.codes = [PENDING] * len(waits)
        # partition -> [(index in codes, offset the high watermark must reach), ...]
        self.pending: dict[TopicPartition, tuple[Partition, list[tuple[int, int]]]] = {}
        for i, (part, end) in enumerate(waits):
            entry = self.pending.get(part.tp)
            if entry is None:
                self.pending[part.tp] = (part, [(i, end)])
            else:
                entry[1].append((i, end))
        for tp in list(self.pending):
            self._check(tp)
        # Settled at once (an ISR of one, or followers already there): no future, no
        # timer, nothing watched.
        self.future: asyncio.Future[list[int]] | None = None
        self.timer: asyncio.TimerHandle | None = None
        # Called with the codes in the call that settles the last wait (the follower's
        # fetch that moves the high watermark, or the timeout), besides the future.
        self.settled: Callable[[list[int]], None] | None = None
        if self.pending:
            loop = asyncio.get_running_loop()
            self.future = loop.create_future()
            purgatory.watch(self.pending, self)
            if timeout_s is not None:
                self.timer = loop.call_later(max(timeout_s, 0.0), self._expire)

    @property
    def done(self) -> bool:
        """Every wait settled: ``codes`` is the answer."""
        return self.future is None or self.future.done()

    def __await__(self) -> Generator[Any, None, list[int]]:
        if self.future is None:
            return self.codes
        return (yield from self.future.__await__())

    def _check(self, tp: TopicPartition) -> None:
        """Settle what can be settled of ``tp``'s waits now (``Partition.acked``)."""
        part, waits = self.pending[tp]
        left = []
        codes = self.codes
        for i, end in waits:
            code = part.acked(end)
            if code is None:
                left.append((i, end))
            else:
                codes[i] = code
        if left:
            self.pending[tp] = (part, left)
        else:
            del self.pending[tp]

    def try_complete(self, tp: TopicPartition) -> None:
        future = self.future
        if future is None or future.done() or tp not in self.pending:
            return
        self._check(tp)
        if tp in self.pending:
            self.purgatory.watch((tp,), self)
        elif not self.pending:
            if self.timer is not None:
                self.timer.cancel()
            future.set_result(self.codes)
            self._settle()

    def _expire(self) -> None:
        self.purgatory.unwatch(list(self.pending), self)
        future = self.future
        if future is None or future.done():  # whoever awaited it is gone
            return
        for _, waits in self.pending.values():
            for i, _ in waits:
                self.codes[i] = ErrorCode.request_timed_out
        self.pending.clear()
        future.set_result(self.codes)
        self._settle()

    def _settle(self) -> None:
        settled, self.settled = self.settled, None
        if settled is not None:
            settled(self.codes)
