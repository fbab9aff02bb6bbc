"""What the group and the transaction coordinators' runtimes share.

Both pure coordinators (``odradek.coordinator``) decide and return effects whose
responses are keyed by request tokens; both keep their state in a compacted internal
topic replayed before the broker listens, and both have timers (``next_deadline`` /
``tick``). ``CoordinatorRuntime`` owns that common part:

- a token per request and a future per token (``call``): a request whose answer comes
  from a later operation or a timer is an ``await`` on its future;
- releasing responses once the records they depend on are appended (``_release``), or
  the append's error instead;
- the internal topic: created if missing with its partition count fixed at creation
  (``_create_topic``), its logs (``_log``), and reading it in log order for a replay
  (``_batches``);
- one timer task calling ``tick(now)`` at ``next_deadline()``, re-armed by every
  operation, and ``stop``, which answers every waiting request NOT_COORDINATOR.

What differs stays in ``server/groups.py`` and ``server/transactions.py``: what a record
is, how an operation's effects are appended (transactional offset batches, markers) and
how a replay feeds the coordinator.
"""

from __future__ import annotations

import abc
import asyncio
import itertools
import logging
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from odradek.records import builder

if TYPE_CHECKING:
    from odradek.server.broker import Broker
    from odradek.storage import Log

log = logging.getLogger(__name__)

# Kafka's errors for "ask again, maybe elsewhere": the coordinator is shutting down, or
# an append of its state failed.
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
# Bytes read per step when replaying an internal topic's partition (at least one batch is
# always returned, however large).
REPLAY_READ_BYTES = 1 << 20


class CoordinatorUnavailable(Exception):
    """The coordinator cannot answer this request; ``error_code`` is the Kafka error the
    client gets (it rediscovers the coordinator and retries)."""

    def __init__(self, error_code: int, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code


class CoordinatorRuntime(abc.ABC):
    """The request plumbing, timer and internal topic of one coordinator. Subclasses set
    ``topic`` (the internal topic) and ``coordinator`` (anything with ``next_deadline()``
    and ``tick(now_ms)``), and implement ``_act``."""

    topic: str
    coordinator: Any

    def __init__(self, broker: Broker, num_partitions: int) -> None:
        self.broker = broker
        self.clock: Callable[[], int] = broker.clock
        self.num_partitions = num_partitions
        self.closed = False
        self._tokens = itertools.count(1)
        self._waiting: dict[int, asyncio.Future[Any]] = {}
        self._rearm = asyncio.Event()
        self._timer: asyncio.Task[None] | None = None

    # --- lifecycle ---------------------------------------------------------------------

    def _start_timer(self, name: str) -> None:
        self._timer = asyncio.get_running_loop().create_task(self._run_timers(), name=name)

    async def stop(self) -> None:
        """Stop the timers and answer every waiting request with NOT_COORDINATOR (as
        Kafka does when a coordinator resigns), so that no request holds the broker's
        shutdown up."""
        self.closed = True
        timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()
            await asyncio.gather(timer, return_exceptions=True)
        for future in self._waiting.values():
            if not future.done():
                future.set_exception(CoordinatorUnavailable(
                    NOT_COORDINATOR, "the broker is shutting down"))

    # --- the internal topic ------------------------------------------------------------

    def _create_topic(self, configs: dict[str, str], setting: str) -> None:
        """Create the internal topic with ``num_partitions`` (named by ``setting``) if it
        does not exist, adopt the partition count it has if it does, open its logs."""
        broker = self.broker
        assert broker.metadata is not None and broker.logs is not None
        topic = broker.metadata.topics.get(self.topic)
        if topic is None:
            topic = broker.metadata.create_topic(self.topic, self.num_partitions, configs,
                                                 internal=True)
            log.info("created %s with %d partitions", self.topic, topic.partitions)
        elif topic.partitions != self.num_partitions:
            # Keys live where partition_for puts them: the count is fixed at creation.
            log.warning("%s has %d partitions; %s=%d is ignored", self.topic,
                        topic.partitions, setting, self.num_partitions)
        self.num_partitions = topic.partitions
        for partition in range(topic.partitions):
            broker.logs.get_or_create_log(self.topic, partition)

    def _log(self, partition: int) -> Log:
        assert self.broker.logs is not None
        lg = self.broker.logs.get_log(self.topic, partition)
        assert lg is not None, f"{self.topic}-{partition} has no log"
        return lg

    def _batches(self, partitions: Iterable[int]) -> Iterator[tuple[int, builder.DecodedBatch]]:
        """Every batch of these partitions of the internal topic, in log order."""
        for partition in partitions:
            lg = self._log(partition)
            offset = lg.log_start_offset
            while offset < lg.log_end_offset:
                region = lg.read(offset, REPLAY_READ_BYTES).region
                if region is None:
                    break
                for batch in builder.decode_batches(region.read()):
                    offset = batch.header.next_offset
                    yield partition, batch

    # --- operations --------------------------------------------------------------------

    async def call(self, operation: Callable[[int, int], Any]) -> Any:
        """Run ``operation(token, now_ms)`` (a coordinator method bound to a request's
        arguments), act on its effects, and wait for the answer to ``token`` (at once,
        or when a later operation or timer produces it)."""
        if self.closed:
            raise CoordinatorUnavailable(NOT_COORDINATOR, "the broker is shutting down")
        token = next(self._tokens)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiting[token] = future
        try:
            self._act(operation(token, self.clock()))
            return await future
        finally:
            # A cancelled wait (the client went away, the broker stops) leaves the token
            # parked in the coordinator; its answer, when it comes, is dropped.
            del self._waiting[token]

    @abc.abstractmethod
    def _act(self, fx: Any) -> None:
        """Carry out a coordinator's effects: append its records, then ``_release`` the
        responses, and set ``_rearm`` so the timer looks at the next deadline."""

    def _release(self, responses: Iterable[tuple[int, Any]],
                 failure: CoordinatorUnavailable | None) -> None:
        """Answer the waiting requests: their responses, or ``failure`` when the append
        those responses depend on failed."""
        for token, response in responses:
            future = self._waiting.get(token)
            if future is None or future.done():
                continue
            if failure is not None:
                future.set_exception(failure)
            else:
                future.set_result(response)

    async def _run_timers(self) -> None:
        while True:
            self._rearm.clear()
            deadline = self.coordinator.next_deadline()
            now = self.clock()
            if deadline is not None and deadline <= now:
                try:
                    self._act(self.coordinator.tick(now))
                except Exception:
                    # A bug in a timer must not stop every later timer.
                    log.exception("%s coordinator timer failed", self.topic)
                    await asyncio.sleep(1)
                continue
            timeout = None if deadline is None else (deadline - now) / 1000
            try:
                async with asyncio.timeout(timeout):
                    await self._rearm.wait()
            except TimeoutError:
                pass
