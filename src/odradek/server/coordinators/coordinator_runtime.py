"""What the group and the transaction coordinators' runtimes share: one coordinator per
partition of an internal topic, and the plumbing that makes them act.

Both pure coordinators (``odradek.coordinator``) decide and return effects whose
responses are keyed by request tokens; both keep their state in a compacted internal
topic, and both have timers (``next_deadline`` / ``tick``). As in Kafka, a key (group id,
transactional id) lives in one partition of that topic (``partition_for``) and is
coordinated by the broker that leads the partition: this runtime keeps one coordinator
per partition it coordinates (``coordinators``), each loaded from that partition's log
alone. ``CoordinatorRuntime`` owns that common part:

- which partitions are coordinated here: ``elect(partition)`` replays the partition's
  log into a fresh coordinator and acts on its ``finish_load``; ``resign(partition)``
  drops it, answering the requests waiting on it NOT_COORDINATOR. The topology calls
  them (``start_replicas``): a single node elects every partition at once
  (``_elect_all``), a cluster's replica manager calls both as the leadership of the
  internal topic's partitions moves;
- routing: ``call(key, operation)`` runs ``operation(coordinator, token, now_ms)`` on
  the coordinator of the key's partition, ``coordinator_for(key)`` hands it out for
  reads, and both raise NOT_COORDINATOR when that partition is not coordinated here;
- a token per request (unique across partitions) and a future per token: a request
  whose answer comes from a later operation or a timer is an ``await`` on its future;
- releasing responses once the records they depend on are appended (``_release``), or
  the append's error instead; in a cluster, once they are replicated too
  (``_replicated``, ``_release_when_replicated``) — see "Replication" below;
- the internal topic on a single node: created if missing with its partition count
  fixed at creation (``_create_topic``), its logs (``_log``), and reading one partition
  in log order for a replay (``_batches``);
- one timer task serving every loaded coordinator (it sleeps until the earliest of
  their ``next_deadline()`` and ticks the due ones), re-armed by every operation, and
  ``stop``, which answers every waiting request NOT_COORDINATOR.

Replication (``broker.topology``, server/topology.py: a single node's leader epoch is
always 0 and its appends are committed at once, so none of the waiting below happens
there). Records are appended with the partition's leader epoch
(``topology.leader_epoch``); after the append,
``topology.wait_replicated(topic, partition, end)`` says whether the records up
to ``end`` are committed (None) or hands an awaitable of a Kafka error code. The
append stays synchronous, in the same step as the decision, so operations never
interleave with their appends; only the answers wait, on a task the runtime owns
(``_spawn``; cancelled at ``resign`` of its partition and at ``stop``, and with it the
awaitable). An error maps as Kafka's GroupMetadataManager maps append errors:
NOT_LEADER_OR_FOLLOWER becomes NOT_COORDINATOR, anything else
COORDINATOR_NOT_AVAILABLE. The runtime remembers, per partition, the end of appends not
yet known to be replicated (``_unconfirmed``), so that the transaction runtime can hold
answers that append nothing but may reveal such state.

What differs stays in ``server/coordinators/groups.py`` and
``server/coordinators/transactions.py``: the coordinator, what a record is, how an
operation's effects are appended (transactional offset batches, markers) and how a replay
feeds the coordinator.
"""

from __future__ import annotations

import abc
import asyncio
import itertools
import logging
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Iterator
from typing import TYPE_CHECKING, Any, Protocol

from kio.schema.errors import ErrorCode

from odradek.records import builder
from odradek.server.metadata import MetadataStore
from odradek.server.tasks import TaskSet

if TYPE_CHECKING:
    from odradek.server.broker import Broker
    from odradek.storage import Log

log = logging.getLogger(__name__)


class KeyedRecord(Protocol):
    """A record a coordinator's effects ask to append (a group's ``Record``, a
    transactional id's ``TxnRecord``): its key, and its value (None: a tombstone)."""

    @property
    def key(self) -> bytes: ...
    @property
    def value(self) -> bytes | None: ...

