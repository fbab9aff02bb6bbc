"""The replicas this broker hosts, and the role it plays for each: leader, follower, or
none (offline, or named leader under a registration that is not the current one).

Kafka's ``ReplicaManager`` + ``Partition``, driven by partition states read from the
coordination store (server/cluster_metadata.py) instead of LeaderAndIsr requests:

- **Leader** (the state names this broker under its current registration): the log's
  leader epoch cache gets the new epoch at the log end (KIP-101); produce and consumer
  fetches are served (``leaders``); every follower fetch moves that follower's log end
  and maybe the high watermark (cluster/replication.py decides; this module stores the
  ISR changes it asks for, conditionally on the state's version, and only then lets a
  shrink count); acks=all produces wait here until the high watermark passes them.
- **Follower**: a replica fetcher copies the leader's log (server/replica_fetcher.py),
  truncating first where the logs diverge.
- **None**: neither serves nor fetches.

A leader that loses its role (the controller moved it, or this broker's ZooKeeper
session expired) stops acknowledging at once: waiting acks=all produces fail with
NOT_LEADER_OR_FOLLOWER, and the group and transaction coordinators of internal
partitions resign. Becoming leader of an internal partition elects its coordinator.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from odradek.cluster import state as zk
from odradek.cluster.quota import ReplicationQuota, is_throttled
from odradek.cluster.replication import LeaderReplication
from odradek.cluster.state import PartitionState, TopicPartition
from odradek.coordinator import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC
from odradek.server.replica_fetcher import ReplicaFetcher
from odradek.server.store import BadVersionError, NoNodeError, StoreError

if TYPE_CHECKING:
    from odradek.server.cluster import ClusterNode
    from odradek.storage import Log

log = logging.getLogger(__name__)


class Role(enum.Enum):
    NONE = "none"
    LEADER = "leader"
    FOLLOWER = "follower"


class HostedPartition:
    """One partition replica on this broker."""

    __slots__ = (
        "leader_epoch",
        "leader_id",
        "log",
        "repl",
        "replicas",
        "role",
        "state",
        "tp",
        "waiters",
    )

    def __init__(self, tp: TopicPartition, lg: Log) -> None:
        self.tp = tp
        self.log = lg
        self.role = Role.NONE
        self.leader_id = -1
        self.leader_epoch = -1
        self.replicas: tuple[int, ...] = ()
        self.state: PartitionState | None = None
        self.repl: LeaderReplication | None = None  # while leader
        # acks=all produces waiting for the high watermark: (offset it must pass, future)
        self.waiters: list[tuple[int, asyncio.Future[int]]] = []


class ReplicaManager:
    """Every partition replica this broker hosts, and the fetchers that feed followers."""

    def __init__(self, node: ClusterNode) -> None:
        self.node = node
        self.broker = node.broker
        self.config = node.config
        self.metadata = node.metadata
        self.me = node.node_id
        self.partitions: dict[TopicPartition, HostedPartition] = {}
        self.leaders: dict[TopicPartition, HostedPartition] = {}  # valid leadership only
        self._fetchers: dict[tuple[int, int], ReplicaFetcher] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._isr_task: asyncio.Task[None] | None = None
        self.lag_ms: int = self.config["replica.lag.time.max.ms"]
        self.num_fetchers: int = self.config["num.replica.fetchers"]
        self.stopping = False
        self.started = False  # metadata events before start() are applied by it
        self._truncated = False  # a truncation since the checkpoints were last written
        # Replication throttles (KIP-73; cluster/quota.py): what this broker sends as a
        # leader to, and fetches as a follower for, throttled replicas out of sync.
        self.leader_quota = ReplicationQuota()
        self.follower_quota = ReplicationQuota()

    @property
    def clock(self) -> Any:
        return self.broker.clock

    # --- lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        """Take up the roles the store gives (metadata is loaded), drop logs of partitions
        no longer assigned here, and start the ISR check."""
        assert self.broker.logs is not None
        self.started = True
        self.broker_configs_changed()
        for tp in list(self.broker.logs.logs):
            if self.me not in self.metadata.replicas(*tp):
                log.info("%s-%d is not assigned to this broker any more: deleting its log",
                         *tp)
                self.broker.logs.delete_log(*tp)
        self.apply_all()
        self._isr_task = asyncio.get_running_loop().create_task(self._check_isr(),
                                                                name="isr-check")

    def stop_waiting(self) -> None:
        """The broker is stopping: acks=all produces waiting here are answered now
        (NOT_LEADER_OR_FOLLOWER: the client retries elsewhere) rather than holding the
        stop up until their timeout."""
        for part in list(self.leaders.values()):
            self._fail_waiters(part, ErrorCode.not_leader_or_follower)

    async def stop(self) -> None:
        self.stopping = True
        if self._isr_task is not None:
            self._isr_task.cancel()
        self.stop_waiting()
        fetchers = list(self._fetchers.values())
        self._fetchers.clear()
        await asyncio.gather(*(f.stop() for f in fetchers), return_exceptions=True)
        tasks = [t for t in (self._isr_task, *self._tasks) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # --- metadata listener -----------------------------------------------------------------------

    def partitions_changed(self, partitions: list[TopicPartition]) -> None:
        if self.started and not self.stopping:
            for tp in partitions:
                self.apply(tp)

    def brokers_changed(self) -> None:
        for fetcher in self._fetchers.values():
            fetcher.endpoint_changed()

    def topic_removed(self, topic: str, partitions: int) -> None:
        for tp in [tp for tp in self.partitions if tp[0] == topic]:
            self._remove(tp, delete_log=True)

    def topic_unusable(self, topic: str) -> None:
        """Nothing here: a topic known before keeps its last good assignment, and one
        that was never usable has no replicas on this broker."""

    def configs_changed(self, topic: str) -> None:
        if self.broker.logs is not None:  # else the logs open with the new configs
            self.broker.logs.update_config(topic, self.broker.log_config_for(topic))

    def broker_configs_changed(self) -> None:
        self.leader_quota.set_rate(self.node.setting("leader.replication.throttled.rate"))
        self.follower_quota.set_rate(
            self.node.setting("follower.replication.throttled.rate"))
        self.broker.dynamic_configs_changed()  # dynamic topic-config defaults

    # --- replication throttles ---------------------------------------------------------------

    def follower_throttled(self, tp: TopicPartition) -> bool:
        """Whether this follower's fetching of ``tp`` counts against (and waits for) the
        follower quota: listed in follower.replication.throttled.replicas for this
        broker, and not in the ISR (Kafka's ReplicaFetcherThread.shouldFollowerThrottle)."""
        if self.follower_quota.unlimited:
            return False
        part = self.partitions.get(tp)
        if part is None or not is_throttled(
                part.log.config.follower_replication_throttled_replicas, tp[1], self.me):
            return False
        state = self.metadata.states.get(tp)
        return state is None or self.me not in state.isr

    def leader_throttled(self, part: HostedPartition, replica: int) -> bool:
        """Whether sending ``part`` to follower ``replica`` counts against (and waits
        for) the leader quota: listed in leader.replication.throttled.replicas for this
        broker, and the follower not in the ISR (Kafka's shouldLeaderThrottle)."""
        if self.leader_quota.unlimited:
            return False
        repl = part.repl
        if repl is None or replica in repl.isr:
            return False
        spec = part.log.config.leader_replication_throttled_replicas
        return is_throttled(spec, part.tp[1], self.me)

    # --- roles ----------------------------------------------------------------------------------

    def apply_all(self) -> None:
        for topic, assignment in list(self.metadata.assignments.items()):
            for p in range(assignment.partitions):
                self.apply((topic, p))

    def apply(self, tp: TopicPartition) -> None:
        """Take up the role the store gives this broker for ``tp``."""
        if self.stopping or not self.started:
            return
        replicas = self.metadata.replicas(*tp)
        if self.me not in replicas:
            if tp in self.partitions:
                self._remove(tp, delete_log=True)
            return
        part = self.partitions.get(tp)
        if part is None:
            assert self.broker.logs is not None
            # With the topic's id: a log left by an earlier topic of this name (deleted
            # while this broker was away) is deleted, not followed or served.
            lg = self.broker.logs.get_or_create_log(
                *tp, topic_id=self.metadata.assignments[tp[0]].topic_id)
            lg.set_replicated(True)
            part = self.partitions[tp] = HostedPartition(tp, lg)
        if part.replicas != replicas:
            part.replicas = replicas
            if part.repl is not None:
                # A reassignment: the leader counts the new replica set at once (its
                # state, with a new epoch, may have arrived before the assignment).
                part.repl.set_replicas(replicas)
        state = self.metadata.states.get(tp)
        if state is None:
            self._to_none(part)
            return
        if state.leader == self.me and self.node.is_current_registration(
                state.leader_broker_epoch):
            if part.role is not Role.LEADER or part.leader_epoch != state.leader_epoch:
                self._become_leader(part, state)
            else:
                self._same_epoch_update(part, state)
        elif state.leader >= 0 and state.leader != self.me:
            if (part.role is not Role.FOLLOWER or part.leader_id != state.leader
                    or part.leader_epoch != state.leader_epoch):
                self._become_follower(part, state)
            else:
                part.state = state
        else:
            self._to_none(part)

    def _count_isr_change(self, part: HostedPartition, isr: tuple[int, ...] | frozenset[int]
                          ) -> None:
        """metrics.listen: ReplicaManager's IsrShrinksPerSec / IsrExpandsPerSec, for a
        partition this broker leads on from ``part.state`` to an ISR of ``isr``.

        Counted whoever wrote the change: this leader (a follower fell behind or caught
        up) or the controller (a broker died, bounced or is shutting down). Kafka counts
        only the leader's own writes; here the controller takes a stopped broker out of
        every ISR at once (a crashed one at its session's expiry), before the leader's
        lag check would, so that count would miss the commonest shrink."""
        stats = self.broker.stats
        old = part.state
        if stats is None or old is None or part.role is not Role.LEADER:
            return
        before, after = set(old.isr), set(isr)
        if before - after:
            stats.isr_shrinks += 1
        if after - before:
            stats.isr_expands += 1

    def _become_leader(self, part: HostedPartition, state: PartitionState) -> None:
        self._count_isr_change(part, state.isr)  # still the leader, at a new epoch
        self._stop_fetching(part)
        lg = part.log
        start = lg.assign_leader_epoch(state.leader_epoch)
        part.repl = LeaderReplication(
            self.me, part.replicas, state.isr, state.leader_epoch,
            epoch_start_offset=start, high_watermark=lg.high_watermark, now_ms=self.clock())
        part.role = Role.LEADER
        part.leader_id = self.me
        part.leader_epoch = state.leader_epoch
        part.state = state
        self.leaders[part.tp] = part
        log.info("%s-%d: leader at epoch %d from offset %d, ISR %s", *part.tp,
                 state.leader_epoch, start, sorted(state.isr),
                 extra=_context(part.tp, role="leader", leader=self.me,
                                leader_epoch=state.leader_epoch, isr=sorted(state.isr)))
        self._advance_hw(part)
        self.broker.purgatory.notify(part.tp)  # parked fetches see the new epoch
        # Also at a new epoch of the same leadership: the coordinator epoch moves on.
        self._coordinator(part.tp, elect=True)

    def _same_epoch_update(self, part: HostedPartition, state: PartitionState) -> None:
        """A state of our own epoch with a newer version: our own ISR write coming back,
        or one the store has and we missed (a write whose answer was lost)."""
        self._count_isr_change(part, state.isr)
        part.state = state
        repl = part.repl
        if repl is not None and repl.pending_isr is None:
            repl.isr_change_stored(frozenset(state.isr))
            self._advance_hw(part)

    def _become_follower(self, part: HostedPartition, state: PartitionState) -> None:
        if part.role is Role.LEADER:
            self._resign(part)
        self._stop_fetching(part)
        part.role = Role.FOLLOWER
        part.leader_id = state.leader
        part.leader_epoch = state.leader_epoch
        part.state = state
        self._fetcher(state.leader, part.tp).add(part.tp, state.leader_epoch)
        log.info("%s-%d: follower of broker %d at epoch %d", *part.tp, state.leader,
                 state.leader_epoch,
                 extra=_context(part.tp, role="follower", leader=state.leader,
                                leader_epoch=state.leader_epoch))

    def _to_none(self, part: HostedPartition) -> None:
        if part.role is Role.LEADER:
            self._resign(part)
        self._stop_fetching(part)
        if part.role is not Role.NONE:
            log.info("%s-%d: no role (leader %s)", *part.tp,
                     part.state.leader if part.state else "unknown",
                     extra=_context(part.tp, role="none"))
        part.role = Role.NONE
        part.leader_id = -1

    def _resign(self, part: HostedPartition) -> None:
        self.leaders.pop(part.tp, None)
        part.repl = None
        self._fail_waiters(part, ErrorCode.not_leader_or_follower)
        self._coordinator(part.tp, elect=False)
        self.broker.purgatory.notify(part.tp)  # parked fetches answer NOT_LEADER now
        log.info("%s-%d: no longer leader", *part.tp, extra=_context(part.tp, role="resigned"))

    def _remove(self, tp: TopicPartition, *, delete_log: bool) -> None:
        part = self.partitions.pop(tp, None)
        if part is None:
            return
        self._to_none(part)
        if delete_log and self.broker.logs is not None:
            self.broker.logs.delete_log(*tp)
            log.info("%s-%d: replica deleted", *tp)

    def session_lost(self) -> None:
        """Our registration is gone: every leadership ends until the controller elects
        this broker again under its next registration."""
        for part in list(self.leaders.values()):
            self._to_none(part)

    def _coordinator(self, tp: TopicPartition, *, elect: bool) -> None:
        runtime = (self.broker.groups if tp[0] == OFFSETS_TOPIC else
                   self.broker.transactions if tp[0] == TRANSACTION_STATE_TOPIC else None)
        if runtime is None:
            return
        try:
            if elect:
                runtime.elect(tp[1])
            else:
                runtime.resign(tp[1])
        except Exception:
            log.exception("%s-%d: the coordinator could not %s", *tp,
                          "load" if elect else "unload")

    # --- fetchers -----------------------------------------------------------------------------

    def _fetcher(self, leader: int, tp: TopicPartition) -> ReplicaFetcher:
        key = (leader, hash(tp) % self.num_fetchers)
        fetcher = self._fetchers.get(key)
        if fetcher is None:
            fetcher = self._fetchers[key] = ReplicaFetcher(self, leader, key[1])
        return fetcher

    def _stop_fetching(self, part: HostedPartition) -> None:
        if part.role is Role.FOLLOWER:
            fetcher = self._fetchers.get((part.leader_id, hash(part.tp) % self.num_fetchers))
            if fetcher is not None:
                fetcher.remove(part.tp)

    def log_of(self, tp: TopicPartition) -> Log | None:
        part = self.partitions.get(tp)
        return part.log if part is not None and part.role is Role.FOLLOWER else None

    def truncate(self, tp: TopicPartition, offset: int) -> None:
        part = self.partitions.get(tp)
        if part is not None:
            part.log.truncate_to(offset)
            self._truncated = True

    def truncate_fully(self, tp: TopicPartition, offset: int) -> None:
        part = self.partitions.get(tp)
        if part is not None:
            part.log.truncate_fully_and_start_at(offset)
            self._truncated = True

    def checkpoint_truncations(self) -> None:
        """After truncations: write the recovery-point (and log-start) checkpoints now, as
        Kafka's LogManager.truncateTo does. The checkpoint on disk may name a recovery
        point above the cut, and data appended there from the new leader is not synced
        yet: after a crash, recovery would trust it unvalidated."""
        if self._truncated and self.broker.logs is not None:
            self._truncated = False
            self.broker.logs.write_checkpoints()

    def follower_append(self, tp: TopicPartition, fetch_offset: int, records: bytes | None,
                        leader_hw: int, leader_start: int) -> None:
        """A fetch answer's data for a follower replica: append, take the leader's high
        watermark (capped at our end) and log start."""
        part = self.partitions.get(tp)
        if part is None or part.role is not Role.FOLLOWER:
            return
        lg = part.log
        if lg.log_end_offset != fetch_offset:
            return  # truncated meanwhile: this answer no longer continues the log
        if records:
            lg.append(records, assign_offsets=False)
        end = lg.log_end_offset
        # The high watermark first: the log start may not pass it (Kafka's
        # ReplicaFetcherThread.processPartitionData does the same order).
        old_hw = lg.high_watermark
        if lg.set_high_watermark(min(leader_hw, end)) != old_hw:
            # Consumers reading from this follower (KIP-392) may read further now.
            self.broker.purgatory.notify(tp)
        if leader_start > lg.log_start_offset:
            lg.delete_records_before(min(leader_start, lg.high_watermark))

    # --- the leader's side --------------------------------------------------------------------

    def leader_epoch(self, topic: str, partition: int) -> int:
        part = self.leaders.get((topic, partition))
        return part.leader_epoch if part is not None else -1

    def check_min_isr(self, topic: str, partition: int) -> int:
        """NOT_ENOUGH_REPLICAS if fewer replicas are in sync than the topic's
        min.insync.replicas (for acks=all, before the append), else 0."""
        part = self.leaders.get((topic, partition))
        if part is None or part.repl is None:
            return ErrorCode.not_leader_or_follower
        if len(part.repl.isr) < part.log.config.min_insync_replicas:
            return ErrorCode.not_enough_replicas
        return ErrorCode.none

    def appended(self, topic: str, partition: int) -> None:
        """After a leader append: the high watermark may move (an ISR of one)."""
        part = self.leaders.get((topic, partition))
        if part is not None:
            self._advance_hw(part)

    def wait_replicated(self, topic: str, partition: int, end: int
                        ) -> asyncio.Future[int] | None:
        """None if offsets below ``end`` are committed (and enough replicas are in
        sync), else a future of the Kafka error code an acks=all answer gets."""
        part = self.leaders.get((topic, partition))
        if part is None:
            return _done(ErrorCode.not_leader_or_follower)
        if part.log.high_watermark >= end:
            if self._enough_isr(part):
                return None
            return _done(ErrorCode.not_enough_replicas_after_append)
        fut = asyncio.get_running_loop().create_future()
        part.waiters.append((end, fut))
        return fut

    def _enough_isr(self, part: HostedPartition) -> bool:
        repl = part.repl
        return repl is not None and len(repl.isr) >= part.log.config.min_insync_replicas

    def _advance_hw(self, part: HostedPartition) -> None:
        repl = part.repl
        if repl is None:
            return
        lg = part.log
        if repl.advance_high_watermark(lg.log_end_offset):
            lg.set_high_watermark(repl.high_watermark)
            self._hw_moved(part)

    def _hw_moved(self, part: HostedPartition) -> None:
        hw = part.log.high_watermark
        if part.waiters:
            code = (ErrorCode.none if self._enough_isr(part)
                    else ErrorCode.not_enough_replicas_after_append)
            keep = []
            for end, fut in part.waiters:
                if fut.done():
                    continue
                if hw >= end:
                    fut.set_result(code)
                else:
                    keep.append((end, fut))
            part.waiters = keep
        self.broker.purgatory.notify(part.tp)  # consumers may read further now

    def _fail_waiters(self, part: HostedPartition, code: int) -> None:
        waiters, part.waiters = part.waiters, []
        for _, fut in waiters:
            if not fut.done():
                fut.set_result(code)

    def follower_fetched(self, part: HostedPartition, replica: int, fetch_offset: int,
                         leader_end: int, now_ms: int) -> None:
        """A follower fetched from ``fetch_offset`` at ``now_ms`` while our log ended at
        ``leader_end``."""
        repl = part.repl
        if repl is None:
            return
        state = repl.followers.get(replica)
        moved = state is None or state.log_end_offset != fetch_offset
        repl.update_follower(replica, fetch_offset, now_ms, leader_end)
        if moved:
            # Only a follower's new log end can move the high watermark (a fetch of an
            # idle partition, most of them on a quiet follower, just keeps it caught up).
            self._advance_hw(part)
        # A broker shutting down stays out (KIP-841): the controller has just removed it
        # from the ISR, and acks=all must not wait for a broker about to go.
        if replica not in repl.isr and replica not in self.metadata.shutting_down:
            grown = repl.expansion(replica)
            if grown is not None:
                self._change_isr(part, grown, f"broker {replica} caught up")

    # --- ISR changes ----------------------------------------------------------------------------

    async def _check_isr(self) -> None:
        """Kafka's isr-expiration task: every half lag period, drop lagging followers."""
        interval = max(self.lag_ms / 2000, 0.05)
        while True:
            await asyncio.sleep(interval)
            now = self.clock()
            for part in list(self.leaders.values()):
                repl = part.repl
                if repl is None:
                    continue
                shrunk = repl.shrink(now, self.lag_ms)
                if shrunk is not None:
                    lagging = sorted(repl.isr - shrunk)
                    self._change_isr(part, shrunk, f"broker(s) {lagging} fell behind")

    def _change_isr(self, part: HostedPartition, isr: frozenset[int], why: str) -> None:
        repl = part.repl
        state = part.state
        if repl is None or state is None:
            return
        repl.begin_isr_change(isr)
        # A pending expansion counts for the high watermark at once (maximal ISR).
        self._advance_hw(part)
        self._spawn(self._store_isr(part, repl, state, isr, why))

    async def _store_isr(self, part: HostedPartition, repl: LeaderReplication,
                         state: PartitionState, isr: frozenset[int], why: str) -> None:
        tp = part.tp
        new = state.changed(isr=tuple(sorted(isr)))
        try:
            version = await self.node.store.set(zk.state_path(*tp), new.to_json(), state.version)
        except BadVersionError:
            # The controller changed the state (a new epoch is on its way to us), or we
            # missed our own earlier write: re-read, and let apply() sort it out.
            repl.isr_change_failed()
            await self._reread(tp)
            return
        except (StoreError, NoNodeError) as exc:
            repl.isr_change_failed()
            log.warning("%s-%d: could not store ISR %s (%s): %s", *tp, sorted(isr), why, exc,
                        extra=_context(tp, isr=sorted(isr)))
            return
        if part.repl is not repl:
            return  # resigned meanwhile
        stored = new.changed(version=version)
        self._count_isr_change(part, isr)
        part.state = stored
        repl.isr_change_stored(isr)
        log.info("%s-%d: ISR %s -> %s (%s)", *tp, sorted(state.isr), sorted(isr), why,
                 extra=_context(tp, leader=self.me, leader_epoch=state.leader_epoch,
                                isr=sorted(isr), previous_isr=sorted(state.isr)))
        self.metadata.record_state(tp, stored)
        self._advance_hw(part)

    async def _reread(self, tp: TopicPartition) -> None:
        try:
            data, version = await self.node.store.get(zk.state_path(*tp))
        except StoreError:
            return
        try:
            state = PartitionState.from_json(data, version)
        except zk.ZnodeFormatError as exc:
            log.error("%s-%d: ignoring %s: %s", *tp, zk.state_path(*tp), exc)
            return
        self.metadata.record_state(tp, state)

    # --- for the fetch handler ------------------------------------------------------------------

    def leading(self, topic: str, partition: int) -> HostedPartition | None:
        return self.leaders.get((topic, partition))

    def following(self, topic: str, partition: int) -> HostedPartition | None:
        """The partition if this broker follows it: consumers may read it here up to
        the high watermark it has from the leader (fetch from follower, KIP-392)."""
        part = self.partitions.get((topic, partition))
        return part if part is not None and part.role is Role.FOLLOWER else None


def _context(tp: TopicPartition, **fields: Any) -> dict[str, Any]:
    """A partition's fields for a log record's ``extra=`` (log.format=json)."""
    return {"topic": tp[0], "partition": tp[1], **fields}


def _done(code: int) -> asyncio.Future[int]:
    fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    fut.set_result(code)
    return fut