# Topic-level settings of the internal topics (__consumer_offsets, __transaction_state,
# __share_group_state), as Kafka creates them: compacted, batches kept as written.
INTERNAL_TOPIC_CONFIG = {"cleanup.policy": "compact", "compression.type": "producer"}
# A wait for a partition's records to be replicated: the awaitable the topology
# handed out (of a Kafka error code) and the offset it waits for.
Replication = tuple[Awaitable[int], int]
# Bytes read per step when replaying an internal topic's partition (at least one batch is
# always returned, however large).
REPLAY_READ_BYTES = 1 << 20


class CoordinatorUnavailable(Exception):
    """The coordinator cannot answer this request; ``error_code`` is the Kafka error the
    client gets (it rediscovers the coordinator and retries)."""

    def __init__(self, error_code: int, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code


def replication_failure(code: int, what: str) -> CoordinatorUnavailable | None:
    """What the requests depending on a replicated append get for ``code`` (None for
    0: their answers). Kafka's GroupMetadataManager maps NOT_LEADER_OR_FOLLOWER to
    NOT_COORDINATOR and the other append errors to COORDINATOR_NOT_AVAILABLE."""
    if code == 0:
        return None
    if code == ErrorCode.not_leader_or_follower:
        return CoordinatorUnavailable(ErrorCode.not_coordinator,
                                      f"{what}: this broker no longer leads its partition")
    return CoordinatorUnavailable(ErrorCode.coordinator_not_available,
                                  f"{what} could not be replicated (error {code})")


class CoordinatorRuntime(abc.ABC):
    """The coordinators of one internal topic's partitions, their request plumbing and
    timer. Subclasses set ``topic`` and implement ``partition_for`` (key ->
    partition), ``_new_coordinator`` and ``_replay`` (building one partition's
    coordinator), ``_finish_load`` and ``_act``. A coordinator is anything with
    ``next_deadline()`` and ``tick(now_ms)``."""

    topic: str

    def __init__(self, broker: Broker, num_partitions: int) -> None:
        self.broker = broker
        self.clock: Callable[[], int] = broker.clock
        self.num_partitions = num_partitions
        self.closed = False
        # partition -> its coordinator, for the partitions coordinated here.
        self.coordinators: dict[int, Any] = {}
        # partition -> the leader epoch it was elected in (a re-election in a newer epoch
        # reloads it; one in the same epoch is a no-op).
        self._elected_epoch: dict[int, int] = {}
        self._tokens = itertools.count(1)
        # token -> (partition, future): resign fails the futures of its partition.
        self._waiting: dict[int, tuple[int, asyncio.Future[Any]]] = {}
        # Tasks the runtime started (deferred releases, marker writes) -> their partition.
        self._tasks = TaskSet(f"{self.topic} runtime")
        # partition -> the end of its appends not yet known to be replicated (a cluster).
        self._unconfirmed: dict[int, int] = {}
        self._rearm = asyncio.Event()
        self._timer: asyncio.Task[None] | None = None

    # --- what subclasses provide -----------------------------------------------------

    @abc.abstractmethod
    def partition_for(self, key: str) -> int:
        """The internal topic's partition holding ``key``."""

    @abc.abstractmethod
    def _new_coordinator(self, partition: int, leader_epoch: int) -> Any:
        """An empty coordinator for ``partition``."""

    @abc.abstractmethod
    def _replay(self, partition: int, coordinator: Any) -> int:
        """Feed the partition's records, in log order, to ``coordinator``; the count."""

    @abc.abstractmethod
    def _finish_load(self, coordinator: Any) -> Any:
        """The coordinator's effects once its replay is over."""

    @abc.abstractmethod
    def _act(self, partition: int, fx: Any) -> None:
        """Carry out the effects of ``partition``'s coordinator: append its records, then
        ``_release`` the responses (or ``_release_when_replicated``), and set ``_rearm``
        so the timer looks at the next deadline."""

    # --- lifecycle ---------------------------------------------------------------------

    def _start_timer(self, name: str) -> None:
        self._timer = asyncio.get_running_loop().create_task(self._run_timers(), name=name)

    def _elect_all(self) -> tuple[int, int]:
        """A single node coordinates every partition: elect each (keys loaded, records
        replayed)."""
        keys = records = 0
        for partition in range(self.num_partitions):
            records += self._elect(partition) or 0
            keys += self._size(self.coordinators[partition])
        return keys, records

    @staticmethod
    def _size(coordinator: Any) -> int:
        """How many keys a coordinator holds (for the log)."""
        return 0

    async def stop(self) -> None:
        """Stop the timers and the runtime's tasks and answer every waiting request with
        NOT_COORDINATOR (as Kafka does when a coordinator resigns), so that no request
        holds the broker's shutdown up."""
        self.closed = True
        timer, self._timer = self._timer, None
        await self._tasks.close(timer)
        self._fail_waiting(None, "the broker is shutting down")

    # --- partitions coordinated here --------------------------------------------------

    def owns(self, partition: int) -> bool:
        """Whether this broker coordinates ``partition`` (it is loaded here)."""
        return partition in self.coordinators

    def elect(self, partition: int) -> None:
        """Become the coordinator of ``partition``: replay its log into a new coordinator
        and act on ``finish_load`` (fresh sessions, markers of prepared transactions).
        Synchronous, on the event loop: no request of the partition is served before it
        is loaded. Electing a partition already coordinated here in the same leader
        epoch changes nothing; in a newer epoch it is reloaded."""
        if self.closed:
            return
        count = self.partition_count()
        if not 0 <= partition < count:
            raise ValueError(f"{self.topic} has no partition {partition} ({count} partitions)")
        records = self._elect(partition)
        if records is not None:
            log.info("coordinating %s-%d: %d key(s) from %d record(s)", self.topic,
                     partition, self._size(self.coordinators[partition]), records)

    def _elect(self, partition: int) -> int | None:
        """Load ``partition``; the records replayed (None: it was loaded already)."""
        epoch = self._leader_epoch(partition)
        if partition in self.coordinators:
            if self._elected_epoch.get(partition) == epoch:
                return None
            self.resign(partition)
        coordinator = self._new_coordinator(partition, epoch)
        records = self._replay(partition, coordinator)
        # Registered before acting: finish_load's effects (markers written at once, on a
        # single node) act on the coordinator of their partition.
        self.coordinators[partition] = coordinator
        self._elected_epoch[partition] = epoch
        self._act(partition, self._finish_load(coordinator))
        self._rearm.set()
        return records

    def resign(self, partition: int) -> None:
        """Stop coordinating ``partition``: its coordinator (and with it its timers) is
        dropped, every request waiting on it is answered NOT_COORDINATOR (the client
        finds the new coordinator and retries), and the runtime's tasks of the
        partition (answers waiting for replication, markers being written) are
        cancelled: the next coordinator rebuilds what they would have done from the log
        (prepared transactions' markers are sent again at its load)."""
        if self.coordinators.pop(partition, None) is None:
            return
        del self._elected_epoch[partition]
        self._unconfirmed.pop(partition, None)
        self._tasks.cancel(partition)
        self._fail_waiting(partition, f"this broker no longer coordinates "
                                      f"{self.topic}-{partition}")
        self._rearm.set()
        log.info("resigned as coordinator of %s-%d", self.topic, partition)

    def coordinator_for(self, key: str) -> Any:
        """The coordinator of ``key``'s partition; NOT_COORDINATOR if it is not here."""
        return self._coordinator_of(self.partition_for(key), key)

    def _coordinator_of(self, partition: int, key: str) -> Any:
        if self.closed:
            raise CoordinatorUnavailable(ErrorCode.not_coordinator, "the broker is shutting down")
        coordinator = self.coordinators.get(partition)
        if coordinator is None:
            raise CoordinatorUnavailable(
                ErrorCode.not_coordinator, f"{key!r} is coordinated by the leader of "
                                 f"{self.topic}-{partition}, not by this broker")
        return coordinator

    def _fail_waiting(self, partition: int | None, message: str) -> None:
        """Answer NOT_COORDINATOR to the requests waiting on ``partition`` (None: all)."""
        for of, future in self._waiting.values():
            if (partition is None or of == partition) and not future.done():
                future.set_exception(CoordinatorUnavailable(ErrorCode.not_coordinator, message))

    # --- the internal topic ------------------------------------------------------------

    def _create_topic(self, configs: dict[str, str], setting: str) -> None:
        """Single node: create the internal topic with ``num_partitions`` (named by
        ``setting``) if it does not exist, adopt the partition count it has if it does,
        open its logs. (In a cluster the replica manager creates it.)"""
        broker = self.broker
        assert isinstance(broker.metadata, MetadataStore) and broker.logs is not None
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
            broker.logs.get_or_create_log(self.topic, partition, topic_id=topic.topic_id)

    def partition_count(self) -> int:
        """The internal topic's partition count, which ``partition_for`` divides by. It
        is fixed when the topic is created; where the topology knows it
        (``internal_topic_partition_count``: a cluster's metadata, as Kafka reads it from
        ZooKeeper) that count, whatever the setting says now; else the runtime's own (a
        single node's: the setting, then the count ``_create_topic`` found)."""
        count = self.broker.topology.internal_topic_partition_count(self.topic)
        if count is not None:
            self.num_partitions = count
        return self.num_partitions

    def _log(self, partition: int) -> Log:
        assert self.broker.logs is not None
        lg = self.broker.logs.get_log(self.topic, partition)
        assert lg is not None, f"{self.topic}-{partition} has no log"
        return lg

    def _append_records(self, partition: int, keyed: Iterable[KeyedRecord]) -> int:
        """One batch of ``keyed`` records in ``partition``, stamped now and with the
        partition's leader epoch, waking fetches of it; the offset after it."""
        now = self.clock()
        records = [builder.Record(i, now, r.key, r.value) for i, r in enumerate(keyed)]
        info = self._log(partition).append(builder.build_batch(records),
                                           leader_epoch=self._leader_epoch(partition))
        self.broker.purgatory.notify((self.topic, partition))
        return info.last_offset + 1

    def _batches(self, partition: int) -> Iterator[builder.DecodedBatch]:
        """Every batch of this partition of the internal topic, in log order (none if
        the topic does not exist yet: a single node's ``__transaction_state`` before its
        first use)."""
        assert self.broker.logs is not None
        lg = self.broker.logs.get_log(self.topic, partition)
        if lg is None:
            return
        offset = lg.log_start_offset
        while offset < lg.log_end_offset:
            region = lg.read(offset, REPLAY_READ_BYTES).region
            if region is None:
                break
            for batch in builder.decode_batches(region.read()):
                offset = batch.header.next_offset
                yield batch

    # --- replication hooks (the topology's) ---------------------------------------------

    def _keyed_records(self, partition: int) -> Iterator[builder.Record]:
        """The records with a key of the partition's data batches, in log order (what the
        coordinators of __transaction_state and __share_group_state replay; control
        batches are theirs to skip)."""
        for batch in self._batches(partition):
            if batch.header.is_control:
                continue
            for record in batch.records:
                if record.key is not None:
                    yield record

    def _leader_epoch(self, partition: int) -> int:
        """The leader epoch to stamp on this partition's appends (the topology's: a
        single node's is always 0)."""
        return self.broker.topology.leader_epoch(self.topic, partition)

    def _replicated(self, partition: int, end: int | None) -> Replication | None:
        """None if the records of ``partition`` below ``end`` are committed (always, on a
        single node), else the wait for them: an awaitable of a Kafka error code (0:
        replicated) and ``end``; ``_replication_code`` awaits it.

        ``end`` None (an operation that appended nothing) waits for the last append of
        the partition not yet known to be replicated, if any: the answer may reveal
        the state that append stored. (The transaction runtime asks this: a client that
        retries after COORDINATOR_NOT_AVAILABLE, a replication that failed, may be
        answered from that state without a record of its own — an AddPartitionsToTxn
        for partitions already added — and must not hear of it before it is
        committed.)"""
        if end is None:
            end = self._unconfirmed.get(partition)
            if end is None:
                return None
        wait = self.broker.topology.wait_replicated(self.topic, partition, end)
        if wait is None:
            # (Tested first: a single node, whose appends are committed at once, never
            # has anything unconfirmed, and its commits pay for no more calls.)
            if self._unconfirmed:
                self._confirmed(partition, end)
            return None
        self._unconfirmed[partition] = max(end, self._unconfirmed.get(partition, end))
        return wait, end

    def _confirmed(self, partition: int, end: int) -> None:
        """The records of ``partition`` below ``end`` are committed."""
        if self._unconfirmed.get(partition, end + 1) <= end:
            del self._unconfirmed[partition]

    async def _replication_code(self, partition: int, replication: Replication) -> int:
        """The error code a replication wait ends with (0: replicated); a wait that
        fails is an unavailable coordinator (the client retries)."""
        wait, end = replication
        try:
            code = int(await wait)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("waiting for the replication of %s-%d failed", self.topic,
                          partition)
            code = ErrorCode.coordinator_not_available
        if code == 0:
            self._confirmed(partition, end)
        return code

    def _release_when_replicated(self, partition: int, replication: Replication,
                                 responses: Iterable[tuple[int, Any]], what: str) -> None:
        """Release ``responses`` once the replication completes: as they are if the
        records are replicated, else the error it maps to (``replication_failure``)."""
        responses = list(responses)
        if not responses:
            # Nobody waits (a timer's records, a deleted topic's tombstones): nothing to
            # hold back. The wait is dropped unstarted (the end stays unconfirmed, for
            # later answers to wait on).
            wait = replication[0]
            if isinstance(wait, Coroutine):
                wait.close()
            return

        async def release() -> None:
            code = await self._replication_code(partition, replication)
            self._release(responses, replication_failure(code, what))

        self._spawn(partition, release(), f"{self.topic}-{partition}-replication")

    def _spawn(self, partition: int, coro: Coroutine[Any, Any, None], name: str) -> None:
        """Run ``coro`` as a task of the runtime, on behalf of ``partition`` (cancelled
        if the partition resigns, and at ``stop``)."""
        self._tasks.spawn(coro, name=name, key=partition)

    # --- operations --------------------------------------------------------------------

    async def call(self, key: str, operation: Callable[[Any, int, int], Any]) -> Any:
        """Run ``operation(coordinator, token, now_ms)`` (a coordinator method bound to a
        request's arguments) on the coordinator of ``key``'s partition, act on its
        effects, and wait for the answer to ``token`` (at once, or when a later
        operation or timer produces it). NOT_COORDINATOR if the partition is not
        coordinated here, or stops being so while the request waits."""
        partition = self.partition_for(key)
        coordinator = self._coordinator_of(partition, key)
        token = next(self._tokens)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiting[token] = (partition, future)
        try:
            self._act(partition, operation(coordinator, token, self.clock()))
            return await future
        finally:
            # A cancelled wait (the client went away, the broker stops) leaves the token
            # parked in the coordinator; its answer, when it comes, is dropped.
            del self._waiting[token]

    def _release(self, responses: Iterable[tuple[int, Any]],
                 failure: CoordinatorUnavailable | None) -> None:
        """Answer the waiting requests: their responses, or ``failure`` when the append
        those responses depend on failed."""
        for token, response in responses:
            waiting = self._waiting.get(token)
            if waiting is None or waiting[1].done():
                continue
            if failure is not None:
                waiting[1].set_exception(failure)
            else:
                waiting[1].set_result(response)

    async def _run_timers(self) -> None:
        """One task for every coordinator: tick those due, then sleep until the earliest
        deadline of any (or until an operation or an election re-arms it)."""
        while True:
            self._rearm.clear()
            now = self.clock()
            earliest: int | None = None
            ticked = failed = False
            for partition, coordinator in list(self.coordinators.items()):
                if self.coordinators.get(partition) is not coordinator:
                    continue  # resigned by an earlier tick's effects
                # (mypy narrows it to the get()'s "| None" above; no value is None)
                assert coordinator is not None
                deadline = coordinator.next_deadline()
                if deadline is None:
                    continue
                if deadline > now:
                    earliest = deadline if earliest is None else min(earliest, deadline)
                    continue
                ticked = True
                try:
                    self._act(partition, coordinator.tick(now))
                except Exception:
                    # A bug in a timer must not stop every later timer.
                    log.exception("%s-%d coordinator timer failed", self.topic, partition)
                    failed = True
            if failed:
                await asyncio.sleep(1)
            if ticked:
                continue  # the ticks may have set new deadlines
            timeout = None if earliest is None else (earliest - now) / 1000
            try:
                async with asyncio.timeout(timeout):
                    await self._rearm.wait()
            except TimeoutError:
                pass
